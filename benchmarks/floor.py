"""What a bare Trio server costs in the card's shape and in terminado's: the floors.

Why: issue 23 asks for the sidecar's echo at or below terminado's and for throughput
well above ttyd's, and where a goal cannot be met, for a measurement of what bounds
it. This script takes the project's own work out of the question. It runs, next to
the real sidecar and the peers, two bare Trio servers that speak terminado's dialect
(``["stdin", "x"]`` in, ``["stdout", "x"]`` out, ``["disconnect", 1]`` at the end)
over a minimal WebSocket (a hand-parsed masked frame in, an unmasked frame out, the
socket read and written through its descriptor) on a real pty. They do no AHP, no
JSON beyond one ``loads`` per frame in and one ``dumps`` per frame out, no state, no
envelopes, no scrollback:

* ``floor-2`` has terminado's shape: one task reads the socket and writes the pty,
  one reads the pty and writes the socket (two task steps per keystroke).
* ``floor-card`` has the card's shape, each hop a memory channel: connection
  reader -> reducer -> input-write -> pty; pty-read -> parse -> reducer -> connection
  writer (seven task steps per keystroke, the reducer taking both inputs from one
  channel, as the engine's does).

Both read the pty as the engine does on its loop (until EAGAIN, at most
:data:`BATCH` bytes, decoded incrementally). Every server is measured with the same
independent C client (``ahp.bench.cclient``): keystroke echo back to back and after
``--pause`` seconds idle (``cat``), and ``--stream`` MB of the bench's workload
through interactive output (the gate), beside the bench's ceiling (a bare Trio
reader of the pty, :func:`ahp.bench.ceiling.bare_read`). The sides run one after
another in each round, in an order that rotates, each server in a fresh process;
ratios are taken per round, against terminado (echo) and the ceiling (stream).
Usage, from a checkout::

    python benchmarks/floor.py --rounds 6 --count 1000 --idle-count 30 --stream 20 \\
        [--ttyd] [--ahp AHP_KEYSTROKE_OFF=echo_spin]

The server halves (``--serve 2|card GATE_ARGV_JSON CWD``) print their port on the
first line, then serve until SIGTERM or SIGINT (each connection's program killed and
reaped on the way out). A path under ``/gate/`` runs the gate, any other ``cat``.
"""

from __future__ import annotations

import argparse
import base64
import codecs
import errno
import hashlib
import json
import os
import signal
import socket
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import trio

HERE = Path(__file__).resolve()
#: A frame from the C client is small; anything larger is not this benchmark's.
MAX_FRAME = 4096
#: One request head at most.
MAX_HEAD = 16384
READ = 65536
#: Output read before it is sent on (the engine's pty-read batches are as large).
BATCH = 256 * 1024
SIDES = ("terminado", "floor-2", "floor-card", "ahp")


def _frame(payload: bytes) -> bytes:
    """One unmasked final text frame (server to client)."""
    n = len(payload)
    if n < 126:
        return bytes((0x81, n)) + payload
    if n < 65536:
        return bytes((0x81, 126)) + n.to_bytes(2, "big") + payload
    return bytes((0x81, 127)) + n.to_bytes(8, "big") + payload


DISCONNECT = _frame(b'["disconnect", 1]')


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
    """Answer the HTTP upgrade; returns the request's path and the bytes read past it."""
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
    await _send_all(sock, _frame(b'["setup", {}]'))
    request_line = lines[0].split(b" ")
    path = request_line[1].decode(errors="replace") if len(request_line) > 1 else "/"
    return path, bytearray(rest)


async def _client_texts(sock: socket.socket, buf: bytearray) -> AsyncIterator[str]:
    """The text typed by the client (``["stdin", text]``), frame by frame, until a close."""
    while True:
        frame = _unframe(buf)
        if frame is None:
            buf += await _recv_some(sock)
            continue
        opcode, payload = frame
        if opcode == 8:
            return
        if opcode == 1:
            message = json.loads(payload)
            if message[0] == "stdin":
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
    return _frame(json.dumps(["stdout", text]).encode())


