"""The whole run: every section, interleaved so that ratios compare like with like.

Why interleaved: on a shared machine the load drifts over minutes. Taking run
*i* of the ceiling, the engine and the servers one after the other (rather than
all ceiling runs, then all engine runs) puts each ratio's two sides under the
same conditions. Results are plain JSON-able dicts; figures are
:class:`~ahp.bench.stats.Figure` values turned into dicts at the end.
"""

from __future__ import annotations

import functools
import os
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager, AsyncExitStack
from pathlib import Path
from typing import Any, Final

import attrs
import trio

from ahp.bench import append as append_bench
from ahp.bench.cclient import CClientError, build_client
from ahp.bench.ceiling import BareRun, bare_echo, bare_read
from ahp.bench.endtoend import (
    AhpServer,
    CMeasured,
    ManyRun,
    Measured,
    PairRun,
    ServerUnderTest,
    alone_run,
    c_echo_run,
    c_stream_run,
    echo_run,
    many_run,
    pair_run,
)
from ahp.bench.figures import (
    MB,
    alone_json,
    c_json,
    ceiling_json,
    echo_json,
    engine_json,
    fig,
    many_json,
    mb_s,
    pairs_json,
)
from ahp.bench.floors import SHAPES as FLOOR_SHAPES
from ahp.bench.floors import floor_missing, floor_version, open_floor
from ahp.bench.folded import FOLDED, run_folded
from ahp.bench.inprocess import EngineRun, engine_echo, engine_run
from ahp.bench.memory import IdleRun, LargeOutputRun, idle_run, large_output_run
from ahp.bench.peers import open_terminado, terminado_missing, terminado_version
from ahp.bench.processes import open_worker
from ahp.bench.procfs import machine_info
from ahp.bench.progress import Progress
from ahp.bench.stats import summarize
from ahp.bench.ttyd import open_ttyd, ttyd_missing, ttyd_version
from ahp.bench.workload import Workload, generate
from ahp.bench.wsclient import ECHO_WARMUP, IDLE_WARMUP
from ahp.engine import open_host

__all__ = ["Config", "run_suite"]


@attrs.frozen
class Config:
    size_mb: float = 100.0
    runs: int = 5
    echo_count: int = 300
    #: Keystrokes per run typed after ``idle_pause`` seconds of idleness each.
    idle_count: int = 30
    idle_pause: float = 0.15
    terminals: int = 50
    stall_hold: float = 12.0
    peers: bool = False
    #: Also measure with the independent C client (skipped without a C compiler).
    c_client: bool = True
    folded_mb: float = 20.0
    #: Terminals streaming at once in the many-terminals section (0: skip it); each
    #: streams ``size_mb / many`` MB (at least 1 MB), so the section moves ``size_mb``.
    many: int = 16
    command: str = "ahp-terminals bench"


# -- throughput -------------------------------------------------------------------------------


class _CClient:
    """The compiled C client, or why it is not measured (built once per benchmark)."""

    def __init__(self, config: Config) -> None:
        self.binary: Path | None = None
        self.missing: str | None = None if config.c_client else "not requested (--no-c-client)"

    async def build(self, progress: Progress) -> None:
        if self.missing is not None or self.binary is not None:
            return
        progress.update("compiling the independent C client")
        try:
            self.binary = await trio.to_thread.run_sync(build_client)
        except (CClientError, OSError, subprocess.SubprocessError) as exc:
            self.missing = str(exc)
            progress.note(f"independent C client: skipped: {exc}")

    def fail(self, progress: Progress, exc: Exception) -> None:
        self.missing = f"the C client failed: {type(exc).__name__}: {exc}"
        self.binary = None
        progress.note(self.missing)


@attrs.frozen
class _Peer:
    """A peer server of ``--peers``: how to tell it is missing, its version, how to start it."""

    name: str
    missing: Callable[[], str | None]
    version: Callable[[], str]
    open: Callable[[Workload], AbstractAsyncContextManager[ServerUnderTest]]


