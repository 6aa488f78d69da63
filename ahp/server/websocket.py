"""The server's WebSocket transport: listen, authenticate the upgrade, move frames.

Why separate from the protocol: every AHP rule lives in
:mod:`ahp.server.session`; this module only moves frames, over the wsproto
connections of :mod:`ahp.server.wsconn` (why not trio-websocket's server: see
there).

Per connection there are two tasks (and two watchdogs): a reader that receives messages and hands
each to the session inline (it keeps reading, so pings and closes are answered
even when the client sends nothing else) and a writer that drains the
connection's bounded :class:`~ahp.engine.Outbox`, coalescing consecutive output
and sending everything it took in one write (:mod:`ahp.server.writer`). Publishers never wait for a
socket. When the outbox overflows (the client stopped reading), the connection
is closed at once, and the client's record is kept, so it can ``reconnect``: the
writer's sends run in a cancel scope whose deadline is set ``stall_grace``
seconds (default 1) after the overflow, which bounds both the write in flight
and the close handshake. If the write in flight gets out in time, the client
gets a close frame with code 1013; if the socket stays full (the client reads
nothing at all), the send is cancelled half-way through a frame, after which no
close frame can be framed correctly, so the TCP stream is closed without one
(the client sees 1006 after the last complete frame).

Answers count too: ``initialize``, ``reconnect`` and ``subscribe`` put whole
snapshots on the outbox, which do not overflow it at once (one snapshot may be
larger than the bound and is no backlog), but they, and everything the writer
took and has not finished writing, count towards the bound
(:attr:`Outbox.pending_bytes <ahp.engine.outbox.Outbox.pending_bytes>`). While
that total is over the bound, a watchdog closes the connection (1013, or 1006 as
above) when the client took nothing — not a byte written, not a batch taken —
for ``stall_grace`` seconds; a client that reads a large answer slowly keeps
making progress and stays. So a silent client can pin at most about one bound
plus one answer, and only for the grace period. Slow readers stay only while
nobody waits for room in the server's pool of answers: then one that would take
longer than :data:`~ahp.server.writer.POOL_DRAIN_TIME` to drain its share at its
pace is closed too (:meth:`~ahp.server.writer.ConnectionWriter.watch_bound`). A failure inside one
connection is logged and closes that connection (1011), never the server. Only
the connection's ``finally`` closes it (the reader may be inside a receive).

The upgrade is refused with HTTP 403 before any protocol work when the token is
missing or wrong (compared in constant time), when the request carries an
``Origin`` that is not allow-listed (cross-site WebSocket hijacking), or when
the server is bound to loopback and ``Host`` names something else (DNS
rebinding): the checks are :mod:`ahp.server.gate`'s; a malformed one gets 400
(:func:`~ahp.server.upgrade.read_upgrade`). A request without an upgrade is answered
by :mod:`ahp.server.plain`.
The token is never logged. Until authenticated, a connection is one of at most
``max_pending`` and has one deadline for the whole phase (a plain request's reading
and answering too; its answer is sent after the phase, for as long as the client keeps
taking it, :mod:`ahp.server.download`'s progress rule, one of at most
``max_plain_sends``, else within the phase); the accept loop backs off when out of
fds, and lines about unauthenticated peers are rate-limited
(:mod:`ahp.server.admission`). A plain request refused for its token or its Host is
logged and audited like a refused upgrade.

An inbound frame of :data:`LARGE_FRAME` or more is cost-checked and decoded in two
steps (each takes tens of milliseconds at 8 MiB), one large frame of any connection
at a time, each step followed by a pause as long as it took
(:meth:`~ahp.server.inbound.InboundBudget.paced`), the frame counted in the inbound
budget while it waits; the reader drops it before receiving the next. When a part
of a message would pass that budget, the connections that rank above its sender
(read-only ones, then the one holding the most) give way, closed with 1013
(:class:`~ahp.server.inbound.InboundBudget`).
"""

from __future__ import annotations

import contextlib
import logging
import math
import sys
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, Final
from urllib.parse import urlsplit

import trio

