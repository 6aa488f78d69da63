"""Reading busy pty masters in a few threads shared by every terminal of a Trio run.

Why: the kernel's tty work happens inside ``read(2)`` on the master — on this
project's 2-core machines more than half of the event loop's time under
sustained output — and while the loop is in that system call nothing else in
the process runs. ``read`` releases the GIL, so a thread that reads while the
loop works overlaps the two. It is at most :data:`PUMP_THREADS` threads (each an
``epoll`` over its share of the busy masters), not one per terminal: with a
thread per terminal, thirty terminals printing in a loop were thirty runnable
threads beside the event loop's, and on 2 cores the loop waited for a CPU 60-75 %
of the time (``/proc/PID/task/*/schedstat``; issue 25's ``silent subscriber``): an
interactive client's echo waited with it.
A reader or two use the second core; more would only compete with the loop. A
reader runs at most :data:`PUMP_AHEAD` bytes ahead of the loop (what its pumps'
tasks have not taken yet, over all its terminals), then waits off the CPU until a
task takes; :data:`PUMP_NICE` can also lower the readers' priority.

An idle terminal is still read by its pty-read task directly (a keystroke's echo
takes no thread hop); the task starts a :class:`ReadPump` only when a batch comes
back full, and the pump ends after :data:`PUMP_QUIET` seconds without output on
its fd, handing reading back to the task. A reader thread ends when no pump is
left to it, and one is started again by the next pump.

Ownership: the pty-read task owns its :class:`ReadPump`; the fd stays the
terminal's. The reader thread never touches an fd after its pump's
:meth:`ReadPump.aclose` returned (always awaited, shielded, before the task
returns): ``aclose`` waits for the thread to drop the fd from its ``epoll``, so the
fd cannot be closed — or its number reused — while the thread may read it. The
thread only polls and reads fds and hands bytes over; it touches Trio only
through the run's token (``run_sync_soon``: one call per round of the thread,
waking every pump that got data in it).

Buffering: at most :data:`PUMP_BUFFER` bytes (plus one read) wait per pump
between the thread and its task, and at most :data:`PUMP_AHEAD` (plus one turn,
:data:`PUMP_TURN`) over all of a thread's pumps; past it the thread stops polling
that fd (past the second, reading at all): the kernel's pty buffer fills and the
child blocks in ``write`` (the same backpressure as without a pump) until the task
takes. :meth:`ReadPump.take`
hands over everything buffered at once (one hop for the parse task per take).
While output streams (a round read :data:`PUMP_LINGER_FROM` or more), the
thread wakes a waiting task only once its pump holds :data:`PUMP_WAKE` or
:data:`PUMP_LINGER` after the first of it: fewer, larger takes. A short read
(an echo, a burst's tail), EOF, an error or the pump's end wakes it at once,
and so does a hold past :data:`PUMP_AHEAD` (only a take ends a hold).

Cancellation: :meth:`ReadPump.take` is a plain Trio wait (cancellable); nothing
is lost by cancelling it, the bytes stay buffered until the pump is closed. The
thread's ``epoll`` wait ends at once on every registration, resumption and close
(a byte on a pipe of the thread's own).
"""

from __future__ import annotations

import contextlib
import errno
import os
import select
import threading
import time
from typing import Final

import trio

__all__ = [
    "PUMP_AHEAD",
    "PUMP_BUFFER",
    "PUMP_LEAD",
    "PUMP_LINGER",
    "PUMP_LINGER_FROM",
    "PUMP_NICE",
    "PUMP_QUIET",
    "PUMP_QUIET_FLOODING",
    "PUMP_READ",
    "PUMP_THREADS",
    "PUMP_TURN",
    "PUMP_WAKE",
    "ReadPump",
    "reader_running",
]

