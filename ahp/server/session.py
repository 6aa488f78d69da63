"""One client connection's protocol state machine (transport-free): frames in, answers out.

Why transport-free: every rule of the AHP handshake, subscriptions, dispatch and
errors is driven by text frames in and an :class:`~ahp.engine.Outbox` out, so it
can be tested and fuzzed without a socket; :mod:`ahp.server.websocket` only
moves frames. This module parses a frame and routes it to its handler; the
handlers live by concept: the handshake and subscriptions
(:mod:`ahp.server.handshake`, with the identity rules of
:mod:`ahp.server.identity`), the catalogue (:mod:`ahp.server.terminals`),
actions (:mod:`ahp.server.dispatch`) and the process extension
(:mod:`ahp.server.processes`); the connection's state and answers are
:class:`~ahp.server.connection.Connection`'s, the shared state
:class:`~ahp.server.state.ServerState`'s.

Ordering: responses and envelopes share the connection's outbox, a FIFO. A
subscribe / initialize / reconnect answer is queued and the subscription
registered in the same synchronous step, so the answer always precedes any
envelope newer than its ``fromSeq``. An answer too big to encode in one step
(a snapshot of megabytes) is queued as a placeholder in that step and encoded
in pieces afterwards, other tasks running in between; the envelopes queued
meanwhile wait behind it (:func:`ahp.engine.outbox.encode_answer`).

Errors never end the connection: a malformed frame gets its JSON-RPC error
(``-32700``, ``-32600``, ``-32601``, ``-32602`` with ``data.path``) and the
next frame is handled normally. Only an unsupported protocol version closes
(after the ``-32005`` answer), as AHP specifies. A client's mistake is never
logged above DEBUG; an unexpected exception (a bug of ours) is logged with its
traceback and answered ``-32603``, and the connection goes on.

Dialects: everything this connection is sent — answers, replayed envelopes, and
through :attr:`Session.project` the live envelopes the writer takes from the
outbox — is projected onto the connection's dialect from the one internal
state. Envelopes are shared by every subscriber and encoded once; only the few
that differ in 1.x (catalogue updates, session claims) are encoded again for a
1.x connection.

Buffering: a request that may be answered with snapshots waits, before it is
handled, while the server's response pool (:data:`~ahp.server.state.RESPONSE_POOL`)
is over its limit; the wait ends with the connection's cancellation. Meanwhile the
holders that drain their share too slowly are closed
(:data:`~ahp.server.writer.POOL_DRAIN_TIME`), so the wait is short.
"""

from __future__ import annotations

import json
import logging
import shlex
from collections.abc import Awaitable, Callable
from typing import Any, Final

import orjson

from ahp.protocol.codec import ProtocolError, decode_json, decode_message
from ahp.protocol.dialect import SUPPORTED_VERSIONS, negotiate
from ahp.protocol.jsonrpc import ErrorCode, JsonRpcMessage, JsonRpcNotification, JsonRpcRequest
from ahp.protocol.jsonshape import MAX_DEPTH, FrameShapeError, check_shape
from ahp.protocol.processes import EXEC, SIGNAL
from ahp.record.audit import MAX_AUDIT_ITEMS, AuditLog
from ahp.server import handshake, identity, terminals
from ahp.server.connection import REPLACED_CLOSE, Connection
from ahp.server.dispatch import MAX_CONFIG_BYTES, READ_ONLY_REFUSAL, dispatch_action
from ahp.server.errors import SERVER_LIMIT, Fail, short
from ahp.server.handshake import READ_ONLY_META
from ahp.server.identity import PROBE_TIMEOUT
from ahp.server.processes import PROCESS_REQUESTS
from ahp.server.state import DEFAULT_MAX_TERMINALS, ServerState

__all__ = [
    "DEFAULT_MAX_TERMINALS",
    "MAX_CONFIG_BYTES",
    "PROBE_TIMEOUT",
    "READ_ONLY_META",
    "READ_ONLY_METHODS",
    "REPLACED_CLOSE",
    "SERVER_LIMIT",
    "SUPPORTED_VERSIONS",
    "ServerState",
    "Session",
    "negotiate_version",
]

log = logging.getLogger("ahp.server")

#: Deepest JSON nesting accepted in a frame (see :data:`ahp.protocol.jsonshape.MAX_DEPTH`);
#: deeper frames, and frames of more than ``MAX_ITEMS`` items, are refused as parse errors.
MAX_NESTING: Final = MAX_DEPTH
#: Requests whose answers may hold whole snapshots (they wait for room in the pool).
SNAPSHOT_METHODS: Final = frozenset({"initialize", "reconnect", "subscribe"})
#: Methods answered before ``initialize``.
PRE_HANDSHAKE: Final = frozenset({"initialize", "reconnect", "ping"})
#: Requests a read-only connection may make (watching); every other one is
#: ``-32009``, and every ``dispatchAction`` is rejected to it.
READ_ONLY_METHODS: Final = frozenset(
    {"initialize", "reconnect", "ping", "subscribe", "unsubscribe", "listSessions"}
)

