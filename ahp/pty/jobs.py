"""The jobs of one terminal's session: what they do, what a command left, signals.

Why here: the pty layer is the only one that calls OS process APIs. A terminal
(:class:`ahp.engine.Terminal`) owns a :class:`Jobs` for its pty child and hands
it out: the agent layer reads waiting-for-input evidence and background jobs
from it (:mod:`ahp.agent`), the server answers the ``x-ahp-terminals/*``
requests with it (:mod:`ahp.server.processes`).

Cost: :meth:`Jobs.tty_status` and :meth:`Jobs.since` scan ``/proc`` (a few small
reads per process: ~0.3 ms each, so 2000 processes held the loop for 645 ms;
issue 25); :meth:`Jobs.mark` is two reads. The ``async`` forms
(:meth:`Jobs.scan_tty_status`, :meth:`Jobs.scan_since`, :meth:`Jobs.settled_since`,
:meth:`Jobs.send_signal`) run the scan in a worker thread (the reads release the
GIL, and the interpreter switches threads every few milliseconds), so a terminal
with a thousand processes costs the event loop nothing noticeable; the server
and the agent layer use those. Ownership: it holds the
child's pid and master fd, never closes them (the :class:`~ahp.pty.Child` does);
:attr:`Jobs.alive` turns false once the terminal says the child has exited.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from typing import Final

import trio

from ahp.pty import procfs

__all__ = ["JOB_SETTLE", "JOB_SETTLE_POLL", "Jobs"]

#: How long a command's jobs may take to ``exec`` before they are reported as they are.
JOB_SETTLE: Final = 0.5
JOB_SETTLE_POLL: Final = 0.02


class Jobs:
    """The session of a pty child whose shell is ``pid`` (the session leader)."""

    def __init__(
        self,
        pid: int,
        master_fd: int,
        alive: Callable[[], bool],
        *,
        launch_line: str | None = None,
    ) -> None:
        self.pid = pid
        #: The shell's arguments as started, joined by spaces (to see it replaced).
        self.launch_line = launch_line
        self._master_fd = master_fd
        self._alive = alive

    @property
    def alive(self) -> bool:
        return self._alive() and self._master_fd >= 0

    def tty_status(self) -> procfs.TtyStatus | None:
        """The pty's foreground job and what it does (``None`` once the child exited)."""
        if not self.alive:
            return None
        return procfs.tty_status(self._master_fd, self.pid, self.launch_line)

    def shell_foreground(self) -> bool | None:
        """Whether the shell itself is the foreground job (one system call); ``None``
        when it cannot be told."""
        if not self.alive:
            return None
        try:
            return os.tcgetpgrp(self._master_fd) == self.pid
        except OSError:
            return None

    async def scan_tty_status(self) -> procfs.TtyStatus | None:
        """:meth:`tty_status`, scanned in a worker thread (off the event loop)."""
        if not self.alive:
            await trio.lowlevel.checkpoint()
            return None
        return await trio.to_thread.run_sync(
            procfs.tty_status, self._master_fd, self.pid, self.launch_line
        )

    async def scan_since(self, mark: procfs.JobMark | None = None) -> dict[int, tuple[int, str]]:
        """:meth:`since`, scanned in a worker thread (off the event loop)."""
        if not self.alive:
            await trio.lowlevel.checkpoint()
            return {}
        return await trio.to_thread.run_sync(procfs.jobs_since, self.pid, mark)

    async def send_signal(
        self, signum: int, mark: procfs.JobMark | None = None
    ) -> tuple[frozenset[int], bool]:
        """:meth:`signal`, scanned and sent from a worker thread (off the event loop)."""
        if not self.alive:
            await trio.lowlevel.checkpoint()
            return frozenset(), True
        return await trio.to_thread.run_sync(self.signal, signum, mark)

    def mark(self) -> procfs.JobMark | None:
        """A cheap mark of the session's jobs now, for :meth:`since`."""
        return procfs.job_mark(self.pid) if self.alive else None

    def since(self, mark: procfs.JobMark | None = None) -> dict[int, tuple[int, str]]:
        """The session's jobs started since ``mark``: pid → (process group, command
        line); see :func:`ahp.pty.procfs.jobs_since`."""
        return procfs.jobs_since(self.pid, mark) if self.alive else {}

    async def settled_since(self, mark: procfs.JobMark | None = None) -> dict[int, str]:
        """:meth:`since` (pid → command line), once the jobs have started their
        programs: a job that still shows the shell's own command line (forked, not
        yet ``exec``-ed) or no arguments (in the middle of ``exec``: ``[sleep]``) is
        looked at again every :data:`JOB_SETTLE_POLL` s, for at most
        :data:`JOB_SETTLE` s (a subshell job ``( … ) &`` keeps the shell's line)."""
        deadline = trio.current_time() + JOB_SETTLE
        while True:
            jobs = {pid: line for pid, (_, line) in (await self.scan_since(mark)).items()}
            shell_line = procfs.command_line(self.pid)
            settled = not any(line == shell_line or line.startswith("[") for line in jobs.values())
            if settled or trio.current_time() >= deadline:
                return jobs
            await trio.sleep(JOB_SETTLE_POLL)

    def signal(
        self, signum: int, mark: procfs.JobMark | None = None
    ) -> tuple[frozenset[int], bool]:
        """Send ``signum`` to the foreground job and every job started since ``mark``,
        each by its whole process group, never to the shell's own group, unless a
        command replaced the shell (``exec``: :attr:`~ahp.pty.procfs.TtyStatus.shell_replaced`)
        and that process is in the foreground: it is the command's process then, and
        signalled too (killing it ends the terminal's process).

        Returns the groups signalled and whether the shell itself (not replaced) was in
        the foreground (a builtin such as ``read``: the caller types Ctrl-C instead).
        Once the child exited: nothing signalled, and ``True``.
        """
        status = self.tty_status()
        if status is None:
            return frozenset(), True
        groups = {pgrp for pgrp, _ in self.since(mark).values()}
        if status.foreground_pgrp not in (0, self.pid):
            groups.add(status.foreground_pgrp)
        shell = status.foreground_pgrp == self.pid
        replaced = shell and bool(status.shell_replaced)
        groups.discard(self.pid)
        if replaced:
            groups.add(self.pid)
        for pgrp in groups:
            with contextlib.suppress(OSError):
                os.killpg(pgrp, signum)
        return frozenset(groups), shell and not replaced
