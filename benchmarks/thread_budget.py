"""Where one stream's threads spend their time: running, waiting for a CPU, or asleep.

Why: issue 23's one-terminal goals ask for a rate (0.85x the bare reader, 1.25x ttyd),
and a pipeline's rate is set by its busiest part. This script shows which part that is,
thread by thread, from the kernel's own accounting (``/proc/self/task/*/schedstat``:
nanoseconds on a CPU, nanoseconds runnable but waiting for one): the rest of a thread's
life it slept (in a system call such as a pty ``read`` waiting for the tty's flush
worker, in ``epoll_wait``, or for the GIL). Two processes are measured, alternately,
each round in a fresh one: the bench's bare reader (``ahp.bench.ceiling.bare_read``:
the event loop reading the pty master, nothing else) and the sidecar (the bench
worker's process set-up, an in-process ``serve`` streaming the bench's workload to the
independent C client, as ``benchmarks/ab_stream.py`` does).

A sampler thread reads every thread's counters every :data:`SAMPLE` seconds (a pty
reader thread ends with its pump, so only samples see it); its own thread is left
out. Its cost: one read of a few small files per sample, beside the threads it
watches (~50 wake-ups a second).

Usage (from a checkout)::

    python benchmarks/thread_budget.py --rounds 3 --mb 40

Prints per round and kind the rate, then per thread (``loop``: the event loop's;
``reader``: a pty reader thread of :mod:`ahp.pty.pump`, one line each; ``other``: the
rest together; and the busy descendant processes: ``cat``, the C ``client``, a
``floor``) the share of the stream's time it ran, waited for a CPU and slept; at
the end the medians over rounds.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()
#: Seconds between two samples of the threads' counters.
SAMPLE = 0.02
#: A thread other than the loop is reported as a reader when it ran at least this share
#: of the stream (the sidecar's other threads -- the scrollback packer's, Trio's cached
#: workers -- run far less); a child process is reported when it ran this much.
READER_SHARE = 0.05
#: What is measured, in this order (rotated from round to round).
KINDS = ("bare", "sidecar", "floor-state")


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None  # (it ended meanwhile)


def _tasks(pid: str) -> list[str]:
    try:
        return os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []


def _counters(own: bool) -> dict[int | str, tuple[int, int]]:
    """(ns on a CPU, ns waiting for one) now, for every thread of this process (by
    thread id; unless not ``own``) and for its descendant processes (by ``pid:name``:
    the terminal's program, the C client, a floor server and its program; each
    single-threaded)."""
    out: dict[int | str, tuple[int, int]] = {}
    for name in os.listdir("/proc/self/task"):
        text = _read(f"/proc/self/task/{name}/schedstat")
        if text is not None and own:
            ran, waited, _ = text.split()
            out[int(name)] = (int(ran), int(waited))
        children = (_read(f"/proc/self/task/{name}/children") or "").split()
        for pid in children:  # (grandchildren are appended as they are found)
            for task in _tasks(pid):
                children += (_read(f"/proc/{pid}/task/{task}/children") or "").split()
            text, comm = _read(f"/proc/{pid}/schedstat"), _read(f"/proc/{pid}/comm")
            if text is not None and comm is not None:
                ran, waited, _ = text.split()
                label = comm.strip()
                if label.startswith("python"):
                    label = "floor"
                elif label.startswith("wsclient"):  # (the C client, named by its digest)
                    label = "client"
                out[f"{pid}:{label}"] = (int(ran), int(waited))
    return out


class Sampler:
    """Every thread's counters, first and last seen, from a thread of its own; this
    process's threads left out unless ``own`` (a process that only drives a server of
    its own process)."""

    def __init__(self, *, own: bool = True) -> None:
        self.own = own
        self.first: dict[int | str, tuple[float, int, int]] = {}
        self.last: dict[int | str, tuple[float, int, int]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="sampler", daemon=True)
        self._me = 0

    def _take(self) -> None:
        now = time.perf_counter()
        for tid, (ran, waited) in _counters(self.own).items():
            if tid == self._me:
                continue
            self.first.setdefault(tid, (now, ran, waited))
            self.last[tid] = (now, ran, waited)

    def _run(self) -> None:
        self._me = threading.get_native_id()
        while not self._stop.wait(SAMPLE):
            self._take()

    def start(self) -> None:
        self._take()
        self._thread.start()

    def stop(self) -> dict[str, dict[str, float]]:
        """Each thread's shares of the time since :meth:`start` (see the module
        docstring for the names)."""
        self._stop.set()
        self._thread.join()
        self._take()
        start = min(t for t, _, _ in self.first.values())
        wall = max(t for t, _, _ in self.last.values()) - start
        threads: dict[str, dict[str, float]] = {}
        other = {"ran": 0.0, "waited": 0.0}
        readers = 0
        for tid, (t1, ran1, waited1) in sorted(self.last.items(), key=str):
            t0, ran0, waited0 = self.first[tid]
            ran, waited = (ran1 - ran0) / 1e9 / wall, (waited1 - waited0) / 1e9 / wall
            life = (t1 - t0) / wall
            shares = {"ran": ran, "waited": waited, "slept": max(0.0, life - ran - waited)}
            if isinstance(tid, str):  # a child process
                if ran >= READER_SHARE:
                    threads[tid.split(":", 1)[1]] = shares
            elif tid == os.getpid():
                threads["loop"] = shares
            elif ran >= READER_SHARE:
                readers += 1
                threads[f"reader{readers}"] = shares
            else:
                other["ran"] += ran
                other["waited"] += waited
        if self.own:
            threads["other"] = other
        return threads


async def _bare(mb: float) -> dict[str, Any]:
    from ahp.bench.ceiling import bare_read
    from ahp.bench.workload import generate

    with tempfile.TemporaryDirectory() as directory:
        workload = generate(Path(directory), mb)
        await bare_read(workload)  # (warm-up)
        sampler = Sampler()
        sampler.start()
        run = await bare_read(workload)
        threads = sampler.stop()
    return {"mb_s": run.nbytes / run.seconds / 1e6, "threads": threads}


async def _sidecar(mb: float) -> dict[str, Any]:
    import trio

    from ahp.bench.cclient import build_client, c_stream
    from ahp.bench.workload import generate
    from ahp.engine import open_host
    from ahp.server.app import SERVE_CHILD_NICE, ServeOptions, prepare_server_process, serve_host

    prepare_server_process()
    binary = build_client()
    with tempfile.TemporaryDirectory() as directory:
        workload = generate(Path(directory), mb)
        async with open_host() as host, trio.open_nursery() as nursery:
            options = ServeOptions(port=0, token="tok", child_nice=SERVE_CHILD_NICE)
            side = await nursery.start(serve_host, host, options)
            for measured in (False, True):  # (a warm-up stream first)
                term = await host.create_terminal(argv=workload.gate_argv(), cwd=directory)
                await trio.sleep(0.3)
                sampler = Sampler()
                if measured:
                    sampler.start()
                run = await c_stream(binary, side.url, "ahp", term.uri)
                if measured:
                    threads = sampler.stop()
                await host.dispose(term.uri)
            nursery.cancel_scope.cancel()
    return {"mb_s": run.text_bytes / run.seconds / 1e6, "threads": threads}


async def _floor(mb: float) -> dict[str, Any]:
    from ahp.bench.cclient import build_client
    from ahp.bench.endtoend import c_stream_run
    from ahp.bench.floors import open_floor
    from ahp.bench.workload import generate

    binary = build_client()
    with tempfile.TemporaryDirectory() as directory:
        workload = generate(Path(directory), mb)
        async with open_floor("state", workload) as server:
            await c_stream_run(server, binary)  # (warm-up)
            sampler = Sampler(own=False)
            sampler.start()
            measured = await c_stream_run(server, binary)
            threads = sampler.stop()
    return {"mb_s": measured.run.text_bytes / measured.run.seconds / 1e6, "threads": threads}


def _child(kind: str, mb: float) -> dict[str, Any]:
    import trio

    return trio.run({"bare": _bare, "sidecar": _sidecar, "floor-state": _floor}[kind], mb)


def _line(kind: str, result: dict[str, Any]) -> str:
    parts = [f"{kind:<8} {result['mb_s']:6.1f} MB/s"]
    for name, s in result["threads"].items():
        slept = f" slept {s['slept']:4.0%}" if "slept" in s else ""
        parts.append(f"{name} ran {s['ran']:4.0%} waited {s['waited']:4.0%}{slept}")
    return "  ".join(parts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--mb", type=float, default=40.0)
    parser.add_argument("--child", choices=KINDS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(_child(args.child, args.mb)))
        return
    kinds = list(KINDS)
    results: dict[str, list[dict[str, Any]]] = {k: [] for k in kinds}
    print(f"start {time.strftime('%H:%M:%S')} load {os.getloadavg()}")
    for i in range(args.rounds):
        for kind in kinds[i % len(kinds) :] + kinds[: i % len(kinds)]:
            command = [sys.executable, str(HERE), "--child", kind, "--mb", str(args.mb)]
            done = subprocess.run(command, check=True, capture_output=True, text=True)
            result = json.loads(done.stdout.strip().splitlines()[-1])
            results[kind].append(result)
            print(f"round {i + 1}: {_line(kind, result)}", flush=True)
    print(f"end {time.strftime('%H:%M:%S')} load {os.getloadavg()}")
    for kind in kinds:
        runs = results[kind]
        names = sorted({n for r in runs for n in r["threads"]})
        row = [f"{kind:<8} {statistics.median(r['mb_s'] for r in runs):6.1f} MB/s"]
        for name in names:
            have = [r["threads"][name] for r in runs if name in r["threads"]]
            shares = {k: statistics.median(s[k] for s in have) for k in have[0]}
            row.append(
                f"{name} ran {shares['ran']:4.0%} waited {shares['waited']:4.0%}"
                + (f" slept {shares['slept']:4.0%}" if "slept" in shares else "")
            )
        print("median  " + "  ".join(row))


if __name__ == "__main__":
    main()
