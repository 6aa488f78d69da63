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

import trio

try:
    import ahp
except ModuleNotFoundError:  # a checkout without `pip install -e .`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    import ahp
from ahp.client import connect
from ahp.server import ServeOptions


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
    os.environ.pop("AHP_TOKEN", None)
    trio.run(main, parser.parse_args())
