"""Append-friendly immutable text for terminal content.

Why: a terminal's content grows by small ``terminal/data`` chunks, and older
states stay alive (held by subscribers, the replay log and snapshots). With plain
``str`` every append copies the whole tail part, which is quadratic once old
states are retained (CPython's in-place ``+=`` trick needs a refcount of one).
A :class:`Rope` is an immutable *view* ``[start, end)`` over a shared,
append-only list of chunks. Appending to the newest view extends the shared list
in place, O(len(chunk)); every older view still ends where it ended, so it reads
exactly the text it had. Appending to an older view (a branch) copies its own
chunks first, so values never change under anyone's feet.

Ownership: the chunk list is shared by every view derived from it and is only
ever appended to. Joining into a ``str`` is lazy and cached per view.
"""

from __future__ import annotations

from typing import Final, final

#: Memory guard for tiny appends (keystroke echoes): once a view holds more than
#: COMPACT_MIN_CHUNKS chunks averaging under COMPACT_AVG_CHARS characters, the
#: next append joins everything into one fresh chunk. The join costs O(length)
#: but happens only after length / COMPACT_AVG_CHARS appends: amortised O(1).
COMPACT_MIN_CHUNKS: Final = 128
COMPACT_AVG_CHARS: Final = 64


@final
class Rope:
    """An immutable string built by appends; compares and hashes like its text."""

    __slots__ = ("_chunks", "_end", "_joined", "_length", "_start")

    _chunks: list[str]
    _start: int
    _end: int
    _length: int
    _joined: str | None

    def __init__(self, text: str = "") -> None:
        self._chunks = [text] if text else []
        self._start = 0
        self._end = len(self._chunks)
        self._length = len(text)
        self._joined = text

    @classmethod
    def _view(cls, chunks: list[str], start: int, end: int, length: int) -> Rope:
        rope = cls.__new__(cls)
        rope._chunks = chunks
        rope._start = start
        rope._end = end
        rope._length = length
        rope._joined = None
        return rope

    def __len__(self) -> int:
        return self._length

    def __str__(self) -> str:
        joined = self._joined
        if joined is None:
            joined = "".join(self._chunks[self._start : self._end])
            self._joined = joined
        return joined

    def __repr__(self) -> str:
        return f"Rope({str(self)!r})"

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Rope):
            return self._length == other._length and str(self) == str(other)
        if isinstance(other, str):
            return self._length == len(other) and str(self) == other
        return NotImplemented

    def __hash__(self) -> int:
        return hash(str(self))

    def __add__(self, text: str) -> Rope:
        return self.append(text)

    def append(self, text: str) -> Rope:
        """Return a new rope ``self + text``; ``self`` is unchanged.

        Amortised O(len(text)) when ``self`` is the newest view of its chunk list.
        """
        if not text:
            return self
        chunks = self._chunks
        count = self._end - self._start
        if count >= COMPACT_MIN_CHUNKS and count * COMPACT_AVG_CHARS > self._length:
            joined = str(self) + text
            return Rope._view([joined], 0, 1, len(joined))
        if self._end != len(chunks):
            # A branch from an older view: take a private copy of our chunks.
            chunks = chunks[self._start : self._end]
            start, end = 0, len(chunks)
        else:
            start, end = self._start, self._end
        chunks.append(text)
        return Rope._view(chunks, start, end + 1, self._length + len(text))

    def tail(self, count: int) -> str:
        """The last ``count`` characters, without joining the whole rope."""
        if count <= 0:
            return ""
        if self._joined is not None or count >= self._length:
            return str(self)[-count:]
        parts: list[str] = []
        have = 0
        index = self._end - 1
        while have < count and index >= self._start:
            chunk = self._chunks[index]
            parts.append(chunk)
            have += len(chunk)
            index -= 1
        return "".join(reversed(parts))[-count:]

    def head(self, count: int) -> str:
        """The first ``count`` characters, without joining the whole rope."""
        if count <= 0:
            return ""
        if self._joined is not None or count >= self._length:
            return str(self)[:count]
        parts: list[str] = []
        have = 0
        index = self._start
        while have < count and index < self._end:
            chunk = self._chunks[index]
            parts.append(chunk)
            have += len(chunk)
            index += 1
        return "".join(parts)[:count]

    def drop_prefix(self, count: int) -> Rope:
        """Return the rope without its first ``count`` characters (a new view)."""
        if count <= 0:
            return self
        if count >= self._length:
            return Rope()
        chunks = self._chunks
        index = self._start
        remaining = count
        while remaining >= len(chunks[index]):
            remaining -= len(chunks[index])
            index += 1
        new_chunks = [chunks[index][remaining:], *chunks[index + 1 : self._end]]
        return Rope._view(new_chunks, 0, len(new_chunks), self._length - count)
