"""One client connection's protocol state machine (transport-free).

Why transport-free: every rule of the AHP handshake, subscriptions, dispatch and
errors lives here and is driven by text frames in and an
:class:`~ahp.engine.Outbox` out, so it can be tested and fuzzed without a
socket; :mod:`ahp.server.websocket` only moves frames.

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

Dialects: ``initialize`` picks the highest offered version this host speaks
(0.3.x to 0.8.x: the 0.5 dialect; 0.9.x, 0.10.x and 1.x: the 1.x dialect; see
:mod:`ahp.protocol.dialect`) and the connection keeps it (a ``reconnect``
resumes the record's). Everything this connection is sent — answers, replayed
envelopes, and through :meth:`Session.project` the live envelopes the writer
takes from the outbox — is projected onto that dialect from the one internal
state. Envelopes are shared by every subscriber and encoded once; only the few
that differ in 1.x (catalogue updates, session claims) are encoded again for a
1.x connection. A session claim a 0.5 client dispatches for the session that
already holds the terminal keeps that claim's ``chat`` (a 0.5 client narrowing
a 1.x chat's claim does not lose the chat for 1.x viewers).
"""

from __future__ import annotations

import errno
import hmac
import logging
import os
import re
import socket
from collections.abc import Awaitable, Callable
from typing import Any, Final, NoReturn

import attrs
import trio

from ahp import __version__, keystroke
from ahp.engine import Host, Outbox, Terminal, TerminalExists, TerminalNotFound
from ahp.engine.envelopes import Published
from ahp.engine.outbox import CHUNKED_WEIGHT, ResponsePool, encode_answer
from ahp.protocol.actions import (
    ActionOrigin,
    RootConfigChanged,
    StateAction,
    TerminalClaimed,
    TerminalInput,
    UnknownAction,
    action_type,
)
from ahp.protocol.chunked import weight
from ahp.protocol.codec import (
    ProtocolError,
    decode_json,
    decode_message,
    dumps_utf8,
    encode_message,
    message_to_json,
    structure,
    structure_action,
    unstructure,
)
from ahp.protocol.commands import (
    RESUME_META,
    ChannelMissing,
    ChannelParams,
    ChannelRecovery,
    ChannelReplay,
    ChannelSnapshot,
    CreateTerminalParams,
    DispatchActionParams,
    Implementation,
    InitializeParams,
    InitializeResult,
    ListSessionsParams,
    ListSessionsResult,
    ReconnectChannels,
    ReconnectCursorParams,
    ReconnectParams,
    ReconnectReplay,
    ReconnectSnapshot,
    ResumedWindows,
    ResumeTokenError,
    SubscribeResult,
    reconnect_form,
    resume_token,
)
from ahp.protocol.dialect import (
    SUPPORTED_VERSIONS,
    Dialect,
    dialect_of,
    envelope_json,
    negotiate,
    projects,
    result_json,
)
from ahp.protocol.jsonrpc import (
    ErrorCode,
    JsonRpcError,
    JsonRpcErrorObject,
    JsonRpcId,
    JsonRpcNotification,
    JsonRpcRequest,
    JsonRpcSuccess,
)
from ahp.protocol.jsonshape import MAX_DEPTH, FrameShapeError, check_shape
from ahp.protocol.state import (
    ROOT_URI,
    TERMINAL_SCHEME,
    ClientClaim,
    SessionClaim,
    Snapshot,
    TerminalClaim,
)
from ahp.protocol.uri import local_file_uri_to_path, path_to_file_uri
from ahp.pty import SpawnError
from ahp.record.audit import ACTOR, AuditLog
from ahp.record.recorder import Recorder
from ahp.record.wirelog import WireLog
from ahp.reducers import heal_root
from ahp.reducers.core import (
    MAX_CLIENT_ID,
    MAX_URI,
    claim_problem,
    heal_terminal,
    rejected_echo,
)
from ahp.reducers.policy import Change
from ahp.server.clients import ClientRecord, ClientRegistry, Link
from ahp.server.processes import PROCESS_REQUESTS, Refused
from ahp.server.wsconn import InboundBudget

__all__ = [
    "DEFAULT_MAX_TERMINALS",
    "MAX_CONFIG_BYTES",
    "READ_ONLY_META",
    "READ_ONLY_METHODS",
    "SERVER_LIMIT",
    "SUPPORTED_VERSIONS",
    "ServerState",
    "Session",
    "negotiate_version",
]

log = logging.getLogger("ahp.server")

MAX_DIMENSION: Final = 4096
#: Who this server is (``serverInfo``, sent to 1.x clients).
SERVER_INFO: Final = Implementation(name="ahp-terminals", version=__version__)

#: Deepest JSON nesting accepted in a frame (see :data:`ahp.protocol.jsonshape.MAX_DEPTH`);
#: deeper frames, and frames of more than ``MAX_ITEMS`` items, are refused as parse errors.
MAX_NESTING: Final = MAX_DEPTH

