"""A benchmark's runs as JSON figures: what :mod:`ahp.bench.suite` reports of each section.

Why a module of its own: the suite decides what runs when (interleaving, peers,
failures); this turns each kind of run (:mod:`ahp.bench.ceiling`,
:mod:`ahp.bench.inprocess`, :mod:`ahp.bench.endtoend`) into plain JSON-able dicts
whose figures are :class:`~ahp.bench.stats.Figure` summaries (median, min, max of the
runs). Pure: no I/O, no clock.
"""

from __future__ import annotations

import statistics
from typing import Any, Final

from ahp.bench.ceiling import BareRun
from ahp.bench.endtoend import CMeasured, ManyRun, Measured, PairRun
from ahp.bench.inprocess import EngineRun
from ahp.bench.stats import percentile, summarize
from ahp.bench.threads import ThreadBudget
from ahp.bench.workload import Workload

__all__ = [
    "MB",
    "NO_SECOND_VIEWER",
    "alone_json",
    "c_json",
    "ceiling_json",
    "client_json",
    "delivered_bytes",
    "echo_json",
    "engine_json",
    "fig",
    "many_json",
    "mb_s",
    "pairs_json",
    "threads_json",
]

#: Bytes in the benchmark's MB (10^6, as its output says).
MB = 1e6

#: Why a peer has no stalled-viewer figures.
NO_SECOND_VIEWER: Final = (
    "every connection gets its own program: one terminal cannot have a second viewer"
)


def fig(values: list[float], unit: str) -> dict[str, Any]:
    """One figure of the runs (median, min, max, the values) as JSON."""
    return summarize(values, unit).to_json()


def mb_s(nbytes: float, seconds: float) -> float:
    """A rate in MB (10^6 bytes) per second."""
    return nbytes / seconds / MB


def delivered_bytes(workload: Workload, chars: int) -> float:
    """Bytes a run delivered, from the characters it counted (exact when complete)."""
    return workload.gated_bytes() * chars / workload.gated_chars()


def threads_json(budgets: list[ThreadBudget | None]) -> dict[str, Any]:
    """Medians of where a server's threads and ``cat`` spent the runs
    (:mod:`ahp.bench.threads`): each part measured in every run, its three shares."""
    if not budgets or any(b is None for b in budgets):
        return {"skipped": "not measured (no /proc/PID/task/TID/schedstat)"}
    out: dict[str, Any] = {}
    for part in ("main", "busiest", "program"):
        shares = [getattr(b, part) for b in budgets if b is not None]
        if shares and all(x is not None for x in shares):
            out[part] = {
                kind: fig([getattr(x, kind) for x in shares], "share")
                for kind in ("ran", "waited", "slept")
            }
    return out


def ceiling_json(workload: Workload, runs: list[BareRun]) -> dict[str, Any]:
    expected = workload.gated_bytes()
    return {
        "threads": threads_json([r.threads for r in runs]),
        "throughput": fig([mb_s(r.nbytes, r.seconds) for r in runs], "MB/s"),
        "bytes_per_read": fig([r.nbytes / max(1, r.reads) for r in runs], "B"),
        "reader_cpu_cores": fig([r.cpu_seconds / r.seconds for r in runs], "cores"),
        "machine_busy_cores": fig([r.machine_cores for r in runs], "cores"),
        "complete": all(r.nbytes == expected for r in runs),
        "bytes": [r.nbytes for r in runs],
        "expected_bytes": expected,
    }


def engine_json(workload: Workload, runs: list[EngineRun]) -> dict[str, Any]:
    expected = workload.gated_chars()
    slowest = [min(s.chars for s in r.subscribers) for r in runs]
    envelopes = [statistics.mean(s.data_envelopes for s in r.subscribers) for r in runs]
    return {
        "subscribers": len(runs[0].subscribers),
        "throughput": fig(
            [
                mb_s(delivered_bytes(workload, c), r.seconds)
                for c, r in zip(slowest, runs, strict=True)
            ],
            "MB/s",
        ),
        "cpu_cores": fig([r.cpu_seconds / r.seconds for r in runs], "cores"),
        "machine_busy_cores": fig([r.machine_cores for r in runs], "cores"),
        "read_batches": fig([float(r.read_batches) for r in runs], "actions"),
        "bytes_per_batch": fig([r.bytes_read / max(1, r.read_batches) for r in runs], "B"),
        "data_envelopes_per_subscriber": fig(envelopes, "envelopes"),
        "bytes_per_envelope": fig([workload.gated_bytes() / max(1.0, e) for e in envelopes], "B"),
        "complete": all(s.chars == expected and s.exit_seen for r in runs for s in r.subscribers),
        "resyncs": sum(s.resyncs for r in runs for s in r.subscribers),
    }


def client_json(workload: Workload, measured: list[Any]) -> dict[str, Any]:
    return {
        "throughput": fig(
            [mb_s(delivered_bytes(workload, m.run.chars), m.run.seconds) for m in measured],
            "MB/s",
        ),
        "server_cpu_cores": fig([m.server_cpu_seconds / m.run.seconds for m in measured], "cores"),
        "client_cpu_cores": fig(
            [m.run.client_cpu_seconds / m.run.seconds for m in measured], "cores"
        ),
        "machine_busy_cores": fig([m.run.machine_cores for m in measured], "cores"),
        "frames": fig([float(m.run.frames) for m in measured], "frames"),
        "bytes_per_frame": fig(
            [delivered_bytes(workload, m.run.chars) / max(1, m.run.frames) for m in measured],
            "B",
        ),
        "complete": [m.run.chars == workload.gated_chars() for m in measured],
        "closed": [m.run.closed for m in measured],
        "server_rss_start_mb": fig([m.rss_start_kb * 1024 / MB for m in measured], "MB"),
        "server_rss_peak_mb": fig([m.rss_peak_kb * 1024 / MB for m in measured], "MB"),
    }


