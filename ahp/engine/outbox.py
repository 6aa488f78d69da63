"""A subscriber's bounded outbound queue, with merging and an overflow verdict.

Why: one subscriber that stops reading must never block the terminal, the pty or
any other subscriber, and must never be left silently with a gap. Publishers
call :meth:`Outbox.put` (synchronous, never blocks). While the consumer is
behind, a ``terminal/data`` envelope that directly follows another on the same
channel is merged into it (the reduced state is identical). When the queued
bytes pass ``max_bytes`` the outbox *overflows*: it drops its queue, stops
accepting items and wakes the consumer, which must then recover — the
in-process subscription takes a fresh snapshot, a WebSocket connection is
closed with 1013 so that its client reconnects (replay or snapshot).

Responses (``str`` items: answers to the consumer's own requests, such as a
snapshot) do not count towards the overflow bound: one snapshot of a terminal
full of escape sequences can be larger than the bound by itself, and it is no
backlog. They are bounded instead by the requester, who waits
(:meth:`Outbox.wait_responses_below`) before asking for more.

Only the item at the tail is ever merged (never past an envelope of another
channel), so delivered ``serverSeq`` values stay strictly increasing.

Ownership: created and consumed by one subscriber task; fed by any publisher in
the same Trio run. Cancellation: :meth:`get_batch` is a plain checkpointed wait.
"""

from __future__ import annotations

from collections import deque
from typing import Final

import trio

from ahp.engine.envelopes import Published

__all__ = ["DEFAULT_OUTBOX_BYTES", "Outbox", "OutboxItem"]

#: Default bound on queued bytes per subscriber.
DEFAULT_OUTBOX_BYTES: Final = 4 * 1024 * 1024

#: Items that are not envelopes (responses, snapshots) are queued as text frames.
OutboxItem = Published | str


class Outbox:
    """Bounded queue of :data:`OutboxItem`; see the module docstring."""

    def __init__(self, *, max_bytes: int = DEFAULT_OUTBOX_BYTES) -> None:
        self.max_bytes = max_bytes
        self._items: deque[OutboxItem] = deque()
        self._bytes = 0  # envelopes (the backlog that can overflow)
        self._response_bytes = 0  # str items
        self._lot = trio.lowlevel.ParkingLot()
        self._drained = trio.lowlevel.ParkingLot()
        self.overflowed = False
        self._overflow = trio.Event()
        self.closed = False
        #: Counters for tests and figures.
        self.merged = 0
        self.delivered = 0

    @property
    def queued_bytes(self) -> int:
        return self._bytes + self._response_bytes

    def __len__(self) -> int:
        return len(self._items)

    def put(self, item: OutboxItem) -> bool:
        """Queue ``item``; returns False when the outbox has overflowed or closed."""
        if self.overflowed or self.closed:
            return False
        items = self._items
        if items and isinstance(item, Published) and item.mergeable():
            tail = items[-1]
            if isinstance(tail, Published) and tail.mergeable() and tail.channel == item.channel:
                merged = tail.merged_with(item)
                items[-1] = merged
                self._bytes += merged.size - tail.size
                self.merged += 1
                self._check_bound()
                return not self.overflowed
        items.append(item)
        if isinstance(item, str):
            self._response_bytes += len(item)
        else:
            self._bytes += item.size
        self._check_bound()
        if not self.overflowed:
            self._lot.unpark_all()
        return not self.overflowed

    def _check_bound(self) -> None:
        if self._bytes > self.max_bytes:
            self.overflowed = True
            self._overflow.set()
            self._items.clear()
            self._bytes = self._response_bytes = 0
            self._lot.unpark_all()
            self._drained.unpark_all()

    def close(self) -> None:
        """No more items; a waiting consumer wakes and sees an empty batch."""
        self.closed = True
        self._lot.unpark_all()
        self._drained.unpark_all()

    def reset(self) -> None:
        """Clear the overflow verdict (after the consumer has resynchronised)."""
        self.overflowed = False
        self._overflow = trio.Event()
        self._items.clear()
        self._bytes = self._response_bytes = 0
        self._drained.unpark_all()

    async def wait_responses_below(self, limit: int) -> None:
        """Wait while more than ``limit`` bytes of responses are queued (the producer of
        responses calls this before handling the next request)."""
        while self._response_bytes > limit and not (self.overflowed or self.closed):
            await self._drained.park()
        await trio.lowlevel.checkpoint()

    async def wait_overflowed(self) -> None:
        """Return once the outbox has overflowed (for a watchdog beside the consumer)."""
        await self._overflow.wait()

    def get_nowait(self) -> list[OutboxItem]:
        """Everything queued now (possibly nothing)."""
        items = list(self._items)
        self._items.clear()
        self._bytes = self._response_bytes = 0
        self.delivered += len(items)
        self._drained.unpark_all()
        return items

    async def get_batch(self) -> list[OutboxItem]:
        """Wait until something is queued, then take all of it.

        Returns an empty list when the outbox is closed or has overflowed; the
        caller checks :attr:`overflowed` / :attr:`closed` to tell which.
        """
        while not self._items and not self.overflowed and not self.closed:
            await self._lot.park()
        if self.overflowed or (self.closed and not self._items):
            await trio.lowlevel.checkpoint()
            return []
        await trio.lowlevel.checkpoint()
        return self.get_nowait()
