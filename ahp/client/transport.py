"""The client's Trio transport: one WebSocket connection to a host, opened and closed.

Why a module of its own: :class:`~ahp.client.session.ClientSession` decides what
to send and what an answer means; this moves frames. It opens the byte stream
itself (TCP, TLS with the handshake done here, or a Unix socket), lets
trio-websocket frame over it (:mod:`ahp.ws`), and closes that same stream, so no
private attribute of trio-websocket is touched.

Tasks and ownership: :func:`open_transport` starts one task in the caller's
nursery that holds the connection (trio-websocket's reader runs in a nursery of
its own inside it, so a failed handshake surfaces as one :class:`ClientError`,
never as an exception group in the caller's nursery). The task ends when the
transport is released (:meth:`Transport.release`, :meth:`Transport.aclose`):
the close handshake gets :data:`CLOSE_TIMEOUT` seconds, then the stream is
closed. :meth:`Transport.abort` closes the stream at once, without a handshake
(what a network failure looks like to the server).

Patience: a handshake whose answer is large (a reconnect's replay or snapshots: up
to the whole scrollback of every subscribed terminal) may take longer than any
fixed timeout on a slow link, yet a server that has gone silent must still end
it. :meth:`Transport.patience` is a deadline about progress: it ends a wait when
nothing has arrived for a number of seconds; every chunk read moves it forward.

The upgrade: trio-websocket waits for the server's answer to its upgrade request
until the caller's timeout even when the server has closed the connection (EOF or
a reset before any answer): a peer that accepts and closes at once (a server going
down, a port-forward to nothing) cost every connect and every reconnect attempt
the whole :data:`CONNECT_TIMEOUT`. The stream is watched (:class:`WatchedStream`)
and the upgrade ends as soon as the peer ends the stream without an answer.

Buffering: trio-websocket's one-message queue and a receive buffer of
:data:`RECEIVE_BUFFER` bytes; an inbound message is at most
:data:`MAX_MESSAGE_SIZE` bytes (a larger one closes the connection).
"""

from __future__ import annotations

import math
import ssl
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Final
from urllib.parse import SplitResult, urlsplit

import trio

from ahp.client.errors import ClientError
from ahp.ws import (
    ConnectionClosed,
    ConnectionRejected,
    HandshakeError,
    WebSocketConnection,
    wrap_client_stream,
)

__all__ = [
    "CLOSE_TIMEOUT",
    "CONNECT_TIMEOUT",
    "MAX_MESSAGE_SIZE",
    "RECEIVE_BUFFER",
    "ConnectionClosed",
    "Patience",
    "Transport",
    "open_transport",
]

#: Largest inbound message (a big snapshot or replay); the server's default outbox is 16 MiB.
MAX_MESSAGE_SIZE: Final = 512 * 1024 * 1024
RECEIVE_BUFFER: Final = 256 * 1024
#: Seconds to open the transport, finish TLS and the WebSocket upgrade.
CONNECT_TIMEOUT: Final = 10.0
#: Seconds the close handshake may take before the stream is closed anyway.
CLOSE_TIMEOUT: Final = 1.0


def _first_leaf(exc: BaseException) -> BaseException:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


class Patience:
    """A cancel scope whose deadline is ``seconds`` after the last chunk read (see
    :meth:`Transport.patience`), never past ``limit`` (Trio time)."""

    __slots__ = ("limit", "scope", "seconds")

    def __init__(self, seconds: float, limit: float) -> None:
        self.seconds = seconds
        self.limit = limit
        self.scope = trio.CancelScope()
        self.progress()

    def progress(self) -> None:
        """Bytes arrived: the deadline moves to ``seconds`` from now (up to ``limit``)."""
        self.scope.deadline = min(trio.current_time() + self.seconds, self.limit)


