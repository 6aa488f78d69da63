"""A legitimate client's keystroke echo while hostile peers attack the sidecar (issue 12).

Run ``python benchmarks/bench_edges.py [seconds per attack]`` (default 6); it
prints one table, the figures ``docs/threat-model.md`` quotes. Everything is on
loopback, bounded in count and time, and stops by itself.

One ``python -m ahp serve`` subprocess with ``ulimit -n 1024`` (soft) and
``--shell /bin/cat``; one terminal for the echo. For each attack in turn, the
attack runs in this process while a *new* legitimate client connects (its
connect time is reported) and types ``x`` every 20 ms, measuring each round trip
to the echo (keystroke to ``terminal/data``, as ``ahp bench``'s echo does). The
server's RSS and its peak (``VmHWM``) are read around each attack, and the
server's log lines counted. Attacks:

- ``slow upgrades``: 1 100 connections sending their upgrade one byte a second,
  each reconnecting as soon as the server drops it.
- ``bad upgrades``: 4 peers sending malformed upgrades (non-ASCII headers, a
  target that is no URL) back to back.
- ``costly frame``: a token holder sending frames of nearly ``MAX_MESSAGE_SIZE`` of empty arrays
  back to back (each refused, -32700); ``stall`` is the server's answer time.
- ``worst accepted frame``: frames at the item bound (65 535 strings, nearly the size bound),
  each answered.
- ``big configs``: ``root/configChanged`` of nearly the size bound, rejected to the sender.
- ``many terminals``: ``createTerminal`` back to back until the limit refuses.
"""

from __future__ import annotations

import itertools
import os
import re
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import orjson
import trio

try:
    from ahp.bench.rawws import Closed, RawWebSocket, open_raw_websocket
except ModuleNotFoundError:  # a checkout without `pip install -e .`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from ahp.bench.rawws import Closed, RawWebSocket, open_raw_websocket
from ahp.bench.wsclient import AhpDialect
from ahp.protocol.jsonshape import MAX_ITEMS
from ahp.server.websocket import MAX_MESSAGE_SIZE

REPO = Path(__file__).resolve().parents[1]
TOKEN = "bench-edges-token"
NOFILE = 1024
SLOW_PEERS = 1100
BAD_PEERS = 4
FRAME_BYTES = MAX_MESSAGE_SIZE - 64 * 1024  # the largest frames the server accepts
PAUSE = 0.02
ECHO = "ahp-terminal:/echo"

Attack = Callable[[int, str, dict[str, Any]], Awaitable[None]]


def _status(pid: int) -> dict[str, int]:
    with open(f"/proc/{pid}/status") as f:
        return {
            line.split(":")[0]: int(line.split()[1])
            for line in f
            if line.startswith(("VmRSS:", "VmHWM:"))
        }


