"""The ``x-ahp-terminals/*`` extension: what a terminal's processes are doing, over the wire.

Why an extension: AHP carries a terminal's bytes and lifecycle, not its
processes, so a client cannot tell a command blocked in a read of the terminal
from a slow one, see the jobs a command left behind, or signal a process group.
The server can (:mod:`ahp.pty.procfs`); these requests let it answer. AHP
reserves the ``x-`` prefix for implementation-defined commands, so a server
without them answers ``-32601`` and a client falls back to what it can see.

The requests (every ``channel`` is a terminal this server hosts):

* :data:`TTY_STATUS` ``{channel}`` → ``{status: TtyStatusWire | null}``: the
  foreground process group, the echo flag, the processes of that group blocked
  in a read of the tty (``readers``) or in poll/select/epoll (``pollers``), and
  the bytes written but not yet read by the server (``unread``); ``null`` when
  the terminal has no pty or has exited.
* :data:`JOB_MARK` ``{channel}`` → ``{mark: JobMarkWire | null}``: a mark of the
  session's jobs now, to be handed back to the next two.
* :data:`JOBS` ``{channel, since?}`` → ``{jobs: [JobWire], truncated}``: the jobs
  started since ``since`` and still running, once they have started their
  programs.
* :data:`SIGNAL` ``{channel, signal, since?}`` → ``{groups: [pgrp], shellForeground}``:
  ``signal`` (one of :data:`SIGNALS`) to the foreground job's process group and
  to every job started since ``since``, never to the shell's own group; when
  the shell itself is in the foreground (a builtin ``read``), it gets Ctrl-C.

* :data:`EXEC` ``{argv | command, channel?, cwd?, env?, timeout?, headBytes?,
  tailBytes?}`` → ``{channel}``: start a command without a terminal (stdin closed,
  stdout and stderr apart: ``exec_command``, :mod:`ahp.engine.exec`) as the process of a
  new ``isPty: false`` terminal, and answer once it runs; follow the channel for its
  output and ``terminal/exited``.
* :data:`EXEC_RESULT` ``{channel}`` → the ``CommandResult`` of an exec that ended
  (its JSON: ``ahp.agent.command.CommandResult.to_json``), waiting at most
  :data:`EXEC_RESULT_WAIT` seconds for it; an error while it still runs.

A mark is data the client holds, not a server-side handle: a forged one can
only change which jobs *of that terminal's session* are listed or signalled.
Its size is bounded (:data:`MAX_MARK_PIDS`), like every list in an answer.

Pure: types, names and bounds, no I/O.
"""

from __future__ import annotations

from typing import Final

from attrs import frozen

from ahp.protocol.state import URI_CONTROLS

__all__ = [
    "EXEC",
    "EXEC_RESULT",
    "EXEC_RESULT_WAIT",
    "EXEC_RUNNING",
    "JOBS",
    "JOB_MARK",
    "MAX_EXEC_ARGS",
    "MAX_EXEC_BUDGET",
    "MAX_EXEC_CHARS",
    "MAX_EXEC_ENV",
    "MAX_EXEC_TIMEOUT",
    "MAX_JOBS_REPORTED",
    "MAX_MARK_PIDS",
    "MAX_PID",
    "MAX_PROGRAMS_REPORTED",
    "MAX_PROGRAM_CHARS",
    "MAX_TICK",
    "METHODS",
    "SIGNAL",
    "SIGNALS",
    "TTY_STATUS",
    "ChannelParams",
    "ExecParams",
    "ExecResult",
    "JobMarkResult",
    "JobMarkWire",
    "JobWire",
    "JobsParams",
    "JobsResult",
    "SignalParams",
    "SignalResult",
    "TtyStatusResult",
    "TtyStatusWire",
    "exec_problem",
    "mark_problem",
]

TTY_STATUS: Final = "x-ahp-terminals/ttyStatus"
JOB_MARK: Final = "x-ahp-terminals/jobMark"
JOBS: Final = "x-ahp-terminals/jobs"
SIGNAL: Final = "x-ahp-terminals/signal"
EXEC: Final = "x-ahp-terminals/exec"
EXEC_RESULT: Final = "x-ahp-terminals/execResult"
METHODS: Final = (TTY_STATUS, JOB_MARK, JOBS, SIGNAL, EXEC, EXEC_RESULT)
#: Most argv entries, and characters of the argv or command line, of one exec.
MAX_EXEC_ARGS: Final = 4096
MAX_EXEC_CHARS: Final = 256 * 1024
#: Most environment variables one exec adds.
MAX_EXEC_ENV: Final = 1024
#: Largest head or tail budget of one exec's output (per stream).
MAX_EXEC_BUDGET: Final = 1024 * 1024
#: Longest ``timeout`` of one exec (seconds: a week).
MAX_EXEC_TIMEOUT: Final = 7 * 24 * 3600.0
#: Seconds an :data:`EXEC_RESULT` request waits for the result of an exec that is ending.
EXEC_RESULT_WAIT: Final = 2.0
#: The error code of :data:`EXEC_RESULT` while the exec still runs.
EXEC_RUNNING: Final = -32000

