"""One WebSocket client for every server under test: throughput, echo, stalling.

Why one client: a comparison between servers is only fair if the same client
code, with the same buffers and the same JSON decoder (orjson), consumes the
same workload. A small *dialect* object is all that differs between servers:
how to say hello, how to type, and how to tell output and the end of it in a
frame (AHP's ``action`` notifications; terminado's ``["stdout", text]``;
ttyd's binary frames, whose first byte says what they carry, with the end
known by count: see :class:`TtydDialect`).

The connection is :mod:`ahp.bench.rawws` (256 KiB reads, frames cut out of
one buffer, no reader task: the client spends as little CPU as it can, see
there why). The stalled client is the same connection that, after its
handshake, stops reading the socket altogether: the server sees a viewer that
went away without closing.
"""

from __future__ import annotations

import codecs
import itertools
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Final, Protocol

import attrs
import orjson
import trio

from ahp.bench.procfs import MachineCpu
from ahp.bench.rawws import Closed, RawWebSocket, open_raw_websocket

__all__ = [
    "AhpDialect",
    "Dialect",
    "StalledClient",
    "StreamRun",
    "TerminadoDialect",
    "TtydDialect",
    "echo_round_trips",
    "stalled_client",
    "stream_throughput",
]

#: Round trips before the measured ones.
ECHO_WARMUP = 20
#: Unmeasured keystrokes before an idle-then-type series (each costs its pause).
IDLE_WARMUP = 3


class Dialect(Protocol):
    """How one server's protocol says hello, takes input and carries output."""

    name: str
    #: Subprotocols asked for in the upgrade (``Sec-WebSocket-Protocol``).
    subprotocols: tuple[str, ...]

    async def handshake(self, ws: RawWebSocket) -> None:
        """After the upgrade: until the client follows the terminal."""

    def input_frame(self, text: str) -> str | bytes:
        """A message (text or binary) that types ``text`` into the terminal."""

    def parse(self, frame: bytes) -> tuple[str | None, bool]:
        """``(output text or None, whether this frame ends the output)``."""


class AhpDialect:
    """AHP: ``initialize`` subscribed to the terminal, input via ``dispatchAction``."""

    name = "ahp"
    subprotocols: tuple[str, ...] = ()

    def __init__(self, channel: str) -> None:
        self.channel = channel
        self.client_id = f"bench-{id(self):x}"
        self._seq = itertools.count(1)

    async def handshake(self, ws: RawWebSocket) -> None:
        await ws.send_message(
            orjson.dumps(
                {
                    "jsonrpc": "2.0",
                    "id": 1,
                    "method": "initialize",
                    "params": {
                        "channel": "ahp-root://",
                        "protocolVersions": ["0.5.0"],
                        "clientId": self.client_id,
                        "initialSubscriptions": [self.channel],
                    },
                }
            ).decode()
        )
        while True:
            message = orjson.loads(await ws.get_message())
            if message.get("id") == 1:
                if "error" in message:
                    raise RuntimeError(f"initialize failed: {message['error']}")
                return

    def input_frame(self, text: str) -> str:
        return orjson.dumps(
            {
                "jsonrpc": "2.0",
                "method": "dispatchAction",
                "params": {
                    "channel": self.channel,
                    "clientSeq": next(self._seq),
                    "action": {"type": "terminal/input", "data": text},
                },
            }
        ).decode()

    def parse(self, frame: bytes) -> tuple[str | None, bool]:
        message = orjson.loads(frame)
        if message.get("method") != "action":
            return None, False
        params = message["params"]
        if params.get("channel") != self.channel:
            return None, False
        action = params["action"]
        kind = action.get("type")
        if kind == "terminal/data":
            data: str = action["data"]
            return data, False
        return None, kind == "terminal/exited"


class TerminadoDialect:
    """terminado: JSON arrays; ``["setup", {}]`` first, ``["disconnect", 1]`` at the end."""

    name = "terminado"
    subprotocols: tuple[str, ...] = ()

    async def handshake(self, ws: RawWebSocket) -> None:
        while True:
            message = orjson.loads(await ws.get_message())
            if message and message[0] == "setup":
                return

    def input_frame(self, text: str) -> str:
        return orjson.dumps(["stdin", text]).decode()

    def parse(self, frame: bytes) -> tuple[str | None, bool]:
        message = orjson.loads(frame)
        kind = message[0] if message else None
        if kind == "stdout":
            data: str = message[1]
            return data, False
        return None, kind == "disconnect"


#: ttyd's message types (its ``src/server.h``): the first byte of every message.
TTYD_INPUT: Final = ord("0")
TTYD_OUTPUT: Final = ord("0")
TTYD_TITLE: Final = ord("1")
TTYD_PREFERENCES: Final = ord("2")
#: Terminal size the ttyd client announces (ttyd starts the program only then).
TTYD_COLUMNS: Final = 80
TTYD_ROWS: Final = 24


def ttyd_init(columns: int = TTYD_COLUMNS, rows: int = TTYD_ROWS) -> bytes:
    """ttyd's first client message: JSON with the (empty) token and the size."""
    return orjson.dumps({"AuthToken": "", "columns": columns, "rows": rows})


def ttyd_input(text: str) -> bytes:
    """A ttyd input message: ``'0'`` and the UTF-8 bytes to type."""
    return bytes([TTYD_INPUT]) + text.encode()


