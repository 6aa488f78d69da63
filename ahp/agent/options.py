"""How to run one command: :class:`RunOptions`, the one value every surface takes.

Why one value: ``run`` and ``start`` of the in-process and the remote terminal,
the module functions and the CLI all take the same options; written out as
keyword lists they were repeated five times and drifted. :class:`RunOptions`
validates once, at construction (``ValueError`` naming the option), and
:class:`RunChanges` is the same list as keyword arguments for ``term.run(cmd,
timeout=…)`` (a test checks that the two name the same fields).

Pure: no I/O.
"""

from __future__ import annotations

from typing import Final, TypedDict

import attrs

from ahp.agent.budget import DEFAULT_HEAD_BYTES, DEFAULT_TAIL_BYTES, RETAINED_OUTPUT_BYTES
from ahp.protocol.state import TerminalClaim

__all__ = [
    "DEFAULT_INPUT_QUIET",
    "DEFAULT_MAX_OUTPUT",
    "RunChanges",
    "RunOptions",
]

#: Default quiet time before the terminal's processes are asked whether the command
#: waits for input.
DEFAULT_INPUT_QUIET: Final = 0.5
#: Kept for compatibility: ``max_output_bytes`` maps onto the budget (a quarter
#: head, the rest tail).
DEFAULT_MAX_OUTPUT: Final = 1_000_000


def _positive_or_none(name: str, value: float | None) -> None:
    if value is not None and not value > 0:
        raise ValueError(f"{name} must be positive")


@attrs.frozen(kw_only=True)
class RunOptions:
    """Options of one command.

    Attributes:
        timeout: the hard limit in seconds: the command is interrupted (Ctrl-C) and
            ends ``timed_out``. Applies to ``start`` too (the collector enforces it).
        yield_after: ``run`` returns after this many seconds with status
            ``running`` and the handle (the command goes on). Ignored by ``start``.
        head_bytes: bytes of rendered output kept from the start (default 16 KiB).
        tail_bytes: bytes kept from the end (default 48 KiB).
        input_quiet: seconds of quiet before looking for a wait for input.
        claim: claim the terminal while the command runs (the claim found is
            given back afterwards, exactly).
        max_output_bytes: compatibility: sets head (a quarter) and tail together.
    """

    timeout: float | None = None
    yield_after: float | None = None
    head_bytes: int | None = None
    tail_bytes: int | None = None
    input_quiet: float = DEFAULT_INPUT_QUIET
    claim: TerminalClaim | None = None
    max_output_bytes: int | None = None

    def __attrs_post_init__(self) -> None:
        _positive_or_none("timeout", self.timeout)
        if self.yield_after is not None and not self.yield_after >= 0:
            raise ValueError("yield_after must not be negative")
        if not self.input_quiet > 0:
            raise ValueError("input_quiet must be positive")
        self.budget()  # validates the sizes

    def budget(self) -> tuple[int, int]:
        """``(head_bytes, tail_bytes)`` with the defaults applied.

        Raises:
            ValueError: a size is negative or beyond the retained output.
        """
        if self.max_output_bytes is not None:
            if self.max_output_bytes < 1:
                raise ValueError("max_output_bytes must be positive")
            quarter = self.max_output_bytes // 4
            default_head, default_tail = quarter, self.max_output_bytes - quarter
        else:
            default_head, default_tail = DEFAULT_HEAD_BYTES, DEFAULT_TAIL_BYTES
        head = default_head if self.head_bytes is None else self.head_bytes
        tail = default_tail if self.tail_bytes is None else self.tail_bytes
        if head < 0 or tail < 0:
            raise ValueError("head_bytes and tail_bytes must not be negative")
        if head > RETAINED_OUTPUT_BYTES or tail > RETAINED_OUTPUT_BYTES:
            raise ValueError(f"head_bytes and tail_bytes must not exceed {RETAINED_OUTPUT_BYTES}")
        return head, tail

    def with_changes(self, changes: RunChanges) -> RunOptions:
        """These options with ``changes`` applied (validated again)."""
        return attrs.evolve(self, **changes) if changes else self


class RunChanges(TypedDict, total=False):
    """:class:`RunOptions`' fields as keyword arguments (``term.run(cmd, timeout=5)``)."""

    timeout: float | None
    yield_after: float | None
    head_bytes: int | None
    tail_bytes: int | None
    input_quiet: float
    claim: TerminalClaim | None
    max_output_bytes: int | None
