"""The floors: bare Trio servers in terminado's shape and in the card's, as bench peers.

Why: issue 23 asks for the sidecar's echo at or below terminado's, its CPU per 100 MB
below ttyd's, and, where a goal cannot be met, a measurement of what bounds it. These
servers take the project's own work out of the question. They speak terminado's
dialect (``["stdin", "x"]`` in, ``["stdout", "x"]`` out, ``["disconnect", 1]`` at the
end) over a minimal WebSocket (a hand-parsed masked frame in, an unmasked frame out,
the socket read and written through its descriptor) on a real pty, and do no AHP, no
JSON beyond one ``loads`` per frame in and one ``dumps`` per frame out, no state, no
envelopes, no scrollback. The JSON is the project's own codec's, orjson (the cheapest
there is in Python), so a floor costs no more than the shape and the pty do:

* ``floor-2`` has terminado's shape: one task reads the socket and writes the pty,
  one reads the pty and writes the socket (two task steps per keystroke).
* ``floor-card`` has the card's shape, each hop a memory channel: connection
  reader -> reducer -> input-write -> pty; pty-read -> parse -> reducer -> connection
  writer (seven task steps per keystroke, the reducer taking both inputs from one
  channel, as the engine's does).

* ``floor-ahp`` has the card's shape and speaks AHP (issue 23's question of what the
  protocol itself costs): it answers ``initialize`` (subscribed to the one channel the
  client names), takes ``dispatchAction`` ``terminal/input`` notifications, and sends
  each input's echo and each output batch as an ``action`` envelope with its
  ``serverSeq`` (the echo with the sender's ``origin``), and ``terminal/exited`` at the
  end: the protocol's least work per keystroke, one JSON-RPC message parsed and two
  envelopes encoded. An input's echo leaves with the next output, in one write (as the
  sidecar's ``echo_pairing`` does; without its timer: a floor only ever runs ``cat``
  and the gate, whose input always prints). No state, no claims, no replay log, no
  scrollback, no other request.
* ``floor-state`` is ``floor-ahp`` doing the terminal contract's own work with the
  engine's pure cores, and nothing of the engine's plumbing: the parse task runs an
  :class:`~ahp.vt.OutputParser` (escape scanning, shell-integration marks, titles),
  the reducer builds each input with the codec, decides on it and applies every
  action with a :class:`~ahp.reducers.TerminalCore` (claims, state and typed parts,
  scrollback), and publishes through a :class:`~ahp.engine.hub.Hub` (``serverSeq``,
  the replay log) into the connection's :class:`~ahp.engine.outbox.Outbox`, whose
  envelopes' cached frames it writes. What the sidecar costs beyond it is the engine's
  and the server's machinery (the reader thread, wsproto, sessions and dispatch,
  the echo's timer, pacing, priorities), not the contract.

All read the pty as the engine does on its loop (until EAGAIN, at most
:data:`BATCH` bytes, decoded incrementally). ``nox -s bench`` measures them as four
more peers (:data:`ahp.bench.suite.PEERS`), with the same clients and in the same
interleaved rounds as the sidecar, terminado and ttyd, and each of issue 23's targets
shows what the floors score on it (:mod:`ahp.bench.targets`): a goal the bare shape
misses too is bounded by the shape, not by the project's work on top of it.
``benchmarks/floor.py`` runs them alone, for quick A/Bs.

The server half runs as ``python -m ahp.bench.floors SHAPE GATE_ARGV_JSON CWD``
(``SHAPE``: ``2``, ``card``, ``ahp`` or ``state``): it prints its port on the first
line, then serves until SIGTERM or SIGINT. A path under ``/gate/`` runs the gate, any
other ``cat``; each connection gets its own program on its own pty, killed and reaped
when the connection ends or the server stops. Buffering: a connection's channels hold at most
:data:`CHANNEL` items each (a full one blocks its sender: backpressure from the
socket back to the pty); a client frame larger than :data:`MAX_FRAME` or a request
head larger than :data:`MAX_HEAD` ends the connection.
"""

from __future__ import annotations

import base64
import codecs
import errno
import hashlib
import os
import signal
import socket
import sys
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Final

import orjson
import trio

