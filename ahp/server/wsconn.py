"""The server side of one WebSocket connection, on wsproto (sans-I/O).

Why not trio-websocket's server: measured on the sidecar's two hot paths, its
per-connection reader task hands every message to the handler through a memory
channel (one more scheduler pass and ``epoll_wait`` per keystroke), and it sends
only ``str``, which the server had to decode from orjson's UTF-8 bytes for
wsproto to encode again and copy into a frame (~2 ms of CPU per MB of terminal
output, a fifth of the sidecar's). Here the connection's own reader task parses
frames and runs the handler inline, and the writer sends frames it encoded once,
as UTF-8, several per system call. wsproto (the sans-I/O protocol library
trio-websocket and hypercorn are built on) still does the HTTP upgrade, frame
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
import logging
import re
from collections.abc import Callable, Iterable
from typing import Any, Final
from urllib.parse import urlsplit

import attrs
import trio
from wsproto import ConnectionType, WSConnection
from wsproto.connection import ConnectionState
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Ping,
    Pong,
    RejectConnection,
    RejectData,
    Request,
    TextMessage,
)
from wsproto.utilities import RemoteProtocolError

__all__ = [
    "HANDSHAKE_TIMEOUT",
    "RECEIVE_SIZE",
    "ConnectionClosed",
    "ServerWebSocket",
    "UpgradeRequest",
    "read_upgrade",
    "text_frame_header",
]

log = logging.getLogger("ahp.server")

#: Bytes asked of the socket per read.
RECEIVE_SIZE: Final = 64 * 1024
#: Frames are gathered into writes of about this many bytes (see ``send_texts``).
WRITE_CHUNK: Final = 256 * 1024
#: Seconds a peer gets to send its whole upgrade request.
HANDSHAKE_TIMEOUT: Final = 10.0
#: Close codes (RFC 6455 §7.4.1).
ABNORMAL: Final = 1006
TOO_BIG: Final = 1009
#: What an upgrade's target and the header values the checks read may contain.
_PRINTABLE_ASCII: Final = re.compile(r"[\x20-\x7e]*")


class ConnectionClosed(Exception):
    """The connection is closed (or closing); ``code`` as the peer or we closed it."""

    def __init__(self, code: int, reason: str = "") -> None:
        super().__init__(f"connection closed: {code} {reason}".rstrip())
        self.code = code
        self.reason = reason


@attrs.frozen
class UpgradeRequest:
    """What the checks before accepting look at: the request line and headers."""

    target: str
    host: str | None
    #: Lower-cased names, as sent (``Host`` and ``Sec-WebSocket-*`` are not included).
    headers: tuple[tuple[bytes, bytes], ...]
    remote: str
    #: ``Sec-WebSocket-Protocol`` offers, in the client's order.
    subprotocols: tuple[str, ...] = ()

    def header(self, name: bytes) -> str | None:
        for key, value in self.headers:
            if key == name:
                return value.decode("latin-1")
        return None


def text_frame_header(length: int) -> bytes:
    """The header of one unmasked, final text frame whose payload is ``length`` bytes."""
    if length < 126:
        return bytes((0x81, length))
    if length < 65536:
        return b"\x81\x7e" + length.to_bytes(2, "big")
    return b"\x81\x7f" + length.to_bytes(8, "big")


def _remote(stream: trio.abc.Stream) -> str:
    transport = getattr(stream, "transport_stream", stream)  # under TLS
    sock = getattr(transport, "socket", None)
    try:
        peer = sock.getpeername() if sock is not None else None
    except OSError:
        return "<disconnected peer>"
    if isinstance(peer, tuple):
        return f"{peer[0]}:{peer[1]}"
    return "<unix socket peer>" if peer is not None else "<peer>"


def _bad_request(why: str) -> bytes:
    """A complete ``400`` answer (built by hand: after a parse failure wsproto's state
    is not to be trusted)."""
    body = f"bad upgrade request: {why}\n".encode("ascii", "replace")
    head = (
        "HTTP/1.1 400 Bad Request\r\n"
        "content-type: text/plain; charset=utf-8\r\n"
        f"content-length: {len(body)}\r\n"
        "connection: close\r\n\r\n"
    )
    return head.encode("ascii") + body


def _check_request(event: Request) -> str | None:
    """Why an upgrade request wsproto accepted is still unusable, or None.

    Everything the checks before accepting read must be printable ASCII (a
    ``Host`` or a subprotocol with other bytes names nothing we could match) and
    the target must split as a URL (``//[x/`` does not).
    """
    texts = [("target", event.target), ("Host", event.host)]
    texts += [("Sec-WebSocket-Protocol", p) for p in event.subprotocols]
    texts += [(k.decode("latin-1"), v.decode("latin-1")) for k, v in event.extra_headers]
    for name, text in texts:
        if not _PRINTABLE_ASCII.fullmatch(text):
            return f"{_short(name)} is not printable ASCII"
    try:
        urlsplit(event.target)
    except ValueError:
        return "unusable request target"
    return None


def _short(text: str) -> str:
    text = text.encode("ascii", "backslashreplace").decode("ascii")
    return text if len(text) <= 60 else text[:60] + "..."


class _BadUpgrade(Exception):
    def __init__(self, why: str, answer: bytes) -> None:
        super().__init__(why)
        self.why = why
        self.answer = answer


def _feed_upgrade(ws: WSConnection, data: bytes) -> Request | None:
    """Feed request bytes to wsproto; the request once complete and usable.

    Raises:
        _BadUpgrade: anything wrong with it, with the HTTP answer to send.
    """
    request = None
    try:
        ws.receive_data(data)
        request = next((e for e in ws.events() if isinstance(e, Request)), None)
    except RemoteProtocolError as exc:
        why = _short(str(exc))
        answer = _bad_request(why)
        if isinstance(exc.event_hint, RejectConnection):
            with contextlib.suppress(Exception):  # (wsproto's state after a failed parse)
                answer = ws.send(exc.event_hint)
        raise _BadUpgrade(why, answer) from None
    except Exception as exc:
        # wsproto and h11 raise UnicodeDecodeError, ValueError... on odd bytes: the peer's
        # mistake, not ours.
        why = _short(str(exc) if type(exc) is ValueError else type(exc).__name__)
        raise _BadUpgrade(why, _bad_request(why)) from None
    problem = _check_request(request) if request is not None else None
    if problem is not None:
        raise _BadUpgrade(problem, _bad_request(problem))
    return request


def _log_info(kind: str, message: str, *args: Any) -> None:
    log.info(message, *args)


async def read_upgrade(
    stream: trio.abc.Stream,
    *,
    timeout: float = HANDSHAKE_TIMEOUT,
    note: Callable[..., Any] = _log_info,
) -> tuple[WSConnection, UpgradeRequest] | None:
    """Read the HTTP upgrade request; None if the peer left, was too slow or sent
    something that is not a usable WebSocket upgrade.

    A malformed request (bad syntax, bytes that are not ASCII where the checks
    before accepting look, a target that is no URL) is answered ``400`` (``426``
    for an unsupported WebSocket version, as wsproto answers) and logged in one
    short line at INFO, before any token check or protocol work; never with a
    traceback, whatever the parser raised. Those lines go through
    ``note(kind, message, *args)`` (the server rate-limits them per kind).
    """
    ws = WSConnection(ConnectionType.SERVER)
    remote = _remote(stream)
    with trio.move_on_after(timeout):
        while True:
            try:
                data = await stream.receive_some(RECEIVE_SIZE)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                return None
            if not data:
                return None
            try:
                event = _feed_upgrade(ws, bytes(data))
            except _BadUpgrade as bad:
                note("bad request", "bad upgrade request from %s: %s", remote, bad.why)
                with contextlib.suppress(Exception):
                    await stream.send_all(bad.answer)
                return None
            if event is not None:
                request = UpgradeRequest(
                    target=event.target,
                    host=event.host,
                    headers=tuple(event.extra_headers),
                    remote=remote,
                    subprotocols=tuple(event.subprotocols),
                )
                return ws, request
    note("timeout", "upgrade request from %s timed out", remote)
    return None


async def reject(stream: trio.abc.Stream, ws: WSConnection, status: int, body: bytes) -> None:
    """Answer the upgrade with an HTTP error and a short text body."""
    headers = [(b"content-type", b"text/plain; charset=utf-8")]
    data = ws.send(RejectConnection(status_code=status, headers=headers, has_body=True))
    data += ws.send(RejectData(data=body, body_finished=True))
    with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
        await stream.send_all(data)


async def accept(
    stream: trio.abc.Stream,
    ws: WSConnection,
    *,
    max_message_size: int,
    subprotocol: str | None = None,
) -> ServerWebSocket:
    """Accept the upgrade (no extensions: compression stays off).

    ``subprotocol`` must be one the client offered: browsers and most client
    libraries fail a handshake that offered subprotocols and got none back.
    """
    try:
        await stream.send_all(ws.send(AcceptConnection(subprotocol=subprotocol)))
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        raise ConnectionClosed(ABNORMAL, "peer left during the handshake") from None
    return ServerWebSocket(stream, ws, max_message_size=max_message_size)


class ServerWebSocket:
    """An accepted connection; see the module docstring for tasks and ownership."""

    def __init__(self, stream: trio.abc.Stream, ws: WSConnection, *, max_message_size: int) -> None:
        self._stream = stream
        self._ws = ws
        self._max = max_message_size
        self._send_lock = trio.Lock()
        self._parts: list[str | bytes] = []
        self._size = 0
        self._closed: ConnectionClosed | None = None
        #: A send was cancelled mid-frame: the stream may only be closed now.
        self.broken = False
        #: Bytes handed to the stream so far (progress, for the outbound watchdog).
        self.bytes_sent = 0

    @property
    def closed(self) -> ConnectionClosed | None:
        return self._closed

    # -- receiving ---------------------------------------------------------------------------

    async def receive(self) -> str | bytes:
        """The next complete message (text as ``str``, binary as ``bytes``).

        Pings are answered and a peer's close is answered and raised as
        :class:`ConnectionClosed`, as is a protocol violation (after closing with
        its code: 1002, 1007 invalid UTF-8, 1009 too big).
        """
        ws = self._ws
        while True:
            for event in ws.events():
                if isinstance(event, TextMessage | BytesMessage):
                    message = self._assemble(event)
                    if message is not None:
                        return message
                    if self._size > self._max:
                        await self.aclose(TOO_BIG, "message too big")
                elif isinstance(event, Ping):
                    await self._send_control(event.response())
                elif isinstance(event, CloseConnection):
                    await self._on_close(event)
                if self._closed is not None:
                    raise self._closed
            if self._closed is not None:
                raise self._closed
            try:
                data = await self._stream.receive_some(RECEIVE_SIZE)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                data = b""
            if not data:
                self._closed = ConnectionClosed(ABNORMAL, "connection lost")
                raise self._closed
            ws.receive_data(bytes(data))

    def _assemble(self, event: TextMessage | BytesMessage) -> str | bytes | None:
        data: str | bytes = event.data if isinstance(event.data, str | bytes) else bytes(event.data)
        if event.message_finished and not self._parts:
            if len(data) > self._max:
                self._size = len(data)
                return None
            return data
        self._parts.append(data)
        self._size += len(data)
        if self._size > self._max or not event.message_finished:
            return None
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

    async def send_texts(self, payloads: Iterable[bytes]) -> None:
        """Send each UTF-8 payload as one text frame (not checked), small frames
        gathered into writes of about :data:`WRITE_CHUNK` bytes.

        Buffering: ``payloads`` is consumed as the writes go (a lazy iterable keeps
        only one write's frames encoded at a time), and a write's buffer is bounded:
        a batch of several MiB is never held, encoded, at once (such peaks raise the
        allocator's high-water mark for good). A payload of ``WRITE_CHUNK`` or more
        is written as it is, after its header, without a copy.
        """
        parts: list[bytes] = []
        size = 0
        for payload in payloads:
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

    async def _send_control(self, event: CloseConnection | Pong) -> None:
        if self._ws.state not in (ConnectionState.OPEN, ConnectionState.REMOTE_CLOSING):
            return
        await self._send_raw(self._ws.send(event), data_frame=False)

    async def _send_raw(self, *buffers: bytes, data_frame: bool) -> None:
        """Write ``buffers`` in order, as one unit: the connection counts as broken
        from the first byte until the last is out (cancelled between them, the
        stream holds part of a frame)."""
        async with self._send_lock:
            if self.broken:
                raise ConnectionClosed(ABNORMAL, "connection broken")
            if data_frame and (
                self._closed is not None or self._ws.state is not ConnectionState.OPEN
            ):
                raise self._closed or ConnectionClosed(ABNORMAL, "connection closing")
            self.broken = True  # until every buffer is out
            try:
                for data in buffers:
                    if len(data) <= WRITE_CHUNK:
                        await self._stream.send_all(data)
                        self.bytes_sent += len(data)
                        continue
                    # A large payload in slices, so that progress shows (bytes_sent):
                    # a client that reads a big answer slowly is not one that reads nothing.
                    view = memoryview(data)
                    for start in range(0, len(view), WRITE_CHUNK):
                        piece = view[start : start + WRITE_CHUNK]
                        await self._stream.send_all(piece)
                        self.bytes_sent += len(piece)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                self._closed = self._closed or ConnectionClosed(ABNORMAL, "connection lost")
                raise self._closed from None
            self.broken = False

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
        ws = self._ws
        while ws.state is ConnectionState.LOCAL_CLOSING:
            data = await self._stream.receive_some(RECEIVE_SIZE)
            if not data:
                return
            ws.receive_data(bytes(data))
            for _ in ws.events():
                pass

    async def _close_stream(self) -> None:
        # (A stream's aclose closes it even when cancelled: the bound only matters for
        # a TLS stream, whose close could otherwise wait on the peer.)
        with trio.CancelScope(shield=True), trio.move_on_after(1):
            await self._stream.aclose()
