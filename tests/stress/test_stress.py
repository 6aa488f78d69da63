"""Load: many cycles, many terminals and viewers, a long flood with a stalled viewer.

Run with ``nox -s stress`` (``-- --flood-seconds 60 --cycles 1000`` to change the
defaults). Each scenario runs its own ``python -m ahp serve`` subprocess, so the
figures are the server's alone: open fds, child processes, zombies and RSS at the
start and at the end (every terminal disposed, every client gone). The start is
taken after a warm-up with the same workload (one round; two short ones for the
flood, the higher RSS of the two): first imports, allocator arenas and the
bounded replay log (8 MiB) are steady state, not leaks; a leak shows as growth
between rounds. Counts must be equal at start and end and RSS within 10%.
Every client's mirror (``ahp.client``: the project's reducers) must equal the
server's snapshot at the end; where the server has trimmed scrollback, the
retained tail is compared.

The figures are printed (the session runs pytest with ``-s``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import attrs
import orjson
import pytest
import trio

from ahp.client import Client, connect
from ahp.protocol.actions import (
    ActionEnvelope,
    RootTerminalsChanged,
    TerminalData,
    TerminalInput,
)
from ahp.protocol.codec import structure, unstructure
from ahp.protocol.state import Snapshot, TerminalState
from ahp.reducers import DEFAULT_SCROLLBACK, low_water_for, trim
from ahp.reducers.scrollback import content_length
from tests.helpers import kill_and_reap, stat_fields

REPO = Path(__file__).resolve().parents[2]
TOKEN = "stress-token"


# -- the server and its figures ---------------------------------------------------------------


@attrs.frozen
class Figures:
    rss_mib: float
    fds: int
    children: int
    zombies: int

    def row(self) -> str:
        return (
            f"rss {self.rss_mib:7.1f} MiB  fds {self.fds:4d}  "
            f"children {self.children:3d}  zombies {self.zombies:3d}"
        )


def figures(pid: int) -> Figures:
    with open(f"/proc/{pid}/status") as f:
        rss_kib = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
    kids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = stat_fields(int(entry))
            if fields is not None and int(fields[1]) == pid:
                kids.append(fields[0])
    return Figures(
        rss_mib=rss_kib / 1024,
        fds=len(os.listdir(f"/proc/{pid}/fd")),
        children=len(kids),
        zombies=sum(1 for state in kids if state == "Z"),
    )


@attrs.define
class Server:
    proc: trio.Process
    url: str

    @property
    def pid(self) -> int:
        return int(self.proc.pid)

    def figures(self) -> Figures:
        return figures(self.pid)


@asynccontextmanager
async def sidecar() -> AsyncIterator[Server]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    cmd = [sys.executable, "-m", "ahp", "serve", "--port", "0", "--token", TOKEN]
    cmd += ["--log-level", "warning"]
    proc = await trio.lowlevel.open_process(
        cmd, stdout=subprocess.PIPE, stderr=None, env=env, cwd=str(REPO)
    )
    assert proc.stdout is not None
    try:
        line = b""
        with trio.fail_after(30):
            while b"\n" not in line:
                chunk = await proc.stdout.receive_some(4096)
                assert chunk, "the server exited before printing its URL"
                line += chunk
        yield Server(proc, line.decode().strip())
        proc.send_signal(signal.SIGTERM)
        with trio.fail_after(60):
            assert await proc.wait() == 0
    finally:
        await kill_and_reap(proc)


def report(title: str, lines: list[str]) -> None:
    text = f"== {title} ({time.strftime('%Y-%m-%d %H:%M:%S')})\n" + "".join(
        f"   {line}\n" for line in lines
    )
    print("\n" + text, flush=True)


def check_stable(start: Figures, end: Figures) -> None:
    assert (end.fds, end.children, end.zombies) == (start.fds, start.children, start.zombies), (
        start,
        end,
    )
    assert end.rss_mib <= start.rss_mib * 1.10, (start, end)


async def wait_settled(server: Server, start: Figures, *, fds: int | None = -1) -> Figures:
    """Figures once the counts are back to ``start``'s (sockets and children are closed
    and reaped asynchronously); ``fds=None``: whatever the fd count."""
    with trio.move_on_after(30):
        while True:
            now = server.figures()
            if (now.children, now.zombies) == (start.children, start.zombies) and (
                fds is None or now.fds == start.fds
            ):
                return now
            await trio.sleep(0.1)
    return server.figures()


async def warm_up(server: Server) -> Figures:
    """Start figures for a steady state: the server has served a client, run terminals
    and filled its bounded replay log (8 MiB of envelopes it keeps by design); then
    every client and terminal is gone again."""
    async with connect(server.url, client_id="warm-up") as client:
        for i in range(10):
            uri = f"ahp-terminal:/warm{i}"
            await client.create_terminal(uri)
            await client.dispatch(uri, TerminalInput(data="echo hi\r"))

            def echoed(uri: str = uri) -> bool:
                return client.terminal_state(uri).text().count("hi\r\n") >= 2

            await client.wait_for(echoed, timeout=60)
            await client.dispose_terminal(uri)
        uri = "ahp-terminal:/warm-log"
        await client.create_terminal(uri, subscribe=False)
        done = trio.Event()

        def watch(envelope: ActionEnvelope) -> None:
            if envelope.channel != "ahp-root://":
                return
            action = envelope.action
            assert isinstance(action, RootTerminalsChanged)  # the root's only action here
            if any(t.exitCode == 0 for t in action.terminals):
                done.set()

        client.on_envelope(watch)
        await client.dispatch(uri, TerminalInput(data="stty -echo; seq 1 1500000; exit 0\r"))
        with trio.fail_after(300):
            await done.wait()
        await client.dispose_terminal(uri)
    return await wait_settled(server, Figures(0, 0, 0, 0), fds=None)


def text_of(state: TerminalState) -> str:
    return state.text()


def same_except_content(a: TerminalState, b: TerminalState) -> bool:
    strip: dict[str, Any] = {"content": ()}
    left: dict[str, Any] = unstructure(attrs.evolve(a, **strip))
    right: dict[str, Any] = unstructure(attrs.evolve(b, **strip))
    return left == right


async def converged(
    reference: Client, clients: list[Client], uris: list[str], *, attempts: int = 200
) -> dict[str, Snapshot]:
    """Snapshots of ``uris`` taken when no envelope follows them on any client.

    ``reference`` asks for fresh snapshots (without touching its mirrors); every
    client then pings (a fence: envelopes sent before the answer are applied before
    it). If a client saw an envelope newer than the snapshots, output was still
    arriving: try again.
    """
    for _ in range(attempts):
        snaps = {}
        for uri in uris:
            raw = await reference.request("subscribe", {"channel": uri})
            snaps[uri] = structure(raw["snapshot"], Snapshot)
        newest = max(s.fromSeq for s in snaps.values())
        for client in clients:
            await client.ping()
        if all(s.fromSeq == newest for s in snaps.values()) and all(
            c.last_seen_seq <= newest for c in clients
        ):
            return snaps
        await trio.sleep(0.1)
    raise AssertionError("the terminals never went quiet")


# -- 1,000 create -> run -> dispose cycles -------------------------------------------------------


async def test_create_run_dispose_cycles(request: pytest.FixtureRequest) -> None:
    cycles: int = request.config.getoption("--cycles")
    workers = 4
    async with sidecar() as server:
        start = await warm_up(server)
        started = time.monotonic()
        done = await _cycles(server, cycles, workers)
        took = time.monotonic() - started
        end = await wait_settled(server, start)
        report(
            f"{cycles} create -> run (echo hi) -> dispose cycles over WebSocket, "
            f"{workers} at a time",
            [
                f"start: {start.row()}",
                f"end:   {end.row()}",
                f"{done} cycles in {took:.1f} s ({done / took:.1f} cycles/s)",
            ],
        )
        assert done == cycles
        check_stable(start, end)


async def _cycles(server: Server, cycles: int, workers: int) -> int:
    async with connect(server.url, client_id="cycler") as client:
        done = 0

        async def cycle(uri: str) -> None:
            nonlocal done
            await client.create_terminal(uri)
            await client.dispatch(uri, TerminalInput(data="echo hi\r"))
            # "hi\r\n" once in the typed line's echo, once as the output.
            await client.wait_for(
                lambda: client.terminal_state(uri).text().count("hi\r\n") >= 2, timeout=60
            )
            await client.dispose_terminal(uri)
            done += 1

        async def worker(w: int) -> None:
            for i in range(w, cycles, workers):
                await cycle(f"ahp-terminal:/c{i}")

        with trio.fail_after(max(600, cycles * 2)):
            async with trio.open_nursery() as nursery:
                for w in range(workers):
                    nursery.start_soon(worker, w)
        assert client.root.terminals == ()
        return done


# -- 50 terminals printing at once to 5 clients --------------------------------------------------


async def test_fifty_terminals_five_clients() -> None:
    async with sidecar() as server:
        await warm_up(server)
        await _fifty(server, "warm")  # one round of the same workload: the baseline
        start = await wait_settled(server, Figures(0, 0, 0, 0), fds=None)
        stats = await _fifty(server, "p")
        end = await wait_settled(server, start)
    report(
        "50 terminals printing at once (seq 1 30000) to 5 clients",
        [
            f"start: {start.row()}  (after one warm-up round of the same workload)",
            f"peak:  {stats['peak'].row()}",
            f"end:   {end.row()}",
            f"output: {stats['chars']} chars per terminal; each client received "
            f"{stats['min_mb']:.1f}-{stats['max_mb']:.1f} MB in {stats['took']:.1f} s",
            f"mirrors equal to the server's snapshots: {stats['equal']} of {stats['mirrors']} "
            f"(text and fields), {stats['identical']} identical part by part",
        ],
    )
    check_stable(start, end)


async def _fifty(server: Server, tag: str) -> dict[str, Any]:
    uris = [f"ahp-terminal:/{tag}{i}" for i in range(50)]
    async with AsyncExitStack() as stack:
        clients = [
            await stack.enter_async_context(connect(server.url, client_id=f"{tag}-viewer{i}"))
            for i in range(5)
        ]
        received = [0] * len(clients)
        finished: list[set[str]] = [set() for _ in clients]
        tails: list[dict[str, str]] = [{} for _ in clients]

        def counter(i: int) -> Callable[[ActionEnvelope], None]:
            def count(envelope: ActionEnvelope) -> None:
                if isinstance(envelope.action, TerminalData):
                    received[i] += len(envelope.action.data)
                    t = (tails[i].get(envelope.channel, "") + envelope.action.data)[-32:]
                    tails[i][envelope.channel] = t
                    if "done-42\r\n" in t:
                        finished[i].add(envelope.channel)

            return count

        for i, c in enumerate(clients):
            c.on_envelope(counter(i))
        for uri in uris:
            await clients[0].create_terminal(uri)
        for c in clients[1:]:
            for uri in uris:
                await c.subscribe(uri)
        started = time.monotonic()
        for uri in uris:
            await clients[0].dispatch(uri, TerminalInput(data="seq 1 30000; echo done-$((6*7))\r"))
        with trio.fail_after(600):
            for i, c in enumerate(clients):

                def all_finished(i: int = i) -> bool:
                    return len(finished[i]) == len(uris)

                await c.wait_for(all_finished)
        took = time.monotonic() - started
        snaps = await converged(clients[0], clients, uris)
        equal = identical = 0
        for c in clients:
            for uri in uris:
                mirror = c.terminal_state(uri)
                server_state = snaps[uri].state
                assert isinstance(server_state, TerminalState)
                assert same_except_content(mirror, server_state), uri
                assert text_of(mirror) == text_of(server_state), uri
                equal += 1
                identical += unstructure(mirror) == unstructure(server_state)
        peak = server.figures()
        for uri in uris:
            await clients[0].dispose_terminal(uri)
    first = snaps[uris[0]].state
    assert isinstance(first, TerminalState)
    return {
        "peak": peak,
        "chars": len(text_of(first)),
        "min_mb": min(received) / 1e6,
        "max_mb": max(received) / 1e6,
        "took": took,
        "equal": equal,
        "identical": identical,
        "mirrors": len(clients) * len(uris),
    }


# -- a long flood with one stalled client ----------------------------------------------------------


STALLED_CLIENT = textwrap.dedent(
    """
    import sys, orjson, trio
    from ahp.client import ConnectionLost, connect
    from ahp.protocol.codec import unstructure

    async def main(url, uri):
        async with connect(url, client_id="stalled") as client:
            await client.subscribe(uri)
            print("ready", flush=True)
            while True:
                line = await trio.to_thread.run_sync(sys.stdin.readline)
                if not line.strip():
                    return
                while True:  # (the first request after the stall may meet the drop)
                    try:
                        await client.ping()
                        break
                    except ConnectionLost:
                        pass
                state = client.terminal_state(uri)
                print(orjson.dumps({
                    "seq": client.last_seen_seq,
                    "reconnects": client.reconnects,
                    "state": unstructure(state),
                }).decode(), flush=True)

    trio.run(main, sys.argv[1], sys.argv[2])
    """
)


@asynccontextmanager
async def stalled_client(url: str, uri: str, tmp_path: Path) -> AsyncIterator[Any]:
    script = tmp_path / "stalled_client.py"
    script.write_text(STALLED_CLIENT)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = await trio.lowlevel.open_process(
        [sys.executable, str(script), url, uri],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env,
    )
    assert proc.stdout is not None and proc.stdin is not None
    buffer = b""

    async def line() -> bytes:
        nonlocal buffer
        assert proc.stdout is not None
        while b"\n" not in buffer:
            chunk = await proc.stdout.receive_some(1 << 20)
            assert chunk, "the stalled client exited"
            buffer += chunk
        out, buffer = buffer.split(b"\n", 1)
        return out

    proc.line = line  # type: ignore[attr-defined]
    try:
        with trio.fail_after(30):
            assert await line() == b"ready"
        yield proc
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGCONT)
            proc.kill()
            with trio.CancelScope(shield=True):
                await proc.wait()


async def test_flood_with_a_stalled_client(request: pytest.FixtureRequest, tmp_path: Path) -> None:
    seconds: float = request.config.getoption("--flood-seconds")
    async with sidecar() as server:
        await warm_up(server)
        # Baseline: two short rounds of the same workload. The allocator's high-water
        # mark after a flood varies from round to round (outbox and scrollback buffers
        # of 4-16 MiB come and go), so the start is the higher of the two.
        rounds = []
        for i in range(2):
            await _flood(server, None, min(seconds, 10.0), tmp_path / f"warm{i}")
            rounds.append(await wait_settled(server, Figures(0, 0, 0, 0), fds=None))
        start = max(rounds, key=lambda f: f.rss_mib)
        await _flood(server, start, seconds, tmp_path)


async def _flood(server: Server, start: Figures | None, seconds: float, tmp_path: Path) -> None:
    """The flood; with ``start`` (the measured round) its figures are reported and checked."""
    await trio.Path(tmp_path).mkdir(exist_ok=True)
    uri = "ahp-terminal:/flood"
    tail = 64 * 1024
    async with connect(server.url, client_id="active") as active:
        await active.create_terminal(uri)
        received = 0
        flood_tail = ""
        low_water = low_water_for(DEFAULT_SCROLLBACK)

        def on_envelope(envelope: ActionEnvelope) -> None:
            # Count the output; keep this test's own mirror bounded with the server's trim.
            nonlocal received, flood_tail
            if isinstance(envelope.action, TerminalData) and envelope.channel == uri:
                received += len(envelope.action.data)
                flood_tail = (flood_tail + envelope.action.data)[-64:]
                mirror = active.mirrors.get(uri)
                if mirror is not None:
                    state = mirror.confirmed
                    assert isinstance(state, TerminalState)
                    if content_length(state) > DEFAULT_SCROLLBACK:
                        mirror.confirmed, _ = trim(state, low_water=low_water)

        active.on_envelope(on_envelope)
        async with stalled_client(server.url, uri, tmp_path) as stalled:
            stalled.send_signal(signal.SIGSTOP)  # stops reading: its socket fills
            line = "flood 0123456789 abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ"
            await active.dispatch(
                uri,
                TerminalInput(
                    data=f"stty -echo; timeout {seconds:g} yes '{line}'; echo flood-done-$((6*7))\r"
                ),
            )
            peak = start or server.figures()
            samples = []
            started = time.monotonic()
            with trio.fail_after(seconds + 600):
                while "flood-done-42" not in flood_tail:
                    now = server.figures()
                    samples.append(now.rss_mib)
                    if now.rss_mib > peak.rss_mib:
                        peak = now
                    with trio.move_on_after(2):  # (a figures sample every 2 s)
                        await active.wait_for(lambda: "flood-done-42" in flood_tail)
            took = time.monotonic() - started
            stalled.send_signal(signal.SIGCONT)
            # The server dropped the stalled client; it reconnects by itself. Compare.
            snaps = await converged(active, [active], [uri])
            snapshot = snaps[uri].state
            assert isinstance(snapshot, TerminalState)
            with trio.fail_after(120):
                while True:
                    assert stalled.stdin is not None
                    await stalled.stdin.send_all(b"report\n")
                    got = orjson.loads(await stalled.line())
                    if got["seq"] <= snaps[uri].fromSeq and got["reconnects"] >= 1:
                        break
                    await trio.sleep(0.2)
            stalled_state = structure(got["state"], TerminalState)
            mirror = active.terminal_state(uri)
            for state in (mirror, stalled_state):
                assert same_except_content(state, snapshot)
                assert text_of(state)[-tail:] == text_of(snapshot)[-tail:]
            assert stalled.stdin is not None
            await stalled.stdin.send_all(b"\n")
            with trio.fail_after(30):
                await stalled.wait()
        await active.dispose_terminal(uri)
        reconnects = active.reconnects
    if start is None:
        return
    end = await wait_settled(server, start)
    flood_mb = received / 1e6
    report(
        f"{seconds:g} s output flood (yes) with one stalled client (SIGSTOPped viewer)",
        [
            f"start: {start.row()}  (the higher after two warm-up floods of "
            f"{min(seconds, 10.0):g} s)",
            f"peak:  {peak.row()}  (RSS sampled {len(samples)} times, "
            f"median {sorted(samples)[len(samples) // 2]:.1f} MiB)",
            f"end:   {end.row()}",
            f"active client received {flood_mb:.0f} MB in {took:.0f} s "
            f"({flood_mb / took:.1f} MB/s), reconnects {reconnects}",
            f"stalled client: dropped by the server, reconnected "
            f"{got['reconnects']} time(s); mirror tail ({tail} chars) and fields equal "
            "to the server's snapshot, as is the active client's",
        ],
    )
    check_stable(start, end)
