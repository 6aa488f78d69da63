"""Orphans ``serve`` adopts: reaped while it runs, killed when it exits.

Why: a process whose parent exits is handed to the nearest *child subreaper*
above it, else to PID 1 of its PID namespace. A sidecar run as PID 1 of its
container (``exec python -m ahp serve``, no init) is that PID 1: every command
that detaches from a terminal (``(cmd &)``, ``setsid cmd &``, a daemon's double
fork) becomes its child when its parent exits, and stays a zombie once it exits
unless the sidecar reaps it (probe M: 90 zombies after five ``ahp run`` of
short-lived background jobs, kept until the sidecar exited). ``serve`` also makes
itself a subreaper (:func:`adopting_orphans`; ``prctl(PR_SET_CHILD_SUBREAPER)``), so
that what detaches from its terminals stays under it wherever it runs, and can be
killed when it exits: a ``setsid`` daemon started from a terminal left a drained
sidecar running for good.

How: on ``SIGCHLD`` (and again a little later when a round stops early)
:func:`reap_zombies` peeks at the next exited child with
``waitid(P_ALL, WEXITED | WNOHANG | WNOWAIT)``, which takes nothing, and reaps it
with ``waitpid(pid)`` only if it is not one of ours (:func:`ahp.pty.process.own_child`:
our children's statuses belong to their :class:`~ahp.pty.process.Process`, which
reaps one the peek finds and keeps its status). Our children are forked from the
loop's thread, and this runs there too, so a child cannot exit between its fork
and its listing. At most :data:`REAP_BATCH` orphans are reaped per round, with a
checkpoint between rounds. When ``serve`` exits, :func:`kill_adopted` stops and
kills every descendant left (none of ours is: every terminal is disposed first;
:func:`ahp.pty.procfs.descendants` finds them) and reaps what it adopted.

Limits: which terminal an adopted orphan came from is lost when it is reparented
(a ``setsid`` daemon has a session of its own too), so it is not killed when that
terminal is disposed, only when the server exits. Only children started by
:mod:`ahp.pty` are known as ours: code in the same process that starts children
some other way and waits for them by pid may find them reaped here (``serve``
starts none).
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import signal
import time
from collections.abc import AsyncIterator
from typing import Final

import trio

from ahp.pty.process import own_child
from ahp.pty.procfs import descendants

__all__ = [
    "REAP_BATCH",
    "adopting_orphans",
    "descendants",
    "kill_adopted",
    "reap_orphans",
    "reap_zombies",
    "set_subreaper",
]

log = logging.getLogger("ahp.pty")

#: Most orphans reaped per round (then a checkpoint).
REAP_BATCH: Final = 256
#: Seconds before another round when one stopped early (a batch full, or a child of
#: ours not reapable yet).
RETRY_DELAY: Final = 0.1
#: Longest time (seconds) :func:`kill_adopted` waits for what it killed to be reaped.
KILL_WAIT: Final = 5.0

_PR_SET_CHILD_SUBREAPER: Final = 36
_PR_GET_CHILD_SUBREAPER: Final = 37


def _prctl(option: int, arg: object) -> bool:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(option, arg, 0, 0, 0)) == 0
    except (OSError, AttributeError):  # not Linux, or no prctl
        return False


def is_subreaper() -> bool:
    """Whether this process is a child subreaper (False where that cannot be told)."""
    value = ctypes.c_int(0)
    return _prctl(_PR_GET_CHILD_SUBREAPER, ctypes.pointer(value)) and value.value != 0


def set_subreaper(on: bool) -> bool:
    """Make this process a child subreaper (or no longer one); whether the kernel took it."""
    return _prctl(_PR_SET_CHILD_SUBREAPER, 1 if on else 0)


def reap_zombies(limit: int = REAP_BATCH) -> tuple[int, bool]:
    """Reap exited children that are not ours, up to ``limit``; no wait.

    Returns how many were reaped, and whether the round is complete (False: stopped
    at ``limit``, or at a child of ours that could not be reaped now: try again).
    A child of ours found exited is reaped through its
    :class:`~ahp.pty.process.Process` (its owner gets its status) and not counted.
    Call it from the thread that starts children (see the module docstring).
    """
    reaped = 0
    while reaped < limit:
        try:
            info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:  # no children at all
            return reaped, True
        if info is None or info.si_pid == 0:  # none has exited
            return reaped, True
        pid = info.si_pid
        ours = own_child(pid)
        if ours is not None:
            if ours.returncode is None:  # (its Popen is busy: another thread waits on it)
                return reaped, False
            continue
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)  # a zombie: returns at once
        reaped += 1
    return reaped, False


async def reap_orphans(*, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
    """Reap every exited child that is not ours, on each ``SIGCHLD``, until cancelled.

    Installs a ``SIGCHLD`` handler (trio's signal receiver: main thread only; the
    previous disposition is restored on exit; ``exec`` resets it in children).
    Cancellation: at any checkpoint; nothing is half done."""
    with trio.open_signal_receiver(signal.SIGCHLD) as signals:
        task_status.started()
        waiting = signals.__aiter__()
        complete = True
        while True:
            if complete:
                await waiting.__anext__()
            else:
                with trio.move_on_after(RETRY_DELAY):
                    await waiting.__anext__()
            reaped, complete = reap_zombies()
            if reaped:
                log.debug("reaped %d orphan(s)", reaped)


def kill_adopted(*, wait: float = KILL_WAIT) -> int:
    """Stop, then kill, every process left below this one, and reap the orphans;
    how many were killed. For a server whose own children are all gone (its
    terminals disposed): any child of ours still running and its descendants are
    left alone.

    Blocking: a ``/proc`` scan per round, and up to ``wait`` seconds for what was
    killed to be reaped (``wait=0``: no reaping, for a process about to exit)."""
    me = os.getpid()
    killed: set[int] = set()
    deadline = time.monotonic() + wait
    for _ in range(10):  # (what is stopped cannot fork: one round is the rule)
        spared = {pid for pid in descendants(me) if own_child(pid) is not None}
        for pid in list(spared):
            spared.update(descendants(pid))
        left = [pid for pid in descendants(me) if pid not in spared and pid not in killed]
        if not left:
            break
        for pid in left:
            _signal(pid, signal.SIGSTOP)
        for pid in left:
            _signal(pid, signal.SIGKILL)
        killed.update(left)
    if killed:
        log.info("killed %d process(es) left behind by the terminals", len(killed))
    if wait > 0:
        while True:
            _, complete = reap_zombies()
            if complete and not killed.intersection(descendants(me)):
                break
            if time.monotonic() > deadline:
                break
            time.sleep(0.01)
    return len(killed)


def _signal(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)


@contextlib.asynccontextmanager
async def adopting_orphans() -> AsyncIterator[None]:
    """For ``serve``'s whole run: become a child subreaper, reap adopted orphans while
    inside, and on the way out kill what is left below (:func:`kill_adopted`), then
    restore the subreaper setting found. Enter it before the host, so that it is left
    after the host's terminals are disposed."""
    was_subreaper = is_subreaper()
    if not set_subreaper(True):
        log.warning(
            "cannot become a child subreaper: processes that detach from the "
            "terminals are not killed at exit"
        )
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(reap_orphans)
            try:
                yield
            finally:
                nursery.cancel_scope.cancel()
    finally:
        # (Blocking /proc scans and waits of up to KILL_WAIT: in a worker thread, not on
        # the loop, shielded so that a cancelled exit still sweeps.)
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(kill_adopted)
        if not was_subreaper:
            set_subreaper(False)