#: The negotiation rule (kept under its old name for callers).
negotiate_version = negotiate


def _check_cost(frame: str | bytes) -> None:
    """``-32700`` if the frame would cost too much to decode (checked before anything is
    built: :func:`~ahp.protocol.jsonshape.check_shape`)."""
    try:
        check_shape(frame, max_depth=MAX_NESTING)
    except FrameShapeError as exc:
        raise ProtocolError(f"parse error: {exc}", code=-32700) from None


def _parse(frame: str | bytes, *, checked: bool = False) -> dict[str, Any]:
    """The frame's JSON object: ``-32700`` if invalid or too costly to decode (unless
    ``checked`` already), else ``-32600``."""
    if not checked:
        _check_cost(frame)
    data = decode_json(frame)
    if not isinstance(data, dict):  # (decode_message would re-parse a str as JSON)
        kind = "a batch (array)" if isinstance(data, list) else type(data).__name__
        raise ProtocolError(f"expected a JSON-RPC object, got {kind}", code=-32600)
    return data


def _inexact(msg_id: object) -> bool:
    """Whether ``msg_id`` may be an integer too big for 64 bits, read as a float (orjson
    reads only those integers so; a client that sent ``18446744073709551616`` must get
    that id back, not ``1.8446744073709552e19``)."""
    return type(msg_id) is float and abs(msg_id) >= _INEXACT and msg_id.is_integer()


#: The smallest magnitude at which orjson reads an integer literal as a float.
_INEXACT: Final = float(2**63)


def _exact_id(frame: str | bytes) -> Any:
    """The frame's ``id`` as written (the rare path of :func:`_inexact`), as a
    pre-encoded :class:`orjson.Fragment` (orjson encodes no integer beyond 64 bits):
    the frame is parsed again by the standard library, which keeps integers of any
    size. The frame was already parsed once and its cost checked, so this is at most
    a second parse."""
    msg_id = json.loads(frame)["id"]
    return orjson.Fragment(str(msg_id)) if type(msg_id) is int else msg_id