from ahp.bench.endtoend import TerminalKind
from ahp.bench.peers import TerminadoServer
from ahp.bench.processes import open_child_server
from ahp.bench.workload import Workload
from ahp.bench.wsclient import AhpDialect, Dialect
from ahp.engine.envelopes import Published, ReplayLog
from ahp.engine.hub import Hub
from ahp.engine.outbox import Outbox
from ahp.protocol.actions import ActionOrigin, StateAction, TerminalExited
from ahp.protocol.codec import structure_action
from ahp.protocol.state import ClientClaim, TerminalState
from ahp.reducers import DEFAULT_SCROLLBACK, Rejected, TerminalCore
from ahp.vt import OutputParser
from ahp.vt.parser import compact

__all__ = ["SHAPES", "FloorServer", "floor_missing", "floor_version", "open_floor", "serve"]

#: The shapes by peer name.
SHAPES: Final = {"floor-2": "2", "floor-card": "card", "floor-ahp": "ahp", "floor-state": "state"}
#: Items each of a ``floor-card`` connection's channels holds.
CHANNEL: Final = 64

#: A frame from the C client is small; anything larger is not this benchmark's.
MAX_FRAME: Final = 4096
#: One request head at most.
MAX_HEAD: Final = 16384
READ: Final = 65536
#: Output read before it is sent on (the engine's pty-read batches are as large).
BATCH: Final = 256 * 1024


def _frame(payload: bytes) -> bytes:
    """One unmasked final text frame (server to client)."""
    n = len(payload)
    if n < 126:
        return bytes((0x81, n)) + payload
    if n < 65536:
        return bytes((0x81, 126)) + n.to_bytes(2, "big") + payload
    return bytes((0x81, 127)) + n.to_bytes(8, "big") + payload


DISCONNECT = _frame(b'["disconnect", 1]')
#: terminado's hello, the first frame of its dialect's connections.
SETUP = _frame(b'["setup", {}]')


