"""Read-path figures of issues 23 and 25: interleaved A/B of checkouts, memory at full scrollback,
and the kernel's own cost of reading a pty.

Why a script of its own: the figures in ``benchmarks/README.md`` ("Issue 23/25: read path, CPU
and fairness") compare checkouts in one process per run (each side's own ``ahp``, first on
``PYTHONPATH``; the sidecar worker it starts inherits it), alternating the sides, on a machine
shared with other work, where only ratios within pairs count.

Usage (from a checkout; the other one from ``git worktree add /tmp/before <commit>``)::

    python benchmarks/bench_readpath.py ab --a /tmp/before --b . --pairs 4 --size-mb 20 --many 16
    python benchmarks/bench_readpath.py memory --terminals 30 --mb 6 [--kind b64]
    python benchmarks/bench_readpath.py floor --mb 100

``ab``: one JSON line per run — MB/s and server CPU per 100 MB through the sidecar to the
independent C client (``ahp.bench.endtoend.c_stream_run``), and with ``--many N`` N terminals at
once (``many_run``). ``memory``: RSS and peak (``VmHWM``) deltas of an in-process host whose
terminals each print ``--mb`` MB of repetitive lines (or base64 of random bytes), 1 s after
they exited, and 3 s after they were disposed. ``floor``: the CPU a process spends doing nothing
but reading a pty master while ``cat`` writes into the slave, and sending the same over
loopback TCP.
"""

from __future__ import annotations

import argparse
import json
import os
import pty
import resource
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import trio


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def _one_run(size_mb: float, many: int) -> dict[str, object]:
    from ahp.bench.cclient import build_client
    from ahp.bench.endtoend import AhpServer, c_stream_run, many_run
    from ahp.bench.processes import open_worker
    from ahp.bench.workload import generate

    binary = build_client()
    out: dict[str, object] = {"tree": os.environ.get("PYTHONPATH", "")}
    with tempfile.TemporaryDirectory() as tmp:
        workload = generate(Path(tmp), size_mb)
        async with open_worker() as worker:
            measured = await c_stream_run(AhpServer(worker, workload), binary)
        out["c_mb_s"] = round(measured.run.text_bytes / measured.run.seconds / 1e6, 2)
        out["frames"] = measured.run.frames
        out["cpu_per_100mb"] = round(measured.server_cpu_seconds * 100 / size_mb, 3)
        if many:
            directory = Path(tmp) / "many"
            directory.mkdir()
            each = generate(directory, size_mb / many)
            async with open_worker() as worker:
                run = await many_run(AhpServer(worker, each), each, many, binary)
            out["many_mb_s"] = round(run.total_bytes / run.seconds / 1e6, 2)
            out["many_cpu_per_100mb"] = round(run.server_cpu_seconds * 1e8 / run.total_bytes, 3)
    return out


def ab(a: Path, b: Path, pairs: int, size_mb: float, many: int) -> None:
    for index in range(pairs):
        sides = (a, b) if index % 2 == 0 else (b, a)
        for tree in sides:
            env = {**os.environ, "PYTHONPATH": str(tree.resolve())}
            argv = [sys.executable, __file__, "_run", str(size_mb), str(many)]
            line = subprocess.run(
                argv, env=env, cwd="/tmp", capture_output=True, text=True, check=False
            ).stdout.strip()
            load = os.getloadavg()[0]
            print(f"{time.strftime('%H:%M:%S')} load {load:.2f} {line}", flush=True)


def _status(key: str) -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key):
                return int(line.split()[1]) / 1024
    raise KeyError(key)


def _reset_peak() -> None:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # VmHWM back to the current RSS


