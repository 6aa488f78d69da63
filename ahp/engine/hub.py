"""Sequencing and fan-out: the one place that assigns ``serverSeq``.

Why: AHP's ``serverSeq`` is global across every channel of a host, strictly
increasing, and a subscriber's snapshot ``fromSeq`` must split "already in the
state" from "still to apply". The hub owns the counter, the replay log and the
subscriber sets; publishing is synchronous (no checkpoint), so within one Trio
run "apply, sequence, log, fan out" is atomic with respect to subscribing.

Fan-out never blocks: each subscriber's :class:`~ahp.engine.outbox.Outbox` is
bounded and decides for itself (queue, or overflow). Encoding happens at most
once per envelope, lazily, when the first WebSocket writer asks for the frame.

Pacing (:meth:`Hub.pacer`): a client that reads, but more slowly than the pty
produces (or that hiccups for a few tens of milliseconds on a busy machine),
must not be cut off merely because output is fast. So the *fastest live*
subscriber paces the terminal's pty-read task: when every subscriber of a channel is
more than :data:`PACE_BYTES` behind (or half its bound, if smaller), the reader
waits (:meth:`Hub.wait_pacer`) for the least-behind *live* one — one that showed
progress within the last :data:`PACE_WINDOW` seconds: took a batch, or got bytes
of the batch it is writing out to its peer — to take its next batch: ordinary
flow control, as if that client were the only viewer. The wait lasts as long as
that subscriber stays live, however slowly it reads (a client doing real work
per output, such as ``ahp-terminals run`` rendering a flood, reads a few MB/s and
takes a multi-MiB batch about once a second: judged by its takes alone it was
"stalled", the pty ran free and the client was closed with 1013 mid-command). A
subscriber that shows no progress for ``PACE_WINDOW`` is not waited for (so a
stalled viewer delays the pty at most that long, once) and is cut off by its own
bound, as before; a slow viewer beside a faster one never slows the pty (the
faster one keeps up: no pacing). Outboxes created with ``paces=False``
(recorders) are not considered at all.

The flood rule (:meth:`Hub.wait_readers`) is the same idea for what clients
send: a client whose actions fill the outboxes of a channel's readers (an input
flood echoed to every viewer, actions carrying a large identity) waits before
its next frame is read, while a reader that keeps taking is more than
:data:`FLOOD_BYTES` behind. The sender pays; the reader is not cut off
(recorders, ``paces=False``, are not waited for either). But only for
:data:`FLOOD_PATIENCE` from when the reader went over, until it catches up: a
reader that stays behind longer (a read-only viewer taking 37 KB/s held a
full-access typist's connection, its Ctrl-C and dispose included, for 165 s after
an 8 MiB paste) is no longer waited for, and its own bound applies (past it, a
connection is closed with 1013 and may reconnect). A fast viewer briefly behind a
fast paste catches up within the patience, again and again, and is waited for.
"""

from __future__ import annotations

from typing import Final

import trio

from ahp.engine.envelopes import Published, ReplayLog
from ahp.engine.outbox import Outbox
from ahp.protocol.actions import ActionEnvelope, ActionOrigin, StateAction

__all__ = ["FLOOD_BYTES", "FLOOD_PATIENCE", "FLOOD_WINDOW", "PACE_BYTES", "PACE_WINDOW", "Hub"]

#: Backlog (bytes of memory) beyond which a subscriber counts as behind for pacing.
PACE_BYTES: Final = 2 * 1024 * 1024
#: A subscriber that showed no progress for this long (seconds: no batch taken, no
#: byte written to its peer) is not waited for.
PACE_WINDOW: Final = 0.5
#: Bytes a subscriber holds (queued, or taken and being written) beyond which it counts
#: as behind for the flood rule (or a quarter of its bound, if smaller): a client
#: dispatching to its channel then waits (:meth:`Hub.wait_readers`).
FLOOD_BYTES: Final = 2 * 1024 * 1024
#: A behind subscriber that showed progress (took a batch, finished writing one) within
#: this many seconds is waited for by the flood rule; one that did not is not (its own
#: bound cuts it off), so a stalled reader delays a sender at most this long, once.
FLOOD_WINDOW: Final = 2.0
#: Seconds a subscriber may stay behind (from when the flood rule first found it past
#: its flood bound, until what it holds falls back to that bound) and still be waited
#: for: a sender waits at most this long for a reader that does not catch up, however
#: steadily it reads; then the reader's own bound applies.
FLOOD_PATIENCE: Final = 2.0