#: The peers, in the order they are measured in each round. The floors
#: (:mod:`ahp.bench.floors`) are bare Trio servers in terminado's shape and in the
#: card's: what each of issue 23's goals costs before any of the project's own work;
#: the card's shape speaking AHP's least (``floor-ahp``): what the protocol adds; and
#: that doing the terminal contract's work with the engine's pure cores
#: (``floor-state``): what the contract adds, before the engine's machinery.
PEERS: Final = (
    _Peer("terminado", terminado_missing, terminado_version, open_terminado),
    _Peer("ttyd", ttyd_missing, ttyd_version, open_ttyd),
    *(
        _Peer(name, floor_missing, floor_version, functools.partial(open_floor, shape))
        for name, shape in FLOOR_SHAPES.items()
    ),
)
#: Why a peer is not measured when ``--peers`` was not given.
NOT_REQUESTED: Final = "not requested (use --peers)"


def _peers_missing(config: Config) -> dict[str, str | None]:
    """Each peer's reason not to be measured (None: it is measured)."""
    return {p.name: (p.missing() if config.peers else NOT_REQUESTED) for p in PEERS}


def _failed(peer: _Peer, exc: Exception) -> str:
    return f"{peer.name} failed: {type(exc).__name__}: {exc}"


async def _throughput(
    config: Config, workload: Workload, progress: Progress, results: dict[str, Any]
) -> None:
    progress.begin("throughput (ceiling, engine, end to end, interleaved)")
    missing = _peers_missing(config)
    for name, why in missing.items():
        if config.peers and why is not None:
            progress.note(f"{name}: not measured: {why}")
    ceiling: list[BareRun] = []
    one: list[EngineRun] = []
    ten: list[EngineRun] = []
    ours: list[PairRun] = []
    c_ours: list[CMeasured] = []
    theirs: dict[str, list[PairRun | Measured]] = {p.name: [] for p in PEERS}
    c_theirs: dict[str, list[CMeasured]] = {p.name: [] for p in PEERS}
    cclient = _CClient(config)
    await cclient.build(progress)
    async with open_host() as host:
        for i in range(config.runs):
            run = f"run {i + 1}/{config.runs}"
            progress.update(f"{run}: bare pty reader")
            ceiling.append(await bare_read(workload))
            progress.update(f"{run}: engine, 1 subscriber")
            one.append(await engine_run(host, workload, 1))
            progress.update(f"{run}: engine, 10 subscribers")
            ten.append(await engine_run(host, workload, 10))
            progress.update(f"{run}: sidecar over WebSocket, alone then beside a stalled client")
            async with open_worker() as worker:
                sidecar = AhpServer(worker, workload)
                ours.append(await pair_run(sidecar, stall_hold=config.stall_hold))
                if cclient.binary is not None:
                    progress.update(f"{run}: sidecar -> independent C client")
                    try:
                        c_ours.append(await c_stream_run(sidecar, cclient.binary))
                    except (CClientError, OSError) as exc:
                        cclient.fail(progress, exc)
            for peer in PEERS:
                if missing[peer.name] is not None:
                    continue
                try:
                    async with peer.open(workload) as server:
                        if server.shares_terminals:
                            progress.update(f"{run}: {peer.name}, alone then beside a stalled one")
                            theirs[peer.name].append(
                                await pair_run(server, stall_hold=config.stall_hold)
                            )
                        else:
                            progress.update(f"{run}: {peer.name}, one client")
                            theirs[peer.name].append(await alone_run(server))
                        if cclient.binary is not None:
                            progress.update(f"{run}: {peer.name} -> independent C client")
                            c_theirs[peer.name].append(await c_stream_run(server, cclient.binary))
                except Exception as exc:  # a peer's failure must not lose our figures
                    missing[peer.name] = _failed(peer, exc)
                    progress.note(missing[peer.name] or "")
    results["ceiling"] = ceiling_json(workload, ceiling)
    results["engine"] = {"one": engine_json(workload, one), "ten": engine_json(workload, ten)}
    results["end_to_end"] = pairs_json(workload, ours)
    c_skipped = {"skipped": cclient.missing or "not run"}
    results["end_to_end"]["c_client"] = (
        c_json(workload, c_ours) if len(c_ours) == config.runs else c_skipped
    )
    if not config.peers:
        results["peers"] = {"skipped": NOT_REQUESTED}
        return
    peers: dict[str, Any] = {}
    for peer in PEERS:
        why = missing[peer.name]
        runs = theirs[peer.name]
        if why is not None or len(runs) != config.runs:
            peers[peer.name] = {"skipped": why or "not run"}
            continue
        pairs = [r for r in runs if isinstance(r, PairRun)]
        alone = [r for r in runs if isinstance(r, Measured)]
        c_runs = c_theirs[peer.name]
        peers[peer.name] = {
            "version": peer.version(),
            **(pairs_json(workload, pairs) if pairs else alone_json(workload, alone)),
            "c_client": c_json(workload, c_runs) if len(c_runs) == config.runs else c_skipped,
        }
    results["peers"] = peers


