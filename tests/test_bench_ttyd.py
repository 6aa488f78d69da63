"""ttyd as a peer of the bench: its dialect's framing, the C client's, and a real ttyd.

The framing tests are pure (no ttyd): what the client sends (the JSON hello,
``'0'`` + UTF-8 input) and how it reads ttyd's output, cut at any byte
(also inside a UTF-8 sequence) with title and preference messages between.
The C client's ttyd dialect runs against a scripted server that checks the
``tty`` subprotocol and the hello, then sends fragments, pings and split
sequences. The last test runs both clients against the real ttyd on PATH (or
``$AHP_BENCH_TTYD``) and is skipped, with the reason, where there is none.
"""

from __future__ import annotations

import itertools
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import orjson
import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st
from wsproto import ConnectionType, WSConnection
from wsproto.connection import ConnectionState
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Message,
    Ping,
    Pong,
    Request,
)

from ahp.bench.cclient import build_client, c_echo, c_stream, client_missing
from ahp.bench.endtoend import alone_run, c_echo_run, c_stream_run, echo_run, many_run
from ahp.bench.suite import NOT_REQUESTED, Config, _peers_missing
from ahp.bench.targets import evaluate
from ahp.bench.ttyd import TTYD_ENV, open_ttyd, ttyd_missing
from ahp.bench.workload import generate
from ahp.bench.wsclient import TtydDialect, ttyd_init, ttyd_input
from tests.helpers import TIMEOUT

TEXT = "héllo wörld 🎉 日本語 x\r\n"
TTYD_TARGETS = (
    "e2e_vs_ttyd_c",
    "e2e_vs_ttyd",
    "many_vs_ttyd",
    "server_cpu_vs_ttyd_c",
    "echo_vs_ttyd_c",
    "echo_idle_vs_ttyd_c",
)


def _split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    return [data[a:b] for a, b in itertools.pairwise(points)]


def _server_reads_input(message: bytes) -> str:
    """What ttyd does with a client message (its ``callback_tty``): '0' + bytes to type."""
    assert message[:1] == b"0", message
    return message[1:].decode()


# -- the dialect's framing (pure) --------------------------------------------------------------


def test_hello_is_the_json_ttyd_reads() -> None:
    assert orjson.loads(ttyd_init(120, 40)) == {"AuthToken": "", "columns": 120, "rows": 40}
    assert ttyd_init()[:1] == b"{"  # ttyd's JSON_DATA command is the brace itself


@given(st.text(max_size=200))
def test_input_is_tagged_utf8(text: str) -> None:
    message = TtydDialect().input_frame(text)
    assert message == ttyd_input(text)
    assert _server_reads_input(message) == text


@settings(max_examples=200, deadline=None)
@given(
    st.text(min_size=1, max_size=300),
    st.lists(st.integers(min_value=0, max_value=2000), max_size=30),
    st.lists(st.sampled_from([b"1bash (host)", b'2{"fontSize":15}']), max_size=3),
)
def test_output_split_anywhere_decodes_whole(
    text: str, cuts: list[int], others: list[bytes]
) -> None:
    """Output cut at any byte, with title/preference messages first, reads back whole,
    and the end is the frame that brings the expected count."""
    dialect = TtydDialect(expect_chars=len(text))
    seen: list[str] = []
    for other in others:
        assert dialect.parse(other) == (None, False)
    chunks = _split(text.encode(), cuts)
    for i, chunk in enumerate(chunks):
        out, end = dialect.parse(b"0" + chunk)
        assert out is not None
        seen.append(out)
        assert end == (i == len(chunks) - 1)  # the last character completes at the last byte
    assert "".join(seen) == text
    assert dialect.chars == len(text)


def test_without_an_expected_count_output_never_ends() -> None:
    dialect = TtydDialect()
    assert dialect.parse(b"0" + TEXT.encode()) == (TEXT, False)
    assert dialect.parse(b"") == (None, False)


def test_bad_utf8_is_replaced_not_raised() -> None:
    text, end = TtydDialect(expect_chars=3).parse(b"0a\xff\xfeb")
    assert text == "a\ufffd\ufffdb"
    assert end


# -- missing ttyd: one line, and its targets not measured -------------------------------------


