"""Interleaved A/B of keystroke echo latency: checkouts and keystroke switches side by side.

Why a separate script: the echo's figures move by more between runs on a shared
machine than the changes being judged (tens of microseconds), so only a ratio of
sides measured alternately, in the same minutes, means anything. Each side is a
checkout (its directory first on ``PYTHONPATH``, the sidecar worker inherits it)
plus environment settings (``AHP_KEYSTROKE_OFF=echo_pairing`` and the like, see
``ahp/keystroke.py``); each round runs every side once, in a fresh process, in an
order that rotates from round to round. A side measures, with that checkout's own
``ahp.bench`` procedures: the engine in-process (``engine_echo``), the sidecar
through the independent C client back to back and after ``--pause`` seconds of
idleness, and (``--terminado``) terminado through the same C client, as a
reference measured in the same process minutes.

Usage (from a checkout)::

    git worktree add /tmp/old <commit>
    python benchmarks/ab_echo.py --side old=/tmp/old --side new=. --rounds 6
    python benchmarks/ab_echo.py --side on=. --side "pairing_off=.:AHP_KEYSTROKE_OFF=echo_pairing"

Prints per side the median over rounds of each figure's per-run median (ms), with
min-max, and each side's ratio to the first side, per round, as median [min-max].
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()
FIGURES = ("engine", "c_echo", "c_idle", "terminado_c_echo", "terminado_c_idle")
#: Counted, not timed (per keystroke, in-process; the same on a loaded machine).
COUNTS = ("engine_steps", "engine_batches")


async def _count_passes(host: Any, directory: str, count: int) -> tuple[float, float]:
    """Median task steps and scheduler batches (waits in epoll) per in-process keystroke,
    from ``send_input`` to the subscriber holding the echo."""
    import trio

    from ahp.protocol import ActionEnvelope, TerminalData

    class Counter(trio.abc.Instrument):
        steps = 0
        batches = 0

        def before_task_step(self, task: trio.lowlevel.Task) -> None:
            Counter.steps += 1

        def before_io_wait(self, timeout: float) -> None:
            Counter.batches += 1

    term = await host.create_terminal(argv=["cat"], cwd=directory)
    steps: list[int] = []
    batches: list[int] = []
    try:
        async with term.subscribe() as sub:
            await sub.__anext__()  # the snapshot
            counter = Counter()
            trio.lowlevel.add_instrument(counter)
            try:
                for _ in range(count):
                    s0, b0 = Counter.steps, Counter.batches
                    await term.send_input("x")
                    while True:
                        item = await sub.__anext__()
                        if isinstance(item, ActionEnvelope) and isinstance(
                            item.action, TerminalData
                        ):
                            break
                    steps.append(Counter.steps - s0)
                    batches.append(Counter.batches - b0)
            finally:
                trio.lowlevel.remove_instrument(counter)
    finally:
        await host.dispose(term.uri)
    return statistics.median(steps), statistics.median(batches)


async def _measure(args: argparse.Namespace) -> dict[str, Any]:
    import ahp
    from ahp.bench.cclient import build_client
    from ahp.bench.endtoend import AhpServer, c_echo_run
    from ahp.bench.inprocess import engine_echo
    from ahp.bench.processes import open_worker
    from ahp.bench.workload import generate
    from ahp.engine import open_host

    out: dict[str, Any] = {"ahp": str(Path(ahp.__file__).parent)}
    binary = build_client()
    with tempfile.TemporaryDirectory() as directory:
        workload = generate(Path(directory), 0.01)
        if args.engine:
            async with open_host() as host:
                await engine_echo(host, 50, directory)  # warm-up
                out["engine"] = statistics.median(await engine_echo(host, args.count, directory))
                passes = await _count_passes(host, directory, 200)
                out["engine_steps"], out["engine_batches"] = passes
        async with open_worker() as worker:
            server = AhpServer(worker, workload)
            await c_echo_run(server, binary, 50, warmup=20)  # warm-up
            cpu = server.cpu_seconds()
            samples = await c_echo_run(server, binary, args.count, warmup=20)
            out["c_echo_cpu_us"] = (server.cpu_seconds() - cpu) / args.count * 1e6
            out["c_echo"] = statistics.median(samples)
            if args.idle_count:
                idle = await c_echo_run(server, binary, args.idle_count, warmup=2, pause=args.pause)
                out["c_idle"] = statistics.median(idle)
        if args.terminado:
            from ahp.bench.peers import open_terminado

            async with open_terminado(workload) as terminado:
                await c_echo_run(terminado, binary, 50, warmup=20)
                samples = await c_echo_run(terminado, binary, args.count, warmup=20)
                out["terminado_c_echo"] = statistics.median(samples)
                if args.idle_count:
                    idle = await c_echo_run(
                        terminado, binary, args.idle_count, warmup=2, pause=args.pause
                    )
                    out["terminado_c_idle"] = statistics.median(idle)
    return out


def parse_side(text: str) -> tuple[str, Path, dict[str, str]]:
    """``NAME=PATH[:ENV=VALUE...]``: a side's name, checkout and environment settings."""
    name, _, rest = text.partition("=")
    path, *settings = rest.split(":")
    env = {}
    for setting in settings:
        key, _, value = setting.partition("=")
        env[key] = value
    return name, Path(path).resolve(), env


