"""A subscriber's bounded outbound queue, with coalescing and an overflow verdict.

Why: one subscriber that stops reading must never block the terminal, the pty or
any other subscriber, and must never be left silently with a gap. Publishers
call :meth:`Outbox.put` (synchronous, never blocks, O(1): an append — no copy,
however far behind the consumer is). When the queued bytes pass ``max_bytes``
the outbox *overflows*: it drops its queue, stops accepting items and wakes the
consumer, which must then recover — the in-process subscription takes a fresh
snapshot, a WebSocket connection is closed with 1013 so that its client
reconnects (replay or snapshot).

Sizes are memory (:attr:`Published.size <ahp.engine.envelopes.Published.size>`,
``sys.getsizeof`` for ``str`` items), not characters: a string with one
character outside the BMP holds 4 bytes per character.

Coalescing happens when the consumer takes a batch, not when items are queued:
:meth:`get_batch` / :meth:`get_nowait` (``coalesce=True``, what a WebSocket
writer wants: fewer, larger frames) join each run of consecutive
``terminal/data`` envelopes of one channel into one envelope (one
``"".join``, runs capped at :data:`~ahp.engine.envelopes.MERGE_LIMIT`
characters, carrying the run's last ``serverSeq``; an envelope of
:data:`~ahp.engine.envelopes.MERGE_ALONE` characters or more goes as it is, its
frame shared with every subscriber). A run is never extended
past an item of another kind or channel, so delivered ``serverSeq`` values stay
strictly increasing. In-process subscribers take envelopes as published
(``coalesce=False``: zero copies, the same objects every subscriber gets).
Merging while queueing (the old rule) copied the whole tail on every put:
quadratic in the backlog.

Latest wins: an envelope that replaces its channel's whole value (the root
catalogue, :attr:`Published.latest_wins <ahp.engine.envelopes.Published>`)
supersedes one of the same channel still queued: the older one stops counting
towards the bound at once and is left out when the consumer takes its batch. A
title storm in one terminal thus costs a slow root subscriber one catalogue,
not one per change. (The root channel's state is exactly its latest catalogue,
so dropping the older ones loses nothing; ``serverSeq`` stays increasing.)

Pacing: :attr:`Outbox.taken_at` records when the consumer last took a batch,
:attr:`Outbox.progress_at` when it last showed any progress (a take, a batch
written, or part of one written to a peer that reads slowly: :meth:`Outbox.wrote`),
and :meth:`Outbox.wait_taken` waits for the next take; the terminal's reader
uses them to let the fastest live subscriber pace the pty (see
:meth:`ahp.engine.hub.Hub.pacer`). A WebSocket writer takes everything queued at
once, so a client that reads steadily but slowly takes rarely (one batch of a few
MiB every second or more): its socket's progress, not its takes, says it is live.
An outbox created with ``paces=False`` (a recorder: a slow disk must never slow the
terminal) is left out of that choice; it falls behind and resynchronises instead.

Responses (``str`` or ``bytes`` items: answers to the consumer's own requests, such as a
snapshot) do not trigger the immediate overflow verdict: one snapshot of a
terminal full of escape sequences can be larger than the bound by itself, and it
is no backlog. They count in :attr:`Outbox.pending_bytes` though, together with
what a consumer created with ``track_in_flight=True`` (a WebSocket writer) took
and has not finished writing (:meth:`Outbox.sent`); while that total is over the
bound, :meth:`Outbox.wait_over_bound` returns, and the connection closes a
client that takes nothing for its grace period, or, while someone waits for room in
the server's pool, one that drains its share too slowly (see
:mod:`ahp.server.websocket`). The requester also waits
(:meth:`Outbox.wait_responses_below`, responses queued or being written) before
handling the next request.

Answers encoded in pieces (:class:`PendingAnswer`, issue 25): an answer too big to
encode in one step is queued as a placeholder in the same synchronous step as the
registration it answers, so it keeps its place; its producer then encodes it in
pieces (:func:`encode_answer`, other tasks running in between) into the
placeholder. Until the placeholder is complete, the consumer takes only what was
queued before it: envelopes published meanwhile wait behind it (and count towards
the bound as usual), so none overtakes the answer and none is lost. One answer is
encoded at a time per server (:attr:`ResponsePool.encoding`), so the pool's bound
holds as it did when every answer was one step. A placeholder dropped with the
queue (overflow, reset, close) stops its encoding.

Ownership: created and consumed by one subscriber task; fed by any publisher in
the same Trio run. Cancellation: :meth:`get_batch` is a plain checkpointed wait.
"""