# -- many terminals at once ---------------------------------------------------------------------


async def _many_measured(
    server: ServerUnderTest, workload: Workload, terminals: int, binary: Path | None
) -> tuple[ManyRun, int]:
    """:func:`many_run` and the server's RSS growth from before it to after it."""
    before = server.rss_kb()
    run = await many_run(server, workload, terminals, binary)
    return run, await _settled_rss_kb(server) - before


#: How long the server's RSS may take to settle after a run (closing handshakes, the
#: disposal's hang-up and reap, the allocator's trim: ours waits TRIM_DELAY after the
#: last free), and how often it is sampled meanwhile.
RSS_SETTLE: Final = 5.0
RSS_SAMPLE: Final = 0.25


async def _settled_rss_kb(server: ServerUnderTest) -> int:
    """The server's RSS once it stops falling (two samples within 1 MiB, after at least
    one second), or after :data:`RSS_SETTLE` seconds: the same rule for every server."""
    await trio.sleep(1.0)
    last = server.rss_kb()
    deadline = trio.current_time() + RSS_SETTLE - 1.0
    while trio.current_time() < deadline:
        await trio.sleep(RSS_SAMPLE)
        now = server.rss_kb()
        if abs(last - now) <= 1024:
            return now
        last = now
    return last


async def _many(config: Config, tmp: Path, progress: Progress, results: dict[str, Any]) -> None:
    """``config.many`` terminals streaming at once, through the sidecar (and the peers)."""
    progress.begin(f"{config.many} terminals at once")
    if config.many < 1:
        results["many"] = {"skipped": "--many 0"}
        return
    per_mb = max(1.0, config.size_mb / config.many)
    directory = tmp / "many"
    directory.mkdir()
    workload = generate(directory, per_mb)
    cclient = _CClient(config)
    await cclient.build(progress)
    missing = _peers_missing(config)
    ours: list[ManyRun] = []
    ours_kept: list[int] = []
    theirs: dict[str, list[ManyRun]] = {p.name: [] for p in PEERS}
    theirs_kept: dict[str, list[int]] = {p.name: [] for p in PEERS}
    for i in range(config.runs):
        run = f"run {i + 1}/{config.runs}"
        progress.update(f"{run}: sidecar, {config.many} x {per_mb:g} MB")
        async with open_worker() as worker:
            many, kept = await _many_measured(
                AhpServer(worker, workload), workload, config.many, cclient.binary
            )
            ours.append(many)
            ours_kept.append(kept)
        for peer in PEERS:
            if missing[peer.name] is not None:
                continue
            progress.update(f"{run}: {peer.name}, {config.many} x {per_mb:g} MB")
            try:
                async with peer.open(workload) as server:
                    many, kept = await _many_measured(server, workload, config.many, cclient.binary)
                    theirs[peer.name].append(many)
                    theirs_kept[peer.name].append(kept)
            except Exception as exc:  # a peer's failure must not lose our figures
                missing[peer.name] = _failed(peer, exc)
                progress.note(missing[peer.name] or "")
    client = "independent C client, one process per terminal" if cclient.binary else "Python"
    node: dict[str, Any] = {
        "mb_per_terminal": per_mb,
        "client": client,
        "ours": many_json(ours, ours_kept),
    }
    for peer in PEERS:
        runs = theirs[peer.name]
        if missing[peer.name] is None and len(runs) == config.runs:
            node[peer.name] = many_json(runs, theirs_kept[peer.name])
            node[f"ours_over_{peer.name}"] = (
                node["ours"]["aggregate_throughput"]["median"]
                / node[peer.name]["aggregate_throughput"]["median"]
            )
        else:
            node[peer.name] = {"skipped": missing[peer.name] or "not run"}
    results["many"] = node