from ahp.engine import Outbox
from ahp.record.audit import QUOTA, AuditLog
from ahp.server.admission import (
    BudgetTicket,
    ConnectionBudget,
    PendingConnections,
    PlainSends,
    RateLimitedLog,
    connection_limit,
    pending_limit,
    plain_send_limit,
    serve_listener,
)
from ahp.server.config import MAX_MESSAGE_SIZE, OUTBOX_BYTES, ServerConfig
from ahp.server.connection import REPLACED_CLOSE
from ahp.server.drain import GOING_AWAY
from ahp.server.gate import AUDIT_REASON, admit_upgrade, answer_protocol
from ahp.server.http import PlainRequest
from ahp.server.inbound import InboundBudget
from ahp.server.plain import PlainAnswer, answer_plain
from ahp.server.session import Session
from ahp.server.state import ServerState
from ahp.server.upgrade import UpgradeRequest, read_upgrade, reject
from ahp.server.writer import OVERFLOW_CLOSE, ConnectionWriter
from ahp.server.wsconn import (
    BUSY_REASON,
    GAVE_WAY_REASON,
    TRY_AGAIN,
    ConnectionClosed,
    ServerWebSocket,
    accept,
)

__all__ = [
    # (ServerConfig and its defaults live in ahp.server.config; named here too, where
    # the tests, benchmarks and docs take them from.)
    "MAX_MESSAGE_SIZE",
    "OUTBOX_BYTES",
    "ServerConfig",
    "serve_connections",
]

log = logging.getLogger("ahp.server")

#: Inbound frames from this size on are checked, then decoded, with a checkpoint between.
LARGE_FRAME: Final = 1024 * 1024
#: Seconds the answers queued before a peer's half-close (EOF) get to be written.
EOF_FLUSH: Final = 5.0
#: Seconds the close handshake may take when the server closes a connection.
CLOSE_TIMEOUT: Final = 1.0
#: The close code of a connection closed for the connection budget (the reason says
#: which bound; the client may connect again: its record is kept).
BUDGET_CLOSE: Final = (1013, "connection limit reached")
#: Seconds the close handshake of a connection closed for the budget may take: it was
#: closed because fds are scarce and it was the idlest, and idle peers that never
#: answer a close frame held their fd for the whole CLOSE_TIMEOUT (a legitimate
#: client's ``createTerminal`` then failed with EMFILE for up to a second). Its close
#: frame is sent first and nothing it sent is left unread (it was idle), so closing
#: the socket early loses the peer nothing; a peer that answers on loopback or a LAN
#: answers well within this.
EVICTED_CLOSE_TIMEOUT: Final = 0.1


class _Link:
    """The connection as its client record sees it (:class:`ahp.server.clients.Link`):
    a ping proves the peer is there; eviction stops the session and cancels the
    connection's tasks, whose ``finally`` then closes it with the session's reason."""

    def __init__(self, ws: ServerWebSocket) -> None:
        self.ws = ws
        self.session: Session | None = None
        #: The connection's nursery scope, once its tasks run.
        self.scope: trio.CancelScope | None = None

    async def alive(self, timeout: float) -> bool:
        """Whether the peer answers a ping within ``timeout`` seconds, or at least sent
        something meanwhile (:meth:`~ahp.server.wsconn.ServerWebSocket.arrived`): the
        pong is read by the connection's reader, which may be busy with the client's
        own requests for longer (a live client was replaced as dead for that)."""
        before = self.ws.arrived()
        with trio.move_on_after(timeout):
            try:
                await self.ws.ping()
            except ConnectionClosed:
                return False
            return True
        return self.ws.closed is None and self.ws.arrived() > before

    def evict(self, reason: str) -> None:
        self.evict_with(REPLACED_CLOSE[0], reason)

    def evict_with(self, code: int, reason: str) -> None:
        """Stop the session and close the connection with ``code`` and ``reason``."""
        if self.session is not None:
            self.session.stop(reason, code=code)
        if self.scope is not None:
            self.scope.cancel()


