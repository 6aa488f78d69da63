"""An immutable sequence of content parts whose tail can change in O(1).

Why: a terminal's content is a list of parts (commands and the text between
them), and every ``terminal/data`` changes the last one. With a plain tuple each
append rebuilds the tuple, O(number of parts): a long-lived agent shell, with
thousands of commands in its scrollback, got slower with every command, and the
old states that subscribers and the replay log retain forbid mutating in place.

A :class:`Parts` value is a *view*: the parts ``[start, end)`` of a shared,
append-only list, followed by its own ``tail`` (the last part, kept outside the
list so that replacing it is O(1)). Appending a part to the newest view pushes
its tail onto the shared list, amortised O(1); every older view still ends where
it ended. Changing an older view (a branch, such as a client's mirror applying
a pending action) copies its parts first, so values never change under anyone.
Dropping leading parts (scrollback) moves ``start``; the shared list is compacted
once more than half of it lies before ``start``, so it never holds more than
twice what the newest view shows.

It compares equal to a tuple (or another :class:`Parts`) with the same parts and
hashes like one, so ``state.content == ()`` and fixtures keep working. Pure: no
I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Final, Generic, TypeVar, final, overload

__all__ = ["COMPACT_MIN", "Parts"]

T = TypeVar("T")

#: The shared list is compacted only when at least this many dropped parts precede a view.
COMPACT_MIN: Final = 64


@final
class Parts(Sequence[T], Generic[T]):
    """An immutable sequence with O(1) tail replacement and amortised O(1) append."""

    __slots__ = ("_end", "_items", "_start", "_tail")

    _items: list[T]
    _start: int
    _end: int
    _tail: T | None  # None: empty (then _start == _end)

    def __init__(self, items: Iterable[T] = ()) -> None:
        listed = list(items)
        self._tail = listed.pop() if listed else None
        self._items = listed
        self._start = 0
        self._end = len(listed)

    @classmethod
    def _view(cls, items: list[T], start: int, end: int, tail: T | None) -> Parts[T]:
        view: Parts[T] = cls.__new__(cls)
        view._items = items
        view._start = start
        view._end = end
        view._tail = tail
        return view

    # -- Sequence ----------------------------------------------------------------------------

    def __len__(self) -> int:
        return 0 if self._tail is None else self._end - self._start + 1

    def __bool__(self) -> bool:
        return self._tail is not None

    @overload
    def __getitem__(self, index: int) -> T: ...
    @overload
    def __getitem__(self, index: slice) -> tuple[T, ...]: ...
    def __getitem__(self, index: int | slice) -> T | tuple[T, ...]:
        if isinstance(index, slice):
            return tuple(self)[index]
        size = len(self)
        if index < 0:
            index += size
        if not 0 <= index < size:
            raise IndexError("Parts index out of range")
        if index == size - 1:
            assert self._tail is not None
            return self._tail
        return self._items[self._start + index]

    def __iter__(self) -> Iterator[T]:
        if self._tail is None:
            return
        items = self._items
        for i in range(self._start, self._end):
            yield items[i]
        yield self._tail

    def __reversed__(self) -> Iterator[T]:
        if self._tail is None:
            return
        yield self._tail
        items = self._items
        for i in range(self._end - 1, self._start - 1, -1):
            yield items[i]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Parts | tuple):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __repr__(self) -> str:
        return f"Parts({list(self)!r})"

    # -- persistent updates ------------------------------------------------------------------

    @property
    def last(self) -> T | None:
        """The last part, or None when empty (O(1))."""
        return self._tail

    def replace_last(self, part: T) -> Parts[T]:
        """A new value with the last part replaced (O(1)); raises IndexError when empty."""
        if self._tail is None:
            raise IndexError("replace_last on empty Parts")
        return Parts._view(self._items, self._start, self._end, part)

    def append(self, part: T) -> Parts[T]:
        """A new value with ``part`` appended (amortised O(1) on the newest view)."""
        if self._tail is None:
            return Parts._view([], 0, 0, part)
        items, start, end = self._items, self._start, self._end
        if end != len(items):
            # A branch from an older view: take a private copy of our parts.
            items = items[start:end]
            start, end = 0, len(items)
        items.append(self._tail)
        return Parts._view(items, start, end + 1, part)

    def replace(self, index: int, part: T) -> Parts[T]:
        """A new value with the part at ``index`` replaced (O(1) for the last, else
        O(len))."""
        size = len(self)
        if index < 0:
            index += size
        if not 0 <= index < size:
            raise IndexError("Parts index out of range")
        if index == size - 1:
            return self.replace_last(part)
        copy = self._items[self._start : self._end]
        copy[index] = part
        return Parts._view(copy, 0, len(copy), self._tail)

    def drop_first(self, count: int) -> Parts[T]:
        """A new value without the first ``count`` parts (O(1), amortised compaction)."""
        if count <= 0:
            return self
        if count >= len(self):
            return Parts()
        items, start, end = self._items, self._start + count, self._end
        if start >= COMPACT_MIN and start * 2 > len(items):
            items = items[start:end]
            start, end = 0, len(items)
        return Parts._view(items, start, end, self._tail)

    def as_tuple(self) -> tuple[T, ...]:
        return tuple(self)

    @staticmethod
    def of(value: Sequence[T] | Iterable[T]) -> Parts[T]:
        """``value`` as :class:`Parts` (returned as it is when it already is one)."""
        if isinstance(value, Parts):
            return value
        return Parts(value)