# -- echo -------------------------------------------------------------------------------------


#: A peer's echo series: Python client back to back and after the pause, then the C client's.
_PEER_ECHO: Final = ("echo", "echo_idle", "echo_c", "echo_c_idle")


async def _peer_echo(
    config: Config, server: ServerUnderTest, binary: Path | None, series: dict[str, list[Any]]
) -> None:
    """One round of a peer's echo series (see :data:`_PEER_ECHO`)."""
    series["echo"].append(await echo_run(server, config.echo_count))
    series["echo_idle"].append(await echo_run(server, config.idle_count, pause=config.idle_pause))
    if binary is None:
        return
    series["echo_c"].append(
        await c_echo_run(
            server, binary, config.echo_count, warmup=ECHO_WARMUP, cpu=series["echo_c_cpu"]
        )
    )
    series["echo_c_idle"].append(
        await c_echo_run(
            server, binary, config.idle_count, warmup=IDLE_WARMUP, pause=config.idle_pause
        )
    )


async def _echo(
    config: Config, workload: Workload, progress: Progress, results: dict[str, Any]
) -> None:
    progress.begin(f"echo latency ({config.echo_count} keystrokes per run)")
    cwd = str(workload.path.parent)
    bare: list[list[float]] = []
    engine: list[list[float]] = []
    ours: list[list[float]] = []
    bare_idle: list[list[float]] = []
    ours_idle: list[list[float]] = []
    # The independent C client: back to back and after the pause.
    c_ours: list[list[float]] = []
    c_ours_idle: list[list[float]] = []
    theirs: dict[str, dict[str, list[Any]]] = {
        p.name: {key: [] for key in (*_PEER_ECHO, "echo_c_cpu")} for p in PEERS
    }
    c_ours_cpu: list[float] = []  # the server's CPU seconds per keystroke, per run
    missing = _peers_missing(config)
    cclient = _CClient(config)
    await cclient.build(progress)
    async with AsyncExitStack() as stack:
        host = await stack.enter_async_context(open_host())
        worker = await stack.enter_async_context(open_worker())
        server = AhpServer(worker, workload)
        peers: dict[str, ServerUnderTest] = {}
        for peer in PEERS:
            if missing[peer.name] is None:
                try:
                    peers[peer.name] = await stack.enter_async_context(peer.open(workload))
                except Exception as exc:  # a peer's failure must not lose our figures
                    missing[peer.name] = _failed(peer, exc)
                    progress.note(missing[peer.name] or "")
        for i in range(config.runs):
            run = f"run {i + 1}/{config.runs}"
            progress.update(f"{run}: bare pty")
            bare.append(await bare_echo(config.echo_count, cwd))
            progress.update(f"{run}: engine in-process")
            engine.append(await engine_echo(host, config.echo_count, cwd))
            progress.update(f"{run}: sidecar")
            ours.append(await echo_run(server, config.echo_count))
            progress.update(f"{run}: bare pty after {config.idle_pause} s idle")
            bare_idle.append(await bare_echo(config.idle_count, cwd, pause=config.idle_pause))
            progress.update(f"{run}: sidecar after {config.idle_pause} s idle")
            ours_idle.append(await echo_run(server, config.idle_count, pause=config.idle_pause))
            if cclient.binary is not None:
                progress.update(f"{run}: sidecar, independent C client")
                try:
                    c_ours.append(
                        await c_echo_run(
                            server,
                            cclient.binary,
                            config.echo_count,
                            warmup=ECHO_WARMUP,
                            cpu=c_ours_cpu,
                        )
                    )
                    c_ours_idle.append(
                        await c_echo_run(
                            server,
                            cclient.binary,
                            config.idle_count,
                            warmup=IDLE_WARMUP,
                            pause=config.idle_pause,
                        )
                    )
                except (CClientError, OSError) as exc:
                    cclient.fail(progress, exc)
            for peer in PEERS:
                if peer.name not in peers:
                    continue
                progress.update(f"{run}: {peer.name}, back to back and after the pause")
                try:
                    await _peer_echo(config, peers[peer.name], cclient.binary, theirs[peer.name])
                except Exception as exc:  # a peer's failure must not lose our figures
                    progress.note(f"{peer.name} echo failed: {type(exc).__name__}: {exc}")
                    del peers[peer.name]
    results["echo"] = {
        "bare_pty": echo_json(bare),
        "engine": echo_json(engine),
        "sidecar": echo_json(ours),
        "idle_pause_s": config.idle_pause,
        "bare_pty_idle": echo_json(bare_idle),
        "sidecar_idle": echo_json(ours_idle),
    }
    complete = len(c_ours) == config.runs and len(c_ours_idle) == config.runs
    if complete:
        results["echo"]["sidecar_c"] = echo_json(c_ours, c_ours_cpu)
        results["echo"]["sidecar_c_idle"] = echo_json(c_ours_idle)
    else:
        results["echo"]["sidecar_c"] = {"skipped": cclient.missing or "not run"}
    for peer in PEERS:
        node = results.get("peers", {}).get(peer.name)
        if not isinstance(node, dict) or "alone" not in node:
            continue
        for key in _PEER_ECHO:
            runs = theirs[peer.name][key]
            if len(runs) == config.runs and (complete or not key.startswith("echo_c")):
                cpu = theirs[peer.name]["echo_c_cpu"] if key == "echo_c" else None
                node[key] = echo_json(runs, cpu)


