"""End to end: pty -> server -> loopback WebSocket -> client, for any server under test.

Why generic: the sidecar and its peers are measured by the same procedures,
so their figures differ only by the server. A *pair* of runs is taken on one
fresh server process, after one unmeasured warm-up run (a fresh process pays
for first-time imports, allocations and page faults, which would otherwise
count against whichever run comes first): the workload to one active client
alone, then again with a second client that subscribed to the same terminal and
reads nothing. The pair gives, in the same process seconds apart, the
throughput cost of a stalled viewer and the memory it makes the server hold
(peak RSS during the stalled run minus RSS at its start, when the server is
already in its steady state: scrollback, replay log, allocator arenas). Afterwards
the stalled client resumes reading, which shows how the server treated it
(closed with 1013 and resumable, or everything kept for it).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, Protocol

import attrs
import trio

from ahp.bench.cclient import CStreamRun, c_echo, c_stream
from ahp.bench.processes import RssSampler, SidecarWorker
from ahp.bench.procfs import MachineCpu
from ahp.bench.threads import ThreadBudget, ThreadSampler
from ahp.bench.workload import Workload
from ahp.bench.wsclient import (
    AhpDialect,
    Dialect,
    StalledClient,
    StreamRun,
    echo_round_trips,
    stalled_client,
    stream_throughput,
)

__all__ = [
    "AhpServer",
    "CMeasured",
    "ManyRun",
    "Measured",
    "PairRun",
    "ServerUnderTest",
    "alone_run",
    "c_echo_run",
    "c_stream_run",
    "echo_run",
    "many_run",
    "pair_run",
]

TerminalKind = Literal["gate", "echo"]


class ServerUnderTest(Protocol):
    """A running server process that can give the client a terminal to follow."""

    pid: int
    #: The process whose terminals the echo runs use (``pid`` but for ttyd, which runs
    #: its echo terminals in a second process).
    echo_pid: int

    #: The dialect's name for the independent C client (``ahp``, ``terminado``, ``ttyd``).
    dialect_name: str
    #: Whether two clients can follow one terminal (the stalled-viewer run needs it).
    shares_terminals: bool

    async def terminal(self, kind: TerminalKind) -> tuple[str, Callable[[], Dialect], Any]:
        """A new terminal: its URL, a dialect factory, and a handle for :meth:`release`."""

    def channel(self, handle: Any) -> str | None:
        """The terminal's AHP channel (None for servers without channels)."""

    def expected_chars(self, handle: Any) -> int | None:
        """Characters after which a client counts the output as ended, for a server
        without an end-of-output message (ttyd); None: the server says when."""

    async def release(self, handle: Any) -> None: ...

    async def stats(self) -> dict[str, Any]: ...

    def rss_kb(self) -> int: ...

    def cpu_seconds(self) -> float: ...


class AhpServer:
    """The sidecar worker as a :class:`ServerUnderTest` (terminals created in-process)."""

    dialect_name = "ahp"
    shares_terminals = True

    def __init__(self, worker: SidecarWorker, workload: Workload) -> None:
        self.worker = worker
        self.pid = self.echo_pid = worker.pid
        self._workload = workload

    async def terminal(self, kind: TerminalKind) -> tuple[str, Callable[[], Dialect], Any]:
        argv = self._workload.gate_argv() if kind == "gate" else ["cat"]
        reply = await self.worker.call("create", argv=argv, cwd=str(self._workload.path.parent))
        uri: str = reply["uri"]
        return self.worker.url, lambda: AhpDialect(uri), uri

    def channel(self, handle: Any) -> str | None:
        return str(handle)

    def expected_chars(self, handle: Any) -> int | None:
        return None

    async def release(self, handle: Any) -> None:
        await self.worker.call("dispose", uri=handle)

    async def stats(self) -> dict[str, Any]:
        return await self.worker.call("stats")

    def rss_kb(self) -> int:
        return self.worker.rss_kb()

    def cpu_seconds(self) -> float:
        return self.worker.cpu_seconds()


@attrs.frozen
class Measured:
    """One client run with the server's CPU time and RSS around it."""

    run: StreamRun
    server_cpu_seconds: float
    rss_start_kb: int
    rss_peak_kb: int
    rss_end_kb: int


@attrs.frozen
class PairRun:
    alone: Measured
    with_stalled: Measured
    stalled: StalledClient
    #: The server's statistics once the stalled client had been left alone for up to
    #: ``stall_hold`` seconds after the active run, and after it resumed reading.
    stats_during: dict[str, Any]
    stats_after: dict[str, Any]
    #: Seconds the stalled client was held after the active run, and the server's RSS
    #: then (did cutting it off give the memory back?).
    held_seconds: float
    rss_after_hold_kb: int


