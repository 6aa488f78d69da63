"""The server's WebSocket transport: listen, authenticate the upgrade, move frames.

Why separate from the protocol: every AHP rule lives in
:mod:`ahp.server.session`; this module only moves frames (trio-websocket is
reached through :mod:`ahp.ws`, so it can be replaced in one place).

Per connection there are two tasks: a reader that always calls
``get_message`` promptly (so pings and closes are processed even when the
client sends nothing) and a writer that drains the connection's bounded
:class:`~ahp.engine.Outbox` (coalescing consecutive output into fewer frames).
Publishers never wait for a socket. When the outbox overflows (the client
stopped reading), the connection is closed at once, and the client's record is
kept, so it can ``reconnect``: the writer's sends run in a cancel scope whose
deadline is set ``stall_grace`` seconds (default 1) after the overflow, which
bounds both the frame in flight and the close handshake. If the frame in flight
gets out in time, the client gets a close frame with code 1013; if the socket
stays full (the client reads nothing at all), the send is cancelled half-way
through a frame, after which no close frame can be framed correctly, so the TCP
stream is closed without one (the client sees 1006 after the last complete
frame). A failure inside one connection is logged and closes that connection
(1011), never the server.

The upgrade is refused with HTTP 403 before any protocol work when the token is
missing or wrong (compared in constant time), when the request carries an
``Origin`` that is not allow-listed (cross-site WebSocket hijacking), or when
the server is bound to loopback and ``Host`` names something else (DNS
rebinding). The token is never logged.
"""

from __future__ import annotations

import contextlib
import hmac
import logging
import os
import socket
from collections.abc import Sequence
from typing import Final
from urllib.parse import parse_qs, urlsplit

import attrs
import trio

from ahp.engine import Outbox
from ahp.engine.envelopes import Published
from ahp.server.session import ServerState, Session
from ahp.ws import (
    ConnectionClosed,
    WebSocketConnection,
    WebSocketRequest,
    WebSocketServer,
    request_host,
)

__all__ = [
    "MAX_MESSAGE_SIZE",
    "OUTBOX_BYTES",
    "ServerConfig",
    "check_upgrade",
    "open_listeners",
    "serve_connections",
]

log = logging.getLogger("ahp.server")

#: Largest inbound message accepted; larger ones close the connection with 1009.
MAX_MESSAGE_SIZE: Final = 16 * 1024 * 1024
#: Outbound bytes queued per connection before it is closed with 1013.
OUTBOX_BYTES: Final = 16 * 1024 * 1024
#: Seconds an overflowed connection gets to finish the frame in flight and the close
#: handshake (1013); a client that reads nothing at all is then dropped without one.
STALL_GRACE: Final = 1.0
#: The close reason sent to a client whose outbox overflowed.
OVERFLOW_CLOSE: Final = (1013, "outbound buffer full; reconnect to resume")
LOOPBACK_NAMES: Final = frozenset({"localhost", "127.0.0.1", "::1", "[::1]"})


@attrs.frozen
class ServerConfig:
    token: str | None
    allow_origins: frozenset[str] = frozenset()
    #: Names accepted in ``Host`` when bound to loopback (empty: no check, e.g. Unix socket).
    allowed_hosts: frozenset[str] = frozenset()
    max_message_size: int = MAX_MESSAGE_SIZE
    outbox_bytes: int = OUTBOX_BYTES
    stall_grace: float = STALL_GRACE


def _header(request: WebSocketRequest, name: bytes) -> str | None:
    for key, value in request.headers:
        if key.lower() == name:
            return value.decode("latin-1")
    return None