#: Bytes asked of the kernel per read in the thread (it hands out ~4 KiB per read).
PUMP_READ: Final = 64 * 1024
#: Bytes buffered between the thread and one pump's task at most (then that fd
#: is not polled until the task takes).
PUMP_BUFFER: Final = 256 * 1024
#: Seconds without output after which a pump ends (reading goes back to the task):
#: 5 ms ended pumps whenever a busy child waited for a CPU, and the loop read again
#: (8 interleaved pairs at load 9-13: 0.84x server CPU per MB at 50 ms).
PUMP_QUIET: Final = 0.05
#: The same for a terminal whose output floods the host (:mod:`ahp.engine.priority`):
#: such a child, run below the host, pauses whenever the CPU is contended, and each
#: pump's end handed reading back to the loop, in small batches (30 terminals: 17 000
#: reads of 830 bytes in 6 s, 1.5 s of the loop's time).
PUMP_QUIET_FLOODING: Final = 0.5
#: Bytes a reader thread reads from one fd before it turns to the next ready one
#: (and hands over what it read): a round reads at most this much per busy terminal.
PUMP_TURN: Final = 256 * 1024
#: Bytes a reader thread may hold for its pumps' tasks in all (not yet taken) before
#: it stops reading until a task takes: it runs at most this far ahead of the loop.
#: Before, it read on for every busy terminal up to its own PUMP_BUFFER (30 terminals:
#: 7.5 MiB), one more runnable thread beside the loop on a busy machine; with 30
#: terminals printing, the loop waited for a core 4.5 s of 8 and another client's
#: echo up to 124-194 ms. One terminal is held by its own PUMP_BUFFER first, as before.
PUMP_AHEAD: Final = 256 * 1024
#: Seconds a holding reader waits at most before it looks again (a take or a change
#: wakes it at once).
PUMP_LEAD: Final = 0.05
#: While output streams, a waiting task is woken once its pump holds this many bytes,
#: or PUMP_LINGER seconds after the first of them: fewer, larger takes (each costs the
#: loop a hand-over, a parse, a reducer and a writer step; 1 ms: 0.88-0.93x the
#: server's CPU per MB, 0.63x the loop's steps; benchmarks/README.md, session 14). A
#: round that read less than PUMP_LINGER_FROM (a keystroke's echo, the tail of a
#: burst) wakes it at once.
PUMP_WAKE: Final = 160 * 1024
PUMP_LINGER: Final = 0.001
PUMP_LINGER_FROM: Final = 1024


def _int_from_env(name: str, default: int, low: int, high: int) -> int:
    """``$name`` as an integer within ``low``-``high``; ``default`` when unset or not a
    number."""
    try:
        value = int(os.environ.get(name, ""))
    except ValueError:
        return default
    return max(low, min(high, value))


#: Reader threads at most (pumps are spread over them, the fewest pumps first): the
#: second core is used by one, and more than a few only compete with the loop for
#: the CPU (``$AHP_PUMP_THREADS``, 1-64, for hosts with more cores: with 16 busy
#: terminals on 2 cores, 16 threads gave 1.4x the aggregate of 2 at 1.24x the server
#: CPU per byte, and an interactive client's echo waits with them; see
#: benchmarks/README.md).
PUMP_THREADS: Final = _int_from_env("AHP_PUMP_THREADS", 2, 1, 64)


#: The reader threads' niceness, added to the process's (``$AHP_PUMP_NICE``, 0-19;
#: default 0: the loop's). The event loop's thread does the interactive work
#: (keystrokes, answers, every client's frames); the readers only move bulk output.
#: All of a process's threads share one scheduling group (autogroup: its session), so
#: on a busy machine the readers take the loop's share of it. At 19 they yield it: with
#: 30 terminals printing on 2 cores another client's echo waited at most 24-33 ms
#: instead of 124-194 (at 10: 54-84 ms). Not the default: everything else in the
#: server's session (the program that started it, its other children) is in the same
#: group, and a reader at 19 beside a busy one of those got almost no CPU (a test that
#: needed output while two CPU hogs of the same session ran failed). A sidecar started
#: in a session of its own (a service manager, ``setsid``) can set it. Raising a
#: niceness needs no privilege; the loop's own is never touched.
PUMP_NICE: Final = _int_from_env("AHP_PUMP_NICE", 0, 0, 19)


