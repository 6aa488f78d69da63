"""Why a command is believed to wait for input: :class:`InputEvidence`, and its rules.

Why a module of its own: "waiting for input" must be concluded the same way
in-process (the pty's ``/proc`` status, :func:`ahp.pty.procfs.tty_status`) and
remotely (the server's ``x-ahp-terminals/ttyStatus`` answer), and it must not
be concluded for a command that only paused. The rules, in order:

1. Nothing while output is still unread by the host (``unread``): the command
   may just have written a prompt and gone on.
2. A process of the foreground job sleeps in a ``read`` of the terminal — its
   standard input, or ``/dev/tty`` opened by ``getpass``, ``sudo``, ``ssh``,
   ``less`` — : waiting (source ``procfs``), with or without a prompt.
3. It sleeps in ``poll``/``select``/``epoll`` on a set that includes the terminal
   (Node's readline, IPython's prompt-toolkit, vim, top): waiting (source
   ``poll``).
4. It sleeps in one of them on a set that cannot be seen: waiting only with the
   screen's word for it, a full-screen program or a prompt-like last line
   (source ``poll_unseen``; the collector weighs it).
5. Nothing can be seen at all (a server without the process extension, a
   terminal without a pty): the screen alone (source ``heuristic``).

A reader that is an interactive shell of its own (``bash`` typed in the
terminal's shell: :func:`interactive_shell`) is a *nested* shell at its prompt:
waiting, and :meth:`InputEvidence.describe` says how to leave it (Ctrl-C does not).

A command that sleeps (``printf 'name? '; sleep 3``) shows none of 2 to 4: it is
not waiting, whatever its last line looks like. The shell itself polling its
terminal is its line editor at the next prompt (the command is over, its end
still on the way): never evidence. The shell itself *reading* it is a builtin
(``read``) — or a shell without a line editor at its prompt: the collector takes
it only when a second look confirms it.

Pure: no I/O.
"""

from __future__ import annotations

from typing import Final, Protocol

import attrs

__all__ = [
    "PROMPT_ENDINGS",
    "SHELLS",
    "SOURCES",
    "InputEvidence",
    "TtyView",
    "editor_reads",
    "evidence_of",
    "interactive_shell",
    "looks_like_prompt",
    "program_name",
    "prompt_unseen",
]

#: The last characters of a prompt line that :func:`looks_like_prompt` accepts.
PROMPT_ENDINGS: Final = (":", "?", ">", "]", ")", "$", "#", "%")
#: Every value of :attr:`InputEvidence.source`, most certain first.
SOURCES: Final = ("procfs", "poll", "poll_unseen", "heuristic")


class TtyView(Protocol):
    """What the rules read of a pty's status (:class:`ahp.pty.procfs.TtyStatus`)."""

    @property
    def echo(self) -> bool: ...
    @property
    def readers(self) -> tuple[int, ...]: ...
    @property
    def unread(self) -> int: ...
    @property
    def pollers(self) -> tuple[int, ...]: ...
    @property
    def tty_pollers(self) -> tuple[int, ...]: ...
    @property
    def programs(self) -> tuple[str, ...]: ...
    @property
    def shell_foreground(self) -> bool | None: ...
    @property
    def shell_replaced(self) -> bool | None: ...
    @property
    def canonical(self) -> bool | None: ...
    @property
    def shell_stderr_tty(self) -> bool | None: ...


@attrs.frozen
class InputEvidence:
    """Why a command is believed to wait for input.

    Attributes:
        readers: pids of the terminal's foreground job blocked reading (or polling)
            the terminal (empty for the screen heuristic).
        echo: the terminal echoes input (``False``: a password prompt, or a program
            that reads keys in raw mode).
        source: one of :data:`SOURCES` (see the module doc).
        programs: the command lines of ``readers`` (an editor a command opened
            shows here: ``vim .git/COMMIT_EDITMSG``).
        full_screen: the program is on the alternate screen (it reads keys; read
            it with ``term.screen()``).
        nested_shell: the reader is an interactive shell started by the command (not
            the terminal's own): it waits at its own prompt.
        replaced_shell: the reader is a program that replaced the terminal's shell
            process (``exec python3``): ending it ends the terminal's process.
        continuation: the reader is the terminal's shell itself, its line editor at a
            prompt for the rest of the typed line (an unclosed quote, bracket or block:
            bash's ``> ``, fish's editor on a new line): not the command, which has not
            started (its ``echo`` flag is the line editor's raw mode, not a password's).
        group_end: with ``continuation``, the line that closes the group the command's
            lines were typed in (``}``, fish's ``end``: :func:`ahp.agent.markers.group`),
            which the shell reads after the rest; empty for a command of one line.
    """

    readers: tuple[int, ...]
    echo: bool
    source: str
    programs: tuple[str, ...] = ()
    full_screen: bool = False
    nested_shell: bool = False
    replaced_shell: bool = False
    continuation: bool = False
    group_end: str = ""

    def describe(self) -> str:
        """A few words for an agent: who waits, for what, how to answer."""
        if self.continuation:
            shell = program_name(self.programs[0]).lstrip("-") if self.programs else ""
            hint = (
                " (fish ends every block with `end`: bash's `do … done` and `then … fi` "
                "are not fish's)"
                if shell == "fish"
                else ""
            )
            return (
                f"not started: {shell or 'the shell'} reads the rest of the command line, "
                "incomplete (an unclosed quote, bracket or block, a trailing backslash or "
                f"operator such as && or |, a heredoc without its end line){hint}; send the "
                f"rest with send_input{_closing(self.group_end)}, or drop the line with "
                "interrupt()"
            )
        who = program_name(self.programs[0]) if self.programs else "the command"
        if self.nested_shell:
            return (
                f"{who} waits at its own prompt (a nested shell: Ctrl-C does not leave it); "
                "commands sent with send_input run in it; leave it with "
                'send_input("exit\\r"), or end it with kill()'
            )
        if self.full_screen:
            what = "waits for keys (full screen: read screen())"
        elif not self.echo:
            what = "waits for input, echo off"
        else:
            what = "waits for a line"
        if self.replaced_shell:
            return (
                f"{who} {what}, in the place of the terminal's shell (exec); answer with "
                "send_input; kill() ends it and the terminal's process with it"
            )
        return f"{who} {what}; answer with send_input"