def _unframe(buf: bytearray) -> tuple[int, bytes] | None:
    """The first whole masked frame in ``buf`` as (opcode, payload), removed from it;
    None if more bytes are needed."""
    if len(buf) < 2:
        return None
    opcode, n = buf[0] & 0x0F, buf[1] & 0x7F
    at = 2
    if n == 126:
        if len(buf) < 4:
            return None
        n, at = int.from_bytes(buf[2:4], "big"), 4
    if n > MAX_FRAME:
        raise ValueError("frame too large")
    if len(buf) < at + 4 + n:
        return None
    mask = bytes(buf[at : at + 4])
    data = bytes(buf[at + 4 : at + 4 + n])
    del buf[: at + 4 + n]
    key = int.from_bytes((mask * (n // 4 + 1))[:n], "big")
    payload = (int.from_bytes(data, "big") ^ key).to_bytes(n, "big") if n else b""
    return opcode, payload


async def _recv_some(sock: socket.socket) -> bytes:
    while True:
        try:
            data = sock.recv(READ)
        except BlockingIOError:
            await trio.lowlevel.wait_readable(sock)
            continue
        if not data:
            raise EOFError
        return data


async def _send_all(sock: socket.socket, data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            view = view[sock.send(view) :]
        except BlockingIOError:
            await trio.lowlevel.wait_writable(sock)


async def _upgrade(sock: socket.socket) -> tuple[str, bytearray]:
    """Answer the HTTP upgrade; returns the request's path and the bytes read past it
    (each dialect's connection says its own hello)."""
    buf = bytearray()
    while b"\r\n\r\n" not in buf:
        buf += await _recv_some(sock)
        if len(buf) > MAX_HEAD:
            raise ValueError("request too large")
    head, _, rest = bytes(buf).partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    key = b""
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"sec-websocket-key":
            key = value.strip()
    digest = hashlib.sha1(key + b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11").digest()
    await _send_all(
        sock,
        b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        b"Sec-WebSocket-Accept: " + base64.b64encode(digest) + b"\r\n\r\n",
    )
    request_line = lines[0].split(b" ")
    path = request_line[1].decode(errors="replace") if len(request_line) > 1 else "/"
    return path, bytearray(rest)


async def _client_messages(sock: socket.socket, buf: bytearray) -> AsyncIterator[Any]:
    """The client's JSON-RPC messages, frame by frame, until a close (``ValueError`` for
    a frame that is not JSON)."""
    while True:
        frame = _unframe(buf)
        if frame is None:
            buf += await _recv_some(sock)
            continue
        opcode, payload = frame
        if opcode == 8:
            return
        if opcode == 1:
            yield orjson.loads(payload)


async def _client_texts(sock: socket.socket, buf: bytearray) -> AsyncIterator[str]:
    """The text typed by the client (``["stdin", text]``), frame by frame, until a close.
    Any other message is ignored (terminado's ``set_size`` among them); a frame that is
    not JSON raises ``ValueError`` (the connection ends, the server goes on)."""
    async for message in _client_messages(sock, buf):
        if (
            isinstance(message, list)
            and len(message) == 2
            and message[0] == "stdin"
            and isinstance(message[1], str)
        ):
            yield message[1]


class _Output:
    """The pty's output read in batches (until EAGAIN, at most :data:`BATCH` bytes) and
    decoded as it comes (a character split between reads waits for the next); None at
    the end (EIO: the program exited and the slave closed)."""

    def __init__(self, master: int) -> None:
        self.master = master
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    async def read(self) -> bytes | None:
        chunks: list[bytes] = []
        size = 0
        while size < BATCH:
            try:
                data = os.read(self.master, READ)
            except BlockingIOError:
                if chunks:
                    break
                await trio.lowlevel.wait_readable(self.master)
                continue
            except OSError as exc:
                if exc.errno != errno.EIO:
                    raise
                data = b""
            if not data:
                return b"".join(chunks) if chunks else None
            chunks.append(data)
            size += len(data)
        return b"".join(chunks)


def _stdout(text: str) -> bytes:
    return _frame(orjson.dumps(["stdout", text]))


async def _connection_2(sock: socket.socket, master: int, buf: bytearray) -> None:
    """terminado's shape: socket -> pty in one task, pty -> socket in another."""
    await _send_all(sock, SETUP)
    output = _Output(master)

    async with trio.open_nursery() as nursery:

        async def forward() -> None:
            while (data := await output.read()) is not None:
                await _send_all(sock, _stdout(output.decoder.decode(data)))
            await _send_all(sock, DISCONNECT)
            nursery.cancel_scope.cancel()

        nursery.start_soon(forward)
        async for text in _client_texts(sock, buf):
            os.write(master, text.encode())
        nursery.cancel_scope.cancel()


async def _hand(channel: trio.MemorySendChannel[Any], item: Any) -> None:
    """Send without a scheduler pass when the buffer has room (the engine's idiom)."""
    try:
        channel.send_nowait(item)
    except trio.WouldBlock:
        await channel.send(item)


async def _take(channel: trio.MemoryReceiveChannel[Any]) -> Any:
    """Receive without a scheduler pass when an item is waiting (the engine's idiom)."""
    try:
        return channel.receive_nowait()
    except trio.WouldBlock:
        return await channel.receive()


#: A card connection's reducer rule: (kind, item) -> (input for the pty, frame for the
#: writer), either None; the end of the output is ("output", None).
_Reduce = Callable[[str, Any], tuple[str | bytes | None, bytes | None]]


async def _card(
    sock: socket.socket,
    master: int,
    inputs: AsyncIterator[Any],
    reduce: _Reduce,
    parse_rule: Callable[[bytes], Any] | None = None,
) -> None:
    """The card's shape: every stage a task, every hop a memory channel.

    Channels are handed items without an extra pass (``send_nowait`` while there is
    room, ``receive_nowait`` while there is an item), as the engine does, so each hop
    costs what the shape itself costs: a task step and its scheduler batch. The end of
    the output (None) travels the same hops; the reducer hands on the last frame its
    rule makes of it and ends the writer. ``inputs`` are the connection reader's items
    for the reducer (what the client typed), ``reduce`` what the dialect makes of each,
    ``parse_rule`` what the parse task makes of each batch read (by default its text).
    """
    output = _Output(master)
    parse_rule = parse_rule or output.decoder.decode
    to_reducer, reducer_in = trio.open_memory_channel[tuple[str, Any]](CHANNEL)
    to_writer, writer_in = trio.open_memory_channel[bytes | None](CHANNEL)
    to_input, input_in = trio.open_memory_channel[str | bytes](CHANNEL)
    to_parse, parse_in = trio.open_memory_channel[bytes | None](CHANNEL)

    async def reducer() -> None:
        while True:
            kind, item = await _take(reducer_in)
            typed, frame = reduce(kind, item)
            if typed is not None:
                await _hand(to_input, typed)
            if frame is not None:
                await _hand(to_writer, frame)
            if kind == "output" and item is None:
                await _hand(to_writer, None)
                return

    async def input_write() -> None:
        while True:
            typed = await _take(input_in)
            os.write(master, typed if isinstance(typed, bytes) else typed.encode())

    async def pty_read() -> None:
        while True:
            data = await output.read()
            await _hand(to_parse, data)
            if data is None:
                return

    async def parse() -> None:
        while True:
            data = await _take(parse_in)
            await _hand(to_reducer, ("output", None if data is None else parse_rule(data)))

    async with trio.open_nursery() as nursery:

        async def writer() -> None:
            while (frame := await _take(writer_in)) is not None:
                await _send_all(sock, frame)
            nursery.cancel_scope.cancel()

        for task in (reducer, input_write, pty_read, parse, writer):
            nursery.start_soon(task)
        async for item in inputs:
            await _hand(to_reducer, ("input", item))
        nursery.cancel_scope.cancel()


def _terminado_rule(kind: str, item: Any) -> tuple[str | None, bytes | None]:
    """terminado's dialect: input typed as it came, output as ``["stdout", text]``."""
    if kind == "input":
        return item, None
    return None, DISCONNECT if item is None else _stdout(item)


async def _connection_card(sock: socket.socket, master: int, buf: bytearray) -> None:
    """The card's shape in terminado's dialect (``floor-card``)."""
    await _send_all(sock, SETUP)
    await _card(sock, master, _client_texts(sock, buf), _terminado_rule)


def _envelope(channel: str, action: Any, seq: int, origin: Any = None) -> bytes:
    """One ``action`` notification, framed."""
    params = {"channel": channel, "action": action, "serverSeq": seq}
    if origin is not None:
        params["origin"] = origin
    return _frame(orjson.dumps({"jsonrpc": "2.0", "method": "action", "params": params}))


class _AhpRule:
    """AHP's least, as a card reducer's rule: every envelope numbered, an input's echo
    (with its origin) kept for the next output's write, ``terminal/exited`` at the end."""

    def __init__(self, channel: str) -> None:
        self.channel = channel
        self.seq = 0
        self.echoes: list[bytes] = []

    def __call__(self, kind: str, item: Any) -> tuple[str | None, bytes | None]:
        self.seq += 1
        if kind == "input":
            action, origin = item
            self.echoes.append(_envelope(self.channel, action, self.seq, origin))
            return action["data"], None
        if item is None:
            action = {"type": "terminal/exited", "exitCode": 0}
        else:
            action = {"type": "terminal/data", "data": item}
        frame = _envelope(self.channel, action, self.seq)
        if self.echoes:
            frame = b"".join((*self.echoes, frame))
            self.echoes.clear()
        return None, frame


async def _inputs_ahp(
    messages: AsyncIterator[Any], channel: str, client_id: str
) -> AsyncIterator[tuple[Any, Any]]:
    """The ``terminal/input`` actions dispatched to ``channel``, each with its origin
    (other methods, channels and malformed messages are ignored)."""
    async for message in messages:
        if not isinstance(message, dict) or message.get("method") != "dispatchAction":
            continue
        params = message.get("params")
        if not isinstance(params, dict) or params.get("channel") != channel:
            continue
        action = params.get("action")
        if (
            isinstance(action, dict)
            and action.get("type") == "terminal/input"
            and isinstance(action.get("data"), str)
        ):
            yield action, {"clientId": client_id, "clientSeq": params.get("clientSeq")}


async def _ahp_hello(sock: socket.socket, messages: AsyncIterator[Any]) -> tuple[str, str] | None:
    """``initialize`` answered: the channel the client subscribes to and its id; None
    when the connection closed or did not start with an ``initialize`` (it ends)."""
    hello = await anext(messages, None)
    if hello is None:
        return None  # (closed before saying hello)
    params = hello.get("params") if isinstance(hello, dict) else None
    if not isinstance(params, dict):
        return None  # (the first message is not an initialize request)
    subscriptions = params.get("initialSubscriptions")
    channel = str(subscriptions[0]) if isinstance(subscriptions, list) and subscriptions else ""
    answer = {"protocolVersion": "0.5.0", "serverSeq": 0, "snapshots": []}
    await _send_all(
        sock, _frame(orjson.dumps({"jsonrpc": "2.0", "id": hello.get("id"), "result": answer}))
    )
    return channel, str(params.get("clientId", ""))


class _StateRule:
    """The terminal contract's work, as a card reducer's rule, with the engine's pure
    cores (see the module docstring): an input is built by the codec, decided on and
    applied by a :class:`~ahp.reducers.TerminalCore` and published (its echo stays in
    the outbox until the next output's write; a rejected one's is written at once);
    each output batch's actions (the parser's) are applied and published, then
    everything the outbox holds is framed and written at once. The state stays one
    terminal's: its scrollback is bounded by :data:`~ahp.reducers.DEFAULT_SCROLLBACK`,
    the log by its defaults."""

    def __init__(self, channel: str) -> None:
        self.channel = channel
        self.parser = OutputParser(use_pty=True, nonce=None, last_titles=True)
        self.core = TerminalCore(
            TerminalState(
                title="", claim=ClientClaim(clientId=""), content=(), cols=80, rows=24, isPty=True
            ),
            uri=channel,
            scrollback=DEFAULT_SCROLLBACK,
            use_pty=True,
        )
        self.hub = Hub(ReplayLog())
        self.outbox = Outbox()
        self.hub.subscribe(channel, self.outbox)

    def parse(self, data: bytes) -> Sequence[StateAction]:
        """The parse task's work: a batch's actions, the turn's titles compacted."""
        actions = self.parser.feed(
            data, wall_ms=int(time.time() * 1000), mono_ms=time.monotonic() * 1000
        )
        return compact(actions)

    def __call__(self, kind: str, item: Any) -> tuple[str | bytes | None, bytes | None]:
        core, hub, channel = self.core, self.hub, self.channel
        if kind == "input":
            message, origin_data = item
            action = structure_action(message)
            seq = origin_data["clientSeq"]
            origin = ActionOrigin(
                clientId=origin_data["clientId"], clientSeq=seq if isinstance(seq, int) else 0
            )
            verdict = core.decide(action, origin)
            if isinstance(verdict, Rejected):  # (echoed to the sender at once, alone)
                hub.reject(self.outbox, channel, action, origin, verdict.reason)
                return None, self._frames()
            hub.publish(channel, core.apply(verdict.action), origin)
            return verdict.write, None
        if item is None:
            item = [TerminalExited(exitCode=0)]
        for action in item:
            hub.publish(channel, core.apply(action))
        return None, self._frames()

    def _frames(self) -> bytes | None:
        """Everything the outbox holds, framed for one write (None: nothing)."""
        frames = [
            _frame(queued.frame)
            for queued in self.outbox.get_nowait()
            if isinstance(queued, Published)  # (only envelopes are queued here)
        ]
        return b"".join(frames) if frames else None


async def _connection_ahp(sock: socket.socket, master: int, buf: bytearray) -> None:
    """The card's shape speaking AHP's least (``floor-ahp``): :func:`_card` with AHP's
    reader and reducer rule, once :func:`_ahp_hello` answered."""
    messages = _client_messages(sock, buf)
    found = await _ahp_hello(sock, messages)
    if found is not None:
        channel, client_id = found
        await _card(sock, master, _inputs_ahp(messages, channel, client_id), _AhpRule(channel))


async def _connection_state(sock: socket.socket, master: int, buf: bytearray) -> None:
    """``floor-ahp`` with the terminal contract's work (``floor-state``)."""
    messages = _client_messages(sock, buf)
    found = await _ahp_hello(sock, messages)
    if found is not None:
        channel, client_id = found
        rule = _StateRule(channel)
        inputs = _inputs_ahp(messages, channel, client_id)
        await _card(sock, master, inputs, rule, rule.parse)


_CONNECTIONS: Final = {
    "2": _connection_2,
    "card": _connection_card,
    "ahp": _connection_ahp,
    "state": _connection_state,
}


async def serve(shape: str, gate_argv: list[str], cwd: str) -> None:
    """Serve ``shape`` (``2``, ``card``, ``ahp`` or ``state``) until SIGTERM or SIGINT
    (see the module)."""
    connection = _CONNECTIONS[shape]
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.setblocking(False)
    print(listener.getsockname()[1], flush=True)
    env = {**os.environ, "TERM": "xterm-256color"}

    async def one(sock: socket.socket) -> None:
        with sock:
            try:
                path, buf = await _upgrade(sock)
            except (EOFError, OSError, ValueError):
                return
            argv = gate_argv if path.startswith("/gate/") else ["cat"]
            master, slave = os.openpty()
            os.set_blocking(master, False)
            try:
                process = await trio.lowlevel.open_process(
                    argv,
                    stdin=slave,
                    stdout=slave,
                    stderr=slave,
                    cwd=cwd,
                    env=env,
                    start_new_session=True,
                )
            finally:
                os.close(slave)
            try:
                await connection(sock, master, buf)
            except* (EOFError, OSError, ValueError):
                pass  # (the client went, or sent what is not JSON: this connection ends)
            finally:
                with trio.CancelScope(shield=True):
                    process.kill()
                    await process.wait()
                    os.close(master)

    async with trio.open_nursery() as nursery:

        async def accept() -> None:
            while True:
                await trio.lowlevel.wait_readable(listener)
                try:
                    sock, _ = listener.accept()
                except BlockingIOError:
                    continue
                sock.setblocking(False)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                nursery.start_soon(one, sock)

        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            nursery.start_soon(accept)
            async for _ in signals:
                break  # every connection's program is killed and reaped on the way out
        nursery.cancel_scope.cancel()
    listener.close()


class FloorServer(TerminadoServer):
    """A floor server child process as a :class:`~ahp.bench.endtoend.ServerUnderTest`:
    terminado's dialect and routes, but every connection gets its own program (no
    second viewer of one terminal)."""

    shares_terminals = False


class FloorAhpServer(FloorServer):
    """The AHP floor (``floor-ahp``): a terminal per connection, its channel the one the
    client subscribes to."""

    dialect_name = "ahp"

    async def terminal(self, kind: TerminalKind) -> tuple[str, Callable[[], Dialect], Any]:
        name = f"t{next(self._names)}"
        uri = f"ahp-terminal:/floor-{name}"
        return f"ws://127.0.0.1:{self.port}/{kind}/{name}", lambda: AhpDialect(uri), uri

    def channel(self, handle: Any) -> str | None:
        return str(handle)


def floor_missing() -> str | None:
    """Why the floors cannot run here: never (they need only this package and a pty)."""
    return None


def floor_version() -> str:
    """The floors are this package's own code."""
    from importlib.metadata import version

    return f"bare Trio {trio.__version__} (ahp-terminals {version('ahp-terminals')})"


@asynccontextmanager
async def open_floor(
    shape: str, workload: Workload, *, gate: list[str] | None = None, cwd: Path | None = None
) -> AsyncIterator[FloorServer]:
    """A floor server of ``shape`` (``2``, ``card``, ``ahp`` or ``state``) running
    ``workload``'s gate in its folder (or ``gate`` in ``cwd``), stopped (SIGTERM) and
    reaped on exit."""
    argv = [
        sys.executable,
        "-m",
        "ahp.bench.floors",
        shape,
        orjson.dumps(workload.gate_argv() if gate is None else gate).decode(),
        str(workload.path.parent if cwd is None else cwd),
    ]
    async with open_child_server(argv) as server:
        yield FloorAhpServer(server) if shape in ("ahp", "state") else FloorServer(server)


def main(argv: list[str]) -> None:
    """``python -m ahp.bench.floors SHAPE GATE_ARGV_JSON CWD``."""
    if len(argv) != 3 or argv[0] not in SHAPES.values():
        sys.exit("usage: python -m ahp.bench.floors 2|card|ahp|state GATE_ARGV_JSON CWD")
    trio.run(serve, argv[0], orjson.loads(argv[1]), argv[2])


if __name__ == "__main__":
    main(sys.argv[1:])
