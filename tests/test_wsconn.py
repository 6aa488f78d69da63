"""The server's WebSocket layer at the frame level: a raw TCP peer against a real server.

What the message-level tests (bad input, faults) cannot send: fragments, pings
between fragments, invalid UTF-8 inside a text frame, unmasked or unknown
frames, a slow or broken upgrade. Every case also checks that the server still
serves a well-behaved client afterwards.
"""

from __future__ import annotations

import os
import struct
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import orjson
import pytest
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st
from wsproto import ConnectionType, WSConnection
from wsproto.events import AcceptConnection

from ahp.engine import open_host
from ahp.server.listeners import open_listeners
from ahp.server.session import ServerState
from ahp.server.websocket import ServerConfig, serve_connections
from ahp.server.wsconn import WRITE_CHUNK, ServerWebSocket, text_frame_header
from ahp.ws import open_websocket_url
from tests.helpers import TIMEOUT
from tests.test_faults import raw_ws, rpc
from tests.wire import TOKEN, peer, running_server

ROOT = "ahp-root://"
LIMIT = 64 * 1024
#: A client's upgrade request headers, for a wsproto server driven in memory.
HANDSHAKE_HEADERS = [
    (b"host", b"localhost"),
    (b"upgrade", b"websocket"),
    (b"connection", b"Upgrade"),
    (b"sec-websocket-key", b"dGhlIHNhbXBsZSBub25jZQ=="),
    (b"sec-websocket-version", b"13"),
]


def frame(payload: bytes, opcode: int = 1, *, fin: bool = True, masked: bool = True) -> bytes:
    """A client frame (RFC 6455 §5.2), optionally not final or not masked."""
    n = len(payload)
    first = (0x80 if fin else 0) | opcode
    mask_bit = 0x80 if masked else 0
    if n < 126:
        head = bytes([first, mask_bit | n])
    elif n < 65536:
        head = bytes([first, mask_bit | 126]) + struct.pack("!H", n)
    else:
        head = bytes([first, mask_bit | 127]) + struct.pack("!Q", n)
    if not masked:
        return head + payload
    key = os.urandom(4)
    return head + key + bytes(b ^ key[i % 4] for i, b in enumerate(payload))