async def _reader(
    ws: ServerWebSocket,
    session: Session,
    config: ServerConfig,
    connection_id: str = "",
    ticket: BudgetTicket | None = None,
) -> None:
    wire = session.server.wire_log
    while True:
        message = await ws.receive()
        if ticket is not None:
            ticket.active()  # (not idle: the connection budget closes idle ones first)
        if wire is not None:
            wire.c2s(connection_id, message)
        if len(message) < LARGE_FRAME:
            await session.handle_frame(message)
            del message  # (not held while the next one arrives)
        else:
            # Checking and decoding a frame of megabytes take tens of milliseconds each:
            # one large frame of any connection at a time, each step followed by a
            # pause as long (other clients' keystrokes get their turns), and the frame
            # keeps its share of the inbound budget while it waits (bounded memory).
            inbound = session.server.inbound
            size = sys.getsizeof(message)
            if not inbound.take(size, ws, complete=True):
                await ws.aclose(TRY_AGAIN, BUSY_REASON)
                return
            try:
                async with inbound.decoding:
                    decoded = None
                    if await inbound.paced(partial(session.check_frame, message)):
                        decoded = await inbound.paced(
                            partial(session.decode_frame, message, checked=True)
                        )
            finally:
                inbound.give_back(size)
            del message  # (not held while it is handled, nor while the next one arrives)
            session.host.trimmer.request()  # (megabytes were just freed)
            if decoded is not None:
                await session.handle_message(decoded)
            del decoded
        if session.close_request is not None:
            session.outbox.close()
            return
        # A client that does not read its answers is not read either (bounded memory).
        # (Only when that can be the case: the receive is this loop's checkpoint.)
        if session.outbox.queued_bytes > config.outbox_bytes:
            await session.outbox.wait_responses_below(config.outbox_bytes)


async def _authenticate(
    stream: trio.abc.Stream,
    config: ServerConfig,
    notes: RateLimitedLog,
    audit: AuditLog | None = None,
    *,
    budget: InboundBudget | None = None,
) -> tuple[ServerWebSocket, UpgradeRequest, bool] | PlainAnswer | None:
    """Read and check the upgrade; the accepted connection, with whether it is
    read-only; or a plain request's answer, still to send (the caller owns it:
    :func:`~ahp.server.plain.answer_plain`); or None (answered and closed: malformed,
    refused, or the peer left)."""
    upgrade = await read_upgrade(stream, timeout=math.inf, note=_note_info(notes, audit))
    if upgrade is None:
        return None
    if isinstance(upgrade, PlainRequest):
        return await answer_plain(upgrade, config, notes, audit)
    wsproto_conn, request = upgrade
    refusal, read_only = admit_upgrade(request, config)
    # A peer may hang up during the upgrade (even before our 403 body is out): that
    # ends its own connection, never the server.
    if refusal is not None:
        notes.log(
            "refused", logging.WARNING, "refused connection from %s: %s", request.remote, refusal
        )
        if audit is not None:
            path = urlsplit(request.target).path  # never the query: it may hold the token
            audit.connection(request.remote, accepted=False, reason=refusal, path=path)
        await reject(stream, wsproto_conn, 403, f"{refusal}\n".encode())
        return None
    try:
        ws = await accept(
            stream,
            wsproto_conn,
            max_message_size=config.max_message_size,
            subprotocol=answer_protocol(request.subprotocols),
            early_data=request.early_data,
            budget=budget,
            message_deadline=config.message_deadline,
        )
    except ConnectionClosed:
        return None
    return ws, request, read_only


def _note_info(notes: RateLimitedLog, audit: AuditLog | None = None) -> Callable[..., Any]:
    def note(kind: str, message: str, *args: Any) -> None:
        notes.log(kind, logging.INFO, message, *args)
        if audit is not None and args:
            # read_upgrade's notes: (remote, why) for a malformed request, (remote,) for
            # a timeout. Every such peer is refused (400, or dropped).
            why = f"{kind}: {args[1]}" if len(args) > 1 else kind
            audit.connection(str(args[0]), accepted=False, reason=why[:AUDIT_REASON])

    return note