# -- memory -----------------------------------------------------------------------------------


async def _memory(
    config: Config, workload: Workload, progress: Progress, results: dict[str, Any]
) -> None:
    progress.begin("memory (a fresh sidecar process per run)")
    cwd = str(workload.path.parent)
    idle: list[IdleRun] = []
    large: list[LargeOutputRun] = []
    for i in range(config.runs):
        progress.update(f"run {i + 1}/{config.runs}: idle, then {config.terminals} terminals")
        idle.append(await idle_run(cwd, config.terminals))
        progress.update(f"run {i + 1}/{config.runs}: cat of {2 * config.size_mb:g} MB")
        large.append(await large_output_run(workload, repeat=2))
    kb = 1024
    results["memory"] = {
        "idle_mb": fig([r.idle_kb * kb / MB for r in idle], "MB"),
        "terminals": config.terminals,
        "with_terminals_mb": fig([r.with_terminals_kb * kb / MB for r in idle], "MB"),
        "per_terminal_kb": fig([r.per_terminal_kb * kb / 1e3 for r in idle], "KB"),
        "large_output": {
            "output_mb": statistics.median(r.nbytes for r in large) / MB,
            "rss_before_mb": fig([r.before_kb * kb / MB for r in large], "MB"),
            "rss_after_mb": fig([r.after_kb * kb / MB for r in large], "MB"),
            "growth_mb": fig([(r.after_kb - r.before_kb) * kb / MB for r in large], "MB"),
            "peak_mb": fig([r.peak_kb * kb / MB for r in large], "MB"),
            "throughput": fig([mb_s(r.nbytes, r.seconds) for r in large], "MB/s"),
        },
    }