def _closing(group_end: str) -> str:
    """What to send after the rest of a command of several lines, typed grouped."""
    if not group_end:
        return ""
    opening = "begin" if group_end == "end" else "{"
    return (
        f" (its lines were typed inside `{opening} … {group_end}`, to run as one command, "
        f"and the closing `{group_end}` line went into the unfinished part, a heredoc's "
        f"body or a string: send a line `{group_end}` after the rest)"
    )


#: Programs whose first argument names what runs (``python3 ipython``).
_INTERPRETERS: Final = ("python", "node", "perl", "ruby", "bash", "sh", "zsh", "deno", "bun")
#: Longest program name :func:`program_name` gives.
MAX_PROGRAM_NAME: Final = 40


def program_name(command_line: str) -> str:
    """A short name for a command line: its program's base name, and its script's
    when the program is an interpreter (``python3 ipython``, ``vim``)."""
    words = command_line.split()
    if not words:
        return "the command"
    name = words[0].rsplit("/", 1)[-1]
    if name.startswith(_INTERPRETERS) and len(words) > 1 and not words[1].startswith("-"):
        name += " " + words[1].rsplit("/", 1)[-1]
    return name[:MAX_PROGRAM_NAME]


#: Program names of interactive shells (see :func:`interactive_shell`).
SHELLS: Final = frozenset(
    {"bash", "sh", "dash", "ash", "zsh", "fish", "ksh", "mksh", "oksh", "yash", "tcsh", "csh"}
)
#: Shell options whose next word is their value, not a script.
_SHELL_VALUED: Final = frozenset(
    {"--rcfile", "--init-file", "--init-command", "-C", "-o", "+o", "-O", "+O"}
)


def interactive_shell(command_line: str) -> str | None:
    """The shell's name when ``command_line`` starts an interactive shell (one of
    :data:`SHELLS`, with neither ``-c`` nor a script to run), else ``None``."""
    words = command_line.split()
    if not words:
        return None
    name = words[0].rsplit("/", 1)[-1].lstrip("-")
    if name not in SHELLS:
        return None
    valued = False
    for word in words[1:]:
        if valued:
            valued = False
        elif word in _SHELL_VALUED:
            valued = True
        elif word == "--":
            return None if words[-1] != "--" else name
        elif word.startswith("--"):
            continue
        elif word[:1] in "-+" and len(word) > 1:
            if "c" in word[1:]:
                return None  # -c: it runs a command, then exits
        else:
            return None  # a script
    return name


def evidence_of(status: TtyView | None) -> InputEvidence | None:
    """What a pty's status says (rules 1 to 4 of the module doc); ``poll_unseen`` still
    needs the screen's word. One rule for the in-process port and a remote one."""
    if status is None or status.unread:
        return None
    # A shell the command started, at its own prompt (never the terminal's shell).
    nested = (
        status.shell_foreground is False
        and bool(status.programs)
        and interactive_shell(status.programs[0]) is not None
    )
    if status.readers:
        return InputEvidence(
            readers=status.readers,
            echo=status.echo,
            source="procfs",
            programs=status.programs,
            nested_shell=nested,
        )
    if status.shell_foreground:
        return None  # the shell's line editor polls: it is at its prompt
    if status.tty_pollers:
        return InputEvidence(
            readers=status.tty_pollers,
            echo=status.echo,
            source="poll",
            programs=status.programs,
            nested_shell=nested,
        )
    if status.pollers:
        return InputEvidence(
            readers=status.pollers,
            echo=status.echo,
            source="poll_unseen",
            programs=status.programs,
        )
    return None


def editor_reads(status: TtyView | None) -> bool:
    """The terminal's own shell (not replaced) reads or polls the terminal the way its
    line editor does at a prompt: in the foreground, the tty neither canonical nor
    echoing (readline, zle, fish's reader), nothing unread. A plain ``read`` builtin
    reads in canonical mode; ``read -e`` (bash), ``read -s -n 1``, or any ``read`` of
    fish look the same, so the screen must say which (the caller's rule). ``False``
    when the tty's mode is not known (an older server)."""
    return (
        status is not None
        and status.shell_foreground is True
        and not status.shell_replaced
        and not status.unread
        and bool(status.readers or status.tty_pollers)
        and status.canonical is False
        and not status.echo
    )


def prompt_unseen(status: TtyView | None) -> bool:
    """The terminal's shell is bash with its standard error off the terminal (``exec
    2>/dev/null``, ``exec 2>/dev/pts/OTHER``): bash draws its prompt, its line and its
    answer to a Ctrl-C there, so none of them is ever seen. (zsh draws its prompt on
    the terminal whatever its streams; fish cannot redirect its own.) ``False`` when
    not known (an older server)."""
    if status is None or status.shell_stderr_tty is not False or not status.programs:
        return False
    words = status.programs[0].split()
    return bool(words) and words[0].rsplit("/", 1)[-1].lstrip("-") == "bash"


def looks_like_prompt(line: str) -> bool:
    """The screen heuristic: a non-empty last line ending like a question or a prompt."""
    stripped = line.rstrip()
    return bool(stripped) and stripped.endswith(PROMPT_ENDINGS)