async def _serve_one(
    stream: trio.abc.Stream,
    state: ServerState,
    config: ServerConfig,
    pending: PendingConnections,
    notes: RateLimitedLog,
    *,
    budget: InboundBudget | None = None,
    connections: ConnectionBudget | None = None,
    sends: PlainSends | None = None,
) -> None:
    # Until authenticated, the connection holds a place among the pending ones, and the
    # whole phase has one deadline; a newer connection may evict it (see admission).
    scope = trio.move_on_after(config.handshake_timeout)
    pending.admit(scope)
    outcome: tuple[ServerWebSocket, UpgradeRequest, bool] | PlainAnswer | None = None
    placed = False
    try:
        with scope:
            outcome = await _authenticate(stream, config, notes, state.audit, budget=budget)
            if isinstance(outcome, PlainAnswer) and outcome.streamed is None:
                # A plain answer (the page, an asset) is sent after the phase, for as
                # long as the client takes it, if it gets a place among those sends;
                # else within the phase, as an unauthenticated connection (admission).
                placed = sends is not None and sends.take(outcome.peer)
                if sends is not None and not placed:
                    answer, outcome = outcome, None
                    notes.log(
                        "sends",
                        logging.INFO,
                        "every place for a page's answers after authentication is taken "
                        "(from %s or in all): answering within the unauthenticated phase",
                        answer.peer,
                    )
                    await answer.send_at_once(stream)
    finally:
        pending.release(scope)
    if isinstance(outcome, PlainAnswer):
        # Read and answered (no checkpoint since: nothing cancelled it): no longer a
        # pending connection nor under the phase's deadline, the answer may take as
        # long as the client keeps taking it (a recording's as a download,
        # ahp.server.download, holding its place there). It closes its streamed body.
        try:
            await outcome.send(stream, notes)
        finally:
            if placed and sends is not None:
                sends.give_back(outcome.peer)
        return
    if scope.cancelled_caught:
        why = "timed out" if trio.current_time() >= scope.deadline else "evicted by a newer one"
        notes.log("pending", logging.INFO, "unauthenticated connection %s", why)
        return
    if outcome is None:
        return
    ws, request, read_only = outcome
    # The path only: the query may carry the token.
    log.debug("accepted a connection from %s to %s", request.remote, urlsplit(request.target).path)
    outbox = Outbox(max_bytes=config.outbox_bytes, track_in_flight=True, pool=state.responses)
    link = _Link(ws)
    session = Session(state, outbox, link, read_only=read_only)
    link.session = session
    ws.read_only = read_only
    # Its unfinished messages give way to another connection's (ahp.server.wsconn):
    # closed with 1013 like an eviction, the client's record kept.
    ws.on_give_way = partial(link.evict_with, TRY_AGAIN, GAVE_WAY_REASON)
    session.peer = request.remote
    if (audit := state.audit) is not None:
        # Every line this connection causes, here and in the tasks it starts, is charged
        # to its budget (this task's context: see ahp.record.audit.PeerQuota).
        quota = audit.quota(request.remote, read_only=read_only)
        QUOTA.set(quota)
        path = urlsplit(request.target).path
        audit.connection(request.remote, accepted=True, path=path, read_only=read_only)
    connection_id = state.wire_log.connection_id() if state.wire_log is not None else ""
    writer = ConnectionWriter(ws, outbox, session, connection_id)
    # (Serving stops: the drain's goodbye, or SIGINT's shutdown: one code, one reason.)
    close_code, close_reason = GOING_AWAY
    if state.going_away is not None:
        # The drain said goodbye already (ahp.server.drain): no new conversation.
        session.close_request = state.going_away
        outbox.close()
    state.sessions.add(session)
    ticket: BudgetTicket | None = None
    refused: str | None = None
    close_timeout = CLOSE_TIMEOUT
    if connections is not None:
        # A place among the authenticated connections; a full budget closes the one
        # idle the longest (of this address, or of all) for this one (see admission).
        peer = request.remote.rsplit(":", 1)[0] if ":" in request.remote else request.remote

        def evict(reason: str) -> None:
            nonlocal close_timeout
            log.info("closing a connection of %s: %s", peer, reason)
            close_timeout = EVICTED_CLOSE_TIMEOUT  # (fds are scarce: see its comment)
            link.evict_with(BUDGET_CLOSE[0], reason)

        ticket = BudgetTicket(peer, evict, read_only=read_only)
        refused = connections.admit(ticket)
        if refused is not None:
            log.info("refusing a read-only connection of %s: %s", peer, refused)
            ticket = None
            close_code, close_reason = BUDGET_CLOSE[0], refused
            close_timeout = EVICTED_CLOSE_TIMEOUT
    try:
        if refused is None:  # (a refused read-only connection is closed at once)
            async with trio.open_nursery() as nursery:
                link.scope = nursery.cancel_scope

                async def read() -> None:
                    with contextlib.suppress(ConnectionClosed):
                        await _reader(ws, session, config, connection_id, ticket)
                    if ws.closed is not None:
                        nursery.cancel_scope.cancel()
                    elif ws.at_eof:
                        # The peer half-closed after its last requests: their answers,
                        # queued already, go out first, within EOF_FLUSH (a peer gone
                        # entirely fails the first write).
                        session.outbox.close()
                        deadline = trio.current_time() + EOF_FLUSH
                        writer.scope.deadline = min(writer.scope.deadline, deadline)
                    # else: the session asked to close; the writer sends what is queued first.

                async def write() -> None:
                    nonlocal close_code, close_reason
                    with contextlib.suppress(ConnectionClosed):
                        await writer.run()
                    if writer.scope.cancelled_caught and writer.close is None:
                        log.info(
                            "client %s reads nothing: dropping the connection", session.client_id
                        )
                        writer.close = OVERFLOW_CLOSE
                    if writer.close is not None:
                        close_code, close_reason = writer.close
                    nursery.cancel_scope.cancel()

                nursery.start_soon(read)
                nursery.start_soon(write)
                nursery.start_soon(writer.watch_overflow, config.stall_grace)
                nursery.start_soon(writer.watch_bound, config.stall_grace)
    except Exception:
        # A bug of ours in one connection must not take the server (and every other
        # client and terminal) down with it: log it, close this connection with 1011.
        log.exception("connection of client %s failed", session.client_id)
        close_code, close_reason = 1011, "internal error"
    else:
        if session.stopped and session.close_request is not None:
            close_code, close_reason = session.close_request  # replaced by a newer one
    finally:
        if ticket is not None and connections is not None:
            connections.release(ticket)
        state.sessions.discard(session)
        state.sessions_changed.unpark_all()
        # The client's own close frame (a normal or going-away close) means it left.
        peer_close = ws.closed
        session.disconnect(left=peer_close is not None and peer_close.code in (1000, 1001))
        outbox.discard()  # (what it still held is freed now, not at the next full GC)
        state.host.trimmer.request()  # (what the connection held: its buffers, outbox)
        with trio.CancelScope(shield=True):
            await ws.aclose(close_code, close_reason, timeout=close_timeout)
        closed = ws.closed
        if audit is not None:
            audit.event(
                "disconnected",
                peer=request.remote,
                clientId=session.client_id,
                code=closed.code if closed is not None else None,
            )
            audit.close_quota(quota)
        log.debug(
            "connection from %s (client %s) closed: %s",
            request.remote,
            session.client_id,
            f"{closed.code} {closed.reason}" if closed is not None else "?",
        )
        if closed is not None:
            # The connection's close is kept on it and raised in each of its tasks:
            # its traceback holds their frames, which hold the connection (a cycle that
            # kept unread answers of megabytes until a full collection; issue 25).
            closed.__traceback__ = None


