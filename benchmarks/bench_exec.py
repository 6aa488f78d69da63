"""Cost of ``exec_command`` (non-pty execution) beside its peers.

Run ``python benchmarks/bench_exec.py [runs] [size_mb]``. Figures (medians over
``runs``, in-process, one host):

* ``process_true_ms``: ``trio.run_process(["true"])``, the floor (spawn and reap);
* ``exec_true_ms``: ``await exec_command(host, ["true"])`` (an ``isPty: false`` terminal
  created, stdout and stderr read, the result built, the terminal kept listed);
* ``run_true_ms``: ``await term.run("true")`` in a bash terminal (typed at the
  prompt, command detection);
* ``exec_mb_s``: ``exec_command`` of ``head -c SIZE /dev/zero | tr`` printing ``size_mb``
  MB of text lines, read, published and budgeted (MB/s of stdout).
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import trio

try:
    from ahp.engine import open_host
    from ahp.engine.exec import exec_command
except ModuleNotFoundError:  # a checkout without `pip install -e .`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from ahp.engine import open_host
    from ahp.engine.exec import exec_command

__all__ = ["run"]


async def _figures(runs: int, size_mb: float) -> dict[str, float]:
    out: dict[str, float] = {}
    times: list[float] = []
    for _ in range(runs):
        start = time.perf_counter()
        await trio.run_process(["true"])
        times.append((time.perf_counter() - start) * 1000)
    out["process_true_ms"] = statistics.median(times)
    async with open_host() as host:
        times = []
        for _ in range(runs):
            start = time.perf_counter()
            await exec_command(host, ["true"])
            times.append((time.perf_counter() - start) * 1000)
        out["exec_true_ms"] = statistics.median(times)
        term = await host.create_terminal(shell="/bin/bash")
        await term.run("true")
        times = []
        for _ in range(runs):
            start = time.perf_counter()
            await term.run("true")
            times.append((time.perf_counter() - start) * 1000)
        out["run_true_ms"] = statistics.median(times)
        size = int(size_mb * 1e6)
        start = time.perf_counter()
        result = await exec_command(host, f"head -c {size} /dev/zero | tr '\\0' 'x' | fold -w 99")
        out["exec_mb_s"] = result.total_bytes / (time.perf_counter() - start) / 1e6
    return out


def run(runs: int = 30, size_mb: float = 20.0) -> dict[str, float]:
    return trio.run(_figures, runs, size_mb)


if __name__ == "__main__":
    args = sys.argv[1:]
    figures = run(int(args[0]) if args else 30, float(args[1]) if len(args) > 1 else 20.0)
    for key, value in figures.items():
        print(f"{key:24} {value:10.2f}")