class Frames:
    """Reads server frames (unmasked) off a raw stream."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.buf = b""

    async def _need(self, n: int) -> bool:
        while len(self.buf) < n:
            chunk = await self.stream.receive_some(65536)
            if not chunk:
                return False
            self.buf += chunk
        return True

    async def next(self) -> tuple[int, bytes] | None:
        """``(opcode, payload)``, or None at end of stream."""
        with trio.fail_after(TIMEOUT):
            if not await self._need(2):
                return None
            opcode, n = self.buf[0] & 0x0F, self.buf[1] & 0x7F
            assert self.buf[0] & 0x80, "server frames are final"
            assert not self.buf[1] & 0x80, "server frames are not masked"
            start = 2
            if n == 126:
                await self._need(4)
                n, start = struct.unpack("!H", self.buf[2:4])[0], 4
            elif n == 127:
                await self._need(10)
                n, start = struct.unpack("!Q", self.buf[2:10])[0], 10
            await self._need(start + n)
            payload, self.buf = self.buf[start : start + n], self.buf[start + n :]
            return opcode, payload

    async def close_code(self) -> int | None:
        """Skip to the close frame; its code (None if the stream ended without one)."""
        while True:
            got = await self.next()
            if got is None:
                return None
            if got[0] == 8:
                return int(struct.unpack("!H", got[1][:2])[0])


@asynccontextmanager
async def server(**config: float) -> AsyncIterator[int]:
    options = {"max_message_size": LIMIT, **config}
    async with open_host() as host, trio.open_nursery() as nursery:
        listeners = await open_listeners(host="127.0.0.1", port=0, unix=None)
        port = listeners[0].socket.getsockname()[1]
        await nursery.start(
            serve_connections,
            ServerState(host=host),
            ServerConfig(token=TOKEN, **options),  # type: ignore[arg-type]
            listeners,
        )
        yield port
        nursery.cancel_scope.cancel()


@asynccontextmanager
async def initialized(port: int, client_id: str) -> AsyncIterator[tuple[trio.SocketStream, Frames]]:
    async with raw_ws(port) as stream:
        frames = Frames(stream)
        init = {"channel": ROOT, "protocolVersions": ["0.5.0"], "clientId": client_id}
        await stream.send_all(frame(rpc("initialize", init)))
        _, payload = await _message(frames)
        assert "result" in orjson.loads(payload)
        yield stream, frames


async def _message(frames: Frames) -> tuple[int, bytes]:
    got = await frames.next()
    assert got is not None, "connection closed"
    return got


async def still_serves(port: int) -> None:
    """A new, well-behaved client gets answers."""
    async with raw_ws(port) as stream:
        frames = Frames(stream)
        await stream.send_all(frame(rpc("ping", {"channel": ROOT}, msg_id=7)))
        opcode, payload = await _message(frames)
        assert opcode == 1 and orjson.loads(payload)["id"] == 7


async def test_fragments_and_a_ping_between_them_make_one_message() -> None:
    async with server() as port, raw_ws(port) as stream:
        frames = Frames(stream)
        message = rpc("ping", {"channel": ROOT}, msg_id=5)
        a, b, c = message[:10], message[10:20], message[20:]
        await stream.send_all(frame(a, 1, fin=False))
        await stream.send_all(frame(b"are you there", 9))  # ping, between fragments
        await stream.send_all(frame(b, 0, fin=False) + frame(c, 0))
        assert await _message(frames) == (10, b"are you there")  # pong first
        opcode, payload = await _message(frames)
        assert opcode == 1 and orjson.loads(payload) == {"jsonrpc": "2.0", "id": 5, "result": None}


async def test_binary_frames_are_parsed_as_utf8_json() -> None:
    async with server() as port, raw_ws(port) as stream:
        frames = Frames(stream)
        await stream.send_all(frame(rpc("ping", {"channel": ROOT}, msg_id=6), 2))
        opcode, payload = await _message(frames)
        assert opcode == 1 and orjson.loads(payload)["id"] == 6


@pytest.mark.parametrize(
    ("name", "data", "code"),
    [
        ("invalid UTF-8 in a text frame", frame(b'{"a":"\xff"}'), 1007),
        (
            "invalid UTF-8 split over fragments",
            frame(b"\xe2\x82", fin=False) + frame(b"x", 0),
            1007,
        ),
        ("an unmasked client frame", frame(b"{}", masked=False), 1002),
        ("a reserved opcode", frame(b"", 3), 1002),
        ("a continuation with nothing to continue", frame(b"x", 0), 1002),
        ("a message over the limit", frame(b" " * (LIMIT + 1)), 1009),
        (
            "fragments over the limit together",
            frame(b" " * LIMIT, fin=False) + frame(b"  ", 0),
            1009,
        ),
    ],
    # (The frames carry random mask keys: ids from the names, so that every pytest-xdist
    # worker collects the same test ids.)
    ids=lambda value: "frames" if isinstance(value, bytes) else str(value),
)
async def test_protocol_violations_close_with_their_code(name: str, data: bytes, code: int) -> None:
    async with server() as port, initialized(port, "victim") as (victim, victim_frames):
        async with raw_ws(port) as stream:
            await stream.send_all(data)
            assert await Frames(stream).close_code() == code, name
        # The other client and the server are unaffected.
        await victim.send_all(frame(rpc("ping", {"channel": ROOT}, msg_id=9)))
        _, payload = await _message(victim_frames)
        assert orjson.loads(payload)["id"] == 9
        await still_serves(port)


async def test_client_close_is_answered_with_the_same_code() -> None:
    async with server() as port, raw_ws(port) as stream:
        await stream.send_all(frame(struct.pack("!H", 4001) + b"bye", 8))
        assert await Frames(stream).close_code() == 4001
        with trio.fail_after(TIMEOUT):
            assert await stream.receive_some(10) == b""  # and the server closed TCP


@pytest.mark.parametrize(
    "request_bytes",
    [
        b"garbage\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: x\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n",
        b"GET / HTTP/1.1\r\n" + b"X-Big: " + b"a" * 70_000 + b"\r\n\r\n",
    ],
    ids=["not-http", "not-get", "no-key", "headers-too-big"],
)
async def test_bad_upgrade_requests_are_answered_or_dropped(request_bytes: bytes) -> None:
    async with server() as port:
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        reply = b""
        try:
            with trio.fail_after(TIMEOUT):
                await stream.send_all(request_bytes)
                while chunk := await stream.receive_some(4096):
                    reply += chunk
        except trio.BrokenResourceError:
            pass  # reset: the server closed before reading all we sent (also a drop)
        finally:
            await stream.aclose()
        assert reply == b"" or reply.startswith(b"HTTP/1.1 4"), reply[:100]
        await still_serves(port)


async def test_a_silent_peer_is_dropped_after_the_handshake_timeout() -> None:
    async with server(handshake_timeout=0.3) as port:
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        await stream.send_all(b"GET / HTTP/1.1\r\n")  # and nothing more
        with trio.fail_after(TIMEOUT):
            assert await stream.receive_some(10) == b""
        await stream.aclose()
        await still_serves(port)


def test_text_frame_headers() -> None:
    assert text_frame_header(2) + b"hi" == b"\x81\x02hi"
    assert text_frame_header(125) == b"\x81\x7d"
    assert text_frame_header(126) == b"\x81\x7e\x00\x7e"
    assert text_frame_header(65535) == b"\x81\x7e\xff\xff"
    assert text_frame_header(65536) == b"\x81\x7f" + (65536).to_bytes(8, "big")


async def test_pings_are_answered_during_an_output_flood() -> None:
    """The connection's reader answers pings itself, between the writer's frames."""
    async with running_server() as server, peer(server.url) as p:
        term = await server.state.host.create_terminal(argv=["yes", "flood " * 20])
        await p.initialize("pinger", [term.uri])
        received = 0
        waiters: list[tuple[int, trio.Event]] = []

        async def drain() -> None:
            nonlocal received
            while True:
                received += len(await p.ws.get_message())
                for n, event in waiters:
                    if received >= n:
                        event.set()

        async def until(n: int) -> None:
            event = trio.Event()
            waiters.append((n, event))
            await event.wait()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(drain)
            with trio.fail_after(TIMEOUT):
                await until(5_000_000)  # the flood is on
            for i in range(20):
                with trio.fail_after(TIMEOUT):  # liveness, not speed
                    await p.ws.ping(b"ping-%d" % i)
            with trio.fail_after(TIMEOUT):
                await until(received + 1_000_000)  # and it still flows
            nursery.cancel_scope.cancel()


async def test_an_offered_subprotocol_is_accepted() -> None:
    """AHP names none, but clients may offer some and fail without one back."""
    async with server() as port:
        url = f"ws://127.0.0.1:{port}/?tkn={TOKEN}"
        async with open_websocket_url(url, subprotocols=["ahp.v1", "other"]) as ws:
            assert ws.subprotocol == "ahp.v1"
            await ws.send_message(rpc("ping", {"channel": ROOT}, msg_id=3).decode())
            assert orjson.loads(await ws.get_message())["id"] == 3
        async with open_websocket_url(url) as ws:
            assert ws.subprotocol is None


# -- message assembly, property-based (in memory: no sockets needed) ------------------------------


@st.composite
def _messages_and_chunks(draw: st.DrawFn) -> tuple[list[str | bytes], list[bytes]]:
    """Messages, each cut into 1-4 frames (with pings between some), and the whole
    byte stream cut into chunks at random places."""
    messages: list[str | bytes] = draw(
        st.lists(st.text(max_size=300) | st.binary(max_size=300), min_size=1, max_size=6)
    )
    wire = b""
    for message in messages:
        data = message.encode() if isinstance(message, str) else message
        cuts = sorted(draw(st.lists(st.integers(0, len(data)), max_size=3)))
        pieces = [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)]
        for i, piece in enumerate(pieces):
            opcode = (1 if isinstance(message, str) else 2) if i == 0 else 0
            wire += frame(piece, opcode, fin=i == len(pieces) - 1)
            if draw(st.booleans()) and i < len(pieces) - 1:
                wire += frame(b"p", 9)  # a ping between fragments
    splits = sorted(set(draw(st.lists(st.integers(1, max(1, len(wire) - 1)), max_size=8))))
    chunks = [wire[a:b] for a, b in zip([0, *splits], [*splits, len(wire)], strict=True)]
    return messages, [c for c in chunks if c]


@settings(max_examples=150, deadline=None)
@given(_messages_and_chunks())
def test_messages_come_out_whole_however_frames_and_reads_are_cut(
    case: tuple[list[str | bytes], list[bytes]],
) -> None:
    """Text split inside a UTF-8 sequence, pings between fragments, reads cut
    anywhere: ``receive`` returns exactly the messages sent, in order."""
    messages, chunks = case

    async def main() -> None:
        ours, theirs = trio.testing.memory_stream_pair()
        ws = WSConnection(ConnectionType.SERVER)
        ws.initiate_upgrade_connection(HANDSHAKE_HEADERS, "/")
        list(ws.events())
        ws.send(AcceptConnection())  # (the answer itself is not needed here)
        conn = ServerWebSocket(ours, ws, max_message_size=LIMIT)
        got: list[str | bytes] = []
        async with trio.open_nursery() as nursery:

            async def feed() -> None:
                for chunk in chunks:
                    await theirs.send_all(chunk)
                    await trio.lowlevel.checkpoint()

            async def drain() -> None:  # the pongs
                while await theirs.receive_some():
                    pass

            nursery.start_soon(feed)
            nursery.start_soon(drain)
            with trio.fail_after(TIMEOUT):
                for _ in messages:
                    got.append(await conn.receive())
            nursery.cancel_scope.cancel()
        assert got == messages

    trio.run(main)


async def test_writes_past_the_write_chunk_keep_every_frame_whole_and_in_order() -> None:
    """Small frames are gathered into writes of ~WRITE_CHUNK; a payload larger than
    it goes out uncopied after its header; the peer sees the same frames in order."""
    ours, theirs = trio.testing.memory_stream_pair()
    ws = WSConnection(ConnectionType.SERVER)
    ws.initiate_upgrade_connection(HANDSHAKE_HEADERS, "/")
    list(ws.events())
    ws.send(AcceptConnection())
    conn = ServerWebSocket(ours, ws, max_message_size=LIMIT)
    small = [b"%05d" % i * 200 for i in range(3 * WRITE_CHUNK // 1000)]  # 3 chunks' worth
    payloads = [*small[:10], b"B" * (2 * WRITE_CHUNK), *small[10:]]
    frames = Frames(theirs)  # type: ignore[arg-type]  # any trio stream will do
    async with trio.open_nursery() as nursery:
        nursery.start_soon(conn.send_texts, iter(payloads))
        got = [await frames.next() for _ in payloads]
    assert got == [(1, p) for p in payloads]


# -- the parser for simple client frames (the keystroke path) -------------------------------------


@st.composite
def _simple_frames_and_chunks(draw: st.DrawFn) -> tuple[list[str], list[bytes]]:
    """Single-frame text messages around the header's length boundaries (125/126,
    65535/65536 and the parser's own limit, FAST_FRAME_MAX), the stream cut anywhere."""
    lengths = st.sampled_from([0, 1, 124, 125, 126, 127, 200, 65535, 65536, 65537, 70000])
    texts = st.builds(lambda n, c: c * n, lengths, st.sampled_from(["x", "é", "🎉", "\n"]))
    messages: list[str] = draw(st.lists(texts | st.text(max_size=50), min_size=1, max_size=5))
    wire = b"".join(frame(m.encode()) for m in messages)
    splits = sorted(set(draw(st.lists(st.integers(1, max(1, len(wire) - 1)), max_size=8))))
    chunks = [wire[a:b] for a, b in zip([0, *splits], [*splits, len(wire)], strict=True)]
    return messages, [c for c in chunks if c]


