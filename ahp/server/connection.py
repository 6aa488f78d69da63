"""One client connection's state: its identity, dialect, subscriptions and answers.

Why a module of its own: the request handlers (:mod:`ahp.server.handshake`,
:mod:`ahp.server.terminals`, :mod:`ahp.server.dispatch`,
:mod:`ahp.server.processes`) act on a connection's state without knowing how
frames are parsed and routed (:mod:`ahp.server.session`), so they import this
and not the router, and no import runs back.

Ordering and buffering: answers and envelopes share the connection's outbox, a
FIFO owned by the transport; :meth:`Connection.subscribe` takes the snapshot
and registers the subscription in one synchronous step, so an answer queued
with it always precedes any envelope newer than its ``fromSeq``. An answer too
big to encode in one step (a snapshot of megabytes) is queued as a placeholder
in that step and encoded in pieces afterwards, other tasks running in between;
the envelopes queued meanwhile wait behind it
(:func:`ahp.engine.outbox.encode_answer`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Final

from ahp.engine import Outbox
from ahp.engine.envelopes import Published
from ahp.engine.outbox import CHUNKED_WEIGHT, encode_answer
from ahp.protocol.chunked import weight
from ahp.protocol.codec import dumps_utf8, encode_message, message_to_json
from ahp.protocol.dialect import Dialect, dialect_of, envelope_json, projects
from ahp.protocol.jsonrpc import (
    ErrorCode,
    JsonRpcError,
    JsonRpcErrorObject,
    JsonRpcId,
    JsonRpcSuccess,
)
from ahp.protocol.state import ROOT_URI, Snapshot
from ahp.server.clients import ClientRecord, Link
from ahp.server.state import ServerState

__all__ = ["REPLACED_CLOSE", "Connection"]

log = logging.getLogger("ahp.server")

#: The close a connection gets when a newer connection of its client replaced it.
REPLACED_CLOSE: Final = (1008, "replaced by a newer connection of this clientId")


class _SessionLink:
    """The link of a connection without a transport (tests, fuzzing): it always answers;
    evicting it stops the connection (see :meth:`Connection.stop`)."""

    def __init__(self, connection: Connection) -> None:
        self._connection = connection

    async def alive(self, timeout: float) -> bool:
        return True

    def evict(self, reason: str) -> None:
        self._connection.stop(reason)


class Connection:
    """The protocol state of one connection. Owns its subscriptions, not the outbox.

    Identity: the ``clientId`` a connection acts as is the one
    :func:`ahp.server.identity.take_identity` granted it at ``initialize`` /
    ``reconnect`` (:attr:`record`); every action it dispatches carries that id as
    its origin, and every claim rule is decided on it.
    """

    def __init__(
        self,
        server: ServerState,
        outbox: Outbox,
        link: Link | None = None,
        *,
        read_only: bool = False,
    ) -> None:
        self.server = server
        #: Admitted with the read-only token: it may watch, nothing else (see
        #: :data:`ahp.server.session.READ_ONLY_METHODS`).
        self.read_only = read_only
        self.host = server.host
        self.outbox = outbox
        self.record: ClientRecord | None = None
        self.subscriptions: set[str] = set()
        #: The wire shape of this connection (set by initialize / reconnect).
        self.dialect = Dialect.V05
        #: Set when the connection must close after the queued frames (code, reason).
        self.close_request: tuple[int, str] | None = None
        #: This connection, as its client record sees it (the transport's, or one that
        #: always answers).
        self.link: Link = link if link is not None else _SessionLink(self)
        #: Set when a newer connection of this client replaced this one: no frame of
        #: this connection is acted on any more.
        self.stopped = False
        #: The peer's address, as the transport reports it (for the audit log).
        self.peer: str | None = None

    @property
    def client_id(self) -> str | None:
        return self.record.client_id if self.record is not None else None

    @property
    def project(self) -> Callable[[Published], bytes] | None:
        """How the writer encodes an envelope for this connection: None for the 0.5
        dialect (the shared frame, as it is), else :meth:`_frame_v1`."""
        return self._frame_v1 if self.dialect is Dialect.V1 else None

    def _frame_v1(self, item: Published) -> bytes:
        if not projects(item.envelope.action):
            return item.frame  # the same in both dialects: the shared, cached frame
        return dumps_utf8(
            {
                "jsonrpc": "2.0",
                "method": "action",
                "params": envelope_json(item.envelope, Dialect.V1),
            }
        )

    def begin(self, record: ClientRecord) -> None:
        """Act as ``record``'s client from now on, in its protocol version's dialect."""
        self.record = record
        self.dialect = dialect_of(record.protocol_version)

    # -- answers -----------------------------------------------------------------------------

    async def respond(self, msg_id: JsonRpcId, result: Any) -> None:
        """Queue a success answer on the outbox. Its place in the outbox is taken before
        the first checkpoint; an answer too big to encode in one step is then encoded in
        pieces (:func:`ahp.engine.outbox.encode_answer`), other tasks running between
        them. Cancelled meanwhile, the placeholder stays incomplete, holding what waits
        behind it, until the outbox is closed (the connection is going)."""
        # UTF-8 bytes, as the writer sends them: a 9 MB snapshot is not decoded into a
        # str to be encoded again (that was half of its cost, ~55 ms; issue 25).
        message = message_to_json(JsonRpcSuccess(id=msg_id, result=result))
        if weight(message, CHUNKED_WEIGHT) <= CHUNKED_WEIGHT:
            self.outbox.put(dumps_utf8(message))
            return
        # Too big for one step: its place is kept now (before any checkpoint, so
        # before any envelope newer than the answer), its bytes come in pieces.
        pending = self.outbox.hold()
        try:
            await encode_answer(self.outbox, pending, message)
        except (TypeError, ValueError):  # (orjson refused a value: a bug of ours)
            log.exception("internal error encoding an answer")
            self.server.errors += 1
            error = JsonRpcErrorObject(code=ErrorCode.INTERNAL_ERROR, message="internal error")
            self.outbox.replace(
                pending, dumps_utf8(message_to_json(JsonRpcError(id=msg_id, error=error)))
            )

    def error(self, msg_id: JsonRpcId, code: int, message: str, data: Any = None) -> None:
        """Queue an error answer on the outbox (never waits) and count it."""
        self.server.errors += 1
        self.outbox.put(
            encode_message(
                JsonRpcError(
                    id=msg_id, error=JsonRpcErrorObject(code=code, message=message, data=data)
                )
            )
        )

    # -- subscriptions -----------------------------------------------------------------------

    def snapshot(self, channel: str) -> Snapshot | None:
        """The channel's snapshot now, or None for a channel this host does not have."""
        if channel == ROOT_URI:
            return self.host.root_snapshot()
        if channel in self.host:
            return self.host.get(channel).snapshot()
        return None

    def subscribe(self, channel: str) -> Snapshot | None:
        """Snapshot + registration in one synchronous step (ordering guarantee)."""
        snapshot = self.snapshot(channel)
        if snapshot is None:
            return None
        self.host.hub.subscribe(channel, self.outbox)
        self.subscriptions.add(channel)
        assert self.record is not None
        self.record.snapshot_seq[channel] = snapshot.fromSeq
        self.record.snapshot_of[channel] = (
            0 if channel == ROOT_URI else self.host.get(channel).generation
        )
        return snapshot

    def unsubscribe_all(self) -> None:
        for channel in self.subscriptions:
            self.host.hub.unsubscribe(channel, self.outbox)
        self.subscriptions.clear()

    def disconnect(self, *, left: bool = False) -> None:
        """The transport is gone: drop subscriptions, keep the client record (``left``:
        the client closed the connection on purpose, see ``ClientRegistry.disconnect``)."""
        self.unsubscribe_all()
        if self.record is not None:
            self.server.clients.disconnect(self.record, self.link, left=left)

    def stop(self, reason: str, *, code: int = REPLACED_CLOSE[0]) -> None:
        """The connection must go (a newer connection of this client replaced it, or
        the connection budget closes it): act on nothing more, follow nothing more, and
        close with ``code`` and ``reason``."""
        self.stopped = True
        self.unsubscribe_all()
        self.close_request = (code, reason)
        self.outbox.close()
