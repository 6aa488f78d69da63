"""Reading a pty master in a thread of its own while output streams.

Why: the kernel's tty work happens inside ``read(2)`` on the master — on this
project's 2-core machines more than half of the event loop's time under
sustained output — and while the loop is in that system call nothing else in
the process runs: not the parse, reducer and writer tasks handling the previous
batch, not another terminal. ``read`` releases the GIL, so a thread that reads
while the loop works overlaps the two, and the child never waits for the loop to
come back to its pty. An idle terminal is still read by its pty-read task
directly (a keystroke's echo takes no thread hop); the task starts a pump only
when a batch comes back full, and the pump ends itself after :data:`PUMP_QUIET`
seconds without output, handing reading back to the task.

Ownership: the pty-read task owns its :class:`ReadPump` and the thread it runs;
the fd stays the terminal's. The thread never outlives the task: :meth:`ReadPump.aclose`
(always awaited, shielded, before the task returns) stops it and waits for it,
so the fd cannot be closed — or its number reused — while the thread may still
read it. The thread only reads the fd, polls it, and hands bytes over; it never
touches Trio objects except through the run's token (``run_sync_soon``).

Buffering: at most :data:`PUMP_BUFFER` bytes (plus one read) wait between the
thread and the task; past it the thread stops reading, the kernel's pty buffer
fills and the child blocks in ``write`` — the same backpressure as without a
pump. :meth:`ReadPump.take` hands over everything buffered at once (one hop for
the parse task per take, however many reads it holds).

Cancellation: :meth:`take` is a plain Trio wait (cancellable); nothing is lost
by cancelling it, since the bytes stay buffered until the pump is closed. Every
wait of the thread ends at once on :meth:`ReadPump.aclose` (a byte on a pipe of
the pump's own wakes its ``poll``; a condition variable its wait for room).
"""

from __future__ import annotations

import contextlib
import errno
import os
import select
import threading
from typing import Final

import trio

__all__ = ["PUMP_BUFFER", "PUMP_QUIET", "PUMP_READ", "ReadPump"]

#: Bytes asked of the kernel per read in the thread (it hands out ~4 KiB per read).
PUMP_READ: Final = 64 * 1024
#: Bytes buffered between the thread and the task at most (then the thread waits).
PUMP_BUFFER: Final = 256 * 1024
#: Seconds without output after which the pump ends (reading goes back to the task).
PUMP_QUIET: Final = 0.005


class ReadPump:
    """One burst of reading ``fd`` in a thread; see the module docstring.

    ``is_pty``: an ``EIO`` from the master means every slave fd is closed (EOF).
    """

    def __init__(
        self,
        fd: int,
        *,
        is_pty: bool = True,
        buffer_bytes: int = PUMP_BUFFER,
        quiet: float = PUMP_QUIET,
    ) -> None:
        self._fd = fd
        self._is_pty = is_pty
        self._limit = buffer_bytes
        self._quiet_ms = max(1, int(quiet * 1000))
        self._token = trio.lowlevel.current_trio_token()
        self._lock = threading.Lock()
        self._room = threading.Condition(self._lock)
        self._chunks: list[bytes] = []
        self._size = 0
        self._eof = False
        self._ended = False  # the thread returned (quiet, EOF, stop or error)
        self._error: BaseException | None = None
        self._stopping = False
        self._waiting = False  # the task waits in take(): wake it on new data
        self._wakeup = trio.Event()
        self._finished = trio.Event()
        # Written by aclose() so that a thread waiting in poll returns at once.
        self._stop_r, self._stop_w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
        #: Reads the thread made (figures for tests and the bench).
        self.reads = 0

    def start(self) -> None:
        trio.lowlevel.start_thread_soon(self._run, self._thread_done)

    # -- the thread ------------------------------------------------------------------------

    def _run(self) -> None:
        poller = select.poll()
        poller.register(self._fd, select.POLLIN)
        poller.register(self._stop_r, select.POLLIN)
        while True:
            with self._lock:
                while self._size >= self._limit and not self._stopping:
                    self._room.wait()
                if self._stopping:
                    return
            ready = poller.poll(self._quiet_ms)
            if not ready:
                return  # quiet: reading goes back to the task
            if any(fd == self._stop_r for fd, _ in ready):
                return
            chunks: list[bytes] = []
            size = 0
            eof = False
            while size < self._limit:
                try:
                    data = os.read(self._fd, PUMP_READ)
                except BlockingIOError:
                    break
                except OSError as exc:
                    if self._is_pty and exc.errno == errno.EIO:
                        eof = True
                        break
                    raise
                self.reads += 1
                if not data:
                    eof = True
                    break
                chunks.append(data)
                size += len(data)
            with self._lock:
                self._chunks.extend(chunks)
                self._size += size
                self._eof = eof
                wake = self._waiting and (size > 0 or eof)
                if wake:
                    self._waiting = False
            if wake:
                self._token.run_sync_soon(self._wake)
            if eof:
                return

    def _thread_done(self, outcome: object) -> None:
        # Called in the thread when _run returned or raised; report to the loop.
        error = getattr(outcome, "error", None)
        with self._lock:
            self._ended = True
            self._error = error if isinstance(error, BaseException) else None
        self._token.run_sync_soon(self._on_finished)

    def _wake(self) -> None:
        self._wakeup.set()

    def _on_finished(self) -> None:
        self._finished.set()
        self._wakeup.set()

    # -- the task --------------------------------------------------------------------------

    async def take(self) -> bytes | None:
        """Everything read so far (waiting until there is some); ``b""`` at EOF; None
        once the pump ended without more (quiet or stopped): read directly again.

        Raises:
            OSError: the thread's read failed (other than EAGAIN/EIO).
        """
        while True:
            with self._lock:
                if self._chunks:
                    chunks, self._chunks = self._chunks, []
                    self._size = 0
                    self._room.notify()
                    return chunks[0] if len(chunks) == 1 else b"".join(chunks)
                if self._eof:
                    return b""
                if self._ended:
                    if self._error is not None:
                        raise self._error
                    return None
                self._waiting = True
                self._wakeup = trio.Event()
                wakeup = self._wakeup
            await wakeup.wait()

    async def aclose(self) -> None:
        """Stop the thread and wait until it has returned (woken at once, whether it
        waits for room or in ``poll``). Shielded: the fd is safe to close afterwards."""
        with self._lock:
            self._stopping = True
            self._room.notify()
        with contextlib.suppress(OSError):
            os.write(self._stop_w, b"x")
        with trio.CancelScope(shield=True):
            await self._finished.wait()
        for fd in (self._stop_r, self._stop_w):
            with contextlib.suppress(OSError):
                os.close(fd)
        self._stop_r = self._stop_w = -1