class _Reader:
    """The thread shared by a run's pumps: an ``epoll`` over their fds (one instance
    per thread's life; see the module docstring)."""

    def __init__(self, token: trio.lowlevel.TrioToken) -> None:
        self.token = token
        self.epoll = select.epoll()
        self.wake_r, self.wake_w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
        self.epoll.register(self.wake_r, select.EPOLLIN)
        #: fd -> pump, every pump the thread serves (guarded by the module lock).
        self.pumps: dict[int, ReadPump] = {}
        #: Pumps whose state changed for the thread (new, resumed, closing).
        self.changed: list[ReadPump] = []
        self.woken = False  # a wake byte is pending
        #: Past :data:`PUMP_AHEAD` buffered the thread holds off (``holding``) until a
        #: task takes or something changes (``resume`` is set; guarded by the module lock).
        self.holding = False
        self.resume = threading.Event()

    def wake(self) -> None:
        """Called with the lock held: the thread looks at ``changed`` soon."""
        self.resume.set()
        if not self.woken:
            self.woken = True
            with contextlib.suppress(OSError):
                os.write(self.wake_w, b"x")

    def run(self) -> None:
        if PUMP_NICE:  # this thread only (Linux: a niceness is per thread)
            with contextlib.suppress(OSError, AttributeError):
                me = threading.get_native_id()
                nice = os.getpriority(os.PRIO_PROCESS, me) + PUMP_NICE
                os.setpriority(os.PRIO_PROCESS, me, min(19, nice))
        try:
            self._loop()
        except BaseException:  # pragma: no cover - a bug in the loop below
            import logging

            logging.getLogger("ahp.pty").exception("pty reader thread failed")
        finally:
            for fd in (self.wake_r, self.wake_w):
                with contextlib.suppress(OSError):
                    os.close(fd)
            self.epoll.close()

    def _loop(self) -> None:
        epoll = self.epoll
        polled: set[int] = set()  # fds registered in the epoll
        #: Pumps whose waiting task is not woken yet (PUMP_LINGER): since when.
        lingering: dict[ReadPump, float] = {}
        while True:
            finished: list[ReadPump] = []
            with _LOCK:
                self.woken = False
                changed, self.changed = self.changed, []
                for pump in changed:
                    fd = pump.fd
                    want = not pump.stopping and not pump.ended and pump.size < pump.limit
                    if pump.stopping and not pump.ended:
                        pump.ended = True
                    if pump.ended:
                        if self.pumps.get(fd) is pump:
                            del self.pumps[fd]
                        if fd in polled:
                            polled.discard(fd)
                            epoll.unregister(fd)
                        finished.append(pump)
                    elif want and fd not in polled:
                        epoll.register(fd, select.EPOLLIN)
                        polled.add(fd)
                        pump.last = time.monotonic()
                if not self.pumps:
                    if self in _RUNNING.readers:
                        _RUNNING.readers.remove(self)
                    self._finish(finished)
                    return
            self._finish(finished)
            wake: list[ReadPump] = []
            with _LOCK:  # ahead of the loop by PUMP_AHEAD: wait off the CPU (PUMP_AHEAD)
                self.holding = sum(p.size for p in self.pumps.values()) >= PUMP_AHEAD
                if self.holding:
                    self.resume.clear()
                    # (Only a take ends a hold: every lingering task is woken first.)
                    wake = _waking([p for p in lingering if p.waiting])
                    lingering.clear()
            if self.holding:
                self._wake(wake)
                self.resume.wait(PUMP_LEAD)
                with _LOCK:  # (not read meanwhile, so not quiet either)
                    held = time.monotonic()
                    for pump in self.pumps.values():
                        pump.last = max(pump.last, held)
                continue
            timeout = min((p.quiet for p in self.pumps.values()), default=PUMP_QUIET)
            if lingering:
                due = min(lingering.values()) + PUMP_LINGER - time.monotonic()
                timeout = max(0.0, min(timeout, due))
            try:
                events = epoll.poll(timeout)
            except InterruptedError:  # pragma: no cover - PEP 475 retries
                continue
            now = time.monotonic()
            woken: list[ReadPump] = []
            streaming: set[ReadPump] = set()  # read PUMP_LINGER_FROM or more this round
            ahead = sum(p.size for p in self.pumps.values())  # (an estimate: no lock)
            for fd, _ in events:
                if fd == self.wake_r:
                    with contextlib.suppress(OSError):
                        os.read(self.wake_r, 4096)
                    continue
                ready = self.pumps.get(fd)
                if ready is None or ready.ended:
                    continue
                if ahead >= PUMP_AHEAD:  # level-triggered: it is offered again next round
                    ready.last = now  # (it has output: not quiet)
                    continue
                before = ready.size
                if self._read(ready):
                    ahead += max(0, ready.size - before)
                    ready.last = now
                    woken.append(ready)
                    if ready.size - before >= PUMP_LINGER_FROM:
                        streaming.add(ready)
            with _LOCK:
                for pump in list(self.pumps.values()):
                    if pump.ended:
                        continue
                    full = pump.size >= pump.limit
                    if (pump.eof or pump.error is not None) or (
                        not full and now - pump.last >= pump.quiet
                    ):
                        # Quiet, EOF or failed: the pump is done with the thread.
                        pump.ended = True
                        self.changed.append(pump)
                        if pump not in woken:
                            woken.append(pump)
                    elif full and pump.fd in polled:
                        polled.discard(pump.fd)
                        epoll.unregister(pump.fd)  # until its task takes (resume)
                wake = _waking(_due(woken, streaming, lingering, now))
            self._wake(wake)

    def _wake(self, pumps: list[ReadPump]) -> None:
        """Wake these pumps' tasks (taken off ``waiting`` by :func:`_waking`)."""
        if pumps:
            with contextlib.suppress(trio.RunFinishedError):
                self.token.run_sync_soon(_set_all, [p.wakeup for p in pumps])

    def _read(self, pump: ReadPump) -> bool:
        """Read ``pump``'s fd for one turn; whether anything (data, EOF, an error) came."""
        chunks: list[bytes] = []
        size = 0
        eof = False
        error: BaseException | None = None
        room = min(PUMP_TURN, pump.limit - pump.size)
        while size < room:
            try:
                data = os.read(pump.fd, PUMP_READ)
            except BlockingIOError:
                break
            except OSError as exc:
                if pump.is_pty and exc.errno == errno.EIO:
                    eof = True
                else:
                    error = exc
                break
            pump.reads += 1
            if not data:
                eof = True
                break
            chunks.append(data)
            size += len(data)
        if not (chunks or eof or error is not None):
            return False
        with _LOCK:
            pump.chunks.extend(chunks)
            pump.size += size
            pump.eof = pump.eof or eof
            if error is not None:
                pump.error = error
        return True

    def _finish(self, finished: list[ReadPump]) -> None:
        if finished:
            with contextlib.suppress(trio.RunFinishedError):
                self.token.run_sync_soon(_set_all, [p.finished for p in finished])


