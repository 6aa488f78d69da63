"""The page's answers are sent after the unauthenticated phase, while the client takes them.

Probe K, finding 3: the viewer's assets were sent within the unauthenticated phase
(one deadline for the whole phase, and evictable as the oldest pending connection), so
a page stayed "connecting…" on a slow link (xterm.mjs, 345 KB, cut after 10 s at
25 KB/s) and under a flood of half-sent requests from anyone without a token. Now a
plain request, read and answered, leaves the pending connections and its answer goes
out under a progress rule (:mod:`ahp.server.download`), with a bound of its own on how
many are sent at once (:class:`ahp.server.admission.PlainSends`).

Real servers on port 0 (:func:`serve_connections` with the page's routes, so that the
phase's deadline can be made short) and real sockets whose receive buffer is small, so
that the server's sends wait on the client's reads.
"""

from __future__ import annotations

import socket
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio

from ahp.engine import open_host
from ahp.server import download
from ahp.server.listeners import open_listeners
from ahp.server.session import ServerState
from ahp.server.web import STATIC_ROOT, web_routes
from ahp.server.websocket import ServerConfig, serve_connections
from tests.helpers import TIMEOUT
from tests.wire import TOKEN

ASSET = "/static/vendor/xterm/xterm.mjs"
DATA = (STATIC_ROOT / "vendor" / "xterm" / "xterm.mjs").read_bytes()
#: The client's receive buffer (the kernel doubles it): the server's sends wait on reads.
RCVBUF = 4096


@asynccontextmanager
async def server(**config: Any) -> AsyncIterator[tuple[int, ServerState]]:
    """A server with the page's routes; its port and state."""
    settings = ServerConfig(token=TOKEN, routes=web_routes(token=TOKEN), **config)
    async with open_host() as host, trio.open_nursery() as nursery:
        listeners = await open_listeners(host="127.0.0.1", port=0, unix=None)
        port = listeners[0].socket.getsockname()[1]
        state = ServerState(host=host)
        await nursery.start(serve_connections, state, settings, listeners)
        yield port, state
        nursery.cancel_scope.cancel()


@asynccontextmanager
async def ask(port: int, source: str = "127.0.0.1") -> AsyncIterator[trio.SocketStream]:
    """A connection from ``source`` with a small receive buffer that asked for the asset."""
    sock = trio.socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RCVBUF)  # (before connecting)
    await sock.bind((source, 0))
    stream = trio.SocketStream(sock)
    try:
        await sock.connect(("127.0.0.1", port))
        await stream.send_all(f"GET {ASSET} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())
        yield stream
    finally:
        await stream.aclose()


async def read_slowly(stream: trio.SocketStream, pause: float = 0.05) -> tuple[bytes, bytes]:
    """(head, body) read until the server closes, 4 KiB then ``pause`` seconds (about
    80 KB/s: the asset takes 4 s and more, past the short phase deadlines here)."""
    got = bytearray()
    with trio.fail_after(4 * TIMEOUT):
        try:
            while chunk := await stream.receive_some(4096):
                got += chunk
                await trio.sleep(pause)
        except trio.BrokenResourceError:
            pass  # (a reset: what came before it is what the client got)
    head, _, body = bytes(got).partition(b"\r\n\r\n")
    return head, body


async def until(predicate: Any) -> None:
    with trio.fail_after(TIMEOUT):
        while not predicate():  # noqa: ASYNC110 (PlainSends has no event for this)
            await trio.sleep(0.01)


async def test_a_slow_reader_gets_a_page_asset_past_the_phase_deadline() -> None:
    """The probe's ``slowread.py``: the asset at about 80 KB/s takes seconds, past the
    phase's deadline (here 0.5 s); it arrives whole (it was cut at the deadline)."""
    async with server(handshake_timeout=0.5) as (port, state), ask(port) as stream:
        started = trio.current_time()
        head, body = await read_slowly(stream)
        took = trio.current_time() - started
        assert head.startswith(b"HTTP/1.1 200"), head
        assert f"content-length: {len(DATA)}".encode() in head
        assert body == DATA, (len(body), len(DATA))
        assert took > 0.5  # (the answer outlived the phase's deadline)
        await until(lambda: state.plain_sends.active == 0)


async def test_a_flood_of_half_sent_requests_does_not_cut_a_page_asset() -> None:
    """The probe's ``churn.py``: connections without a token that send half a request
    evict the oldest pending connection every few milliseconds (8 held at most here).
    A slow reader's answer, once its request is read and answered, is no longer one of
    them: it gets every byte (it was evicted half-way)."""
    async with server(max_pending=8) as (port, _), trio.open_nursery() as nursery:
        flooding = trio.Event()

        async def churn() -> None:
            held: deque[trio.SocketStream] = deque()
            try:
                while True:
                    stream = await trio.open_tcp_stream("127.0.0.1", port)
                    held.append(stream)
                    await stream.send_all(b"GET / HTTP/1.1\r\n")
                    if len(held) > 32:
                        await held.popleft().aclose()
                    if len(held) > 16:
                        flooding.set()
                    await trio.sleep(0.01)
            finally:
                with trio.CancelScope(shield=True):
                    for stream in held:
                        await stream.aclose()

        nursery.start_soon(churn)
        await flooding.wait()
        for _ in range(20):  # (a request evicted before it was answered is asked again)
            async with ask(port) as stream:
                head, body = await read_slowly(stream)
            if head:
                break
        assert head.startswith(b"HTTP/1.1 200"), head
        assert body == DATA, (len(body), len(DATA))
        nursery.cancel_scope.cancel()


async def test_past_the_bound_on_sends_an_answer_is_sent_within_the_phase() -> None:
    """Sends after the phase are bounded (here 3 at once, 2 from one address): clients
    that take nothing hold their places (until ``DOWNLOAD_IDLE``), and a client past
    the bound gets its answer within the phase, cut at its deadline as before; another
    address still gets a place; a place given back is taken again."""
    config = {"handshake_timeout": 0.5, "max_plain_sends": 3, "max_plain_sends_per_peer": 2}
    async with server(**config) as (port, state):
        sends = state.plain_sends
        async with ask(port) as first, ask(port) as second:
            await until(lambda: sends.active == 2)  # (they read nothing: places held)
            async with ask(port) as late:
                head, body = await read_slowly(late)
            assert head.startswith(b"HTTP/1.1 200") and len(body) < len(DATA), len(body)
            assert sends.active == 2
            async with ask(port, source="127.0.0.2") as other:
                head, body = await read_slowly(other)
            assert body == DATA, (len(body), len(DATA))
            del first, second
        await until(lambda: sends.active == 0)
        async with ask(port) as again:
            head, body = await read_slowly(again)
        assert body == DATA, (len(body), len(DATA))


async def test_a_client_that_takes_nothing_gives_its_place_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The progress rule: an answer not taken for ``DOWNLOAD_IDLE`` seconds (here 0.3) is
    closed and its place given back; the client has what the kernel held, not more."""
    monkeypatch.setattr(download, "DOWNLOAD_IDLE", 0.3)
    async with server() as (port, state), ask(port) as stalled:
        await until(lambda: state.plain_sends.active == 1)
        await until(lambda: state.plain_sends.active == 0)
        head, body = await read_slowly(stalled, pause=0)
        assert head.startswith(b"HTTP/1.1 200") and len(body) < len(DATA), len(body)
