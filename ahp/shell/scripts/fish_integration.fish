# ahp command detection for interactive fish >= 3.3 (written for ahp; see ahp/shell/__init__.py).
#
# Loaded with `fish [-l] --init-command 'source <launch file>'` (which sources this one), i.e. after
# config.fish and conf.d, right before the first prompt. Prints OSC 633:
#   fish_preexec   E;<command line>;<nonce>  C;<nonce>
#   fish_postexec  P;Cwd=<dir>;<nonce>  D;<status>;<nonce>
#   fish_prompt    (event) P;Cwd=<dir>;<nonce>  D;;<nonce> if no command ran since the last prompt,
#                  else P only if the cwd changed since postexec
# (The cwd comes before D, so that whoever sees a command's end already has the cwd it left.)
#   fish_prompt    (function) wrapped: A <the user's prompt> B
# (Every mark but A and B carries the nonce: program output can print marks too, and only signed
# ones move a command's boundaries or the cwd.)
# fish runs no preexec/postexec for an empty line, so an empty line yields only the bare D.

if not status is-interactive
    exit 0
end
if set -q __ahp_loaded
    exit 0
end
set -g __ahp_loaded 1

# The nonce comes from the launch file that sourced this one (a global, never exported variable;
# it never was in any process's environment).
if not set -q __ahp_nonce
    set -g __ahp_nonce ''
end
set -g __ahp_st 0 # 1 while a command runs (C sent, D not yet)
set -g __ahp_dsent 0 # D printed since the last prompt
set -g __ahp_pwd '' # the cwd reported last

# Control characters 0x01..0x1f and their escapes.
set -g __ahp_cc
set -g __ahp_ce
for __ahp_i in (seq 1 31)
    set -l h (printf '%02x' $__ahp_i)
    set -a __ahp_cc (printf "\\x$h" | string collect --no-trim-newlines)
    set -a __ahp_ce "\\x$h"
end
set -e __ahp_i

# Print $argv[1] escaped for an OSC 633 payload: \ -> \\, ; -> \x3b, control chars -> \xNN.
# (A "." rides at the end until the newlines are escaped: `string collect` trims trailing
# newlines, and without it a directory named "trail\n" was reported as "trail".)
function __ahp_escape
    set -l s (string replace --all -- '\\' '\\\\' "$argv[1]." | string collect)
    set s (string replace --all -- ';' '\\x3b' "$s" | string collect)
    for i in (seq 31)
        set s (string replace --all -- $__ahp_cc[$i] $__ahp_ce[$i] "$s" | string collect)
    end
    printf '%s' (string replace --regex -- '\.$' '' "$s")
end

# C as late as fish lets us: fish runs fish_preexec handlers in the order they were defined, and
# its own (e.g. __fish_disable_bracketed_paste, which prints ESC[?2004l) are defined at the first
# prompt, after this file ran. So ours is defined at the first prompt too, after them. (fish then
# still writes the window title, an SGR reset and a CR before running the command: no hook runs
# later. fish 4's own OSC 133 C has the same place.)
function __ahp_define_preexec
    function __ahp_preexec --on-event fish_preexec
        set -l line (__ahp_escape "$argv[1]")
        printf '\e]633;E;%s;%s\a\e]633;C;%s\a' "$line" "$__ahp_nonce" "$__ahp_nonce"
        set -g __ahp_st 1
    end
end

# Report the cwd; with an argument, only if it changed since the last report.
function __ahp_cwd
    if test (count $argv) -eq 0; or test "$PWD" != "$__ahp_pwd"
        set -g __ahp_pwd "$PWD"
        set -l cwd (__ahp_escape "$PWD")
        printf '\e]633;P;Cwd=%s;%s\a' "$cwd" "$__ahp_nonce"
    end
end

function __ahp_postexec --on-event fish_postexec
    set -l s $status
    __ahp_cwd
    if test $__ahp_st = 1
        printf '\e]633;D;%s;%s\a' $s "$__ahp_nonce"
    else
        printf '\e]633;D;;%s\a' "$__ahp_nonce"
    end
    set -g __ahp_st 0
    set -g __ahp_dsent 1
end

function __ahp_ret
    return $argv[1]
end

# Wrap the current fish_prompt (also after the user replaced it, e.g. with fish_config).
function __ahp_wrap_prompt
    if functions -q __ahp_user_prompt
        and functions fish_prompt | string match -q '*__ahp_user_prompt*'
        return
    end
    functions -q __ahp_user_prompt; and functions -e __ahp_user_prompt
    if functions -q fish_prompt
        functions -c fish_prompt __ahp_user_prompt
    else
        function __ahp_user_prompt
            printf '> '
        end
    end
    function fish_prompt --description 'ahp: the user prompt between OSC 633 A and B'
        # The user's prompt runs first, so it still sees the last $status and $pipestatus.
        set -l p (__ahp_user_prompt | string collect)
        printf '\e]633;A\a%s\e]633;B\a' "$p"
    end
end

function __ahp_on_prompt --on-event fish_prompt
    set -l s $status
    if test $__ahp_dsent = 0
        __ahp_cwd
        printf '\e]633;D;;%s\a' "$__ahp_nonce"
    else
        __ahp_cwd changed
    end
    set -g __ahp_dsent 0
    functions -q __ahp_preexec; or __ahp_define_preexec
    __ahp_wrap_prompt
    __ahp_ret $s
end

__ahp_wrap_prompt