async def _connection_2(sock: socket.socket, master: int, buf: bytearray) -> None:
    """terminado's shape: socket -> pty in one task, pty -> socket in another."""
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


async def _connection_card(sock: socket.socket, master: int, buf: bytearray) -> None:
    """The card's shape: every stage a task, every hop a memory channel.

    Channels are handed items without an extra pass (``send_nowait`` while there is
    room, ``receive_nowait`` while there is an item), as the engine does, so each hop
    costs what the shape itself costs: a task step and its scheduler batch. The end of
    the output (None) travels the same hops.
    """
    output = _Output(master)
    to_reducer, reducer_in = trio.open_memory_channel[tuple[str, Any]](64)
    to_writer, writer_in = trio.open_memory_channel[bytes | None](64)
    to_input, input_in = trio.open_memory_channel[str](64)
    to_parse, parse_in = trio.open_memory_channel[bytes | None](64)

    async def reducer() -> None:
        while True:
            kind, item = await _take(reducer_in)
            if kind == "input":
                await _hand(to_input, item)
            else:
                await _hand(to_writer, None if item is None else _stdout(item))

    async def input_write() -> None:
        while True:
            os.write(master, (await _take(input_in)).encode())

    async def pty_read() -> None:
        while True:
            data = await output.read()
            await _hand(to_parse, data)
            if data is None:
                return

    async def parse() -> None:
        while True:
            data = await _take(parse_in)
            text = None if data is None else output.decoder.decode(data)
            await _hand(to_reducer, ("output", text))

    async with trio.open_nursery() as nursery:

        async def writer() -> None:
            while (frame := await _take(writer_in)) is not None:
                await _send_all(sock, frame)
            await _send_all(sock, DISCONNECT)
            nursery.cancel_scope.cancel()

        for task in (reducer, input_write, pty_read, parse, writer):
            nursery.start_soon(task)
        async for text in _client_texts(sock, buf):
            await _hand(to_reducer, ("input", text))
        nursery.cancel_scope.cancel()


async def _serve(shape: str, gate_argv: list[str], cwd: str) -> None:
    connection = _connection_2 if shape == "2" else _connection_card
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
            except (EOFError, OSError, ValueError):
                pass
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


async def _measure_side(side: str, args: argparse.Namespace, workload: Any) -> dict[str, float]:
    from ahp.bench.cclient import build_client
    from ahp.bench.ceiling import bare_read
    from ahp.bench.endtoend import AhpServer, c_echo_run, c_stream_run
    from ahp.bench.peers import TerminadoServer, open_terminado
    from ahp.bench.processes import open_child_server, open_worker
    from ahp.bench.ttyd import open_ttyd

    binary = build_client()
    if side == "ceiling":
        bare = await bare_read(workload)
        return {"mb_s": bare.nbytes / bare.seconds / 1e6}

    async def run(server: Any) -> dict[str, float]:
        out: dict[str, float] = {}
        if args.count:
            await c_echo_run(server, binary, 50, warmup=20)
            cpu = server.cpu_seconds()
            samples = await c_echo_run(server, binary, args.count, warmup=20)
            out["echo"] = statistics.median(samples)
            out["cpu_us"] = (server.cpu_seconds() - cpu) / args.count * 1e6
        if args.idle_count:
            idle = await c_echo_run(server, binary, args.idle_count, warmup=2, pause=args.pause)
            out["idle"] = statistics.median(idle)
        if args.stream:
            measured = await c_stream_run(server, binary)
            out["mb_s"] = measured.run.text_bytes / measured.run.seconds / 1e6
            out["cpu_s_100mb"] = measured.server_cpu_seconds / measured.run.text_bytes * 1e8
        return out

    if side.startswith("ahp"):
        # "ahp:AHP_KEYSTROKE_OFF=echo_spin": the sidecar with settings in its environment.
        saved = dict(os.environ)
        for setting in side.split(":")[1:]:
            key, _, value = setting.partition("=")
            os.environ[key] = value
        try:
            async with open_worker() as worker:
                return await run(AhpServer(worker, workload))
        finally:
            os.environ.clear()
            os.environ.update(saved)
    if side == "terminado":
        async with open_terminado(workload) as terminado:
            return await run(terminado)
    if side == "ttyd":
        async with open_ttyd(workload) as ttyd:
            return await run(ttyd)
    shape = side.removeprefix("floor-")
    gate = json.dumps(workload.gate_argv())
    argv = [sys.executable, str(HERE), "--serve", shape, gate, str(workload.path.parent)]
    async with open_child_server(argv) as child:
        return await run(TerminadoServer(child))


