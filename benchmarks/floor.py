"""The floors alone: the bare Trio servers of ``ahp.bench.floors`` beside ours and the peers.

Why a script beside ``nox -s bench`` (which measures the floors as four more peers):
a quick A/B of the keystroke path and the stream, a few minutes long, with extra
sidecar sides that differ by their environment (``--ahp AHP_KEYSTROKE_OFF=echo_pairing``).
``ahp.bench.floors`` says what the floors are (floor-2, floor-card, floor-ahp,
floor-state). Every
server is measured with the same independent C client (``ahp.bench.cclient``):
keystroke echo back to back and
after ``--pause`` seconds idle (``cat``), and ``--stream`` MB of the bench's workload
through interactive output (the gate), beside the bench's ceiling (a bare Trio
reader of the pty, :func:`ahp.bench.ceiling.bare_read`). The sides run one after
another in each round, in an order that rotates, each server in a fresh process;
ratios are taken per round, against terminado (echo) and the ceiling (stream).
Usage, from a checkout::

    python benchmarks/floor.py --rounds 6 --count 1000 --idle-count 30 --stream 20 \\
        [--ttyd] [--ahp AHP_KEYSTROKE_OFF=echo_pairing]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import trio

SIDES = ("terminado", "floor-2", "floor-card", "floor-ahp", "floor-state", "ahp")


async def _measure_side(side: str, args: argparse.Namespace, workload: Any) -> dict[str, float]:
    from ahp.bench.cclient import build_client
    from ahp.bench.ceiling import bare_read
    from ahp.bench.endtoend import AhpServer, c_echo_run, c_stream_run
    from ahp.bench.floors import SHAPES, open_floor
    from ahp.bench.peers import open_terminado
    from ahp.bench.processes import open_worker
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
        # "ahp:AHP_KEYSTROKE_OFF=echo_pairing": the sidecar with settings in its environment.
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
    async with open_floor(SHAPES[side], workload) as floor:
        return await run(floor)


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
        help="another sidecar side with these settings (e.g. AHP_KEYSTROKE_OFF=echo_pairing)",
    )
    args = parser.parse_args()
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