def check_upgrade(request: WebSocketRequest, config: ServerConfig) -> str | None:
    """Why the upgrade must be refused, or None to accept it."""
    origin = _header(request, b"origin")
    if origin is not None and origin not in config.allow_origins:
        return "origin not allowed"
    if config.allowed_hosts:
        host = request_host(request)
        if host is None:
            return "missing Host header"
        name = host.rsplit(":", 1)[0] if not host.endswith("]") else host
        if host.lower() not in config.allowed_hosts and name.lower() not in config.allowed_hosts:
            return "unexpected Host header"
    if config.token is not None:
        offered = ""
        auth = _header(request, b"authorization")
        if auth is not None and auth.lower().startswith("bearer "):
            offered = auth[7:].strip()
        else:
            query = parse_qs(urlsplit(request.path).query)
            offered = (query.get("tkn") or [""])[0]
        if not hmac.compare_digest(offered.encode(), config.token.encode()):
            return "missing or wrong token"
    return None


class _Writer:
    """Drains the outbox into the socket; see the module docstring for overflow.

    ``broken`` is set when a send was cancelled part-way through a frame: the
    stream then carries a truncated frame, so it may only be closed, never sent a
    close frame.
    """

    def __init__(self, ws: WebSocketConnection, outbox: Outbox, session: Session) -> None:
        self.ws = ws
        self.outbox = outbox
        self.session = session
        self.scope = trio.CancelScope()
        self.broken = False
        self.closing = False

    async def run(self) -> None:
        ws, outbox, session = self.ws, self.outbox, self.session
        with self.scope:
            while True:
                # Items queued while the last frame went out are taken without another
                # checkpoint (a send is one): an echo that arrives during a send is not
                # delayed by one more scheduler pass.
                batch = outbox.get_nowait() if len(outbox) else await outbox.get_batch()
                for item in batch:
                    frame = item.frame if isinstance(item, Published) else item
                    self.broken = True  # until the whole frame is out
                    await ws.send_message(frame)
                    self.broken = False
                if session.close_request is not None and not len(outbox):
                    code, reason = session.close_request
                    await ws.aclose(code, reason)
                    return
                if not batch:
                    if outbox.overflowed:
                        log.info("client %s too slow: closing with 1013", session.client_id)
                        self.closing = True
                        await ws.aclose(*OVERFLOW_CLOSE)
                    return

    async def watch_overflow(self, grace: float) -> None:
        """Bound the writer once the outbox overflows (it may be blocked in a send)."""
        await self.outbox.wait_overflowed()
        self.scope.deadline = min(self.scope.deadline, trio.current_time() + grace)


async def _abort(ws: WebSocketConnection) -> None:
    """Close the TCP stream without sending anything more (no close frame).

    ``aclose`` under an already-cancelled scope: trio-websocket's first step,
    taking its send lock, is a checkpoint, so no byte is written, and its cleanup
    closes the stream (an ``aclose`` closes its resource even when cancelled).
    """
    with trio.CancelScope() as scope:
        scope.cancel()
        await ws.aclose(*OVERFLOW_CLOSE)  # (never sent)


async def _reader(ws: WebSocketConnection, session: Session, config: ServerConfig) -> None:
    while True:
        message = await ws.get_message()
        await session.handle_frame(message)
        if session.close_request is not None:
            session.outbox.close()
            return
        # A client that does not read its answers is not read either (bounded memory).
        await session.outbox.wait_responses_below(config.outbox_bytes)


def _remote(request: WebSocketRequest) -> object:
    """The peer's address for a log line (a peer that already reset has none)."""
    try:
        return request.remote
    except OSError:
        return "<disconnected peer>"


