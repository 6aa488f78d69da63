"""Command-line argument types: numbers checked against their bounds, for ``argparse``.

Why a module of its own: every subcommand (``serve``, ``play``, the client's
commands) reads counts, ports and durations from text, and each must fail the
same way: ``argparse`` prints the flag, the reason and the usage, and exits 2;
nothing is started. Pure: no I/O.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from typing import Final, TypeVar

__all__ = ["MAX_PORT", "above_zero", "number", "port", "positive_int", "token"]

#: Highest TCP port number.
MAX_PORT: Final = 65535

_N = TypeVar("_N", int, float)


def number(text: str, kind: Callable[[str], _N], what: str) -> _N:
    """``text`` read as ``kind``; else the usage error ``not <what>: '<text>'``."""
    try:
        return kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not {what}: {text!r}") from None


def positive_int(text: str) -> int:
    """A whole number of at least 1 (a count, a size)."""
    value = number(text, int, "a whole number")
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def port(text: str) -> int:
    """A TCP port number, 0 (any free one) to :data:`MAX_PORT`."""
    value = number(text, int, "a port number")
    if not 0 <= value <= MAX_PORT:
        raise argparse.ArgumentTypeError(f"{value} is not a TCP port (0-{MAX_PORT})")
    return value


def above_zero(most: float = math.inf) -> Callable[[str], float]:
    """The type of a number above 0 and at most ``most`` (a factor, a duration)."""
    bound = "" if math.isinf(most) else f" and at most {most:g}"

    def check(text: str) -> float:
        value = number(text, float, "a number")
        if not 0 < value <= most:
            raise argparse.ArgumentTypeError(f"must be above 0{bound}")
        return value

    return check


def token(text: str) -> str:
    """An access token given on the command line: one word of printable characters (it
    travels in a URL's query), never empty — ``--token "$TOKEN"`` with the variable unset
    gave an empty one, which quietly became a random token."""
    if not text:
        raise argparse.ArgumentTypeError(
            "empty (an unset variable?): leave the option out for a random token"
        )
    if any(c.isspace() or not c.isprintable() for c in text):
        raise argparse.ArgumentTypeError("must be one token: no spaces or control characters")
    return text
