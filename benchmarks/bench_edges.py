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

Issue 25 (round three; the legitimate client also watches ``ahp-root://``, as an
editor does, so it pays what a root watcher pays): ``long titles`` (200
terminals named with 4096 characters, control characters among them, then 2000
title changes), ``fragmented scrollback`` (4 terminals printing lines and
titles), ``child title loop`` (a shell retitling its terminal in a loop, 50
idle terminals beside it), ``1-byte fragments`` / ``64-byte fragments`` (one
message of nearly 8 MiB, fragmented), ``partial frames`` (30 connections each
holding 8.3 MB of an unfinished frame), ``process requests`` (``jobs`` and
``ttyStatus`` on a terminal running 2 x 1000 processes), ``big clientId
replay`` (a 256 KB ``clientId``, 1000 keystrokes, a reconnect asking for
replay), ``big clientId viewers`` (a 1 MB ``clientId``, 300 keystrokes, one
viewer reading, one silent), ``silent snapshots`` (8 silent clients each
asking for a 15 MB snapshot), ``snapshot readers`` (8 clients subscribing to a
9 MB snapshot, reading it, unsubscribing, over and over), ``silent subscriber``
(one client subscribed to 30 printing terminals, never reading), ``big session
claim`` (a 5 MB session
claim, then a child's title storm), ``idle connections`` (900 authenticated
connections doing nothing), ``fork and dispose`` (a terminal forking 1000
processes, then disposed), ``keystroke flood`` (24 MiB of keystrokes). Run some
with ``--only name,name``; ``--repo PATH`` runs the server (and only the
server) from another checkout, for before/after comparisons; ``--child-nice N``
passes ``serve --child-nice N`` (else the server's default, 0) and ``--flood-nice N``
passes ``serve --flood-nice N`` (else its default, 10; 0 turns the flood watch off).

Each row reports the server's RSS before the attack, its peak during it (the
peak is reset first: ``/proc/PID/clear_refs``) and after it (the attack's
connections closed, its terminals disposed, 3 s later); its notes, the server's CPU
time during the attack (``server CPU s``) and how long its event loop's thread was
runnable but waited for a core (``loop waited s``: the children's CPU, not the
server's work, when it is a large part of the attack's seconds).
"""

from __future__ import annotations

import argparse
import contextlib
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
#: Where the server runs from (``--repo``): this checkout unless told otherwise.
SERVER_REPO = REPO
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


def _loop_waited_seconds(pid: int) -> float:
    """Seconds the server's main thread (its event loop) was runnable but waited for a
    CPU (``/proc/PID/task/PID/schedstat``, second field; 0 where the kernel has none):
    a stall the server's own work does not explain."""
    try:
        with open(f"/proc/{pid}/task/{pid}/schedstat") as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return 0.0


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
            with trio.CancelScope(shield=True), trio.move_on_after(120):
                for i in range(created):
                    await _call(ws, ids, "disposeTerminal", {"channel": f"ahp-terminal:/many{i}"})


# -- issue 25 ----------------------------------------------------------------------------------


