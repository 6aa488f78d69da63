"""Engine throughput with shell integration on vs. off (issue 3: on must be >= 90% of off).

Run ``python benchmarks/bench_integration.py [size_mb]``; the lead's bench command
calls :func:`run` (synchronous: it starts its own ``trio.run``). Workload: ``cat``
of a generated ~``size_mb`` MB text file (~1% multi-byte UTF-8) typed into an
interactive bash on a pty, through the whole engine (read, scan, track, reduce,
one in-process subscriber), timed from the keystrokes to the subscriber seeing
a sentinel printed after the ``cat``. Integrated: the default injection (OSC 633
hooks); plain: ``shell_integration=False``. Each bash has a temporary HOME with a
one-line ``.bashrc``. Runs alternate (on, off, on, off, ...) and each figure is
the median of 3 taken in this one run: compare only figures from the same run.
MB = 10**6 bytes of the file. The ``*_cpu`` figures (MB per CPU second of this
process) isolate the engine's own cost from the pty's, which sets the pace.
"""

from __future__ import annotations

import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import trio

try:
    from ahp.engine import Host, open_host
except ModuleNotFoundError:  # a checkout without `pip install -e .`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from ahp.engine import Host, open_host
from ahp.protocol import ActionEnvelope, Snapshot, TerminalData, TerminalState

__all__ = ["run"]

REPEATS = 3
SENTINEL = "AHP_BENCH_DONE"
_TYPED_SENTINEL = 'AHP_BENCH""_DONE'  # the keystroke echo must not match SENTINEL
_WORDS = ("alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota")


def _write_text(path: Path, size: int) -> int:
    """Write ~``size`` bytes of text lines (one in ten with a non-ASCII word); the byte count."""
    lines = []
    for n in range(1000):
        words = [_WORDS[(n * 7 + k) % len(_WORDS)] for k in range(n % 14)]
        if n % 10 == 0:
            words.append("naïve-€-日本")
        lines.append(f"{n:06d} {' '.join(words)}\n")
    block = "".join(lines).encode()
    written = 0
    with path.open("wb") as f:
        while written < size:
            f.write(block)
            written += len(block)
    return written


async def _wait_prompt(host: Host, uri: str, integrated: bool) -> None:
    term = host.get(uri)

    def ready(state: TerminalState) -> bool:
        return "$ " in state.text() and (not integrated or bool(state.supportsCommandDetection))

    async with term.subscribe() as sub:
        async for _ in sub:
            if ready(term.state):
                return


async def _one(
    host: Host, home: Path, data: Path, size: int, integrated: bool
) -> tuple[float, float]:
    """MB/s of one ``cat`` of ``data`` in a fresh bash, and MB per CPU second of this process."""
    term = await host.create_terminal(
        shell=shutil.which("bash") or "/bin/bash",
        cwd=str(home),
        env={"HOME": str(home)},
        shell_integration=integrated,
    )
    try:
        await _wait_prompt(host, term.uri, integrated)
        async with term.subscribe(max_bytes=256 * 1024 * 1024) as sub:
            start, cpu = time.perf_counter(), time.process_time()
            await term.send_input(f"cat '{data}'; echo {_TYPED_SENTINEL}\r")
            tail = ""
            async for item in sub:
                if isinstance(item, ActionEnvelope) and isinstance(item.action, TerminalData):
                    text = tail + item.action.data
                elif isinstance(item, Snapshot) and isinstance(item.state, TerminalState):
                    text = item.state.text()[-4096:]  # a resynchronisation (or the first one)
                else:
                    continue
                if SENTINEL in text:
                    break
                tail = text[-len(SENTINEL) :]
            seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    finally:
        with trio.CancelScope(shield=True):
            await host.dispose(term.uri)
    if integrated:
        assert term.state.supportsCommandDetection, "the integration did not load"
    return size / seconds / 1e6, size / cpu / 1e6


async def _measure(home: Path, data: Path, size: int) -> dict[str, float]:
    runs: dict[bool, list[tuple[float, float]]] = {True: [], False: []}
    with trio.fail_after(600):
        async with open_host() as host:
            for _ in range(REPEATS):
                for integrated in (True, False):
                    runs[integrated].append(await _one(host, home, data, size, integrated))
    on = statistics.median(r[0] for r in runs[True])
    off = statistics.median(r[0] for r in runs[False])
    return {
        "bash_integrated": on,
        "bash_plain": off,
        "integrated_ratio": on / off,
        # The engine's own cost (the pty and cat run in other processes): MB per CPU second.
        "bash_integrated_cpu": statistics.median(r[1] for r in runs[True]),
        "bash_plain_cpu": statistics.median(r[1] for r in runs[False]),
    }


def run(size_mb: float = 50.0) -> dict[str, float]:
    """MB/s with and without shell integration (medians of 3) and their ratio."""
    with tempfile.TemporaryDirectory(prefix="ahp-bench-") as tmp:
        home = Path(tmp, "home")
        home.mkdir()
        (home / ".bashrc").write_text("PS1='$ '\n")  # never the machine's (slow) rc files
        data = Path(tmp, "workload.txt")
        size = _write_text(data, int(size_mb * 1e6))
        return trio.run(_measure, home, data, size)


def main(argv: list[str]) -> int:
    size_mb = float(argv[1]) if len(argv) > 1 else 50.0
    result = run(size_mb)
    print(f"bash + integration: {result['bash_integrated']:7.1f} MB/s")
    print(f"bash, plain:        {result['bash_plain']:7.1f} MB/s")
    verdict = "ok" if result["integrated_ratio"] >= 0.9 else "BELOW the 90% target"
    print(f"ratio:              {result['integrated_ratio']:7.1%} ({verdict})")
    print(
        f"engine CPU: {result['bash_integrated_cpu']:.0f} MB per CPU second with integration,"
        f" {result['bash_plain_cpu']:.0f} without"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