class Hub:
    """Global sequencer, replay log and per-channel subscriber sets of one host."""

    def __init__(self, log: ReplayLog | None = None) -> None:
        self.seq = 0
        self.log = log if log is not None else ReplayLog()
        self._subscribers: dict[str, dict[Outbox, bool]] = {}
        #: Times a sender waited for readers under the flood rule (figures for tests).
        self.flood_waits = 0

    def next_seq(self) -> int:
        self.seq += 1
        return self.seq

    def publish(
        self, channel: str, action: StateAction, origin: ActionOrigin | None = None
    ) -> Published:
        """Sequence an applied action, log it and offer it to every subscriber of ``channel``."""
        item = Published(
            ActionEnvelope(channel=channel, action=action, serverSeq=self.next_seq(), origin=origin)
        )
        self.log.append(item)
        subscribers = self._subscribers.get(channel)
        if subscribers:
            for outbox in subscribers:
                outbox.put(item)
        return item

    def reject(
        self,
        outbox: Outbox | None,
        channel: str,
        action: StateAction,
        origin: ActionOrigin,
        reason: str,
    ) -> Published:
        """Echo a rejected client action to its sender only (consumes a seq, not logged)."""
        item = Published(
            ActionEnvelope(
                channel=channel,
                action=action,
                serverSeq=self.next_seq(),
                origin=origin,
                rejectionReason=reason,
            )
        )
        if outbox is not None:
            outbox.put(item)
        return item

    def send_to(self, outbox: Outbox | None, channel: str, action: StateAction) -> None:
        """A server action for one subscriber only (heals a mirror after a rejection).

        It carries the channel's *current* value, so applying it changes nothing
        for a client whose mirror was right; it is not logged.
        """
        if outbox is not None:
            outbox.put(
                Published(ActionEnvelope(channel=channel, action=action, serverSeq=self.next_seq()))
            )

    def pacer(self, channel: str) -> Outbox | None:
        """The subscriber the producer of ``channel`` should wait for, if any: the
        least-behind live one, when every subscriber is behind (see the module
        docstring). O(subscribers)."""
        subscribers = self._subscribers.get(channel)
        if not subscribers:
            return None
        now = trio.current_time()
        best: Outbox | None = None
        for outbox in subscribers:
            if outbox.overflowed or outbox.closed or not outbox.paces:
                continue
            backlog = outbox.backlog
            if backlog <= min(PACE_BYTES, outbox.max_bytes // 2):
                return None  # someone keeps up: no pacing
            if now - outbox.progress_at < PACE_WINDOW and (best is None or backlog < best.backlog):
                best = outbox
        return best

    async def wait_pacer(self, channel: str, pacer: Outbox) -> None:
        """Wait until ``pacer`` (what :meth:`pacer` returned for ``channel``) takes its
        next batch, for as long as it stays the channel's pacer: it shows progress
        at least every :data:`PACE_WINDOW` seconds and no subscriber keeps up. A
        pacer that stalls is waited for at most ``PACE_WINDOW``. Cancellation: a
        plain wait; nothing is lost."""
        while True:
            with trio.move_on_after(PACE_WINDOW) as window:
                await pacer.wait_taken()
            if not window.cancelled_caught or self.pacer(channel) is not pacer:
                return

    def flooded(self, channel: str) -> Outbox | None:
        """A subscriber of ``channel`` that is behind, reading, and behind for less than
        :data:`FLOOD_PATIENCE` (the flood rule: see :meth:`wait_readers`), or None.
        O(subscribers); the common case (nobody behind) reads no clock. Marks when a
        subscriber is first found behind (:attr:`Outbox.behind_since
        <ahp.engine.outbox.Outbox.behind_since>`; the outbox clears it once it
        catches up)."""
        subscribers = self._subscribers.get(channel)
        if not subscribers:
            return None
        now: float | None = None
        for outbox in subscribers:
            if outbox.overflowed or outbox.closed or not outbox.paces:
                continue
            limit = min(FLOOD_BYTES, outbox.max_bytes // 4)
            if outbox.pending_bytes <= limit:
                continue
            if now is None:
                now = trio.current_time()
            since = outbox.behind_since
            if since is None:
                outbox.behind_since, outbox.behind_limit = now, limit
            elif now - since >= FLOOD_PATIENCE:
                continue  # behind for too long: its own bound applies, not the sender's wait
            if now - outbox.progress_at < FLOOD_WINDOW:
                return outbox
        return None

    async def wait_readers(self, channel: str) -> None:
        """The flood rule: return once no subscriber of ``channel`` that keeps reading
        holds more than :data:`FLOOD_BYTES` (checkpoints at least once).

        A client's connection calls it after each action it dispatches, before it
        reads its next frame: what its actions cost the channel's readers (every byte
        of the envelopes they are sent: payload, channel, origin) is paid by the
        sender, who waits, not by a reader who keeps up, who would otherwise be cut
        off by its own bound. A reader that makes no progress for
        :data:`FLOOD_WINDOW` seconds is not waited for, nor one behind for
        :data:`FLOOD_PATIENCE` (until it catches up): a sender waits at most that
        long for a reader that does not catch up. Cancellation: a plain wait.
        """
        while (behind := self.flooded(channel)) is not None:
            self.flood_waits += 1
            deadline = trio.current_time() + FLOOD_WINDOW
            if behind.behind_since is not None:
                deadline = min(deadline, behind.behind_since + FLOOD_PATIENCE)
            with trio.move_on_at(deadline):
                await behind.wait_taken()
        await trio.lowlevel.checkpoint()

    def subscribe(self, channel: str, outbox: Outbox, *, exclusive: bool = False) -> None:
        """Register ``outbox`` for ``channel``; ``exclusive`` outboxes close when it drops."""
        self._subscribers.setdefault(channel, {})[outbox] = exclusive

    def unsubscribe(self, channel: str, outbox: Outbox) -> None:
        subscribers = self._subscribers.get(channel)
        if subscribers is not None:
            subscribers.pop(outbox, None)
            if not subscribers:
                del self._subscribers[channel]

    def subscribers(self, channel: str) -> list[Outbox]:
        return list(self._subscribers.get(channel, ()))

    def drop_channel(self, channel: str) -> None:
        """The channel is gone: no envelope for it will follow; close exclusive outboxes."""
        for outbox, exclusive in self._subscribers.pop(channel, {}).items():
            if exclusive:
                outbox.close()