async def _call(ws: RawWebSocket, ids: Any, method: str, params: Any) -> dict[str, Any]:
    msg_id = next(ids)
    await ws.send_message(
        orjson.dumps({"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params}).decode()
    )
    while True:
        message: dict[str, Any] = orjson.loads(await ws.get_message())
        if message.get("id") == msg_id:
            return message


async def _initialize(ws: RawWebSocket, client_id: str) -> Any:
    params = {"channel": "ahp-root://", "protocolVersions": ["0.5.0"], "clientId": client_id}
    return await _call(ws, itertools.count(1000), "initialize", params)


# -- attacks -----------------------------------------------------------------------------------


async def slow_upgrades(port: int, url: str, note: dict[str, Any]) -> None:
    request = b"GET /?tkn=wrong HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
    dropped = 0

    async def peer() -> None:
        nonlocal dropped
        while True:
            try:
                stream = await trio.open_tcp_stream("127.0.0.1", port)
            except OSError:
                await trio.sleep(0.5)
                continue
            try:
                for byte in itertools.cycle(request):
                    await stream.send_all(bytes((byte,)))
                    await trio.sleep(1.0)
            except (trio.BrokenResourceError, OSError):
                dropped += 1
            finally:
                await stream.aclose()

    try:
        async with trio.open_nursery() as nursery:
            for _ in range(SLOW_PEERS):
                nursery.start_soon(peer)
    finally:
        note["dropped by the server"] = dropped


_BAD = [
    b"GET /?tkn=x HTTP/1.1\r\nHost: h\xc3\xa9st\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
    b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
    b"GET //[x/?tkn=x HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
    b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
]


async def bad_upgrades(port: int, url: str, note: dict[str, Any]) -> None:
    answers: dict[bytes, int] = {}

    async def peer() -> None:
        for request in itertools.cycle(_BAD):
            stream = await trio.open_tcp_stream("127.0.0.1", port)
            try:
                await stream.send_all(request)
                reply = b""
                while chunk := await stream.receive_some(4096):
                    reply += chunk
                status = reply[9:12]
                answers[status] = answers.get(status, 0) + 1
            except (trio.BrokenResourceError, OSError):
                pass
            finally:
                await stream.aclose()
                note["answers"] = {k.decode(): v for k, v in answers.items()}

    async with trio.open_nursery() as nursery:
        for _ in range(BAD_PEERS):
            nursery.start_soon(peer)


def _masked_text_frame(payload: bytes) -> bytes:
    """One client text frame, built once and sent many times: the attacker's CPU must not
    compete with the server (the mask key is zero, which leaves the payload as it is)."""
    return b"\x81\xff" + len(payload).to_bytes(8, "big") + b"\0\0\0\0" + payload


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _frames(url: str, payload: bytes, note: dict[str, Any], *, answer: str) -> None:
    """Send ``payload`` back to back, each after the answer to the one before."""
    frame = _masked_text_frame(payload)
    times: list[float] = []
    async with open_raw_websocket(url) as ws:
        await _initialize(ws, "attacker")
        stream = ws._stream  # (the pre-built frame goes out as it is)
        try:
            while True:
                start = time.perf_counter()
                await stream.send_all(frame)
                while True:
                    message = orjson.loads(await ws.get_message())
                    if answer in message or message.get("method") == answer:
                        break
                times.append(time.perf_counter() - start)
                got = message.get("error") or message.get("params", {}).get("rejectionReason")
                note["answer"] = str(got)[:50]
                note["frames"] = len(times)
                note["answer ms median"] = round(statistics.median(times) * 1000, 1)
        except Closed as exc:
            note["closed"] = exc.code


async def costly_frame(port: int, url: str, note: dict[str, Any]) -> None:
    await _frames(url, b"[" + b"[]," * (FRAME_BYTES // 3) + b"[]]", note, answer="error")


async def worst_accepted_frame(port: int, url: str, note: dict[str, Any]) -> None:
    count = MAX_ITEMS - 16  # (the request's own containers and commas count too)
    value = "x" * (FRAME_BYTES // count - 3)
    params = {"items": [value] * count}
    frame = orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping", "params": params})
    await _frames(url, frame, note, answer="result")


async def big_configs(port: int, url: str, note: dict[str, Any]) -> None:
    action = {"type": "root/configChanged", "config": {"k": "x" * (FRAME_BYTES - 200)}}
    params = {"channel": "ahp-root://", "clientSeq": 1, "action": action}
    frame = orjson.dumps({"jsonrpc": "2.0", "method": "dispatchAction", "params": params})
    await _frames(url, frame, note, answer="action")


async def many_terminals(port: int, url: str, note: dict[str, Any]) -> None:
    ids = itertools.count(1)
    async with open_raw_websocket(url) as ws:
        await _initialize(ws, "creator")
        created = 0
        try:
            while True:
                answer = await _call(
                    ws,
                    ids,
                    "createTerminal",
                    {
                        "channel": f"ahp-terminal:/many{created}",
                        "claim": {"kind": "client", "clientId": "creator"},
                    },
                )
                if "error" in answer:
                    note["refused"] = f"{answer['error']['code']} after {created}"
                    await trio.sleep_forever()
                created += 1
        finally:
            with trio.CancelScope(shield=True), trio.move_on_after(30):
                for i in range(created):
                    await _call(ws, ids, "disposeTerminal", {"channel": f"ahp-terminal:/many{i}"})


ATTACKS: list[tuple[str, Attack | None]] = [
    ("none (baseline)", None),
    ("slow upgrades", slow_upgrades),
    ("bad upgrades", bad_upgrades),
    ("costly frame", costly_frame),
    ("worst accepted frame", worst_accepted_frame),
    ("big configs", big_configs),
    ("many terminals", many_terminals),
]


# -- the legitimate client ---------------------------------------------------------------------


async def legitimate(url: str, seconds: float) -> tuple[float, list[float]]:
    """Connect (seconds taken), then keystroke round trips for ``seconds``."""
    dialect = AhpDialect(ECHO)
    start = time.perf_counter()
    async with open_raw_websocket(url, timeout=60) as ws:
        await dialect.handshake(ws)
        connected = time.perf_counter() - start
        samples: list[float] = []
        deadline = time.perf_counter() + seconds
        while time.perf_counter() < deadline:
            await trio.sleep(PAUSE)
            sent = time.perf_counter()
            await ws.send_message(dialect.input_frame("x"))
            while True:
                text, _ = dialect.parse(await ws.get_message())
                if text and "x" in text:
                    break
            samples.append(time.perf_counter() - sent)
    return connected, samples


async def run_attack(name: str, port: int, url: str) -> None:
    """The ``attack`` mode: run one attack until SIGTERM, then print its notes (JSON)."""
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # 1 100 peers
    attack = dict(ATTACKS)[name]
    assert attack is not None
    note: dict[str, Any] = {}
    with trio.open_signal_receiver(signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(attack, port, url, note)
            async for _ in signals:
                nursery.cancel_scope.cancel()
                break
    print(orjson.dumps(note).decode(), flush=True)


async def _attacker(name: str, port: int, url: str) -> trio.Process:
    cmd = [sys.executable, __file__, "attack", name, str(port), url]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return await trio.lowlevel.open_process(cmd, stdout=subprocess.PIPE, env=env)


async def _stop(proc: trio.Process) -> dict[str, Any]:
    proc.send_signal(signal.SIGTERM)
    assert proc.stdout is not None
    out = b""
    with trio.move_on_after(60):
        while chunk := await proc.stdout.receive_some(65536):
            out += chunk
    if proc.returncode is None:
        proc.kill()
    await proc.wait()
    await proc.stdout.aclose()
    try:
        note: dict[str, Any] = orjson.loads(out.splitlines()[-1])
    except (IndexError, orjson.JSONDecodeError):
        note = {"attacker output": out[-200:].decode(errors="replace")}
    return note


def _lower_fd_limit() -> None:
    resource.setrlimit(
        resource.RLIMIT_NOFILE, (NOFILE, resource.getrlimit(resource.RLIMIT_NOFILE)[1])
    )


async def main(seconds: float) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO), "AHP_TOKEN": TOKEN}
    cmd = [sys.executable, "-m", "ahp", "serve", "--port", "0", "--shell", "/bin/cat"]
    with tempfile.TemporaryFile() as log:
        proc = await trio.lowlevel.open_process(
            cmd, stdout=subprocess.PIPE, stderr=log, env=env, preexec_fn=_lower_fd_limit
        )
        assert proc.stdout is not None
        try:
            line = b""
            with trio.fail_after(30):
                while b"\n" not in line:
                    line += await proc.stdout.receive_some(4096)
            url = line.decode().split("\n")[0]
            port = int(re.search(r":(\d+)/", url).group(1))  # type: ignore[union-attr]
            async with open_raw_websocket(url) as ws:
                await _initialize(ws, "setup")
                params = {"channel": ECHO, "claim": {"kind": "client", "clientId": "setup"}}
                await _call(ws, itertools.count(1), "createTerminal", params)
            print(f"server pid {proc.pid}, ulimit -n {NOFILE}, {seconds:g} s per attack")
            print(
                f"{'attack':22} {'connect':>9} {'echo p50':>9} {'p99':>8} {'max':>8} "
                f"{'n':>5} {'RSS':>8} {'peak+':>7} {'log':>5}  notes"
            )
            for name, attack in ATTACKS:
                before = _status(proc.pid)
                cpu_before = _cpu_seconds(proc.pid)
                log.seek(0, os.SEEK_END)
                log_before = log.tell()
                attacker = None
                if attack is not None:
                    attacker = await _attacker(name, port, url)
                    await trio.sleep(2.0)  # let it take hold
                try:
                    with trio.fail_after(seconds + 120):
                        connected, samples = await legitimate(url, seconds)
                finally:
                    note = await _stop(attacker) if attacker is not None else {}
                after = _status(proc.pid)
                note["server CPU s"] = round(_cpu_seconds(proc.pid) - cpu_before, 2)
                rss, peak = after["VmRSS"] / 1024, (after["VmHWM"] - before["VmHWM"]) / 1024
                log.seek(log_before)
                lines = log.read().count(b"\n")
                ms = sorted(s * 1000 for s in samples)
                p99 = ms[min(len(ms) - 1, int(len(ms) * 0.99))]
                print(
                    f"{name:22} {connected * 1000:7.1f}ms {statistics.median(ms):7.2f}ms "
                    f"{p99:6.2f}ms {ms[-1]:6.1f}ms {len(ms):5d} "
                    f"{rss:6.1f}Mi {peak:5.1f}Mi "
                    f"{lines:5d}  {note}",
                    flush=True,
                )
                await trio.sleep(2.0)  # dropped peers' fds close, terminals are reaped
        finally:
            proc.send_signal(signal.SIGTERM)
            with trio.move_on_after(30):
                await proc.wait()
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
            await proc.stdout.aclose()
            log.seek(0)
            tail = log.read().decode(errors="replace").splitlines()[-5:]
            print("last log lines:", *tail, sep="\n  ")


if __name__ == "__main__":
    if sys.argv[1:2] == ["attack"]:
        trio.run(run_attack, sys.argv[2], int(sys.argv[3]), sys.argv[4])
    else:
        trio.run(main, float(sys.argv[1]) if len(sys.argv) > 1 else 6.0)
