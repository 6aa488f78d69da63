"""The longest event-loop steps of a server while one ``bench_edges`` attack runs.

Why: under other engineers' load a legitimate client's echo (``bench_edges.py``) is
mostly the machine's noise; the CPU time of each Trio task step of the server is
not (``time.thread_time``: a step preempted by another process does not count).
Runs a server in this process (shell ``/bin/sh``), starts the attack of
``benchmarks/bench_edges.py`` in its own process, waits 4 s for it to take hold,
then records every task step for ``seconds`` and prints the count, p99 and
maximum of the steps' CPU time, how many took more than 5 and 10 ms, the longest
wall time, and the longest step per task.

    python benchmarks/loop_steps.py "snapshot readers" 10

The server is imported from ``PYTHONPATH`` (set it to another checkout for a
before/after comparison; the attack always comes from this checkout).
"""

from __future__ import annotations

import collections
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import trio

from ahp.engine import open_host
from ahp.server.app import ServeOptions, prepare_server_process, serve_host

BENCH = Path(__file__).resolve().parent / "bench_edges.py"
TOKEN = "bench-edges-token"


class Steps(trio.abc.Instrument):
    """CPU time of every task step while :attr:`on`; the longest per task name."""

    def __init__(self) -> None:
        self.start: dict[trio.lowlevel.Task, tuple[float, float]] = {}
        self.worst: dict[str, float] = collections.defaultdict(float)
        self.cpu: list[float] = []
        self.wall = 0.0
        self.on = False

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self.start[task] = (time.perf_counter(), time.thread_time())

    def after_task_step(self, task: trio.lowlevel.Task) -> None:
        wall, cpu = self.start.pop(task, (time.perf_counter(), time.thread_time()))
        if not self.on:
            return
        ms = (time.thread_time() - cpu) * 1e3
        self.wall = max(self.wall, (time.perf_counter() - wall) * 1e3)
        parts = task.name.split(".")
        name = ".".join(parts[-3::2]) if "<locals>" in parts else parts[-1]
        self.worst[name] = max(self.worst[name], ms)
        self.cpu.append(ms)


async def main(attack: str, seconds: float) -> None:
    prepare_server_process()  # (the allocator and the collector as ``serve`` sets them)
    steps = Steps()
    trio.lowlevel.add_instrument(steps)
    async with open_host(shell="/bin/sh") as host, trio.open_nursery() as nursery:
        side = await nursery.start(serve_host, host, ServeOptions(port=0, token=TOKEN))
        cmd = [sys.executable, str(BENCH), "attack", attack, str(side.port), side.url]
        proc = await trio.lowlevel.open_process(cmd, stdout=subprocess.PIPE)
        await trio.sleep(4.0)  # (under load its imports alone take 2-3 s)
        steps.on = True
        await trio.sleep(seconds)
        steps.on = False
        proc.send_signal(signal.SIGTERM)
        assert proc.stdout is not None
        out = b""
        with trio.move_on_after(60):
            while chunk := await proc.stdout.receive_some(65536):
                out += chunk
        await proc.wait()
        await proc.stdout.aclose()
        cpu = sorted(steps.cpu)
        print(
            f"{attack}: load {os.getloadavg()[0]:.1f}; {len(cpu)} steps, CPU p99 "
            f"{cpu[int(len(cpu) * 0.99)]:.1f} ms, max {cpu[-1]:.1f} ms; "
            f"> 5 ms: {sum(x > 5 for x in cpu)}, > 10 ms: {sum(x > 10 for x in cpu)}; "
            f"longest wall {steps.wall:.1f} ms"
        )
        for name, worst in sorted(steps.worst.items(), key=lambda kv: -kv[1])[:3]:
            print(f"   {name:40} {worst:6.1f} ms")
        print("   attack notes:", out.decode(errors="replace").strip()[-200:])
        nursery.cancel_scope.cancel()


if __name__ == "__main__":
    trio.run(main, sys.argv[1], float(sys.argv[2]) if len(sys.argv) > 2 else 4.0)
