"""A connection's writer: drains its outbox into the WebSocket.

Why a module of its own: the writer is the last stage of every envelope's path
(publish -> outbox -> here -> socket) and holds the keystroke's last trick, the lone
echo's wait (``echo_pairing``, :mod:`ahp.keystroke`); :mod:`ahp.server.websocket`
runs it beside the connection's reader and watchdogs.

Buffering: everything taken in one batch goes out in one write: output coalesced into
few frames by the outbox, and an input echo queued just before the output it caused
shares its system call; frames are encoded as the write consumes them
(:func:`encoded`), so a batch is never held encoded at once. Overflow and stalls: the
writer's sends run in :attr:`ConnectionWriter.scope`, whose deadline
:meth:`~ConnectionWriter.watch_overflow` sets once the outbox overflows, and which
:meth:`~ConnectionWriter.watch_bound` cancels for a client that takes nothing while over
its bound (:mod:`ahp.server.websocket` says what the client then sees). Progress:
bytes that go out to a client whose socket was full count as its outbox's progress
(:meth:`Outbox.wrote <ahp.engine.outbox.Outbox.wrote>`), so a slow but steady reader
paces its terminal instead of being taken for a stalled one.
Cancellation: the caller's, through :attr:`~ConnectionWriter.scope` or its nursery.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterator
from typing import Final

import trio

from ahp.engine import Outbox
from ahp.engine.envelopes import Published
from ahp.engine.outbox import OutboxItem, PendingAnswer
from ahp.keystroke import ECHO_PAIR_WAIT, enabled
from ahp.server.session import Session
from ahp.server.wsconn import ServerWebSocket

__all__ = ["OVERFLOW_CLOSE", "POOL_DRAIN_TIME", "ConnectionWriter", "encoded"]

log = logging.getLogger("ahp.server")

#: The close reason sent to a client whose outbox overflowed.
OVERFLOW_CLOSE: Final = (1013, "outbound buffer full; reconnect to resume")
#: Seconds a connection may take to drain its share of the server's pool of answers, at
#: the pace it shows, while someone waits for room in the pool (``watch_bound``): one
#: that holds S bytes of answers must take at least S / POOL_DRAIN_TIME bytes a second
#: (4 MiB: 410 KiB/s), else it is closed (1013) and gives its share back. Uncontended,
#: a slow reader may take as long as it likes.
POOL_DRAIN_TIME: Final = 10.0


def encoded(
    batch: list[OutboxItem], project: Callable[[Published], bytes] | None = None
) -> Iterator[bytes | list[bytes]]:
    """The batch's frames, encoded one at a time as they are consumed; each item is
    dropped from ``batch`` when its frame is taken, so a merged envelope (and its
    cached frame) is freed once written, not when the whole batch is. ``project``
    encodes envelopes for a connection that speaks another dialect than the
    shared frame's (:attr:`Session.project <ahp.server.connection.Connection.project>`).
    An answer encoded in pieces is one frame given as its list of pieces."""
    batch.reverse()
    while batch:
        item = batch.pop()
        if isinstance(item, Published):
            yield item.frame if project is None else project(item)
        elif isinstance(item, PendingAnswer):
            yield item.pieces
        else:
            yield item if isinstance(item, bytes) else item.encode()


class ConnectionWriter:
    """Drains the outbox into the socket; see the module docstring for overflow.

    Everything taken in one batch goes out in one write: output coalesced into
    few frames, and an input echo queued just before the output it caused
    shares its system call.
    """

    def __init__(
        self, ws: ServerWebSocket, outbox: Outbox, session: Session, connection_id: str = ""
    ) -> None:
        self.ws = ws
        self.outbox = outbox
        self.session = session
        #: Every frame sent is logged here too (``serve --wire-log``), if set.
        self.wire = session.server.wire_log
        self.connection_id = connection_id
        self.scope = trio.CancelScope()
        #: Set when the writer ended because the client must be closed: (code, reason).
        self.close: tuple[int, str] | None = None
        #: The scope of the waits for the next batch (see _lone_echo and run).
        self._wait_scope: trio.CancelScope | None = None
        self._parked = False  # the writer waits in the outbox
        if enabled("echo_pairing"):
            outbox.on_lone_echo = self._lone_echo
        # A batch of several MiB to a client that reads slowly takes seconds to write:
        # the bytes it gets meanwhile keep it live for pacing (ahp.engine.hub).
        ws.on_progress = outbox.wrote

    def _lone_echo(self) -> None:
        """A keystroke's echo was queued alone, without waking this writer: its output
        follows a few scheduler passes later (input-write, the kernel's echo,
        pty-read, parse, reducer), and then both leave in one write, off the
        output's path (one system call and one wake-up of the client, not two). The
        wait ends :data:`ahp.keystroke.ECHO_PAIR_WAIT` seconds after the echo at the latest, for
        input that prints nothing."""
        scope = self._wait_scope
        if scope is not None and self._parked:
            scope.deadline = min(scope.deadline, trio.current_time() + ECHO_PAIR_WAIT)

    async def _next_batch(self, wait: trio.CancelScope) -> list[OutboxItem]:
        outbox = self.outbox
        if outbox.has_ready:
            # Items queued while the last write went out are taken without another
            # checkpoint (the writer's loop parks here when there is nothing).
            return outbox.get_nowait()
        self._parked = True
        try:
            return await outbox.get_batch()
        finally:
            self._parked = False
            if wait.deadline != math.inf:
                wait.deadline = math.inf  # (the output came first: no wait is running)

    async def run(self) -> None:
        """Write batch after batch until the session closes or the outbox overflows or
        closes. The lone echo's wait (:meth:`_lone_echo`) is the deadline of one
        cancel scope kept across batches and set only while the writer is parked; it
        is replaced only after a wait ran out (entering and leaving a scope per
        keystroke cost ~5 us a batch, issue 23). A wait that ran out as the writer
        woke leaves the scope before anything else is awaited in it, so a deadline
        never cancels a write."""
        outbox = self.outbox
        with self.scope:
            carried: list[OutboxItem] | None = None
            while True:
                with trio.CancelScope() as wait:
                    self._wait_scope = wait
                    while True:
                        batch = carried if carried is not None else await self._next_batch(wait)
                        carried = None
                        if wait.cancel_called:
                            carried = batch  # (written in the next scope)
                            break
                        if await self._write(batch):
                            return
                self._wait_scope = None
                if carried is None:
                    carried = outbox.get_nowait()  # a lone echo waited its time

    async def _write(self, batch: list[OutboxItem]) -> bool:
        """Send ``batch`` (empty: nothing was taken); whether the writer is done."""
        ws, outbox, session, wire = self.ws, self.outbox, self.session, self.wire
        took = bool(batch)
        if took:
            frames = encoded(batch, session.project)  # (empties the batch)
            if wire is not None:  # the only cost of the wire log when it is off
                frames = wire.tap(frames, self.connection_id)
            try:
                await ws.send_texts(frames)
            finally:
                outbox.sent()
        if session.close_request is not None and not len(outbox):
            self.close = session.close_request
            return True
        if not took:
            if outbox.overflowed:
                log.info("client %s too slow: closing with 1013", session.client_id)
                self.close = OVERFLOW_CLOSE
            if outbox.overflowed or outbox.closed:
                return True
            # (A lone echo's wait ended with an answer still being encoded
            # ahead of it: wait for the answer.)
        return False

    async def watch_overflow(self, grace: float) -> None:
        """Bound the writer once the outbox overflows (it may be blocked in a send)."""
        await self.outbox.wait_overflowed()
        self.scope.deadline = min(self.scope.deadline, trio.current_time() + grace)

    async def watch_bound(self, grace: float) -> None:
        """Close a client that takes nothing for ``grace`` seconds while the outbox
        accounts for more than its bound: answers (snapshots) queued or being written
        count too, not only the output backlog that overflows at once. Also while the
        server's pool of answers is over its limit and this connection holds some; and
        then, if someone waits for room in the pool (:attr:`ResponsePool.contended
        <ahp.engine.outbox.ResponsePool.contended>`), a client that takes bytes but too
        few to drain its share in :data:`POOL_DRAIN_TIME` at that pace: ten read-only
        viewers reading 4 MiB answers at 30 KB/s held every ``initialize``,
        ``subscribe`` and ``reconnect`` of the server waiting for minutes."""
        outbox, ws, pool = self.outbox, self.ws, self.outbox.pool
        while True:
            await outbox.wait_pressure()
            sent, takes, share = ws.bytes_sent, outbox.takes, outbox.response_bytes
            await trio.sleep(grace)
            if not outbox.under_pressure:
                continue
            drained = ws.bytes_sent - sent
            if not drained and outbox.takes == takes:
                why = "takes nothing"
            elif (
                pool is not None
                and share
                and drained * POOL_DRAIN_TIME < share * grace
                and outbox.response_bytes
                and pool.contended
            ):
                why = f"takes {drained / grace / 1024:.0f} KiB/s while the pool of answers is full"
            else:
                continue
            log.info(
                "client %s %s, %d bytes pending: closing with 1013",
                self.session.client_id,
                why,
                outbox.pending_bytes,
            )
            self.close = OVERFLOW_CLOSE
            self.scope.cancel()
            return
