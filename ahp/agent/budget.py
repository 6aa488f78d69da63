"""Output budgets: the head and the tail of a command's rendered output, with exact counts.

Why: an agent cannot read megabytes, and the usual cut (the last N bytes, or a
2 KB preview) hides either how a command started (the first error of a build)
or how it ended. :class:`OutputBudget` keeps the first ``head_bytes`` and the
last ``tail_bytes`` of the rendered output, says exactly how many bytes and
lines lie between them, and keeps the whole output (up to
:data:`RETAINED_OUTPUT_BYTES`) so that it can be read later.

Units: a line counts as its UTF-8 bytes plus one for its newline; the output text
is every line followed by ``\\n``. The head keeps whole lines, or the start of the
first line when that one alone is larger than the head. The tail is always the true
end of the output, as much of it as fits in ``tail_bytes``: walking back from the
newest line, whole lines while they fit, then the end of the first line that does
not (wherever it is; cut at a character boundary, never a byte the head shows),
also when that is the line whose start the head shows (one line shown in part, not
counted twice). A line cut so is *partly shown* and not counted in
``omitted_lines``; ``omitted_bytes`` counts every byte not shown.

A line is what the renderer hands on (:class:`~ahp.agent.render.LineRenderer`): a
logical line longer than :data:`~ahp.agent.render.MAX_JOINED_LINE` (1 MiB) comes in
pieces of that size, and each piece counts as a line (``total_lines`` of one 10 MB
line is 10; ``output()`` and ``read_new()`` show a line break between the pieces).

Pure: no I/O.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Iterator, Sequence
from typing import Final

import attrs

__all__ = [
    "DEFAULT_HEAD_BYTES",
    "DEFAULT_TAIL_BYTES",
    "RETAINED_OUTPUT_BYTES",
    "BudgetedText",
    "OutputBudget",
    "omission_marker",
]

#: Default size of the head of the output shown to an agent.
DEFAULT_HEAD_BYTES: Final = 16 * 1024
#: Default size of the tail of the output shown to an agent.
DEFAULT_TAIL_BYTES: Final = 48 * 1024
#: The whole rendered output of one command is kept up to this many bytes (the
#: oldest lines beyond it are dropped, and counted).
RETAINED_OUTPUT_BYTES: Final = 8 * 1024 * 1024
#: Retained lines are packed into one string per this many lines (or
#: :data:`PACK_BYTES`): a line kept as an object of its own costs ~120 bytes beside its
#: text (the string's header, a tuple, its slot), so 8 MiB of short lines (``seq``)
#: held ~140 MB; packed, the retained output costs about its own size.
PACK_LINES: Final = 256
#: Bytes of lines packed into one string at most (see :data:`PACK_LINES`).
PACK_BYTES: Final = 16 * 1024


def _size(line: str) -> int:
    return len(line.encode("utf-8", "surrogatepass")) + 1


def _cut_head(line: str, limit: int) -> str:
    return line.encode("utf-8", "surrogatepass")[:limit].decode("utf-8", "ignore")


def _cut_tail(line: str, limit: int) -> str:
    data = line.encode("utf-8", "surrogatepass")
    return data[len(data) - limit :].decode("utf-8", "ignore") if limit > 0 else ""


def omission_marker(omitted_bytes: int, omitted_lines: int) -> str:
    """The line put between head and tail. With no whole line omitted, the bytes are
    missing from the line(s) shown in part: the head's last, whose start it shows, and
    the tail's first, whose end it shows (one line, or two next to each other)."""
    if omitted_lines == 0:
        return f"[... {omitted_bytes} bytes omitted from a line shown in part ...]"
    lines = "1 line" if omitted_lines == 1 else f"{omitted_lines} lines"
    return f"[... {omitted_bytes} bytes in {lines} omitted ...]"


@attrs.frozen
class BudgetedText:
    """Output within a budget: head, marker line (when truncated), tail."""

    text: str
    truncated: bool
    omitted_bytes: int
    omitted_lines: int
    total_bytes: int
    total_lines: int


class _Block:
    """Retained lines packed: each line followed by ``\n`` in one string (or, when a
    line holds a ``\n`` itself, the list of lines)."""

    __slots__ = ("count", "lines", "size", "text")

    def __init__(self, lines: list[str], size: int) -> None:
        self.count = len(lines)
        self.size = size
        if any("\n" in line for line in lines):
            self.lines: list[str] | None = lines
            self.text = ""
        else:
            self.lines = None
            self.text = "\n".join(lines) + "\n"

    def unpacked(self) -> list[str]:
        return self.lines if self.lines is not None else self.text[:-1].split("\n")

    def joined(self) -> str:
        return self.text if self.lines is None else "".join(line + "\n" for line in self.lines)


