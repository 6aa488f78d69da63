"""The screen model's emulators on recorded output of real programs: agreement and cost.

Run ``python benchmarks/bench_screen.py [size_mb]``; the bench command calls
:func:`run`. The corpus is ``tests/fixtures/programs/`` (recorded through a real pty
by its ``record.py``: vim, less, man, top, htop, git, REPLs, tmux, progress bars,
colours, wide text), each with tmux's screen of the same bytes as the reference.
Figures, per emulator (``ghostty``: libghostty-vt through pyghostty, the default;
``pyte``: the fallback; ``pyte_raw``: pyte as ``term.screen()`` used it before
issue 20, without containment):

* ``*_agree_pct``: rows equal to tmux's, over all recordings (24 rows each);
* ``*_exact_count``: recordings whose every row and the cursor agree with tmux
  (a cursor in the pending-wrap state counts as the last column);
* ``*_raised_count``: recordings on which the emulator raised (``pyte_raw`` only:
  the model contains errors, see ``*_contained_count``);
* ``*_contained_count``: emulator errors the model contained (rebuilds);
* ``*_corpus_mb_s``: the whole corpus fed in 4 KiB chunks into a fresh model per
  recording, then one screen read, repeated until about ``size_mb`` MB were fed
  (pyte at most 1 MB: it is slow);
* ``*_read_us``: one ``screen()`` after a one-line feed on a full 80x24 screen
  (what an agent polling the screen pays each time).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import pyte

try:
    from ahp.agent.screen import EMULATORS, Screen, ScreenModel
except ModuleNotFoundError:  # a checkout without `pip install -e .`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from ahp.agent.screen import EMULATORS, Screen, ScreenModel

__all__ = ["corpus", "run"]

#: The corpus: the checkout's, else the copy an installed wheel carries beside this file.
PROGRAMS = next(
    (
        path
        for path in (
            Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "programs",
            Path(__file__).resolve().parent / "programs",
        )
        if (path / "reference.json").exists()
    ),
    Path(__file__).resolve().parent / "programs",
)
CHUNK = 4096
PYTE_MAX_MB = 1.0
READS = 200


def corpus() -> dict[str, tuple[str, dict[str, Any]]]:
    """Recording name -> (its text, decoded as the engine does; tmux's reference)."""
    refs = json.loads((PROGRAMS / "reference.json").read_text())
    return {
        name: ((PROGRAMS / f"{name}.out").read_bytes().decode("utf-8", "surrogateescape"), ref)
        for name, ref in sorted(refs.items())
    }


def _raw_pyte(text: str, cols: int, rows: int) -> Screen:
    """pyte as before issue 20 (alternate screen aside): errors propagate."""
    screen = pyte.Screen(cols, rows)
    pyte.Stream(screen).feed(text)
    lines = tuple(line.rstrip() for line in screen.display)
    return Screen(lines, screen.cursor.y, screen.cursor.x, False)


def _model(text: str, cols: int, rows: int, emulator: str) -> tuple[Screen, int]:
    model = ScreenModel(cols, rows, emulator=emulator)
    for i in range(0, len(text), CHUNK):
        model.feed(text[i : i + CHUNK])
    return model.screen(), model.contained


def _agreement(name: str, files: dict[str, tuple[str, dict[str, Any]]]) -> dict[str, float]:
    rows_ok = rows_all = exact = raised = contained = 0
    for text, ref in files.values():
        rows_all += ref["rows"]
        try:
            if name == "pyte_raw":
                screen, errors = _raw_pyte(text, ref["cols"], ref["rows"]), 0
            else:
                screen, errors = _model(text, ref["cols"], ref["rows"], name)
        except Exception:
            raised += 1
            continue
        contained += errors
        good = sum(a == b for a, b in zip(screen.lines, ref["lines"], strict=False))
        rows_ok += good
        col, row = ref["cursor"]
        last = ref["cols"] - 1  # a cursor in the pending-wrap state: either way
        cursor = (screen.cursor_row, min(screen.cursor_col, last)) == (row, min(col, last))
        exact += good == ref["rows"] and cursor
    out = {
        f"{name}_agree_pct": 100.0 * rows_ok / rows_all,
        f"{name}_exact_count": float(exact),
    }
    if name == "pyte_raw":
        out[f"{name}_raised_count"] = float(raised)
    else:
        out[f"{name}_contained_count"] = float(contained)
    return out


def _speed(name: str, files: dict[str, tuple[str, dict[str, Any]]], size_mb: float) -> float:
    total = sum(len(text.encode("utf-8", "surrogateescape")) for text, _ in files.values())
    budget = size_mb * 1e6 if name == "ghostty" else min(size_mb, PYTE_MAX_MB) * 1e6
    fed = 0
    start = time.perf_counter()
    while fed < budget:
        for text, ref in files.values():
            _model(text, ref["cols"], ref["rows"], name)
        fed += total
    return fed / (time.perf_counter() - start) / 1e6


def _read_cost(name: str, files: dict[str, tuple[str, dict[str, Any]]]) -> float:
    model = ScreenModel(80, 24, emulator=name)
    model.feed(files["htop"][0] if "htop" in files else "x" * 80 * 24)
    start = time.perf_counter()
    for i in range(READS):
        model.feed(f"\r\nline {i}")
        model.screen()
    return (time.perf_counter() - start) / READS * 1e6


def run(size_mb: float) -> dict[str, float]:
    files = corpus()
    results: dict[str, float] = {}
    for name in (*EMULATORS, "pyte_raw"):
        results.update(_agreement(name, files))
    for name in EMULATORS:
        results[f"{name}_corpus_mb_s"] = _speed(name, files, size_mb)
        results[f"{name}_read_us"] = _read_cost(name, files)
    return results


if __name__ == "__main__":
    for key, value in run(float(sys.argv[1]) if len(sys.argv) > 1 else 5.0).items():
        print(f"{key:28} {value:10.2f}")
