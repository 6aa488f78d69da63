"""Figures: the median of several runs with their min and max, and percentiles.

Why: on shared machines one run says little (figures drift by 20-30% between
batches), so every figure is the median of N runs, reported with its range, and
comparisons are ratios of medians taken in the same run.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Any

import attrs

__all__ = ["Figure", "percentile", "summarize"]


@attrs.frozen
class Figure:
    """A measured quantity: median of ``runs`` with min and max, in ``unit``."""

    median: float
    low: float
    high: float
    runs: tuple[float, ...]
    unit: str

    def to_json(self) -> dict[str, Any]:
        return {
            "median": self.median,
            "min": self.low,
            "max": self.high,
            "runs": list(self.runs),
            "unit": self.unit,
        }

    def text(self, digits: int = 1) -> str:
        """``12.3 MB/s (11.0-13.5)``; ratios read ``0.93x (0.90-0.97)``."""
        unit = self.unit if self.unit == "x" else f" {self.unit}"
        return f"{self.median:.{digits}f}{unit} ({self.low:.{digits}f}-{self.high:.{digits}f})"


def summarize(values: Sequence[float], unit: str) -> Figure:
    """The :class:`Figure` of ``values`` (at least one)."""
    if not values:
        raise ValueError("no values to summarize")
    return Figure(
        median=statistics.median(values),
        low=min(values),
        high=max(values),
        runs=tuple(values),
        unit=unit,
    )


def percentile(values: Sequence[float], pct: float) -> float:
    """The ``pct`` percentile by the nearest-rank method (p99 of 300 samples: the 297th)."""
    if not values:
        raise ValueError("no values")
    ordered = sorted(values)
    rank = max(1, math.ceil(pct / 100 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]