from __future__ import annotations

import sys
from collections import deque
from collections.abc import Callable
from typing import Any, Final

import trio

from ahp.engine.envelopes import MERGE_LIMIT, Published
from ahp.protocol.actions import TerminalInput
from ahp.protocol.chunked import PIECE_WEIGHT, encode_pieces
from ahp.protocol.codec import shrink_to_fit

__all__ = [
    "DEFAULT_OUTBOX_BYTES",
    "WRITE_PIECE",
    "Outbox",
    "OutboxItem",
    "PendingAnswer",
    "ResponsePool",
    "coalesce_runs",
    "encode_answer",
]

#: Default bound on queued bytes (memory) per subscriber.
DEFAULT_OUTBOX_BYTES: Final = 4 * 1024 * 1024
#: Small pieces of an answer encoded in pieces are gathered into buffers of about this
#: many bytes (what the writer hands the socket; bigger pieces stay as they are).
WRITE_PIECE: Final = 64 * 1024


class PendingAnswer:
    """One text frame whose bytes are still being encoded (see the module docstring).

    :attr:`pieces` joined are the frame's UTF-8 payload once :attr:`ready`;
    :attr:`dropped` when the outbox let go of it (its encoding stops). Created by
    :meth:`Outbox.hold`, filled only through :meth:`Outbox.grow` and
    :meth:`Outbox.complete`.
    """

    __slots__ = ("dropped", "pieces", "ready", "size")

    def __init__(self) -> None:
        self.pieces: list[bytes] = []
        self.size = 0
        self.ready = False
        self.dropped = False


#: Items that are not envelopes (responses, snapshots) are queued as text frames: ``str``,
#: ``bytes`` already encoded as UTF-8, or an answer encoded in pieces.
OutboxItem = Published | str | bytes | PendingAnswer


def _response_size(item: str | bytes | PendingAnswer) -> int:
    return item.size if isinstance(item, PendingAnswer) else sys.getsizeof(item)


