"""A started child process and its reaping: :func:`start_process`, :class:`Process`.

Why not ``trio.lowlevel.open_process``: it runs ``Popen`` in one of trio's worker
threads, and the kernel sends a child its death signal (``PR_SET_PDEATHSIG``) when
the *thread* that forked it exits, not the process: trio's idle workers exit after
about ten seconds, and the child would be killed then. :func:`start_process` forks
from the calling thread, the one that runs the event loop (the main thread in
``serve``), so a child's death signal fires when that thread ends: when the server
dies, however it dies (``SIGKILL`` included; see :func:`death_signal_launcher`).
``Popen`` with ``close_fds`` and no ``preexec_fn`` uses ``vfork``: the loop is held
until the child has called ``exec``, a fraction of a millisecond (terminal creation
took as long as with the worker thread: 50 creations, median 1-2 ms either way).

Reaping: :meth:`Process.wait` sleeps on a pidfd (Linux 5.3+; else it polls every
:data:`POLL_INTERVAL` seconds), then takes the status with ``waitpid(pid)``, never
``waitpid(-1)``. Every running child started here is listed by pid
(:func:`own_child`), so that :mod:`ahp.pty.orphans`, which reaps the orphans a
sidecar adopts, never takes the status of one of ours: it reaps ours through
their :class:`Process`, which keeps the status for its owner.

Ownership: the :class:`Process` owns the ``Popen`` and the pidfd; the pidfd is
closed, and the pid leaves the list, once the status is known.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import subprocess
import weakref
from collections.abc import Mapping, Sequence
from typing import Final

import trio

__all__ = ["POLL_INTERVAL", "Process", "death_signal_launcher", "own_child", "start_process"]

#: Seconds between two polls of a child's status where pidfds are missing.
POLL_INTERVAL: Final = 0.05

#: Our running children by pid (weakly: a lost Process is reaped as an orphan).
_ours: weakref.WeakValueDictionary[int, Process] = weakref.WeakValueDictionary()


def own_child(pid: int) -> Process | None:
    """The :class:`Process` of ``pid`` if it is a child started here whose status is
    not taken yet, else None."""
    return _ours.get(pid)


class Process:
    """One child started by :func:`start_process`.

    Attributes:
        pid: The child's process id (never signalled by this class).
    """

    def __init__(self, popen: subprocess.Popen[bytes]) -> None:
        """Take ownership of ``popen``; use :func:`start_process` instead."""
        self._popen: Final = popen
        self.pid: Final = popen.pid
        self._pidfd = -1
        with contextlib.suppress(OSError, AttributeError):  # old kernel / Python: poll instead
            self._pidfd = os.pidfd_open(self.pid)
        self._lock = trio.Lock()  # one waiter on the pidfd at a time
        _ours[self.pid] = self

    def __repr__(self) -> str:
        return f"<Process pid={self.pid} returncode={self._popen.returncode}>"

    @property
    def returncode(self) -> int | None:
        """None while running, else ``>= 0`` the exit code, ``-N`` killed by signal N.

        Reading it reaps the child if it has exited (``waitpid(pid, WNOHANG)``)."""
        status = self._popen.poll()
        if status is not None:
            self._forget()
        return status

    async def wait(self) -> int:
        """Wait for the child to exit, reap it and return :attr:`returncode`.

        Cancellation: safe; the child is left as it is (running, or a zombie)."""
        async with self._lock:
            if self.returncode is None:
                if self._pidfd >= 0:
                    with contextlib.suppress(trio.ClosedResourceError):  # reaped meanwhile
                        await trio.lowlevel.wait_readable(self._pidfd)
                else:
                    while self._popen.poll() is None:  # noqa: ASYNC110 (no pidfd: no event)
                        await trio.sleep(POLL_INTERVAL)
                self._popen.wait()  # it has exited: returns at once
                self._forget()
        status = self._popen.returncode
        assert status is not None
        return status

    def _forget(self) -> None:
        if _ours.get(self.pid) is self:
            del _ours[self.pid]
        fd, self._pidfd = self._pidfd, -1
        if fd >= 0:
            with contextlib.suppress(RuntimeError):  # not inside trio.run: nobody waits
                trio.lowlevel.notify_closing(fd)
            os.close(fd)

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            if self._pidfd >= 0:
                os.close(self._pidfd)


def start_process(
    command: Sequence[str],
    *,
    stdin: int,
    stdout: int,
    stderr: int,
    cwd: str | None,
    env: Mapping[str, str],
    start_new_session: bool,
) -> Process:
    """Fork and exec ``command`` from the calling thread (``close_fds``; no ``preexec_fn``).

    Blocking until the child has called ``exec`` (``vfork``: well under a millisecond).
    Call it from the thread that runs the event loop (see the module docstring).

    Raises:
        OSError, ValueError, subprocess.SubprocessError: As ``subprocess.Popen``
            (a child that failed before ``exec`` has been reaped by it).
    """
    popen = subprocess.Popen(
        list(command),
        stdin=stdin,
        stdout=stdout,
        stderr=stderr,
        close_fds=True,
        cwd=cwd,
        env=dict(env),
        start_new_session=start_new_session,
    )
    return Process(popen)


@functools.cache
def death_signal_launcher() -> tuple[str, ...]:
    """Argv prefix that gives the child ``SIGKILL`` as its death signal, then execs the
    rest in place: ``setpriv --pdeathsig KILL`` (util-linux 2.33+), checked once; ``()``
    where it is missing or too old (the child then outlives a killed server).

    The signal survives the later ``exec``\\ s (``setsid``, the shell); it is cleared
    by a set-user-ID program. A server killed between the fork and ``setpriv``'s
    ``prctl`` (a millisecond) leaves that child running.
    """
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        return ()
    prefix = (os.path.abspath(setpriv), "--pdeathsig", "KILL")
    try:
        done = subprocess.run(
            [*prefix, setpriv, "--version"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return ()
    return prefix if done.returncode == 0 else ()
