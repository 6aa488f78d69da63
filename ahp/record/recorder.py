"""The recorder: one terminal's envelopes → one asciicast v3 file.

Why a subscriber task like any other: a recording must see exactly what a
viewer sees (the output as published, resizes, detected commands, the exit) and
must never be able to slow the terminal down. So the recorder subscribes to the
terminal's channel through the engine's ordinary path
(:meth:`ahp.engine.Terminal.subscribe`, with ``paces=False``: it is never the
subscriber the pty waits for, see :meth:`ahp.engine.hub.Hub.pacer`), turns each
envelope into asciicast events (:mod:`ahp.record.asciicast`) and hands the
encoded lines to a writer task.

Buffering (every bound named): the terminal's envelopes wait in the
subscription's outbox (:data:`RECORD_OUTBOX_BYTES`); encoded lines wait for the
disk in the recorder's buffer (:data:`RECORD_BUFFER_BYTES`). When the disk is
slower than the terminal, the buffer fills, the recorder stops taking from its
outbox, the outbox overflows and is dropped (O(1), memory freed), and the
recorder resynchronises the engine's way: a fresh snapshot. It counts the
output it saw against the terminal's count (:attr:`ahp.engine.Terminal.output_chars`),
writes what it missed from the scrollback at once (at most
:data:`RECORD_CATCH_UP_CHARS`, the latest) behind a marker saying how much that is
and how much was lost (:func:`~ahp.record.asciicast.caught_up_marker`), and goes on
with live output. The pty, the other viewers and the event loop never wait for the
disk; the recorder's memory is at most the two bounds plus one line.

Writes: a regular file is written in a worker thread (``trio.to_thread``; a
``write(2)`` in flight cannot be interrupted and is waited for); a FIFO, socket or
character device is opened non-blocking and written on the event loop when it
is writable (cancellable at any time). Every file has a size bound
(:data:`RECORD_MAX_BYTES` by default, :attr:`RecordOptions.max_bytes`): the
recording stops before passing it, with a last marker saying so
(:func:`~ahp.record.asciicast.size_bound_marker`).

Markers: ``"$ <command line>"`` when a detected command starts,
``"exit <code>: <command line>"`` when it finishes (commands are detected by the
shell integration, :mod:`ahp.shell`). Input (``i``) is recorded only with
:attr:`RecordOptions.record_input` (it may hold passwords).

Ownership and cancellation: :meth:`Recorder.run` owns the file descriptor and the
subscription and releases both on every path. It ends when the terminal's channel
ends (disposed), at the size bound, or when cancelled; then it writes what is
buffered (shielded, for at most :data:`RECORD_CLOSE_TIMEOUT` seconds: a stalled
reader loses the rest, counted in :attr:`Recorder.lost_bytes`) and closes the file.

:func:`record_host` records every terminal a host creates into one directory
(``serve --record DIR``), each into a file it creates new (``O_EXCL | O_NOFOLLOW``: the
names are predictable, and what is already at one is never followed or truncated);
:func:`record_terminal` records one (the library) into the path its caller chose.

Lines are bounded: output or input longer than :data:`RECORD_EVENT_CHARS` is written as
several events in a row, so every line is one ``play`` reads
(:data:`~ahp.record.asciicast.MAX_LINE_BYTES`).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import re
import secrets
import shlex
import stat
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Final

import attrs
import trio

from ahp.engine import Host, Terminal
from ahp.engine.outbox import DEFAULT_OUTBOX_BYTES
from ahp.engine.subscription import Subscription
from ahp.protocol.actions import (
    ActionEnvelope,
    TerminalCommandExecuted,
    TerminalCommandFinished,
    TerminalData,
    TerminalExited,
    TerminalInput,
    TerminalResized,
)
from ahp.protocol.state import Snapshot, TerminalState
from ahp.record import asciicast
from ahp.record.sink import make_private_dirs

__all__ = [
    "RECORD_BUFFER_BYTES",
    "RECORD_CLOSE_TIMEOUT",
    "RECORD_MAX_BYTES",
    "RECORD_OUTBOX_BYTES",
    "RecordOptions",
    "Recorder",
    "record_host",
    "record_terminal",
    "recording_name",
]

log = logging.getLogger("ahp.record")

#: Size bound of one recording file (bytes); the recording stops before passing it.
RECORD_MAX_BYTES: Final = 64 * 1024 * 1024
#: Encoded lines waiting for the disk, at most (bytes); past it the recorder falls behind.
RECORD_BUFFER_BYTES: Final = 1024 * 1024
#: Envelopes waiting for the recorder, at most (bytes of memory); past it, a resync. As
#: every in-process subscriber's: the envelopes are the ones all subscribers share (no
#: copy), and one envelope of output (a parse batch) must fit with room to spare.
RECORD_OUTBOX_BYTES: Final = DEFAULT_OUTBOX_BYTES
#: Most characters of missed output a resync writes from the terminal's scrollback
#: (the latest ones: the screen a player shows is right again); the rest is lost.
RECORD_CATCH_UP_CHARS: Final = 256 * 1024
#: Seconds the writer gathers lines before a write (less once the buffer is half full).
RECORD_WRITE_DELAY: Final = 0.05
#: Seconds the recorder spends writing what is buffered when it ends or is cancelled.
RECORD_CLOSE_TIMEOUT: Final = 2.0
#: Smallest size bound of a recording (bytes): the header, a little output and the last
#: marker.
MIN_RECORD_BYTES: Final = 1024
#: Most characters of output or input in one event: longer data is written as several
#: events in a row (interval 0 after the first; the concatenated data is the same), and
#: a marker's label is cut there. So no line is longer than about 6 bytes a character
#: (JSON's ``\\u001b``) times this, far below what ``play`` reads
#: (:data:`~ahp.record.asciicast.MAX_LINE_BYTES`).
RECORD_EVENT_CHARS: Final = 64 * 1024
#: Longest title and command line in the header (characters; longer ones are cut).
_HEADER_TEXT_CHARS: Final = 4096
#: The last markers are written with an interval of at most this (seconds, 31 years): a
#: marker line then has a longest length, and that much room is kept for it under the
#: size bound (:meth:`Recorder._end_line`).
_LAST_MARKER_INTERVAL: Final = 999_999_999.0
#: Longest recording file name stem (bytes), far below NAME_MAX (255).
_NAME_LIMIT: Final = 100
#: The last marker of a recording stopped before its terminal ended (cancelled: the
#: server shut down, or the library's nursery was cancelled).
STOPPED_MARKER: Final = "recording stopped before the terminal ended"
#: Started commands remembered until they finish (for the end marker's command line);
#: past it the oldest is forgotten (its end marker then has no command line).
MAX_OPEN_COMMANDS: Final = 256
#: The last marker of a terminal disposed while its process was running.
DISPOSED_MARKER: Final = "terminal disposed while running"
#: Names tried for a recording of :func:`record_host` (the name, then with ``-2``, ``-3`` …
#: before its extension) before giving up on it.
_MAX_NAME_TRIES: Final = 1000
#: Terminal type recorded in the header (what the host sets for its terminals).
TERM_TYPE: Final = "xterm-256color"


@attrs.frozen
class RecordOptions:
    """How terminals are recorded."""

    #: Record input (``i`` events). Off by default: input may hold passwords.
    record_input: bool = False
    #: Size bound of each file (bytes).
    max_bytes: int = RECORD_MAX_BYTES
    #: Bound on encoded lines waiting for the disk (bytes).
    buffer_bytes: int = RECORD_BUFFER_BYTES
    #: Bound on envelopes waiting for the recorder (bytes of memory).
    outbox_bytes: int = RECORD_OUTBOX_BYTES
    #: ``idle_time_limit`` written into the header (players cap pauses at it).
    idle_time_limit: float | None = None

    def __attrs_post_init__(self) -> None:
        if self.max_bytes < MIN_RECORD_BYTES:
            raise ValueError(f"a recording's size bound must be at least {MIN_RECORD_BYTES}")
        if self.buffer_bytes < 1 or self.outbox_bytes < 1:
            raise ValueError("recording buffers must be at least 1 byte")


_UNSAFE: Final = re.compile(r"[^A-Za-z0-9._-]+")
_DOTS: Final = re.compile(r"\.{2,}")


def recording_name(uri: str, started: float | None = None) -> str:
    """A stable, safe file name for a terminal's recording:
    ``<UTC start, to the second>-<the URI's path, sanitised>.cast``.

    Only ``[A-Za-z0-9._-]`` appear (no ``/``, no leading dot, never ``..``), at most about
    120 bytes, so the name is safe in any directory and in a URL path.
    """
    when = time.gmtime(time.time() if started is None else started)
    stem = uri.split(":", 1)[-1]
    safe = _DOTS.sub(".", _UNSAFE.sub("-", stem)).strip("-.") or "terminal"
    return f"{time.strftime('%Y%m%dT%H%M%SZ', when)}-{safe[:_NAME_LIMIT]}.cast"


class Recorder:
    """Records one terminal into one file; run with :meth:`run` (see the module docstring).

    The subscription is registered when the recorder is created (so creating it
    before the terminal's process starts records everything).
    """

    def __init__(
        self,
        terminal: Terminal,
        path: str | os.PathLike[str],
        options: RecordOptions,
        *,
        fresh: bool = False,
    ) -> None:
        self.terminal = terminal
        #: The file; with ``fresh``, the name actually created once :meth:`run` started.
        self.path = Path(path)
        #: Create a new regular file, never open an existing one (see :meth:`_open`).
        self.fresh = fresh
        self.options = options
        self.subscription: Subscription = terminal.subscribe(
            max_bytes=options.outbox_bytes, paces=False
        )
        #: The terminal's output count as of the last output this recorder saw (the
        #: first snapshot holds everything up to now).
        self._seen_chars = terminal.output_chars
        self.started_at = time.time()
        self._last = time.monotonic()
        self._buffer: list[bytes] = []
        self._buffered = 0
        self._room = trio.lowlevel.ParkingLot()  # the writer took the buffer
        self._work = trio.lowlevel.ParkingLot()  # something to write
        self._half = trio.lowlevel.ParkingLot()  # the buffer is half full
        self._in_flight = False
        self._rest = memoryview(b"")  # what the write in progress has still to write
        self._closing = False  # the writer returns once the buffer is empty
        self._writer_done = trio.Event()
        self._ending = False
        self._failed = False  # the writer stopped after an error
        self._commands: dict[str, str] = {}
        self._header_written = False
        self._exited = False
        self._fd = -1
        self._nonblocking = False
        #: Bytes accepted into the file (header included), bounded by ``options.max_bytes``.
        self.size = 0
        #: Room kept under the size bound for the last marker: the longest it can be.
        self._end_room = max(
            len(asciicast.encode_event(_LAST_MARKER_INTERVAL + 0.999999, "m", label))
            for label in (asciicast.size_bound_marker(options.max_bytes), STOPPED_MARKER)
        )
        #: Every line but the last marker keeps the file's size under this.
        self._limit = options.max_bytes - self._end_room
        #: Whether the size bound stopped the recording.
        self.stopped_at_bound = False
        #: Counters for tests and figures.
        #: Characters of missed output written after resyncs, and lost in them.
        self.caught_up_chars = 0
        self.lost_chars = 0
        self.events = 0
        self.resyncs = 0
        self.written_bytes = 0
        self.lost_bytes = 0
        self.peak_buffered = 0
        #: Set once the file is closed.
        self.done = trio.Event()

    # -- encoding (the recorder task) ---------------------------------------------------------

    def _interval(self) -> float:
        now = time.monotonic()
        interval, self._last = now - self._last, now
        return interval

    def _end_line(self, label: str) -> bytes:
        """A last marker's line (its interval capped at :data:`_LAST_MARKER_INTERVAL`, so
        no longer than :attr:`_end_room`)."""
        return asciicast.encode_event(min(self._interval(), _LAST_MARKER_INTERVAL), "m", label)

    def _stop(self) -> None:
        """The size bound is reached: the last marker (it fits: :attr:`_end_room` was
        kept for it), and the recording stops."""
        self._push(self._end_line(asciicast.size_bound_marker(self.options.max_bytes)))
        self.stopped_at_bound = True

    def _push(self, line: bytes) -> None:
        self._buffer.append(line)
        self._buffered += len(line)
        self.size += len(line)
        self.peak_buffered = max(self.peak_buffered, self._buffered)
        self._work.unpark_all()
        if self._half and self._buffered * 2 >= self.options.buffer_bytes:
            self._half.unpark_all()

    def _event(self, code: str, data: str) -> bool:
        """Write one event (output or input longer than :data:`RECORD_EVENT_CHARS` as
        several); False once the recording stopped at its size bound."""
        self.events += 1
        interval = self._interval()
        if len(data) <= RECORD_EVENT_CHARS:
            return self._line(interval, code, data)
        if code not in ("o", "i"):
            return self._line(interval, code, data[:RECORD_EVENT_CHARS])  # a label: cut
        for start in range(0, len(data), RECORD_EVENT_CHARS):
            if not self._line(interval, code, data[start : start + RECORD_EVENT_CHARS]):
                return False
            interval = 0.0
        return True

    def _line(self, interval: float, code: str, data: str) -> bool:
        """One event line within the size bound; output that does not fit is cut to what
        fits, then the last marker ends the recording (any other event that does not fit
        ends it at once). False once stopped."""
        if self.stopped_at_bound:
            return False
        line = asciicast.encode_event(interval, code, data)
        room = self._limit - self.size
        if len(line) <= room:
            self._push(line)
            return True
        if code == "o":
            # The output that still fits goes in before the last marker: the longest
            # prefix whose line fits (a binary search: the line grows with the prefix;
            # a str is cut between code points, never inside a UTF-8 sequence).
            low, high = 0, min(len(data), room)
            while low < high:
                mid = (low + high + 1) // 2
                if len(asciicast.encode_event(interval, code, data[:mid])) <= room:
                    low = mid
                else:
                    high = mid - 1
            if low > 0:
                self._push(asciicast.encode_event(interval, code, data[:low]))
        self._stop()
        return False

    def _header(self, state: TerminalState) -> None:
        argv = self.terminal.spec.argv
        header = asciicast.Header(
            cols=state.cols or self.terminal.spec.cols,
            rows=state.rows or self.terminal.spec.rows,
            term_type=TERM_TYPE,
            timestamp=int(self.started_at),
            title=state.title[:_HEADER_TEXT_CHARS] or None,
            command=shlex.join(argv)[:_HEADER_TEXT_CHARS] if argv else None,
            env={"TERM": TERM_TYPE},
            idle_time_limit=self.options.idle_time_limit,
            extra={"x-ahp-terminal": self.terminal.uri},
        )
        self._push(asciicast.encode_header(header))
        self._header_written = True

    def _snapshot(self, snapshot: Snapshot) -> bool:
        state = snapshot.state
        assert isinstance(state, TerminalState)
        if not self._header_written:
            self._header(state)
            text = state.text()
            return not text or self._event("o", text)  # attached late: what is there
        return self._catch_up()

    def _catch_up(self) -> bool:
        """After a resync: the output missed since the last one seen, from the
        terminal's scrollback (read now: the subscription made the snapshot just
        before handing it over, no checkpoint between), behind a marker saying how
        much it is and how much was lost (past the scrollback or
        :data:`RECORD_CATCH_UP_CHARS`)."""
        self.resyncs += 1
        now = self.terminal.output_chars
        missed, self._seen_chars = now - self._seen_chars, now
        if missed <= 0:
            return True
        state = self.terminal.state
        tail = state.tail(min(missed, RECORD_CATCH_UP_CHARS))
        self.caught_up_chars += len(tail)
        self.lost_chars += missed - len(tail)
        if not self._event("m", asciicast.caught_up_marker(len(tail), missed - len(tail))):
            return False
        return not tail or self._event("o", tail)

    def _envelope(self, envelope: ActionEnvelope) -> bool:
        action = envelope.action
        cls = action.__class__
        if cls is TerminalData:
            assert isinstance(action, TerminalData)
            self._seen_chars += len(action.data)
            return self._event("o", action.data)
        if cls is TerminalResized:
            assert isinstance(action, TerminalResized)
            return self._event("r", f"{action.cols}x{action.rows}")
        if cls is TerminalInput:
            assert isinstance(action, TerminalInput)
            return not self.options.record_input or self._event("i", action.data)
        if cls is TerminalCommandExecuted:
            assert isinstance(action, TerminalCommandExecuted)
            if len(self._commands) >= MAX_OPEN_COMMANDS:
                # Commands that never finished (killed with their shell): forget the oldest.
                del self._commands[next(iter(self._commands))]
            self._commands[action.commandId] = action.commandLine
            return self._event("m", asciicast.command_started(action.commandLine))
        if cls is TerminalCommandFinished:
            assert isinstance(action, TerminalCommandFinished)
            line = self._commands.pop(action.commandId, "")
            if self._exited:
                # (The command the shell exited in, ended after the exit: the exit event
                # stays the recording's last, and its code says how it ended.)
                return True
            return self._event("m", asciicast.command_finished(line, action.exitCode))
        if cls is TerminalExited:
            assert isinstance(action, TerminalExited)
            self._exited = True
            if action.exitCode is None:
                return self._event("m", "exited without an exit code (killed by a signal)")
            return self._event("x", str(action.exitCode))
        return True

    async def _wait_for_room(self) -> None:
        while self._buffered > self.options.buffer_bytes and not self._ending:
            await self._room.park()

    # -- the file (the writer task) ----------------------------------------------------------

    def _open(self) -> None:
        """Open the target (mode 0600: a recording may hold what was typed).

        ``fresh`` (:func:`record_host`, whose names are predictable): always a new
        regular file, created with ``O_EXCL | O_NOFOLLOW``; when the name is taken (a
        file, or a symlink someone placed there, dangling or not) the next is tried
        (``-2``, ``-3`` … before the extension): nothing that exists is opened, followed or
        truncated. Else the path the caller chose: a FIFO, socket or device is opened
        non-blocking, anything else as a regular file, created or truncated."""
        flags = os.O_WRONLY | os.O_CLOEXEC
        if self.fresh:
            base = self.path
            for n in range(1, _MAX_NAME_TRIES + 1):
                path = base if n == 1 else base.with_name(f"{base.stem}-{n}{base.suffix}")
                try:
                    self._fd = os.open(path, flags | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
                except FileExistsError:
                    continue
                self.path = path
                return
            raise OSError(errno.EEXIST, f"{_MAX_NAME_TRIES} names taken", str(base))
        try:
            mode = os.stat(self.path).st_mode
        except FileNotFoundError:
            mode = 0
        if mode and not stat.S_ISREG(mode) and not stat.S_ISDIR(mode):
            self._nonblocking = True
            try:
                self._fd = os.open(self.path, flags | os.O_NONBLOCK)
            except OSError as exc:
                if exc.errno == errno.ENXIO:
                    raise OSError(exc.errno, f"nobody reads the FIFO {self.path}") from None
                raise
            return
        make_private_dirs(self.path.parent)
        self._fd = os.open(self.path, flags | os.O_CREAT | os.O_TRUNC, 0o600)

    async def _write(self, data: bytes) -> None:
        """Write all of ``data``; if cancelled, what is not written yet goes back to the
        front of the buffer (for the drain)."""
        view = memoryview(data)
        try:
            await self._write_view(view)
        except trio.Cancelled:
            rest = bytes(self._rest)
            if rest:
                self._buffer.insert(0, rest)
                self._buffered += len(rest)
            raise

    async def _write_view(self, view: memoryview) -> None:
        self._rest = view
        while view:
            if self._nonblocking:
                try:
                    written = os.write(self._fd, view)
                except BlockingIOError:
                    await trio.lowlevel.wait_writable(self._fd)
                    continue
            else:
                written = await trio.to_thread.run_sync(os.write, self._fd, view)
            view = self._rest = view[written:]
            self.written_bytes += written

    async def _writer(self) -> None:
        """Take the buffer, write it, repeat; return once closing and nothing is left
        (or after a write error)."""
        try:
            while True:
                while not self._buffer:
                    if self._closing:
                        return
                    await self._work.park()
                if not self._closing and self._buffered * 2 < self.options.buffer_bytes:
                    # Gather: one write (one worker-thread hop) per RECORD_WRITE_DELAY.
                    with trio.move_on_after(RECORD_WRITE_DELAY):
                        await self._half.park()
                chunk = self._take()
                self._in_flight = True
                try:
                    await self._write(chunk)
                except OSError as exc:
                    log.warning("recording %s: cannot write (%s); recording stops", self.path, exc)
                    self._failed = True
                    self._ending = True
                    self._room.unpark_all()
                    return
                finally:
                    self._in_flight = False
        finally:
            self._writer_done.set()

    def _take(self) -> bytes:
        chunk = b"".join(self._buffer)
        self._buffer.clear()
        self._buffered = 0
        self._room.unpark_all()
        return chunk

    # -- the task ----------------------------------------------------------------------------

    async def run(
        self, *, task_status: trio.TaskStatus[Recorder] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Record until the terminal's channel ends, the size bound, or cancellation.

        Raises ``OSError`` (before ``started``) if the file cannot be opened; the
        subscription is released then too.
        """
        try:
            if self._nonblocking_target():
                self._open()
            else:
                await trio.to_thread.run_sync(self._open)
        except BaseException:
            await self.subscription.aclose()
            self.done.set()
            raise
        task_status.started(self)
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._writer)
                nursery.start_soon(self._watch_end)
                try:
                    await self._record()
                except trio.Cancelled:
                    if not self.stopped_at_bound:
                        self._push(self._end_line(STOPPED_MARKER))  # (its room was kept)
                    raise
                finally:
                    with trio.CancelScope(shield=True):
                        await self.subscription.aclose()
                        await self._drain(nursery)
        finally:
            self._close()

    def _nonblocking_target(self) -> bool:
        if self.fresh:
            return False
        try:
            mode = os.stat(self.path).st_mode
        except OSError:
            return False
        return not stat.S_ISREG(mode) and not stat.S_ISDIR(mode)

    async def _watch_end(self) -> None:
        """Stop waiting for room once the terminal has gone (the rest is drained)."""
        await self.terminal.closed.wait()
        self._ending = True
        self._room.unpark_all()

    async def _record(self) -> None:
        async for item in self.subscription:
            going = self._snapshot(item) if isinstance(item, Snapshot) else self._envelope(item)
            if not going or self._failed:
                return
            if self._buffered > self.options.buffer_bytes:
                await self._wait_for_room()
        if not self._exited and self._header_written and self.terminal.pid is not None:
            # Disposed while its process ran: no exit event follows.
            self._event("m", DISPOSED_MARKER)

    async def _drain(self, nursery: trio.Nursery) -> None:
        """Write what is buffered, for at most RECORD_CLOSE_TIMEOUT s: the writer
        finishes the buffer and returns (if it was cancelled, what is left is written
        here); a reader that stays stalled loses the rest."""
        self._closing = True
        self._work.unpark_all()
        self._half.unpark_all()
        with trio.move_on_after(RECORD_CLOSE_TIMEOUT):
            await self._writer_done.wait()
            while self._buffer and not self._failed:
                try:
                    await self._write(self._take())
                except OSError:
                    break
        nursery.cancel_scope.cancel()

    def _close(self) -> None:
        self.lost_bytes = self.size - self.written_bytes
        if self._fd >= 0:
            if self._nonblocking:
                trio.lowlevel.notify_closing(self._fd)
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = -1
            if self.terminal.pid is None and self.events == 0 and not self._nonblocking:
                with contextlib.suppress(OSError):
                    self.path.unlink()  # the terminal never ran: no empty recording left
        self.done.set()


