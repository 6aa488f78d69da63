"""Benchmarks written next to other layers, folded into the same run.

Why: the scanner, shell-integration and run-API benchmarks live in ``benchmarks/``
with their owners (``bench_scanner.py``, ``bench_integration.py``,
``bench_render.py``: the screen models' MB/s and ``run()``'s overhead;
``bench_screen.py``: the screen model's emulators on recorded programs), each exposing
``run(size_mb)``. The bench command runs them in the same process tree and
reports their figures beside the others instead of duplicating them. They are
imported by path, defensively — from the checkout's ``benchmarks/`` when there is
one, else from the copy the wheel carries in ``ahp/bench/_benchmarks/`` (see
``[tool.hatch.build.targets.wheel.force-include]`` in ``pyproject.toml``), so an
installed package runs the whole bench: a missing file or a failure becomes a note in the
report, never a crash of the whole run.
"""

from __future__ import annotations

import importlib.util
import time
import traceback
from pathlib import Path
from typing import Any

__all__ = ["FOLDED", "benchmarks_dir", "run_folded"]

#: Section name -> file in ``benchmarks/``.
FOLDED = {
    "scanner": "bench_scanner.py",
    "integration": "bench_integration.py",
    "render": "bench_render.py",
    "screen": "bench_screen.py",
}


def benchmarks_dir() -> Path:
    """The checkout's ``benchmarks/``, else the installed copy beside this module."""
    import ahp

    checkout = Path(ahp.__file__).resolve().parents[1] / "benchmarks"
    if all((checkout / name).exists() for name in FOLDED.values()):
        return checkout
    return Path(__file__).resolve().parent / "_benchmarks"


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return repr(value)


def run_folded(name: str, size_mb: float) -> dict[str, Any]:
    """Run ``benchmarks/<file>``'s ``run(size_mb)``; a dict with ``results`` or ``skipped``."""
    path = benchmarks_dir() / FOLDED[name]
    if not path.exists():
        return {"skipped": f"{path.name} not found in {path.parent}", "size_mb": size_mb}
    try:
        spec = importlib.util.spec_from_file_location(f"_ahp_bench_{name}", path)
        if spec is None or spec.loader is None:
            return {"skipped": f"cannot import {path}", "size_mb": size_mb}
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        run = getattr(module, "run", None)
        if not callable(run):
            return {"skipped": f"{path.name} has no run(size_mb)", "size_mb": size_mb}
        start = time.perf_counter()
        results = run(size_mb)
        seconds = time.perf_counter() - start
    except Exception as exc:
        return {
            "skipped": f"{path.name} failed: {type(exc).__name__}: {exc}",
            "traceback": traceback.format_exc(limit=5),
            "size_mb": size_mb,
        }
    return {"results": _jsonable(results), "seconds": seconds, "size_mb": size_mb}
