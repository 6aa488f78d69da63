"""One running child process and the fds that talk to it: :class:`Child`.

Why this module exists: the engine needs a small, honest handle on a child that it
can read from, write to, resize, signal and, above all, always clean up. Everything
that can leak (the pty master or the two pipe ends, the pidfd, the zombie) is owned
by exactly one ``Child`` and released by :meth:`Child.terminate`, which is
idempotent and safe under cancellation.

Buffering: there is none in this module. :meth:`Child.read_nowait` is a single
``read(2)``; :meth:`Child.write` hands bytes to the kernel in slices of at most
:data:`WRITE_CHUNK` and returns once every byte has been accepted by the pty or the
pipe. The only buffers are the kernel's (a pty holds a few KiB each way, a pipe 64 KiB).

Reaping: :class:`ahp.pty.process.Process` reaps through a pidfd, with
``waitpid(pid)`` (the orphan reaper of ``serve``, :mod:`ahp.pty.orphans`, leaves
our children's statuses to it). Signals are only ever sent while the child has
not been reaped, so a recycled pid can never be hit.

Linux pty facts this module relies on (see ``tests/test_pty.py``):

* once every slave fd is closed, ``read`` on the master fails with ``EIO`` after the
  buffered output is drained; this is reported as EOF (``b""``);
* until the launcher in the child has made the pty the controlling terminal of its
  new session (a millisecond or more after :func:`spawn` returns), the terminal has
  no foreground process group: ``tcgetpgrp`` on the master returns 0, and a typed
  ``^C`` would signal nobody (and flush the echo of what was typed before it). Input
  is therefore held back until then (:meth:`Child.write` waits up to
  :data:`SESSION_WAIT` seconds; :meth:`Child.write_nowait` writes nothing);
* ``write`` on such a master still *succeeds* into a dead buffer until it fills and
  then fails with ``EAGAIN`` while epoll reports ``EPOLLHUP`` (a busy loop for a
  naive writer), so on ``EAGAIN`` :meth:`Child.write` checks for hang-up and raises
  :class:`ChildGone`. (The check is made only then, not before every write: a poll
  per keystroke costs latency, and bytes written into the dead buffer are lost
  either way.)
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import select
import signal
import struct
import termios
from typing import Final, Literal

import trio

from ahp.pty.process import Process
from ahp.pty.spec import check_window_size

__all__ = ["DEFAULT_GRACE", "SESSION_WAIT", "SIGTERM_GRACE", "WRITE_CHUNK", "Child", "ChildGone"]

#: Largest slice handed to one ``write(2)``; a checkpoint follows every slice.
WRITE_CHUNK: Final = 64 * 1024
#: Seconds :meth:`Child.terminate` waits after ``SIGHUP`` before ``SIGTERM``.
DEFAULT_GRACE: Final = 2.0
#: Upper bound (seconds) on the wait between ``SIGTERM`` and ``SIGKILL``.
SIGTERM_GRACE: Final = 1.0
#: Longest wait (seconds) of a first :meth:`Child.write` for the child's session to
#: own the pty (then the input is written anyway).
SESSION_WAIT: Final = 2.0
#: Poll interval (seconds) of that wait.
_SESSION_POLL: Final = 0.001
#: Longest time (seconds) a terminal tries to give its pty child's own autogroup its
#: niceness (waiting for its ``setsid``, and through the kernel's rate limit of one
#: change per 100 ms: a burst of 50 creations settles in 5 s); past it only the
#: processes' niceness is set.
AUTOGROUP_WAIT: Final = 10.0
#: Poll interval (seconds) of that wait.
AUTOGROUP_POLL: Final = 0.002

_HANGUP_EVENTS: Final = select.POLLHUP | select.POLLERR | select.POLLNVAL
_WINSIZE: Final = struct.Struct("HHHH")  # rows, cols, xpixel, ypixel


class ChildGone(trio.BrokenResourceError):
    """The input side is gone: the child closed it, exited, or the pty hung up.

    Raised by :meth:`Child.write`; the underlying ``OSError`` (``EIO``/``EPIPE``), if
    any, is the ``__cause__``. The child may still be running; :meth:`Child.wait`
    is the authority on exit.
    """


def set_window_size(fd: int, cols: int, rows: int) -> None:
    """``TIOCSWINSZ`` on a pty fd; the kernel sends ``SIGWINCH`` to the foreground job."""
    fcntl.ioctl(fd, termios.TIOCSWINSZ, _WINSIZE.pack(rows, cols, 0, 0))


def _hung_up(fd: int) -> bool:
    poller = select.poll()
    poller.register(fd, select.POLLOUT)
    return any(events & _HANGUP_EVENTS for _, events in poller.poll(0))


class Child:
    """Owns one child process and its fds. Created by ``await spawn(spec)``.

    Ownership: the ``Child`` owns the pty master (pty mode) or the parent ends of the
    stdin and output pipes (pipe mode; and of the stderr pipe when it has its own),
    plus the :class:`~ahp.pty.process.Process` and its pidfd. Each
    fd is closed exactly once, by :meth:`close_fds` (called by :meth:`terminate`),
    and the attribute is set to ``-1`` first. Never key anything by fd number.

    Concurrency: at most one task may read (:meth:`wait_readable`) and one task may
    write (:meth:`write`) at a time; they may be different tasks. A second
    concurrent reader or writer gets ``trio.BusyResourceError``.

    Attributes:
        pid: Process id of the child; after setup it is also its session id and
            process group id (pty mode: after ``setsid`` ran in the child, a few
            milliseconds after :func:`spawn` returns; pipe mode: immediately).
        is_pty: Whether the child runs on a pty (``False``: plain pipes).
    """

    def __init__(
        self,
        process: Process,
        *,
        is_pty: bool,
        input_fd: int,
        output_fd: int,
        error_fd: int = -1,
    ) -> None:
        """Take ownership of ``process`` and the fds; use :func:`spawn` instead."""
        self._process: Final = process
        self.pid: Final = process.pid
        self.is_pty: Final = is_pty
        self._input_fd = input_fd  # pty mode: the same number as _output_fd (one master)
        self._output_fd = output_fd
        self._error_fd = error_fd  # -1: stderr shares the output fd (or the pty)
        self._writing = False
        #: Bytes of input the kernel has taken so far (only grows): a writer that waits
        #: can tell a slow reader (it moves) from one that reads nothing.
        self.input_written = 0
        self._terminated = False
        self._session = not is_pty  # whether the pty has a foreground process group yet

    def __repr__(self) -> str:
        mode = "pty" if self.is_pty else "pipes"
        return f"<Child pid={self.pid} {mode} returncode={self.returncode}>"

    @property
    def output_fd(self) -> int:
        """Non-blocking fd output is read from (pty master or pipe read end); -1 once closed."""
        return self._output_fd

    @property
    def error_fd(self) -> int:
        """Non-blocking read end of the child's own stderr pipe (``SpawnSpec.stderr_apart``);
        -1 when stderr shares the output fd, and once closed."""
        return self._error_fd

    @property
    def input_fd(self) -> int:
        """Non-blocking fd that input is written to (pty master or stdin pipe); -1 once closed."""
        return self._input_fd

    @property
    def returncode(self) -> int | None:
        """``None`` while running, else the raw status: ``>= 0`` exit code, ``-N`` signal N.

        Reading it reaps the child if it has exited (a non-blocking ``waitpid``).
        """
        return self._process.returncode

    # -- output ---------------------------------------------------------------------

    def read_nowait(self, max_bytes: int, *, error: bool = False) -> bytes | None:
        """One ``read(2)`` of at most ``max_bytes`` from the output fd (``error``: from
        :attr:`error_fd`, the same way).

        Returns:
            The bytes read; ``b""`` at EOF (pipe EOF, or ``EIO`` on a pty master once
            every slave fd is closed; repeated reads keep returning ``b""``); ``None``
            when nothing is available right now (then ``await wait_readable()``).

        EOF means every holder of the slave/pipe closed it, which is *not* the same
        as the child exiting: a background grandchild can keep it open.

        Raises:
            trio.ClosedResourceError: After :meth:`close_fds`.
            ValueError: If ``max_bytes < 1`` (a zero-byte read would look like EOF).
        """
        if max_bytes < 1:
            raise ValueError("max_bytes must be at least 1")
        fd = self._error_fd if error else self._output_fd
        if fd < 0:
            raise trio.ClosedResourceError("the child's output fd is closed")
        try:
            return os.read(fd, max_bytes)
        except BlockingIOError:
            return None
        except OSError as exc:
            if self.is_pty and exc.errno == errno.EIO:
                return b""  # Linux reports pty EOF as EIO
            raise

    async def wait_readable(self, *, error: bool = False) -> None:
        """Block until the output fd (``error``: :attr:`error_fd`) is readable (data, EOF
        or hang-up).

        Cancellation: safe; nothing is consumed.

        Raises:
            trio.ClosedResourceError: If the fds are closed before or while waiting.
            trio.BusyResourceError: If another task is already waiting.
        """
        fd = self._error_fd if error else self._output_fd
        if fd < 0:
            raise trio.ClosedResourceError("the child's output fd is closed")
        await trio.lowlevel.wait_readable(fd)

    # -- input ----------------------------------------------------------------------

    def has_session(self) -> bool:
        """Whether input can be typed yet: pipe mode always; pty mode once the pty is
        the controlling terminal of the child's session (see the module docstring).
        One ``ioctl`` until true, then cached."""
        if not self._session:
            fd = self._input_fd
            try:
                self._session = fd < 0 or os.tcgetpgrp(fd) > 0
            except OSError:  # let the write itself report what is wrong
                self._session = True
        return self._session

    async def _wait_session(self) -> None:
        if self.has_session():
            return
        deadline = trio.current_time() + SESSION_WAIT
        while trio.current_time() < deadline:
            await trio.sleep(_SESSION_POLL)
            if self.has_session() or self._process.returncode is not None:
                break
        self._session = True  # ready, or waited enough (or the child is gone): write anyway

    async def write(self, data: bytes) -> None:
        """Write all of ``data`` to the child's input without ever blocking the loop.

        Data goes out in slices of at most :data:`WRITE_CHUNK` bytes with a checkpoint
        after each slice, and the task sleeps on writability whenever the kernel
        buffer is full, so a 10 MB paste neither blocks nor starves the event loop.

        Cancellation: allowed at every checkpoint; when cancelled, an unknown prefix
        of ``data`` has been written and the rest has not.

        Raises:
            ChildGone: The pty hung up (no slave fd open any more) or the pipe's
                reader is gone (``EPIPE``/``EIO``).
            trio.ClosedResourceError: If the fds are closed before or during the write.
            trio.BusyResourceError: If another task is writing.
        """
        if self._writing:
            raise trio.BusyResourceError("another task is already writing to this child")
        self._writing = True
        try:
            await trio.lowlevel.checkpoint_if_cancelled()
            await self._wait_session()
            view = memoryview(data).cast("B")
            while view:
                fd = self._input_fd
                if fd < 0:
                    raise trio.ClosedResourceError("the child's input fd is closed")
                written = self._write_once(fd, view[:WRITE_CHUNK])
                if written is None:
                    await trio.lowlevel.wait_writable(fd)
                    continue
                view = view[written:]
                await trio.lowlevel.checkpoint()
        finally:
            self._writing = False

    def write_nowait(self, data: bytes | memoryview) -> int:
        """One non-blocking ``write(2)`` of at most :data:`WRITE_CHUNK` bytes of ``data``.

        For a caller that wants a keystroke in the kernel now, without waking a
        writer task: returns how many bytes were accepted (0 when the kernel buffer
        is full, or while the child's session does not own the pty yet); the caller
        hands any rest to :meth:`write`.

        Raises:
            ChildGone: As :meth:`write`.
            trio.ClosedResourceError: If the fds are closed.
            trio.BusyResourceError: If a task is in :meth:`write` (bytes would interleave).
        """
        if self._writing:
            raise trio.BusyResourceError("another task is already writing to this child")
        fd = self._input_fd
        if fd < 0:
            raise trio.ClosedResourceError("the child's input fd is closed")
        if not self.has_session():
            return 0
        written = self._write_once(fd, memoryview(data).cast("B")[:WRITE_CHUNK])
        return written or 0

    def _write_once(self, fd: int, chunk: memoryview) -> int | None:
        """``os.write``; None on EAGAIN (after checking that the pty did not hang up)."""
        try:
            written = os.write(fd, chunk)
        except BlockingIOError:
            # A hung-up pty master swallows writes, then reports EAGAIN while epoll
            # reports EPOLLHUP forever: check instead of spinning (pipes raise EPIPE).
            if self.is_pty and _hung_up(fd):
                raise ChildGone("the pty hung up: no process holds the terminal") from None
            return None
        except OSError as exc:
            if exc.errno in (errno.EIO, errno.EPIPE):
                raise ChildGone(f"the child's input is gone: {exc.strerror}") from exc
            raise
        self.input_written += written
        return written

    def resize(self, cols: int, rows: int) -> None:
        """Set the pty window size; the kernel sends ``SIGWINCH`` to the foreground job.

        A no-op in pipe mode and after :meth:`close_fds` (resizing a dead terminal is
        harmless, and a late resize request must not crash the caller).

        Raises:
            ValueError: If a dimension is outside ``1..65535``.
        """
        check_window_size(cols, rows)
        if self.is_pty and self._output_fd >= 0:
            set_window_size(self._output_fd, cols, rows)

    def renice_processes(self, nice: int) -> None:
        """Add ``nice`` to the child's niceness (``setpriority``, at once); nothing once
        it is reaped, and an ``OSError`` (it exited meanwhile) is ignored.

        With the kernel's autogroup scheduling (``/proc/sys/kernel/sched_autogroup_enabled``,
        on by default on desktop and many server kernels) a process's niceness only
        weighs against the processes of its own autogroup, and a pty child's
        ``setsid`` gives it a new one: the CPU is shared between the server and each
        terminal *group* equally whatever the niceness (issue 25: thirty shells printing
        in a loop held the event loop on the run queue 60-75 % of the time). So a pty
        child's autogroup needs ``nice`` too: :meth:`set_group_nice`, once the child's
        ``setsid`` ran (the terminal's ``_settle_nice`` task retries until then)."""
        if self._process.returncode is None:
            with contextlib.suppress(OSError):
                os.setpriority(os.PRIO_PROCESS, self.pid, nice)

    def set_group_nice(self, nice: int) -> bool:
        """Set the nice value of the child's *autogroup* only (the processes' own
        niceness is left as it is); unlike a process's niceness, an unprivileged server
        may lower it again (0-19), so this is what :mod:`ahp.engine.priority` toggles.

        True once done, or when there is nothing to do: the child is reaped, it is a
        pipe child (it shares the server's group), the kernel has no autogroups, or a
        cgroup schedules the child. False when to try again: the child has not called
        ``setsid`` yet (it is still in the server's own group, never touched), or the
        kernel refused with ``EAGAIN`` (it takes one autogroup change per 100 ms from a
        process without ``CAP_SYS_ADMIN``, over the whole machine). One ``/proc`` read
        and write; no wait."""
        if self._process.returncode is not None or not self.is_pty:
            return True
        try:
            return _renice_autogroup(self.pid, nice)
        except OSError as exc:  # no autogroups on this kernel, or the child is gone
            return exc.errno != errno.EAGAIN

    # -- lifecycle ------------------------------------------------------------------

    def signal_group(self, sig: int) -> None:
        """Send ``sig`` to the child's process group (``killpg(pid, sig)``).

        Does nothing once the child has been reaped (its pid may be reused). In the
        few milliseconds after a pty spawn before ``setsid`` ran in the child, the group
        does not exist yet and the signal goes to the child's pid alone.
        ``ProcessLookupError`` is ignored.
        """
        if self._process.returncode is not None:  # invariant: never signal a reaped pid
            return
        try:
            os.killpg(self.pid, sig)
        except ProcessLookupError:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    async def wait(self) -> int | None:
        """Wait for the child to exit and reap it.

        Returns:
            The exit code for a normal exit, ``None`` if a signal killed the child
            (the signal number is ``-returncode``).

        Cancellation: safe; the child is left running and unreaped, so a later
        :meth:`wait` or :meth:`terminate` must still be called.
        """
        status = await self._process.wait()
        return status if status >= 0 else None

    async def terminate(self, grace: float = DEFAULT_GRACE) -> None:
        """Stop the child if it runs, reap it and close every fd. Idempotent.

        Escalation, each step only while the child is still alive: ``SIGHUP`` (what a
        closing terminal sends) plus ``SIGCONT`` to the process group, then up to
        ``grace`` seconds; ``SIGTERM`` plus ``SIGCONT``, then up to
        ``min(grace, SIGTERM_GRACE)`` seconds; ``SIGKILL``. ``SIGCONT`` lets a stopped
        child act on the signal. Processes that left the group (``setsid``, job-control
        shells' background jobs) are not chased.

        Cancellation: if cancelled during a grace period, escalation jumps straight to
        ``SIGKILL``; the reap itself is shielded, so the child is always reaped and
        the fds are always closed before this returns or raises. Unread output is lost.
        """
        if grace < 0:
            raise ValueError("grace must not be negative")
        try:
            if not self._terminated:
                for sig, wait_for in (
                    (signal.SIGHUP, grace),
                    (signal.SIGTERM, min(grace, SIGTERM_GRACE)),
                ):
                    if self._process.returncode is not None:
                        break
                    self._signal_quietly(sig)
                    self._signal_quietly(signal.SIGCONT)
                    with trio.move_on_after(wait_for):
                        await self._process.wait()
            else:
                await trio.lowlevel.checkpoint()
        finally:
            if self._process.returncode is None:
                self._signal_quietly(signal.SIGKILL)
            with trio.CancelScope(shield=True):
                await self._process.wait()
            self._terminated = True
            self.close_fds()

    def _signal_quietly(self, sig: int) -> None:
        # terminate() must reach the shielded reap whatever happens here
        with contextlib.suppress(PermissionError):
            self.signal_group(sig)

    def close_fds(self) -> None:
        """Close every fd this child owns. Idempotent; does not touch the process.

        Tasks blocked in :meth:`wait_readable` or :meth:`write` on these fds are woken
        with ``trio.ClosedResourceError``. Closing the pty master hangs up the
        terminal (the kernel sends ``SIGHUP`` to the foreground job).
        """
        # pty mode: one master, closed once
        fds = {self._input_fd, self._output_fd, self._error_fd} - {-1}
        self._input_fd = self._output_fd = self._error_fd = -1  # -1 *before* close, never twice
        for fd in fds:
            with contextlib.suppress(RuntimeError):  # not inside trio.run: nobody waits
                trio.lowlevel.notify_closing(fd)
            os.close(fd)

    def __del__(self) -> None:
        # Last resort against fd leaks, like trio's _FdHolder; the process is trio's.
        with contextlib.suppress(Exception):
            self.close_fds()


def _renice_autogroup(pid: int, nice: int) -> bool:
    """Set the nice value of ``pid``'s autogroup; False (and nothing done) while it is
    this process's own (the child has not called ``setsid`` yet). True once done, or
    when there is nothing to do (see :func:`autogroup_step`). Raises ``OSError``
    without autogroups, once ``pid`` is gone, or (``EAGAIN``) when the kernel's rate
    limit on autogroup changes refused this one."""
    with open(f"/proc/{pid}/autogroup") as f:
        theirs = f.read()
    with open("/proc/self/autogroup") as f:
        ours = f.read()
    step = autogroup_step(theirs, ours)
    if step != "set":
        return step == "skip"
    with open(f"/proc/{pid}/autogroup", "w") as f:
        f.write(str(nice))
    return True


def autogroup_step(theirs: str, ours: str) -> Literal["set", "wait", "skip"]:
    """What to do with a child's autogroup, from the text of its and the server's
    ``/proc/PID/autogroup`` (``"/autogroup-123 nice 0"``): ``"wait"`` while they are the
    same group (the child has not called ``setsid`` yet; the server must not renice
    itself), ``"skip"`` when either is empty (a cgroup, not an autogroup, schedules it:
    containers, systemd slices), else ``"set"``."""
    t, o = theirs.split(), ours.split()
    if not t or not o:
        return "skip"
    return "wait" if t[0] == o[0] else "set"