def _usable_directory(folder: Path) -> None:
    """Create ``folder`` if missing (mode 0700), then check it is a directory files can
    be created in: a probe file is created (``O_EXCL | O_NOFOLLOW``) and removed.
    ``OSError`` if not. Blocking: call it from a worker thread."""
    make_private_dirs(folder)
    if not folder.is_dir():
        raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(folder))
    probe = folder / f".ahp-probe-{os.getpid()}-{secrets.token_hex(4)}"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    os.close(os.open(probe, flags, 0o600))
    os.unlink(probe)


async def record_terminal(
    terminal: Terminal,
    path: str | os.PathLike[str],
    options: RecordOptions | None = None,
    *,
    task_status: trio.TaskStatus[Recorder] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Record ``terminal`` into ``path`` until it is disposed (or cancelled):
    ``recorder = await nursery.start(ahp.record.record_terminal, term, "t.cast")``.
    Recording starts at the terminal's current content (written as the first
    output event), then follows it live."""
    recorder = Recorder(terminal, path, options or RecordOptions())
    await recorder.run(task_status=task_status)


@asynccontextmanager
async def record_host(
    host: Host, directory: str | os.PathLike[str], options: RecordOptions | None = None
) -> AsyncIterator[dict[str, Recorder]]:
    """Record every terminal ``host`` creates while the block runs, one file each in
    ``directory`` (created, mode 0700), named by :func:`recording_name`. Yields the
    live recorders by terminal URI (finished ones are removed).

    Raises ``OSError`` before the block if ``directory`` is not a directory this
    process can create files in (a regular file, read-only): every recording would
    fail, and a server must not start as if recording."""
    folder = Path(directory)
    await trio.to_thread.run_sync(_usable_directory, folder)
    opts = options or RecordOptions()
    recorders: dict[str, Recorder] = {}
    async with trio.open_nursery() as nursery:

        async def run(recorder: Recorder) -> None:
            try:
                await recorder.run()
            except OSError as exc:
                log.warning(
                    "cannot record %s into %s: %s", recorder.terminal.uri, recorder.path, exc
                )
            except Exception:  # a bug of ours ends that recording, never the host's others
                log.exception("recording %s into %s failed", recorder.terminal.uri, recorder.path)
            finally:
                if recorders.get(recorder.terminal.uri) is recorder:
                    del recorders[recorder.terminal.uri]

        def hook(terminal: Terminal) -> None:
            # (The same name again within a second, the same URI or two that sanitise
            # alike: the recorder creates the next free one, with -2 …)
            recorder = Recorder(terminal, folder / recording_name(terminal.uri), opts, fresh=True)
            recorders[terminal.uri] = recorder
            nursery.start_soon(run, recorder)

        host.on_terminal_created.append(hook)
        try:
            yield recorders
        finally:
            host.on_terminal_created.remove(hook)
            nursery.cancel_scope.cancel()
