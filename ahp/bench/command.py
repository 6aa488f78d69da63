"""``ahp-terminals bench``: the command line of the benchmark.

Why here and not in :mod:`ahp.cli`: the CLI only registers subcommands
(``add_parser``/``run``) and imports this module to build its parser, so the
heavy modules are imported only when the command runs. Everything about the
benchmark — its options, the order of the sections, where results go — lives
with the benchmark.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

__all__ = ["add_parser", "run"]

#: Keystrokes per echo run stay below the canonical-mode line limit (4095).
MAX_ECHO_COUNT = 4000


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser], help: str) -> None:
    p = sub.add_parser(
        "bench",
        help=help,
        description=(
            "Run the benchmark in one process tree on this machine: a bare pty reader "
            "(the ceiling), the engine in-process, the sidecar over loopback WebSocket "
            "(alone and beside a stalled client), echo latency, memory, reducer append "
            "scaling, the scanner benchmarks and, with --peers, terminado, ttyd (from "
            "$AHP_BENCH_TTYD or PATH; without it its figures are 'not measured') and the "
            "floors (bare Trio servers in terminado's shape and the card's, no AHP work, "
            "the card's speaking AHP's least: floor-ahp, and that doing the terminal "
            "contract's work with the engine's pure cores: floor-state). "
            "Prints a table "
            "on stdout (progress on stderr) and writes JSON and, when matplotlib is installed "
            "(pip install '.[bench]' in a checkout, or nox -s bench), a PNG chart; each run's "
            "files are named by date and time, so runs do not overwrite each other."
        ),
    )
    p.add_argument("--size-mb", type=float, default=100.0, help="workload size (default 100)")
    p.add_argument("--runs", type=int, default=5, help="runs per figure (default 5)")
    p.add_argument(
        "--echo-count", type=int, default=300, help="keystroke round trips per run (default 300)"
    )
    p.add_argument(
        "--idle-count",
        type=int,
        default=30,
        help="keystrokes per run typed after 150 ms of idleness each (default 30)",
    )
    p.add_argument("--terminals", type=int, default=50, help="idle terminals for the memory figure")
    p.add_argument(
        "--many",
        type=int,
        default=16,
        help="terminals streaming at once in the many-terminals figure, each SIZE/N MB "
        "(default 16; 0 skips it)",
    )
    p.add_argument(
        "--scanner-mb",
        type=float,
        default=None,
        help="input size for benchmarks/bench_*.py (default: min(size, 20))",
    )
    p.add_argument(
        "--stall-hold",
        type=float,
        default=None,
        help="seconds a stalled client stays stalled after the run, waiting for the "
        "sidecar to cut it off (default 12, or 0 below 20 MB: no overflow to wait for)",
    )
    p.add_argument(
        "--peers",
        action="store_true",
        help="also measure terminado, ttyd ($AHP_BENCH_TTYD or ttyd on PATH) and the floors",
    )
    p.add_argument(
        "--no-c-client",
        action="store_true",
        help="skip the rows measured by the independent C client (ahp/bench/wsclient.c, "
        "compiled with cc -O2 when a C compiler exists)",
    )
    p.add_argument("--no-chart", action="store_true", help="do not write the PNG chart")
    p.add_argument("--out", type=Path, default=Path("bench-results"), help="results directory")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    # Imported here so that ``python -m ahp --help`` does not load the engine.
    from ahp.bench.chart import chart_unavailable, write_chart
    from ahp.bench.report import render_table, result_stem, write_json
    from ahp.bench.suite import Config, run_suite
    from ahp.bench.targets import evaluate

    if args.runs < 1 or args.size_mb <= 0 or args.terminals < 1 or args.many < 0:
        print(
            "ahp-terminals bench: --runs, --size-mb and --terminals must be positive, "
            "--many at least 0",
            file=sys.stderr,
        )
        return 2
    if not 1 <= args.echo_count <= MAX_ECHO_COUNT:
        print(f"ahp-terminals bench: --echo-count must be 1..{MAX_ECHO_COUNT}", file=sys.stderr)
        return 2
    if not 1 <= args.idle_count <= MAX_ECHO_COUNT:
        print(f"ahp-terminals bench: --idle-count must be 1..{MAX_ECHO_COUNT}", file=sys.stderr)
        return 2
    argv = sys.argv[1:] if sys.argv and sys.argv[0].endswith("__main__.py") else None
    shown = "ahp-terminals " + (shlex.join(argv) if argv else _describe(args))
    config = Config(
        size_mb=args.size_mb,
        runs=args.runs,
        echo_count=args.echo_count,
        idle_count=args.idle_count,
        terminals=args.terminals,
        many=args.many,
        stall_hold=args.stall_hold
        if args.stall_hold is not None
        else (12.0 if args.size_mb >= 20 else 0.0),
        peers=args.peers,
        c_client=not args.no_c_client,
        folded_mb=args.scanner_mb if args.scanner_mb is not None else min(args.size_mb, 20.0),
        command=shown,
    )
    results = run_suite(config)
    targets = evaluate(results)
    results["targets"] = [t.to_json() for t in targets]
    out: Path = args.out
    stem = result_stem()
    chart_note: str
    if args.no_chart:
        results["chart"] = {"skipped": "--no-chart"}
        chart_note = "chart: skipped (--no-chart)"
    elif (missing := chart_unavailable()) is not None:
        results["chart"] = {"skipped": missing}
        chart_note = f"chart: skipped: {missing}"
    else:
        png = write_chart(results, out / f"{stem}.png")
        results["chart"] = {"path": str(png)}
        chart_note = f"chart: {png}"
    path = write_json(results, out, stem)
    print(render_table(results, targets))
    print()
    print(f"results: {path}")
    print(chart_note)
    return 0


def _describe(args: argparse.Namespace) -> str:
    parts = ["bench", f"--size-mb {args.size_mb:g}", f"--runs {args.runs}"]
    if args.peers:
        parts.append("--peers")
    if args.no_chart:
        parts.append("--no-chart")
    return " ".join(parts)
