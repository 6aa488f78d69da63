"""The inbound budget: memory all of a server's connections may hold in messages not yet decoded.

Why a module of its own: the budget is one object per server (:mod:`ahp.server.state`
owns it), shared by every connection's reader (:class:`ahp.server.wsconn.ServerWebSocket`
takes and gives back its share); its rules — who gives way when a part would pass the
limit, and the pacing of large messages' decoding — are about the server as a whole,
not about one WebSocket. Pure bookkeeping and one lock; the only wait is the pause
after a large message's step (:meth:`InboundBudget.paced`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Final, Protocol, TypeVar

import trio

__all__ = ["DECODE_PACE", "InboundBudget", "InboundHolder"]

_T = TypeVar("_T")

#: Pause after each step of checking or decoding a large message (see
#: ``websocket.LARGE_FRAME``), per second the step took: 1 leaves the loop to the other
#: tasks at least half the time while large messages are decoded back to back, by one
#: connection or many (one at a time: :attr:`InboundBudget.decoding`). One such step is
#: one ``orjson.loads`` of up to 8 MiB (~10-20 ms quiet, 30 ms loaded); paced, a
#: keystroke's echo meets one of them at most, not two or three in a row (issue 25).
DECODE_PACE: Final = 1.0


class InboundHolder(Protocol):
    """What :class:`InboundBudget` knows of a connection holding part of it (a
    :class:`ServerWebSocket`)."""

    #: Read-only connections give way first.
    read_only: bool

    def give_way(self) -> None:
        """Its share was taken back: drop what it holds and close (1013)."""


class InboundBudget:
    """Memory all connections of a server may hold in messages still being assembled
    (or, complete, waiting for their turn to be decoded).

    Why: each connection may hold up to its ``max_message_size`` of an unfinished
    message, so 30 connections each sending all but the last byte of an 8 MiB frame
    held 302 MB (issue 25). Who pays when a part would take the total past ``limit``
    (:meth:`take`) is not always its sender: the connections that rank above the
    sender give way (closed with 1013, try again later; what they held is given back
    at once), the highest first, until the part fits. Read-only connections rank
    above full-access ones, and within each kind the one that holds more ranks
    higher; a connection that does not rank above the sender (as much or less of the
    same kind, or a full-access one for a read-only sender) never gives way for it.
    When those that may cannot make room, nobody gives way and the sender is closed
    with 1013, as before. (Before, the sender always was: four read-only connections
    each holding an unfinished 8 MiB frame closed a full-access client's ordinary
    100 KiB message.) A complete message waiting for its turn to be decoded counts
    but never gives way: it was delivered whole, and leaves the budget soon (one at a
    time, tens of milliseconds each). Owned by the server; each
    :class:`ServerWebSocket` takes and returns its share.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.held = 0
        #: What each holder holds now (a holder that gave way is no longer here).
        self._shares: dict[InboundHolder, int] = {}
        #: Connections closed for it: refused their own part, or gave way (figures).
        self.refused = 0
        self.gave_way = 0
        #: Held while a large message is checked and decoded (one at a time, paced:
        #: :meth:`paced`); a message waiting for it keeps its share of the budget.
        self.decoding = trio.Lock()
        #: Large messages' steps run, and the seconds paused after them (figures).
        self.paced_steps = 0
        self.paused = 0.0

    async def paced(self, step: Callable[[], _T]) -> _T:
        """Run ``step`` (synchronous: a large message's check or decoding, the caller
        holding :attr:`decoding`), then pause :data:`DECODE_PACE` times as long as it
        took, so that no two such steps of any connections run back to back."""
        start = time.perf_counter()
        result = step()
        pause = (time.perf_counter() - start) * DECODE_PACE
        self.paced_steps += 1
        self.paused += pause
        await trio.sleep(pause)
        return result

    def take(
        self, size: int, holder: InboundHolder | None = None, *, complete: bool = False
    ) -> bool:
        """Count ``size`` more bytes for ``holder``; False (refused) when they would pass
        the limit and the holders that rank above ``holder`` cannot make room (see the
        class docstring). ``complete``: a whole message waiting for its turn to be
        decoded, which never gives way (given back without its holder)."""
        if self.held + size > self.limit and (holder is None or not self._make_room(size, holder)):
            self.refused += 1
            return False
        self.held += size
        if holder is not None and not complete:
            self._shares[holder] = self._shares.get(holder, 0) + size
        return True

    def give_back(self, size: int, holder: InboundHolder | None = None) -> None:
        """Return ``size`` bytes ``holder`` took (None: a complete message's)."""
        if holder is None:
            self.held -= size
            return
        share = self._shares.get(holder)
        if share is None:
            return  # (it gave way: its share was given back then)
        size = min(size, share)
        self.held -= size
        if share > size:
            self._shares[holder] = share - size
        else:
            del self._shares[holder]

    def _make_room(self, size: int, newcomer: InboundHolder) -> bool:
        """Close the holders that rank above ``newcomer``, the highest first, until
        ``size`` fits; none when that would not be enough (False)."""
        mine = (newcomer.read_only, self._shares.get(newcomer, 0) + size)
        ranked = sorted(
            (
                (rank, holder)
                for holder, share in self._shares.items()
                if holder is not newcomer and (rank := (holder.read_only, share)) > mine
            ),
            key=lambda pair: pair[0],
            reverse=True,
        )
        need = self.held + size - self.limit
        chosen: list[InboundHolder] = []
        for (_, share), holder in ranked:
            if need <= 0:
                break
            chosen.append(holder)
            need -= share
        if need > 0:
            return False
        for holder in chosen:
            self.held -= self._shares.pop(holder)
            self.gave_way += 1
            holder.give_way()
        return True
