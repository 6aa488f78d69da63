"""The two moves every stage of a terminal makes on its memory channels.

Why a module of its own: each hop between a terminal's tasks costs a pass of Trio's
scheduler, so every stage takes *everything* waiting in its inbox in one step and
hands its result on without a pass when there is room (``docs/engine.md``,
"Batching"). Those two moves were written out in each stage; here they are once.
Pure Trio, no I/O.
"""

from __future__ import annotations

from typing import TypeVar

import trio

__all__ = ["hand_on", "take_joined"]

_T = TypeVar("_T")


async def hand_on(channel: trio.MemorySendChannel[_T], item: _T) -> None:
    """Hand ``item`` on without a scheduler pass when there is room (the receiver is
    woken either way); wait for room otherwise (backpressure). Cancellation: only the
    wait for room is cancellable; the item is then not sent."""
    try:
        channel.send_nowait(item)
    except trio.WouldBlock:
        await channel.send(item)


async def take_joined(inbox: trio.MemoryReceiveChannel[bytes]) -> bytes:
    """The next item and every one already waiting behind it (also those of senders
    waiting for room), joined into one: a stage's one step for all of them. Waits only
    when nothing is waiting; raises :class:`trio.EndOfChannel` when the channel ended
    before anything came (what came before the end is returned first)."""
    try:
        data = inbox.receive_nowait()
    except trio.WouldBlock:
        data = await inbox.receive()
    more: list[bytes] | None = None
    while True:
        try:
            extra = inbox.receive_nowait()
        except (trio.WouldBlock, trio.EndOfChannel):
            break
        if more is None:
            more = [data]
        more.append(extra)
    return data if more is None else b"".join(more)