#: Terminals one server hosts at most by default (``serve --max-terminals``): each holds
#: a process, about 3 of the server's fds (pty or pipes) and up to its scrollback.
DEFAULT_MAX_TERMINALS: Final = 256
#: Bytes of answers every connection together may have queued or in writing before the
#: next request of anyone waits (issue 25: 8 silent clients each asking for a 9 MB
#: snapshot held 284 MB). Twice the largest snapshot (4 Mi characters of escape-dense
#: output, ~9-15 MB of JSON), so two big answers are built at a time at most beyond it.
RESPONSE_POOL: Final = 32 * 1024 * 1024
#: Largest ``root/configChanged`` action accepted (encoded JSON bytes): it is broadcast to
#: every root subscriber, so a bigger one is rejected to its sender.
MAX_CONFIG_BYTES: Final = 64 * 1024
#: JSON-RPC's implementation-defined server error (AHP assigns no code to this): a limit
#: of this server was reached (terminals, file descriptors); the message says which, and
#: the request may succeed later.
SERVER_LIMIT: Final = -32000
#: Configuration keys named at most in one audit line.
_AUDIT_KEYS: Final = 64
#: ``errno`` values meaning the machine or the process ran out of something.
_EXHAUSTED: Final = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.EAGAIN})

#: Seconds a live connection gets to answer a ping when another connection claims its
#: ``clientId`` without its resume token: one that answers keeps the id (the newcomer is
#: refused); one that does not is taken for dead (a dropped network, a client that
#: reconnects before this side noticed) and replaced by the newcomer.
PROBE_TIMEOUT: Final = 3.0
#: The close a connection gets when a newer connection of its client replaced it.
REPLACED_CLOSE: Final = (1008, "replaced by a newer connection of this clientId")

#: Memory all connections together may hold in inbound messages still being assembled
#: (fragments, a large frame arriving): four messages at the size bound (issue 25: 30
#: connections each holding an unfinished 8 MiB frame held 302 MB).
INBOUND_BUDGET: Final = 32 * 1024 * 1024
#: Requests whose answers may hold whole snapshots (they wait for room in the pool).
SNAPSHOT_METHODS: Final = frozenset({"initialize", "reconnect", "subscribe"})
#: Methods answered before ``initialize``.
PRE_HANDSHAKE: Final = frozenset({"initialize", "reconnect", "ping"})
#: Requests a read-only connection may make (watching); every other one is
#: ``-32009``, and every ``dispatchAction`` is rejected to it.
READ_ONLY_METHODS: Final = frozenset(
    {"initialize", "reconnect", "ping", "subscribe", "unsubscribe", "listSessions"}
)
#: Why a read-only connection's dispatch or request is refused.
READ_ONLY_REFUSAL: Final = "this connection is read-only (it was admitted with the read-only token)"
#: ``InitializeResult._meta`` key telling a read-only connection what it is (the viewer
#: page hides "Take over" then).
READ_ONLY_META: Final = "ahp-terminals/readOnly"

#: The negotiation rule (kept under its old name for callers).
negotiate_version = negotiate


@attrs.define
class ServerState:
    """What every connection of one server shares."""

    host: Host
    clients: ClientRegistry = attrs.field(factory=ClientRegistry)
    default_directory: str = attrs.field(factory=lambda: path_to_file_uri(os.path.expanduser("~")))
    #: Terminals hosted at most; ``createTerminal`` past it fails with :data:`SERVER_LIMIT`.
    max_terminals: int = DEFAULT_MAX_TERMINALS
    #: ``createTerminal`` requests between the limit check and the terminal's registration.
    creating: int = 0
    #: The authenticated connections' budget, once the transport runs (figures, tests).
    connections: Any = None
    #: Counters: protocol errors answered (figures for tests).
    errors: int = 0
    #: Responses (snapshots above all) queued or being written by every connection
    #: together (:data:`RESPONSE_POOL`): past it, requests wait and silent holders go.
    responses: ResponsePool = attrs.field(factory=lambda: ResponsePool(RESPONSE_POOL))
    #: Inbound messages still being assembled, every connection together
    #: (:data:`INBOUND_BUDGET`): a connection that would pass it is closed with 1013.
    inbound: InboundBudget = attrs.field(factory=lambda: InboundBudget(INBOUND_BUDGET))
    #: Where privileged events are logged (``serve --audit-log``), if anywhere.
    audit: AuditLog | None = None
    #: Where every message is logged (``serve --wire-log``), if anywhere.
    wire_log: WireLog | None = None
    #: The live recorders by terminal URI (``serve --record``; finished ones leave).
    recorders: dict[str, Recorder] = attrs.field(factory=dict)
    #: True once the server stops taking terminals (shutting down): ``/readyz``
    #: answers 503 and ``createTerminal`` is refused (:mod:`ahp.server.drain`).
    draining: bool = False
    #: The connections open now (registered by the transport, for the drain's goodbye);
    #: ``sessions_changed`` is woken when one leaves.
    sessions: set[Session] = attrs.field(factory=set)
    sessions_changed: trio.lowlevel.ParkingLot = attrs.field(factory=trio.lowlevel.ParkingLot)
    #: Set by the drain's goodbye: every connection, and every new one, is closed with
    #: this (code, reason).
    going_away: tuple[int, str] | None = None

    @property
    def holder_only_input(self) -> bool:
        """Input and signals only from the claim's holder: the host's setting."""
        return self.host.holder_only_input

    @holder_only_input.setter
    def holder_only_input(self, value: bool) -> None:
        self.host.holder_only_input = value