async def _measured(server: ServerUnderTest, url: str, dialect: Dialect) -> Measured:
    sampler = RssSampler(server.pid)
    cpu = server.cpu_seconds()
    async with sampler.running():
        run = await stream_throughput(url, dialect)
    return Measured(
        run=run,
        server_cpu_seconds=server.cpu_seconds() - cpu,
        rss_start_kb=sampler.start_kb,
        rss_peak_kb=sampler.peak_kb,
        rss_end_kb=sampler.end_kb,
    )


async def _hold(server: ServerUnderTest, seconds: float) -> tuple[dict[str, Any], float]:
    """Wait until the server reports a slow client cut off, at most ``seconds``.

    Only a server that reports it (the sidecar worker's ``closed_1013``) is waited
    for; the statistics at the end are returned with the time waited.
    """
    start = trio.current_time()
    stats = await server.stats()
    while stats.get("closed_1013") == 0 and trio.current_time() - start < seconds:
        await trio.sleep(0.25)
        stats = await server.stats()
    return stats, trio.current_time() - start


async def pair_run(
    server: ServerUnderTest, *, stall_hold: float = 12, drain_timeout: float = 10
) -> PairRun:
    """A warm-up, the workload alone, then beside a stalled client, on the same server.

    After the active run the stalled client stays stalled until the server reports
    that it cut it off, for at most ``stall_hold`` seconds, then resumes reading.
    """
    url, dialect, handle = await server.terminal("gate")
    await stream_throughput(url, dialect())
    await server.release(handle)

    url, dialect, handle = await server.terminal("gate")
    alone = await _measured(server, url, dialect())
    await server.release(handle)
    await trio.sleep(0.2)  # let the server settle (closing handshakes, frees)

    url, dialect, handle = await server.terminal("gate")
    async with stalled_client(url, dialect(), drain_timeout=drain_timeout) as stalled:
        with_stalled = await _measured(server, url, dialect())
        stats_during, held = await _hold(server, stall_hold)
        rss_after_hold = server.rss_kb()
    stats_after = await server.stats()
    await server.release(handle)
    return PairRun(
        alone=alone,
        with_stalled=with_stalled,
        stalled=stalled,
        stats_during=stats_during,
        stats_after=stats_after,
        held_seconds=held,
        rss_after_hold_kb=rss_after_hold,
    )


async def alone_run(server: ServerUnderTest) -> Measured:
    """A warm-up, then the workload to one client: for a server whose terminals
    cannot have a second viewer (ttyd), the first half of :func:`pair_run`."""
    url, dialect, handle = await server.terminal("gate")
    await stream_throughput(url, dialect())
    await server.release(handle)
    url, dialect, handle = await server.terminal("gate")
    try:
        return await _measured(server, url, dialect())
    finally:
        await server.release(handle)


async def echo_run(server: ServerUnderTest, count: int, *, pause: float = 0.0) -> list[float]:
    """``count`` keystroke round trips through ``server`` to a fresh ``cat`` terminal,
    each after ``pause`` seconds of idleness when given."""
    url, dialect, handle = await server.terminal("echo")
    try:
        return await echo_round_trips(url, dialect(), count, pause=pause)
    finally:
        await server.release(handle)


@attrs.frozen
class CMeasured:
    """One run of the independent C client with the server's CPU time around it."""

    run: CStreamRun
    server_cpu_seconds: float
    #: Where the server's threads and ``cat`` spent the run (None: not measured).
    threads: ThreadBudget | None = None


async def _c_stream_of(server: ServerUnderTest, binary: Path, url: str, handle: Any) -> CStreamRun:
    """The independent C client following ``server``'s terminal ``handle`` at ``url``."""
    return await c_stream(
        binary,
        url,
        server.dialect_name,
        server.channel(handle),
        expect_chars=server.expected_chars(handle),
    )


async def c_stream_run(server: ServerUnderTest, binary: Path) -> CMeasured:
    """The workload through ``server`` to the independent C client (a fresh gate terminal),
    with the server's threads sampled (:mod:`ahp.bench.threads`)."""
    url, _, handle = await server.terminal("gate")
    try:
        cpu = server.cpu_seconds()
        with ThreadSampler(server.pid) as sampler:
            run = await _c_stream_of(server, binary, url, handle)
        return CMeasured(
            run=run, server_cpu_seconds=server.cpu_seconds() - cpu, threads=sampler.budget
        )
    finally:
        await server.release(handle)


