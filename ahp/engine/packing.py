"""Old scrollback text packed (compressed) when a host's terminals hold much of it.

Why: a terminal's scrollback is its text — :data:`~ahp.reducers.scrollback.DEFAULT_SCROLLBACK`
is 4 Mi characters, between 3.2 and 4 MiB of ASCII as Python strings once full
(trimming goes down to 80 %), plus the chunk lists and the replay log's share:
~4.3 MiB per terminal. Thirty terminals printing in a loop held 130 MiB (issue 25's
``silent subscriber``). Terminal output is mostly repetitive, and Zstandard's level 1
shrinks it 3-100x (:data:`~ahp.protocol.rope.PACK_LEVEL`); text that does not shrink at least
:data:`~ahp.protocol.rope.PACK_MIN_RATIO` times (base64, say) is left as it is.

What it does: while the host's terminals' text takes more than :data:`PACK_BUDGET`
bytes in all (as Python strings, estimated: :attr:`Terminal.scrollback_bytes
<ahp.engine.Terminal.scrollback_bytes>`; text with emoji is held at four bytes a
character), every :data:`PACK_PERIOD` seconds it packs the chunks older than
each terminal's newest :data:`PACK_KEEP` characters (the chunks no append touches),
compressing in a worker thread, :data:`PACK_STEP` characters per thread call (a
terminal disposed meanwhile leaves the pass at the next call); the loop only swaps
each chunk for its packed form (:func:`~ahp.protocol.rope.swap_chunk`: every state
sharing it reads the same text). Below the budget nothing is done: a terminal or a
few streaming never pack, and their hot path is the same as without this module; and
below it the packer sleeps until a terminal prints again (given ``quiet``: the host's
:class:`~ahp.engine.alarm.OutputAlarm`), so an idle host does not wake for it.
Reading packed text (a snapshot, a render of old lines) decompresses it (about 1
GB/s for text that packed well).

Bounds: the work per round is the chunks added since the last round (each chunk
list remembers how far it was looked at), in the last
:data:`~ahp.reducers.scrollback.PACK_SCAN_PARTS` parts of each terminal.

Ownership and cancellation: one task in the host's nursery
(:meth:`ahp.engine.Host.create_terminal` starts it when none runs), ending once
the host has no terminal left; cancelled with the host. A cancelled thread call
is abandoned (the thread only compresses strings; its results are dropped).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection
from typing import TYPE_CHECKING, Final

import trio

from ahp.protocol.rope import ChunkList, Packed, pack_chunk, swap_chunk
from ahp.reducers.scrollback import cold_chunks

if TYPE_CHECKING:
    from ahp.engine.terminal import Terminal

__all__ = ["PACK_BUDGET", "PACK_KEEP", "PACK_PERIOD", "PACK_STEP", "pack_scrollback"]

#: Bytes of text (as Python strings) retained over all of a host's terminals below
#: which nothing is packed (8 terminals at full default scrollback of ASCII, 2 of text
#: with emoji).
PACK_BUDGET: Final = 32 * 1024 * 1024
#: The newest characters of each terminal never packed (appends, the screen, tails).
PACK_KEEP: Final = 512 * 1024
#: Seconds between looks at the host's terminals while any exist and print.
PACK_PERIOD: Final = 0.25
#: Characters compressed per worker-thread call (then the loop swaps them in).
PACK_STEP: Final = 4 * 1024 * 1024


def _pack_all(texts: list[str]) -> list[Packed | None]:
    return [pack_chunk(text) for text in texts]


async def _pack_pass(
    live: Collection[Terminal], *, keep: int, step: int, released: Callable[[], None] | None
) -> None:
    """Pack the cold chunks of ``live``, the fullest terminals first (see
    :func:`pack_scrollback`)."""
    found: list[tuple[Terminal, ChunkList, int, str]] = [
        (terminal, *cold)
        for terminal in sorted(live, key=lambda t: -t.scrollback_bytes)
        for cold in cold_chunks(terminal.state, keep)
    ]
    dropped = False
    while found:
        if any(t.closing for t, _, _, _ in found):
            found = [item for item in found if not item[0].closing]
            dropped = True
            continue
        size = 0
        end = 0
        while end < len(found) and size < step:
            size += len(found[end][3])
            end += 1
        batch, found = found[:end], found[end:]
        texts = [text for _, _, _, text in batch]
        packed = await trio.to_thread.run_sync(_pack_all, texts, abandon_on_cancel=True)
        _swap_all(batch, packed)
        del batch, texts, packed
    if dropped and released is not None:
        released()


def _swap_all(
    batch: list[tuple[Terminal, ChunkList, int, str]], packed: list[Packed | None]
) -> None:
    """Swap each packed chunk in (a function of its own: the pass's frame then holds no
    terminal while it waits for the next thread call)."""
    for (terminal, chunks, index, text), done in zip(batch, packed, strict=True):
        if done is not None and not terminal.closing:
            swap_chunk(chunks, index, text, done)


async def pack_scrollback(
    terminals: Callable[[], Collection[Terminal]],
    *,
    budget: int = PACK_BUDGET,
    keep: int = PACK_KEEP,
    period: float = PACK_PERIOD,
    step: int = PACK_STEP,
    released: Callable[[], None] | None = None,
    quiet: Callable[[float], Awaitable[None]] | None = None,
) -> None:
    """Pack old scrollback while ``terminals()`` retain more than ``budget`` bytes of text;
    return once ``terminals()`` is empty. See the module docstring.

    A terminal disposed during a pass is dropped from it before the next thread call
    (its chunks are neither packed nor kept alive by the pass); ``released`` is then
    called once the pass has let go of them (the host asks for a trim: a disposal's
    own trim may have run while the pass still held them). ``quiet``, if given, is
    awaited with ``period`` after a look that found the terminals below the budget: it
    returns when there may be more to look at (:meth:`ahp.engine.alarm.OutputAlarm.wait`).
    """
    while True:
        live = terminals()
        if not live:
            return
        if sum(t.scrollback_bytes for t in live) > budget:
            # (A pass of its own: none of its locals holds a terminal across the waits.)
            await _pack_pass(live, keep=keep, step=step, released=released)
        elif quiet is not None:
            # Below the budget only output changes that: sleep until a period after some.
            await quiet(period)
            continue
        await trio.sleep(period)
