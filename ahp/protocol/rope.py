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
ever appended to — or has a chunk replaced by a :class:`Packed` one holding the
same text compressed (:func:`pack_chunk`, :meth:`Rope.cold_chunks`,
:func:`swap_chunk`: the host's scrollback packer, :mod:`ahp.engine.packing`, does
it for old text when many terminals hold much; every view still reads the same
text). Joining into a ``str`` is lazy and cached per view.
"""

from __future__ import annotations

from typing import Final, final

import zstandard

#: Memory guard for tiny appends (keystroke echoes): once a view holds more than
#: COMPACT_MIN_CHUNKS chunks averaging under COMPACT_AVG_CHARS characters, the
#: next append joins everything into one fresh chunk. The join costs O(length)
#: but happens only after length / COMPACT_AVG_CHARS appends: amortised O(1).
COMPACT_MIN_CHUNKS: Final = 128
COMPACT_AVG_CHARS: Final = 64
#: Chunks shorter than this are never packed (too little to gain).
PACK_MIN_CHARS: Final = 4096
#: A chunk is packed only if compressing shrinks its memory at least this many
#: times (judged first on a sample of :data:`PACK_SAMPLE` characters: text that
#: does not compress, base64 say, costs one small trial per chunk).
PACK_MIN_RATIO: Final = 2
PACK_SAMPLE: Final = 2048
#: Zstandard's level for packing. Level 1 costs half of zlib's fastest level's CPU on
#: terminal text, for a better ratio (4.0x against 3.7x on the bench's workload), and
#: reads back 2.7x as fast (benchmarks/README.md, session 15): every byte a busy host
#: streams past its scrollback budget goes through it once.
PACK_LEVEL: Final = 1


@final
class Packed:
    """A chunk's text kept compressed (a Zstandard frame); immutable. ``len`` is its length in
    code points, as for the ``str`` it replaces."""

    __slots__ = ("data", "length")

    def __init__(self, data: bytes, length: int) -> None:
        self.data = data
        self.length = length

    def __len__(self) -> int:
        return self.length

    def text(self) -> str:
        return zstandard.decompress(self.data).decode("utf-8", "surrogatepass")


def pack_chunk(text: str) -> Packed | None:
    """``text`` compressed, or None when that would not pay (see :data:`PACK_MIN_RATIO`).
    Pure and thread-safe (a compression context per call; Zstandard releases the GIL):
    the packer calls it in a thread."""
    # (A str holds at least a byte per character: len() is a floor of its memory.)
    if len(text) > 2 * PACK_SAMPLE:
        sample = text[:PACK_SAMPLE]
        trial = zstandard.compress(sample.encode("utf-8", "surrogatepass"), PACK_LEVEL)
        if len(trial) * PACK_MIN_RATIO > len(sample):
            return None
    data = zstandard.compress(text.encode("utf-8", "surrogatepass"), PACK_LEVEL)
    if len(data) * PACK_MIN_RATIO > len(text):
        return None
    return Packed(data, len(text))


class ChunkList(list[str | Packed]):
    """A rope's shared chunk list (``str`` or :class:`Packed` chunks), with the
    packer's cursor: chunks before ``visited`` were looked at by the packer already
    (packed, or not worth it)."""

    __slots__ = ("visited",)

    def __init__(self, items: list[str | Packed] | tuple[()] = ()) -> None:
        super().__init__(items)
        self.visited = 0


def _text(chunk: str | Packed) -> str:
    return chunk if chunk.__class__ is str else chunk.text()  # type: ignore[union-attr]


def swap_chunk(chunks: ChunkList, index: int, original: str, packed: Packed) -> None:
    """Replace ``chunks[index]`` by ``packed`` if it still is ``original`` (the same text:
    every view of the list reads what it read)."""
    if index < len(chunks) and chunks[index] is original:
        chunks[index] = packed


@final
class Rope:
    """An immutable string built by appends; compares and hashes like its text."""

    __slots__ = ("_chunks", "_end", "_joined", "_length", "_start")

    _chunks: ChunkList
    _start: int
    _end: int
    _length: int
    _joined: str | None

    def __init__(self, text: str = "") -> None:
        self._chunks = ChunkList([text] if text else [])
        self._start = 0
        self._end = len(self._chunks)
        self._length = len(text)
        self._joined = text

    @classmethod
    def _view(cls, chunks: ChunkList, start: int, end: int, length: int) -> Rope:
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
            chunks = self._chunks[self._start : self._end]
            try:
                joined = "".join(chunks)  # type: ignore[arg-type]
            except TypeError:  # some chunks are packed
                joined = "".join(map(_text, chunks))
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
            return Rope._view(ChunkList([joined]), 0, 1, len(joined))
        if self._end != len(chunks):
            # A branch from an older view: take a private copy of our chunks.
            chunks = ChunkList(chunks[self._start : self._end])
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
            chunk = _text(self._chunks[index])
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
            chunk = _text(self._chunks[index])
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
        first = chunks[index] if remaining == 0 else _text(chunks[index])[remaining:]
        new_chunks = ChunkList([first, *chunks[index + 1 : self._end]])
        return Rope._view(new_chunks, 0, len(new_chunks), self._length - count)

    def cold_chunks(self, keep: int) -> list[tuple[ChunkList, int, str]]:
        """The chunks worth packing not looked at yet: unpacked, at least
        :data:`PACK_MIN_CHARS` long, wholly before this view's last ``keep``
        characters; as ``(chunk list, index, text)`` for :func:`swap_chunk`. Marks
        them looked at (O(chunks added since the last call))."""
        chunks = self._chunks
        if self._end != len(chunks):
            return []  # an older view: the newest one packs the shared list
        limit = self._end
        tail = 0
        while limit > self._start and tail < keep:
            limit -= 1
            tail += len(chunks[limit])
        found: list[tuple[ChunkList, int, str]] = []
        for index in range(max(chunks.visited, self._start), limit):
            chunk = chunks[index]
            if chunk.__class__ is str and len(chunk) >= PACK_MIN_CHARS:
                found.append((chunks, index, chunk))
        chunks.visited = max(chunks.visited, limit)
        return found
