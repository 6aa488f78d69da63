"""In-process subscriptions: a snapshot, then every later envelope, in order.

Why a separate type from the WebSocket connection: a library user iterates
``async for item in term.subscribe()`` and wants state, not frames. The first
item is always a :class:`~ahp.protocol.Snapshot`; after it come
:class:`~ahp.protocol.ActionEnvelope` values with strictly increasing
``serverSeq``, each as it was published (the same objects every subscriber
gets: the outbox is drained without coalescing, so a consumer that falls
behind costs no copies). If the consumer falls further behind than its bound, it
receives a fresh :class:`Snapshot` (a resynchronisation) instead of the missing
envelopes — never a silent gap. The iteration ends when the channel goes away
(the terminal is disposed or the host closes).

Ownership: the subscription registers an :class:`Outbox` with the channel
source and unregisters it on exit (``aclose``, ``break``, cancellation).
"""

from __future__ import annotations

from collections import deque
from collections.abc import AsyncIterator, Callable
from types import TracebackType

from ahp.engine.envelopes import Published
from ahp.engine.outbox import DEFAULT_OUTBOX_BYTES, Outbox
from ahp.protocol.actions import ActionEnvelope
from ahp.protocol.state import Snapshot

__all__ = ["Subscription"]

SubscriptionItem = Snapshot | ActionEnvelope


class Subscription:
    """Async iterator of :data:`SubscriptionItem`; use as ``async with``/``async for``.

    Args:
        attach: registers an outbox and returns the snapshot it starts after
            (called again on resynchronisation).
        detach: unregisters the outbox.
        paces: whether this consumer may pace the producer (see
            :attr:`Outbox.paces <ahp.engine.outbox.Outbox.paces>`).
    """

    def __init__(
        self,
        attach: Callable[[Outbox], Snapshot | None],
        detach: Callable[[Outbox], None],
        *,
        max_bytes: int = DEFAULT_OUTBOX_BYTES,
        paces: bool = True,
    ) -> None:
        self._attach = attach
        self._detach = detach
        self.outbox = Outbox(max_bytes=max_bytes, paces=paces)
        self._ready: deque[SubscriptionItem] = deque()
        self.resyncs = 0
        snapshot = attach(self.outbox)
        if snapshot is None:
            self.outbox.close()
        else:
            self._ready.append(snapshot)

    def __aiter__(self) -> AsyncIterator[SubscriptionItem]:
        return self

    async def __anext__(self) -> SubscriptionItem:
        while not self._ready:
            batch = await self.outbox.get_batch(coalesce=False)
            if batch:
                for item in batch:
                    if isinstance(item, Published):
                        self._ready.append(item.envelope)
                continue
            if self.outbox.overflowed:
                self._detach(self.outbox)
                self.outbox.reset()
                self.resyncs += 1
                snapshot = self._attach(self.outbox)
                if snapshot is None:
                    raise StopAsyncIteration
                self._ready.append(snapshot)
                continue
            raise StopAsyncIteration
        return self._ready.popleft()

    async def aclose(self) -> None:
        self._detach(self.outbox)
        self.outbox.close()

    async def __aenter__(self) -> Subscription:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()
