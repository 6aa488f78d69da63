"""Standard input and output for the MCP stdio transport, so that shutdown never hangs.

Why: the SDK's ``mcp.server.stdio.stdio_server`` runs on Trio (through anyio)
and is what we use, but it reads stdin with ``anyio.wrap_file`` — a blocking
``readline`` in a worker thread, which cannot be cancelled. When the server is
asked to stop (SIGTERM, Ctrl-C) while the client still holds our stdin open,
the cancelled task waits for that thread, i.e. for a line that may never come:
measured, the process had to be killed (the evidence is
``tests/test_mcp.py::test_sdk_stdin_reader_blocks_cancellation``).
``stdio_server`` accepts its stdin as a parameter, so the least-bad design is
to keep the SDK's transport, framing and stdout handling, and hand it this
reader instead: the same line iteration over a Trio ``FdStream``, which a
cancel scope interrupts at once.

Standard output, for the same reason: the SDK writes its answers with
``anyio.wrap_file`` too, a blocking ``write`` in a worker thread. While the
client does not read our stdout (the pipe full: a 2 MB answer is enough), that
write blocks, and SIGTERM, SIGINT or the end of stdin left the server waiting
for it — a client that stopped reading, then did the usual ``terminate();
wait()``, waited for ever. :class:`StdoutWriter` is handed to ``stdio_server``
instead: the SDK's writer task only queues each message (at most
:data:`MAX_QUEUED_BYTES`; past it the task, and through the SDK's unbuffered
write stream every handler with an answer, waits: backpressure, bounded
memory), and a thread of its own writes the queue to the descriptor. Shutdown
never waits for that thread: a write the reader never takes is abandoned (the
thread is a daemon; the process exits around it). Why a thread rather than
non-blocking writes from Trio: the descriptor's non-blocking flag belongs to
its open file description, shared with every other holder — with a terminal
that is the parent shell, and with ``2>&1`` our own stderr — and a regular file
cannot be waited on at all (epoll refuses it); a blocking write in a thread
works the same on a pipe, a socket, a file or a terminal and changes nothing
for anyone else.

Ownership: :func:`claim_stdin` takes fd 0 as the SDK would (the wire moves to
a private descriptor; fd 0 becomes ``/dev/null`` so nothing else in the
process reads our messages), and :meth:`StdinLines.release` restores it and
its blocking mode. Buffering: a line longer than :data:`MAX_LINE_BYTES` is
dropped up to its newline and reported as :data:`TOO_LONG`; the server keeps
going. :func:`claim_stdout` takes fd 1 the same way (fd 1 becomes a copy of
stderr meanwhile, as the SDK does it, so stray prints miss the wire).

The end of stdin: the SDK cancels every request still running when its read
stream ends, so a script piped in (``printf '...' | ahp-terminals mcp``) lost
the answers to everything after its first lines. :class:`ScreenedLines` keeps
count of the requests it handed on and the answers that went out
(:class:`InFlight`), and at the end of stdin it holds the end back until every
request read has been answered, at most :data:`EOF_GRACE`; then its callback
stops the calls still running (answered as stopped), and the end goes on.

Answers the SDK would not give: :class:`ScreenedLines` sits between
:class:`StdinLines` and the SDK. The SDK drops a line it cannot validate
without answering it (it logs it at debug level), so a client that sent a
request in it would wait forever; :mod:`ahp.mcp.screen` decides what each such
line is owed (-32700, -32600, -32602 or a tool error), and the answer goes
into the SDK's own write stream, so the SDK's single stdout writer frames it
(one JSON line) and never interleaves it with its own answers.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import queue
import select
import threading
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from types import TracebackType
from typing import Final, Protocol, Self

import anyio
import mcp_types
import trio
from mcp.shared.message import SessionMessage

from ahp.mcp.screen import Answer, screen, too_long

__all__ = [
    "EOF_GRACE",
    "MAX_LINE_BYTES",
    "MAX_QUEUED_BYTES",
    "READ_SIZE",
    "STOP_GRACE",
    "TOO_LONG",
    "AnswerStream",
    "AnswersCounted",
    "InFlight",
    "ScreenedLines",
    "StdinLines",
    "StdoutWriter",
    "claim_stdin",
    "claim_stdout",
]

log = logging.getLogger("ahp.mcp")


class AnswerStream(Protocol):
    """Where :class:`ScreenedLines` sends answers: a clone of the SDK's write stream."""

    async def send(self, item: SessionMessage, /) -> None: ...
    def close(self) -> None: ...


