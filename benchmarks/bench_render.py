"""Cost of the agent-facing run API: the screen models and ``run()`` itself.

Run ``python benchmarks/bench_render.py [size_mb]``; the bench command calls
:func:`run`. Figures:

* ``lines_*`` (MB/s): :class:`ahp.agent.render.LineRenderer`, which renders every
  command's output for ``CommandResult.output`` (in the command's collector, not
  in the engine), with the budget attached, in 16 KiB chunks.
* ``screen_*_mb_s`` (MB/s): :class:`ahp.agent.screen.ScreenModel` (its default
  emulator, libghostty-vt; ``bench_screen.py`` compares the emulators), which
  renders ``term.screen()`` on demand; measured on at most 2 MB.
* ``plain``: text lines; ``progress``: a ``\\r`` progress bar with colours and
  an erase-line per update, and a cursor-up redraw every tenth line (the
  escape-heavy case of real command output).
* ``run_true_ms``: median wall time of ``await term.run("true")`` in-process in
  bash (typing, shell integration marks, collector, result), over 30 runs;
  ``run_true_sh_ms``: the same in ``/bin/sh`` (the marker fallback);
  ``screen_ms``: ``term.screen()`` after a command printed 200 lines (a replay).
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

try:
    from ahp.agent.budget import OutputBudget
except ModuleNotFoundError:  # a checkout without `pip install -e .`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from ahp.agent.budget import OutputBudget

import trio

from ahp.agent.render import LineRenderer
from ahp.agent.screen import ScreenModel
from ahp.engine import open_host

__all__ = ["make_plain", "make_progress", "run"]

CHUNK = 16 * 1024
SCREEN_MAX_MB = 2.0
RUNS = 30


def make_plain(size: int) -> str:
    """About ``size`` characters of text lines."""
    line = "".join(chr(33 + (i * 7) % 90) for i in range(78)) + "\r\n"
    return line * max(1, size // len(line))


def make_progress(size: int) -> str:
    """About ``size`` characters of progress-bar output (see the module doc)."""
    parts: list[str] = []
    total = 0
    n = 0
    while total < size:
        pct = n % 101
        piece = f"\r\x1b[2K\x1b[32m[{'#' * (pct // 5):<20}]\x1b[0m {pct:3d}% file_{n}.tar"
        if pct == 100:
            piece += "\r\n"
        if n % 10 == 0:
            piece += "\x1b[1A\x1b[2Cxx\x1b[1B\r"
        parts.append(piece)
        total += len(piece)
        n += 1
    return "".join(parts)


def _mb_s(text: str, seconds: float) -> float:
    return len(text.encode()) / seconds / 1e6


def _lines(text: str) -> float:
    budget = OutputBudget()
    renderer = LineRenderer(budget.add)
    start = time.perf_counter()
    for i in range(0, len(text), CHUNK):
        renderer.feed(text[i : i + CHUNK])
    renderer.flush()
    budget.render()
    return _mb_s(text, time.perf_counter() - start)


def _screen(text: str) -> float:
    model = ScreenModel()
    start = time.perf_counter()
    for i in range(0, len(text), CHUNK):
        model.feed(text[i : i + CHUNK])
    model.screen()
    return _mb_s(text, time.perf_counter() - start)


async def _run_overhead() -> dict[str, float]:
    out: dict[str, float] = {}
    async with open_host() as host:
        for name, shell in (("run_true_ms", "/bin/bash"), ("run_true_sh_ms", "/bin/sh")):
            term = await host.create_terminal(shell=shell)
            await term.run("true")  # the shell is up
            times = []
            for _ in range(RUNS):
                start = time.perf_counter()
                await term.run("true")
                times.append((time.perf_counter() - start) * 1000)
            out[name] = statistics.median(times)
            if shell == "/bin/bash":
                await term.run("seq 1 200")
                start = time.perf_counter()
                term.screen()
                out["screen_ms"] = (time.perf_counter() - start) * 1000
            await host.dispose(term.uri)
    return out


def run(size_mb: float) -> dict[str, float]:
    size = int(size_mb * 1e6)
    screen_size = int(min(size_mb, SCREEN_MAX_MB) * 1e6)
    results = {
        "lines_plain_mb_s": _lines(make_plain(size)),
        "lines_progress_mb_s": _lines(make_progress(size)),
        "screen_plain_mb_s": _screen(make_plain(screen_size)),
        "screen_progress_mb_s": _screen(make_progress(screen_size)),
    }
    results.update(trio.run(_run_overhead))
    return results


if __name__ == "__main__":
    for key, value in run(float(sys.argv[1]) if len(sys.argv) > 1 else 5.0).items():
        print(f"{key:24} {value:10.2f}")