async def memory(terminals: int, mb: float, kind: str) -> None:
    from ahp.engine import open_host
    from ahp.reducers.scrollback import content_length

    async with open_host() as host:
        base = _status("VmRSS")
        _reset_peak()
        if kind == "b64":
            command = f"head -c {int(mb * 750_000)} /dev/urandom | base64"
        else:
            command = f"yes 'printing, printing, printing, printing' | head -c {int(mb * 1e6)}"
        made = [await host.create_terminal(argv=["sh", "-c", command]) for _ in range(terminals)]
        for terminal in made:
            await terminal.wait_exited()
        await trio.sleep(1.0)
        chars = sum(content_length(t.state) for t in made)
        peak, held = _status("VmHWM"), _status("VmRSS")
        for terminal in made:
            await host.dispose(terminal.uri)
        del made, terminal
        await trio.sleep(3.0)  # reaped, the heap trimmed (ahp.engine.memory)
        print(
            json.dumps(
                {
                    "kind": kind,
                    "terminals": terminals,
                    "rss_delta_mib": round(held - base, 1),
                    "peak_delta_mib": round(peak - base, 1),
                    "after_dispose_delta_mib": round(_status("VmRSS") - base, 1),
                    "chars_mib": round(chars / 2**20, 1),
                }
            )
        )


def floor(mb: float) -> None:
    size = int(mb * 1e6)
    with tempfile.NamedTemporaryFile(delete=False) as f:
        block = b"".join(
            b"%08d some output text of a line, like a build log\n" % i for i in range(20000)
        )
        while f.tell() < size:
            f.write(block)
        path = f.name
    try:
        master, slave = pty.openpty()
        child = subprocess.Popen(["cat", path], stdout=slave, stderr=slave, start_new_session=True)
        os.close(slave)
        start, wall, got, reads = _cpu(), time.monotonic(), 0, 0
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: the slave is closed
                break
            if not data:
                break
            got += len(data)
            reads += 1
        child.wait()
        os.close(master)
        cpu, wall = _cpu() - start, time.monotonic() - wall
        print(
            f"pty read: {got / 1e6:.0f} MB in {reads} reads, reader CPU "
            f"{100 * cpu / (got / 1e6):.3f} s per 100 MB, {got / 1e6 / wall:.1f} MB/s"
        )
        server = socket.create_server(("127.0.0.1", 0))
        port = server.getsockname()[1]
        source = f"import socket\ns = socket.create_connection(('127.0.0.1', {port}))\n"
        source += "while s.recv(1 << 20):\n    pass\n"
        reader = subprocess.Popen([sys.executable, "-c", source])
        conn, _ = server.accept()
        chunk = b"x" * 90_000
        start, sent = _cpu(), 0
        while sent < size:
            conn.sendall(chunk)
            sent += len(chunk)
        conn.close()
        server.close()
        reader.wait()
        print(f"tcp send: sender CPU {100 * (_cpu() - start) / (sent / 1e6):.3f} s per 100 MB")
    finally:
        os.unlink(path)


def main() -> None:
    if sys.argv[1:2] == ["_run"]:
        print(json.dumps(trio.run(_one_run, float(sys.argv[2]), int(sys.argv[3]))), flush=True)
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="mode", required=True)
    p_ab = sub.add_parser("ab")
    p_ab.add_argument("--a", type=Path, required=True)
    p_ab.add_argument("--b", type=Path, required=True)
    p_ab.add_argument("--pairs", type=int, default=4)
    p_ab.add_argument("--size-mb", type=float, default=20)
    p_ab.add_argument("--many", type=int, default=16)
    p_mem = sub.add_parser("memory")
    p_mem.add_argument("--terminals", type=int, default=30)
    p_mem.add_argument("--mb", type=float, default=6)
    p_mem.add_argument("--kind", choices=("yes", "b64"), default="yes")
    p_floor = sub.add_parser("floor")
    p_floor.add_argument("--mb", type=float, default=100)
    args = parser.parse_args()
    if args.mode == "ab":
        ab(args.a, args.b, args.pairs, args.size_mb, args.many)
    elif args.mode == "memory":
        trio.run(memory, args.terminals, args.mb, args.kind)
    else:
        floor(args.mb)


if __name__ == "__main__":
    main()