def _due(
    woken: list[ReadPump],
    streaming: set[ReadPump],
    lingering: dict[ReadPump, float],
    now: float,
) -> list[ReadPump]:
    """The pumps whose waiting task is woken this round (called with the lock held).

    A pump that got data this round waits (enters ``lingering``) instead while its
    output streams (it read :data:`PUMP_LINGER_FROM` or more this round), it holds less
    than :data:`PUMP_WAKE` and it has lingered less than :data:`PUMP_LINGER`; any other
    news (a short read, EOF, an error, its end) wakes it at once, as does the end of its
    linger.
    """
    due: list[ReadPump] = []
    for pump in woken:
        if not pump.waiting:
            continue
        if (
            pump in streaming
            and pump.size < PUMP_WAKE
            and not (pump.ended or pump.eof or pump.error is not None)
            and now - lingering.setdefault(pump, now) < PUMP_LINGER
        ):
            continue
        lingering.pop(pump, None)
        due.append(pump)
    for pump, since in list(lingering.items()):  # (those the round brought nothing)
        if not pump.waiting:
            del lingering[pump]
        elif pump.ended or now - since >= PUMP_LINGER:
            del lingering[pump]
            due.append(pump)
    return due


def _waking(pumps: list[ReadPump]) -> list[ReadPump]:
    """``pumps``, each taken off ``waiting`` (the lock held): their wake-up is sent."""
    for pump in pumps:
        pump.waiting = False
    return pumps