#: The longest JSON-RPC message line accepted (bytes).
MAX_LINE_BYTES: Final = 16 * 1024 * 1024
#: Bytes read per system call.
READ_SIZE: Final = 65_536
#: What an over-long line is replaced by (:class:`ScreenedLines` answers it; not JSON either).
TOO_LONG: Final = f"<a message line over {MAX_LINE_BYTES} bytes was dropped>\n"
#: Bytes of messages queued for stdout and not yet written; a message that would go past
#: it waits for room (one message alone is always taken, whatever its size: an answer is
#: at most about 2 MB of output, ``MAX_BUDGET_BYTES`` twice, JSON-escaped).
MAX_QUEUED_BYTES: Final = 8 * 1024 * 1024
#: Seconds, after stdin's end, for the requests already read to be answered.
EOF_GRACE: Final = 10.0
#: Seconds, after the calls still running at :data:`EOF_GRACE` were stopped, for their
#: answers (a stopped ``run_command`` sends its command a Ctrl-C first, bounded by
#: ``ahp.agent.CANCEL_INTERRUPT_TIMEOUT``).
STOP_GRACE: Final = 10.0


class StdinLines:
    """Lines (``str``, newline kept) from a file descriptor, until end of file.

    Decoded as UTF-8 with ``surrogateescape``: a byte that is not UTF-8 becomes a lone
    surrogate (U+DC80-U+DCFF), which :mod:`ahp.mcp.screen` refuses naming the byte,
    where replacing it with U+FFFD would run a command other than the one sent.

    Iterate with ``async for``; each ``__anext__`` is cancellable. Owns ``fd``.
    """

    def __init__(self, fd: int, *, restore: tuple[int, int] | None = None) -> None:
        self._fd = fd
        self._stream = trio.lowlevel.FdStream(os.dup(fd))
        self._buffer = bytearray()
        self._dropping = False
        self._eof = False
        self._restore = restore

    def __aiter__(self) -> StdinLines:
        return self

    async def __anext__(self) -> str:
        while True:
            newline = self._buffer.find(b"\n")
            if newline >= 0:
                line = bytes(self._buffer[: newline + 1])
                del self._buffer[: newline + 1]
                if self._dropping:
                    self._dropping = False
                    return TOO_LONG
                return line.decode("utf-8", "surrogateescape")
            if self._eof:
                if self._buffer and not self._dropping:
                    rest = bytes(self._buffer)
                    self._buffer.clear()
                    return rest.decode("utf-8", "surrogateescape")
                raise StopAsyncIteration
            if len(self._buffer) > MAX_LINE_BYTES:
                self._buffer.clear()
                self._dropping = True
            chunk = await self._stream.receive_some(READ_SIZE)
            if not chunk:
                self._eof = True
            else:
                self._buffer += chunk

    def release(self) -> None:
        """Close the reader, leave the descriptor blocking, restore fd 0 if it was claimed.
        Once only: a second call does nothing (closing the number again could close
        whatever reused it)."""
        fd, self._fd = self._fd, -1
        if fd < 0:
            return
        self._stream.close()
        with contextlib.suppress(OSError):
            os.set_blocking(fd, True)  # FdStream made the shared description non-blocking
        if self._restore is not None:
            target, private = self._restore
            with contextlib.suppress(OSError):
                os.dup2(private, target)
        with contextlib.suppress(OSError):
            os.close(fd)


