"""A raw JSON-RPC-over-WebSocket test peer, and a fixture that runs a real server.

The raw peer speaks frames exactly as written so tests can check the server's
answers byte for byte (ids, absent keys); ``ahp.client`` is tested separately.
"""

from __future__ import annotations

import base64
import itertools
import os
import socket
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

import orjson
import trio

from ahp.engine import Host, open_host
from ahp.server import ServeOptions, Sidecar, serve_host
from ahp.ws import WebSocketConnection, open_websocket_url
from tests.helpers import TIMEOUT

TOKEN = "test-token"


class Peer:
    """One raw connection. Notifications received while waiting for a response are kept."""

    def __init__(self, ws: WebSocketConnection) -> None:
        self.ws = ws
        self.ids = itertools.count(1)
        self.notes: list[dict[str, Any]] = []
        self.seq = itertools.count(1)

    async def send(self, message: Any) -> None:
        await self.ws.send_message(
            message if isinstance(message, str | bytes) else orjson.dumps(message).decode()
        )

    async def recv(self) -> dict[str, Any]:
        with trio.fail_after(TIMEOUT):
            frame = await self.ws.get_message()
        assert isinstance(frame, str), "the server must send text frames"
        value: dict[str, Any] = orjson.loads(frame)
        return value

    async def response(self, msg_id: Any) -> dict[str, Any]:
        while True:
            message = await self.recv()
            if "method" in message:
                self.notes.append(message)
                continue
            assert message["id"] == msg_id, message
            return message

    async def call(
        self, method: str, params: dict[str, Any] | None = None, *, msg_id: Any = None
    ) -> dict[str, Any]:
        """Send a request, return the whole response message (result or error)."""
        if msg_id is None:
            msg_id = next(self.ids)
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": msg_id, "method": method}
        if params is not None:
            message["params"] = params
        await self.send(message)
        return await self.response(msg_id)

    async def result(self, method: str, params: dict[str, Any] | None = None) -> Any:
        answer = await self.call(method, params)
        assert "result" in answer, answer
        return answer["result"]

    async def reconnect(self, client_id: str, last_seen: int, subscriptions: list[str]) -> Any:
        """``reconnect`` as ``client_id``; its result (replay or snapshots)."""
        return await self.result(
            "reconnect",
            {
                "channel": "ahp-root://",
                "clientId": client_id,
                "lastSeenServerSeq": last_seen,
                "subscriptions": subscriptions,
            },
        )

    async def initialize(self, client_id: str, subscriptions: list[str] | None = None) -> Any:
        return await self.result(
            "initialize",
            {
                "channel": "ahp-root://",
                "protocolVersions": ["0.5.0"],
                "clientId": client_id,
                "initialSubscriptions": subscriptions
                if subscriptions is not None
                else ["ahp-root://"],
            },
        )

    async def dispatch(self, channel: str, action: dict[str, Any]) -> int:
        client_seq = next(self.seq)
        await self.send(
            {
                "jsonrpc": "2.0",
                "method": "dispatchAction",
                "params": {"channel": channel, "clientSeq": client_seq, "action": action},
            }
        )
        return client_seq

    async def action(self, predicate: Any = None) -> dict[str, Any]:
        """The next ``action`` notification (kept ones first) matching ``predicate(params)``."""
        while True:
            if self.notes:
                message = self.notes.pop(0)
            else:
                message = await self.recv()
            if message.get("method") == "action" and (
                predicate is None or predicate(message["params"])
            ):
                params: dict[str, Any] = message["params"]
                return params

    async def text_until(self, channel: str, needle: str) -> str:
        text = ""
        while needle not in text:
            params = await self.action(lambda p: p["channel"] == channel)
            if params["action"]["type"] == "terminal/data":
                text += params["action"]["data"]
        return text


@asynccontextmanager
async def peer(url: str, **kwargs: Any) -> AsyncIterator[Peer]:
    """A raw connection. trio-websocket's client cannot close while its one-message
    queue is full, so tests that leave messages unread get a deep queue by default."""
    kwargs.setdefault("message_queue_size", 100_000)
    kwargs.setdefault("receive_buffer_size", 256 * 1024)
    async with open_websocket_url(url, max_message_size=64 * 1024 * 1024, **kwargs) as ws:
        try:
            yield Peer(ws)
        finally:
            await close_stream(ws)


async def close_stream(ws: WebSocketConnection) -> None:
    """Close the TCP stream under a client connection.

    trio-websocket's client waits for the server's TCP close after a
    server-initiated close handshake; if the context exits first its reader is
    cancelled and the socket is left to the garbage collector (a ResourceWarning).
    """
    stream = getattr(ws, "_stream", None)
    if stream is not None:
        with trio.CancelScope(shield=True):
            await stream.aclose()


