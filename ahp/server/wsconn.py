"""The server side of one WebSocket connection, on wsproto (sans-I/O).

Why not trio-websocket's server: measured on the sidecar's two hot paths, its
per-connection reader task hands every message to the handler through a memory
channel (one more scheduler pass and ``epoll_wait`` per keystroke), and it sends
only ``str``, which the server had to decode from orjson's UTF-8 bytes for
wsproto to encode again and copy into a frame (~2 ms of CPU per MB of terminal
output, a fifth of the sidecar's). Here the connection's own reader task parses
frames and runs the handler inline, and the writer sends frames it encoded once,
as UTF-8, several per system call. wsproto (the sans-I/O protocol library
trio-websocket and hypercorn are built on) still does the HTTP upgrade
(:mod:`ahp.server.upgrade` reads and checks it; :func:`accept` answers it), frame
parsing, unmasking, UTF-8 validation and control frames; only the header of an
outgoing text frame is written here (server frames are not masked: RFC 6455
§5.1). The client library keeps using trio-websocket, through :mod:`ahp.ws`.

Ownership: a :class:`ServerWebSocket` owns its stream and closes it in
:meth:`~ServerWebSocket.aclose`. One task may :meth:`receive` (it answers pings
and the peer's close itself) while another sends; sends are serialised by a
lock. Buffering: at most one ``receive_some`` (:data:`RECEIVE_SIZE`) beyond the
message being assembled, which is bounded by ``max_message_size`` (the peer is
closed with 1009 past it). Cancellation: a send cancelled part-way through a
frame leaves the stream unusable for framing, so the connection is marked
*broken* and :meth:`aclose` then closes the stream without a close frame.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import sys
import termios
from collections.abc import Callable, Iterable
from typing import Final

import trio
from wsproto import WSConnection
from wsproto.connection import ConnectionState
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Ping,
    Pong,
    TextMessage,
)

from ahp.keystroke import enabled, parse_simple_frame
from ahp.server.inbound import InboundBudget

__all__ = [
    "BUSY_REASON",
    "GAVE_WAY_REASON",
    "RECEIVE_SIZE",
    "ConnectionClosed",
    "ServerWebSocket",
    "accept",
    "text_frame_header",
]

log = logging.getLogger("ahp.server")

#: Bytes asked of the socket per read.
RECEIVE_SIZE: Final = 64 * 1024
#: Frames are gathered into writes of about this many bytes (see ``send_texts``).
WRITE_CHUNK: Final = 256 * 1024
#: Frames one message may be fragmented into (RFC 6455 5.4 sets no bound). wsproto parses
#: each frame in Python, ~10 us: an 8 MiB message in 1-byte fragments held the loop for
#: 83 s of CPU (issue 25). A sender fragmenting more is closed with 1009.
MAX_FRAGMENTS: Final = 256
#: Seconds a message may take from its first frame to its last; a peer that holds a
#: message (or a frame) unfinished for longer is closed with 1008.
MESSAGE_DEADLINE: Final = 30.0
#: wsproto events handled before the receive loop checkpoints (a read of 64 KiB can hold
#: thousands of tiny frames: pings, fragments).
EVENT_BATCH: Final = 64
#: Bytes read (and parsed, looking for the peer's close frame) after our close frame at
#: most: a peer still flooding tiny frames must not cost a second of parsing.
CLOSE_DRAIN_BYTES: Final = 256 * 1024
#: wsproto events parsed after our close frame at most (~10 us each).
CLOSE_DRAIN_EVENTS: Final = 256
#: Close code for a policy violation (RFC 6455 7.4.1).
POLICY: Final = 1008
#: Close code "try again later" (an inbound budget exhausted).
TRY_AGAIN: Final = 1013
#: Why a connection is closed (1013) when its part of a message would pass the inbound
#: budget, and when its unfinished message gives way to another connection's.
BUSY_REASON: Final = "server busy: too many large messages"
GAVE_WAY_REASON: Final = "server busy: too many large messages (yours was dropped for another)"
#: Pings (:meth:`ServerWebSocket.ping`) waiting for their pong at once, per connection
#: (one per newcomer claiming this connection's clientId; those are one at a time).
MAX_PINGS: Final = 4
#: Close codes (RFC 6455 §7.4.1).
ABNORMAL: Final = 1006
TOO_BIG: Final = 1009


class ConnectionClosed(Exception):
    """The connection is closed (or closing); ``code`` as the peer or we closed it."""

    def __init__(self, code: int, reason: str = "") -> None:
        super().__init__(f"connection closed: {code} {reason}".rstrip())
        self.code = code
        self.reason = reason


def text_frame_header(length: int) -> bytes:
    """The header of one unmasked, final text frame whose payload is ``length`` bytes."""
    if length < 126:
        return bytes((0x81, length))
    if length < 65536:
        return b"\x81\x7e" + length.to_bytes(2, "big")
    return b"\x81\x7f" + length.to_bytes(8, "big")


async def accept(
    stream: trio.abc.Stream,
    ws: WSConnection,
    *,
    max_message_size: int,
    subprotocol: str | None = None,
    early_data: bytes = b"",
    budget: InboundBudget | None = None,
    message_deadline: float = MESSAGE_DEADLINE,
) -> ServerWebSocket:
    """Accept the upgrade (no extensions: compression stays off).

    ``subprotocol`` must be one the client offered: browsers and most client
    libraries fail a handshake that offered subprotocols and got none back.
    ``early_data``: :attr:`UpgradeRequest.early_data`, parsed before anything else.
    """
    try:
        await stream.send_all(ws.send(AcceptConnection(subprotocol=subprotocol)))
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        raise ConnectionClosed(ABNORMAL, "peer left during the handshake") from None
    return ServerWebSocket(
        stream,
        ws,
        max_message_size=max_message_size,
        received=early_data,
        budget=budget,
        message_deadline=message_deadline,
    )


class ServerWebSocket:
    """An accepted connection; see the module docstring for tasks and ownership."""

    def __init__(
        self,
        stream: trio.abc.Stream,
        ws: WSConnection,
        *,
        max_message_size: int,
        received: bytes = b"",
        budget: InboundBudget | None = None,
        message_deadline: float = MESSAGE_DEADLINE,
    ) -> None:
        self._stream = stream
        self._ws = ws
        self._max = max_message_size
        self._send_lock = trio.Lock()
        self._parts: list[str | bytes] = []
        self._size = 0
        #: The message being assembled: frames completed, memory held (taken from the
        #: budget), and when its first part arrived (for MESSAGE_DEADLINE).
        self._frames = 0
        self._held = 0
        self._started: float | None = None
        self._budget = budget
        self._over_budget = False
        #: Admitted with the read-only token (its unfinished messages give way first
        #: when the inbound budget is short: :class:`InboundBudget`).
        self.read_only = False
        #: Called when this connection gives way in the inbound budget (it must close,
        #: 1013): the transport stops the connection's tasks. Must not block nor raise.
        self.on_give_way: Callable[[], None] | None = None
        self._deadline = message_deadline
        self._closed: ConnectionClosed | None = None
        #: The peer's end of the stream was read (it may still read what is sent).
        self.at_eof = False
        #: A send was cancelled mid-frame: the stream may only be closed now.
        self.broken = False
        #: Bytes handed to the stream so far (progress, for the outbound watchdog).
        self.bytes_sent = 0
        #: Bytes read from the peer so far (see :meth:`arrived`).
        self.bytes_received = 0
        #: Called when bytes go out after the socket was full (or, under TLS, after
        #: each slice): the peer is reading, however slowly. Never called on the fast
        #: path (the socket took everything at once); must not block nor raise.
        self.on_progress: Callable[[], None] | None = None
        #: The socket under a plain TCP or Unix stream (read and written directly, see
        #: :meth:`_read` and :meth:`_write_all`); None under TLS.
        # (keystroke trick ``fd_io``.)
        plain = isinstance(stream, trio.SocketStream) and enabled("fd_io")
        self._sock = stream.socket if plain and isinstance(stream, trio.SocketStream) else None
        #: Bytes received but not yet parsed, while frames are parsed here (see
        #: :meth:`_fast_message`); once anything else arrives, everything goes to wsproto.
        self._pending = bytearray(received)
        self._wsproto_frames = False
        if not enabled("fast_frames"):
            self._to_wsproto()
        #: A message was returned and no checkpoint has happened since.
        self._owes_checkpoint = False
        #: The last read returned less than it asked for (see :meth:`_read`).
        self._drained = False
        #: Pings sent and not answered yet: payload -> set when the pong arrives.
        self._pings: dict[bytes, trio.Event] = {}

    @property
    def closed(self) -> ConnectionClosed | None:
        return self._closed

    def arrived(self) -> int:
        """Bytes the peer has sent so far: those read, plus (on a plain socket) those
        waiting unread in the kernel. A liveness sign that does not need the reader:
        while the connection's reader is busy with a request, a pong it has not read
        yet still shows here (TLS: only what was read)."""
        unread = 0
        sock = self._sock
        if sock is not None and (fd := sock.fileno()) >= 0:
            with contextlib.suppress(OSError):
                answer = fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0")
                unread = int.from_bytes(answer, sys.byteorder, signed=True)
        return self.bytes_received + unread

    # -- receiving ---------------------------------------------------------------------------

    async def receive(self) -> str | bytes:
        """The next complete message (text as ``str``, binary as ``bytes``).

        Pings are answered and a peer's close is answered and raised as
        :class:`ConnectionClosed`, as is a protocol violation (after closing with
        its code: 1002, 1007 invalid UTF-8, 1009 too big).

        Checkpoints: waiting for data is one; a message whose bytes were already
        there is returned after a plain checkpoint, so a client that floods frames
        cannot starve other tasks, while a message that had to be waited for costs
        no second pass of the scheduler (see :meth:`_deliver`).
        """
        ws = self._ws
        while True:
            if not self._wsproto_frames:
                fast = self._fast_message()
                if fast is not None:
                    self._started = None  # (a frame of it held unfinished: done)
                    return await self._deliver(fast)
                if self._pending and self._started is None and not self._wsproto_frames:
                    # Part of a simple frame: the same MESSAGE_DEADLINE as any message.
                    self._started = trio.current_time()
            if self._wsproto_frames:
                for handled, event in enumerate(ws.events(), 1):
                    if isinstance(event, TextMessage | BytesMessage):
                        message = self._assemble(event)
                        if message is not None:
                            return await self._deliver(message)
                        refusal = self._refusal()
                        if refusal is not None:
                            self._drop_message()  # (given back now, not after the close)
                            await self.aclose(*refusal)
                    elif isinstance(event, Ping):
                        await self._send_control(event.response())
                    elif isinstance(event, Pong):
                        waiter = self._pings.pop(bytes(event.payload), None)
                        if waiter is not None:
                            waiter.set()
                    elif isinstance(event, CloseConnection):
                        await self._on_close(event)
                    if self._closed is not None:
                        raise self._closed
                    if handled % EVENT_BATCH == 0:
                        await trio.lowlevel.checkpoint()  # (many tiny frames in one read)
            if self._closed is not None:
                raise self._closed
            data = await self._read_in_time()
            self.bytes_received += len(data)
            if not data:
                # The peer sends no more; it may still read (a TCP half-close after its
                # last requests): the connection is not closed for sending yet.
                self.at_eof = True
                raise ConnectionClosed(ABNORMAL, "connection lost")
            if self._wsproto_frames:
                ws.receive_data(data)
            else:
                self._pending += data

    async def _read_in_time(self) -> bytes:
        """:meth:`_read`, within :data:`MESSAGE_DEADLINE` of the first part of the
        message being assembled (if any); past it the peer is closed with 1008."""
        started = self._started
        if started is None:
            return await self._read()
        with trio.move_on_at(started + self._deadline):
            return await self._read()
        await self.aclose(POLICY, f"a message unfinished after {self._deadline:g} s")
        assert self._closed is not None
        raise self._closed

    def _refusal(self) -> tuple[int, str] | None:
        """Why the message being assembled closes the connection, if it does."""
        if self._size > self._max:
            return TOO_BIG, "message too big"
        if self._frames > MAX_FRAGMENTS:
            return TOO_BIG, f"a message of more than {MAX_FRAGMENTS} fragments"
        if self._over_budget:
            return TRY_AGAIN, BUSY_REASON
        return None

    def _drop_message(self) -> None:
        """The message being assembled will never be delivered: free it now."""
        self._parts.clear()
        self._release()

    def _release(self) -> None:
        """The message is complete or dropped: give its memory back to the budget."""
        if self._held and self._budget is not None:
            self._budget.give_back(self._held, self)
        self._held = self._frames = 0
        self._started = None

    def give_way(self) -> None:
        """The inbound budget took back what this connection held, for a connection that
        matters more (:class:`InboundBudget`): the message being assembled is dropped,
        none is delivered any more, and the connection is closed with 1013 (by
        :attr:`on_give_way`; else by its reader at the next part it receives)."""
        self._over_budget = True
        self._parts.clear()
        self._held = 0
        if self.on_give_way is not None:
            self.on_give_way()

    async def _deliver(self, message: str | bytes) -> str | bytes:
        if self._owes_checkpoint:  # no wait since the last message: yield once
            await trio.lowlevel.checkpoint()
        self._owes_checkpoint = True
        return message

    def _fast_message(self) -> str | None:
        """The next message if the pending bytes start with a whole simple frame
        (keystroke trick ``fast_frames``: :func:`ahp.keystroke.parse_simple_frame`),
        else None: more bytes are needed, or the frame is anything else, and then every
        pending byte goes to wsproto, which handles the rest of the connection
        (fragments, control frames, binary, big or invalid frames and their close
        codes) exactly as before. wsproto has seen no frame until then, so nothing is
        parsed twice or out of order.
        """
        text, fallback = parse_simple_frame(self._pending, self._max)
        if fallback:
            self._to_wsproto()
        return text

    def _to_wsproto(self) -> None:
        self._wsproto_frames = True
        if self._pending:
            self._ws.receive_data(bytes(self._pending))
            self._pending.clear()

    async def _read(self) -> bytes:
        """Up to :data:`RECEIVE_SIZE` bytes; ``b""`` once the peer is gone.

        On a plain socket this is a direct non-blocking ``read`` of its descriptor,
        waiting for readability only when there is nothing. Trio's socket wrapper adds
        a scheduler pass to every successful call; here bytes that had to be waited
        for cost none, and bytes that were already there cost one (a checkpoint after
        the read), so a client sending without pause takes turns with the writer and
        everyone else, as before.
        """
        sock = self._sock
        if sock is None:
            try:
                return bytes(await self._stream.receive_some(RECEIVE_SIZE))
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                return b""
        waited = False
        if self._drained:
            # The last read took less than was asked: the socket was empty then, and a
            # read now would mostly fail (EAGAIN). Wait for data first (Trio's epoll
            # reports at once if some arrived meanwhile).
            try:
                await trio.lowlevel.wait_readable(sock)
            except trio.ClosedResourceError:
                return b""
            waited = True
        while True:
            fd = sock.fileno()
            if fd < 0:  # closed by this side (a closed descriptor's number may be reused)
                return b""
            try:
                data = os.read(fd, RECEIVE_SIZE)
            except BlockingIOError:
                pass
            except OSError:  # reset by the peer, and the like
                return b""
            else:
                self._drained = len(data) < RECEIVE_SIZE
                if waited:
                    self._owes_checkpoint = False
                else:
                    await trio.lowlevel.checkpoint()
                return data
            try:
                await trio.lowlevel.wait_readable(sock)
            except trio.ClosedResourceError:
                return b""
            waited = True

    def _assemble(self, event: TextMessage | BytesMessage) -> str | bytes | None:
        if self._over_budget:
            return None  # (it gave way, or was refused: nothing more is kept)
        data: str | bytes = event.data if isinstance(event.data, str | bytes) else bytes(event.data)
        if event.message_finished and not self._parts:
            if len(data) > self._max:
                self._size = len(data)
                return None
            return data
        if self._started is None:
            self._started = trio.current_time()
        self._parts.append(data)
        self._size += len(data)
        self._frames += event.frame_finished
        size = sys.getsizeof(data)
        if self._budget is not None and not self._budget.take(size, self):
            self._over_budget = True
            return None
        self._held += size
        if self._size > self._max or self._frames > MAX_FRAGMENTS or not event.message_finished:
            return None
        self._release()
        parts, self._parts, self._size = self._parts, [], 0
        if isinstance(data, str):
            return "".join(parts)  # type: ignore[arg-type]
        return b"".join(parts)  # type: ignore[arg-type]

    async def _on_close(self, event: CloseConnection) -> None:
        state = self._ws.state
        if state is ConnectionState.OPEN:
            # Not the peer's close frame: wsproto reports a protocol violation (bad
            # opcode, unmasked frame, invalid UTF-8...) as a close with its code.
            await self.aclose(event.code, event.reason or "protocol error")
            return
        if state is ConnectionState.REMOTE_CLOSING:
            with contextlib.suppress(ConnectionClosed):
                await self._send_control(event.response())
        self._closed = ConnectionClosed(event.code, event.reason or "")
        await self._close_stream()

    # -- sending -----------------------------------------------------------------------------

    async def send_texts(self, payloads: Iterable[bytes | list[bytes]]) -> None:
        """Send each UTF-8 payload as one text frame (not checked), small frames
        gathered into writes of about :data:`WRITE_CHUNK` bytes. A payload may be
        given as a list of pieces (an answer encoded in pieces): one frame, its
        pieces written after its header as they are.

        Buffering: ``payloads`` is consumed as the writes go (a lazy iterable keeps
        only one write's frames encoded at a time), and a write's buffer is bounded:
        a batch of several MiB is never held, encoded, at once (such peaks raise the
        allocator's high-water mark for good). A payload of ``WRITE_CHUNK`` or more
        is written as it is, after its header, without a copy.
        """
        parts: list[bytes] = []
        size = 0
        for payload in payloads:
            if isinstance(payload, list):
                header = text_frame_header(sum(map(len, payload)))
                parts.append(header)
                await self._send_raw(b"".join(parts), *payload, data_frame=True)
                parts, size = [], 0
                continue
            header = text_frame_header(len(payload))
            if len(payload) >= WRITE_CHUNK:
                parts.append(header)
                await self._send_raw(b"".join(parts), payload, data_frame=True)
                parts, size = [], 0
                continue
            parts += (header, payload)
            size += len(header) + len(payload)
            if size >= WRITE_CHUNK:
                await self._send_raw(b"".join(parts), data_frame=True)
                parts, size = [], 0
        if parts:
            await self._send_raw(b"".join(parts), data_frame=True)

    async def ping(self) -> None:
        """Send a ping and wait for its pong (the task in :meth:`receive` sees it).

        Cancellation: the caller bounds the wait (a peer that never answers is the
        case this exists for); raises :class:`ConnectionClosed` if the connection is
        closed or closes meanwhile. At most :data:`MAX_PINGS` may wait at once.
        """
        if len(self._pings) >= MAX_PINGS:
            raise ConnectionClosed(ABNORMAL, "too many pings waiting")
        payload = os.urandom(8)
        answered = trio.Event()
        self._pings[payload] = answered
        try:
            await self._send_control(Ping(payload=payload))
            if self._closed is not None:
                raise self._closed
            await answered.wait()
        finally:
            self._pings.pop(payload, None)

    async def _send_control(self, event: CloseConnection | Ping | Pong) -> None:
        if self._ws.state not in (ConnectionState.OPEN, ConnectionState.REMOTE_CLOSING):
            return
        await self._send_raw(self._ws.send(event), data_frame=False)

    async def _send_raw(self, *buffers: bytes, data_frame: bool) -> None:
        """Write ``buffers`` in order, as one unit: the connection counts as broken
        from the first byte until the last is out (cancelled between them, the
        stream holds part of a frame).

        Not a checkpoint when the lock is free and the socket takes everything at
        once (the caller's loop has its own: the writer parks for its next batch).
        """
        lock = self._send_lock
        try:
            lock.acquire_nowait()
        except trio.WouldBlock:
            await lock.acquire()
        try:
            if self.broken:
                raise ConnectionClosed(ABNORMAL, "connection broken")
            if data_frame and (
                self._closed is not None or self._ws.state is not ConnectionState.OPEN
            ):
                raise self._closed or ConnectionClosed(ABNORMAL, "connection closing")
            self.broken = True  # until every buffer is out
            try:
                for data in buffers:
                    await self._write_all(data)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                self._closed = self._closed or ConnectionClosed(ABNORMAL, "connection lost")
                raise self._closed from None
            self.broken = False
        finally:
            lock.release()

    async def _write_all(self, data: bytes) -> None:
        """All of ``data``: on a plain socket, direct non-blocking writes of its
        descriptor, waiting for writability only when the kernel's buffer is full."""
        sock = self._sock
        view = memoryview(data)
        if sock is None:
            # In slices, so that progress shows (bytes_sent): a client that reads a big
            # answer slowly is not one that reads nothing.
            for start in range(0, len(view), WRITE_CHUNK):
                piece = view[start : start + WRITE_CHUNK]
                await self._stream.send_all(piece)
                self.bytes_sent += len(piece)
                if self.on_progress is not None:
                    self.on_progress()
            return
        sent, size = 0, len(view)
        waited = False
        while sent < size:
            fd = sock.fileno()
            if fd < 0:
                raise trio.ClosedResourceError("the connection's socket is closed")
            try:
                written = os.write(fd, view[sent:])
                sent += written
                self.bytes_sent += written
                if waited and self.on_progress is not None:
                    self.on_progress()
                continue
            except BlockingIOError:
                pass
            except OSError as exc:  # EPIPE, ECONNRESET...
                raise trio.BrokenResourceError(str(exc)) from exc
            waited = True
            await trio.lowlevel.wait_writable(sock)

    # -- closing -----------------------------------------------------------------------------

    async def aclose(self, code: int = 1000, reason: str = "", *, timeout: float = 1.0) -> None:
        """Close: a close frame, then the peer's answer (waited for at most ``timeout``
        seconds, reading and dropping what came before it), then the stream.

        Waiting for the answer matters: closing a socket with unread data makes
        the kernel reset the connection, and the peer may then lose the close
        frame (and its code) we just sent. A broken connection, or one already
        closed, just closes its stream. Idempotent; the stream is closed even when
        cancelled. Must not run while another task is in :meth:`receive`.
        """
        try:
            if self.broken or self._closed is not None:
                return
            if self._ws.state is not ConnectionState.OPEN:
                return
            self._closed = ConnectionClosed(code, reason)
            with trio.move_on_after(timeout):
                with contextlib.suppress(
                    ConnectionClosed, trio.BrokenResourceError, trio.ClosedResourceError
                ):
                    await self._send_control(CloseConnection(code=code, reason=reason))
                    await self._drain_until_closed()
        finally:
            self._closed = self._closed or ConnectionClosed(code, reason)
            await self._close_stream()

    async def _drain_until_closed(self) -> None:
        """Read (and parse) until the peer's close frame, at most CLOSE_DRAIN_BYTES and
        CLOSE_DRAIN_EVENTS of it: a peer still flooding tiny frames (thousands of them
        may wait in wsproto's buffer) costs no more than a few milliseconds."""
        self._to_wsproto()  # (the peer's close frame may be among the pending bytes)
        ws = self._ws
        events = 0
        for _ in ws.events():
            events += 1
            if events >= CLOSE_DRAIN_EVENTS:
                return
        drained = 0
        while ws.state is ConnectionState.LOCAL_CLOSING and drained < CLOSE_DRAIN_BYTES:
            data = await self._read()
            if not data:
                return
            drained += len(data)
            ws.receive_data(data)
            for _ in ws.events():
                events += 1
                if events >= CLOSE_DRAIN_EVENTS:
                    return

    async def _close_stream(self) -> None:
        self._drop_message()  # (a message never finished: not held past the close)
        # (A stream's aclose closes it even when cancelled: the bound only matters for
        # a TLS stream, whose close could otherwise wait on the peer.)
        with trio.CancelScope(shield=True), trio.move_on_after(1):
            await self._stream.aclose()
