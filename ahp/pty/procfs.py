"""What the processes on a terminal are doing, read from ``/proc`` (Linux).

Why: "is this command waiting for input?" is usually guessed from silence,
which cannot tell a prompt from a slow build. The kernel knows: a process that
waits for a line from its terminal sleeps in a ``read`` of the tty
(``/proc/PID/syscall`` names the system call and its fd; ``/proc/PID/wchan``
shows ``n_tty_read`` or ``wait_woken``). The terminal's *foreground process
group* (``tcgetpgrp`` on the pty master) is the job that would get the input,
and the tty's ``ECHO`` flag is off while a password is read.

The same scan finds what a command left behind: processes of the terminal's
session (the shell is its leader) other than the shell.

Everything here is synchronous and cheap (a few small ``/proc`` reads per
process of the session); missing files (a process that just exited, another
kernel) read as "no evidence". Linux only: elsewhere every function answers
"nothing seen".
"""

from __future__ import annotations

import fcntl
import os
import platform
import sys
import termios
from typing import Final

import attrs

__all__ = [
    "TTY_READ_WCHANS",
    "ProcessInfo",
    "TtyStatus",
    "process_info",
    "JobMark",
    "children",
    "job_mark",
    "jobs_since",
    "tty_status",
]

#: Kernel functions a process sleeps in while reading a tty (``/proc/PID/wchan``).
#: ``wait_woken`` alone is not enough (sockets sleep there too): it counts only
#: together with a ``read`` of the terminal in ``/proc/PID/syscall``.
TTY_READ_WCHANS: Final = frozenset({"n_tty_read"})
#: The ``read`` system call's number, per machine (``/proc/PID/syscall``'s first field).
_READ_SYSCALL: Final = {"x86_64": 0, "aarch64": 63, "riscv64": 63, "i686": 3, "armv7l": 3}.get(
    platform.machine()
)
#: The multiplexing waits (poll, select, epoll), per machine: a program that waits for
#: its terminal this way (Node's readline, vim) cannot be told from one waiting for
#: anything else; the caller weighs it together with the screen.
_POLL_SYSCALLS: Final = {
    "x86_64": frozenset({7, 23, 232, 270, 271, 281, 441}),
    "aarch64": frozenset({22, 72, 73, 441}),
}.get(platform.machine(), frozenset())
_POLL_WCHANS: Final = frozenset({"do_select", "do_sys_poll", "poll_schedule_timeout", "ep_poll"})
#: Clock ticks per second (``/proc/PID/stat``'s times are in ticks).
_CLK_TCK: Final = os.sysconf("SC_CLK_TCK")
#: Bound on the command line reported for one process.
MAX_CMDLINE: Final = 4096


@attrs.frozen
class ProcessInfo:
    """Fields of ``/proc/PID/stat`` this module uses."""

    pid: int
    state: str
    pgrp: int
    session: int
    tty_nr: int
    #: When the process started, in clock ticks since boot.
    starttime: int


def _read(path: str, limit: int = 4096) -> bytes | None:
    """One ``read`` of a small ``/proc`` file (``os.open``: no buffered file object)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        return os.read(fd, limit)
    except OSError:
        return None
    finally:
        os.close(fd)


def process_info(pid: int) -> ProcessInfo | None:
    """``/proc/PID/stat``, or ``None`` when the process is gone."""
    data = _read(f"/proc/{pid}/stat")
    if data is None:
        return None
    try:
        fields = data[data.rindex(b")") + 2 :].split()
        return ProcessInfo(
            pid=pid,
            state=fields[0].decode(),
            pgrp=int(fields[2]),
            session=int(fields[3]),
            tty_nr=int(fields[4]),
            starttime=int(fields[19]),
        )
    except (ValueError, IndexError):
        return None


def command_line(pid: int) -> str:
    """The process's arguments joined by spaces (its name in brackets if it has none)."""
    data = _read(f"/proc/{pid}/cmdline", MAX_CMDLINE)
    if data:
        return data.rstrip(b"\0").replace(b"\0", b" ").decode("utf-8", "replace")
    comm = _read(f"/proc/{pid}/comm")
    return f"[{comm.decode('utf-8', 'replace').strip()}]" if comm else f"[{pid}]"


def _all_processes() -> list[ProcessInfo]:
    try:
        names = os.listdir("/proc")
    except OSError:
        return []
    infos = []
    for name in names:
        if name.isdigit():
            info = process_info(int(name))
            if info is not None:
                infos.append(info)
    return infos


@attrs.frozen
class JobMark:
    """What a session's jobs were at one moment (see :func:`jobs_since`).

    Attributes:
        known: the leader's children then.
        tick: the time then, in clock ticks since boot.
    """

    known: frozenset[int]
    tick: int