class StdoutWriter:
    """What the SDK's ``stdio_server`` writes stdout through: a bounded queue, and a thread
    that writes it to a file descriptor (see the module docstring for why a thread).

    :meth:`write` queues one message (the SDK writes each message as one ``write``
    of its JSON and a newline) and returns; it waits, cancellably, while
    :data:`MAX_QUEUED_BYTES` are queued. :meth:`flush` does not wait for the
    thread. :meth:`drain` waits until the queue is written. Once a write fails (the
    reader closed its end: ``EPIPE``), later messages are dropped (logged once).

    Ownership: owns ``fd`` (:meth:`release` restores fd 1 if it was claimed, and
    closes ``fd`` unless the thread is still blocked writing to it: it is left open
    then, never closed under the thread). Must be made inside ``trio.run``.
    """

    def __init__(
        self,
        fd: int,
        *,
        restore: tuple[int, int] | None = None,
        max_queued: int = MAX_QUEUED_BYTES,
    ) -> None:
        self._fd = fd
        self._restore = restore
        self._max_queued = max_queued
        #: Bytes queued and not yet written (changed on the Trio thread only).
        self.queued = 0
        self._room = trio.lowlevel.ParkingLot()
        self._token = trio.lowlevel.current_trio_token()
        self._queue: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        #: Why writing stopped (the first error), else None.
        self.failed: OSError | None = None
        self._said = False
        self._thread = threading.Thread(
            target=self._run, args=(fd,), name="ahp-mcp-stdout", daemon=True
        )
        self._thread.start()

    async def write(self, text: str) -> None:
        await trio.lowlevel.checkpoint_if_cancelled()
        # (Never fail here: a string that is not valid Unicode still becomes one line.)
        data = text.encode("utf-8", "replace")
        while self.queued and self.queued + len(data) > self._max_queued:
            await self._room.park()
        if self.failed is not None or self._fd < 0:
            return  # (dropped: written nowhere any more)
        self.queued += len(data)
        self._queue.put(data)

    async def flush(self) -> None:
        await trio.lowlevel.checkpoint()

    async def drain(self) -> None:
        """Return once everything queued is written (or dropped after a failed write)."""
        while self.queued:
            await self._room.park()
        await trio.lowlevel.checkpoint()

    def _run(self, fd: int) -> None:
        """The thread: write each queued message whole to ``fd``; None ends it."""
        while (data := self._queue.get()) is not None:
            if self.failed is None:
                try:
                    view = memoryview(data)
                    while view:
                        try:
                            view = view[os.write(fd, view) :]
                        except BlockingIOError:  # (a description someone made non-blocking)
                            select.select([], [fd], [])
                except OSError as exc:
                    self.failed = exc
            try:
                self._token.run_sync_soon(self._written, len(data))
            except trio.RunFinishedError:
                return

    def _written(self, size: int) -> None:
        self.queued -= size
        self._room.unpark_all()
        if self.failed is not None and not self._said:
            self._said = True
            log.warning("stdout: answers are not written any more (%s)", self.failed)

    def release(self) -> None:
        """End the thread once it has written what is queued; restore fd 1 if it was
        claimed. Does not wait: a thread blocked in a write is abandoned. Idempotent."""
        fd, self._fd = self._fd, -1
        if fd < 0:
            return
        self._queue.put(None)
        if self._restore is not None:
            target, _ = self._restore
            with contextlib.suppress(OSError):
                os.dup2(fd, target)
        if self.queued == 0:
            self._thread.join(timeout=1.0)  # (it only has the None to take)
        if not self._thread.is_alive():
            with contextlib.suppress(OSError):
                os.close(fd)


def claim_stdout() -> StdoutWriter:
    """Write the MCP wire to fd 1 through a :class:`StdoutWriter`; fd 1 is a copy of
    stderr meanwhile (``/dev/null`` if that fails), so stray output misses the wire."""
    private = fcntl.fcntl(1, fcntl.F_DUPFD_CLOEXEC, 3)
    try:
        diversion = os.dup(2)
    except OSError:
        diversion = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(diversion, 1)
    finally:
        os.close(diversion)
    return StdoutWriter(private, restore=(1, private))


def _key(request_id: mcp_types.RequestId) -> tuple[str, str | int]:
    return (type(request_id).__name__, request_id)


class InFlight:
    """The requests read from stdin and not answered yet, by id (a client that reuses an
    id while its first request runs is owed two answers: they are counted).

    :meth:`received` is told each message handed to the SDK (a ``notifications/cancelled``
    forgets its request: the SDK answers nothing to a request the client cancelled),
    :meth:`answered` each message the SDK sends (:class:`AnswersCounted`).
    """

    def __init__(self) -> None:
        self._owed: Counter[tuple[str, str | int]] = Counter()
        self._changed = trio.lowlevel.ParkingLot()

    def __len__(self) -> int:
        return self._owed.total()

    def received(self, message: mcp_types.JSONRPCMessage | None) -> None:
        if isinstance(message, mcp_types.JSONRPCRequest):
            self._owed[_key(message.id)] += 1
        elif (
            isinstance(message, mcp_types.JSONRPCNotification)
            and message.method == "notifications/cancelled"
            and isinstance(message.params, dict)
            and isinstance(cancelled := message.params.get("requestId"), str | int)
        ):
            self._forget(_key(cancelled))

    def answered(self, message: mcp_types.JSONRPCMessage) -> None:
        if (
            isinstance(message, mcp_types.JSONRPCResponse | mcp_types.JSONRPCError)
            and message.id is not None
        ):
            self._forget(_key(message.id))

    def _forget(self, key: tuple[str, str | int]) -> None:
        if self._owed[key] > 1:
            self._owed[key] -= 1
        else:
            self._owed.pop(key, None)
        self._changed.unpark_all()

    async def wait_answered(self) -> None:
        """Return once every request read has been answered (at once when none is owed)."""
        while self._owed:
            await self._changed.park()
        await trio.lowlevel.checkpoint()

    async def settle(
        self, stop: Callable[[], None], *, grace: float = EOF_GRACE, stop_grace: float = STOP_GRACE
    ) -> None:
        """At stdin's end: wait for the answers owed, ``grace`` seconds at most; then
        ``stop()`` the calls still running and wait ``stop_grace`` more for their answers."""
        with trio.move_on_after(grace):
            await self.wait_answered()
        if not self._owed:
            return
        log.warning(
            "stdin closed: %d request(s) still running after %g s: stopping them", len(self), grace
        )
        stop()
        with trio.move_on_after(stop_grace):
            await self.wait_answered()
        if self._owed:
            log.warning("stdin closed: %d request(s) left unanswered", len(self))