class Session(Connection):
    """The protocol side of one connection: parses its frames and routes each to its
    handler. Owns its subscriptions, not the outbox (see :class:`Connection`)."""

    def check_frame(self, frame: str | bytes) -> bool:
        """The decoding-cost check of :meth:`handle_frame` on its own; False when the
        frame is refused (answered ``-32700``). A transport may run it, let other tasks
        run, then call ``handle_frame(frame, checked=True)``: for a large frame each
        step takes tens of milliseconds."""
        try:
            _check_cost(frame)
        except ProtocolError as exc:
            self.error(None, exc.code, exc.message, {"path": exc.path})
            return False
        return True

    async def handle_frame(self, frame: str | bytes, *, checked: bool = False) -> None:
        """Handle one inbound frame; answers (if any) are queued on the outbox."""
        message = self.decode_frame(frame, checked=checked)
        if message is not None:
            await self.handle_message(message)

    def decode_frame(self, frame: str | bytes, *, checked: bool = False) -> JsonRpcMessage | None:
        """The decoding of :meth:`handle_frame` on its own (one synchronous step, tens
        of milliseconds for a frame of megabytes): the message, or None when there is
        nothing to handle (the frame was answered with its error, or the session
        stopped)."""
        if self.stopped:
            return None
        try:
            message = decode_message(_parse(frame, checked=checked))
        except ProtocolError as exc:
            self.error(None, exc.code, exc.message, {"path": exc.path})
            return None
        if isinstance(message, JsonRpcRequest) and _inexact(message.id):
            message = JsonRpcRequest(_exact_id(frame), message.method, message.params)
        return message

    async def handle_message(self, message: JsonRpcMessage) -> None:
        """Handle one decoded message (:meth:`decode_frame`)."""
        if self.stopped:
            return
        if isinstance(message, JsonRpcRequest):
            await self._request(message)
        elif isinstance(message, JsonRpcNotification):
            await self._notification(message)
        # Responses from the client: a terminal host sends no requests; ignore.

    async def take_identity(self, client_id: str, token: str | None) -> None:
        """Decide whether this connection may act as ``client_id``; raise if not (the
        rules: :func:`ahp.server.identity.take_identity`)."""
        await identity.take_identity(self, client_id, token)

    async def _request(self, request: JsonRpcRequest) -> None:
        method = request.method
        if self.record is None and method not in PRE_HANDSHAKE:
            self.error(
                request.id, ErrorCode.METHOD_NOT_FOUND, f"{short(method)!r} before initialize"
            )
            return
        if self.read_only and method not in READ_ONLY_METHODS:
            if (audit := self.server.audit) is not None:
                _audit_read_only(audit, self, method, request.params)
            self.error(request.id, ErrorCode.PERMISSION_DENIED, READ_ONLY_REFUSAL)
            return
        # A notification method sent with an id is handled as a request: answered null,
        # or with the error its params deserve.
        handler = _REQUESTS.get(method) or _NOTIFICATIONS.get(method)
        if handler is None:
            self.error(
                request.id, ErrorCode.METHOD_NOT_FOUND, f"method {short(method)!r} not found"
            )
            return
        pool = self.server.responses
        if method in SNAPSHOT_METHODS and pool.held > pool.limit:
            # Every connection's answers together are over the server's pool: a request
            # that may be answered with snapshots waits for room (big answers are built
            # one after another; silent holders are closed by their watchdog). Input
            # and everything else go on meanwhile.
            await pool.wait_room()
        try:
            result = await handler(self, request.params if request.params is not None else {})
        except Fail as fail:
            self.error(request.id, fail.code, fail.message, fail.data)
        except ProtocolError as exc:
            path = "$.params" + exc.path[1:]
            self.error(
                request.id,
                ErrorCode.INVALID_PARAMS,
                f"invalid params: {exc.message.rsplit(' at ', 1)[0]} at {path}",
                {"path": path},
            )
        except Exception:
            # A bug of ours, not the client's mistake: say so, keep the connection.
            log.exception("internal error handling %r", method)
            self.error(request.id, ErrorCode.INTERNAL_ERROR, "internal error")
        else:
            await self.respond(request.id, result)

    async def _notification(self, note: JsonRpcNotification) -> None:
        if self.record is None:
            return  # the reference drops notifications before the handshake
        handler = _NOTIFICATIONS.get(note.method)
        if handler is None:
            return
        try:
            await handler(self, note.params if note.params is not None else {})
        except (ProtocolError, Fail) as exc:
            log.debug("ignored malformed %s notification: %s", note.method, exc)
        except Exception:
            log.exception("internal error handling a %r notification", note.method)


def _audit_read_only(audit: AuditLog, conn: Connection, method: str, params: Any) -> None:
    """A request refused to a read-only connection, audited as a full-access client's
    refusal of the same request is (``error``; ``request`` for a method without an event
    of its own), from its params as sent (they may be malformed). Charged to the
    connection's budget like every line it causes (:class:`ahp.record.audit.PeerQuota`)."""
    p = params if isinstance(params, dict) else {}
    fields: dict[str, Any] = {
        "terminal": p.get("channel"),
        "by": conn.client_id,
        "error": READ_ONLY_REFUSAL,
    }
    if method == "createTerminal":
        fields.update(name=p.get("name"), cwd=p.get("cwd"), claim=p.get("claim"))
        audit.event("terminal.created", **fields)
    elif method == "disposeTerminal":
        audit.event("terminal.disposed", **fields)
    elif method == SIGNAL:
        audit.event("signal", **fields, signal=p.get("signal"))
    elif method == EXEC:
        argv, env = p.get("argv"), p.get("env")
        command: Any = p.get("command")
        if isinstance(argv, list) and all(isinstance(a, str) for a in argv):
            command = shlex.join(argv[:MAX_AUDIT_ITEMS])
        names = (
            sorted(str(k) for k in list(env)[:MAX_AUDIT_ITEMS]) if isinstance(env, dict) else None
        )
        audit.event("exec", **fields, command=command, cwd=p.get("cwd"), env=names)
    else:
        audit.event("request", method=method, **fields)


_REQUESTS: dict[str, Callable[[Connection, Any], Awaitable[Any]]] = {
    "ping": handshake.ping,
    "initialize": handshake.initialize,
    "reconnect": handshake.reconnect,
    "subscribe": handshake.subscribe,
    "createTerminal": terminals.create_terminal,
    "disposeTerminal": terminals.dispose_terminal,
    "listSessions": terminals.list_sessions,
    # The x-ahp-terminals/* process extension (ahp.server.processes).
    **PROCESS_REQUESTS,
}
_NOTIFICATIONS: dict[str, Callable[[Connection, Any], Awaitable[None]]] = {
    "unsubscribe": handshake.unsubscribe,
    "dispatchAction": dispatch_action,
}