async def _serve_one(request: WebSocketRequest, state: ServerState, config: ServerConfig) -> None:
    refusal = check_upgrade(request, config)
    # A peer may hang up during the upgrade (even before our 403 body is out): that
    # ends its own connection, never the server.
    if refusal is not None:
        log.warning("refused connection from %s: %s", _remote(request), refusal)
        with contextlib.suppress(ConnectionClosed):
            await request.reject(403, body=f"{refusal}\n".encode())
        return
    try:
        ws = await request.accept()
    except ConnectionClosed:
        return
    outbox = Outbox(max_bytes=config.outbox_bytes)
    session = Session(state, outbox)
    writer = _Writer(ws, outbox, session)
    close_code, close_reason = 1001, "server going away"
    try:
        async with trio.open_nursery() as nursery:

            async def reader() -> None:
                try:
                    await _reader(ws, session, config)
                except ConnectionClosed:
                    nursery.cancel_scope.cancel()

            async def write() -> None:
                nonlocal close_code, close_reason
                with contextlib.suppress(ConnectionClosed):
                    await writer.run()
                if writer.scope.cancelled_caught and not writer.closing:
                    log.info("client %s reads nothing: dropping the connection", session.client_id)
                    close_code, close_reason = OVERFLOW_CLOSE
                nursery.cancel_scope.cancel()

            nursery.start_soon(reader)
            nursery.start_soon(write)
            nursery.start_soon(writer.watch_overflow, config.stall_grace)
    except Exception:
        # A bug of ours in one connection must not take the server (and every other
        # client and terminal) down with it: log it, close this connection with 1011.
        log.exception("connection of client %s failed", session.client_id)
        close_code, close_reason = 1011, "internal error"
    finally:
        session.disconnect()
        outbox.close()
        with trio.CancelScope(shield=True):
            if writer.broken:
                await _abort(ws)
            else:
                with trio.move_on_after(1):
                    await ws.aclose(close_code, close_reason)


class _UnixStream(trio.abc.HalfCloseableStream):
    """A Unix-socket stream that does not look like a TCP ``SocketStream``.

    trio-websocket derives ``(address, port)`` endpoints from socket streams,
    which fails for Unix-socket paths; a plain wrapper makes it use ``repr``.
    """

    def __init__(self, stream: trio.SocketStream) -> None:
        self._stream = stream

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await self._stream.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self._stream.wait_send_all_might_not_block()

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        return await self._stream.receive_some(max_bytes)

    async def send_eof(self) -> None:
        await self._stream.send_eof()

    async def aclose(self) -> None:
        await self._stream.aclose()

    def __repr__(self) -> str:
        return "<unix socket peer>"


class _UnixListener(trio.abc.Listener[_UnixStream]):
    def __init__(self, listener: trio.SocketListener) -> None:
        self._listener = listener
        self.socket = listener.socket

    async def accept(self) -> _UnixStream:
        return _UnixStream(await self._listener.accept())

    async def aclose(self) -> None:
        await self._listener.aclose()


Listener = trio.SocketListener | _UnixListener


async def open_listeners(*, host: str | None, port: int | None, unix: str | None) -> list[Listener]:
    """TCP listeners on ``host:port``, or one Unix-socket listener (mode 0600)."""
    if unix is not None:
        sock = trio.socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(unix)  # a stale socket file from an earlier run
        old = os.umask(0o177)
        try:
            await sock.bind(unix)
        finally:
            os.umask(old)
        os.chmod(unix, 0o600)
        sock.listen(128)
        return [_UnixListener(trio.SocketListener(sock))]
    return list(await trio.open_tcp_listeners(port or 0, host=host))


async def serve_connections(
    state: ServerState,
    config: ServerConfig,
    listeners: Sequence[Listener],
    *,
    task_status: trio.TaskStatus[WebSocketServer] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Accept WebSocket connections until cancelled."""

    async def handler(request: WebSocketRequest) -> None:
        # trio-websocket runs every handler in the server's nursery: an exception
        # escaping one connection would stop the whole server.
        try:
            await _serve_one(request, state, config)
        except ConnectionClosed:
            pass
        except Exception:
            log.exception("connection from %s failed", _remote(request))

    server = WebSocketServer(
        handler,
        list(listeners),  # type: ignore[arg-type]  # any trio Listener works
        max_message_size=config.max_message_size,
        message_queue_size=1,
        connect_timeout=10,
        disconnect_timeout=5,
    )
    await server.run(task_status=task_status)