#: The signals a client may send to a command's process groups (by name).
SIGNALS: Final = ("SIGINT", "SIGTERM", "SIGKILL")
#: Most pids a job mark carries (the shell's children at the mark): more is refused.
MAX_MARK_PIDS: Final = 4096
#: Largest pid Linux hands out (``PID_MAX_LIMIT`` on 64-bit machines).
MAX_PID: Final = 4_194_304
#: Largest clock tick a mark may carry (a signed 64-bit count).
MAX_TICK: Final = 2**63 - 1
#: Most jobs one answer lists (and most pids in ``readers``/``pollers``); past it the
#: answer says ``truncated``.
MAX_JOBS_REPORTED: Final = 256
#: Most command lines a ``ttyStatus`` answer names (``programs``), and the longest
#: each may be (characters).
MAX_PROGRAMS_REPORTED: Final = 8
MAX_PROGRAM_CHARS: Final = 4096


@frozen
class ChannelParams:
    channel: str


@frozen
class JobMarkWire:
    """A :class:`ahp.pty.procfs.JobMark` on the wire: the shell's children then, and
    the clock tick then."""

    known: tuple[int, ...]
    tick: int


@frozen
class JobsParams:
    channel: str
    since: JobMarkWire | None = None


@frozen
class ExecParams:
    """What :data:`EXEC` runs: exactly one of ``argv`` and ``command``."""

    argv: tuple[str, ...] | None = None
    command: str | None = None
    channel: str | None = None
    cwd: str | None = None
    env: dict[str, str] | None = None
    timeout: float | None = None
    headBytes: int | None = None
    tailBytes: int | None = None


@frozen
class ExecResult:
    channel: str


def exec_problem(p: ExecParams) -> tuple[str, str] | None:
    """Where and why ``p`` is refused (the path under ``$.params``), or None."""
    if (p.argv is None) == (p.command is None):
        return "argv", "give exactly one of argv and command"
    if p.argv is not None:
        if not p.argv or not p.argv[0]:
            return "argv", "argv must name a program"
        if len(p.argv) > MAX_EXEC_ARGS or sum(map(len, p.argv)) > MAX_EXEC_CHARS:
            return "argv", f"at most {MAX_EXEC_ARGS} arguments and {MAX_EXEC_CHARS} characters"
    if p.command is not None and not 0 < len(p.command) <= MAX_EXEC_CHARS:
        return "command", f"a command line of 1 to {MAX_EXEC_CHARS} characters"
    if p.channel is not None and (
        not p.channel.startswith("ahp-terminal:/")
        or len(p.channel) > 200
        or URI_CONTROLS.search(p.channel)
    ):
        return "channel", "an ahp-terminal:/ URI of at most 200 characters, no control characters"
    if p.env is not None and (
        len(p.env) > MAX_EXEC_ENV or sum(len(k) + len(v) for k, v in p.env.items()) > MAX_EXEC_CHARS
    ):
        return "env", f"at most {MAX_EXEC_ENV} variables and {MAX_EXEC_CHARS} characters"
    if p.timeout is not None and not 0 < p.timeout <= MAX_EXEC_TIMEOUT:
        return "timeout", f"seconds above 0, at most {MAX_EXEC_TIMEOUT:g}"
    for name, value in (("headBytes", p.headBytes), ("tailBytes", p.tailBytes)):
        if value is not None and not 0 <= value <= MAX_EXEC_BUDGET:
            return name, f"between 0 and {MAX_EXEC_BUDGET}"
    return None


@frozen
class SignalParams:
    channel: str
    signal: str
    since: JobMarkWire | None = None


@frozen
class TtyStatusWire:
    foregroundPgrp: int
    #: The shell's own process group is in the foreground (no command job runs).
    shellForeground: bool
    echo: bool
    readers: tuple[int, ...]
    #: Sleeping in poll/select/epoll on a set that could not be seen.
    pollers: tuple[int, ...]
    unread: int
    #: Sleeping in poll/select/epoll on a set that includes the terminal.
    ttyPollers: tuple[int, ...] = ()
    #: The command lines of the readers (else tty pollers, else pollers).
    programs: tuple[str, ...] = ()
    #: The shell's process runs another command line than it was started with (a
    #: command ``exec``-ed another program); absent when not known.
    shellReplaced: bool | None = None
    #: The tty is in canonical (line) mode (a line editor turns it off); absent when
    #: not known.
    canonical: bool | None = None
    #: The host injected its shell integration into the terminal's shell: its command
    #: marks are signed with a nonce, program output cannot forge them (``False``: the
    #: terminal's command detection, if any, comes from marks anything may print);
    #: absent when not known.
    integrated: bool | None = None
    #: The terminal's shell, in the foreground, has its standard error on the terminal
    #: (bash draws its prompt there: ``false`` after ``exec 2>/dev/null``); absent when
    #: not known.
    shellStderrTty: bool | None = None


@frozen
class TtyStatusResult:
    status: TtyStatusWire | None


@frozen
class JobMarkResult:
    mark: JobMarkWire | None


@frozen
class JobWire:
    pid: int
    commandLine: str


@frozen
class JobsResult:
    jobs: tuple[JobWire, ...]
    truncated: bool


@frozen
class SignalResult:
    #: The process groups signalled.
    groups: tuple[int, ...]
    #: The shell was in the foreground: it was sent Ctrl-C instead.
    shellForeground: bool


def mark_problem(mark: JobMarkWire) -> tuple[str, str] | None:
    """What is wrong with a client's mark, as (JSON path below the mark, message)."""
    if len(mark.known) > MAX_MARK_PIDS:
        return "known", f"at most {MAX_MARK_PIDS} pids"
    for index, pid in enumerate(mark.known):
        if not 1 <= pid <= MAX_PID:
            return f"known[{index}]", f"a pid is between 1 and {MAX_PID}"
    if not 0 <= mark.tick <= MAX_TICK:
        return "tick", f"a clock tick is between 0 and {MAX_TICK}"
    return None