class _Retained:
    """The retained lines, oldest first, in three parts: the oldest lines unpacked
    while they are being dropped one by one (at most one block's), packed blocks
    (:class:`_Block`), and the newest lines not packed yet (fewer than
    :data:`PACK_LINES`). Memory: about the lines' text, plus ~120 bytes for each
    line of the two unpacked parts."""

    __slots__ = ("_blocks", "_front", "_open", "_open_size", "_pack", "count", "size")

    def __init__(self, pack_lines: int = PACK_LINES, pack_bytes: int = PACK_BYTES) -> None:
        self._pack = (pack_lines, pack_bytes)
        self._front: deque[tuple[str, int]] = deque()
        self._blocks: deque[_Block] = deque()
        self._open: list[str] = []
        self._open_size = 0
        #: Lines and bytes retained.
        self.count = 0
        self.size = 0

    def append(self, line: str, size: int) -> None:
        self._open.append(line)
        self._open_size += size
        self.count += 1
        self.size += size
        pack_lines, pack_bytes = self._pack
        if len(self._open) >= pack_lines or self._open_size >= pack_bytes:
            self._blocks.append(_Block(self._open, self._open_size))
            self._open = []
            self._open_size = 0

    def drop_oldest(self) -> int:
        """Drop the oldest line; its size. (Only while a line is retained.)"""
        front = self._front
        if not front:
            if self._blocks:
                block = self._blocks.popleft()
                front.extend((line, _size(line)) for line in block.unpacked())
            else:  # (only unpacked lines are left: fewer than PACK_LINES)
                front.extend((line, _size(line)) for line in self._open)
                self._open = []
                self._open_size = 0
        _, size = front.popleft()
        self.count -= 1
        self.size -= size
        return size

    def newest(self) -> Iterator[tuple[str, int]]:
        """Every retained line with its size, newest first, unpacked as the walk goes."""
        for line in reversed(self._open):
            yield line, _size(line)
        for block in reversed(self._blocks):
            for line in reversed(block.unpacked()):
                yield line, _size(line)
        yield from reversed(self._front)

    def text(self) -> str:
        """Every retained line, each followed by ``\n``."""
        return (
            "".join(line + "\n" for line, _ in self._front)
            + "".join(block.joined() for block in self._blocks)
            + "".join(line + "\n" for line in self._open)
        )