class Transport:
    """One open WebSocket connection (see the module docstring for its task)."""

    def __init__(
        self, ws: WebSocketConnection, stream: trio.abc.Stream, watched: WatchedStream
    ) -> None:
        self.ws = ws
        self.stream = stream
        #: ``stream`` as trio-websocket reads it (every chunk read passes through it).
        self.watched = watched
        self._released = trio.Event()
        self._finished = trio.Event()

    @contextmanager
    def patience(self, seconds: float, *, limit: float = math.inf) -> Iterator[Patience]:
        """Run the block until nothing has arrived on this connection for ``seconds``
        (each chunk trio-websocket reads moves the deadline to ``seconds`` after it),
        or ``limit`` seconds have passed in all; then cancel it and raise
        :class:`trio.TooSlowError`, whose message says which.

        What it bounds: a silent peer (a frozen or vanished server, a link that
        stopped) ends the block ``seconds`` after the last byte. What it does not: a
        peer that keeps sending — however slowly — holds the block until ``limit``
        (the caller's cap). The time the block itself spends on the CPU without a
        checkpoint counts as silence (no chunk is read meanwhile). One patience per
        connection at a time (a nested one raises :class:`RuntimeError`)."""
        watched = self.watched
        if watched.patience is not None:
            raise RuntimeError("this connection already waits with patience")
        now = trio.current_time()
        patience = Patience(seconds, now + limit)
        watched.patience = patience
        try:
            with patience.scope:
                yield patience
        finally:
            watched.patience = None
        if patience.scope.cancelled_caught:
            if trio.current_time() >= patience.limit:
                raise trio.TooSlowError(f"not done within {limit:g} s")
            raise trio.TooSlowError(f"nothing arrived for {seconds:g} s")

    async def send(self, text: str) -> None:
        """Send one text message; raises :class:`ConnectionClosed`."""
        await self.ws.send_message(text)

    async def receive(self) -> str | bytes:
        """The next message; raises :class:`ConnectionClosed` once the connection ends."""
        return await self.ws.get_message()

    def release(self) -> None:
        """Let the holding task close the connection (handshake, then the stream)."""
        self._released.set()

    async def aclose(self) -> None:
        """Release and wait until the stream is closed."""
        self._released.set()
        await self._finished.wait()

    async def abort(self) -> None:
        """Close the stream at once, without a close handshake."""
        await self.stream.aclose()

    async def _hold(self) -> None:
        try:
            await self._released.wait()
        finally:
            with trio.CancelScope(shield=True):
                with trio.move_on_after(CLOSE_TIMEOUT):
                    await self.ws.aclose()  # the close handshake, while the reader runs
                await self.stream.aclose()
            self._finished.set()


#: What a connection runs over.
Stream = trio.SocketStream | trio.SSLStream[trio.SocketStream]


class WatchedStream(trio.abc.Stream):
    """``stream`` as it is, and :attr:`ended` set once the peer ended it (EOF, or
    a send or receive found it broken: a reset); a chunk received moves the
    :attr:`patience` in force forward. One call of indirection per send and
    receive, one attribute test per chunk received; no buffering."""

    def __init__(self, stream: Stream) -> None:
        self.stream = stream
        self.ended = trio.Event()
        #: The :meth:`Transport.patience` in force, if any.
        self.patience: Patience | None = None

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        try:
            await self.stream.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            self.ended.set()
            raise

    async def wait_send_all_might_not_block(self) -> None:
        await self.stream.wait_send_all_might_not_block()

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        try:
            data = await self.stream.receive_some(max_bytes)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            self.ended.set()
            raise
        if not data:
            self.ended.set()
        elif self.patience is not None:
            self.patience.progress()
        return data

    async def aclose(self) -> None:
        await self.stream.aclose()


async def _upgrade(
    nursery: trio.Nursery, stream: WatchedStream, host_header: str, target: str
) -> WebSocketConnection:
    """The WebSocket upgrade over ``stream``, its reader in ``nursery``; raises
    :class:`OSError` as soon as the peer ends the stream without an answer.

    (An answer that came before the end — a refusal with its HTTP status — woke
    the upgrade before the end was read: it is raised, never lost to the race.)"""
    connection: WebSocketConnection | None = None
    async with trio.open_nursery() as race:

        async def watch() -> None:
            await stream.ended.wait()
            race.cancel_scope.cancel()

        race.start_soon(watch)
        connection = await wrap_client_stream(
            nursery,
            stream,  # type: ignore[arg-type]  # (any trio Stream does)
            host_header,
            target,
            max_message_size=MAX_MESSAGE_SIZE,
            receive_buffer_size=RECEIVE_BUFFER,
        )
        race.cancel_scope.cancel()
    if connection is None:
        raise OSError("the server closed the connection during the WebSocket upgrade")
    return connection


