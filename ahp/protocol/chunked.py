"""JSON encoded in pieces: the same bytes as one ``orjson.dumps``, in bounded steps.

Why: one answer can hold megabytes of escape-dense text (a terminal snapshot of 4 Mi
characters of ``\\x1b[1m``, ~9 MB of JSON): encoded in one call it holds the event
loop for 12 ms on a quiet machine and ~45 ms on a loaded one (issue 25). Here the
value is walked, and every ``orjson.dumps`` call is given at most about
:data:`PIECE_WEIGHT` of work: small subtrees are encoded whole, a run of small items
of a big array or object is encoded as one batch, and a long string is encoded
slice by slice (JSON escapes each code point on its own, so the slices' encodings,
without their quotes, join into the string's). The caller takes the pieces one at
a time and may let other tasks run between them.

The pieces joined are byte-identical to ``orjson.dumps(value)`` (no options; what
:func:`ahp.protocol.codec.dumps_utf8` does), and a value that one call refuses
(a non-string key, an integer past 64 bits, a lone surrogate) raises the same
``orjson.JSONEncodeError`` here, though possibly after some pieces.

Pure: no I/O, no Trio. The value is read, never changed; it must not change while
the pieces are taken.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Final

import orjson

__all__ = ["PIECE_WEIGHT", "encode_pieces", "json_size_over", "weight"]

#: Work given to one ``orjson.dumps`` call at most, in :func:`weight` units (about
#: characters of input): 64 Ki characters encode in ~0.2 ms quiet, ~1 ms loaded, even
#: when every one of them becomes a 6-byte escape (``\\u001b``).
PIECE_WEIGHT: Final = 64 * 1024
#: Weight of a number (the longest an ``orjson`` float or 64-bit integer is written).
_NUMBER: Final = 24
#: Weight of ``true``, ``false``, ``null`` and of anything else orjson encodes.
_SCALAR: Final = 5


def weight(value: Any, cap: int) -> int:
    """About how many characters of input ``value``'s encoding reads (a string its
    length, a number 24, a container its members and separators); the count stops
    once it passes ``cap`` (it then returns some number above ``cap``), so its cost
    is bounded by ``cap`` too, whatever the value's size."""
    return _count(value, cap, number=_NUMBER, scalar=_SCALAR, base=2, least=0, ahead=1)


def _count(
    value: Any, cap: int, *, number: int, scalar: int, base: int, least: int, ahead: int
) -> int:
    """The bounded walk behind :func:`weight` and :func:`json_size_over`: a string
    counts its length and quotes, a number ``number``, another scalar ``scalar``, an
    object ``base`` and two per member, an array ``base`` and one per item (at least
    ``least``). Past ``cap`` it stops and returns a count above ``cap`` (a container
    stops it early when ``ahead`` per member would pass it)."""
    total = 0
    stack = [value]
    pop, extend = stack.pop, stack.extend
    while stack:
        item = pop()
        if isinstance(item, str):
            total += len(item) + 2
        elif isinstance(item, dict):
            size = len(item)
            total += base + 2 * size
            if total + ahead * size > cap:
                return cap + 1
            extend(item.keys())
            extend(item.values())
        elif isinstance(item, list | tuple):
            size = len(item)
            total += base + max(least, size)
            if total + ahead * size > cap:
                return cap + 1
            extend(item)
        elif isinstance(item, int | float) and not isinstance(item, bool):
            total += number
        else:
            total += scalar
        if total > cap:
            return total
    return total


def encode_pieces(value: Any, limit: int = PIECE_WEIGHT) -> Iterator[bytes]:
    """The JSON of ``value`` (``orjson.dumps``), in pieces; each piece is the output of
    one ``orjson.dumps`` call given at most ``limit`` of :func:`weight` (or of one
    number or scalar), or a separator. ``limit`` must be at least 1."""
    if limit < 1:
        raise ValueError("limit must be at least 1")
    if weight(value, limit) <= limit:
        yield orjson.dumps(value)
    elif isinstance(value, str):
        yield from _string(value, limit)
    elif isinstance(value, dict):
        yield from _members(value, limit)
    elif isinstance(value, list | tuple):
        yield from _items(value, limit)
    else:  # (a scalar heavier than a tiny limit)
        yield orjson.dumps(value)


def _string(text: str, limit: int) -> Iterator[bytes]:
    size = len(text)
    step = max(1, limit - 2)
    if size <= step:  # (only for a limit under 3)
        yield orjson.dumps(text)
        return
    last = size - step
    for start in range(0, size, step):
        encoded = orjson.dumps(text[start : start + step])
        if start == 0:
            yield encoded[:-1]
        elif start >= last:
            yield encoded[1:]
        else:
            yield encoded[1:-1]


def _items(items: list[Any] | tuple[Any, ...], limit: int) -> Iterator[bytes]:
    yield b"["
    first = True
    batch: list[Any] = []
    batch_weight = 0
    for item in items:
        item_weight = weight(item, limit)
        if batch and batch_weight + item_weight > limit:
            yield orjson.dumps(batch)[1:-1] if first else b"," + orjson.dumps(batch)[1:-1]
            first, batch, batch_weight = False, [], 0
        if item_weight > limit:
            if not first:
                yield b","
            yield from encode_pieces(item, limit)
            first = False
            continue
        batch.append(item)
        batch_weight += item_weight
    if batch:
        yield orjson.dumps(batch)[1:-1] if first else b"," + orjson.dumps(batch)[1:-1]
    yield b"]"


def _members(members: dict[Any, Any], limit: int) -> Iterator[bytes]:
    yield b"{"
    first = True
    batch: dict[Any, Any] = {}
    batch_weight = 0
    for key, member in members.items():
        if not isinstance(key, str):
            orjson.dumps({key: None})  # (raises what one call would: "Dict key must be str")
        member_weight = len(key) + 3 + weight(member, limit)
        if batch and batch_weight + member_weight > limit:
            yield orjson.dumps(batch)[1:-1] if first else b"," + orjson.dumps(batch)[1:-1]
            first, batch, batch_weight = False, {}, 0
        if member_weight > limit:
            if not first:
                yield b","
            if len(key) + 2 > limit:
                yield from _string(key, limit)
                yield b":"
            else:
                yield orjson.dumps(key) + b":"
            yield from encode_pieces(member, limit)
            first = False
            continue
        batch[key] = member
        batch_weight += member_weight
    if batch:
        yield orjson.dumps(batch)[1:-1] if first else b"," + orjson.dumps(batch)[1:-1]
    yield b"}"


def json_size_over(value: Any, limit: int) -> bool:
    """Whether ``orjson.dumps(value)`` is longer than ``limit`` bytes, at a cost bounded
    by ``limit`` (an 8 MB config was encoded whole to be refused: ~7 ms, issue 25).

    A lower bound of the size is counted first (a string at least its length and
    quotes, a number a digit, ``null`` 4; the count stops past ``limit``); only a
    value whose bound is within ``limit`` is encoded to decide.
    """
    bound = _count(value, limit, number=1, scalar=1, base=1, least=1, ahead=0)
    return bound > limit or len(orjson.dumps(value)) > limit
