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

A mark is data the client holds, not a server-side handle: a forged one can
only change which jobs *of that terminal's session* are listed or signalled.
Its size is bounded (:data:`MAX_MARK_PIDS`), like every list in an answer.

Pure: types, names and bounds, no I/O.
"""

from __future__ import annotations

from typing import Final

from attrs import frozen

__all__ = [
    "JOBS",
    "JOB_MARK",
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
    "JobMarkResult",
    "JobMarkWire",
    "JobWire",
    "JobsParams",
    "JobsResult",
    "SignalParams",
    "SignalResult",
    "TtyStatusResult",
    "TtyStatusWire",
    "mark_problem",
]

TTY_STATUS: Final = "x-ahp-terminals/ttyStatus"
JOB_MARK: Final = "x-ahp-terminals/jobMark"
JOBS: Final = "x-ahp-terminals/jobs"
SIGNAL: Final = "x-ahp-terminals/signal"
METHODS: Final = (TTY_STATUS, JOB_MARK, JOBS, SIGNAL)

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
