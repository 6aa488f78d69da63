"""The benchmark's independent C client (``ahp/bench/wsclient.c``) against real servers.

A scripted WebSocket server (wsproto over a real TCP socket on port 0) sends
what a well-behaved but awkward server may: a message split into fragments
with pings between them, multi-byte UTF-8 and JSON escapes (also a surrogate
pair), a close in the middle of the output, a refused upgrade. The client must
answer the pings, count characters and bytes exactly, and report how the
connection ended. The AHP dialect runs against the real sidecar (the bench's
worker) with a tiny workload. Skipped, with the reason, without a C compiler.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path

import orjson
import pytest
import trio
from wsproto import ConnectionType, WSConnection
from wsproto.events import (
    AcceptConnection,
    CloseConnection,
    Message,
    Ping,
    Pong,
    RejectConnection,
    Request,
    TextMessage,
)

from ahp.bench.cclient import CClientError, build_client, c_echo, c_stream, client_missing
from ahp.bench.endtoend import AhpServer, c_echo_run, c_stream_run
from ahp.bench.processes import open_worker
from ahp.bench.workload import generate
from tests.helpers import TIMEOUT
from tests.wire import masked_text_frame

pytestmark = pytest.mark.skipif(client_missing() is not None, reason=str(client_missing()))

#: Output with multi-byte UTF-8, a non-BMP character and characters JSON escapes.
TEXT = 'héllo wörld 🎉 "quoted" back\\slash\ttab\r\n'


class Scripted:
    """One accepted connection of the scripted server, seen from the server side."""

    def __init__(self, stream: trio.SocketStream, ws: WSConnection) -> None:
        self.stream = stream
        self.ws = ws
        self.pongs: list[bytes] = []
        self.closed_with: int | None = None

    async def send(self, *events: Message[str] | Ping | CloseConnection) -> None:
        await self.stream.send_all(b"".join(self.ws.send(e) for e in events))

    async def receive_text(self) -> str | None:
        """The next text message (pongs are recorded; None once the client closes)."""
        parts: list[str] = []
        while True:
            for event in self.ws.events():
                if isinstance(event, Pong):
                    self.pongs.append(bytes(event.payload))
                elif isinstance(event, TextMessage):
                    parts.append(event.data)
                    if event.message_finished:
                        return "".join(parts)
                elif isinstance(event, CloseConnection):
                    self.closed_with = event.code
                    return None
            data = await self.stream.receive_some(65536)
            if not data:
                return None
            self.ws.receive_data(data)


Script = Callable[[Scripted], Awaitable[None]]


@asynccontextmanager
async def scripted_server(script: Script, *, refuse: bool = False) -> AsyncIterator[str]:
    """A WebSocket server on 127.0.0.1:0 that runs ``script`` for each connection."""
    done: list[Scripted] = []

    async def handler(stream: trio.SocketStream) -> None:
        ws = WSConnection(ConnectionType.SERVER)
        while True:
            data = await stream.receive_some(65536)
            if not data:
                return
            ws.receive_data(data)
            if any(isinstance(e, Request) for e in ws.events()):
                break
        if refuse:
            await stream.send_all(ws.send(RejectConnection(status_code=403)))
            await stream.aclose()
            return
        await stream.send_all(ws.send(AcceptConnection()))
        conn = Scripted(stream, ws)
        await script(conn)
        done.append(conn)
        # Wait for the client's close (its answer to ours, or its own) before closing.
        with trio.move_on_after(TIMEOUT):
            while conn.closed_with is None and await conn.receive_text() is not None:
                pass
        await stream.aclose()

    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(partial(trio.serve_tcp, handler, 0, host="127.0.0.1"))
        port = listeners[0].socket.getsockname()[1]
        yield f"ws://127.0.0.1:{port}/term/t1"
        nursery.cancel_scope.cancel()


def _stdout(text: str) -> str:
    return json.dumps(["stdout", text])  # (ASCII-escaped, as terminado sends it)


@pytest.fixture(scope="module")
def binary() -> Path:
    return build_client()


async def test_stream_fragments_pings_and_escapes(binary: Path) -> None:
    seen: list[str | None] = []

    async def script(conn: Scripted) -> None:
        await conn.send(Message(data='["setup", {}]'))
        seen.append(await conn.receive_text())  # the release
        whole = _stdout(TEXT)
        a, b, c = whole[:5], whole[5:20], whole[20:]
        await conn.send(
            Ping(payload=b"p1"),
            Message(data=a, message_finished=False),
            Ping(payload=b"p2"),
            Message(data=b, message_finished=False),
            Message(data=c, message_finished=True),
            Message(data=orjson.dumps(["stdout", TEXT]).decode()),  # raw UTF-8 this time
            Message(data='["disconnect", 1]'),
        )
        with trio.fail_after(TIMEOUT):
            while len(conn.pongs) < 2:
                await conn.receive_text()
        seen.extend(p.decode() for p in conn.pongs)

    async with scripted_server(script) as url:
        with trio.fail_after(TIMEOUT):
            run = await c_stream(binary, url, "terminado", None)
    assert seen[0] is not None
    assert orjson.loads(seen[0]) == ["stdin", "\r"]
    assert seen[1:] == ["p1", "p2"]
    assert run.ended
    assert run.close_code == 0
    assert run.chars == 2 * len(TEXT)
    assert run.text_bytes == 2 * len(TEXT.encode())
    assert run.frames == 3  # two outputs and the disconnect (pings are not messages)


async def test_stream_reports_a_close_before_the_end(binary: Path) -> None:
    async def script(conn: Scripted) -> None:
        await conn.send(Message(data='["setup", {}]'))
        await conn.receive_text()
        await conn.send(Message(data=_stdout("partial")), CloseConnection(code=1011))

    async with scripted_server(script) as url:
        with trio.fail_after(TIMEOUT):
            run = await c_stream(binary, url, "terminado", None)
    assert not run.ended
    assert run.close_code == 1011
    assert run.chars == len("partial")


async def test_echo_waits_for_the_echo_and_types_the_release(binary: Path) -> None:
    typed: list[str] = []

    async def script(conn: Scripted) -> None:
        await conn.send(Message(data='["setup", {}]'))
        while (message := await conn.receive_text()) is not None:
            typed.append(message)
            if len(typed) == 6:  # 1 warm-up + 5 measured
                break
            # Unrelated output first: the client must keep waiting for the "x".
            await conn.send(Message(data=_stdout("no")), Message(data=_stdout("x")))
        await conn.send(Message(data=_stdout("x")))

    async with scripted_server(script) as url:
        with trio.fail_after(TIMEOUT):
            samples = await c_echo(binary, url, "terminado", None, 5, warmup=1)
    assert len(samples) == 5
    assert all(0 < s < TIMEOUT for s in samples)
    assert [orjson.loads(t) for t in typed] == [["stdin", "x"]] * 6


async def test_refused_upgrade_is_an_error(binary: Path) -> None:
    async def script(conn: Scripted) -> None:
        raise AssertionError("never accepted")

    async with scripted_server(script, refuse=True) as url:
        with pytest.raises(CClientError, match=r"upgrade refused: HTTP/1\.1 403"):
            await c_stream(binary, url, "terminado", None)


async def test_ahp_dialect_against_the_sidecar(binary: Path) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        workload = generate(Path(tmp), 0.2)
        async with open_worker() as worker:
            server = AhpServer(worker, workload)
            with trio.fail_after(TIMEOUT * 2):
                measured = await c_stream_run(server, binary)
                samples = await c_echo_run(server, binary, 10, warmup=2)
                idle = await c_echo_run(server, binary, 2, warmup=1, pause=0.05)
    run = measured.run
    assert run.ended
    assert run.chars == workload.gated_chars()
    assert run.text_bytes == workload.gated_bytes()
    assert measured.server_cpu_seconds >= 0  # (clock ticks: a tiny run may show none)
    assert len(samples) == 10
    assert len(idle) == 2


@pytest.mark.parametrize("shape", ["2", "card", "ahp", "state"])
async def test_the_floor_servers_echo_and_stream_through_the_c_client(
    binary: Path, shape: str, tmp_path: Path
) -> None:
    """``ahp.bench.floors``' bare Trio servers (terminado's dialect, or AHP's for
    ``floor-ahp`` and ``floor-state``; a real pty), run as the bench runs them, answer
    the C client's keystrokes (``cat``), stream a gate's output to its end (multi-byte
    text split across reads decoded whole; AHP's ends with ``terminal/exited``), and
    stop cleanly on SIGTERM."""
    from ahp.bench.floors import open_floor

    lines = 2000
    (tmp_path / "out.txt").write_text("héllo wörld 🎉\n" * lines)
    (tmp_path / "w").mkdir()
    workload = generate(tmp_path / "w", 0.01)
    gate = ["sh", "-c", "read _ ; exec cat out.txt"]
    with trio.fail_after(TIMEOUT):
        async with open_floor(shape, workload, gate=gate, cwd=tmp_path) as server:
            assert not server.shares_terminals
            dialect = server.dialect_name
            url, _, handle = await server.terminal("echo")
            samples = await c_echo(binary, url, dialect, server.channel(handle), 5, warmup=1)
            url, _, handle = await server.terminal("gate")
            run = await c_stream(binary, url, dialect, server.channel(handle))
            process = server.server.process
    assert process.returncode == 0
    assert len(samples) == 5
    assert all(0 < s < TIMEOUT for s in samples)
    assert run.ended
    # The gate's "\r" echoed as "\r\n", then every line with the pty's "\r\n".
    assert run.chars == 2 + lines * len("héllo wörld 🎉\r\n")


@pytest.mark.parametrize("shape", ["2", "card"])
async def test_a_floor_server_ignores_odd_messages_and_outlives_a_bad_client(
    binary: Path, shape: str, tmp_path: Path
) -> None:
    """A message that is not ``["stdin", text]`` is ignored; a frame that is not JSON
    ends that connection only: the server answers the next client as before."""
    from ahp.bench.floors import open_floor

    (tmp_path / "w").mkdir()
    workload = generate(tmp_path / "w", 0.01)
    upgrade = (
        b"GET /echo/x HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
        b"Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
        b"Sec-WebSocket-Version: 13\r\n\r\n"
    )
    with trio.fail_after(TIMEOUT):
        async with open_floor(shape, workload) as server:
            stream = await trio.open_tcp_stream("127.0.0.1", server.port)
            async with stream:
                await stream.send_all(upgrade)
                received = b""
                while b'["setup", {}]' not in received:
                    received += await stream.receive_some(4096)
                odd = [b'{"stdin": "x"}', b'["stdin", 5]', b'["set_size", 24, 80]', b"[]"]
                await stream.send_all(b"".join(masked_text_frame(m) for m in odd))
                await stream.send_all(masked_text_frame(b'["stdin", "ok\\r"]'))
                while b"ok" not in received:
                    received += await stream.receive_some(4096)
                await stream.send_all(masked_text_frame(b"not json"))
                while await stream.receive_some(4096):
                    pass  # (the server ends this connection)
            url, _, _ = await server.terminal("echo")
            samples = await c_echo(binary, url, "terminado", None, 3, warmup=1)
    assert len(samples) == 3


@pytest.mark.parametrize("shape", ["ahp", "state"])
async def test_the_ahp_floors_sequence_their_envelopes_and_echo_with_the_output(
    tmp_path: Path, shape: str
) -> None:
    """``floor-ahp`` and ``floor-state`` answer ``initialize``, ignore other methods and
    other channels' input, and send an input's echo (with the sender's ``origin``) in the
    same write as the output it caused, each envelope with the next ``serverSeq``."""
    from ahp.bench.floors import open_floor
    from ahp.bench.rawws import open_raw_websocket
    from ahp.bench.wsclient import AhpDialect

    (tmp_path / "w").mkdir()
    workload = generate(tmp_path / "w", 0.01)
    with trio.fail_after(TIMEOUT):
        async with open_floor(shape, workload) as server:
            url, make_dialect, handle = await server.terminal("echo")
            dialect = make_dialect()
            assert isinstance(dialect, AhpDialect)
            async with open_raw_websocket(url) as ws:
                await dialect.handshake(ws)
                other = orjson.loads(dialect.input_frame("no"))
                other["params"]["channel"] = "ahp-terminal:/other"
                await ws.send_message(orjson.dumps(other).decode())
                await ws.send_message('{"jsonrpc": "2.0", "method": "ping", "params": {}}')
                await ws.send_message(dialect.input_frame("ok\r"))
                envelopes = [orjson.loads(await ws.get_message())["params"]]
                text = ""
                while "ok" not in text:  # (the pty may hand the echo over in pieces)
                    envelopes.append(orjson.loads(await ws.get_message())["params"])
                    text += envelopes[-1]["action"]["data"]
    echo, *data = envelopes
    assert {e["channel"] for e in envelopes} == {handle}
    assert echo["action"] == {"type": "terminal/input", "data": "ok\r"}
    assert echo["origin"] == {"clientId": dialect.client_id, "clientSeq": 2}
    assert {d["action"]["type"] for d in data} == {"terminal/data"}
    assert "origin" not in data[0]
    assert [e["serverSeq"] for e in envelopes] == list(range(1, len(envelopes) + 1))


@pytest.mark.parametrize("shape", ["ahp", "state"])
async def test_the_ahp_floors_ignore_odd_messages_and_outlive_bad_clients(
    binary: Path, tmp_path: Path, shape: str
) -> None:
    """Messages that are not a well-formed ``dispatchAction`` input are ignored; a client
    whose first message is not ``initialize``, one that sends what is not JSON and one
    that closes before saying anything end their own connections only."""
    from ahp.bench.floors import open_floor
    from ahp.bench.rawws import open_raw_websocket

    (tmp_path / "w").mkdir()
    workload = generate(tmp_path / "w", 0.01)
    odd = [
        "[]",
        '"text"',
        '{"jsonrpc": "2.0", "method": "dispatchAction"}',
        '{"jsonrpc": "2.0", "method": "dispatchAction", "params": []}',
        '{"jsonrpc": "2.0", "method": "dispatchAction", "params": {"action": 5}}',
    ]
    with trio.fail_after(TIMEOUT):
        async with open_floor(shape, workload) as server:
            for first in ("[1, 2]", "not json", None):
                url, _, _ = await server.terminal("echo")
                async with open_raw_websocket(url) as ws:
                    if first is not None:
                        await ws.send_message(first)
            url, make_dialect, _ = await server.terminal("echo")
            dialect = make_dialect()
            async with open_raw_websocket(url) as ws:
                await dialect.handshake(ws)
                for message in odd:
                    await ws.send_message(message)
                bad = orjson.loads(dialect.input_frame("x"))
                bad["params"]["action"]["data"] = 7
                await ws.send_message(orjson.dumps(bad).decode())
                await ws.send_message(dialect.input_frame("ok\r"))
                envelope = orjson.loads(await ws.get_message())["params"]
            assert envelope["action"] == {"type": "terminal/input", "data": "ok\r"}
            url, _, handle = await server.terminal("echo")
            samples = await c_echo(binary, url, "ahp", server.channel(handle), 3, warmup=1)
    assert len(samples) == 3


async def test_the_state_floor_does_the_contracts_work(tmp_path: Path) -> None:
    """``floor-state`` parses the output as the engine does (a title set by the program
    is an envelope of its own; the sequence stays in the text, for the clients' own
    terminals)."""
    from ahp.bench.floors import open_floor
    from ahp.bench.rawws import open_raw_websocket
    from ahp.bench.wsclient import AhpDialect

    (tmp_path / "w").mkdir()
    workload = generate(tmp_path / "w", 0.01)
    with trio.fail_after(TIMEOUT):
        async with open_floor("state", workload) as server:
            url, make_dialect, _ = await server.terminal("echo")
            dialect = make_dialect()
            assert isinstance(dialect, AhpDialect)
            async with open_raw_websocket(url) as ws:
                await dialect.handshake(ws)
                # cat writes the line back as it came: the OSC reaches the parser raw.
                await ws.send_message(dialect.input_frame("\x1b]0;hi\x07done\r"))
                envelopes = []
                text = ""
                while text.count("done") < 2:  # (the echo's, then cat's)
                    envelopes.append(orjson.loads(await ws.get_message())["params"])
                    action = envelopes[-1]["action"]
                    text += action.get("data", "") if action["type"] == "terminal/data" else ""
    titles = [e["action"] for e in envelopes if e["action"]["type"] == "terminal/titleChanged"]
    assert titles == [{"type": "terminal/titleChanged", "title": "hi"}]
    assert "\x1b]0;hi\x07done" in text


def test_the_state_floors_rule_echoes_a_rejected_input_at_once() -> None:
    """The state floor's reducer rule (pure): an accepted input goes to the pty and its
    echo waits for the output's write; once the process exited, an input is rejected and
    its echo, with the reason, is written at once, alone, and nothing goes to the pty."""
    from ahp.bench.floors import _StateRule

    channel = "ahp-terminal:/floor-x"
    rule = _StateRule(channel)
    typed, frame = rule(
        "input", ({"type": "terminal/input", "data": "ok"}, {"clientId": "c", "clientSeq": 1})
    )
    assert (typed, frame) == (b"ok", None)
    typed, frame = rule("output", None)  # the end: terminal/exited, after the echo
    assert typed is None and frame is not None
    typed, frame = rule(
        "input", ({"type": "terminal/input", "data": "no"}, {"clientId": "c", "clientSeq": 2})
    )
    assert typed is None and frame is not None
    envelope = orjson.loads(frame[frame.index(b"{") :])["params"]
    assert envelope["action"] == {"type": "terminal/input", "data": "no"}
    assert envelope["origin"] == {"clientId": "c", "clientSeq": 2}
    assert "exited" in envelope["rejectionReason"]