def _set_all(events: list[trio.Event]) -> None:
    for event in events:
        event.set()


#: Guards every pump's buffer and the reader's tables (the thread and the loop).
_LOCK: Final = threading.Lock()


class _Running:
    """The running reader threads (guarded by :data:`_LOCK`): at most
    :data:`PUMP_THREADS`, each serving the pumps of one Trio run."""

    def __init__(self) -> None:
        self.readers: list[_Reader] = []

    def pick(self, token: trio.lowlevel.TrioToken) -> tuple[_Reader, bool]:
        """The reader a new pump of ``token``'s run joins, and whether it is new (its
        thread must be started): a new one while fewer than :data:`PUMP_THREADS` run
        and each has a pump, else the one with the fewest pumps."""
        mine = [r for r in self.readers if r.token is token]
        if len(mine) < PUMP_THREADS and all(r.pumps for r in mine):
            reader = _Reader(token)
            self.readers.append(reader)
            return reader, True
        return min(mine, key=lambda r: len(r.pumps)), False


_RUNNING: Final = _Running()


def reader_running() -> bool:
    """Whether a reader thread is running (for tests)."""
    with _LOCK:
        return bool(_RUNNING.readers)


class ReadPump:
    """One burst of reading ``fd`` through the shared reader; see the module docstring.

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
        self.fd = fd
        self.is_pty = is_pty
        self.limit = buffer_bytes
        self.quiet = quiet
        self._token = trio.lowlevel.current_trio_token()
        # All below guarded by _LOCK.
        self.chunks: list[bytes] = []
        self.size = 0
        self.eof = False
        self.error: BaseException | None = None
        self.ended = False  # the thread is done with the fd (quiet, EOF, error, stop)
        self.stopping = False
        self.waiting = False  # the task waits in take(): wake it on new data
        self.last = 0.0  # the thread's clock at the last data (quiet detection)
        self.wakeup = trio.Event()
        self.finished = trio.Event()  # set on the loop once the thread dropped the fd
        self._reader: _Reader | None = None
        #: Reads the thread made (figures for tests and the bench).
        self.reads = 0

    def start(self) -> None:
        """Join the run's reader thread (starting it if none runs)."""
        with _LOCK:
            reader, fresh = _RUNNING.pick(self._token)
            self._reader = reader
            self.last = time.monotonic()  # (a round under way must not find it quiet)
            reader.pumps[self.fd] = self
            reader.changed.append(self)
            reader.wake()
        if fresh:  # a thread of its own, not Trio's cache: its niceness dies with it
            threading.Thread(target=reader.run, name="ahp-pty-reader", daemon=True).start()

    # -- the task --------------------------------------------------------------------------

    async def take(self) -> bytes | None:
        """Everything read so far (waiting until there is some); ``b""`` at EOF; None
        once the pump ended without more (quiet or stopped): read directly again.

        Raises:
            OSError: the thread's read failed (other than EAGAIN/EIO).
        """
        while True:
            with _LOCK:
                if self.chunks:
                    chunks, self.chunks = self.chunks, []
                    full = self.size >= self.limit
                    self.size = 0
                    reader = self._reader
                    if full and not self.ended and reader is not None:
                        reader.changed.append(self)  # poll the fd again
                        reader.wake()
                    elif reader is not None and reader.holding:
                        reader.resume.set()  # under PUMP_AHEAD again: read on
                    return chunks[0] if len(chunks) == 1 else b"".join(chunks)
                if self.eof:
                    return b""
                if self.ended:
                    if self.error is not None:
                        raise self.error
                    return None
                self.waiting = True
                self.wakeup = trio.Event()
                wakeup = self.wakeup
            await wakeup.wait()

    async def aclose(self) -> None:
        """Leave the reader and wait until its thread no longer touches the fd.
        Shielded: the fd is safe to close afterwards."""
        with _LOCK:
            reader = self._reader
            if reader is None:
                return
            # Once ended, the thread drops the fd by itself (and may be gone after it:
            # its reader must not be touched then).
            if not self.ended and not self.stopping:
                self.stopping = True
                reader.changed.append(self)
                reader.wake()
        with trio.CancelScope(shield=True):
            await self.finished.wait()