async def c_echo_run(
    server: ServerUnderTest,
    binary: Path,
    count: int,
    *,
    warmup: int,
    pause: float = 0.0,
    cpu: list[float] | None = None,
) -> list[float]:
    """``count`` keystroke round trips measured by the C client (a fresh ``cat`` terminal).

    ``cpu``: the server's CPU seconds per keystroke are appended to it (its threads'
    ``schedstat`` through :class:`~ahp.bench.threads.ThreadSampler`, over the warm-up and
    the measured keystrokes, the connection's set-up included, of the server's
    ``echo_pid``)."""
    url, _, handle = await server.terminal("echo")
    sampler = ThreadSampler(server.echo_pid)
    try:
        # (Sampled only when asked: the after-pause series measures idle wake-ups.)
        with sampler if cpu is not None else contextlib.nullcontext():
            samples = await c_echo(
                binary,
                url,
                server.dialect_name,
                server.channel(handle),
                count,
                warmup=warmup,
                pause=pause,
            )
        if cpu is not None:
            cpu.append(sampler.ran_seconds() / (count + warmup))
        return samples
    finally:
        await server.release(handle)


@attrs.frozen
class ManyRun:
    """``terminals`` gated terminals released at once, each followed by its own client."""

    terminals: int
    #: From the first release to the last terminal's end.
    seconds: float
    #: Each terminal's own throughput (its bytes over its own time), MB/s.
    per_terminal_mb_s: list[float]
    total_bytes: float
    server_cpu_seconds: float
    machine_cores: float
    #: Runs that did not receive the whole output (closed early, timed out).
    incomplete: int
    #: Where the server's threads and the ``cat`` processes (together) spent the run.
    threads: ThreadBudget | None = None


async def many_run(
    server: ServerUnderTest, workload: Workload, terminals: int, binary: Path | None
) -> ManyRun:
    """``terminals`` terminals streaming ``workload`` at once through ``server``.

    Every terminal is created and its client connected first; then all gates are
    released together. With ``binary`` (the independent C client) each terminal is
    followed by its own client process, so the benchmark's own Python process is
    not what bounds the aggregate; without it, by in-process Python clients.
    """
    handles: list[Any] = []
    try:
        targets = []
        for _ in range(terminals):
            url, dialect, handle = await server.terminal("gate")
            handles.append(handle)
            targets.append((url, dialect, handle))
        per: list[float] = []
        total = 0.0
        incomplete = 0
        expected = workload.gated_bytes()
        go = trio.Event()
        all_connected = trio.Event()
        waiting = terminals

        async def connected(ready: trio.Event) -> None:
            nonlocal waiting
            await ready.wait()
            waiting -= 1
            if waiting == 0:
                all_connected.set()

        async def follow(url: str, dialect: Callable[[], Dialect], handle: Any) -> None:
            nonlocal total, incomplete
            if binary is not None:
                await go.wait()
                c = await _c_stream_of(server, binary, url, handle)
                nbytes = expected * c.chars / workload.gated_chars()
                complete = c.ended and c.chars == workload.gated_chars()
                seconds = c.seconds
            else:
                ready = trio.Event()
                async with trio.open_nursery() as inner:
                    inner.start_soon(connected, ready)
                    run = await stream_throughput(url, dialect(), connected=ready, go=go)
                nbytes = expected * run.chars / workload.gated_chars()
                complete = run.closed is None and run.chars == workload.gated_chars()
                seconds = run.seconds
            total += nbytes
            per.append(nbytes / seconds / 1e6)
            if not complete:
                incomplete += 1

        machine = MachineCpu()
        cpu = server.cpu_seconds()
        with ThreadSampler(server.pid) as sampler:
            async with trio.open_nursery() as nursery:
                for url, dialect, handle in targets:
                    nursery.start_soon(follow, url, dialect, handle)
                if binary is None:
                    await all_connected.wait()
                start = trio.current_time()
                go.set()
            seconds = trio.current_time() - start
        return ManyRun(
            terminals=terminals,
            seconds=seconds,
            per_terminal_mb_s=per,
            total_bytes=total,
            server_cpu_seconds=server.cpu_seconds() - cpu,
            machine_cores=machine.stop(),
            incomplete=incomplete,
            threads=sampler.budget,
        )
    finally:
        for handle in handles:
            await server.release(handle)
