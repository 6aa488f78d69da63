"""The benchmark's WebSocket client connection: as little client work as possible.

Why not trio-websocket (what :mod:`ahp.client` uses): a benchmark of servers
should spend as little CPU as it can on the client, which shares the machine's
two cores with the server and the program in the pty. Measured against the
same sidecar, interleaved, trio-websocket's client (a reader task handing each
message through a memory channel, frames parsed and UTF-8 decoded in Python by
wsproto) held end-to-end throughput to 0.56x the ceiling where this one reached
0.77x. Here the handshake and outgoing frames (masked) go through wsproto;
incoming frames (never masked, RFC 6455 §5.1) are cut out of one receive buffer
by their headers and handed over as ``bytes``, which orjson parses directly.

Buffering: one ``bytearray`` of unparsed input, read ``receive_size`` bytes at a
time, and nothing more: a caller that stops calling :meth:`RawWebSocket.get_message`
stops reading the socket (that is how the stalled client stalls). Ownership:
the connection owns its stream; :func:`open_raw_websocket` closes it.
"""

from __future__ import annotations

import contextlib
import struct
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Final
from urllib.parse import urlsplit

import trio
from wsproto import ConnectionType, WSConnection
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Pong,
    RejectConnection,
    Request,
    TextMessage,
)

__all__ = ["Closed", "RawWebSocket", "open_raw_websocket"]

RECEIVE_SIZE: Final = 256 * 1024
#: Largest message accepted (a merged output frame is ~256 KiB; a snapshot can be more).
MAX_MESSAGE: Final = 256 * 1024 * 1024
CLOSE: Final = 8
PING: Final = 9


class Closed(Exception):
    """The server closed the connection (``code`` 1006: without a close frame)."""

    def __init__(self, code: int, reason: str = "") -> None:
        super().__init__(f"closed: {code} {reason}".rstrip())
        self.code = code
        self.reason = reason


class RawWebSocket:
    """An open client connection; see the module docstring."""

    def __init__(self, stream: trio.SocketStream, ws: WSConnection, rest: bytes) -> None:
        self._stream = stream
        self._ws = ws
        self._buf = bytearray(rest)
        self._pos = 0
        self._parts: list[bytes] = []
        self.closed: Closed | None = None

    async def send_message(self, message: str | bytes) -> None:
        """One text message (``str``) or binary message (``bytes``)."""
        if self.closed is not None:
            raise self.closed
        event = BytesMessage(data=message) if isinstance(message, bytes) else TextMessage(message)
        await self._stream.send_all(self._ws.send(event))

    async def get_message(self) -> bytes:
        """The next text or binary message's payload; pings are answered."""
        while True:
            frame = self._next_frame()
            if frame is None:
                if self.closed is not None:
                    raise self.closed
                await self._fill()
                continue
            first, payload = frame
            opcode = first & 0x0F
            if opcode == CLOSE:
                code = struct.unpack("!H", payload[:2])[0] if len(payload) >= 2 else 1005
                self.closed = Closed(code, payload[2:].decode("utf-8", "replace"))
                await self._answer_close(code)
                raise self.closed
            if opcode == PING:
                await self._stream.send_all(self._ws.send(Pong(payload=payload)))
                continue
            if opcode > PING:  # pong
                continue
            self._parts.append(payload)
            if first & 0x80:
                parts, self._parts = self._parts, []
                return parts[0] if len(parts) == 1 else b"".join(parts)

    def _next_frame(self) -> tuple[int, bytes] | None:
        buf, pos = self._buf, self._pos
        avail = len(buf) - pos
        if avail < 2:
            return None
        length = buf[pos + 1] & 0x7F
        start = pos + 2
        if length == 126:
            if avail < 4:
                return None
            length = struct.unpack_from("!H", buf, pos + 2)[0]
            start = pos + 4
        elif length == 127:
            if avail < 10:
                return None
            length = struct.unpack_from("!Q", buf, pos + 2)[0]
            start = pos + 10
        if length > MAX_MESSAGE:
            raise ValueError(f"frame of {length} bytes from the server")
        end = start + length
        if len(buf) < end:
            return None
        self._pos = end
        return buf[pos], bytes(buf[start:end])

    async def _fill(self) -> None:
        if self._pos:
            del self._buf[: self._pos]
            self._pos = 0
        try:
            data = await self._stream.receive_some(RECEIVE_SIZE)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            data = b""
        if not data:
            self.closed = Closed(1006, "connection lost")
        self._buf += data

    async def _answer_close(self, code: int) -> None:
        reply = 1000 if code in (1005, 1006) else code
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
            await self._stream.send_all(self._ws.send(CloseConnection(code=reply)))

    async def aclose(self, timeout: float = 2) -> None:
        """Close handshake (bounded by ``timeout``), then the stream."""
        try:
            if self.closed is None:
                with trio.move_on_after(timeout):
                    await self._stream.send_all(self._ws.send(CloseConnection(code=1000)))
                    while self.closed is None:
                        frame = self._next_frame()
                        if frame is None:
                            await self._fill()
                        elif frame[0] & 0x0F == CLOSE:
                            break
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        finally:
            with trio.CancelScope(shield=True):
                await self._stream.aclose()


@asynccontextmanager
async def open_raw_websocket(
    url: str, *, timeout: float = 10, subprotocols: tuple[str, ...] = ()
) -> AsyncIterator[RawWebSocket]:
    """Connect to ``ws://host:port/path?query`` and complete the upgrade, asking for
    ``subprotocols`` (ttyd serves its terminal only under ``tty``)."""
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    with trio.fail_after(timeout):
        stream = await trio.open_tcp_stream(host, port)
    conn: RawWebSocket | None = None
    try:
        ws = WSConnection(ConnectionType.CLIENT)
        with trio.fail_after(timeout):
            await stream.send_all(
                ws.send(
                    Request(host=f"{host}:{port}", target=target, subprotocols=list(subprotocols))
                )
            )
            # Only the response head goes to wsproto: the server's first frames may
            # follow in the same segment, and they are ours to parse.
            raw = b""
            while b"\r\n\r\n" not in raw:
                data = await stream.receive_some(RECEIVE_SIZE)
                if not data:
                    raise Closed(1006, "closed during the upgrade")
                raw += data
            end = raw.index(b"\r\n\r\n") + 4
            ws.receive_data(raw[:end])
            for event in ws.events():
                if isinstance(event, RejectConnection):
                    raise Closed(1006, f"upgrade refused: HTTP {event.status_code}")
                if isinstance(event, AcceptConnection):
                    conn = RawWebSocket(stream, ws, raw[end:])
            if conn is None:
                raise Closed(1006, "no upgrade")
        yield conn
    finally:
        if conn is not None:
            await conn.aclose()
        else:
            with trio.CancelScope(shield=True):
                await stream.aclose()