class AnswersCounted:
    """The SDK's write stream, telling :class:`InFlight` of every message sent through it
    (what ``Server.run`` is given instead of the stream itself). Owns nothing more than
    the stream does."""

    def __init__(self, stream: AnyWriteStream, in_flight: InFlight) -> None:
        self._stream = stream
        self._in_flight = in_flight

    async def send(self, item: SessionMessage, /) -> None:
        await self._stream.send(item)
        self._in_flight.answered(item.message)

    async def aclose(self) -> None:
        await self._stream.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> None:
        await self.aclose()


class AnyWriteStream(Protocol):
    """What :class:`AnswersCounted` wraps (the SDK's write stream)."""

    async def send(self, item: SessionMessage, /) -> None: ...
    async def aclose(self) -> None: ...


def claim_stdin() -> StdinLines:
    """Read the MCP wire from fd 0 through Trio; fd 0 reads ``/dev/null`` meanwhile."""
    private = fcntl.fcntl(0, fcntl.F_DUPFD_CLOEXEC, 3)
    null = os.open(os.devnull, os.O_RDONLY)
    try:
        os.dup2(null, 0)
    finally:
        os.close(null)
    return StdinLines(private, restore=(0, private))


class ScreenedLines:
    """The lines of ``lines`` that the SDK's stdio transport takes; answers the others.

    Iterated by the SDK's reader task in place of stdin (``stdio_server(stdin=...)``).
    Each line is screened (:func:`ahp.mcp.screen.screen`): one the SDK takes is
    yielded unchanged; one it would drop unanswered is answered here and not yielded
    (a blank line is skipped). Answers are sent into the SDK's write stream
    (:meth:`answer_into`, a clone of it), whose single writer task frames each message
    as one line on stdout; an answer waits for :meth:`answer_into` and then for that
    writer, so a client that stops reading stops our reading too (no buffer grows).

    The end of ``lines``: every request handed on is told to ``in_flight``, and at the
    end ``at_end()`` is awaited before the end is passed on (the SDK cancels the
    requests still running once it sees the end): ``serve_stdio`` waits there for the
    answers owed (:meth:`InFlight.settle`).

    Ownership: owns the clone and closes it when ``lines`` ends (the SDK's writer
    finishes once every sender is closed) or at :meth:`close`; does not own ``lines``.
    Cancellation: ``__anext__`` is cancellable at any await; an answer cancelled
    mid-send is not sent.
    """

    def __init__(
        self,
        lines: AsyncIterator[str],
        *,
        max_line_bytes: int = MAX_LINE_BYTES,
        in_flight: InFlight | None = None,
        at_end: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self._lines = lines
        self._max_line_bytes = max_line_bytes
        self._in_flight = in_flight
        self._at_end = at_end
        self._answers: AnswerStream | None = None
        self._ready = trio.Event()
        self._closed = False

    def answer_into(self, stream: AnswerStream) -> None:
        """Send answers into ``stream`` (owned from now on: closed with this reader)."""
        if self._closed:
            stream.close()
            return
        self._answers = stream
        self._ready.set()

    def close(self) -> None:
        """Close the answer stream; later answers are dropped. Idempotent."""
        self._closed = True
        answers, self._answers = self._answers, None
        if answers is not None:
            answers.close()
        self._ready.set()

    def __aiter__(self) -> ScreenedLines:
        return self

    async def __anext__(self) -> str:
        while True:
            try:
                line = await self._lines.__anext__()
            except StopAsyncIteration:
                if self._at_end is not None:
                    at_end, self._at_end = self._at_end, None
                    await at_end()
                self.close()
                raise
            verdict = too_long(self._max_line_bytes) if line == TOO_LONG else screen(line)
            if verdict.forward:
                if self._in_flight is not None:
                    self._in_flight.received(verdict.message)
                return line
            if verdict.reason:
                log.warning("stdin: %s (%s)", verdict.reason, _answered(verdict.answer))
            if verdict.answer is not None:
                await self._send(verdict.answer)

    async def _send(self, answer: Answer) -> None:
        await self._ready.wait()
        if self._answers is None:
            return
        try:
            await self._answers.send(SessionMessage(answer))
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            log.debug("stdin: the answer was not written (stdout closed)")


def _answered(answer: Answer | None) -> str:
    if answer is None:
        return "not answered"
    if isinstance(answer, mcp_types.JSONRPCError):
        return f"answered {answer.error.code}"
    return "answered with a tool error"
