"""A recording's download (``GET /api/recordings/NAME``): streamed in bounded chunks, for as
long as the client keeps taking it (:mod:`ahp.server.download`).

Real servers on port 0 (:func:`serve_connections` with the page's routes, so that the
unauthenticated phase's deadline can be made short) and real sockets whose receive
buffer is made small, so that the server's sends wait on the client's reads.
"""

from __future__ import annotations

import os
import socket
import tracemalloc
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio

from ahp.engine import open_host
from ahp.server import download
from ahp.server.download import DOWNLOAD_CHUNK, Downloads
from ahp.server.listeners import open_listeners
from ahp.server.session import ServerState
from ahp.server.web import web_routes
from ahp.server.websocket import ServerConfig, serve_connections
from tests.helpers import TIMEOUT
from tests.wire import TOKEN

#: The client's receive buffer (the kernel doubles it): the server's sends wait on reads.
RCVBUF = 16 * 1024
AUTH = f"Authorization: Bearer {TOKEN}\r\n"


@asynccontextmanager
async def server(
    record_dir: Path, downloads: Downloads, handshake_timeout: float = 10.0
) -> AsyncIterator[int]:
    """A server with the page's routes on recordings in ``record_dir``; its port."""
    routes = web_routes(token=TOKEN, record_dir=str(record_dir), downloads=downloads)
    config = ServerConfig(token=TOKEN, routes=routes, handshake_timeout=handshake_timeout)
    async with open_host() as host, trio.open_nursery() as nursery:
        listeners = await open_listeners(host="127.0.0.1", port=0, unix=None)
        port = listeners[0].socket.getsockname()[1]
        await nursery.start(serve_connections, ServerState(host=host), config, listeners)
        yield port
        nursery.cancel_scope.cancel()


@asynccontextmanager
async def ask(port: int, name: str, method: str = "GET") -> AsyncIterator[trio.SocketStream]:
    """A connection with a small receive buffer that sent the request for ``name``."""
    sock = trio.socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RCVBUF)  # (before connecting)
    stream = trio.SocketStream(sock)
    try:
        await sock.connect(("127.0.0.1", port))
        head = f"{method} /api/recordings/{name} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{AUTH}\r\n"
        await stream.send_all(head.encode())
        yield stream
    finally:
        await stream.aclose()


async def read_head(stream: trio.SocketStream) -> tuple[int, dict[str, str], bytearray]:
    """The answer's status and headers, and the body bytes read with them."""
    got = bytearray()
    with trio.fail_after(TIMEOUT):
        while b"\r\n\r\n" not in got:
            chunk = await stream.receive_some(4096)
            assert chunk, "closed before the head"
            got += chunk
    head, rest = bytes(got).split(b"\r\n\r\n", 1)
    status, *lines = head.decode("latin-1").split("\r\n")
    fields = {k.lower(): v.strip() for k, v in (line.split(":", 1) for line in lines)}
    return int(status.split()[1]), fields, bytearray(rest)


async def read_rest(stream: trio.SocketStream, body: bytearray, pause: float = 0.0) -> None:
    """Read into ``body`` until the server closes, ``pause`` seconds between reads."""
    with trio.fail_after(TIMEOUT):
        while chunk := await stream.receive_some(RCVBUF):
            body += chunk
            if pause:
                await trio.sleep(pause)


async def given_back(downloads: Downloads) -> None:
    """Wait until every place among ``downloads`` is given back (the server closed)."""
    with trio.fail_after(TIMEOUT):
        while downloads.active:  # noqa: ASYNC110 (Downloads has no event for this)
            await trio.sleep(0.01)


def recording(tmp_path: Path, size: int, name: str = "big.cast") -> bytes:
    data = os.urandom(size)  # (any bytes: the server does not parse them)
    (tmp_path / name).write_bytes(data)
    return data


async def test_stalled_downloads_hold_a_chunk_each_not_the_file(tmp_path: Path) -> None:
    """Three clients take 100 bytes of an 8 MiB recording and stall: the server holds
    about a chunk for each (it held the file twice over each: 48 MiB here)."""
    size = 8 * 1024 * 1024
    recording(tmp_path, size)
    downloads = Downloads()
    async with server(tmp_path, downloads) as port:
        tracemalloc.start()
        try:
            base, _ = tracemalloc.get_traced_memory()
            tracemalloc.reset_peak()
            async with (
                ask(port, "big.cast") as a,
                ask(port, "big.cast") as b,
                ask(port, "big.cast") as c,
            ):
                for stream in (a, b, c):
                    status, fields, _ = await read_head(stream)
                    assert status == 200 and int(fields["content-length"]) == size
                assert downloads.active == 3
                await trio.sleep(0.5)  # (the sends fill the kernel's buffers and wait)
                _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert peak - base < 3 * 4 * DOWNLOAD_CHUNK + 512 * 1024, (peak - base, size)