#: Whether the reader's input dispatch takes a checkpoint (keystroke trick ``no_checkpoint``).
_DISPATCH_CHECKPOINT: Final = not keystroke.enabled("no_checkpoint")
#: C0 and C1 control characters and DEL: never part of a terminal URI we accept.
_CONTROL: Final = re.compile("[\x00-\x1f\x7f-\x9f]")
#: Longest piece of client input quoted back in an error message.
_QUOTE_LIMIT: Final = 200


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


def _short(text: str) -> str:
    """Client input as quoted in an error message: bounded, so a 10 MB URI is not echoed."""
    return text if len(text) <= _QUOTE_LIMIT else text[:_QUOTE_LIMIT] + "…"


def _token(params: Any) -> str | None:
    """The resume token of an initialize / reconnect request (``-32602`` if malformed)."""
    try:
        return resume_token(params)
    except ResumeTokenError as exc:
        path = f"$.params._meta[{RESUME_META!r}]"
        message = f"invalid params: {exc} at {path}"
        raise _Fail(ErrorCode.INVALID_PARAMS, message, {"path": path}) from None


class _Fail(Exception):
    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data


def _check_client_id(client_id: str) -> None:
    """``-32602`` past :data:`~ahp.reducers.core.MAX_CLIENT_ID` (issue 25: the id is
    repeated in every echo of the client's actions and in its claims)."""
    if len(client_id) > MAX_CLIENT_ID:
        raise _Fail(
            ErrorCode.INVALID_PARAMS,
            f"clientId is longer than {MAX_CLIENT_ID} characters",
            {"path": "$.params.clientId", "limit": MAX_CLIENT_ID},
        )


def _check_claim(claim: TerminalClaim, path: str) -> None:
    problem = claim_problem(claim)
    if problem is not None:
        field, message = problem
        raise _Fail(ErrorCode.INVALID_PARAMS, message, {"path": f"{path}.{field}"})


def _check_cwd(cwd: str) -> None:
    """``createTerminal.cwd``: an absolute path, or a ``file:`` URI of this machine."""

    def fail(why: str) -> NoReturn:
        raise _Fail(ErrorCode.INVALID_PARAMS, f"cwd {why}", {"path": "$.params.cwd"})

    if cwd.startswith("/"):
        return
    if not cwd.startswith("file:"):
        fail("must be a file:// URI or an absolute path")
    try:
        local_file_uri_to_path(cwd, socket.gethostname())
    except ValueError as exc:
        fail(f"is not a usable file:// URI: {_short(str(exc))}")


class _SessionLink:
    """The link of a session without a transport (tests, fuzzing): it always answers;
    evicting it stops the session (see :meth:`Session.stop`)."""

    def __init__(self, session: Session) -> None:
        self._session = session

    async def alive(self, timeout: float) -> bool:
        return True

    def evict(self, reason: str) -> None:
        self._session.stop(reason)