def _report(results: dict[str, list[dict[str, float]]], figure: str, base: str) -> None:
    scale = 1e3 if figure in ("echo", "idle") else 1.0
    for side, runs in results.items():
        values = [r[figure] * scale for r in runs if figure in r]
        if not values:
            continue
        row = f"{figure:<11} {side:<34} {statistics.median(values):9.3f} "
        row += f"[{min(values):.3f}-{max(values):.3f}]"
        ratios = [
            r[figure] / b[figure]
            for r, b in zip(runs, results[base], strict=True)
            if figure in r and figure in b and b[figure]
        ]
        if ratios and side != base:
            row += f"  / {base} {statistics.median(ratios):.3f} "
            row += f"[{min(ratios):.2f}-{max(ratios):.2f}]"
        print(row)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--serve", nargs=3, metavar=("SHAPE", "GATE", "CWD"), help="serve")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--count", type=int, default=1000, help="keystrokes back to back")
    parser.add_argument("--idle-count", type=int, default=30, help="keystrokes after a pause")
    parser.add_argument("--pause", type=float, default=0.15)
    parser.add_argument("--stream", type=float, default=0.0, help="MB of output (0: none)")
    parser.add_argument("--ttyd", action="store_true", help="also measure ttyd")
    parser.add_argument(
        "--ahp",
        action="append",
        default=[],
        metavar="ENV=VALUE[:ENV=VALUE]",
        help="another sidecar side with these settings (e.g. AHP_KEYSTROKE_OFF=echo_spin)",
    )
    args = parser.parse_args()
    if args.serve:
        shape, gate, cwd = args.serve
        if shape not in ("2", "card"):
            parser.error("--serve SHAPE: 2 or card")
        trio.run(_serve, shape, json.loads(gate), cwd)
        return
    from ahp.bench.workload import generate

    sides = [*SIDES, *(f"ahp:{settings}" for settings in args.ahp)]
    sides += ["ttyd"] if args.ttyd else []
    sides += ["ceiling"] if args.stream else []
    results: dict[str, list[dict[str, float]]] = {s: [] for s in sides}
    print(f"start {time.strftime('%H:%M:%S')} load {os.getloadavg()}", file=sys.stderr)
    with tempfile.TemporaryDirectory() as directory:
        workload = generate(Path(directory), args.stream or 0.01)
        for i in range(args.rounds):
            order = sides[i % len(sides) :] + sides[: i % len(sides)]
            for side in order:
                results[side].append(trio.run(_measure_side, side, args, workload))
            line = "  ".join(
                f"{s}=" + "/".join(f"{v:.3g}" for v in results[s][-1].values()) for s in sides
            )
            print(f"round {i + 1} load {os.getloadavg()[0]:.2f}  {line}", file=sys.stderr)
    print(f"end {time.strftime('%H:%M:%S')} load {os.getloadavg()}")
    for figure in ("echo", "idle", "cpu_us"):
        _report(results, figure, "terminado")
    for figure in ("mb_s", "cpu_s_100mb"):
        _report(results, figure, "ceiling" if figure == "mb_s" else "terminado")


if __name__ == "__main__":
    main()
