# ahp command detection for interactive zsh (written for ahp; see ahp/shell/__init__.py).
#
# zsh is started with ZDOTDIR pointing at a private temporary directory whose .zshenv, .zprofile,
# .zshrc and .zlogin each set __ahp_phase and source this file; its launch.zsh (read and deleted
# by the first phase) holds the nonce and the user's ZDOTDIR. Every phase first sources the
# user's own file of the same name from the user's ZDOTDIR (their $ZDOTDIR, else $HOME), with
# ZDOTDIR as it would be without us (their value, or unset) while it runs. A user
# file may move ZDOTDIR (a .zshenv doing ZDOTDIR=~/.config/zsh is common); later phases then read
# from the new place. After .zshrc (non-login) or .zlogin (login) ZDOTDIR is restored the same
# way, so user commands and child shells never see the temporary directory.
#
# The .zshrc phase then installs hooks that print OSC 633:
#   precmd  (first) D;[status];<nonce>  precmd (last) P;Cwd=<dir>;<nonce>, PS1 wrapped as A <prompt> B
#   preexec (last)  E;<command line>;<nonce>  C;<nonce>
#   chpwd           P;Cwd=<dir>;<nonce>  as soon as this shell (not a subshell) changes directory
# (A `cd` is reported while its command runs, before its D: whoever sees a command's end already
# has the cwd it left. `cd -q`, which runs no chpwd hook, is reported only at the prompt, after D.)
# (Every mark but A and B carries the nonce: program output can print marks too, and only signed
# ones move a command's boundaries or the cwd. A and B stay bare: PS1 may be exported.)
# After a command, D;<status>;<nonce> normally comes from PROMPT_EOL_MARK instead (see
# __ahp_precmd_first), so that zsh's PROMPT_SP mark is not part of the command's output.
# zsh passes every precmd function the same $?, and gives preexec the full command line as
# typed (multi-line included) in $1, so no tricks are needed.
#
# User file sourcing happens at the top level of this file (never inside a function) so that
# `typeset` and friends in the user's files stay global. Everything else runs in functions under
# `emulate -L zsh`, so the user's options cannot change how our code behaves.