class ResponsePool:
    """Bytes of responses queued or being written by every outbox of a server together
    (issue 25: 8 silent clients each holding a 15 MB snapshot held 284 MB).

    While the total is over ``limit``: requesters wait before their next request
    (:meth:`wait_room`), and every outbox that holds responses counts as over its
    bound (:meth:`Outbox.wait_pressure`), so a connection that takes nothing for
    its grace period is closed and gives its share back; while someone waits for room
    (:attr:`contended`), so is one that drains its share too slowly
    (:meth:`ahp.server.writer.ConnectionWriter.watch_bound`). Owned by the server; fed
    by the outboxes created with it. One Trio run.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.held = 0
        self._room = trio.lowlevel.ParkingLot()
        #: Where every member outbox's watchdog waits (woken when the pool goes over).
        self.pressure = trio.lowlevel.ParkingLot()
        #: Held while an answer is encoded in pieces: one at a time, as when every
        #: answer was one step (:func:`encode_answer`).
        self.encoding = trio.Lock()

    @property
    def over(self) -> bool:
        return self.held > self.limit

    @property
    def contended(self) -> bool:
        """Over the limit with someone waiting for room (a request, an answer's encoding)."""
        return self.held > self.limit and bool(self._room)

    def add(self, size: int) -> None:
        self.held += size
        if self.held > self.limit and self.pressure:
            self.pressure.unpark_all()

    def release(self, size: int) -> None:
        if size:
            self.held -= size
            if self._room and self.held <= self.limit:
                self._room.unpark_all()

    async def wait_room(self) -> None:
        """Wait while the pool is over its limit (not a checkpoint when it is not)."""
        while self.held > self.limit:
            await self._room.park()


def coalesce_runs(items: list[OutboxItem], limit: int = MERGE_LIMIT) -> list[OutboxItem]:
    """``items`` with each run of consecutive mergeable envelopes of one channel
    joined into one, a run ending before its text would pass ``limit`` characters.

    Items that are not merged are returned as they are (their cached frames are
    shared with every other subscriber); ``items`` itself when no two neighbours could
    merge (a keystroke's echo and its output: the common take on the echo's path).
    """
    previous = False
    for item in items:
        current = isinstance(item, Published) and item.mergeable()
        if current and previous:
            break
        previous = current
    else:
        return items
    out: list[OutboxItem] = []
    run: list[Published] = []
    run_size = 0

    def flush() -> None:
        if len(run) == 1:
            out.append(run[0])
        elif run:
            out.append(Published.merge(run))
        run.clear()

    for item in items:
        if isinstance(item, Published) and item.mergeable():
            chars = len(item.envelope.action.data)  # type: ignore[union-attr]
            if run and (item.channel != run[0].channel or run_size + chars > limit):
                flush()
            if not run:
                run_size = 0
            run.append(item)
            run_size += chars
            continue
        flush()
        out.append(item)
    flush()
    return out


def _now() -> float:
    try:
        return trio.current_time()
    except RuntimeError:  # not in a Trio run (a synchronous test): no pacing to inform
        return float("-inf")


def _is_input_echo(item: Published) -> bool:
    """A client's accepted ``terminal/input``, echoed back (``origin`` set)."""
    envelope = item.envelope
    return (
        envelope.origin is not None
        and envelope.rejectionReason is None
        and envelope.action.__class__ is TerminalInput
    )


class Outbox:
    """Bounded queue of :data:`OutboxItem`; see the module docstring."""

    def __init__(
        self,
        *,
        max_bytes: int = DEFAULT_OUTBOX_BYTES,
        track_in_flight: bool = False,
        paces: bool = True,
        pool: ResponsePool | None = None,
    ) -> None:
        self.max_bytes = max_bytes
        #: The server's pool of responses this outbox's responses count in (if any).
        self.pool = pool
        #: Whether this consumer may pace the producer (:meth:`ahp.engine.hub.Hub.pacer`);
        #: False for one that must never slow the pty, such as a recorder writing to disk.
        self.paces = paces
        #: Whether what the consumer took counts until it calls :meth:`sent`.
        self.track_in_flight = track_in_flight
        self._in_flight = 0  # bytes taken and not yet sent (all kinds)
        self._in_flight_responses = 0  # of which responses
        self._over_lot = pool.pressure if pool is not None else trio.lowlevel.ParkingLot()
        #: Batches taken (a consumer's progress, for watchdogs).
        self.takes = 0
        self._items: deque[OutboxItem] = deque()
        #: Queued answers still being encoded, in queue order: nothing from the first
        #: one on is taken until it is complete.
        self._held: deque[PendingAnswer] = deque()
        self._bytes = 0  # envelopes (the backlog that can overflow)
        self._response_bytes = 0  # str items
        #: The newest queued latest-wins envelope per channel, and how many older ones
        #: it superseded (left out at the next take).
        self._latest: dict[str, Published] = {}
        self._superseded = 0
        self._lot = trio.lowlevel.ParkingLot()
        self._drained = trio.lowlevel.ParkingLot()
        self.overflowed = False
        self._overflow = trio.Event()
        self.closed = False
        #: When the consumer last took a batch (``trio.current_time()``; -inf: never).
        self.taken_at = float("-inf")
        #: When the consumer last showed progress: took a batch, or finished writing one
        #: (:meth:`sent`); the flood rule waits only for consumers that do
        #: (:meth:`ahp.engine.hub.Hub.flooded`).
        self.progress_at = float("-inf")
        #: When the flood rule first found this consumer behind (None: not behind since
        #: it last caught up), and the bound it was behind on: set by
        #: :meth:`ahp.engine.hub.Hub.flooded`, cleared here when what it holds falls to
        #: that bound (a batch finished writing, or taken).
        self.behind_since: float | None = None
        self.behind_limit = 0
        #: Counters for tests and figures.
        self.merged = 0
        self.delivered = 0
        #: Items queued behind an answer still being encoded (they waited for it).
        self.queued_behind = 0
        #: A consumer's hook for a lone keystroke echo (see :meth:`put`): called
        #: instead of waking the consumer while only such echoes are queued.
        self.on_lone_echo: Callable[[], None] | None = None
        self._echoes_only = True  # everything queued is a client's input echo

    @property
    def queued_bytes(self) -> int:
        return self._bytes + self._response_bytes

    @property
    def pending_bytes(self) -> int:
        """Everything this outbox accounts for: queued envelopes and responses, and
        what the consumer took and is still writing (``track_in_flight``)."""
        return self._bytes + self._response_bytes + self._in_flight

    @property
    def over_bound(self) -> bool:
        return self.pending_bytes > self.max_bytes

    @property
    def under_pressure(self) -> bool:
        """Over the bound, or holding responses while the server's pool is over its own."""
        pool = self.pool
        return self.over_bound or (
            pool is not None
            and pool.held > pool.limit
            and self._response_bytes + self._in_flight_responses > 0
        )

    @property
    def response_bytes(self) -> int:
        """Bytes of responses queued or being written: this outbox's share of its pool."""
        return self._response_bytes + self._in_flight_responses

    @property
    def backlog(self) -> int:
        """Bytes of queued envelopes (what can overflow; responses excluded)."""
        return self._bytes

    def __len__(self) -> int:
        return len(self._items)

    @property
    def holding(self) -> bool:
        """An answer is being encoded in pieces (what is queued behind it waits)."""
        return bool(self._held)

    @property
    def has_ready(self) -> bool:
        """Whether the consumer can take something now (queued items, and not only an
        answer still being encoded and what waits behind it)."""
        items = self._items
        return bool(items) and not (self._held and items[0] is self._held[0])

    def put(self, item: OutboxItem) -> bool:
        """Queue ``item``; returns False when the outbox has overflowed or closed."""
        if self.overflowed or self.closed:
            return False
        self._items.append(item)
        if self._held:
            self.queued_behind += 1
        if not isinstance(item, Published):
            if isinstance(item, PendingAnswer) and not item.ready:
                self._held.append(item)
            size = _response_size(item)
            self._response_bytes += size
            if self.pool is not None:
                self.pool.add(size)
            if self._over_lot and self.over_bound:
                self._over_lot.unpark_all()
        else:
            if item.latest_wins:
                older = self._latest.get(item.channel)
                if older is not None:
                    self._bytes -= older.size
                    self._superseded += 1
                    self.merged += 1
                self._latest[item.channel] = item
            self._bytes += item.size
            if self._bytes > self.max_bytes:
                self._overflow_now()
                return False
            if self._echoes_only and self.on_lone_echo is not None and _is_input_echo(item):
                # The output this keystroke causes follows shortly: the consumer may
                # let the echo wait for it (one write for both, no wake-up now).
                self.on_lone_echo()
                return True
        self._echoes_only = False
        if self._lot:  # (an empty lot's unpark_all costs ~0.6 us; these run per keystroke)
            self._lot.unpark_all()
        return True

    # -- answers encoded in pieces ------------------------------------------------------------

    def hold(self) -> PendingAnswer:
        """Queue a placeholder for an answer about to be encoded in pieces (it is
        :attr:`~PendingAnswer.dropped` at once if the outbox overflowed or closed)."""
        pending = PendingAnswer()
        if not self.put(pending):
            pending.dropped = True
        return pending

    def grow(self, pending: PendingAnswer, piece: bytes) -> bool:
        """Add ``piece`` to a held answer (it counts as a queued response from now on);
        False when the outbox let go of the answer (stop encoding it)."""
        if pending.dropped:
            return False
        size = len(piece)
        pending.pieces.append(piece)
        pending.size += size
        self._response_bytes += size
        if self.pool is not None:
            self.pool.add(size)
        if self._over_lot and self.over_bound:
            self._over_lot.unpark_all()
        return True

    def complete(self, pending: PendingAnswer) -> None:
        """The held answer is whole: it, and what waits behind it, may be taken."""
        if pending.dropped or pending.ready:
            return
        pending.ready = True
        head = self._held[0] is pending
        self._held.remove(pending)
        if head:
            self._lot.unpark_all()

    def replace(self, pending: PendingAnswer, payload: bytes) -> None:
        """Give a held answer ``payload`` instead of what was encoded so far (its
        encoding failed: an error answer takes its place), and complete it."""
        if pending.dropped or pending.ready:
            return
        self._response_bytes -= pending.size
        self._release_pool(pending.size)
        pending.pieces, pending.size = [], 0
        self.grow(pending, payload)
        self.complete(pending)

    def _drop_held(self) -> None:
        for pending in self._held:
            pending.dropped = True
        self._held.clear()

    def _forget_latest(self) -> None:
        if self._latest:
            self._latest.clear()
        self._superseded = 0

    def _overflow_now(self) -> None:
        self.overflowed = True
        self._overflow.set()
        self._items.clear()
        self._drop_held()
        self._echoes_only = True
        self._forget_latest()
        self._release_pool(self._response_bytes)
        self._bytes = self._response_bytes = 0
        self._lot.unpark_all()
        self._drained.unpark_all()

    def _release_pool(self, size: int) -> None:
        if self.pool is not None:
            self.pool.release(size)

    def close(self) -> None:
        """No more items; a waiting consumer wakes and sees an empty batch (the
        responses it will never deliver leave the server's pool)."""
        if not self.closed:
            if self._held:
                # An answer never completed: it, and what waited behind it, never go.
                first = self._held[0]
                while self._items and self._items.pop() is not first:
                    pass
                self._drop_held()
            self._release_pool(self._response_bytes + self._in_flight_responses)
            self._response_bytes = self._in_flight_responses = 0
        self.closed = True
        self._lot.unpark_all()
        self._drained.unpark_all()

    def discard(self) -> None:
        """Close, and drop everything still queued: the consumer is gone (a closed
        connection), so what it never took is freed now, not when the last reference
        to the outbox goes."""
        self.close()
        self._items.clear()
        self._drop_held()
        self._forget_latest()
        self._bytes = self._response_bytes = self._in_flight = 0

    def reset(self) -> None:
        """Clear the overflow verdict (after the consumer has resynchronised)."""
        self.overflowed = False
        self._overflow = trio.Event()
        self._items.clear()
        self._drop_held()
        self._echoes_only = True
        self._forget_latest()
        self._release_pool(self._response_bytes)
        self._bytes = self._response_bytes = 0
        self.behind_since = None
        self._drained.unpark_all()

    async def wait_responses_below(self, limit: int) -> None:
        """Wait while more than ``limit`` bytes of responses are queued or being written
        (the producer of responses calls this before handling the next request)."""
        while self._response_bytes + self._in_flight_responses > limit and not (
            self.overflowed or self.closed
        ):
            await self._drained.park()
        await trio.lowlevel.checkpoint()

    async def wait_over_bound(self) -> None:
        """Return once :attr:`pending_bytes` is over the bound (at once if it is now)."""
        while not self.over_bound:
            await self._over_lot.park()
        await trio.lowlevel.checkpoint()

    async def wait_pressure(self) -> None:
        """Return once :attr:`under_pressure` (at once if it is now)."""
        while not self.under_pressure:
            await self._over_lot.park()
        await trio.lowlevel.checkpoint()

    def wrote(self) -> None:
        """Part of what the consumer took went out (its peer reads, however slowly):
        progress, for pacing and the flood rule. Wakes nobody (a take does)."""
        self.progress_at = _now()

    def sent(self) -> None:
        """The consumer finished writing (or gave up on) what it took last."""
        if self._in_flight:
            self._release_pool(self._in_flight_responses)
            self._in_flight = self._in_flight_responses = 0
            self.progress_at = _now()
            if self.behind_since is not None:
                self._caught_up()
            if self._drained:
                self._drained.unpark_all()

    def _caught_up(self) -> None:
        """Not behind any more if what it holds fell to the bound it was behind on."""
        if self._bytes + self._response_bytes + self._in_flight <= self.behind_limit:
            self.behind_since = None

    async def wait_taken(self) -> None:
        """Wait until the consumer takes a batch or finishes writing one (or the outbox
        overflows, closes or resets)."""
        if self.overflowed or self.closed:
            await trio.lowlevel.checkpoint()
            return
        await self._drained.park()

    async def wait_overflowed(self) -> None:
        """Return once the outbox has overflowed (for a watchdog beside the consumer)."""
        await self._overflow.wait()

    def get_nowait(self, *, coalesce: bool = True) -> list[OutboxItem]:
        """Everything queued now that may be taken (possibly nothing: not an answer
        still being encoded, nor what waits behind it); see the module docstring for
        ``coalesce``."""
        if self._held:
            items, envelopes, responses = self._take_before_held()
        else:
            items = list(self._items)
            self._items.clear()
            self._echoes_only = True
            if self._latest:
                if self._superseded:
                    latest = self._latest
                    items = [
                        item
                        for item in items
                        if not isinstance(item, Published)
                        or not item.latest_wins
                        or latest.get(item.channel) is item
                    ]
                self._forget_latest()
            envelopes, responses = self._bytes, self._response_bytes
        self._bytes -= envelopes
        self._response_bytes -= responses
        if self.track_in_flight:
            self._in_flight += envelopes + responses
            self._in_flight_responses += responses
            if self._over_lot and self.over_bound:
                self._over_lot.unpark_all()
        else:
            self._release_pool(responses)
            if self.behind_since is not None:
                self._caught_up()
        self.takes += 1
        self.taken_at = self.progress_at = _now()
        if self._drained:
            self._drained.unpark_all()
        if coalesce and len(items) > 1:
            queued = len(items)
            items = coalesce_runs(items)
            self.merged += queued - len(items)
        self.delivered += len(items)
        return items

    def _take_before_held(self) -> tuple[list[OutboxItem], int, int]:
        """The items queued before the first held answer, and their envelope and
        response bytes (superseded latest-wins envelopes left out: they stopped
        counting when they were superseded)."""
        queue, head, latest = self._items, self._held[0], self._latest
        items: list[OutboxItem] = []
        envelopes = responses = 0
        while queue[0] is not head:
            item = queue.popleft()
            if isinstance(item, Published):
                if item.latest_wins:
                    if latest.get(item.channel) is not item:
                        self._superseded -= 1
                        continue
                    del latest[item.channel]
                envelopes += item.size
            else:
                responses += _response_size(item)
            items.append(item)
        self._echoes_only = False
        return items, envelopes, responses

    async def get_batch(self, *, coalesce: bool = True) -> list[OutboxItem]:
        """Wait until something is queued, then take all of it.

        Returns an empty list when the outbox is closed or has overflowed; the
        caller checks :attr:`overflowed` / :attr:`closed` to tell which.
        """
        if not self.has_ready and not self.overflowed and not self.closed:
            # Parking is the checkpoint: once woken, take the batch at once (a second
            # checkpoint here would delay every keystroke echo by a scheduler pass).
            while not self.has_ready and not self.overflowed and not self.closed:
                await self._lot.park()
        else:
            await trio.lowlevel.checkpoint()
        if self.overflowed or (self.closed and not self.has_ready):
            return []
        return self.get_nowait(coalesce=coalesce)


#: Answers whose :func:`~ahp.protocol.chunked.weight` passes this are encoded in pieces
#: (:func:`encode_answer`); lighter ones in one ``orjson.dumps`` (a few milliseconds at
#: most: 16 x :data:`~ahp.protocol.chunked.PIECE_WEIGHT`, ~1 MB of text).
CHUNKED_WEIGHT: Final = 16 * PIECE_WEIGHT


async def encode_answer(outbox: Outbox, pending: PendingAnswer, value: Any) -> None:
    """Encode ``value`` (JSON-ready data) into ``pending`` in pieces, letting other tasks
    run between them, then complete it; one answer at a time per server pool, and
    only while the pool has room (:meth:`ResponsePool.wait_room`).

    Buffering: small pieces are gathered into buffers of about :data:`WRITE_PIECE`
    bytes; everything encoded counts in the outbox (and the pool) as it grows. If the
    encoding fails (a value ``orjson`` refuses), the exception propagates and the
    answer stays held: the caller gives it an error answer (:meth:`Outbox.replace`).
    If the outbox lets go of the answer (overflow, close), the encoding stops.
    Cancellation: a cancelled encoding leaves the placeholder incomplete, holding what
    waits behind it, until :meth:`Outbox.close` drops both (the connection is going).
    """
    pool = outbox.pool
    lock = pool.encoding if pool is not None else None
    if lock is not None:
        await lock.acquire()
    try:
        if pool is not None:
            # (Its turn may come long after its request waited for room: the answers
            # encoded meanwhile may have filled the pool again.)
            await pool.wait_room()
        buffer: list[bytes] = []
        gathered = 0
        for piece in encode_pieces(value):
            if len(piece) < WRITE_PIECE:
                buffer.append(piece)
                gathered += len(piece)
                if gathered < WRITE_PIECE:
                    continue
                out = _joined(buffer)
                buffer, gathered = [], 0
            else:
                out = shrink_to_fit(piece)  # (kept until written: its length is what it costs)
                if buffer:
                    if not outbox.grow(pending, _joined(buffer)):
                        return
                    buffer, gathered = [], 0
            if not outbox.grow(pending, out):
                return
            await trio.lowlevel.checkpoint()
        if buffer and not outbox.grow(pending, _joined(buffer)):
            return
        outbox.complete(pending)
    finally:
        if lock is not None:
            lock.release()


def _joined(pieces: list[bytes]) -> bytes:
    """``pieces`` in one object of its own length (a join of one piece is that piece,
    which may be an ``orjson`` buffer: :func:`~ahp.protocol.codec.shrink_to_fit`)."""
    return shrink_to_fit(pieces[0]) if len(pieces) == 1 else b"".join(pieces)