async def open_stream(
    parts: SplitResult, ssl_context: ssl.SSLContext | None
) -> tuple[Stream, str, str]:
    """The stream for ``parts`` (TLS handshake done), its ``Host`` and target."""
    query = f"?{parts.query}" if parts.query else ""
    target = (parts.path or "/") + query
    host_header = parts.netloc.rpartition("@")[2]
    if parts.scheme == "ws+unix":
        path, _, resource = (parts.netloc or parts.path).partition(":")
        return await trio.open_unix_socket(path), "localhost", (resource or "/") + query
    if parts.scheme == "ws" and parts.hostname:
        return await trio.open_tcp_stream(parts.hostname, parts.port or 80), host_header, target
    if parts.scheme == "wss" and parts.hostname:
        tls = await trio.open_ssl_over_tcp_stream(
            parts.hostname,
            parts.port or 443,
            ssl_context=ssl_context or ssl.create_default_context(),
            https_compatible=True,
        )
        try:
            # Here, not lazily inside trio-websocket: its handshake waits forever when
            # the first write fails (as it does for a certificate that does not verify).
            await tls.do_handshake()
        except BaseException:
            with trio.CancelScope(shield=True):
                await tls.aclose()
            raise
        return tls, host_header, target
    raise ClientError(f"unsupported URL {parts.scheme}://…: use ws://, wss:// or ws+unix://")


async def open_transport(
    nursery: trio.Nursery,
    url: str,
    *,
    ssl_context: ssl.SSLContext | None = None,
    connect_timeout: float = CONNECT_TIMEOUT,
) -> Transport:
    """Open one connection to ``url``, held by a task in ``nursery``. Raises
    :class:`ClientError` with one clear message when it cannot be opened."""
    transport: Transport = await nursery.start(_hold_connection, url, ssl_context, connect_timeout)
    return transport


async def _hold_connection(
    url: str,
    ssl_context: ssl.SSLContext | None,
    connect_timeout: float,
    *,
    task_status: trio.TaskStatus[Transport],
) -> None:
    parts = urlsplit(url)
    started = False
    stream: Stream | None = None
    try:
        async with trio.open_nursery() as inner:
            # We open the stream ourselves so that a refused handshake closes it.
            with trio.fail_after(connect_timeout):
                stream, host_header, target = await open_stream(parts, ssl_context)
                watched = WatchedStream(stream)
                ws = await _upgrade(inner, watched, host_header, target)
            transport = Transport(ws, stream, watched)
            started = True
            task_status.started(transport)
            try:
                await transport._hold()
            finally:
                inner.cancel_scope.cancel()
    except (
        ExceptionGroup,
        ConnectionRejected,
        HandshakeError,
        OSError,
        ConnectionClosed,
        trio.BrokenResourceError,  # e.g. a TLS certificate that does not verify
        trio.TooSlowError,
    ) as exc:
        if stream is not None and not started:
            with trio.CancelScope(shield=True):
                await stream.aclose()
        leaf = _first_leaf(exc)
        if not isinstance(
            leaf,
            ConnectionRejected
            | HandshakeError
            | OSError
            | ConnectionClosed
            | trio.BrokenResourceError
            | trio.TooSlowError,
        ):
            raise
        if started:
            return  # the connection broke later: the reader reports it
        if isinstance(leaf, ConnectionRejected):
            body = (leaf.body or b"").decode(errors="replace").strip()
            raise ClientError(
                f"connection refused by the server: HTTP {leaf.status_code} {body}"
            ) from None
        where = f"{parts.scheme}://{parts.netloc or parts.path}"
        if isinstance(leaf, trio.TooSlowError):
            why = f"no answer within {connect_timeout:g} s"
        elif isinstance(leaf, trio.BrokenResourceError):
            why = str(leaf.__cause__ or leaf)
        elif _nobody_listening(leaf):
            why = _nobody_listening_line(parts, leaf)
        else:
            why = str(leaf)
        raise ClientError(f"cannot connect to {where}: {why}") from None


def _nobody_listening(exc: BaseException) -> bool:
    """Whether a failed connect says that nothing listens at the address: refused (by
    every address a name resolved to), or a Unix socket path that does not exist."""
    if isinstance(exc, ConnectionRefusedError | FileNotFoundError):
        return True
    # trio.open_tcp_stream: OSError("all attempts to connect to H:P failed") from a
    # group of the attempts' own errors.
    cause = exc.__cause__
    if isinstance(cause, BaseExceptionGroup):
        attempts = _leaves(cause)
        return bool(attempts) and all(isinstance(e, ConnectionRefusedError) for e in attempts)
    return False


def _nobody_listening_line(parts: SplitResult, exc: BaseException) -> str:
    """The reason, and what to check: the server may not run, or not there."""
    if parts.scheme == "ws+unix":
        path = (parts.netloc or parts.path).partition(":")[0]
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        return f"{reason}: is `ahp-terminals serve --unix {path}` running?"
    port = parts.port or (443 if parts.scheme == "wss" else 80)
    host = parts.netloc.rpartition("@")[2]
    if parts.port:
        host = host.rsplit(":", 1)[0]
    return f"connection refused: is `ahp-terminals serve` running at {host}:{port}?"


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in _leaves(inner)]
    return [exc]
