"""What the processes on a terminal are doing, read from ``/proc`` (Linux).

Why: "is this command waiting for input?" is usually guessed from silence,
which cannot tell a prompt from a slow build. The kernel knows: a process that
waits for a line from its terminal sleeps in a ``read`` of the tty
(``/proc/PID/syscall`` names the system call and its fd; ``/proc/PID/wchan``
shows ``n_tty_read`` or ``wait_woken``). The terminal's *foreground process
group* (``tcgetpgrp`` on the pty master) is the job that would get the input,
and the tty's ``ECHO`` flag is off while a password is read.

The terminal's shell process itself can be replaced: a command that ``exec``-s
another program keeps the shell's pid, under another command line
(:func:`replaced`, :attr:`TtyStatus.shell_replaced`).

The same scan finds what a command left behind: processes of the terminal's
session (the shell is its leader) other than the shell. It is the one scan of
``/proc`` in :mod:`ahp.pty`: a session's members (:func:`session_members`, what
:mod:`ahp.pty.reap` sweeps) and a process's descendants (:func:`descendants`, what
:mod:`ahp.pty.orphans` kills at exit) are read from it too.

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
    "replaced",
    "session_members",
    "JobMark",
    "children",
    "descendants",
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
_POLL_WCHANS: Final = frozenset(
    {"do_select", "do_sys_poll", "poll_schedule_timeout", "ep_poll", "do_epoll_wait"}
)
#: Which multiplexing call each number is (its arguments differ), per machine.
_POLL_KINDS: Final = {
    "x86_64": {
        7: "poll",
        271: "poll",
        23: "select",
        270: "select",
        232: "epoll",
        281: "epoll",
        441: "epoll",
    },
    "aarch64": {73: "poll", 72: "select", 22: "epoll", 441: "epoll"},
}.get(platform.machine(), {})
#: ``/dev/tty``'s device number: a process reading it reads its controlling terminal.
DEV_TTY: Final = os.makedev(5, 0)
#: Threads of one process looked at for a poll of the terminal (Node has a handful).
MAX_THREADS: Final = 64
#: Most bytes read from a process's memory for one poll set (4096 pollfds).
MAX_POLL_READ: Final = 32 * 1024
#: Most bytes read of one epoll instance's fdinfo (a line per watched fd).
MAX_FDINFO: Final = 256 * 1024
#: Clock ticks per second (``/proc/PID/stat``'s times are in ticks).
_CLK_TCK: Final = os.sysconf("SC_CLK_TCK")
#: Bound on the command line reported for one process.
MAX_CMDLINE: Final = 4096


@attrs.frozen
class ProcessInfo:
    """Fields of ``/proc/PID/stat`` this module uses."""

    pid: int
    state: str
    ppid: int
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
            ppid=int(fields[1]),
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
    """Every process in ``/proc`` (zombies included; none without procfs): the scan."""
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


def session_members(sid: int) -> list[int]:
    """Pids of the live (not zombie) processes whose session id is ``sid``."""
    return [info.pid for info in _all_processes() if info.session == sid and _live(info)]


def descendants(root: int) -> list[int]:
    """Pids of every live process below ``root`` (zombies left out), parents before
    their children."""
    below: dict[int, list[int]] = {}
    for info in _all_processes():
        if _live(info):
            below.setdefault(info.ppid, []).append(info.pid)
    found: list[int] = []
    stack = [root]
    while stack:
        for pid in below.get(stack.pop(), ()):
            found.append(pid)
            stack.append(pid)
    return found


def _live(info: ProcessInfo) -> bool:
    """Not a zombie, not dead (``Z``, ``X``)."""
    return info.state not in ("Z", "X")


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


def _syscall(pid: int, tid: int | None = None) -> list[int] | None:
    """``/proc/PID/syscall`` (or a thread's) as numbers: the call, then its arguments;
    ``None`` when not in a system call or unreadable."""
    path = f"/proc/{pid}/syscall" if tid is None else f"/proc/{pid}/task/{tid}/syscall"
    data = _read(path)
    if not data:
        return None
    fields = data.split()
    try:
        return [int(fields[0])] + [int(f, 16) for f in fields[1:7]]
    except (ValueError, IndexError):
        return None


def _on_tty(pid: int, fd: int, tty_nr: int) -> bool:
    """Whether ``pid``'s ``fd`` is its terminal: the tty itself or ``/dev/tty``."""
    try:
        rdev = os.stat(f"/proc/{pid}/fd/{fd}").st_rdev
    except OSError:
        return False
    return rdev in (tty_nr, DEV_TTY)


def _wchan(pid: int, tid: int | None = None) -> str:
    path = f"/proc/{pid}/wchan" if tid is None else f"/proc/{pid}/task/{tid}/wchan"
    data = _read(path)
    return data.decode(errors="replace").strip() if data else ""


def _threads(pid: int) -> list[int]:
    """The process's threads, the main one first, at most :data:`MAX_THREADS` of them."""
    try:
        tids = sorted(int(t) for t in os.listdir(f"/proc/{pid}/task") if t.isdigit())
    except OSError:
        return [pid]
    tids.sort(key=lambda t: t != pid)
    return tids[:MAX_THREADS]


def reads_tty(info: ProcessInfo) -> bool:
    """Whether the process sleeps in a read of its controlling terminal (its standard
    input or ``/dev/tty``, as ``getpass``, ``sudo`` and ``ssh`` read passwords)."""
    if info.state != "S" or info.tty_nr == 0:
        return False
    if _wchan(info.pid) in TTY_READ_WCHANS:
        return True
    if _READ_SYSCALL is None:
        return False
    call = _syscall(info.pid)
    return call is not None and call[0] == _READ_SYSCALL and _on_tty(info.pid, call[1], info.tty_nr)


def polls(info: ProcessInfo) -> bool:
    """Whether the process sleeps in poll, select or epoll (on what: :func:`polled_fds`)."""
    if info.state != "S":
        return False
    if _wchan(info.pid) in _POLL_WCHANS:
        return True
    call = _syscall(info.pid)
    return call is not None and call[0] in _POLL_SYSCALLS


def _read_memory(pid: int, address: int, size: int) -> bytes | None:
    """``size`` bytes of ``pid``'s memory (``/proc/PID/mem``: a child of ours, or root)."""
    if size <= 0 or size > MAX_POLL_READ:
        return None
    try:
        fd = os.open(f"/proc/{pid}/mem", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        return os.pread(fd, size, address)
    except OSError:
        return None
    finally:
        os.close(fd)


def _epoll_targets(pid: int, epfd: int) -> set[int] | None:
    """The fds an epoll instance watches (``/proc/PID/fdinfo/EPFD``'s ``tfd:`` lines)."""
    data = _read(f"/proc/{pid}/fdinfo/{epfd}", MAX_FDINFO)
    if data is None:
        return None
    targets = set()
    for line in data.splitlines():
        if line.startswith(b"tfd:"):
            try:
                targets.add(int(line.split()[1]))
            except (ValueError, IndexError):
                continue
    return targets


def polled_fds(pid: int, tid: int | None = None) -> set[int] | None:
    """The fds a thread sleeping in poll/select/epoll waits on; ``None`` when it is
    not in one of them or the set cannot be read."""
    call = _syscall(pid, tid)
    if call is None or len(call) < 4:
        return None
    number = call[0]
    kind = _POLL_KINDS.get(number)
    if kind == "epoll":
        return _epoll_targets(pid, call[1])
    if kind == "poll":
        nfds = call[2]
        raw = _read_memory(pid, call[1], nfds * 8)
        if raw is None or len(raw) < nfds * 8:
            return None
        return {
            int.from_bytes(raw[i : i + 4], sys.byteorder, signed=True)
            for i in range(0, nfds * 8, 8)
        } - {-1}
    if kind == "select":
        nfds, readfds = call[1], call[2]
        if readfds == 0:
            return set()
        size = (nfds + 63) // 64 * 8
        raw = _read_memory(pid, readfds, size)
        if raw is None:
            return None
        bits = int.from_bytes(raw, "little")
        return {fd for fd in range(nfds) if bits >> fd & 1}
    return None


def polls_tty(info: ProcessInfo) -> bool | None:
    """Whether one of the process's threads sleeps in poll/select/epoll on a set that
    includes its terminal: ``True``/``False`` when the set was seen, ``None`` when a
    thread polls on a set that cannot be seen."""
    if info.state != "S" or info.tty_nr == 0:
        return False
    unseen = False
    for tid in _threads(info.pid):
        fds = polled_fds(info.pid, tid)
        if fds is None:
            call = _syscall(info.pid, tid)
            if call is not None and call[0] in _POLL_SYSCALLS:
                unseen = True
            continue
        if any(_on_tty(info.pid, fd, info.tty_nr) for fd in fds):
            return True
    return None if unseen else False


@attrs.frozen
class TtyStatus:
    """The state of a pty as its processes see it.

    Attributes:
        foreground_pgrp: the foreground process group (0: none).
        echo: the tty echoes input (``False`` while a password is read).
        readers: pids of the foreground group that sleep in a read of the tty
            (standard input or ``/dev/tty``).
        unread: bytes the processes wrote that the master has not read yet
            (``FIONREAD``): while there are some, nobody can conclude "quiet".
        pollers: pids of the foreground group that sleep in poll/select/epoll on a
            set that could not be seen (maybe the terminal, maybe anything else).
        tty_pollers: pids that sleep in poll/select/epoll on a set that includes the
            terminal.
        programs: the command lines of ``readers``, else ``tty_pollers``, else
            ``pollers`` (at most :data:`MAX_PROGRAMS`).
        shell_foreground: the terminal's shell itself is the foreground job (no
            command runs); ``None`` when the shell is not known here.
        shell_replaced: the terminal's shell process runs another command line than
            it was started with (a command ``exec``-ed another program: ``exec bash``);
            ``None`` when that is not known here.
        canonical: the tty is in canonical (line) mode, ``ICANON``: a plain ``read``
            of a line; a line editor (readline, zle, fish's) at its prompt turns it off,
            with echo; ``None`` when that is not known here (an older server).
        shell_stderr_tty: the terminal's shell, in the foreground, has its standard
            error on the terminal (the tty, or ``/dev/tty``): bash draws its prompt and
            line there, so ``False`` (``exec 2>/dev/null``) means its prompt is never
            seen; ``None`` when not known (not in the foreground, an older server).
    """

    foreground_pgrp: int
    echo: bool
    readers: tuple[int, ...]
    unread: int = 0
    pollers: tuple[int, ...] = ()
    tty_pollers: tuple[int, ...] = ()
    programs: tuple[str, ...] = ()
    shell_foreground: bool | None = None
    shell_replaced: bool | None = None
    canonical: bool | None = None
    shell_stderr_tty: bool | None = None


#: Command lines reported in :attr:`TtyStatus.programs`.
MAX_PROGRAMS: Final = 8


def _unread(master_fd: int) -> int:
    try:
        buf = fcntl.ioctl(master_fd, termios.FIONREAD, b"\0\0\0\0")
    except OSError:
        return 0
    return int.from_bytes(buf, sys.byteorder)


def replaced(pid: int, launch_line: str) -> bool | None:
    """Whether process ``pid`` runs another command line than ``launch_line`` (the
    arguments it was started with, joined by spaces): it ``exec``-ed another program.
    ``None`` when its command line cannot be read (it exited)."""
    data = _read(f"/proc/{pid}/cmdline", MAX_CMDLINE)
    if not data:
        return None
    line = data.rstrip(b"\0").replace(b"\0", b" ").decode("utf-8", "replace")
    if len(data) >= MAX_CMDLINE:  # cut short: what was read must begin the launch line
        return not launch_line.startswith(line)
    return line != launch_line


def tty_status(
    master_fd: int, shell_pid: int | None = None, launch_line: str | None = None
) -> TtyStatus | None:
    """What the pty behind ``master_fd`` is doing; ``None`` when it cannot be read.
    ``shell_pid``: the terminal's shell (its process group leader), if known;
    ``launch_line``: the arguments it was started with, joined by spaces, if known."""
    try:
        pgrp = os.tcgetpgrp(master_fd)
        lflag = termios.tcgetattr(master_fd)[3]
    except (OSError, termios.error):
        return None
    echo = bool(lflag & termios.ECHO)
    canonical = bool(lflag & termios.ICANON)
    unread = _unread(master_fd)
    shell_foreground = None if shell_pid is None or pgrp <= 0 else pgrp == shell_pid
    shell_replaced = (
        None if shell_pid is None or launch_line is None else replaced(shell_pid, launch_line)
    )
    if pgrp <= 0:
        return TtyStatus(
            foreground_pgrp=0,
            echo=echo,
            readers=(),
            unread=unread,
            shell_foreground=shell_foreground,
            shell_replaced=shell_replaced,
            canonical=canonical,
        )
    group = [info for info in _all_processes() if info.pgrp == pgrp]
    readers = tuple(sorted(info.pid for info in group if reads_tty(info)))
    tty_pollers: tuple[int, ...] = ()
    pollers: tuple[int, ...] = ()
    if not readers:
        seen = {info.pid: polls_tty(info) for info in group if polls(info)}
        tty_pollers = tuple(sorted(pid for pid, on in seen.items() if on))
        if not tty_pollers:
            pollers = tuple(sorted(pid for pid, on in seen.items() if on is None))
    shown = readers or tty_pollers or pollers
    shell = next((info for info in group if info.pid == shell_pid), None)
    return TtyStatus(
        foreground_pgrp=pgrp,
        echo=echo,
        readers=readers,
        unread=unread,
        pollers=pollers,
        tty_pollers=tty_pollers,
        programs=tuple(command_line(pid) for pid in shown[:MAX_PROGRAMS]),
        shell_foreground=shell_foreground,
        shell_replaced=shell_replaced,
        canonical=canonical,
        shell_stderr_tty=None if shell is None else _on_tty(shell.pid, 2, shell.tty_nr),
    )
