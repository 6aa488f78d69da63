# shellcheck shell=bash
# ahp command detection for interactive bash (written for ahp; see ahp/shell/__init__.py).
#
# Started as `bash --init-file <launch file> -i` (the launch file sources this one), so bash reads
# it instead of ~/.bashrc.
# We load the user's own startup files first, then install hooks that print OSC 633:
#
#   at each prompt  P;Cwd=<dir>;<nonce>  D;[status];<nonce>  then PS1 is wrapped as  A <prompt> B
#   per command     E;<command line>;<nonce>  C;<nonce>   (right before the command runs)
# (The cwd comes before D, so that whoever sees a command's end already has the cwd it left.)
# (Every mark but A and B carries the nonce: program output can print marks too, and only signed
# ones move a command's boundaries or the cwd. A and B stay bare: PS1 may be exported.)
#
# How the hooks work (bash >= 4.4):
#   * preexec is PS0. bash expands PS0 exactly once per command line read, after the line is
#     complete and before anything runs, also for lines the DEBUG trap never sees, such as
#     `(cd x && make)`; never for an empty line, a line with a syntax error or a Ctrl-C at the
#     prompt. A command substitution in PS0 prints E and C; an arithmetic side effect in PS0
#     records in this shell that it did (so D carries the status: the line ran).
#     The command line comes from `history 1`. A line that did not make it into history
#     (HISTCONTROL=ignorespace/ignoredups, HISTIGNORE, `set +o history`: HISTCMD did not move)
#     is reported with the newest history entry only when nothing but ignoredups/erasedups can
#     have kept it out (it is then a repeat of that entry), else with an empty command line: it
#     still starts and ends like any other. (The DEBUG trap knows only the first simple command
#     run in this shell, and runs too late, or never, for a line that starts with a subshell:
#     `(cd x && make)`, `! (exit 3)`, `time (...)`.)
#     With `shopt -u promptvars` PS0 runs no code but its backslash escapes are still decoded:
#     PS0 then ends with a literal C mark (no E: the command line is empty), and D always
#     carries the status (a D with no command started is ignored by the host).
#   * precmd is split in two PROMPT_COMMAND parts: __ahp_pc_begin runs first (prints P, then D
#     with the exit status, before any output of the user's PROMPT_COMMAND) and __ahp_pc_end runs
#     last (after the user's PROMPT_COMMAND, which may set PS1 or even cd): it prints P again if
#     the cwd changed since, re-wraps PS1 if it changed and repairs our hooks if the user
#     replaced them. On bash >= 5.1 PROMPT_COMMAND is an
#     array: element 0 is "__ahp_pc_begin<newline><the user's PROMPT_COMMAND>", further user
#     elements follow unchanged, the last element calls __ahp_pc_end. `PROMPT_COMMAND=...` or
#     `PROMPT_COMMAND="x; $PROMPT_COMMAND"` (a re-sourced ~/.bashrc) only replaces element 0,
#     and __ahp_pc_end puts us back in front. bash 4.4-5.0 gets the same as one string.
#   * Our DEBUG trap runs the user's DEBUG trap (with $?, $_ and BASH_COMMAND intact, but never
#     for our own PROMPT_COMMAND parts) and returns its status. If anything replaces or removes
#     our trap, __ahp_pc_end notices (our trap did not fire for it), adopts the new trap as the
#     user's and reinstalls ours. If PROMPT_COMMAND loses our hooks, the DEBUG trap restores them.
# Side effects the user can see: `shopt -s lithist` (so multi-line commands keep their newlines in
# history and are reported in full), PROMPT_COMMAND/PS1/PS0 contents and `trap -p DEBUG` mention
# __ahp_* names, and PROMPT_COMMAND is no longer exported (it now names functions that child
# shells would not have).
# Also: with promptvars off, PS0 holds the nonce literally and is kept unexported.
# bash < 4.4 (no PS0) uses the DEBUG trap alone for preexec, like bash-preexec does (untested):
# E (BASH_COMMAND, or the history entry if it matches) and C right before the first simple command
# of the line, so a line run wholly in a subshell there ends with no exit code.

# 1. Our settings: __ahp_nonce and __ahp_login come from the launch file that sourced this one
# (and already removed itself); they are shell variables, never exported, and never were in any
# process's environment.
__ahp_nonce=${__ahp_nonce-}
__ahp_login=${__ahp_login-}

# 2. Define everything before the user's files run, so their aliases cannot alter our code.
__ahp_ret() { return "$1"; }