def _boot_ticks() -> int:
    data = _read("/proc/uptime")
    if not data:
        return 0
    return int(float(data.split()[0]) * _CLK_TCK)


def children(pid: int) -> frozenset[int]:
    """The children of ``pid``'s main thread (``/proc/PID/task/PID/children``)."""
    data = _read(f"/proc/{pid}/task/{pid}/children", 64 * 1024)
    return frozenset(int(x) for x in data.split()) if data else frozenset()


def job_mark(session: int) -> JobMark:
    """Two small reads, no scan: enough for :func:`jobs_since` to tell new jobs."""
    return JobMark(known=children(session), tick=_boot_ticks())


def jobs_since(session: int, mark: JobMark | None = None) -> dict[int, tuple[int, str]]:
    """Live processes of ``session`` outside its leader's process group, started
    since ``mark`` (all of them without one): pid → (process group, command line).

    Why outside the leader's group: a shell with job control puts every job it
    starts (foreground or ``&``) in a process group of its own, while what it runs
    for itself — command substitutions in a prompt hook, for instance — stays in
    its own group. So these are the jobs, and nothing the shell does in passing.
    "Started since": not a child of the leader at the mark, and started no earlier
    than the mark's clock tick (a job started in the same tick as the mark by an
    earlier command and since orphaned would count as new: 1/``CLK_TCK`` s).
    """
    return {
        info.pid: (info.pgrp, command_line(info.pid))
        for info in _all_processes()
        if info.session == session
        and info.pgrp != session
        and info.state not in "ZX"
        and (mark is None or (info.pid not in mark.known and info.starttime >= mark.tick))
    }


def reads_tty(info: ProcessInfo) -> bool:
    """Whether the process sleeps in a read of its controlling terminal."""
    if info.state != "S" or info.tty_nr == 0:
        return False
    wchan = _read(f"/proc/{info.pid}/wchan")
    if wchan is not None and wchan.decode(errors="replace").strip() in TTY_READ_WCHANS:
        return True
    if _READ_SYSCALL is None:
        return False
    syscall = _read(f"/proc/{info.pid}/syscall")
    if not syscall:
        return False
    fields = syscall.split()
    try:
        if int(fields[0]) != _READ_SYSCALL:
            return False
        fd = int(fields[1], 16)
        return os.stat(f"/proc/{info.pid}/fd/{fd}").st_rdev == info.tty_nr
    except (ValueError, IndexError, OSError):
        return False


def polls(info: ProcessInfo) -> bool:
    """Whether the process sleeps in poll, select or epoll (on what, cannot be seen)."""
    if info.state != "S":
        return False
    wchan = _read(f"/proc/{info.pid}/wchan")
    if wchan is not None and wchan.decode(errors="replace").strip() in _POLL_WCHANS:
        return True
    syscall = _read(f"/proc/{info.pid}/syscall")
    if not syscall:
        return False
    try:
        return int(syscall.split()[0]) in _POLL_SYSCALLS
    except ValueError:
        return False


@attrs.frozen
class TtyStatus:
    """The state of a pty as its processes see it.

    Attributes:
        foreground_pgrp: the foreground process group (0: none).
        echo: the tty echoes input (``False`` while a password is read).
        readers: pids of the foreground group that sleep in a read of the tty.
        unread: bytes the processes wrote that the master has not read yet
            (``FIONREAD``): while there are some, nobody can conclude "quiet".
        pollers: pids of the foreground group that sleep in poll/select/epoll
            (maybe on the terminal, maybe on anything else).
    """

    foreground_pgrp: int
    echo: bool
    readers: tuple[int, ...]
    unread: int = 0
    pollers: tuple[int, ...] = ()


def _unread(master_fd: int) -> int:
    try:
        buf = fcntl.ioctl(master_fd, termios.FIONREAD, b"\0\0\0\0")
    except OSError:
        return 0
    return int.from_bytes(buf, sys.byteorder)


def tty_status(master_fd: int) -> TtyStatus | None:
    """What the pty behind ``master_fd`` is doing; ``None`` when it cannot be read."""
    try:
        pgrp = os.tcgetpgrp(master_fd)
        lflag = termios.tcgetattr(master_fd)[3]
    except (OSError, termios.error):
        return None
    echo = bool(lflag & termios.ECHO)
    unread = _unread(master_fd)
    if pgrp <= 0:
        return TtyStatus(foreground_pgrp=0, echo=echo, readers=(), unread=unread)
    group = [info for info in _all_processes() if info.pgrp == pgrp]
    readers = tuple(sorted(info.pid for info in group if reads_tty(info)))
    pollers = () if readers else tuple(sorted(info.pid for info in group if polls(info)))
    return TtyStatus(
        foreground_pgrp=pgrp, echo=echo, readers=readers, unread=unread, pollers=pollers
    )