async def test_a_slow_reader_gets_the_whole_recording_past_the_phase_deadline(
    tmp_path: Path,
) -> None:
    """The unauthenticated phase's deadline (here 0.3 s) cut a download that was making
    progress; now a client reading small pieces with pauses gets every byte."""
    data = recording(tmp_path, 1024 * 1024)
    downloads = Downloads()
    async with server(tmp_path, downloads, handshake_timeout=0.3) as port:
        async with ask(port, "big.cast") as stream:
            started = trio.current_time()
            status, fields, body = await read_head(stream)
            assert status == 200 and int(fields["content-length"]) == len(data)
            await read_rest(stream, body, pause=0.01)
            took = trio.current_time() - started
        assert bytes(body) == data
        assert took > 0.3  # (the download outlived the phase's deadline)
        await given_back(downloads)


async def test_a_client_that_takes_nothing_is_closed_after_the_idle_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(download, "DOWNLOAD_IDLE", 0.3)
    data = recording(tmp_path, 4 * 1024 * 1024)
    downloads = Downloads()
    async with server(tmp_path, downloads) as port:
        async with ask(port, "big.cast") as stream:
            status, _, body = await read_head(stream)
            assert status == 200
            await given_back(downloads)  # closed after 0.3 s without progress
            await read_rest(stream, body)  # what the kernel held, then the server's close
        assert 0 < len(body) < len(data) and data.startswith(bytes(body))


async def test_a_growing_recording_is_sent_as_it_was_at_the_request(tmp_path: Path) -> None:
    data = recording(tmp_path, 1024 * 1024)
    async with server(tmp_path, Downloads()) as port:
        async with ask(port, "big.cast") as stream:
            _, fields, body = await read_head(stream)
            with (tmp_path / "big.cast").open("ab") as f:
                f.write(b"x" * 1024 * 1024)  # (the recorder appends while it is read)
            await read_rest(stream, body)
        assert int(fields["content-length"]) == len(data) and bytes(body) == data


async def test_a_recording_that_shrinks_ends_its_answer_short(tmp_path: Path) -> None:
    data = recording(tmp_path, 2 * 1024 * 1024)
    downloads = Downloads()
    async with server(tmp_path, downloads) as port:
        async with ask(port, "big.cast") as stream:
            _, fields, body = await read_head(stream)
            os.truncate(tmp_path / "big.cast", 1000)
            await read_rest(stream, body)
        assert int(fields["content-length"]) == len(data) and len(body) < len(data)
        assert data.startswith(bytes(body))


async def test_head_missing_and_too_many_downloads(tmp_path: Path) -> None:
    data = recording(tmp_path, 512 * 1024)
    downloads = Downloads(limit=1)
    async with server(tmp_path, downloads) as port:
        # HEAD: the head with the file's length, no body, no place kept.
        async with ask(port, "big.cast", method="HEAD") as stream:
            status, fields, body = await read_head(stream)
            await read_rest(stream, body)
        assert status == 200 and int(fields["content-length"]) == len(data) and body == b""
        assert fields["content-type"] == "application/x-asciicast; charset=utf-8"
        assert downloads.active == 0
        async with ask(port, "missing.cast") as stream:
            status, _, body = await read_head(stream)
            await read_rest(stream, body)
        assert status == 404 and body == b"no such recording\n" and downloads.active == 0
        # One download holds the one place: another is refused with 503, saying why.
        async with ask(port, "big.cast") as first:
            assert (await read_head(first))[0] == 200
            async with ask(port, "big.cast") as second:
                status, _, body = await read_head(second)
                await read_rest(second, body)
            assert status == 503 and b"try again later" in body
        await given_back(downloads)  # (the first left)
        async with ask(port, "big.cast") as stream:
            status, _, body = await read_head(stream)
            await read_rest(stream, body)
        assert status == 200 and bytes(body) == data


async def test_a_directory_named_like_a_recording_is_refused_without_a_leak(
    tmp_path: Path,
) -> None:
    # Any program in a terminal can make one; each request answered 500 and leaked an fd.
    (tmp_path / "dir.cast").mkdir()
    async with server(tmp_path, Downloads()) as port:
        before = len(os.listdir("/proc/self/fd"))
        for _ in range(30):
            async with ask(port, "dir.cast") as stream:
                status, _, body = await read_head(stream)
                await read_rest(stream, body)
            assert status == 404 and body == b"no such recording\n"
        assert len(os.listdir("/proc/self/fd")) < before + 10