# Escape table for bytes 0x01..0x1f (bash strings cannot hold NUL).
__ahp_cc=()
__ahp_ce=()
for ((__ahp_i = 1; __ahp_i < 32; __ahp_i++)); do
	builtin printf -v __ahp_h '%02x' "$__ahp_i"
	builtin printf -v '__ahp_cc[__ahp_i - 1]' "\\x$__ahp_h"
	__ahp_ce[__ahp_i - 1]="\\x$__ahp_h"
done
builtin unset __ahp_i __ahp_h

# Escape $1 for an OSC 633 payload into __ahp_out: \ -> \\, ; -> \x3b, control chars -> \xNN.
__ahp_escape() {
	local s=$1 bs='\' i
	s=${s//"$bs"/"$bs$bs"}
	s=${s//;/'\x3b'}
	for ((i = 0; i < 31; i++)); do
		if [[ $s == *"${__ahp_cc[i]}"* ]]; then
			s=${s//"${__ahp_cc[i]}"/"${__ahp_ce[i]}"}
		fi
	done
	__ahp_out=$s
}

# The newest history entry, without its number, into __ahp_hist (forks once).
__ahp_hist1() {
	local h
	h=$(
		builtin unset HISTTIMEFORMAT
		builtin history 1
	)
	h=${h#"${h%%[![:space:]]*}"}
	h=${h#"${h%%[!0-9]*}"}
	__ahp_hist=${h:2}
}

# Print a mark on stderr, where bash prints its prompt, while stderr is a terminal; else
# (the user redirected it: `exec 2>/dev/null`) on the controlling terminal itself, so that
# command detection survives (the prompt does not, the marks do).
__ahp_print() {
	if [[ -t 2 ]] || ! { builtin printf "$@" >/dev/tty; } 2>/dev/null; then
		builtin printf "$@" >&2
	fi
}

__ahp_emit_exec() {
	__ahp_escape "$1"
	__ahp_print '\e]633;E;%s;%s\a\e]633;C;%s\a' "$__ahp_out" "$__ahp_nonce" "$__ahp_nonce"
	__ahp_st=1
}

# State: __ahp_st 0 = at the prompt / no command, 1 = E and C sent, 2 = a command line was read
# (or, without PS0, the prompt is armed) but E and C are still to be sent by the DEBUG trap.
__ahp_st=0
__ahp_dsent=0     # D already printed for this prompt
__ahp_dbg_tick=0  # our DEBUG trap fired for __ahp_pc_end
__ahp_in_dbg=0    # inside the user's DEBUG trap
__ahp_hc=0        # HISTCMD at the last prompt
__ahp_user_dbg=''
__ahp_dbg_spec=''
# The last PROMPT_COMMAND element (the first one starts with __ahp_pc_begin).
__ahp_pc_end_cmd='__ahp_pc_end || { __ahp_dbg_spec=$(trap -p DEBUG); __ahp_install_debug; }'
__ahp_hist=''
__ahp_pwd=''      # the cwd reported at this prompt
__ahp_out=''
__ahp_nil=()
__ahp_ps1=''
__ahp_pa='\[\e]633;A\a\]'
__ahp_pb='\[\e]633;B\a\]'
# PS0 tail: print E and C, then set __ahp_st to 1 (sent).
__ahp_ps0t='$(__ahp_ps0)${__ahp_nil[__ahp_st = 1]:-}'
# PS0 tail with promptvars off (see __ahp_wrap_prompts): a literal C mark, decoded by bash.
__ahp_ps0c='\e]633;C;'$__ahp_nonce'\a'
__ahp_nl=$'\n'
if ((BASH_VERSINFO[0] > 4 || (BASH_VERSINFO[0] == 4 && BASH_VERSINFO[1] >= 4))); then
	__ahp_has_ps0=1
else
	__ahp_has_ps0=0
fi
if ((BASH_VERSINFO[0] > 5 || (BASH_VERSINFO[0] == 5 && BASH_VERSINFO[1] >= 1))); then
	__ahp_pc_array=1
else
	__ahp_pc_array=0
fi
__ahp_mode=debug

# Runs inside PS0's command substitution (a subshell): only its output matters.
__ahp_ps0() {
	__ahp_hist=''
	if ((HISTCMD > __ahp_hc)); then
		__ahp_hist1
	elif builtin shopt -oq history && [[ -z ${HISTIGNORE-} &&
		:${HISTCONTROL-}: != *:ignorespace:* && :${HISTCONTROL-}: != *:ignoreboth:* ]]; then
		__ahp_hist1 # kept out of history by ignoredups/erasedups alone: a repeat of the newest
	fi
	if [[ -t 2 ]]; then
		__ahp_emit_exec "$__ahp_hist" 2>&1 # into PS0, printed on stderr
	else
		__ahp_emit_exec "$__ahp_hist" # stderr redirected: on the terminal (__ahp_print)
	fi
}

__ahp_debug() {
	local __ahp_s=$?
	# Called back through a trap we chain to (bash-preexec keeps the trap it replaced and calls
	# it from its own preexec): nothing to do, and no recursion.
	if ((__ahp_in_dbg)); then
		return 0
	fi
	# Proof for __ahp_pc_end that our trap is (still) the installed one: the trap fired, called
	# directly (not through another hook), for __ahp_pc_end itself.
	if [[ $BASH_COMMAND == __ahp_pc_end* ]] && ((${#FUNCNAME[@]} == 1)); then
		__ahp_dbg_tick=1
	fi
	# Fallback preexec (bash < 4.4). Skip commands that belong to PROMPT_COMMAND (a line that ran
	# no simple command of its own, e.g. `(exit 3)`, reaches the prompt with __ahp_st=2).
	if ((__ahp_st == 2)) && [[ -n $BASH_COMMAND && "${PROMPT_COMMAND[*]-}" != *"$BASH_COMMAND"* ]]; then
		local t=$BASH_COMMAND
		if builtin shopt -oq history; then
			__ahp_hist1
			case $__ahp_hist in
			"$t" | "$t"[[:space:]\;\&\|\<\>\(\)]*) t=$__ahp_hist ;;
			esac
		fi
		__ahp_emit_exec "$t"
	fi
	if [[ "${PROMPT_COMMAND[*]-}" != *__ahp_pc_end* ]]; then
		__ahp_install_pc
	fi
	# The user's trap never sees our own PROMPT_COMMAND parts (bash-preexec, for one, would
	# take them for the user's next command).
	case $BASH_COMMAND in
	__ahp_pc_begin | __ahp_pc_end | __ahp_install_debug | "__ahp_dbg_spec=$"*) return 0 ;;
	esac
	if [[ -n $__ahp_user_dbg ]]; then
		local __ahp_in_dbg=1 __ahp_r
		__ahp_ret "$__ahp_s" "$1" # restores $? and $_ for the user's trap
		builtin eval "$__ahp_user_dbg"
		__ahp_r=$?
		return "$__ahp_r"
	fi
	return 0
}

# Adopt the DEBUG trap in __ahp_dbg_spec (`trap -p DEBUG` output) as the user's, install ours.
# Inside a function bash hides the DEBUG trap from `trap -p`, so the spec is read at the top
# level: by the init code below and by the last PROMPT_COMMAND element (__ahp_pc_end_cmd).
__ahp_install_debug() {
	local t=$__ahp_dbg_spec
	if [[ -z $t ]]; then
		__ahp_user_dbg=''
	elif [[ $t != *__ahp_debug* ]]; then
		local -a a
		builtin eval "a=($t)" # trap -- '<action>' DEBUG, quoted by bash itself
		__ahp_user_dbg=${a[2]-}
		# In POSIX mode (`set -o posix` in ~/.bashrc) bash shows no trap as `trap -- - DEBUG`.
		if [[ $__ahp_user_dbg == - ]]; then
			__ahp_user_dbg=''
		fi
	fi
	builtin trap '__ahp_debug "$_"' DEBUG
}

# Put __ahp_pc_begin first and __ahp_pc_end last in PROMPT_COMMAND, keeping the user's commands.
__ahp_install_pc() {
	local -a pc=()
	local e
	for e in ${PROMPT_COMMAND[@]+"${PROMPT_COMMAND[@]}"}; do
		e=${e//"__ahp_pc_begin$__ahp_nl"/}
		e=${e//"$__ahp_nl$__ahp_pc_end_cmd"/}
		e=${e//"$__ahp_pc_end_cmd"/}
		e=${e//__ahp_pc_begin/}
		if [[ $e == *[![:space:]]* ]]; then
			pc+=("$e")
		fi
	done
	if ((__ahp_pc_array)); then
		if ((${#pc[@]})); then
			pc[0]="__ahp_pc_begin$__ahp_nl${pc[0]}"
		else
			pc=(__ahp_pc_begin)
		fi
		PROMPT_COMMAND=("${pc[@]}" "$__ahp_pc_end_cmd")
	else
		local IFS=$__ahp_nl
		if ((${#pc[@]})); then
			PROMPT_COMMAND="__ahp_pc_begin$__ahp_nl${pc[*]}$__ahp_nl$__ahp_pc_end_cmd"
		else
			PROMPT_COMMAND="__ahp_pc_begin$__ahp_nl$__ahp_pc_end_cmd"
		fi
	fi
	builtin export -n PROMPT_COMMAND
}

__ahp_wrap_prompts() {
	if [[ ${PS1-} != "$__ahp_ps1" ]]; then
		local p=${PS1-}
		p=${p//"$__ahp_pa"/}
		p=${p//"$__ahp_pb"/}
		__ahp_ps1=$__ahp_pa$p$__ahp_pb
		PS1=$__ahp_ps1
	fi
	local z=${PS0-} tail=''
	if ((__ahp_has_ps0)) && builtin shopt -q promptvars; then
		__ahp_mode=ps0
		tail=$__ahp_ps0t
	elif ((__ahp_has_ps0)); then
		__ahp_mode=static
		tail=$__ahp_ps0c
	else
		__ahp_mode=debug
	fi
	local want=${z//"$__ahp_ps0t"/}
	want=${want//"$__ahp_ps0c"/}$tail
	if [[ $want != "$z" ]]; then
		PS0=$want
	fi
	if [[ $__ahp_mode == static ]]; then
		builtin export -n PS0 # it holds the nonce
	fi
}

__ahp_finish() {
	if ((__ahp_st == 1)) || [[ $__ahp_mode == static ]]; then
		__ahp_print '\e]633;D;%s;%s\a' "$1" "$__ahp_nonce"
	else
		__ahp_print '\e]633;D;;%s\a' "$__ahp_nonce"
	fi
	__ahp_st=0
	__ahp_dsent=1
}

# Report the cwd (before D: see the top); with an argument, only if it changed since.
__ahp_cwd() {
	if [[ -z ${1-} || $PWD != "$__ahp_pwd" ]]; then
		__ahp_pwd=$PWD
		__ahp_escape "$PWD"
		__ahp_print '\e]633;P;Cwd=%s;%s\a' "$__ahp_out" "$__ahp_nonce"
	fi
}

__ahp_pc_begin() {
	local s=$?
	__ahp_cwd
	__ahp_finish "$s"
	return "$s"
}

# Returns 1 if our DEBUG trap has to be reinstalled (the caller reads `trap -p DEBUG` first).
__ahp_pc_end() {
	local s=$? r=0
	# __ahp_pc_begin did not run: PROMPT_COMMAND element 0 was replaced. Report the status late.
	if ((!__ahp_dsent)); then
		__ahp_cwd
		__ahp_finish "$s"
	fi
	__ahp_dsent=0
	if [[ ${PROMPT_COMMAND-} != "__ahp_pc_begin"* ]]; then
		__ahp_install_pc
	fi
	# Our DEBUG trap did not fire for this function: someone replaced or removed it.
	if ((!__ahp_dbg_tick)); then
		r=1
	fi
	__ahp_dbg_tick=0
	__ahp_wrap_prompts
	__ahp_cwd changed # (the user's PROMPT_COMMAND may have changed it)
	__ahp_hc=$HISTCMD
	if [[ $__ahp_mode == debug ]]; then
		__ahp_st=2 # no PS0: the next simple command outside PROMPT_COMMAND starts the line
	fi
	return "$r"
}

__ahp_install() {
	if builtin shopt -q cmdhist; then
		builtin shopt -s lithist
	fi
	__ahp_install_pc
	__ahp_install_debug
	__ahp_wrap_prompts
}

# 3. The user's startup files, as bash itself would have read them (none when the launch says
# __ahp_norc=1: the host's "no rc files" option). (For a non-login shell bash has already read
# its system file, e.g. Debian's /etc/bash.bashrc, before this file.)
if [[ ${__ahp_norc-} == 1 ]]; then
	:
elif [[ $__ahp_login == 1 ]]; then
	if [[ -r /etc/profile ]]; then
		builtin source /etc/profile
	fi
	for __ahp_f in ~/.bash_profile ~/.bash_login ~/.profile; do
		if [[ -r $__ahp_f ]]; then
			builtin source "$__ahp_f"
			break
		fi
	done
	builtin unset __ahp_f
elif [[ -r ~/.bashrc ]]; then
	builtin source ~/.bashrc
fi
builtin unset __ahp_login __ahp_norc

# 4. Hooks last, so they wrap whatever the user's files set up. Only for interactive shells.
if [[ $- == *i* ]]; then
	__ahp_dbg_spec=$(trap -p DEBUG) # top level, see __ahp_install_debug
	__ahp_install
fi