class TtydDialect:
    """ttyd: binary messages tagged by their first byte, output raw terminal bytes.

    The client says hello with :func:`ttyd_init` (ttyd starts the program on it),
    ttyd answers with its title (``'1'``) and preferences (``'2'``) before any output
    (``'0'`` + bytes). Output is cut wherever ttyd's read of the pty ended, so a
    UTF-8 sequence may straddle two messages: one incremental decoder per
    connection (bounded: it holds at most 3 bytes of an unfinished sequence).

    ttyd has no end-of-output message: when its program exits it closes the
    connection at once, dropping what it had not sent yet (on this machine the
    last 8-22 KB of a 5 MB ``cat``, and without a close frame). So the bench's
    ttyd gate keeps its program alive after the output (:mod:`ahp.bench.ttyd`),
    and the output ends once ``expect_chars`` characters arrived (None: never,
    for the echo runs).
    """

    name = "ttyd"
    subprotocols: tuple[str, ...] = ("tty",)

    def __init__(self, expect_chars: int | None = None) -> None:
        self._decode = codecs.getincrementaldecoder("utf-8")("replace").decode
        self.expect_chars = expect_chars
        #: Characters of output decoded so far.
        self.chars = 0

    async def handshake(self, ws: RawWebSocket) -> None:
        await ws.send_message(ttyd_init())
        while True:
            message = await ws.get_message()
            if message and message[0] == TTYD_PREFERENCES:
                return

    def input_frame(self, text: str) -> bytes:
        return ttyd_input(text)

    def parse(self, frame: bytes) -> tuple[str | None, bool]:
        if not frame or frame[0] != TTYD_OUTPUT:
            return None, False
        text = self._decode(frame[1:])
        self.chars += len(text)
        return text, self.expect_chars is not None and self.chars >= self.expect_chars


@attrs.frozen
class StreamRun:
    seconds: float
    chars: int
    frames: int
    #: CPU time of the client (this process) and busy cores of the whole machine.
    client_cpu_seconds: float
    machine_cores: float
    #: Close code if the server closed the connection before the end of the output.
    closed: int | None


@asynccontextmanager
async def _connect(url: str, dialect: Dialect) -> AsyncIterator[RawWebSocket]:
    async with open_raw_websocket(url, timeout=10, subprotocols=dialect.subprotocols) as ws:
        yield ws


async def stream_throughput(
    url: str,
    dialect: Dialect,
    *,
    connected: trio.Event | None = None,
    go: trio.Event | None = None,
) -> StreamRun:
    """Follow a gated terminal: release the gate, consume until the end; time it.

    ``connected`` is set after the handshake; the gate is released once ``go`` is set.
    """
    chars = frames = 0
    closed: int | None = None
    async with _connect(url, dialect) as ws:
        await dialect.handshake(ws)
        if connected is not None:
            connected.set()
        if go is not None:
            await go.wait()
        parse = dialect.parse
        machine = MachineCpu()
        cpu = time.process_time()
        start = time.perf_counter()
        await ws.send_message(dialect.input_frame("\r"))
        try:
            while True:
                text, end = parse(await ws.get_message())
                frames += 1
                if text is not None:
                    chars += len(text)
                if end:
                    break
        except Closed as exc:
            closed = exc.code
        seconds = time.perf_counter() - start
        cpu = time.process_time() - cpu
        machine.stop()
    return StreamRun(
        seconds=seconds,
        chars=chars,
        frames=frames,
        closed=closed,
        client_cpu_seconds=cpu,
        machine_cores=machine.busy_cores,
    )


async def echo_round_trips(
    url: str, dialect: Dialect, count: int, *, pause: float = 0.0
) -> list[float]:
    """Seconds per keystroke round trip: type ``x``, wait for output containing it.

    With ``pause`` the client sleeps that long before each keystroke (the
    idle-then-type case: timers, the kernel's tty work and the server's wake-up
    from an idle wait all show up in it); otherwise keystrokes go back to back.
    """
    samples: list[float] = []
    parse = dialect.parse
    async with _connect(url, dialect) as ws:
        await dialect.handshake(ws)
        warmup = IDLE_WARMUP if pause else ECHO_WARMUP
        for i in range(warmup + count):
            if pause:
                await trio.sleep(pause)
            start = time.perf_counter()
            await ws.send_message(dialect.input_frame("x"))
            while True:
                text, end = parse(await ws.get_message())
                if end:
                    raise RuntimeError("the terminal ended during the echo benchmark")
                if text and "x" in text:
                    break
            if i >= warmup:
                samples.append(time.perf_counter() - start)
    return samples


@attrs.define
class StalledClient:
    """What happened to a client that stopped reading."""

    #: Characters it could still read once it resumed, and how the connection ended.
    chars_after: int = 0
    #: Whether the end of the output (``terminal/exited``, ``disconnect``) reached it.
    saw_end: bool = False
    close_code: int | None = None
    close_reason: str | None = None
    #: True when the connection was still open after draining for ``drain_timeout``.
    still_open: bool = False


@asynccontextmanager
async def stalled_client(
    url: str, dialect: Dialect, *, drain_timeout: float = 10
) -> AsyncIterator[StalledClient]:
    """Connect and follow the terminal, then read nothing while the body runs.

    On exit it resumes reading for up to ``drain_timeout`` seconds to learn how the
    server treated it (closed with 1013, or kept everything for it).
    """
    result = StalledClient()
    async with _connect(url, dialect) as ws:
        await dialect.handshake(ws)
        yield result
        with trio.move_on_after(drain_timeout) as drain:
            try:
                while True:
                    text, end = dialect.parse(await ws.get_message())
                    if text:
                        result.chars_after += len(text)
                    if end:
                        result.saw_end = True
                        break
            except Closed as exc:
                result.close_code = exc.code
                result.close_reason = exc.reason
        result.still_open = drain.cancelled_caught and result.close_code is None
