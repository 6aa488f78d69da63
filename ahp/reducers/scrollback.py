"""Bounded scrollback: trim a terminal's retained content, oldest first.

Why separate from the reducer: trimming is a server policy, not protocol
semantics (the spec leaves scrollback length to each party). A
:class:`Scrollback` keeps a running count of what a state retains and trims
when it passes either bound: ``limit`` characters (output text *and* command
lines: 200 command lines of 100 000 characters are 20 M characters) or
``max_parts`` parts (20 000 commands with an empty prompt are 20 000 parts
holding almost no text). Trimming goes down to the low-water marks (80%) so
that it runs once per 20% of either bound: amortised O(1) per character and
per part, and O(parts dropped) each time (never a walk over all parts).

Rule (the reference server's, refined to keep exactly ``low_water``): drop
whole leading parts while the rest still holds at least ``low_water``
characters (or more parts than the parts' low water), then slice the head of
the text of the first remaining part. Lengths are counted in code points.
Pure: the server's terminal core and the client's mirror both use it.

Besides the length, :attr:`Scrollback.weight` estimates the bytes the retained text
takes as Python strings (CPython holds a ``str`` at its widest character's width: one
byte a character for ASCII and Latin-1, two up to U+FFFF, four beyond, as emoji): the
host's scrollback packer budgets by it, so text with emoji counts what it costs.
"""

from __future__ import annotations

from typing import Final

from attrs import evolve

from ahp.protocol.actions import (
    StateAction,
    TerminalCleared,
    TerminalCommandExecuted,
    TerminalData,
)
from ahp.protocol.rope import ChunkList
from ahp.protocol.state import CommandPart, ContentPart, TerminalState

__all__ = [
    "DEFAULT_SCROLLBACK",
    "MAX_PARTS",
    "PACK_SCAN_PARTS",
    "cold_chunks",
    "Scrollback",
    "content_length",
    "low_water_for",
    "part_length",
    "text_weight",
    "trim",
]

#: Default retained characters per terminal (≈ 4 MiB of ASCII output).
DEFAULT_SCROLLBACK: Final = 4 * 1024 * 1024
#: Most parts (commands and the text between them) a terminal retains.
MAX_PARTS: Final = 8192
#: Parts, from the newest, whose text :func:`cold_chunks` looks at (older parts'
#: text stays as it is: large output is almost always in the last few).
PACK_SCAN_PARTS: Final = 64


#: A non-ASCII ``str``'s fixed size (its characters come on top, at its width each).
_WIDE_HEADER: Final = "\xe9".__sizeof__() - 2


def text_weight(text: str) -> int:
    """Bytes CPython holds ``text``'s characters in: its length for ASCII, else its
    length (plus one) times its widest character's width. O(1)."""
    if text.isascii():
        return len(text)
    return text.__sizeof__() - _WIDE_HEADER


def low_water_for(limit: int) -> int:
    """Where trimming stops: 80% of the limit (the reference's 100 000 -> 80 000)."""
    return limit * 4 // 5


def part_length(part: ContentPart) -> int:
    """Characters a part holds: its text, plus its command line for a command."""
    if isinstance(part, CommandPart):
        return len(part.output) + len(part.commandLine)
    return len(part.value)


def content_length(state: TerminalState) -> int:
    """Characters held in all parts (O(number of parts))."""
    return sum(part_length(p) for p in state.content)


def cold_chunks(
    state: TerminalState, keep: int, *, scan_parts: int = PACK_SCAN_PARTS
) -> list[tuple[ChunkList, int, str]]:
    """The chunks of ``state``'s text worth packing and not looked at yet, older than
    its newest ``keep`` characters, in its last ``scan_parts`` parts (see
    :meth:`ahp.protocol.rope.Rope.cold_chunks`); marks them looked at."""
    found: list[tuple[ChunkList, int, str]] = []
    tail = 0
    for count, part in enumerate(reversed(state.content)):
        if count >= scan_parts:
            break
        rope = part.output if isinstance(part, CommandPart) else part.value
        found.extend(rope.cold_chunks(max(0, keep - tail)))
        tail += len(rope)
    return found


