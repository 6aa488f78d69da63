"""What recording, the audit log and the wire log cost a client (issues 21 and 22).

Run ``python benchmarks/bench_record.py [--record] [--audit-log] [--wire-log] [--mb N]
[--pings N]``: one host and its sidecar in this process (port 0, logs in a temporary
directory removed at the end), one ``ahp.client`` connection. It measures

- **flood**: a terminal prints ``N`` MB (``head -c N000000 /dev/zero | tr '\\0' a``) to
  the client, which follows it in its mirror; MB/s from the command's start to its
  finished result;
- **ping**: ``N`` ``ping`` round trips one after the other (each is two messages for the
  wire log, one line each); the median and p99 in microseconds;

and prints one line of figures (and what the logs wrote). Compare runs with and
without a log: the difference is what the log costs (same machine, interleaved).

``--stalled-fifo`` instead measures a recorder whose disk never takes anything: the
terminal (in-process, no server) prints ``N`` MB with a recorder writing to a FIFO that
is open but never read, then without one; it prints both rates, the recorder's peak
buffer, its resyncs and the process's peak RSS (``VmHWM``) growth.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import trio

try:
    import ahp
except ModuleNotFoundError:  # a checkout without `pip install -e .`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import ahp
from ahp.client import connect
from ahp.server import ServeOptions


def _vm_hwm_kib() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0


async def stalled(args: argparse.Namespace) -> None:
    from ahp.record import RecordOptions, record_terminal

    scratch = Path(tempfile.mkdtemp(prefix="bench-record-"))
    fifo = scratch / "stalled.cast"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # open, never read
    command = f"head -c {args.mb}000000 /dev/zero | tr '\\0' a; echo; echo FLOOD-$((1+1))\n"

    async def flood(term: Any) -> float:
        """MB/s of the flood, followed by an in-process subscriber (no rendering)."""
        async with term.subscribe() as updates:
            t0 = time.perf_counter()
            await term.send_input(command)
            tail = ""
            async for item in updates:
                data = getattr(getattr(item, "action", None), "data", None)
                if isinstance(data, str):
                    tail = (tail + data)[-64:]
                    if "FLOOD-2" in tail:
                        break
            return float(args.mb / (time.perf_counter() - t0))

    try:
        async with ahp.open_host(shell="/bin/bash") as host, trio.open_nursery() as nursery:
            plain = await host.create_terminal()
            await plain.run("true")
            without = await flood(plain)
            term = await host.create_terminal()
            recorder = await nursery.start(record_terminal, term, fifo, RecordOptions())
            await term.run("true")
            hwm = _vm_hwm_kib()
            with_stalled = await flood(term)
            grew = _vm_hwm_kib() - hwm
            again = await flood(plain)  # (the machine's drift: the plain terminal again)
            print(
                f"stalled-fifo flood: without a recorder {without:.1f} MB/s (again after: "
                f"{again:.1f}), with a stalled one {with_stalled:.1f} MB/s; recorder peak buffer "
                f"{recorder.peak_buffered / 1024:.0f} KiB, written {recorder.written_bytes} B, "
                f"outbox overflowed {recorder.subscription.outbox.overflowed}; "
                f"peak RSS grew {grew / 1024:.1f} MiB during the flood"
            )
            nursery.cancel_scope.cancel()
    finally:
        os.close(reader)
        shutil.rmtree(scratch, ignore_errors=True)


def _bytes_under(directory: Path) -> int:
    return sum(f.stat().st_size for f in directory.rglob("*") if f.is_file())


async def main(args: argparse.Namespace) -> None:
    scratch = Path(tempfile.mkdtemp(prefix="bench-record-"))
    options = ServeOptions(
        port=0,
        token="bench-record-token",
        record_dir=str(scratch / "casts") if args.record else None,
        audit_log=str(scratch / "audit.log") if args.audit_log else None,
        wire_log=str(scratch / "wire") if args.wire_log else None,
    )
    try:
        async with ahp.open_host(shell="/bin/bash") as host, trio.open_nursery() as nursery:
            sidecar = await nursery.start(ahp.serve_host, host, options)
            async with connect(sidecar.url) as client:
                uri = "ahp-terminal:/bench"
                await client.create_terminal(uri)
                term = client.terminal(uri)
                await term.run("true")  # the shell is up and detected
                started = time.perf_counter()
                result = await term.run(
                    f"head -c {args.mb}000000 /dev/zero | tr '\\0' a; echo", timeout=600
                )
                flood = time.perf_counter() - started
                assert result.exit_code == 0, result
                rtts = []
                for _ in range(args.pings):
                    t0 = time.perf_counter()
                    await client.ping()
                    rtts.append(time.perf_counter() - t0)
                await client.dispose_terminal(uri)
            nursery.cancel_scope.cancel()
        rtts.sort()
        written = _bytes_under(scratch)
        what = [n for n in ("record", "audit_log", "wire_log") if getattr(args, n)] or ["none"]
        print(
            f"logs={'+'.join(what)} flood={args.mb / flood:.1f} MB/s "
            f"ping median={statistics.median(rtts) * 1e6:.0f} us "
            f"p99={rtts[int(len(rtts) * 0.99) - 1] * 1e6:.0f} us "
            f"written={written / 1e6:.1f} MB"
        )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--record", action="store_true")
    parser.add_argument("--audit-log", action="store_true")
    parser.add_argument("--wire-log", action="store_true")
    parser.add_argument("--mb", type=int, default=50)
    parser.add_argument("--pings", type=int, default=2000)
    parser.add_argument("--stalled-fifo", action="store_true")
    os.environ.pop("AHP_TOKEN", None)
    parsed = parser.parse_args()
    trio.run(stalled if parsed.stalled_fifo else main, parsed)