def _run_side(path: Path, env_extra: dict[str, str], args: argparse.Namespace) -> dict[str, Any]:
    env = dict(os.environ)
    env.pop("AHP_KEYSTROKE_OFF", None)
    env.update(env_extra)
    env["PYTHONPATH"] = str(path)
    command = [sys.executable, str(HERE), "--child", "--count", str(args.count)]
    command += ["--idle-count", str(args.idle_count), "--pause", str(args.pause)]
    if not args.engine:
        command.append("--no-engine")
    if args.terminado:
        command.append("--terminado")
    return run_child(path, env, command)


def run_child(path: Path, env: dict[str, str], command: list[str]) -> dict[str, Any]:
    """Run one side's measuring process in ``path``; its last stdout line, as JSON
    (which must name the ``ahp`` it imported: ``path``'s own)."""
    done = subprocess.run(
        command, check=False, env=env, cwd=path, capture_output=True, text=True, timeout=1800
    )
    if done.returncode:
        raise SystemExit(f"{path}: failed\n{done.stderr}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    if Path(result["ahp"]).resolve() != (path / "ahp").resolve():
        raise SystemExit(f"{path}: imported ahp from {result['ahp']}")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--side", action="append", default=[], help="NAME=PATH[:ENV=VALUE...]")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--count", type=int, default=300)
    parser.add_argument("--idle-count", type=int, default=10)
    parser.add_argument("--pause", type=float, default=0.15)
    parser.add_argument("--no-engine", dest="engine", action="store_false")
    parser.add_argument("--terminado", action="store_true", help="also measure terminado")
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
        order = sides[k:] + sides[:k]
        for name, path, env in order:
            first = args.terminado and name == order[0][0]
            args_side = argparse.Namespace(**{**vars(args), "terminado": first})
            results[name].append(_run_side(path, env, args_side))
        line = "  ".join(
            f"{n}: "
            + " ".join(
                f"{f}={results[n][-1][f] * 1e3:.3f}" for f in FIGURES[:3] if f in results[n][-1]
            )
            for n, _, _ in sides
        )
        print(f"round {i + 1}/{args.rounds} load {os.getloadavg()[0]:.2f}  {line}", file=sys.stderr)
    print(f"end {time.strftime('%H:%M:%S')} load {os.getloadavg()}")
    base = sides[0][0]
    for name, path, env in sides:
        print(f"{name} = {path} {env}")
    for figure in (*FIGURES, "c_echo_cpu_us", *COUNTS):
        scale = 1.0 if figure.endswith("_us") or figure in COUNTS else 1e3
        for name, _, _ in sides:
            values = [r[figure] * scale for r in results[name] if figure in r]
            if not values:
                continue
            row = f"{figure:<18} {name:<12} {statistics.median(values):8.3f} "
            row += f"[{min(values):.3f}-{max(values):.3f}]"
            if name != base and not figure.startswith("terminado"):
                ratios = [
                    r[figure] / b[figure]
                    for r, b in zip(results[name], results[base], strict=True)
                    if figure in r and figure in b
                ]
                if ratios:
                    row += f"  /{base} {statistics.median(ratios):.3f} "
                    row += f"[{min(ratios):.2f}-{max(ratios):.2f}]"
            print(row)
    if args.terminado:
        for name, _, _ in sides:
            for figure in ("c_echo", "c_idle"):
                ratios = []
                for i, r in enumerate(results[name]):
                    # terminado measured in the round's first process
                    firsts = [
                        results[n][i] for n, _, _ in sides if f"terminado_{figure}" in results[n][i]
                    ]
                    if firsts and figure in r:
                        ratios.append(r[figure] / firsts[0][f"terminado_{figure}"])
                if ratios:
                    print(
                        f"{figure:<18} {name:<12} / terminado {statistics.median(ratios):.3f} "
                        f"[{min(ratios):.2f}-{max(ratios):.2f}]"
                    )


if __name__ == "__main__":
    main()