class Session:
    """The protocol side of one connection. Owns its subscriptions, not the outbox.

    Identity: the ``clientId`` a connection acts as is the one :meth:`take_identity`
    granted it at ``initialize`` / ``reconnect`` (:attr:`record`); every action it
    dispatches carries that id as its origin, and every claim rule is decided on it.
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
        #: :data:`READ_ONLY_METHODS`).
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

    def _begin(self, record: ClientRecord) -> None:
        self.record = record
        self.dialect = dialect_of(record.protocol_version)

    # -- frames ------------------------------------------------------------------------------

    def check_frame(self, frame: str | bytes) -> bool:
        """The decoding-cost check of :meth:`handle_frame` on its own; False when the
        frame is refused (answered ``-32700``). A transport may run it, let other tasks
        run, then call ``handle_frame(frame, checked=True)``: for a large frame each
        step takes tens of milliseconds."""
        try:
            _check_cost(frame)
        except ProtocolError as exc:
            self._error(None, exc.code, exc.message, {"path": exc.path})
            return False
        return True

    async def handle_frame(self, frame: str | bytes, *, checked: bool = False) -> None:
        """Handle one inbound frame; answers (if any) are queued on the outbox."""
        if self.stopped:
            return
        try:
            message = decode_message(_parse(frame, checked=checked))
        except ProtocolError as exc:
            self._error(None, exc.code, exc.message, {"path": exc.path})
            return
        if isinstance(message, JsonRpcRequest):
            await self._request(message)
        elif isinstance(message, JsonRpcNotification):
            await self._notification(message)
        # Responses from the client: a terminal host sends no requests; ignore.

    async def _respond(self, msg_id: JsonRpcId, result: Any) -> None:
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

    def _error(self, msg_id: JsonRpcId, code: int, message: str, data: Any = None) -> None:
        self.server.errors += 1
        self.outbox.put(
            encode_message(
                JsonRpcError(
                    id=msg_id, error=JsonRpcErrorObject(code=code, message=message, data=data)
                )
            )
        )

    async def _request(self, request: JsonRpcRequest) -> None:
        method = request.method
        if self.record is None and method not in PRE_HANDSHAKE:
            self._error(
                request.id, ErrorCode.METHOD_NOT_FOUND, f"{_short(method)!r} before initialize"
            )
            return
        if self.read_only and method not in READ_ONLY_METHODS:
            self._error(request.id, ErrorCode.PERMISSION_DENIED, READ_ONLY_REFUSAL)
            return
        # A notification method sent with an id is handled as a request: answered null,
        # or with the error its params deserve.
        handler = _REQUESTS.get(method) or _NOTIFICATIONS.get(method)
        if handler is None:
            self._error(
                request.id, ErrorCode.METHOD_NOT_FOUND, f"method {_short(method)!r} not found"
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
        except (_Fail, Refused) as fail:
            self._error(request.id, fail.code, fail.message, fail.data)
        except ProtocolError as exc:
            path = "$.params" + exc.path[1:]
            self._error(
                request.id,
                ErrorCode.INVALID_PARAMS,
                f"invalid params: {exc.message.rsplit(' at ', 1)[0]} at {path}",
                {"path": path},
            )
        except Exception:
            # A bug of ours, not the client's mistake: say so, keep the connection.
            log.exception("internal error handling %r", method)
            self._error(request.id, ErrorCode.INTERNAL_ERROR, "internal error")
        else:
            await self._respond(request.id, result)

    async def _notification(self, note: JsonRpcNotification) -> None:
        if self.record is None:
            return  # the reference drops notifications before the handshake
        handler = _NOTIFICATIONS.get(note.method)
        if handler is None:
            return
        try:
            await handler(self, note.params if note.params is not None else {})
        except (ProtocolError, _Fail) as exc:
            log.debug("ignored malformed %s notification: %s", note.method, exc)
        except Exception:
            log.exception("internal error handling a %r notification", note.method)

    # -- helpers -----------------------------------------------------------------------------

    def _snapshot(self, channel: str) -> Snapshot | None:
        if channel == ROOT_URI:
            return self.host.root_snapshot()
        if channel in self.host:
            return self.host.get(channel).snapshot()
        return None

    def _subscribe(self, channel: str) -> Snapshot | None:
        """Snapshot + registration in one synchronous step (ordering guarantee)."""
        snapshot = self._snapshot(channel)
        if snapshot is None:
            return None
        self.host.hub.subscribe(channel, self.outbox)
        self.subscriptions.add(channel)
        assert self.record is not None
        self.record.snapshot_seq[channel] = snapshot.fromSeq
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

    async def take_identity(self, client_id: str, token: str | None) -> None:
        """Decide whether this connection may act as ``client_id``; raise if not.

        One live connection per ``clientId``:

        * the record's resume token presented: granted; a live connection of the id is
          replaced (closed with :data:`REPLACED_CLOSE`);
        * a wrong token, or none for a *bound* record (its client asked for a token):
          refused, ``-32009``;
        * no token, the id unknown or its record disconnected: granted (the protocol's
          ``reconnect`` carries no other proof);
        * no token, the id live: its connection is pinged; if it answers within
          :data:`PROBE_TIMEOUT` it keeps the id and this one is refused (``-32009``),
          else it is taken for dead and replaced. While one claim probes, another for
          the same id is refused.
        """
        clients = self.server.clients
        record = clients.get(client_id)
        if record is None:
            return
        shown = _short(client_id)
        if token is not None and hmac.compare_digest(token.encode(), record.secret.encode()):
            if record.link is not None and record.connections:
                record.link.evict(REPLACED_CLOSE[1])
            return
        if token or record.bound:
            raise _Fail(
                ErrorCode.PERMISSION_DENIED,
                f"clientId {shown!r} is bound to its resume token: present the token its "
                f"initialize returned (params._meta[{RESUME_META!r}]) or use another clientId",
            )
        if not record.connections:
            return
        if client_id in clients.probing:
            raise _Fail(
                ErrorCode.PERMISSION_DENIED,
                f"another connection is claiming clientId {shown!r} now; try again later",
            )
        live = record.link
        clients.probing.add(client_id)
        try:
            answered = live is None or await live.alive(PROBE_TIMEOUT)
        finally:
            clients.probing.discard(client_id)
        if answered or clients.get(client_id) is not record or record.link is not live:
            raise _Fail(
                ErrorCode.PERMISSION_DENIED,
                f"clientId {shown!r} is in use by a live connection (it answered a ping): "
                "one connection per clientId; use another clientId",
            )
        assert live is not None
        log.info("client %s: its connection did not answer a ping; replaced", shown)
        live.evict(REPLACED_CLOSE[1])

    # -- requests ----------------------------------------------------------------------------

    async def _release_forgotten_claims(self) -> None:
        """Unclaim terminals held by clients the server has forgotten (gone for good).

        Why: a client claim is held by a connected client; one whose holder left
        long ago would be listed forever and refuse every other client's claim.
        Run when a client connects (before its snapshots), so a catalogue is never
        older than the records it is read with.
        """
        gone = set(self.server.clients.take_forgotten())
        if not gone:
            return
        for terminal in list(self.host.terminals.values()):
            claim = terminal.state.claim
            if isinstance(claim, ClientClaim) and claim.clientId in gone:
                log.info("%s: released the claim of gone client %r", terminal.uri, claim.clientId)
                await terminal.dispatch(TerminalClaimed(claim=ClientClaim(clientId="")), wait=True)
                if (audit := self.server.audit) is not None:
                    audit.event(
                        "claim",
                        terminal=terminal.uri,
                        by=None,
                        claim=unstructure(terminal.state.claim, TerminalClaim),
                        previous=unstructure(claim, TerminalClaim),
                        accepted=True,
                        reason="the holder is gone",
                    )

    async def _ping(self, params: Any) -> None:
        return None

    async def _initialize(self, params: Any) -> Any:
        if self.record is not None:
            raise _Fail(ErrorCode.METHOD_NOT_FOUND, "already initialized")
        p = structure(params, InitializeParams)
        _check_client_id(p.clientId)
        version = negotiate(p.protocolVersions)
        if (audit := self.server.audit) is not None:
            audit.initialize(p.clientId, version, p.protocolVersions, peer=self.peer)
        if version is None:
            self.close_request = (1002, "unsupported protocol version")
            raise _Fail(
                ErrorCode.UNSUPPORTED_PROTOCOL_VERSION,
                "unsupported protocol version; this host speaks 0.3 to 0.10 and 1.x",
                {"supportedVersions": list(SUPPORTED_VERSIONS)},
            )
        if p.clientInfo is not None:
            log.debug("client %s is %s %s", p.clientId, p.clientInfo.name, p.clientInfo.version)
        self._check_read_only_id(p.clientId)
        token = _token(params)
        await self.take_identity(p.clientId, token)
        bound = token is not None  # (asked for a token: only it resumes this id)
        record = self.server.clients.connect(
            p.clientId, version, self.link, bound=bound, read_only=self.read_only
        )
        self._begin(record)
        await self._release_forgotten_claims()
        snapshots = [s for s in map(self._subscribe, dict.fromkeys(p.initialSubscriptions)) if s]
        result = InitializeResult(
            protocolVersion=version,
            serverSeq=self.host.hub.seq,
            snapshots=tuple(snapshots),
            defaultDirectory=self.server.default_directory,
            serverInfo=SERVER_INFO if self.dialect is Dialect.V1 else None,
        )
        out = result_json(result, self.dialect)
        meta: dict[str, Any] = {}
        if self.read_only:
            meta[READ_ONLY_META] = True
        if token is not None:
            meta[RESUME_META] = record.secret
        if meta:
            out["_meta"] = meta
        return out

    def _check_read_only_id(self, client_id: str) -> None:
        """A read-only connection may not take the id (and so the record, the replay
        cursor and the broadcasts) of a client admitted with the full token."""
        if not self.read_only:
            return
        known = self.server.clients.get(client_id)
        if known is not None and not known.read_only:
            raise _Fail(
                ErrorCode.PERMISSION_DENIED,
                f"client id {_short(client_id)!r} belongs to a client with full access",
            )

    async def _reconnect(self, params: Any) -> Any:
        if self.record is not None:
            raise _Fail(ErrorCode.METHOD_NOT_FOUND, "already initialized")
        form = reconnect_form(params)
        p = structure(params, form)
        _check_client_id(p.clientId)
        if self.read_only:
            self._check_read_only_id(p.clientId)
        await self.take_identity(p.clientId, _token(params))
        record = self.server.clients.resume(p.clientId, self.link)
        if (audit := self.server.audit) is not None:
            version = record.protocol_version if record is not None else None
            audit.initialize(p.clientId, version, peer=self.peer, reconnect=True)
        await self._release_forgotten_claims()
        if record is None:
            raise _Fail(ErrorCode.NOT_FOUND, "Reconnect client not found")
        self._begin(record)
        if isinstance(p, ReconnectCursorParams):
            return self._recover_channels(p, record)
        assert isinstance(p, ReconnectParams)
        requested = list(dict.fromkeys(p.subscriptions))
        valid = [c for c in requested if c == ROOT_URI or c in self.host]
        missing = [c for c in requested if c not in valid]
        log_ = self.host.hub.log
        # Windowed delivery is never granted here, so no windowed subscription resumes.
        windows = ResumedWindows(items=()) if p.windows is not None else None
        result: ReconnectReplay | ReconnectSnapshot
        if log_.can_replay_after(p.lastSeenServerSeq):
            floors = {c: record.snapshot_seq.get(c, 0) for c in valid}
            actions = tuple(
                envelope_json(envelope, self.dialect)
                for envelope in log_.after(p.lastSeenServerSeq, valid)
                if envelope.serverSeq > floors[envelope.channel]
            )
            for channel in valid:
                self.host.hub.subscribe(channel, self.outbox)
                self.subscriptions.add(channel)
            result = ReconnectReplay(
                type="replay", actions=actions, missing=tuple(missing), windows=windows
            )
        else:
            snapshots = tuple(s for s in map(self._subscribe, valid) if s)
            result = ReconnectSnapshot(
                type="snapshot",
                snapshots=snapshots,
                # (1.x: the channels that cannot be resumed; 0.5 had no such field here.)
                missing=tuple(missing) if self.dialect is Dialect.V1 else None,
                windows=windows,
            )
        return result_json(result, self.dialect)

    def _recover_channels(self, p: ReconnectCursorParams, record: ClientRecord) -> Any:
        """Reconnect form B: one replay, snapshot or missing entry per requested channel,
        each from its own cursor (a snapshot when the cursor is 0 or too old)."""
        cursors: dict[str, int] = {}
        for cursor in p.subscriptions:
            cursors.setdefault(cursor.channel, cursor.lastSeenServerSeq)
        log_ = self.host.hub.log
        replayable = {
            c: max(seq, record.snapshot_seq.get(c, 0))
            for c, seq in cursors.items()
            if (c == ROOT_URI or c in self.host) and seq > 0 and log_.can_replay_after(seq)
        }
        replays: dict[str, list[Any]] = {c: [] for c in replayable}
        if replayable:
            for envelope in log_.after(min(replayable.values()), replayable):
                if envelope.serverSeq > replayable[envelope.channel]:
                    replays[envelope.channel].append(envelope_json(envelope, self.dialect))
        channels: list[ChannelRecovery] = []
        for channel in cursors:
            if channel in replays:
                self.host.hub.subscribe(channel, self.outbox)
                self.subscriptions.add(channel)
                channels.append(ChannelReplay(channel=channel, actions=tuple(replays[channel])))
                continue
            snapshot = self._subscribe(channel)
            if snapshot is None:
                channels.append(ChannelMissing(channel=channel))
            else:
                channels.append(ChannelSnapshot(channel=channel, snapshot=snapshot))
        return result_json(ReconnectChannels(channels=tuple(channels)), self.dialect)

    async def _subscribe_request(self, params: Any) -> Any:
        p = structure(params, ChannelParams)
        snapshot = self._subscribe(p.channel)
        if snapshot is None:
            raise _Fail(ErrorCode.NOT_FOUND, f"Resource not found: {_short(p.channel)}")
        # Windowed delivery (``flowControl``) is declined by leaving it out.
        return result_json(SubscribeResult(snapshot=snapshot), self.dialect)

    async def _create_terminal(self, params: Any) -> None:
        p = structure(params, CreateTerminalParams)
        audit = self.server.audit
        if audit is None:
            await self._create(p)
            return
        fields = {
            "terminal": p.channel,
            "by": self.client_id,
            "name": p.name,
            "cwd": p.cwd,
            "claim": unstructure(p.claim, TerminalClaim) if p.claim is not None else None,
        }
        actor = ACTOR.set(self.client_id)
        try:
            await self._create(p)
        except _Fail as fail:
            audit.event("terminal.created", **fields, error=fail.message)
            raise
        finally:
            ACTOR.reset(actor)
        audit.event("terminal.created", **fields)

    async def _create(self, p: CreateTerminalParams) -> None:
        if not p.channel.startswith(TERMINAL_SCHEME) or len(p.channel) <= len(TERMINAL_SCHEME):
            raise _Fail(
                ErrorCode.INVALID_PARAMS,
                f"terminal channels use the {TERMINAL_SCHEME} scheme",
                {"path": "$.params.channel"},
            )
        if len(p.channel) > MAX_URI:
            raise _Fail(
                ErrorCode.INVALID_PARAMS,
                f"a terminal URI is at most {MAX_URI} characters",
                {"path": "$.params.channel", "limit": MAX_URI},
            )
        _check_claim(p.claim, "$.params.claim")
        if _CONTROL.search(p.channel):
            raise _Fail(
                ErrorCode.INVALID_PARAMS,
                "a terminal URI must not contain control characters",
                {"path": "$.params.channel"},
            )
        for name, value in (("cols", p.cols), ("rows", p.rows)):
            if value is not None and not 1 <= value <= MAX_DIMENSION:
                raise _Fail(
                    ErrorCode.INVALID_PARAMS,
                    f"{name} must be between 1 and {MAX_DIMENSION}",
                    {"path": f"$.params.{name}"},
                )
        if p.cwd is not None:
            _check_cwd(p.cwd)
        server = self.server
        if server.draining:
            raise _Fail(SERVER_LIMIT, "draining", {"reason": "the server is shutting down"})
        if len(self.host.terminals) + server.creating >= server.max_terminals:
            raise _Fail(
                SERVER_LIMIT,
                f"terminal limit reached: this server hosts at most {server.max_terminals} "
                "terminals (serve --max-terminals); dispose one first",
                {"limit": server.max_terminals},
            )
        server.creating += 1
        try:
            await self.host.create_terminal(
                p.channel,
                claim=p.claim,
                name=p.name,
                cwd=p.cwd,
                cols=p.cols or 80,
                rows=p.rows or 24,
            )
        except TerminalExists as exc:
            raise _Fail(ErrorCode.ALREADY_EXISTS, _short(str(exc))) from None
        except (SpawnError, OSError) as exc:
            cause = exc if isinstance(exc, OSError) else exc.__cause__
            if isinstance(cause, OSError) and cause.errno in _EXHAUSTED:
                raise _Fail(
                    SERVER_LIMIT,
                    f"the server is out of resources ({os.strerror(cause.errno or 0)}); "
                    "try again later",
                    {"errno": errno.errorcode.get(cause.errno or 0, "")},
                ) from None
            if isinstance(exc, OSError):
                raise
            raise _Fail(ErrorCode.INVALID_PARAMS, _short(str(exc)), {"path": "$.params"}) from None
        finally:
            server.creating -= 1

    async def _dispose_terminal(self, params: Any) -> None:
        p = structure(params, ChannelParams)
        audit = self.server.audit
        if p.channel in self.host:
            # The policy table's dispose row, for this connection's own identity.
            why = self.host.get(p.channel).refusal(Change.DISPOSE, self.client_id)
            if why is not None:
                if audit is not None:
                    audit.event(
                        "terminal.disposed", terminal=p.channel, by=self.client_id, error=why
                    )
                raise _Fail(ErrorCode.PERMISSION_DENIED, why)
        actor = ACTOR.set(self.client_id) if audit is not None else None
        try:
            await self.host.dispose(p.channel)
        except TerminalNotFound:
            message = f"no terminal {_short(p.channel)!r}"
            if audit is not None:
                audit.event(
                    "terminal.disposed", terminal=p.channel, by=self.client_id, error=message
                )
            raise _Fail(ErrorCode.NOT_FOUND, message) from None
        finally:
            if actor is not None:
                ACTOR.reset(actor)
        self.subscriptions.discard(p.channel)
        if audit is not None:
            audit.event("terminal.disposed", terminal=p.channel, by=self.client_id)

    async def _list_sessions(self, params: Any) -> Any:
        p = structure(params, ListSessionsParams)
        if p.cursor is not None:
            # This host has no sessions, so it never hands out a cursor to come back with.
            raise _Fail(ErrorCode.INVALID_PARAMS, "unknown cursor", {"path": "$.params.cursor"})
        return result_json(ListSessionsResult(items=()), self.dialect)

    # -- notifications -----------------------------------------------------------------------

    async def _unsubscribe(self, params: Any) -> None:
        p = structure(params, ChannelParams)
        if p.channel in self.subscriptions:
            self.subscriptions.discard(p.channel)
            self.host.hub.unsubscribe(p.channel, self.outbox)

    async def _dispatch_action(self, params: Any) -> None:
        assert self.record is not None
        if self.read_only:
            self._refuse_read_only(params)
            return
        # Keystrokes are the hot, latency-bound case: when the params are exactly what
        # structuring would accept for a terminal/input, build the action directly
        # (the same values the converter would produce; extra keys are ignored by both).
        if (
            type(params) is dict
            and type(channel := params.get("channel")) is str
            and type(client_seq := params.get("clientSeq")) is int
            and type(raw := params.get("action")) is dict
            and raw.get("type") == "terminal/input"
            and type(data := raw.get("data")) is str
            and channel != ROOT_URI
            and channel in self.host
        ):
            origin = ActionOrigin(clientId=self.record.client_id, clientSeq=client_seq)
            terminal = self.host.get(channel)
            if (audit := self.server.audit) is not None:
                refused = terminal.input_refused(origin.clientId)
                audit.input(channel, origin.clientId, data, refused=refused)
            # (The connection's reader checkpoints when it waits for the next frame.)
            await terminal.dispatch(
                TerminalInput(data=data),
                origin=origin,
                sender=self.outbox,
                checkpoint=_DISPATCH_CHECKPOINT,
            )
            if self.host.hub.flooded(channel) is not None:
                await self.host.hub.wait_readers(channel)  # (the flood rule: the sender pays)
            return
        p = structure(params, DispatchActionParams)
        origin = ActionOrigin(clientId=self.record.client_id, clientSeq=p.clientSeq)
        channel = p.channel
        try:
            action: StateAction = structure_action(p.action)
            problem = None
        except ProtocolError as exc:
            action = UnknownAction(raw=p.action)
            problem = f"malformed action: {exc.message}"
        hub = self.host.hub
        if channel == ROOT_URI:
            if isinstance(action, RootConfigChanged) and len(dumps_utf8(p.action)) > (
                MAX_CONFIG_BYTES
            ):
                # Refused, and echoed without its config: the sender has it, and a
                # rejection need not cost the size of what it refuses.
                action = RootConfigChanged(config={}, replace=action.replace)
                problem = f"root/configChanged larger than {MAX_CONFIG_BYTES} bytes (not echoed)"
            if isinstance(action, RootConfigChanged) and (audit := self.server.audit):
                audit.event(
                    "config",
                    by=origin.clientId,
                    keys=sorted(str(k) for k in action.config)[:_AUDIT_KEYS],
                    replace=action.replace,
                    accepted=problem is None,
                )
            if problem is None and isinstance(action, RootConfigChanged):
                # A terminal host has no config: the merge is a no-op, echoed as applied.
                hub.publish(ROOT_URI, action, origin)
            else:
                hub.reject(
                    self.outbox,
                    channel,
                    action,
                    origin,
                    problem or f"{action_type(action)!r} cannot be dispatched by a client",
                )
                # Mirrors that apply rejected envelopes too (the upstream TS one) get
                # the true value back, as after a terminal rejection.
                if (heal := heal_root(self.host.root_state, action)) is not None:
                    hub.send_to(self.outbox, ROOT_URI, heal)
            await self._pay_for(ROOT_URI)
            return
        if channel not in self.host:
            # Unknown (never created, or disposed): rejected to the sender, whose
            # client may be waiting for the echo (the reference sends nothing at all).
            hub.reject(
                self.outbox,
                channel,
                rejected_echo(action),
                origin,
                f"no terminal {_short(channel)!r} on this server (never created, or disposed)",
            )
            return
        if problem is not None:
            hub.reject(self.outbox, channel, action, origin, problem)
            return
        terminal = self.host.get(channel)
        if (
            self.dialect is Dialect.V05
            and isinstance(action, TerminalClaimed)
            and isinstance(claim := action.claim, SessionClaim)
            and claim.chat is None
            and isinstance(current := terminal.state.claim, SessionClaim)
            and current.session == claim.session
            and current.chat is not None
        ):
            action = TerminalClaimed(claim=attrs.evolve(claim, chat=current.chat))
        audit = self.server.audit
        if audit is not None and isinstance(action, TerminalClaimed | TerminalInput):
            await self._audited_dispatch(audit, terminal, action, origin)
            return
        await terminal.dispatch(action, origin=origin, sender=self.outbox)
        await self._pay_for(channel)

    async def _pay_for(self, channel: str) -> None:
        """The flood rule (:meth:`ahp.engine.hub.Hub.wait_readers`): this connection's
        next frame waits while a reader of ``channel`` is behind on what was sent."""
        if self.host.hub.flooded(channel) is not None:
            await self.host.hub.wait_readers(channel)

    def _refuse_read_only(self, params: Any) -> None:
        """Every dispatch of a read-only connection: rejected to it (with the true value
        after it, as for any rejection), never applied."""
        assert self.record is not None
        p = structure(params, DispatchActionParams)
        origin = ActionOrigin(clientId=self.record.client_id, clientSeq=p.clientSeq)
        try:
            action: StateAction = structure_action(p.action)
        except ProtocolError:
            action = UnknownAction(raw=p.action)
        hub = self.host.hub
        if p.channel == ROOT_URI:
            hub.reject(self.outbox, ROOT_URI, action, origin, READ_ONLY_REFUSAL)
            if (heal := heal_root(self.host.root_state, action)) is not None:
                hub.send_to(self.outbox, ROOT_URI, heal)
        elif p.channel in self.host:
            hub.reject(self.outbox, p.channel, rejected_echo(action), origin, READ_ONLY_REFUSAL)
            if (heal := heal_terminal(self.host.get(p.channel).state, action)) is not None:
                hub.send_to(self.outbox, p.channel, heal)

    async def _audited_dispatch(
        self,
        audit: AuditLog,
        terminal: Terminal,
        action: TerminalClaimed | TerminalInput,
        origin: ActionOrigin,
    ) -> None:
        """Dispatch a claim or input with its audit line: a claim is waited for, so
        the line says whether the terminal took it."""
        if isinstance(action, TerminalInput):
            refused = terminal.input_refused(origin.clientId)
            audit.input(terminal.uri, origin.clientId, action.data, refused=refused)
            await terminal.dispatch(action, origin=origin, sender=self.outbox)
            return
        previous = terminal.state.claim
        await terminal.dispatch(action, origin=origin, sender=self.outbox, wait=True)
        audit.event(
            "claim",
            terminal=terminal.uri,
            by=origin.clientId,
            claim=unstructure(action.claim, TerminalClaim),
            previous=unstructure(previous, TerminalClaim),
            accepted=terminal.state.claim == action.claim,
        )


_REQUESTS: dict[str, Callable[[Session, Any], Awaitable[Any]]] = {
    "ping": Session._ping,
    "initialize": Session._initialize,
    "reconnect": Session._reconnect,
    "subscribe": Session._subscribe_request,
    "createTerminal": Session._create_terminal,
    "disposeTerminal": Session._dispose_terminal,
    "listSessions": Session._list_sessions,
    # The x-ahp-terminals/* process extension (ahp.server.processes).
    **PROCESS_REQUESTS,
}
_NOTIFICATIONS: dict[str, Callable[[Session, Any], Awaitable[None]]] = {
    "unsubscribe": Session._unsubscribe,
    "dispatchAction": Session._dispatch_action,
}