async def serve_connections(
    state: ServerState,
    config: ServerConfig,
    listeners: Sequence[trio.abc.Listener[Any]],
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Accept WebSocket connections until cancelled (each in its own task), at most
    ``config.max_pending`` of them unauthenticated at a time (see admission)."""
    limit = config.max_pending if config.max_pending is not None else pending_limit()
    pending = PendingConnections(limit)
    notes = RateLimitedLog(log)
    budget = state.inbound
    total = config.max_connections if config.max_connections is not None else connection_limit()
    connections = ConnectionBudget(total, config.max_connections_per_peer)
    state.connections = connections
    answering = config.max_plain_sends if config.max_plain_sends is not None else plain_send_limit()
    sends = PlainSends(answering, config.max_plain_sends_per_peer)
    state.plain_sends = sends

    async def handler(stream: trio.abc.Stream) -> None:
        # Every handler runs in the listeners' nursery: an exception escaping one
        # connection would stop the whole server.
        try:
            await _serve_one(
                stream,
                state,
                config,
                pending,
                notes,
                budget=budget,
                connections=connections,
                sends=sends,
            )
        except Exception:
            log.exception("connection failed")
        finally:
            with trio.CancelScope(shield=True), trio.move_on_after(CLOSE_TIMEOUT):
                await stream.aclose()

    async with trio.open_nursery() as nursery:
        for listener in listeners:
            nursery.start_soon(serve_listener, listener, handler, nursery, notes)
        task_status.started()