@settings(max_examples=60, deadline=None)
@given(_simple_frames_and_chunks())
def test_simple_frames_come_out_whole_at_every_length(case: tuple[list[str], list[bytes]]) -> None:
    """Final masked text frames are parsed without wsproto up to FAST_FRAME_MAX bytes
    (multi-byte characters by the thousand included), by wsproto beyond: the same
    messages come out, in order, however the stream is cut."""
    messages, chunks = case

    async def main() -> None:
        ours, theirs = trio.testing.memory_stream_pair()
        ws = WSConnection(ConnectionType.SERVER)
        ws.initiate_upgrade_connection(HANDSHAKE_HEADERS, "/")
        list(ws.events())
        ws.send(AcceptConnection())
        conn = ServerWebSocket(ours, ws, max_message_size=1024 * 1024)
        got: list[str | bytes] = []
        async with trio.open_nursery() as nursery:

            async def feed() -> None:
                for chunk in chunks:
                    await theirs.send_all(chunk)
                    await trio.lowlevel.checkpoint()

            nursery.start_soon(feed)
            with trio.fail_after(TIMEOUT):
                for _ in messages:
                    got.append(await conn.receive())
            nursery.cancel_scope.cancel()
        assert got == messages

    trio.run(main)


async def test_a_frame_sent_with_the_upgrade_request_is_answered() -> None:
    """A client that sends a frame before the answer (RFC 6455 says it must wait;
    wsproto's server dropped it): the frame is kept and answered, before the next one."""
    async with server() as port:
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        async with stream:
            request = (
                f"GET /?tkn={TOKEN} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\n"
                "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                "Sec-WebSocket-Version: 13\r\n\r\n"
            ).encode()
            first = frame(rpc("ping", {"channel": ROOT}, msg_id=1))
            await stream.send_all(request + first)
            frames = Frames(stream)
            with trio.fail_after(TIMEOUT):
                while b"\r\n\r\n" not in frames.buf:
                    frames.buf += await stream.receive_some(4096)
            frames.buf = frames.buf.split(b"\r\n\r\n", 1)[1]
            await stream.send_all(frame(rpc("ping", {"channel": ROOT}, msg_id=2)))
            ids = [orjson.loads((await _message(frames))[1])["id"] for _ in range(2)]
            assert ids == [1, 2]


async def test_a_flood_of_small_frames_does_not_starve_other_tasks() -> None:
    """Frames that are all there at once are handled with a checkpoint each (one read
    of many frames costs no fewer): another task keeps running meanwhile, and every
    request is answered."""
    count = 2000
    async with server() as port, raw_ws(port) as stream:
        frames = Frames(stream)
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                await trio.lowlevel.checkpoint()
                ticks += 1

        flood = b"".join(frame(rpc("ping", {"channel": ROOT}, msg_id=i)) for i in range(count))
        async with trio.open_nursery() as nursery:
            nursery.start_soon(ticker)
            await stream.send_all(flood)
            ids = [orjson.loads((await _message(frames))[1])["id"] for _ in range(count)]
            nursery.cancel_scope.cancel()
        assert ids == list(range(count))
        assert ticks >= count // 2, f"the other task ran {ticks} times for {count} frames"