case ${__ahp_phase-} in
zshenv)
	# First file zsh reads from ZDOTDIR. Our settings are in the launch file beside it: the
	# nonce, where the user's startup files live (__ahp_zd) and whether ZDOTDIR is set at all
	# for them (__ahp_zd_set). Read it, delete it, and scrub ZDOTDIR from our initial
	# environment, so that no command can find any of it (see __ahp_scrub_environ).
	typeset -g __ahp_tmpdir=$ZDOTDIR __ahp_nonce='' __ahp_zd=$HOME
	typeset -gi __ahp_zd_set=0
	if [[ -r $__ahp_tmpdir/launch.zsh ]]; then
		builtin source "$__ahp_tmpdir/launch.zsh"
		if zmodload -F zsh/files b:zf_rm 2>/dev/null; then
			zf_rm -f -- "$__ahp_tmpdir/launch.zsh"
		else
			command rm -f -- "$__ahp_tmpdir/launch.zsh"
		fi
	fi

	# /proc/PID/environ shows the environment a process was started with, whatever it unsets
	# later. Overwrite our ZDOTDIR= entry there with NUL bytes, through /proc/self/mem (a
	# process may write its own memory; zsh copied its environment at start-up and never reads
	# these bytes again). Best effort: without zsh/system or a writable /proc/self/mem the entry
	# stays (it names a directory that holds no secret once the launch file is gone).
	__ahp_scrub_environ() {
		emulate -L zsh
		setopt no_multibyte # byte lengths and offsets
		zmodload zsh/system 2>/dev/null || return 0
		local stat env e fd
		local -a f entries
		{ stat=$(</proc/self/stat) && env=$(</proc/self/environ) } 2>/dev/null || return 0
		f=(${=${stat##*\) }}) # fields 3.. of stat(5): env_start and env_end are 50 and 51
		local -i start=${f[48]:-0} end=${f[49]:-0} off=0
		(( start > 0 && end > start )) || return 0
		sysopen -w -u fd /proc/self/mem 2>/dev/null || return 0
		entries=("${(@0)env}")
		for e in "${entries[@]}"; do
			if [[ $e == (ZDOTDIR|USER_ZDOTDIR|AHP_NONCE|AHP_SHELL_LOGIN|AHP_ZDOTDIR_WAS_SET)=* ]] &&
				(( start + off + ${#e} <= end )); then
				sysseek -u $fd $(( start + off )) 2>/dev/null &&
					syswrite -o $fd -- "${(pl:${#e}::\0:)}" 2>/dev/null
			fi
			(( off += ${#e} + 1 ))
		done
		exec {fd}>&-
	}
	__ahp_scrub_environ
	unfunction __ahp_scrub_environ

	# Give the user's files the ZDOTDIR they would have had without us (possibly unset).
	__ahp_to_user() {
		# A global rc file (macOS /etc/zshrc does this) may have put HISTFILE under $ZDOTDIR,
		# i.e. into our temporary directory: move it to where it would have been.
		if [[ -n ${HISTFILE-} && $HISTFILE == "$__ahp_tmpdir"/* ]]; then
			HISTFILE=$__ahp_zd/${HISTFILE#"$__ahp_tmpdir"/}
		fi
		if (( __ahp_zd_set )); then
			ZDOTDIR=$__ahp_zd
		else
			unset ZDOTDIR
		fi
	}
	# Remember where the user's file left ZDOTDIR, then point zsh back at our directory.
	__ahp_from_user() {
		if (( ${+ZDOTDIR} )); then
			__ahp_zd_set=1
			__ahp_zd=$ZDOTDIR
		else
			__ahp_zd_set=0
			__ahp_zd=$HOME
		fi
		ZDOTDIR=$__ahp_tmpdir
	}

	__ahp_to_user
	if (( ! ${__ahp_norc:-0} )) && [[ -r "${ZDOTDIR:-$HOME}/.zshenv" ]]; then
		builtin source "${ZDOTDIR:-$HOME}/.zshenv"
	fi
	__ahp_from_user
	;;
zprofile)
	__ahp_to_user
	if (( ! ${__ahp_norc:-0} )) && [[ -r "${ZDOTDIR:-$HOME}/.zprofile" ]]; then
		builtin source "${ZDOTDIR:-$HOME}/.zprofile"
	fi
	__ahp_from_user
	;;
zshrc)
	# Define our functions before the user's .zshrc runs, so its aliases cannot alter them.

	# Escape $1 for an OSC 633 payload into REPLY: \ -> \\, ; -> \x3b, control chars -> \xNN.
	__ahp_escape() {
		emulate -L zsh
		local s=$1 i
		s=${s//\\/\\\\}
		s=${s//;/\\x3b}
		for i in {1..31}; do
			if [[ $s == *${(#)i}* ]]; then
				s=${s//${(#)i}/$__ahp_ce[i]}
			fi
		done
		REPLY=$s
	}

	# Print a mark on stdout while it is a terminal; else (the user redirected it: `exec
	# >/dev/null`) on the controlling terminal itself, so that command detection survives.
	__ahp_print() {
		if [[ -t 1 ]] || ! { builtin printf "$@" >/dev/tty } 2>/dev/null; then
			builtin printf "$@"
		fi
	}

	# zsh prints the PROMPT_SP mark (PROMPT_EOL_MARK, by default a reverse "%" or "#" that flags
	# output without a final newline, then a line of padding) after a command and before any
	# precmd hook, so a D printed here would put that mark into the command's output. While a
	# command runs, PROMPT_EOL_MARK therefore starts with our D (%? is the command's status;
	# %{ %} keeps it out of the width zsh pads to), see __ahp_preexec. Here the user's value is
	# put back, and D is printed only if zsh did not print it: PROMPT_SP or PROMPT_CR off, or
	# the command set PROMPT_EOL_MARK itself.
	__ahp_precmd_first() {
		local s=$? sp=0
		[[ -o promptsp && -o promptcr ]] && sp=1 # the user's options: before emulate
		emulate -L zsh
		if (( __ahp_eol_armed )) && [[ ${PROMPT_EOL_MARK-} == "$__ahp_eol" ]]; then
			if (( __ahp_eol_set )); then
				PROMPT_EOL_MARK=$__ahp_eol_user
			else
				unset PROMPT_EOL_MARK
			fi
		else
			sp=0
		fi
		__ahp_eol_armed=0
		if (( __ahp_st == 1 )); then
			(( sp )) || __ahp_print '\e]633;D;%s;%s\a' $s "$__ahp_nonce"
		else
			__ahp_print '\e]633;D;;%s\a' "$__ahp_nonce"
		fi
		__ahp_st=0
		return s
	}

	__ahp_precmd_last() {
		local s=$?
		emulate -L zsh
		__ahp_install_hooks
		if [[ ${PS1-} != "$__ahp_ps1" ]] && [[ -o promptpercent ]]; then
			local p=${PS1-}
			p=${p//$__ahp_pa/}
			p=${p//$__ahp_pb/}
			__ahp_ps1=$__ahp_pa$p$__ahp_pb
			PS1=$__ahp_ps1
		fi
		__ahp_report_cwd
		return s
	}

	__ahp_report_cwd() {
		local REPLY # (chpwd runs inside the user's command: their REPLY stays)
		__ahp_escape "$PWD"
		__ahp_print '\e]633;P;Cwd=%s;%s\a' "$REPLY" "$__ahp_nonce"
	}

	__ahp_chpwd() {
		emulate -L zsh
		(( ZSH_SUBSHELL )) || __ahp_report_cwd # (a subshell's cd leaves this shell's cwd)
	}

	__ahp_preexec() {
		emulate -L zsh
		# $1 is the line as typed (empty if history is off); $3 is the full, alias-expanded text.
		local cmd=$1
		[[ -n $cmd ]] || cmd=$3
		__ahp_escape "$cmd"
		# Put our D in front of the PROMPT_SP mark (see __ahp_precmd_first), unless the mark is
		# read-only or exported (a zsh started by the command would print our D).
		if (( ! __ahp_eol_armed )) && [[ ${(t)PROMPT_EOL_MARK-} != *(readonly|export)* ]]; then
			__ahp_eol_set=${+PROMPT_EOL_MARK}
			__ahp_eol_user=${PROMPT_EOL_MARK-}
			__ahp_eol=$'%{\e]633;D;%?;'$__ahp_nonce$'\a%}'${PROMPT_EOL_MARK-'%B%S%#%s%b'}
			PROMPT_EOL_MARK=$__ahp_eol
			__ahp_eol_armed=1
		fi
		__ahp_print '\e]633;E;%s;%s\a\e]633;C;%s\a' "$REPLY" "$__ahp_nonce" "$__ahp_nonce"
		__ahp_st=1
	}

	# Keep __ahp_precmd_first first (it prints D before anything else runs) and
	# __ahp_precmd_last last (a prompt theme's precmd may set PS1; we wrap the result), and our
	# preexec last (C right before the command). Re-checked at every prompt because plugins
	# reorder hooks; a change made now takes effect at the next prompt.
	__ahp_install_hooks() {
		emulate -L zsh
		typeset -ga precmd_functions preexec_functions chpwd_functions
		if (( ! ${chpwd_functions[(Ie)__ahp_chpwd]} )); then
			chpwd_functions+=(__ahp_chpwd)
		fi
		if [[ ${precmd_functions[1]-} != __ahp_precmd_first || ${precmd_functions[-1]-} != __ahp_precmd_last ]]; then
			precmd_functions=(__ahp_precmd_first ${precmd_functions:#__ahp_precmd_(first|last)} __ahp_precmd_last)
		fi
		if [[ ${preexec_functions[-1]-} != __ahp_preexec ]]; then
			preexec_functions=(${preexec_functions:#__ahp_preexec} __ahp_preexec)
		fi
	}

	__ahp_init() {
		emulate -L zsh
		typeset -g __ahp_st=0 __ahp_ps1='' REPLY=''
		typeset -g __ahp_eol='' __ahp_eol_user=''
		typeset -gi __ahp_eol_armed=0 __ahp_eol_set=0
		typeset -g __ahp_pa=$'%{\e]633;A\a%}' __ahp_pb=$'%{\e]633;B\a%}'
		typeset -ga __ahp_ce=()
		local i h
		for i in {1..31}; do
			builtin printf -v h '\\x%02x' $i
			__ahp_ce[i]=$h
		done
		__ahp_install_hooks
	}

	__ahp_to_user
	if (( ! ${__ahp_norc:-0} )) && [[ -r "${ZDOTDIR:-$HOME}/.zshrc" ]]; then
		builtin source "${ZDOTDIR:-$HOME}/.zshrc"
	fi
	__ahp_from_user
	if [[ -o interactive ]]; then
		__ahp_init
	fi
	# A login shell still has to read our .zlogin; otherwise hand ZDOTDIR back now.
	[[ -o login ]] || __ahp_to_user
	;;
zlogin)
	__ahp_to_user
	if (( ! ${__ahp_norc:-0} )) && [[ -r "${ZDOTDIR:-$HOME}/.zlogin" ]]; then
		builtin source "${ZDOTDIR:-$HOME}/.zlogin"
	fi
	__ahp_from_user
	__ahp_to_user
	;;
esac
unset __ahp_phase
