"""Interleaved A/B of the output path: the sidecar's CPU and rate for a stream, side by side.

Why a separate script: ``nox -s bench`` measures the server's CPU per 100 MB once per
run, beside every peer, and the figure moves by 10-20 % between runs on a shared
2-core machine, more than the output-path changes being judged. Only sides measured
alternately, in the same minutes, compare. Each side is a checkout (its directory
first on ``PYTHONPATH``) plus environment settings; each round runs every side once,
in a fresh process, in an order that rotates from round to round. A side serves an
in-process sidecar (the bench worker's set-up: ``prepare_server_process``, its
children's niceness) and streams the bench's workload through the independent C
client (``ahp.bench.cclient``, a process of its own, so the process's CPU is the
server's alone: the event loop's thread and the pty reader threads).

Usage (from a checkout)::

    git worktree add /tmp/old <commit>
    python benchmarks/ab_stream.py --side old=/tmp/old --side new=. --rounds 8 --mb 50
    python benchmarks/ab_stream.py --side old=/tmp/old --side new=. --clients 8  # fan-out

Prints per side the median over rounds of CPU-s per 100 MB (the process's, and the
event loop thread's alone: the pty reader threads' share is mostly the kernel's tty
work), MB/s, and the loop's task steps per MB (counted, not timed), with min-max,
and each side's ratio to the first side, per round, as median [min-max].
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Any

from ab_echo import parse_side, run_child  # (a sibling script: its directory is on sys.path)

HERE = Path(__file__).resolve()
FIGURES = ("cpu_s_per_100mb", "loop_cpu_s_per_100mb", "mb_s", "steps_per_mb")


async def _measure(args: argparse.Namespace) -> dict[str, Any]:
    import trio

    import ahp
    from ahp.bench.cclient import build_client, c_stream
    from ahp.bench.workload import generate
    from ahp.engine import open_host
    from ahp.server.app import SERVE_CHILD_NICE, ServeOptions, prepare_server_process, serve_host

    class Counter(trio.abc.Instrument):
        steps = 0

        def before_task_step(self, task: trio.lowlevel.Task) -> None:
            Counter.steps += 1

    prepare_server_process()
    binary = build_client()
    out: dict[str, Any] = {"ahp": str(Path(ahp.__file__).parent)}
    with tempfile.TemporaryDirectory() as directory:
        workload = generate(Path(directory), args.mb)
        async with open_host() as host, trio.open_nursery() as nursery:
            options = ServeOptions(port=0, token="tok", child_nice=SERVE_CHILD_NICE)
            side = await nursery.start(serve_host, host, options)
            for measured in (False, True):  # (a warm-up stream first)
                term = await host.create_terminal(argv=workload.gate_argv(), cwd=directory)
                await trio.sleep(0.3)
                counter = Counter()
                before_steps = Counter.steps
                cpu = time.process_time()
                loop_cpu = time.thread_time()
                if measured:
                    trio.lowlevel.add_instrument(counter)
                try:
                    async with trio.open_nursery() as watchers:
                        for _ in range(args.clients - 1):  # (they type nothing)
                            watchers.start_soon(
                                partial(c_stream, binary, side.url, "ahp", term.uri, release="")
                            )
                        await trio.sleep(0.5 if args.clients > 1 else 0)
                        run = await c_stream(binary, side.url, "ahp", term.uri)
                finally:
                    if measured:
                        trio.lowlevel.remove_instrument(counter)
                cpu = time.process_time() - cpu
                loop_cpu = time.thread_time() - loop_cpu
                await host.dispose(term.uri)
            per = 1e8 / run.text_bytes
            out["cpu_s_per_100mb"] = cpu * per
            out["loop_cpu_s_per_100mb"] = loop_cpu * per
            out["mb_s"] = run.text_bytes / run.seconds / 1e6
            out["steps_per_mb"] = (Counter.steps - before_steps) * 1e6 / run.text_bytes
            nursery.cancel_scope.cancel()
    return out


def _run_side(path: Path, env_extra: dict[str, str], args: argparse.Namespace) -> dict[str, Any]:
    env = dict(os.environ)
    env.update(env_extra)
    env["PYTHONPATH"] = str(path)
    command = [sys.executable, str(HERE), "--child", "--mb", str(args.mb)]
    command += ["--clients", str(args.clients)]
    return run_child(path, env, command)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--side", action="append", default=[], help="NAME=PATH[:ENV=VALUE...]")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--mb", type=float, default=50.0)
    parser.add_argument(
        "--clients", type=int, default=1, help="C clients following the stream (fan-out)"
    )
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        import trio

        print(json.dumps(trio.run(_measure, args)))
        return
    sides = [parse_side(s) for s in args.side]
    if len(sides) < 2:
        parser.error("at least two --side")
    results: dict[str, list[dict[str, Any]]] = {name: [] for name, _, _ in sides}
    print(f"start {time.strftime('%H:%M:%S')} load {os.getloadavg()}", file=sys.stderr)
    for i in range(args.rounds):
        k = i % len(sides)
        for name, path, env in sides[k:] + sides[:k]:
            results[name].append(_run_side(path, env, args))
        line = "  ".join(
            f"{n}: cpu={results[n][-1]['cpu_s_per_100mb']:.3f} mb_s={results[n][-1]['mb_s']:.1f}"
            for n, _, _ in sides
        )
        print(f"round {i + 1}/{args.rounds} load {os.getloadavg()[0]:.2f}  {line}", file=sys.stderr)
    print(f"end {time.strftime('%H:%M:%S')} load {os.getloadavg()}")
    base = sides[0][0]
    for name, path, env in sides:
        print(f"{name} = {path} {env}")
    for figure in FIGURES:
        for name, _, _ in sides:
            values = [r[figure] for r in results[name]]
            row = f"{figure:<16} {name:<12} {statistics.median(values):8.3f} "
            row += f"[{min(values):.3f}-{max(values):.3f}]"
            if name != base:
                ratios = [
                    r[figure] / b[figure] for r, b in zip(results[name], results[base], strict=True)
                ]
                row += f"  /{base} {statistics.median(ratios):.3f} "
                row += f"[{min(ratios):.2f}-{max(ratios):.2f}]"
            print(row)


if __name__ == "__main__":
    main()