class OutputBudget:
    """Finished lines go in with :meth:`add`; :meth:`render` applies the budget.

    Buffering: the head (at most ``head_bytes``) and the retained lines (at most
    ``retain_bytes``, oldest dropped first; ``dropped_bytes`` / ``dropped_lines``
    count them), packed a few hundred to a string (:data:`PACK_LINES`), so that
    their memory is about their text however short the lines. ``tail_bytes`` must
    not exceed ``retain_bytes``.
    """

    def __init__(
        self,
        head_bytes: int = DEFAULT_HEAD_BYTES,
        tail_bytes: int = DEFAULT_TAIL_BYTES,
        *,
        retain_bytes: int = RETAINED_OUTPUT_BYTES,
    ) -> None:
        if head_bytes < 0 or tail_bytes < 0:
            raise ValueError("head_bytes and tail_bytes must not be negative")
        if tail_bytes > retain_bytes:
            raise ValueError(f"tail_bytes must not exceed {retain_bytes}")
        self.head_bytes = head_bytes
        self.tail_bytes = tail_bytes
        self.retain_bytes = retain_bytes
        self._head: list[str] = []
        self._head_size = 0
        self._head_full = head_bytes == 0
        #: Lines wholly or partly in the head (the tail starts after them).
        self._head_count = 0
        #: The size of the line whose start is the head (when one is).
        self._head_cut_size = 0
        self._retained = _Retained()
        self.dropped_lines = 0
        self.dropped_bytes = 0
        self.lines = 0  # finished lines added
        self.bytes = 0

    def add(self, line: str) -> None:
        """One finished line (without its newline)."""
        size = _size(line)
        self.lines += 1
        self.bytes += size
        if not self._head_full:
            if self._head_size + size <= self.head_bytes:
                self._head.append(line + "\n")
                self._head_size += size
                self._head_count += 1
            else:
                self._head_full = True
                part = _cut_head(line, self.head_bytes)
                if not self._head and part:  # one line larger than the head: its start
                    self._head.append(part)
                    self._head_size = len(part.encode("utf-8", "surrogatepass"))
                    self._head_count = 1
                    self._head_cut_size = size
        retained = self._retained
        retained.append(line, size)
        while retained.size > self.retain_bytes and retained.count:
            self.dropped_bytes += retained.drop_oldest()
            self.dropped_lines += 1

    def finished_lines(self, start: int) -> list[str]:
        """Retained finished lines from index ``start`` on (earlier ones may be dropped).

        Costs O(lines returned), not O(lines retained)."""
        count = min(self._retained.count, self.lines - max(0, start))
        if count <= 0:
            return []
        newest = [line for line, _ in itertools.islice(self._retained.newest(), count)]
        newest.reverse()
        return newest

    def retained_text(self, live: Sequence[str] = ()) -> str:
        """Every retained line, then ``live`` (lines not finished yet), each with ``\\n``."""
        return self._retained.text() + "".join(line + "\n" for line in live)

    def render(self, live: Sequence[str] = ()) -> BudgetedText:
        """The output so far, ``live`` lines (still changing) counted as its last lines."""
        total_lines = self.lines + len(live)
        live_sizes = [_size(line) for line in live]
        total_bytes = self.bytes + sum(live_sizes)
        if total_bytes <= self.head_bytes + self.tail_bytes and self.dropped_lines == 0:
            text = self.retained_text(live)
            return BudgetedText(text, False, 0, 0, total_bytes, total_lines)
        # Head: complete it from the live lines when the finished ones did not fill it.
        head = list(self._head)
        head_size = self._head_size
        head_count = self._head_count
        head_full = self._head_full
        head_whole = head_count if not (head and not head[-1].endswith("\n")) else head_count - 1
        live_start = 0
        for line, size in zip(live, live_sizes, strict=True):
            if head_full:
                break
            if head_size + size <= self.head_bytes:
                head.append(line + "\n")
                head_size += size
                head_count += 1
                head_whole += 1
                live_start += 1
            else:
                head_full = True
                part = _cut_head(line, self.head_bytes)
                if not head and part:
                    head.append(part)
                    head_size = len(part.encode("utf-8", "surrogatepass"))
                    head_count += 1
                    live_start += 1
        # Tail: walk back from the end over lines after the head, and over the line
        # whose start the head shows (cut): its end may be in the tail too, no byte twice.
        head_cut = head_count - head_whole  # 1: the head's last line is cut
        rest = -1  # the cut line's bytes not in the head (-1: it is not walked over)
        retained_from = head_count
        if head_cut:
            shown = len(head[-1].encode("utf-8", "surrogatepass"))
            if head_count > self.lines:  # the cut line is a live one
                live_start -= 1
                rest = live_sizes[live_start] - shown
            elif self.dropped_lines < head_count:  # a finished one, still retained
                retained_from -= 1
                rest = self._head_cut_size - shown
        tail: list[str] = []
        tail_size = 0
        tail_whole = 0
        tail_cut = False  # the tail's first line is shown in part
        rest_shown = False  # ... and it is the head's cut line
        # Newest first, and lazily: the walk stops as soon as the tail is full (a
        # render costs O(tail), not O(retained)).
        after_head = max(0, self.lines - max(retained_from, self.dropped_lines))
        walked = len(live) - live_start + after_head
        newest_first = itertools.chain(
            reversed(list(zip(live[live_start:], live_sizes[live_start:], strict=True))),
            itertools.islice(self._retained.newest(), after_head),
        )
        # Whole lines while they fit; the first that does not is cut to the end that fits
        # (wherever it is: the tail is the output's last bytes, as many as fit).
        for index, (line, size) in enumerate(newest_first):
            room = self.tail_bytes - tail_size
            if room <= 0:
                break
            if rest >= 0 and index == walked - 1:  # the line the head cut: its rest at most
                if rest > 0:
                    part = _cut_tail(line + "\n", min(rest, room))
                    tail.append(part)
                    tail_size += len(part.encode("utf-8", "surrogatepass"))
                    tail_cut = rest_shown = True
                break
            if size <= room:
                tail.append(line + "\n")
                tail_size += size
                tail_whole += 1
                continue
            part = _cut_tail(line + "\n", room)  # (never empty: it ends with the newline)
            tail.append(part)
            tail_size += len(part.encode("utf-8", "surrogatepass"))
            tail_cut = True
            break
        tail.reverse()
        # Lines shown in part: the head's cut line, the tail's first line when cut (the
        # same line when the tail shows the rest of the head's: counted once).
        partial = head_cut + (1 if tail_cut and not rest_shown else 0)
        omitted_bytes = total_bytes - head_size - tail_size
        omitted_lines = total_lines - head_whole - tail_whole - partial
        if omitted_bytes <= 0:
            return BudgetedText(
                "".join(head) + "".join(tail), False, 0, 0, total_bytes, total_lines
            )
        head_text = "".join(head)
        if head_text and not head_text.endswith("\n"):
            head_text += "\n"
        text = head_text + omission_marker(omitted_bytes, omitted_lines) + "\n" + "".join(tail)
        return BudgetedText(text, True, omitted_bytes, omitted_lines, total_bytes, total_lines)
