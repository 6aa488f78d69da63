"""Bounded scrollback: trim a terminal's retained content, oldest first.

Why separate from the reducer: trimming is a server policy, not protocol
semantics (the spec leaves scrollback length to each party). The engine calls
:func:`trim` after appending when its running character count passes the
limit; trimming goes down to ``low_water`` so that it runs once per
``limit - low_water`` characters of output (amortised O(1) per character).

Rule (the reference server's, refined to keep exactly ``low_water``): drop
whole leading parts while the rest still holds at least ``low_water``
characters, then slice the head of the first remaining part. Lengths are
counted in code points.
"""

from __future__ import annotations

from typing import Final

from attrs import evolve

from ahp.protocol.state import CommandPart, TerminalState, part_text

__all__ = ["DEFAULT_SCROLLBACK", "content_length", "low_water_for", "trim"]

#: Default retained characters per terminal (≈ 4 MiB of ASCII output).
DEFAULT_SCROLLBACK: Final = 4 * 1024 * 1024


def low_water_for(limit: int) -> int:
    """Where trimming stops: 80% of the limit (the reference's 100 000 -> 80 000)."""
    return limit * 4 // 5


def content_length(state: TerminalState) -> int:
    """Characters held in all parts (O(number of parts))."""
    return sum(len(part_text(p)) for p in state.content)


def trim(state: TerminalState, *, low_water: int) -> tuple[TerminalState, int]:
    """Trim ``state`` to at most ``low_water`` characters; return it and its new length."""
    parts = list(state.content)
    total = sum(len(part_text(p)) for p in parts)
    if total <= low_water:
        return state, total
    drop = 0
    while len(parts) - drop > 1 and total - len(part_text(parts[drop])) >= low_water:
        total -= len(part_text(parts[drop]))
        drop += 1
    parts = parts[drop:]
    if total > low_water:
        head = parts[0]
        excess = total - low_water
        if isinstance(head, CommandPart):
            parts[0] = evolve(head, output=head.output.drop_prefix(excess))
        else:
            parts[0] = evolve(head, value=head.value.drop_prefix(excess))
        total = low_water
    return evolve(state, content=tuple(parts)), total
