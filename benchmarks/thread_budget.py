"""Where one stream's threads spend their time: running, waiting for a CPU, or asleep.

Why: issue 23's one-terminal goals ask for a rate (0.85x the bare reader, 1.25x ttyd),
and a pipeline's rate is set by its busiest part. ``nox -s bench`` prints, under each
one-terminal row, where the server's threads and ``cat`` spent the run
(:mod:`ahp.bench.threads`); this script measures the same for three servers alone, in
fresh processes taken in turn, and adds the C client: the bench's bare reader
(``ahp.bench.ceiling.bare_read``: the event loop reading the pty master, nothing else),
the sidecar (the bench's worker process streaming the bench's workload to the independent
C client) and floor-state (``ahp.bench.floors``, a child process), both measured as the
bench measures them.

Usage (from a checkout)::

    python benchmarks/thread_budget.py --rounds 3 --mb 40

Prints per round and server the rate, then the shares of the run each part ran, waited
for a CPU and slept: ``main`` (the server's main thread: its event loop), ``busiest``
(its busiest other thread: the sidecar's pty reader thread), ``cat`` and ``client``;
at the end the medians over rounds.
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
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import attrs

from ahp.bench.threads import ThreadBudget, ThreadSampler

HERE = Path(__file__).resolve()
#: What is measured, in this order (rotated from round to round).
KINDS = ("bare", "sidecar", "floor-state")
#: The parts reported, and their shares.
PARTS = ("main", "busiest", "cat", "client")
SHARES = ("ran", "waited", "slept")
#: The independent C client's process name (``wsclient-<digest>``).
CLIENT = "wsclient"


def _parts(budget: ThreadBudget | None, client: ThreadBudget | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if budget is not None:
        for name in ("main", "busiest", "program"):
            part = getattr(budget, name)
            if part is not None:
                out["cat" if name == "program" else name] = attrs.asdict(part)
    if client is not None and client.program is not None:
        out["client"] = attrs.asdict(client.program)
    return out


async def _bare(mb: float) -> dict[str, Any]:
    from ahp.bench.ceiling import bare_read
    from ahp.bench.workload import generate

    with tempfile.TemporaryDirectory() as directory:
        workload = generate(Path(directory), mb)
        await bare_read(workload)  # (warm-up)
        run = await bare_read(workload)  # (it samples itself)
    return {"mb_s": run.nbytes / run.seconds / 1e6, "parts": _parts(run.threads, None)}


async def _served(kind: str, mb: float) -> dict[str, Any]:
    """The sidecar (the bench's worker process) or floor-state streaming the workload to
    the C client, as ``nox -s bench`` measures them (:func:`ahp.bench.endtoend.c_stream_run`
    samples the server); the C client, this process's child, sampled beside it."""
    from ahp.bench.cclient import build_client
    from ahp.bench.endtoend import AhpServer, c_stream_run
    from ahp.bench.floors import open_floor
    from ahp.bench.processes import open_worker
    from ahp.bench.workload import generate

    binary = build_client()
    with tempfile.TemporaryDirectory() as directory:
        workload = generate(Path(directory), mb)
        async with AsyncExitStack() as stack:
            if kind == "sidecar":
                server: Any = AhpServer(await stack.enter_async_context(open_worker()), workload)
            else:
                server = await stack.enter_async_context(open_floor("state", workload))
            await c_stream_run(server, binary)  # (warm-up)
            with ThreadSampler(os.getpid(), program=CLIENT) as client:
                measured = await c_stream_run(server, binary)
    run, parts = measured.run, _parts(measured.threads, client.budget)
    return {"mb_s": run.text_bytes / run.seconds / 1e6, "parts": parts}


def _line(kind: str, result: dict[str, Any]) -> str:
    parts = [f"{kind:<12} {result['mb_s']:6.1f} MB/s"]
    for name, s in result["parts"].items():
        parts.append(
            f"{name} ran {s['ran']:4.0%} waited {s['waited']:4.0%} slept {s['slept']:4.0%}"
        )
    return "  ".join(parts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--mb", type=float, default=40.0)
    parser.add_argument("--child", choices=KINDS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        import trio

        if args.child == "bare":
            print(json.dumps(trio.run(_bare, args.mb)))
        else:
            print(json.dumps(trio.run(_served, args.child, args.mb)))
        return
    results: dict[str, list[dict[str, Any]]] = {k: [] for k in KINDS}
    print(f"start {time.strftime('%H:%M:%S')} load {os.getloadavg()}")
    for i in range(args.rounds):
        for kind in KINDS[i % len(KINDS) :] + KINDS[: i % len(KINDS)]:
            command = [sys.executable, str(HERE), "--child", kind, "--mb", str(args.mb)]
            done = subprocess.run(command, check=True, capture_output=True, text=True)
            result = json.loads(done.stdout.strip().splitlines()[-1])
            results[kind].append(result)
            print(f"round {i + 1}: {_line(kind, result)}", flush=True)
    print(f"end {time.strftime('%H:%M:%S')} load {os.getloadavg()}")
    for kind in KINDS:
        runs = results[kind]
        names = [
            n for n in ("main", "busiest", "cat", "client") if all(n in r["parts"] for r in runs)
        ]
        median = {
            "mb_s": statistics.median(r["mb_s"] for r in runs),
            "parts": {
                n: {
                    k: statistics.median(r["parts"][n][k] for r in runs)
                    for k in ("ran", "waited", "slept")
                }
                for n in names
            },
        }
        print(f"median   {_line(kind, median)}")


if __name__ == "__main__":
    main()