# -- synchronous sections -----------------------------------------------------------------------


def _append(config: Config, progress: Progress) -> dict[str, Any]:
    progress.begin("append scaling (pure reducer, 4 KiB chunks, 8 states retained)")
    large_mb = config.size_mb
    small_mb = config.size_mb / 10
    small: list[float] = []
    large: list[float] = []
    few_commands = max(100, int(config.size_mb * 20))  # 2 000 at the default 100 MB
    few: list[float] = []
    many: list[float] = []
    for i in range(config.runs):
        progress.update(f"run {i + 1}/{config.runs}")
        small.append(append_bench.append_seconds(int(small_mb * MB)))
        large.append(append_bench.append_seconds(int(large_mb * MB)))
        few.append(append_bench.commands_seconds(few_commands))
        many.append(append_bench.commands_seconds(10 * few_commands))
    small_fig = summarize(small, "s")
    large_fig = summarize(large, "s")
    few_fig = summarize(few, "s")
    many_fig = summarize(many, "s")
    return {
        "few_commands": few_commands,
        "many_commands": 10 * few_commands,
        "few_commands_seconds": few_fig.to_json(),
        "many_commands_seconds": many_fig.to_json(),
        "commands_ratio": many_fig.median / few_fig.median,
        "small_mb": small_mb,
        "large_mb": large_mb,
        "small_seconds": small_fig.to_json(),
        "large_seconds": large_fig.to_json(),
        "ratio": large_fig.median / small_fig.median,
        "large_throughput": fig([large_mb * MB / s / MB for s in large], "MB/s"),
    }


def _folded(config: Config, progress: Progress, name: str) -> dict[str, Any]:
    progress.begin(f"{name} benchmark (benchmarks/{FOLDED[name]}, {config.folded_mb:g} MB)")
    result = run_folded(name, config.folded_mb)
    if "skipped" in result:
        progress.note(f"{name}: {result['skipped']}")
    return result


# -- the run ----------------------------------------------------------------------------------

#: Sections counted by the progress line: generating the workload, throughput, many
#: terminals, echo, memory, append, and each folded benchmark.
SECTIONS = 6 + len(FOLDED)


def run_suite(
    config: Config, progress_factory: Callable[[int], Progress] = Progress
) -> dict[str, Any]:
    """Run every section; return the JSON-able results (without targets)."""
    progress = progress_factory(SECTIONS)
    started = time.time()
    results: dict[str, Any] = {
        "version": 1,
        "command": config.command,
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(started)),
        "machine": machine_info(),
        "config": attrs.asdict(config),
        "notes": [
            "MB = 10**6 bytes. Throughput counts the bytes the pty master yields "
            "(ONLCR adds \\r per line). Figures are medians of the runs with min-max.",
            "Servers run in their own process; the client runs in the benchmark process. "
            "Memory figures are the server process's RSS (terminal programs excluded).",
        ],
    }
    with tempfile.TemporaryDirectory(prefix="ahp-bench-") as tmp:
        progress.begin(f"generating {config.size_mb:g} MB of text")
        workload = generate(Path(tmp), config.size_mb)
        results["workload"] = {
            "file_bytes": workload.file_bytes,
            "lines": workload.lines,
            "chars": workload.chars,
            "pty_bytes": workload.pty_bytes,
            "mean_line_bytes": workload.file_bytes / max(1, workload.lines),
            "multibyte_extra_bytes": workload.file_bytes - workload.chars,
        }

        async def main() -> None:
            await _throughput(config, workload, progress, results)
            await _many(config, Path(tmp), progress, results)
            await _echo(config, workload, progress, results)
            await _memory(config, workload, progress, results)

        trio.run(main)
    results["append"] = _append(config, progress)
    for name in FOLDED:
        results[name] = _folded(config, progress, name)
    results["machine"]["loadavg_end"] = list(os.getloadavg())
    results["seconds"] = time.time() - started
    progress.done()
    return results