def trim(
    state: TerminalState,
    *,
    low_water: int,
    length: int | None = None,
    max_parts: int | None = None,
) -> tuple[TerminalState, int]:
    """Trim ``state`` to at most ``low_water`` characters (and, with ``max_parts``, to
    at most ``low_water_for(max_parts)`` parts); return it and its new length.

    Args:
        length: ``content_length(state)`` when the caller keeps it (then the cost is
            O(parts dropped)); computed otherwise.
    """
    content = state.content
    total = content_length(state) if length is None else length
    keep_parts = len(content) if max_parts is None else min(len(content), low_water_for(max_parts))
    keep_parts = max(keep_parts, 1)
    if total <= low_water and len(content) <= keep_parts:
        return state, total
    drop = 0
    count = len(content)
    for part in content:
        if count - drop <= 1:
            break
        size = part_length(part)
        if count - drop > keep_parts or total - size >= low_water:
            total -= size
            drop += 1
            continue
        break
    content = content.drop_first(drop)
    if total > low_water and content:
        head = content[0]
        excess = total - low_water
        if isinstance(head, CommandPart):
            cut = min(excess, len(head.output))
            head = evolve(head, output=head.output.drop_prefix(cut))
        else:
            cut = min(excess, len(head.value))
            head = evolve(head, value=head.value.drop_prefix(cut))
        content = content.replace(0, head)
        total -= cut
    return evolve(state, content=content), total


class Scrollback:
    """The running size of one terminal state's content, and its trimming.

    Args:
        limit: characters retained (output and command lines).
        max_parts: parts retained.
        state: the state counted from (its content is measured once).
    """

    __slots__ = ("dropped", "length", "limit", "low_water", "max_parts", "sliced", "weight")

    def __init__(
        self, limit: int, *, max_parts: int = MAX_PARTS, state: TerminalState | None = None
    ) -> None:
        self.limit = limit
        self.max_parts = max_parts
        self.low_water = low_water_for(limit)
        self.length = content_length(state) if state is not None else 0
        #: Bytes the retained text takes as strings, estimated (:func:`text_weight` of
        #: what was added; a trim keeps the same bytes a character). A state counted
        #: from is taken as one byte a character.
        self.weight = self.length
        #: Characters trimmed so far (output and command lines), since the last clear.
        self.dropped = 0
        #: Whether the last trim cut into the text of the part now first (mid-line,
        #: most likely) rather than only dropping whole parts.
        self.sliced = False

    def reset(self, state: TerminalState) -> None:
        self.length = self.weight = content_length(state)

    def account(self, state: TerminalState, action: StateAction) -> TerminalState:
        """Count what ``action`` (already applied, giving ``state``) added; trim if over."""
        if isinstance(action, TerminalData):
            self.length += len(action.data)
            self.weight += text_weight(action.data)
        elif isinstance(action, TerminalCommandExecuted):
            self.length += len(action.commandLine)
            self.weight += text_weight(action.commandLine)
        elif isinstance(action, TerminalCleared):
            self.length = self.dropped = self.weight = 0
            self.sliced = False
            return state
        else:
            return state
        if self.length > self.limit or len(state.content) > self.max_parts:
            before, length = state.content, self.length
            state, self.length = trim(
                state, low_water=self.low_water, length=length, max_parts=self.max_parts
            )
            after = state.content
            self.dropped += length - self.length
            self.weight = self.weight * self.length // length if length else 0
            # Trimming drops leading parts and may replace the first one left (sliced):
            # the part at the same distance from the end was the head before.
            self.sliced = bool(after) and after[0] is not before[len(before) - len(after)]
        return state