def test_missing_ttyd_is_one_line_and_never_met(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(TTYD_ENV, "/nonexistent/ttyd")
    why = ttyd_missing()
    assert why is not None and "\n" not in why and TTYD_ENV in why
    assert _peers_missing(Config(peers=True))["ttyd"] == why
    assert _peers_missing(Config(peers=False))["ttyd"] == NOT_REQUESTED
    targets = {t.key: t for t in evaluate({"peers": {"ttyd": {"skipped": why}}})}
    for key in TTYD_TARGETS:
        assert targets[key].value is None, key
        assert targets[key].met is None, key
    assert targets["e2e_vs_ttyd"].why_missing == why
    assert targets["many_vs_ttyd"].why_missing is None  # no many section at all here


def test_a_binary_that_is_not_ttyd_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(TTYD_ENV, "/bin/true")  # runs, but answers no "ttyd version"
    why = ttyd_missing()
    assert why is not None and why.startswith("/bin/true --version failed")


def test_ttyd_targets_are_computed_from_its_figures() -> None:
    def fig(value: float) -> dict[str, float]:
        return {"median": value}

    results: dict[str, Any] = {
        "end_to_end": {
            "alone": {"throughput": fig(60.0)},
            "c_client": {"throughput": fig(50.0), "server_cpu_s_per_100mb": fig(0.8)},
        },
        "echo": {"sidecar_c": {"median_ms": fig(0.3)}, "sidecar_c_idle": {"median_ms": fig(1.0)}},
        "many": {"ours": {"aggregate_throughput": fig(90.0)}, "ttyd": {}},
        "peers": {
            "ttyd": {
                "alone": {"throughput": fig(40.0)},
                "c_client": {"throughput": fig(40.0), "server_cpu_s_per_100mb": fig(1.0)},
                "echo_c": {"median_ms": fig(0.1)},
                "echo_c_idle": {"median_ms": fig(0.4)},
            }
        },
    }
    results["many"]["ttyd"] = {"aggregate_throughput": fig(50.0)}
    targets = {t.key: t for t in evaluate(results)}
    assert targets["e2e_vs_ttyd_c"].value == pytest.approx(1.25) and targets["e2e_vs_ttyd_c"].met
    assert targets["e2e_vs_ttyd"].value == pytest.approx(1.5)
    assert targets["many_vs_ttyd"].value == pytest.approx(1.8) and targets["many_vs_ttyd"].met
    assert targets["server_cpu_vs_ttyd_c"].value == pytest.approx(0.8)
    assert targets["echo_vs_ttyd_c"].value == pytest.approx(3.0)
    assert targets["echo_vs_ttyd_c"].met is False
    assert targets["echo_idle_vs_ttyd_c"].value == pytest.approx(2.5)


# -- the C client's ttyd dialect against a scripted server --------------------------------------

needs_cc = pytest.mark.skipif(client_missing() is not None, reason=str(client_missing()))


class TtydLike:
    """One accepted connection of the scripted ttyd, seen from the server side."""

    def __init__(self, stream: trio.SocketStream, ws: WSConnection, asked: list[str]) -> None:
        self.stream = stream
        self.ws = ws
        self.asked = asked
        self.pongs: list[bytes] = []
        self.closed = False

    async def send(self, *events: Message[bytes | bytearray] | Ping | CloseConnection) -> None:
        await self.stream.send_all(b"".join(self.ws.send(e) for e in events))

    async def receive(self) -> bytes | None:
        """The next binary message (pongs recorded; None once the client closes)."""
        parts: list[bytes] = []
        while True:
            for event in self.ws.events():
                if isinstance(event, Pong):
                    self.pongs.append(bytes(event.payload))
                elif isinstance(event, BytesMessage):
                    parts.append(bytes(event.data))
                    if event.message_finished:
                        return b"".join(parts)
                elif isinstance(event, CloseConnection):
                    self.closed = True
                    if self.ws.state is ConnectionState.REMOTE_CLOSING:
                        await self.stream.send_all(self.ws.send(event.response()))
                    return None
                else:
                    raise TypeError(f"ttyd's client sends binary messages, not {event!r}")
            data = await self.stream.receive_some(65536)
            if not data:
                return None
            self.ws.receive_data(data)


@asynccontextmanager
async def ttyd_like(script: Callable[[TtydLike], Awaitable[None]]) -> AsyncIterator[str]:
    async def handler(stream: trio.SocketStream) -> None:
        ws = WSConnection(ConnectionType.SERVER)
        request: Request | None = None
        while request is None:
            data = await stream.receive_some(65536)
            if not data:
                return
            ws.receive_data(data)
            request = next((e for e in ws.events() if isinstance(e, Request)), None)
        await stream.send_all(ws.send(AcceptConnection(subprotocol="tty")))
        conn = TtydLike(stream, ws, list(request.subprotocols))
        await script(conn)
        with trio.move_on_after(TIMEOUT):
            while await conn.receive() is not None:
                pass
        await stream.aclose()

    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(partial(trio.serve_tcp, handler, 0, host="127.0.0.1"))
        port = listeners[0].socket.getsockname()[1]
        yield f"ws://127.0.0.1:{port}/ws"
        nursery.cancel_scope.cancel()


async def _hello(conn: TtydLike) -> dict[str, object]:
    hello = await conn.receive()
    assert hello is not None
    await conn.send(Message(data=b"1cat (host)"), Message(data=b'2{"fontSize":15}'))
    parsed: dict[str, object] = orjson.loads(hello)
    return parsed


@needs_cc
async def test_c_client_streams_split_utf8_fragments_and_pings() -> None:
    seen: list[object] = []
    data = (TEXT * 3).encode()
    cut = data.index("🎉".encode()) + 2  # inside the emoji

    async def script(conn: TtydLike) -> None:
        seen.append(conn.asked)
        seen.append(await _hello(conn))
        seen.append(await conn.receive())  # the release
        await conn.send(
            Message(data=b"0" + data[:5], message_finished=False),
            Ping(payload=b"p1"),
            Message(data=data[5:cut], message_finished=True),
            Message(data=b"0" + data[cut:]),
        )

    async with ttyd_like(script) as url:
        with trio.fail_after(TIMEOUT):
            run = await c_stream(build_client(), url, "ttyd", None, expect_chars=3 * len(TEXT))
    assert seen[0] == ["tty"]
    assert seen[1] == {"AuthToken": "", "columns": 80, "rows": 24}
    assert seen[2] == b"0\r"
    assert run.ended and run.close_code == 0
    assert run.chars == 3 * len(TEXT)
    assert run.text_bytes == len(data)
    assert run.frames == 2  # two output messages (the preferences came before the release)


@needs_cc
async def test_c_client_reports_a_close_before_the_count() -> None:
    async def script(conn: TtydLike) -> None:
        await _hello(conn)
        await conn.receive()
        await conn.send(Message(data=b"0partial"), CloseConnection(code=1000))

    async with ttyd_like(script) as url:
        with trio.fail_after(TIMEOUT):
            run = await c_stream(build_client(), url, "ttyd", None, expect_chars=100)
    assert not run.ended
    assert run.close_code == 1000
    assert run.chars == len("partial")


@needs_cc
async def test_c_client_echo_types_tagged_input() -> None:
    typed: list[bytes] = []

    async def script(conn: TtydLike) -> None:
        await _hello(conn)
        while (message := await conn.receive()) is not None:
            typed.append(message)
            await conn.send(Message(data=b"0no"), Message(data=b"0" + message[1:]))
            if len(typed) == 4:
                return

    async with ttyd_like(script) as url:
        with trio.fail_after(TIMEOUT):
            samples = await c_echo(build_client(), url, "ttyd", None, 3, warmup=1)
    assert len(samples) == 3
    assert typed == [b"0x"] * 4


# -- the real ttyd --------------------------------------------------------------------------


@pytest.mark.skipif(ttyd_missing() is not None, reason=f"no ttyd here: {ttyd_missing()}")
async def test_real_ttyd_through_both_clients() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        workload = generate(Path(tmp), 0.3)
        async with open_ttyd(workload) as server:
            with trio.fail_after(TIMEOUT * 3):
                alone = await alone_run(server)
                echo = await echo_run(server, 5)
                idle = await echo_run(server, 2, pause=0.02)
                many = await many_run(server, workload, 3, None)
                c_runs = None
                if client_missing() is None:
                    binary = build_client()
                    c_runs = (
                        await c_stream_run(server, binary),
                        await c_echo_run(server, binary, 5, warmup=1),
                        await many_run(server, workload, 2, binary),
                    )
    assert alone.run.closed is None
    assert alone.run.chars == workload.gated_chars()
    assert alone.rss_peak_kb > 0
    assert len(echo) == 5 and len(idle) == 2
    assert many.incomplete == 0 and len(many.per_terminal_mb_s) == 3
    if c_runs is not None:
        stream, c_echo_samples, c_many = c_runs
        assert stream.run.ended
        assert stream.run.chars == workload.gated_chars()
        assert stream.run.text_bytes == workload.gated_bytes()
        assert len(c_echo_samples) == 5
        assert c_many.incomplete == 0