@asynccontextmanager
async def running_server(
    options: ServeOptions | None = None, host: Host | None = None, **host_kwargs: Any
) -> AsyncIterator[Sidecar]:
    """A real sidecar on 127.0.0.1, port 0, for the duration of the block."""
    options = options or ServeOptions(port=0, token=TOKEN)
    async with open_host(**host_kwargs) as own_host, trio.open_nursery() as nursery:
        sidecar: Sidecar = await nursery.start(serve_host, host or own_host, options)
        try:
            yield sidecar
        finally:
            nursery.cancel_scope.cancel()


async def upgrade_status_line(port: int, target: str, headers: Mapping[str, str | None]) -> bytes:
    """Send a raw upgrade request to 127.0.0.1:``port``; the answer's HTTP status line.

    A raw socket: trio-websocket's client leaks its socket on a refused handshake.
    ``Host`` defaults to ``127.0.0.1:port``; a header whose value is None is not sent.
    """
    return (await upgrade_answer_head(port, target, headers)).split(b"\r\n", 1)[0]


async def upgrade_answer_head(
    port: int, target: str, headers: Mapping[str, str | None], *, raw: str = ""
) -> bytes:
    """:func:`upgrade_status_line`'s request (plus ``raw`` header lines as they are: two
    of one name, a huge one), sent in one write; the answer's whole head."""
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    try:
        lines = [
            f"GET {target} HTTP/1.1",
            "Upgrade: websocket",
            "Connection: Upgrade",
            "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==",
            "Sec-WebSocket-Version: 13",
        ]
        headers = {"Host": f"127.0.0.1:{port}", **headers}
        lines += [f"{k}: {v}" for k, v in headers.items() if v is not None]
        await stream.send_all(("\r\n".join(lines) + "\r\n" + raw + "\r\n").encode())
        reply = b""
        with trio.fail_after(TIMEOUT):
            while b"\r\n\r\n" not in reply:
                chunk = await stream.receive_some(65536)
                if not chunk:
                    break
                reply += chunk
    finally:
        await stream.aclose()
    return reply.split(b"\r\n\r\n", 1)[0]


def masked_text_frame(payload: bytes) -> bytes:
    """One final client text frame on the wire, masked with key 0 (the payload goes as
    it is): for tests that write frames to a bare socket."""
    n = len(payload)
    if n < 126:
        head = bytes([0x81, 0x80 | n])
    elif n < 1 << 16:
        head = bytes([0x81, 0x80 | 126]) + n.to_bytes(2, "big")
    else:
        head = bytes([0x81, 0x80 | 127]) + n.to_bytes(8, "big")
    return head + b"\0\0\0\0" + payload


async def upgrade(stream: trio.abc.Stream, port: int, token: str = TOKEN) -> None:
    """A WebSocket upgrade to 127.0.0.1:``port`` over ``stream``, asserted accepted
    (101); nothing past the answer's head is read (frames are up to the test)."""
    key = base64.b64encode(os.urandom(16)).decode()
    request = (
        f"GET /?tkn={token} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\n"
        f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
    )
    await stream.send_all(request.encode())
    reply = b""
    with trio.fail_after(TIMEOUT):
        while b"\r\n\r\n" not in reply:
            chunk = await stream.receive_some(1)
            assert chunk, "closed during the upgrade"
            reply += chunk
    assert reply.startswith(b"HTTP/1.1 101"), reply


@asynccontextmanager
async def slow_stream(
    port: int, token: str = TOKEN, *, receive_buffer: int = 4096
) -> AsyncIterator[trio.SocketStream]:
    """A TCP stream after a WebSocket upgrade to 127.0.0.1:``port``, whose receive
    buffer is ``receive_buffer`` bytes, set before connecting (the window the server
    sees stays small): the server can write no faster than the test reads
    (:class:`SlowReader`). Frames are up to the test (``masked_text_frame``)."""
    sock = trio.socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
    await sock.connect(("127.0.0.1", port))
    stream = trio.SocketStream(sock)
    try:
        await upgrade(stream, port, token)
        yield stream
    finally:
        with trio.CancelScope(shield=True):
            await stream.aclose()


class SlowReader:
    """Reads ``chunk`` bytes of a stream every ``pause`` seconds (4 KiB every 0.2 s: about
    20 KB/s) until the server closes it: a viewer that reads slowly but steadily."""

    def __init__(self, stream: trio.SocketStream, chunk: int = 4096, pause: float = 0.2) -> None:
        self.stream = stream
        self.chunk = chunk
        self.pause = pause
        #: Bytes read so far.
        self.got = 0
        #: Set when the server closed the connection (EOF or a reset).
        self.closed = trio.Event()

    async def run(self) -> None:
        try:
            while data := await self.stream.receive_some(self.chunk):
                self.got += len(data)
                await trio.sleep(self.pause)
        except trio.BrokenResourceError:
            pass
        self.closed.set()
