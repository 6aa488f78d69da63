"""Interleaved A/B of two checkouts: echo latency, in-process throughput, sidecar end to end.

Why a separate script: the engine's shape changed (issue 11: stage tasks joined by
memory channels instead of one inline reduce step), and its budget is relative
to the engine before it, measured in one run on one quiet machine. Each side
runs in its own process with its checkout first on ``PYTHONPATH`` and uses that
checkout's own ``ahp.bench`` measurements (the sidecar worker it starts
inherits the path), so both sides run the same workload through their own
engine and server. Sides alternate which goes first in every round, and the
figures are medians over rounds with min-max, as in ``python -m ahp bench``.

Usage (from the repository root of either checkout)::

    git worktree add /tmp/ahp-before <commit before issue 11>
    python benchmarks/ab_engine.py --a /tmp/ahp-before --b . --rounds 7

    # scheduler passes (task steps) per keystroke, in-process, no timing involved:
    python benchmarks/ab_engine.py --a /tmp/ahp-before --b . --steps-only

Budget (issue 11): echo median no worse than +0.03 ms; in-process throughput and
sidecar end to end each >= 0.95x of A.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()


# -- the measuring process (one side, one round) -----------------------------------------------


async def _measure(size_mb: float, echo_count: int) -> dict[str, Any]:
    import ahp
    from ahp.bench.endtoend import AhpServer, echo_run
    from ahp.bench.inprocess import engine_echo, engine_run
    from ahp.bench.processes import open_worker
    from ahp.bench.workload import generate
    from ahp.bench.wsclient import stream_throughput
    from ahp.engine import open_host

    with tempfile.TemporaryDirectory() as directory:
        workload = generate(Path(directory), size_mb)
        async with open_host() as host:
            await engine_run(host, workload, 1)  # warm-up
            run = await engine_run(host, workload, 1)
            echo = await engine_echo(host, echo_count, directory)
        async with open_worker() as worker:
            server = AhpServer(worker, workload)
            url, dialect, handle = await server.terminal("gate")
            await stream_throughput(url, dialect())  # warm-up
            await server.release(handle)
            url, dialect, handle = await server.terminal("gate")
            e2e = await stream_throughput(url, dialect())
            await server.release(handle)
            sidecar_echo = await echo_run(server, echo_count)
    return {
        "ahp": str(Path(ahp.__file__).parent),
        "engine_mb_s": workload.gated_bytes() / run.seconds / 1e6,
        "sidecar_mb_s": workload.gated_bytes() / e2e.seconds / 1e6,
        "engine_echo_ms": statistics.median(echo) * 1e3,
        "sidecar_echo_ms": statistics.median(sidecar_echo) * 1e3,
    }


async def _steps(count: int) -> dict[str, Any]:
    """Task steps (scheduler passes of any task): per keystroke in-process, from
    ``send_input`` to the subscriber holding the echo; and per MB of sustained output
    through one in-process subscriber."""
    import trio

    import ahp
    from ahp.engine import open_host
    from ahp.protocol import ActionEnvelope, TerminalData, TerminalExited

    class Counter(trio.abc.Instrument):
        steps = 0

        def before_task_step(self, task: trio.lowlevel.Task) -> None:
            Counter.steps += 1

    counter = Counter()
    per_key: list[int] = []
    size = 5_000_000
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "out.txt"
        path.write_bytes((b"x" * 99 + b"\n") * (size // 100))
        async with open_host() as host:
            term = await host.create_terminal(argv=["cat"], cwd=directory)
            async with term.subscribe() as sub:
                await sub.__anext__()  # the snapshot
                trio.lowlevel.add_instrument(counter)
                try:
                    for _ in range(count):
                        before = Counter.steps
                        await term.send_input("x")
                        while True:
                            item = await sub.__anext__()
                            if isinstance(item, ActionEnvelope) and isinstance(
                                item.action, TerminalData
                            ):
                                break
                        per_key.append(Counter.steps - before)
                finally:
                    trio.lowlevel.remove_instrument(counter)
            flood = await host.create_terminal(argv=["cat", str(path)], cwd=directory)
            async with flood.subscribe(max_bytes=1 << 30) as sub:
                trio.lowlevel.add_instrument(counter)
                before = Counter.steps
                try:
                    async for item in sub:
                        if isinstance(item, ActionEnvelope) and isinstance(
                            item.action, TerminalExited
                        ):
                            break
                finally:
                    trio.lowlevel.remove_instrument(counter)
            flood_steps = Counter.steps - before
    return {
        "ahp": str(Path(ahp.__file__).parent),
        "steps_per_key": statistics.median(per_key),
        "steps_per_mb": flood_steps / (size / 1e6),
        "read_batches_per_mb": flood.read_batches / (size / 1e6),
    }


def _child_main(args: argparse.Namespace) -> None:
    import trio

    if args.steps_only:
        result = trio.run(_steps, args.echo_count)
    else:
        result = trio.run(_measure, args.size_mb, args.echo_count)
    print(json.dumps(result))


# -- the driver ---------------------------------------------------------------------------------


def _side(root: Path, args: argparse.Namespace) -> dict[str, Any]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(root), env.get("PYTHONPATH")) if p)
    command = [sys.executable, str(HERE), "--child", "--size-mb", str(args.size_mb)]
    command += ["--echo-count", str(args.echo_count)]
    if args.steps_only:
        command.append("--steps-only")
    done = subprocess.run(
        command, env=env, cwd=root, capture_output=True, text=True, check=True, timeout=1800
    )
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    if Path(result["ahp"]).resolve() != (root / "ahp").resolve():
        raise SystemExit(f"{root}: imported ahp from {result['ahp']} (check PYTHONPATH)")
    return result


def _row(name: str, a: list[float], b: list[float], unit: str) -> str:
    ma, mb = statistics.median(a), statistics.median(b)
    return (
        f"{name:<22} A {ma:8.3f} [{min(a):.3f}-{max(a):.3f}]  "
        f"B {mb:8.3f} [{min(b):.3f}-{max(b):.3f}] {unit:<5} B/A {mb / ma:5.2f}  B-A {mb - ma:+.3f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--a", type=Path, help="checkout A (before)")
    parser.add_argument("--b", type=Path, help="checkout B (after)")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--size-mb", type=float, default=50.0)
    parser.add_argument("--echo-count", type=int, default=300)
    parser.add_argument("--steps-only", action="store_true", help="task steps per keystroke")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child_main(args)
        return
    if args.a is None or args.b is None:
        parser.error("--a and --b are required")
    sides = {"A": args.a.resolve(), "B": args.b.resolve()}
    results: dict[str, list[dict[str, Any]]] = {"A": [], "B": []}
    rounds = 1 if args.steps_only else args.rounds
    for i in range(rounds):
        order = ("A", "B") if i % 2 == 0 else ("B", "A")
        for name in order:
            results[name].append(_side(sides[name], args))
        print(f"round {i + 1}/{rounds} done", file=sys.stderr)
    keys = (
        [
            ("steps_per_key", "steps"),
            ("steps_per_mb", "steps"),
            ("read_batches_per_mb", "reads"),
        ]
        if args.steps_only
        else [
            ("engine_echo_ms", "ms"),
            ("sidecar_echo_ms", "ms"),
            ("engine_mb_s", "MB/s"),
            ("sidecar_mb_s", "MB/s"),
        ]
    )
    print(f"A = {sides['A']}\nB = {sides['B']}")
    for key, unit in keys:
        a = [float(r[key]) for r in results["A"]]
        b = [float(r[key]) for r in results["B"]]
        print(_row(key, a, b, unit))


if __name__ == "__main__":
    main()