class _Peer:
    """An attacker's connection: a task drains everything the server sends (so the
    attacker is not cut off for not reading, unless it means to be); answers are
    routed to their callers."""

    def __init__(self, ws: RawWebSocket) -> None:
        self.ws = ws
        self.ids = itertools.count(1)
        self.seq = itertools.count(1)
        self._waiting: dict[int, trio.MemorySendChannel[dict[str, Any]]] = {}
        self.received = 0
        self.rejected = 0
        self.draining = False

    async def drain(self) -> None:
        self.draining = True
        try:
            await self._drain()
        finally:
            self.draining = False
            # A call waiting for its answer reads for itself from now on (the drain is
            # cancelled when the attack is: a shielded clean-up's disposeTerminal then
            # waited the whole 120 s for an answer no one would route; issue 25).
            for waiting in self._waiting.values():
                waiting.close()
            self._waiting.clear()

    async def _drain(self) -> None:
        with contextlib.suppress(Closed, trio.BrokenResourceError, trio.ClosedResourceError):
            while True:
                raw = await self.ws.get_message()
                self.received += len(raw)
                if b'"rejectionReason"' in raw[:4096]:
                    self.rejected += 1
                if raw.startswith(b'{"jsonrpc":"2.0","id":'):
                    message = orjson.loads(raw)
                    channel = self._waiting.pop(message.get("id"), None)
                    if channel is not None:
                        channel.send_nowait(message)

    async def call(self, method: str, params: Any) -> dict[str, Any]:
        msg_id = next(self.ids)
        send, receive = trio.open_memory_channel[dict[str, Any]](1)
        self._waiting[msg_id] = send
        message = {"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params}
        await self.ws.send_message(orjson.dumps(message).decode())
        if self.draining:
            try:
                return await receive.receive()
            except trio.EndOfChannel:  # the drain ended before the answer came
                pass
        self._waiting.pop(msg_id, None)
        while True:  # (cancelled: the attack's clean-up reads for itself)
            answer: dict[str, Any] = orjson.loads(await self.ws.get_message())
            if answer.get("id") == msg_id:
                return answer

    async def dispatch(self, channel: str, action: dict[str, Any]) -> None:
        params = {"channel": channel, "clientSeq": next(self.seq), "action": action}
        message = {"jsonrpc": "2.0", "method": "dispatchAction", "params": params}
        await self.ws.send_message(orjson.dumps(message).decode())


@contextlib.asynccontextmanager
async def _peer(
    url: str, client_id: str, *, subscriptions: tuple[str, ...] = (), read: bool = True
) -> Any:
    async with open_raw_websocket(url, timeout=60) as ws:
        peer = _Peer(ws)
        params = {
            "channel": "ahp-root://",
            "protocolVersions": ["0.5.0"],
            "clientId": client_id,
            "initialSubscriptions": list(subscriptions),
        }
        answer = await _call(ws, itertools.count(1000), "initialize", params)
        peer.answer = answer  # type: ignore[attr-defined]
        async with trio.open_nursery() as nursery:
            if read:
                peer.draining = True  # (from now on: answers come through the drain)
                nursery.start_soon(peer.drain)
            try:
                yield peer
            finally:
                nursery.cancel_scope.cancel()


async def _terminals(
    peer: _Peer, prefix: str, count: int, note: dict[str, Any], **params: Any
) -> list[str]:
    uris = []
    for i in range(count):
        uri = f"ahp-terminal:/{prefix}{i}"
        answer = await peer.call(
            "createTerminal",
            {"channel": uri, "claim": {"kind": "client", "clientId": "attacker"}, **params},
        )
        if "error" in answer:
            note["create"] = str(answer["error"].get("message"))[:60]
            break
        uris.append(uri)
    note["terminals"] = len(uris)
    return uris


async def _dispose(peer: _Peer, uris: list[str]) -> None:
    with trio.CancelScope(shield=True), trio.move_on_after(120):
        for uri in uris:
            await peer.call("disposeTerminal", {"channel": uri})


def _odd_title(n: int) -> str:
    """4096 characters, a control character every 16 (each one 6 bytes of JSON)."""
    return (f"t{n:06d}\x01\x07\x1b" + "x" * 6) * 256


async def long_titles(port: int, url: str, note: dict[str, Any]) -> None:
    async with _peer(url, "attacker", subscriptions=("ahp-root://",)) as peer:
        uris = await _terminals(peer, "title", 200, note, name=_odd_title(0))
        try:
            for n in range(2000):
                await peer.dispatch(
                    uris[n % len(uris)], {"type": "terminal/titleChanged", "title": _odd_title(n)}
                )
            note["title changes"] = 2000
            await trio.sleep_forever()
        finally:
            note["received MB"] = round(peer.received / 1e6, 1)
            await _dispose(peer, uris)


async def _shell_loop(peer: _Peer, uris: list[str], script: str) -> None:
    for uri in uris:
        await peer.dispatch(uri, {"type": "terminal/input", "data": script + "\r"})


async def fragmented_scrollback(port: int, url: str, note: dict[str, Any]) -> None:
    script = (
        "i=0; while :; do i=$((i+1)); printf '\\033]0;line %d\\007%s\\n' $i "
        "'some output line, some output line, some output line'; done"
    )
    async with _peer(url, "attacker") as peer:
        uris = await _terminals(peer, "frag", 4, note)
        try:
            for uri in uris:
                await peer.call("subscribe", {"channel": uri})
            await _shell_loop(peer, uris, script)
            await trio.sleep_forever()
        finally:
            note["received MB"] = round(peer.received / 1e6, 1)
            await _dispose(peer, uris)


async def child_title_loop(port: int, url: str, note: dict[str, Any]) -> None:
    script = "i=0; while :; do i=$((i+1)); printf '\\033]0;title %d\\007' $i; done"
    async with _peer(url, "attacker") as peer:
        uris = await _terminals(peer, "idle", 51, note)
        try:
            await _shell_loop(peer, uris[:1], script)
            await trio.sleep_forever()
        finally:
            await _dispose(peer, uris)


def _fragments(payload: bytes, size: int) -> bytes:
    """``payload`` as masked (zero key) text fragments of ``size`` (< 126) bytes, built
    with slice assignments (C speed: the attacker's CPU must not compete with the
    server); the payload is padded with spaces (valid after JSON) to a multiple."""
    assert 0 < size < 126
    payload += b" " * (-len(payload) % size)
    count = len(payload) // size
    stride = 6 + size
    out = bytearray(stride * count)  # (mask keys: zero)
    out[0::stride] = b"\x00" * count  # continuation, not final
    out[1::stride] = bytes((0x80 | size,)) * count
    for k in range(size):
        out[6 + k :: stride] = payload[k::size]
    out[0] = 0x01  # the first frame: text
    out[-stride] |= 0x80  # the last: final
    return bytes(out)


async def _fragmented(url: str, size: int, note: dict[str, Any]) -> None:
    value = "x" * (FRAME_BYTES - 100)
    payload = orjson.dumps({"jsonrpc": "2.0", "id": 7, "method": "ping", "params": {"v": value}})
    wire = _fragments(payload, size)
    note["wire MB"] = round(len(wire) / 1e6, 1)
    async with open_raw_websocket(url) as ws:
        await _initialize(ws, "attacker")
        start = time.perf_counter()
        try:
            await ws._stream.send_all(wire)
            while True:
                message = orjson.loads(await ws.get_message())
                if message.get("id") == 7:
                    note["answered in s"] = round(time.perf_counter() - start, 1)
                    break
            await trio.sleep_forever()
        except (Closed, trio.BrokenResourceError) as exc:
            note["closed"] = getattr(exc, "code", "reset")
            note["after s"] = round(time.perf_counter() - start, 1)
            await trio.sleep_forever()


async def one_byte_fragments(port: int, url: str, note: dict[str, Any]) -> None:
    await _fragmented(url, 1, note)


async def small_fragments(port: int, url: str, note: dict[str, Any]) -> None:
    await _fragmented(url, 64, note)


async def partial_frames(port: int, url: str, note: dict[str, Any]) -> None:
    """30 connections each send all but the last byte of a frame of nearly 8 MiB."""
    payload = b"[" + b'"x",' * ((FRAME_BYTES - 2) // 4) + b"1]"
    frame = _masked_text_frame(payload)[:-1]
    held = 0
    closed: dict[str, int] = {}

    async def one(i: int) -> None:
        nonlocal held
        try:
            async with open_raw_websocket(url) as ws:
                await _initialize(ws, f"partial{i}")
                await ws._stream.send_all(frame)
                held += 1
                note["held"] = held
                await ws.get_message()  # (the server's close, if any)
        except (Closed, trio.BrokenResourceError, OSError) as exc:
            key = str(getattr(exc, "code", type(exc).__name__))
            closed[key] = closed.get(key, 0) + 1
            note["closed"] = closed
            await trio.sleep_forever()

    async with trio.open_nursery() as nursery:
        for i in range(30):
            nursery.start_soon(one, i)


async def process_requests(port: int, url: str, note: dict[str, Any]) -> None:
    script = "for j in 1 2; do (for i in $(seq 1000); do sleep 300 & done; wait) & done"
    async with _peer(url, "attacker") as peer:
        uris = await _terminals(peer, "procs", 1, note)
        try:
            await _shell_loop(peer, uris, script)
            await trio.sleep(3.0)  # (the 2000 sleeps start)
            requests = 0
            while True:
                for method in ("x-ahp-terminals/jobs", "x-ahp-terminals/ttyStatus"):
                    await peer.call(method, {"channel": uris[0]})
                    requests += 1
                    note["requests"] = requests
        finally:
            await _dispose(peer, uris)


async def _keystrokes(peer: _Peer, uri: str, count: int) -> None:
    for _ in range(count):
        await peer.dispatch(uri, {"type": "terminal/input", "data": "k"})


async def big_client_id_replay(port: int, url: str, note: dict[str, Any]) -> None:
    big = "c" * (256 * 1024)
    async with _peer(url, "attacker") as owner:
        uris = await _terminals(owner, "replay", 1, note)
        try:
            async with _peer(url, big, subscriptions=tuple(uris)) as peer:
                note["initialize"] = str(peer.answer.get("error", {}).get("message", "ok"))[:50]
                if "error" in peer.answer:
                    await trio.sleep_forever()
                seq = peer.answer["result"]["serverSeq"]
                await _keystrokes(peer, uris[0], 1000)
                await trio.sleep(1.0)
            async with open_raw_websocket(url, timeout=60) as ws:
                params = {
                    "channel": "ahp-root://",
                    "clientId": big,
                    "lastSeenServerSeq": seq,
                    "subscriptions": uris,
                }
                start = time.perf_counter()
                answer = await _call(ws, itertools.count(1), "reconnect", params)
                note["reconnect s"] = round(time.perf_counter() - start, 2)
                note["replayed"] = len(answer.get("result", {}).get("actions", ()))
                await trio.sleep_forever()
        finally:
            await _dispose(owner, uris)


async def big_client_id_viewers(port: int, url: str, note: dict[str, Any]) -> None:
    big = "v" * (1024 * 1024)
    async with _peer(url, "attacker") as owner:
        uris = await _terminals(owner, "viewers", 1, note)
        try:
            async with (
                _peer(url, "reader", subscriptions=tuple(uris)),
                _peer(url, "silent", subscriptions=tuple(uris), read=False),
                _peer(url, big, subscriptions=tuple(uris)) as typist,
            ):
                note["initialize"] = str(typist.answer.get("error", {}).get("message", "ok"))[:50]
                if "error" not in typist.answer:
                    await _keystrokes(typist, uris[0], 300)
                await trio.sleep_forever()
        finally:
            await _dispose(owner, uris)


#: Output that is almost all escape sequences: every ESC is 6 bytes of JSON.
_ESCAPES = "printf '\\033[1m\\033[0m%.0s' $(seq 200000)"


async def silent_snapshots(port: int, url: str, note: dict[str, Any]) -> None:
    async with _peer(url, "attacker") as owner:
        uris = await _terminals(owner, "snap", 1, note)
        try:
            await _shell_loop(owner, uris, f"{_ESCAPES}; {_ESCAPES}; {_ESCAPES}")
            await trio.sleep(4.0)  # (the scrollback fills)
            async with contextlib.AsyncExitStack() as stack:
                for i in range(8):
                    await stack.enter_async_context(
                        _peer(url, f"silent{i}", subscriptions=tuple(uris), read=False)
                    )
                note["silent clients"] = 8
                await trio.sleep_forever()
        finally:
            await _dispose(owner, uris)


async def snapshot_readers(port: int, url: str, note: dict[str, Any]) -> None:
    """8 clients that read, each subscribing to a terminal of ~9 MB of escape-dense
    snapshot, reading the answer, unsubscribing, again and again: big answers encoded
    back to back (issue 25 item 5)."""
    async with _peer(url, "attacker") as owner:
        uris = await _terminals(owner, "snapread", 1, note)
        try:
            await _shell_loop(owner, uris, f"{_ESCAPES}; {_ESCAPES}; {_ESCAPES}")
            await trio.sleep(4.0)  # (the scrollback fills)
            answers = 0

            async def reader(i: int) -> None:
                nonlocal answers
                async with open_raw_websocket(url, timeout=60) as ws:
                    await _initialize(ws, f"reader{i}")
                    ids = itertools.count(1)
                    while True:
                        for method in ("subscribe", "unsubscribe"):
                            msg_id = next(ids)
                            request = {"jsonrpc": "2.0", "id": msg_id, "method": method}
                            request["params"] = {"channel": uris[0]}
                            await ws.send_message(orjson.dumps(request).decode())
                            expect = b'{"jsonrpc":"2.0","id":%d,' % msg_id
                            while not (await ws.get_message()).startswith(expect):
                                pass
                        answers += 1
                        note["snapshots read"] = answers

            async with trio.open_nursery() as nursery:
                for i in range(8):
                    nursery.start_soon(reader, i)
        finally:
            await _dispose(owner, uris)


async def silent_subscriber(port: int, url: str, note: dict[str, Any]) -> None:
    script = "while :; do echo 'printing, printing, printing, printing, printing'; done"
    async with _peer(url, "attacker") as owner:
        uris = await _terminals(owner, "print", 30, note)
        try:
            async with _peer(url, "silent", subscriptions=tuple(uris), read=False):
                await _shell_loop(owner, uris, script)
                await trio.sleep_forever()
        finally:
            await _dispose(owner, uris)


async def big_session_claim(port: int, url: str, note: dict[str, Any]) -> None:
    claim = {"kind": "session", "session": "copilot:/" + "s" * (5 * 1024 * 1024)}
    script = "i=0; while :; do i=$((i+1)); printf '\\033]0;title %d\\007' $i; done"
    async with _peer(url, "attacker", subscriptions=("ahp-root://",)) as peer:
        uri = "ahp-terminal:/claimed"
        answer = await peer.call("createTerminal", {"channel": uri, "claim": claim})
        note["create"] = str(answer.get("error", {}).get("message", "ok"))[:50]
        uris = [uri] if "error" not in answer else []
        if not uris:
            uris = await _terminals(peer, "unclaimed", 1, note)
            await peer.dispatch(uris[0], {"type": "terminal/claimed", "claim": claim})
        try:
            await _shell_loop(peer, uris, script)
            await trio.sleep_forever()
        finally:
            await _dispose(peer, uris)


async def idle_connections(port: int, url: str, note: dict[str, Any]) -> None:
    opened = 0
    refused: dict[str, int] = {}

    async def one(i: int) -> None:
        nonlocal opened
        try:
            async with open_raw_websocket(url, timeout=60) as ws:
                await _initialize(ws, f"idle{i}")
                opened += 1
                note["open"] = opened
                await ws.get_message()
        except (Closed, OSError, trio.BrokenResourceError, trio.TooSlowError) as exc:
            key = str(getattr(exc, "code", type(exc).__name__))
            refused[key] = refused.get(key, 0) + 1
            note["refused"] = refused
        await trio.sleep_forever()

    async with trio.open_nursery() as nursery:
        for i in range(900):
            nursery.start_soon(one, i)
            await trio.sleep(0.002)


async def fork_and_dispose(port: int, url: str, note: dict[str, Any]) -> None:
    script = "for i in $(seq 1000); do sleep 300 & done"
    async with _peer(url, "attacker") as peer:
        rounds = 0
        while True:
            uris = await _terminals(peer, f"fork{rounds}-", 1, note)
            await _shell_loop(peer, uris, script)
            await trio.sleep(2.0)
            start = time.perf_counter()
            await _dispose(peer, uris)
            rounds += 1
            note["disposed"] = rounds
            note["dispose s"] = round(time.perf_counter() - start, 2)


async def keystroke_flood(port: int, url: str, note: dict[str, Any]) -> None:
    chunk = "k" * 65536
    async with _peer(url, "attacker") as peer:
        uris = await _terminals(peer, "flood", 1, note)
        try:
            await _shell_loop(peer, uris, "exec cat >/dev/null")
            for n in range(24 * 16):
                await peer.dispatch(uris[0], {"type": "terminal/input", "data": chunk})
                if n % 16 == 15:
                    await peer.call("ping", {})
            note["sent MiB"] = 24
            note["rejected"] = peer.rejected
            await trio.sleep_forever()
        finally:
            await _dispose(peer, uris)


ATTACKS: list[tuple[str, Attack | None]] = [
    ("none (baseline)", None),
    ("slow upgrades", slow_upgrades),
    ("bad upgrades", bad_upgrades),
    ("costly frame", costly_frame),
    ("worst accepted frame", worst_accepted_frame),
    ("big configs", big_configs),
    ("long titles", long_titles),
    ("fragmented scrollback", fragmented_scrollback),
    ("child title loop", child_title_loop),
    ("1-byte fragments", one_byte_fragments),
    ("64-byte fragments", small_fragments),
    ("partial frames", partial_frames),
    ("process requests", process_requests),
    ("big clientId replay", big_client_id_replay),
    ("big clientId viewers", big_client_id_viewers),
    ("silent snapshots", silent_snapshots),
    ("snapshot readers", snapshot_readers),
    ("silent subscriber", silent_subscriber),
    ("big session claim", big_session_claim),
    ("idle connections", idle_connections),
    ("fork and dispose", fork_and_dispose),
    ("keystroke flood", keystroke_flood),
    ("many terminals", many_terminals),  # (last: a slow server may leave some behind)
]


# -- the legitimate client ---------------------------------------------------------------------


async def legitimate(url: str, seconds: float) -> tuple[float, list[float]]:
    """Connect (seconds taken), subscribe to the root channel too (what an editor
    does: it pays what every root watcher pays), then keystroke round trips for
    ``seconds``."""
    dialect = AhpDialect(ECHO)
    start = time.perf_counter()
    async with open_raw_websocket(url, timeout=60) as ws:
        await dialect.handshake(ws)
        connected = time.perf_counter() - start
        await ws.send_message(
            orjson.dumps(
                {"jsonrpc": "2.0", "id": 99, "method": "subscribe", "params": {"channel": ROOT}}
            ).decode()
        )
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


ROOT = "ahp-root://"


async def run_attack(name: str, port: int, url: str) -> None:
    """The ``attack`` mode: run one attack until SIGTERM, then print its notes (JSON)."""
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # 1 100 peers
    attack = dict(ATTACKS)[name]
    assert attack is not None
    note: dict[str, Any] = {}
    with trio.open_signal_receiver(signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:

            async def guarded() -> None:
                try:
                    await attack(port, url, note)
                except Exception as exc:  # (reported, not raised: the run goes on)
                    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
                        exc = exc.exceptions[0]  # type: ignore[assignment]
                    note["attack failed"] = f"{type(exc).__name__}: {exc}"[:120]

            nursery.start_soon(guarded)
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
    with trio.move_on_after(180):
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


def _reset_peak(pid: int) -> None:
    """Reset the process's peak RSS (``VmHWM``) to its current RSS (Linux 4.0+)."""
    with contextlib.suppress(OSError), open(f"/proc/{pid}/clear_refs", "w") as f:
        f.write("5")


async def main(
    seconds: float, only: list[str] | None, nice: int | None, flood_nice: int | None = None
) -> None:
    env = {**os.environ, "PYTHONPATH": str(SERVER_REPO), "AHP_TOKEN": TOKEN}
    cmd = [sys.executable, "-m", "ahp", "serve", "--port", "0", "--shell", "/bin/sh"]
    if nice is not None:
        cmd += ["--child-nice", str(nice)]
    if flood_nice is not None:
        cmd += ["--flood-nice", str(flood_nice)]
    attacks = [(n, a) for n, a in ATTACKS if only is None or n in only or a is None]
    with tempfile.TemporaryFile() as log:
        proc = await trio.lowlevel.open_process(
            cmd,
            stdout=subprocess.PIPE,
            stderr=log,
            env=env,
            preexec_fn=_lower_fd_limit,
            cwd=str(SERVER_REPO),
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
                params: dict[str, object] = {
                    "channel": ECHO,
                    "claim": {"kind": "client", "clientId": "setup"},
                }
                await _call(ws, itertools.count(1), "createTerminal", params)
                action = {"type": "terminal/input", "data": "exec cat\r"}
                params = {"channel": ECHO, "clientSeq": 1, "action": action}
                await ws.send_message(
                    orjson.dumps(
                        {"jsonrpc": "2.0", "method": "dispatchAction", "params": params}
                    ).decode()
                )
                await trio.sleep(1.0)
            print(
                f"server pid {proc.pid} from {SERVER_REPO}, ulimit -n {NOFILE}, "
                f"{seconds:g} s per attack, children nice "
                f"{'serve default' if nice is None else nice}, flood nice "
                f"{'serve default' if flood_nice is None else flood_nice}, "
                f"load {os.getloadavg()[0]:.1f}, {time.strftime('%H:%M:%S UTC', time.gmtime())}"
            )
            print(
                f"{'attack':22} {'connect':>9} {'echo p50':>9} {'p99':>8} {'max':>8} "
                f"{'n':>5} {'RSS':>7} {'peak':>7} {'after':>7} {'log':>5}  notes"
            )
            for name, attack in attacks:
                before = _status(proc.pid)
                _reset_peak(proc.pid)
                cpu_before = _cpu_seconds(proc.pid)
                waited_before = _loop_waited_seconds(proc.pid)
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
                peak = _status(proc.pid)["VmHWM"] / 1024
                note["server CPU s"] = round(_cpu_seconds(proc.pid) - cpu_before, 2)
                note["loop waited s"] = round(_loop_waited_seconds(proc.pid) - waited_before, 2)
                await trio.sleep(3.0)  # dropped peers' fds close, terminals are reaped
                after = _status(proc.pid)["VmRSS"] / 1024
                log.seek(log_before)
                lines = log.read().count(b"\n")
                ms = sorted(s * 1000 for s in samples)
                p99 = ms[min(len(ms) - 1, int(len(ms) * 0.99))]
                print(
                    f"{name:22} {connected * 1000:7.1f}ms {statistics.median(ms):7.2f}ms "
                    f"{p99:6.2f}ms {ms[-1]:6.1f}ms {len(ms):5d} "
                    f"{before['VmRSS'] / 1024:5.1f}Mi {peak:5.1f}Mi {after:5.1f}Mi "
                    f"{lines:5d}  {note}",
                    flush=True,
                )
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
        parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
        parser.add_argument("seconds", nargs="?", type=float, default=6.0)
        parser.add_argument("--only", help="comma-separated attack names")
        parser.add_argument("--repo", type=Path, help="run the server from this checkout")
        parser.add_argument("--child-nice", type=int, help="serve --child-nice N")
        parser.add_argument("--flood-nice", type=int, help="serve --flood-nice N")
        args = parser.parse_args()
        if args.repo is not None:
            SERVER_REPO = args.repo.resolve()
        names = args.only.split(",") if args.only else None
        if names is not None and (unknown := set(names) - dict(ATTACKS).keys()):
            parser.error(f"unknown attacks: {sorted(unknown)}")
        trio.run(main, args.seconds, names, args.child_nice, args.flood_nice)