def c_json(workload: Workload, runs: list[CMeasured]) -> dict[str, Any]:
    """Figures of the independent C client's runs (see :mod:`ahp.bench.cclient`)."""
    return {
        "throughput": fig(
            [mb_s(delivered_bytes(workload, m.run.chars), m.run.seconds) for m in runs],
            "MB/s",
        ),
        "server_cpu_cores": fig([m.server_cpu_seconds / m.run.seconds for m in runs], "cores"),
        "server_cpu_s_per_100mb": fig(
            [
                m.server_cpu_seconds / (delivered_bytes(workload, m.run.chars) / (100 * MB))
                for m in runs
            ],
            "s",
        ),
        "client_cpu_cores": fig([m.run.client_cpu_seconds / m.run.seconds for m in runs], "cores"),
        "machine_busy_cores": fig([m.run.machine_cores for m in runs], "cores"),
        "frames": fig([float(m.run.frames) for m in runs], "frames"),
        "threads": threads_json([m.threads for m in runs]),
        "complete": [m.run.ended and m.run.chars == workload.gated_chars() for m in runs],
    }


def pairs_json(workload: Workload, pairs: list[PairRun]) -> dict[str, Any]:
    alone = [p.alone for p in pairs]
    stalled = [p.with_stalled for p in pairs]
    return {
        "alone": client_json(workload, alone),
        "with_stalled": client_json(workload, stalled),
        "stalled_cost_ratio": fig(
            [
                (s.run.chars / s.run.seconds) / (a.run.chars / a.run.seconds)
                for a, s in zip(alone, stalled, strict=True)
            ],
            "x",
        ),
        "stalled_growth_mb": fig(
            [(s.rss_peak_kb - s.rss_start_kb) * 1024 / MB for s in stalled], "MB"
        ),
        "stalled_growth_after_hold_mb": fig(
            [(p.rss_after_hold_kb - p.with_stalled.rss_start_kb) * 1024 / MB for p in pairs],
            "MB",
        ),
        "alone_growth_mb": fig([(a.rss_peak_kb - a.rss_start_kb) * 1024 / MB for a in alone], "MB"),
        "stalled_client": [
            {
                "chars_read_after_resuming": p.stalled.chars_after,
                "output_end_reached_it": p.stalled.saw_end,
                "close_code": p.stalled.close_code,
                "close_reason": p.stalled.close_reason,
                "still_open_after_drain": p.stalled.still_open,
                "held_stalled_after_run_seconds": p.held_seconds,
                "server_rss_growth_after_hold_mb": (
                    p.rss_after_hold_kb - p.with_stalled.rss_start_kb
                )
                * 1024
                / MB,
                "server_1013_closes_before_resuming": p.stats_during.get("closed_1013"),
                "server_1013_closes_after_resuming": p.stats_after.get("closed_1013"),
            }
            for p in pairs
        ],
    }


def alone_json(workload: Workload, alone: list[Measured]) -> dict[str, Any]:
    """A peer measured without the stalled viewer (its terminals cannot have two)."""
    return {
        "alone": client_json(workload, alone),
        "alone_growth_mb": fig([(a.rss_peak_kb - a.rss_start_kb) * 1024 / MB for a in alone], "MB"),
        "with_stalled": {"skipped": NO_SECOND_VIEWER},
    }


def many_json(runs: list[ManyRun], rss_kept_kb: list[int]) -> dict[str, Any]:
    return {
        "terminals": runs[0].terminals,
        "aggregate_throughput": fig([r.total_bytes / r.seconds / MB for r in runs], "MB/s"),
        "per_terminal_median": fig([statistics.median(r.per_terminal_mb_s) for r in runs], "MB/s"),
        # min/max of the terminals' own throughputs in a run: 1.0 is perfectly fair.
        "fairness_min_over_max": fig(
            [min(r.per_terminal_mb_s) / max(r.per_terminal_mb_s) for r in runs], "ratio"
        ),
        "server_cpu_cores": fig([r.server_cpu_seconds / r.seconds for r in runs], "cores"),
        "server_cpu_s_per_100mb": fig(
            [r.server_cpu_seconds / (r.total_bytes / (100 * MB)) for r in runs], "s"
        ),
        "machine_busy_cores": fig([r.machine_cores for r in runs], "cores"),
        "threads": threads_json([r.threads for r in runs]),
        # The server's RSS once the terminals were disposed, minus before they were made.
        "server_rss_kept_mb": fig([kb * 1024 / MB for kb in rss_kept_kb], "MB"),
        "complete": all(r.incomplete == 0 for r in runs),
    }


def echo_json(runs: list[list[float]], cpu: list[float] | None = None) -> dict[str, Any]:
    """A series of echo runs; ``cpu``: the server's CPU seconds per keystroke in each run
    (:func:`~ahp.bench.endtoend.c_echo_run`), reported when every run has one."""
    pooled = [s for run in runs for s in run]
    out = {
        "median_ms": fig([statistics.median(r) * 1e3 for r in runs], "ms"),
        "p99_ms": fig([percentile(r, 99) * 1e3 for r in runs], "ms"),
        "pooled_median_ms": statistics.median(pooled) * 1e3,
        "pooled_p99_ms": percentile(pooled, 99) * 1e3,
        "round_trips": len(pooled),
    }
    if cpu is not None and len(cpu) == len(runs):
        out["server_cpu_us_per_keystroke"] = fig([c * 1e6 for c in cpu], "µs")
    return out
