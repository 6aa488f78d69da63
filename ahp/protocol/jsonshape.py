"""What decoding a JSON frame would cost, read from its bytes before it is decoded.

Why: orjson builds the whole tree of a frame before anyone can look at it, and
the tree can cost far more than the frame: 15 MiB of ``[],`` is 5 M lists, about
6 s of decoding and 700 MB of memory, during which every other client and
terminal of the server waits. So the server asks this module first, and refuses
(``-32700``) a frame that nests deeper than :data:`MAX_DEPTH` or holds more than
:data:`MAX_ITEMS` containers and separators, without building anything.

How, cheaply: structure can only appear outside strings. A small frame (every
keystroke, every request a client normally sends) is done after a few
``bytes.count`` calls, which over-count (strings included) and so err on the
safe side. A larger one is read exactly with C-speed byte operations only:
escaped backslashes and quotes are dropped (every quote left then delimits a
string), one ``translate`` keeps only brackets, commas and quotes, a frame with
more quotes than the bound allows strings is refused, the strings' share is cut
out with one ``split``, and what is left is counted; only when
there are few enough brackets is the depth measured, over the brackets alone.
The work is a few passes over the frame plus O(:data:`MAX_ITEMS`) in Python,
whatever the frame holds (figures in ``docs/threat-model.md``).

Pure: no I/O, no Trio.
"""

from __future__ import annotations

from itertools import accumulate
from typing import Final

__all__ = ["MAX_DEPTH", "MAX_ITEMS", "FrameShapeError", "check_shape"]

#: Deepest nesting of arrays and objects accepted. orjson reads 1024 levels but writes
#: only 254, and a client's raw JSON (an unknown action, a config) can be echoed to it or
#: broadcast inside an envelope.
MAX_DEPTH: Final = 128
#: Most arrays, objects and separators (``,`` and ``:``) outside strings in one frame:
#: every value but the first of a container follows a separator, so this bounds the
#: number of values decoded (and the memory and time of decoding: measured in
#: ``docs/threat-model.md``). Clients send a few dozen; a frame at this bound decodes
#: in milliseconds.
MAX_ITEMS: Final = 65_536

#: Frames up to this many characters are first checked with plain counts (upper bounds).
_SMALL: Final = 16 * 1024
#: Every byte but brackets, commas and quotes.
_NOT_STRUCTURE: Final = bytes(b for b in range(256) if b not in b'[]{},"')
#: Every byte but the four brackets (deleted to measure the depth).
_NOT_BRACKETS: Final = bytes(b for b in range(256) if b not in b"[]{}")
#: +1 for an opening bracket, -1 for a closing one, by byte value.
_STEP: Final = tuple(1 if b in b"[{" else -1 for b in range(256))


class FrameShapeError(ValueError):
    """The frame would cost too much to decode; ``str()`` says which bound it passes."""


def _count(data: str | bytes, char: str) -> int:
    """Occurrences of the ASCII ``char`` in ``data`` (text or UTF-8)."""
    return data.count(char) if isinstance(data, str) else data.count(char.encode())


def _too_many(max_items: int) -> FrameShapeError:
    # (A new exception each time, never one held in a local: a local would make a cycle
    # exception -> traceback -> frame -> local, keeping the frame's 16 MiB buffers alive
    # until the garbage collector happens to run.)
    return FrameShapeError(f"more than {max_items} items")


def check_shape(
    frame: bytes | str, *, max_depth: int = MAX_DEPTH, max_items: int = MAX_ITEMS
) -> None:
    """Refuse a frame whose decoding would cost too much; return if it is within bounds.

    Args:
        frame: The frame, as text or UTF-8 (JSON or not: invalid JSON is left to the
            decoder, which refuses it at least as cheaply).
        max_depth: Deepest nesting of arrays/objects allowed.
        max_items: Most containers plus commas allowed outside strings.

    Raises:
        FrameShapeError: nested deeper than ``max_depth``, or more than ``max_items``
            items.
    """
    if len(frame) <= min(max_depth, max_items):
        return  # (it cannot hold more brackets or commas than characters)
    if len(frame) <= _SMALL:
        # Upper bounds (strings' contents included), enough for nearly every frame.
        if isinstance(frame, str):
            openings, commas = frame.count("[") + frame.count("{"), frame.count(",")
        else:
            openings, commas = frame.count(b"[") + frame.count(b"{"), frame.count(b",")
        if openings <= max_depth and openings + commas <= max_items:
            return
    bare: str | bytes = frame
    if ('"' in frame) if isinstance(frame, str) else (b'"' in frame):
        data = frame.encode("utf-8", "surrogatepass") if isinstance(frame, str) else frame
        if b"\\" in data:
            # Drop escaped backslashes, then escaped quotes: every quote left is a
            # string's delimiter.
            data = data.replace(b"\\\\", b"").replace(b'\\"', b"")
        # Only brackets, commas and quotes matter from here: one pass keeps just those
        # (in order, so quotes still delimit the strings' share of them).
        data = data.translate(None, _NOT_STRUCTURE)
        # Strings are keys or values: at most one key and one value per item, plus one.
        if data.count(b'"') > 4 * max_items + 2:
            raise _too_many(max_items)
        bare = b"".join(data.split(b'"')[::2])
        del data
    # One count at a time: a costly frame is refused after the first pass.
    openings = 0
    for char in "[{":
        openings += _count(bare, char)
        if openings > max_items:
            raise _too_many(max_items)
    if openings + _count(bare, ",") > max_items:
        raise _too_many(max_items)
    if openings <= max_depth:
        return
    if isinstance(bare, str):
        bare = bare.encode("utf-8", "surrogatepass")
    brackets = bare.translate(None, _NOT_BRACKETS)
    if len(brackets) > 2 * max_items:  # (more closings than openings: not JSON either)
        raise _too_many(max_items)
    if max(accumulate(map(_STEP.__getitem__, brackets))) > max_depth:
        raise FrameShapeError(f"nested deeper than {max_depth} levels")
