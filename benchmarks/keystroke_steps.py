"""A keystroke's scheduler passes and each task step's CPU: the sidecar beside floor-state.

Why: issue 23's echo goal sits at the level of floor-state (the terminal contract's work on
the engine's pure cores, without the engine's and the server's machinery), and what the
sidecar costs above it must be located. Both take the card's seven task steps a keystroke;
this script counts them (and Trio's waits in ``epoll``: polls with a zero timeout between
batches, and sleeps) and times each step's CPU (``time.thread_time`` around it, a Trio
instrument), in this process, with the bench's independent C client typing into ``cat``.
Sides alternate, each in a fresh process; the figures are per keystroke.

    python benchmarks/keystroke_steps.py --runs 2 --count 3000

Counting is exact on a loaded machine; the CPU figures are noisy (compare the sides of one
invocation). Not a ``nox -s bench`` figure: the bench's CPU a keystroke covers every thread.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import io
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

import trio

from ahp.bench import floors
from ahp.bench.cclient import build_client, c_echo

SIDES = ("ours", "floor-state")
WARMUP = 300


class _Steps(trio.abc.Instrument):
    """CPU time of each task step by task name, and the waits in ``epoll``, while ``on``."""

    def __init__(self) -> None:
        self.cpu: collections.Counter[str] = collections.Counter()
        self.steps: collections.Counter[str] = collections.Counter()
        self.polls = 0
        self.sleeps = 0
        self.on = False
        self._started = 0.0

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self._started = time.thread_time()

    def after_task_step(self, task: trio.lowlevel.Task) -> None:
        if self.on:
            name = task.name.rsplit(".", 1)[-1]
            self.cpu[name] += time.thread_time() - self._started
            self.steps[name] += 1

    def before_io_wait(self, timeout: float) -> None:
        if self.on:
            if timeout == 0:
                self.polls += 1
            else:
                self.sleeps += 1


async def _hosted(*, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
    from ahp.engine import open_host

    async with open_host() as host:
        task_status.started(host)
        await trio.sleep_forever()


async def _side(side: str, count: int) -> dict[str, Any]:
    binary = build_client()
    steps = _Steps()
    trio.lowlevel.add_instrument(steps)
    with tempfile.TemporaryDirectory() as directory:
        async with trio.open_nursery() as nursery:
            if side == "ours":
                from ahp.server.app import ServeOptions, prepare_server_process, serve_host

                prepare_server_process()
                host = await nursery.start(_hosted)
                sidecar = await nursery.start(serve_host, host, ServeOptions(port=0, token="t"))
                terminal = await host.create_terminal(argv=["cat"], cwd=directory)
                url, uri = sidecar.url, terminal.uri
            else:
                printed = io.StringIO()
                with contextlib.redirect_stdout(printed):
                    nursery.start_soon(floors.serve, "state", ["cat"], directory)
                    while not printed.getvalue().strip():  # noqa: ASYNC110 (no event: a print)
                        await trio.sleep(0.01)
                port = int(printed.getvalue().split()[0])
                url, uri = f"ws://127.0.0.1:{port}/echo/t1", "ahp-terminal:/floor-t1"
            await trio.sleep(0.3)
            samples = await c_echo(binary, url, "ahp", uri, count, warmup=WARMUP)
            steps.on = True
            loop = time.thread_time()
            samples = await c_echo(binary, url, "ahp", uri, count, warmup=0)
            loop = time.thread_time() - loop
            steps.on = False
            nursery.cancel_scope.cancel()
    return {
        "echo_ms": statistics.median(samples) * 1e3,
        "loop_us": loop / count * 1e6,
        "steps": sum(steps.steps.values()) / count,
        "polls": steps.polls / count,
        "sleeps": steps.sleeps / count,
        "cpu_us": {name: cpu / count * 1e6 for name, cpu in steps.cpu.most_common()},
        "per_step": {name: n / count for name, n in steps.steps.items()},
    }


def _child(side: str, count: int) -> None:
    import json

    print(json.dumps(trio.run(_side, side, count)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=2, help="runs of each side, alternating")
    parser.add_argument("--count", type=int, default=3000, help="keystrokes measured a run")
    parser.add_argument("--child", choices=SIDES, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(args.child, args.count)
        return
    import json

    for run in range(args.runs):
        for side in SIDES:
            out = subprocess.run(
                [sys.executable, __file__, "--child", side, "--count", str(args.count)],
                capture_output=True,
                text=True,
                check=True,
            )
            figures = json.loads(out.stdout.strip().splitlines()[-1])
            print(
                f"run {run + 1} {side}: echo {figures['echo_ms']:.3f} ms; a keystroke: "
                f"{figures['steps']:.2f} steps, {figures['polls']:.2f} polls, "
                f"{figures['sleeps']:.2f} sleeps; loop thread {figures['loop_us']:.0f} us"
            )
            for name, cpu in figures["cpu_us"].items():
                if figures["per_step"].get(name, 0) >= 0.5 or cpu >= 1:
                    print(f"    {cpu:6.1f} us  {figures['per_step'][name]:.2f}x {name}")


if __name__ == "__main__":
    main()
