"""A Trio AHP client: handshake, requests, channel mirrors, automatic reconnect.

Why: tests, the ``attach``/``ls``/``run`` commands and remote agents all need
the same careful client — one that matches responses to requests, keeps a
mirror per subscribed channel folded with the project's own reducers, and
survives a dropped connection by ``reconnect``-ing with the last
``serverSeq`` it saw (the server answers with a replay or fresh snapshots).

Tasks and ownership: :func:`connect` owns a nursery with one connection task
(connect, read, reconnect) for the lifetime of the ``async with`` block. A
request whose connection drops before its answer raises
:class:`ConnectionLost` (it may or may not have been applied); dispatched
actions that were pending are dropped on reconnect, as AHP specifies.

Buffering: inbound frames are applied as they arrive (no queue beyond the
WebSocket library's one-message buffer); :meth:`Client.changes` waiters are
woken after each applied envelope.

Versions: ``initialize`` offers the 1.x family first and the 0.5 family after
it (``["1.0.0", "0.9.0", "0.5.0"]``): a host picks the highest it speaks. A host
that refuses the whole offer with ``-32005`` is asked once more, on a new
connection, with the 0.5 family alone. The mirrors read both dialects (the
codec reads ``exitCode`` and ``lifecycle`` alike), and actions are written in
the negotiated one (:attr:`Client.dialect`). ``reconnect`` uses the
connection-wide cursor (form A, understood by 0.5 and 1.x hosts) unless
``reconnect_form="cursors"`` asks for per-channel cursors (1.x form B); a 1.x
host that answers form A with ``-32602`` is asked again with form B.
"""

from __future__ import annotations

import itertools
import logging
import secrets
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any, Final, Literal
from urllib.parse import SplitResult, parse_qs, urlencode, urlsplit, urlunsplit

import trio

from ahp import __version__
from ahp.client.errors import ClientError, ConnectionLost, RpcError
from ahp.client.mirror import Mirror
from ahp.client.remote import RemoteTerminal
from ahp.protocol.actions import ActionEnvelope, StateAction, TerminalInput
from ahp.protocol.codec import (
    ProtocolError,
    decode_message,
    encode_message,
    structure,
)
from ahp.protocol.commands import (
    RESUME_META,
    ChannelMissing,
    ChannelReplay,
    ReconnectChannels,
)
from ahp.protocol.dialect import LEGACY_VERSIONS, MODERN_VERSIONS, Dialect, action_json, dialect_of
from ahp.protocol.jsonrpc import (
    JsonRpcError,
    JsonRpcNotification,
    JsonRpcRequest,
    JsonRpcSuccess,
)
from ahp.protocol.state import (
    ROOT_URI,
    ChannelState,
    OpaqueState,
    RootState,
    Snapshot,
    TerminalState,
)
from ahp.reducers import DEFAULT_SCROLLBACK
from ahp.run import CommandRegistry, CommandResult
from ahp.vt.screen import ScreenModel
from ahp.ws import (
    ConnectionClosed,
    ConnectionRejected,
    HandshakeError,
    WebSocketConnection,
    close_transport,
    wrap_client_stream,
)

__all__ = ["Client", "ClientError", "ConnectionLost", "RpcError", "connect"]

log = logging.getLogger("ahp.client")

#: What ``initialize`` offers: the 1.x family first, then the 0.5 family.
PROTOCOL_VERSIONS: Final = (*MODERN_VERSIONS, *LEGACY_VERSIONS)
ReconnectForm = Literal["watermark", "cursors"]
#: Largest inbound message (a big snapshot or replay); the server's default outbox is 16 MiB.
MAX_MESSAGE_SIZE: Final = 512 * 1024 * 1024
RECEIVE_BUFFER: Final = 256 * 1024
#: Seconds to open the transport, finish TLS and the WebSocket upgrade.
CONNECT_TIMEOUT: Final = 10.0
RECONNECT_DELAYS: Final = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0)


def _first_leaf(exc: BaseException) -> BaseException:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def _with_token(url: str, token: str | None) -> str:
    if token is None:
        return url
    parts = urlsplit(url)
    query = {k: v[0] for k, v in parse_qs(parts.query).items()}
    query["tkn"] = token
    return urlunsplit(parts._replace(query=urlencode(query)))


class Client:
    """A connected AHP client; obtain one with :func:`connect`."""

    def __init__(
        self,
        url: str,
        *,
        token: str | None,
        client_id: str,
        auto_reconnect: bool,
        scrollback: int | None = DEFAULT_SCROLLBACK,
        ssl_context: ssl.SSLContext | None = None,
        connect_timeout: float = CONNECT_TIMEOUT,
        protocol_versions: Sequence[str] = PROTOCOL_VERSIONS,
        reconnect_form: ReconnectForm = "watermark",
    ) -> None:
        self.scrollback = scrollback
        #: What ``initialize`` offers, most preferred first.
        self.protocol_versions = tuple(protocol_versions)
        #: ``reconnect`` form: one connection-wide cursor, or one cursor per channel (1.x).
        self.reconnect_form: ReconnectForm = reconnect_form
        self.connect_timeout = connect_timeout
        #: For ``wss://`` (default: the system's trusted CAs, hostname checked).
        self.ssl_context = ssl_context
        self.url = _with_token(url, token)
        self.client_id = client_id
        #: The host's resume token for this client (from ``initialize``; None if the
        #: host hands out none): presented at every reconnect.
        self.resume_token: str | None = None
        self.auto_reconnect = auto_reconnect
        self.mirrors: dict[str, Mirror] = {}
        self.protocol_version: str | None = None
        #: The wire shape negotiated (how actions are written).
        self.dialect = Dialect.V05
        self.default_directory: str | None = None
        self.last_seen_seq = 0
        self.reconnects = 0
        self._ids = itertools.count(1)
        self._client_seq = itertools.count(1)
        self._waiting: dict[int, tuple[trio.Event, list[Any]]] = {}
        self._ws: WebSocketConnection | None = None
        self._connected = trio.Event()
        self._changed = trio.lowlevel.ParkingLot()
        self._closing = False
        #: Why the connection is gone for good (no reconnect will follow), else None.
        self._lost: str | None = None
        self._nursery: trio.Nursery | None = None
        #: Screen models of :meth:`RemoteTerminal.screen`, per channel.
        self.screen_models: dict[str, ScreenModel] = {}
        #: Recent command handles of :meth:`RemoteTerminal.command`, per channel.
        self.command_registries: dict[str, CommandRegistry] = {}
        #: Whether the server answers the ``x-ahp-terminals/*`` process requests
        #: (:mod:`ahp.protocol.processes`): None until the first one is answered,
        #: and again after a reconnect (the server may have changed).
        self.process_extension: bool | None = None
        self._listeners: list[Callable[[ActionEnvelope], None]] = []
        self._released: dict[int, tuple[trio.Event, trio.Event]] = {}

    # -- state -------------------------------------------------------------------------------

    def state(self, channel: str) -> ChannelState:
        """The mirrored state of a subscribed channel (KeyError if not subscribed)."""
        return self.mirrors[channel].state

    def terminal_state(self, channel: str) -> TerminalState:
        state = self.state(channel)
        assert isinstance(state, TerminalState)
        return state

    @property
    def connected(self) -> bool:
        """Whether a connection is open now (False between a drop and its reconnect)."""
        return self._ws is not None

    @property
    def root(self) -> RootState:
        state = self.state(ROOT_URI)
        assert isinstance(state, RootState)
        return state

    async def wait_for(
        self, predicate: Callable[[], bool], *, timeout: float | None = None
    ) -> None:
        """Wait until ``predicate()`` holds (re-checked after every applied envelope).

        Raises :class:`ConnectionLost` once the connection is gone for good (no
        automatic reconnect, or the client is closing) and ``predicate()`` still
        does not hold: nothing could make it hold any more.
        """
        with trio.fail_after(timeout) if timeout is not None else trio.CancelScope():
            while not predicate():
                if self._lost is not None:
                    raise ConnectionLost(self._lost)
                await self._changed.park()

    def spawn_task(self, fn: Callable[[], Awaitable[None]]) -> None:
        """Run ``fn`` in the client's nursery (cancelled when the client closes)."""
        if self._nursery is None:
            raise ClientError("the client is not connected")
        self._nursery.start_soon(fn)

    def on_envelope(self, callback: Callable[[ActionEnvelope], None]) -> Callable[[], None]:
        """Call ``callback`` for every applied envelope; returns an unregister function."""
        self._listeners.append(callback)
        return lambda: self._listeners.remove(callback)

    # -- requests ----------------------------------------------------------------------------

    async def _send(self, text: str) -> None:
        """Send once connected; during a reconnect this waits for it. Raises
        :class:`ConnectionLost` when there will be no connection any more."""
        await self._connected.wait()
        ws = self._ws
        if ws is None:  # closed for good (closing, or no automatic reconnect)
            raise ConnectionLost("connection closed")
        try:
            await ws.send_message(text)
        except ConnectionClosed:
            raise ConnectionLost("connection closed") from None

    async def request(self, method: str, params: Mapping[str, Any] | None = None) -> Any:
        """Send a request and return its result; raises :class:`RpcError` on an error answer."""
        await self._connected.wait()
        return await self._request_now(method, dict(params or {}))

    async def _request_now(self, method: str, params: dict[str, Any]) -> Any:
        msg_id = next(self._ids)
        done = trio.Event()
        slot: list[Any] = []
        self._waiting[msg_id] = (done, slot)
        try:
            ws = self._ws
            if ws is None:
                raise ConnectionLost("not connected")
            try:
                await ws.send_message(
                    encode_message(JsonRpcRequest(id=msg_id, method=method, params=params))
                )
            except ConnectionClosed:
                raise ConnectionLost("connection closed") from None
            await done.wait()
        finally:
            self._waiting.pop(msg_id, None)
        answer = slot[0]
        if isinstance(answer, JsonRpcError):
            raise RpcError(answer.error.code, answer.error.message, answer.error.data)
        if isinstance(answer, ConnectionLost):
            raise answer
        assert isinstance(answer, JsonRpcSuccess)
        return answer.result

    async def notify(self, method: str, params: Mapping[str, Any]) -> None:
        await self._send(encode_message(JsonRpcNotification(method=method, params=dict(params))))

    async def ping(self) -> None:
        await self.request("ping", {"channel": ROOT_URI})

    async def subscribe(self, channel: str) -> ChannelState:
        result = await self.request("subscribe", {"channel": channel})
        snapshot = structure(result["snapshot"], Snapshot)
        self._install(snapshot)
        return self.state(channel)

    async def unsubscribe(self, channel: str) -> None:
        self.mirrors.pop(channel, None)
        await self.notify("unsubscribe", {"channel": channel})

    async def dispatch(self, channel: str, action: StateAction) -> int:
        """Dispatch a client action (write-ahead: applied to :meth:`state` until echoed)."""
        client_seq = next(self._client_seq)
        mirror = self.mirrors.get(channel)
        if mirror is not None:
            mirror.add_pending(client_seq, action)
        await self.notify(
            "dispatchAction",
            {
                "channel": channel,
                "clientSeq": client_seq,
                "action": action_json(action, self.dialect),
            },
        )
        return client_seq

    async def create_terminal(
        self,
        channel: str,
        *,
        claim: Mapping[str, Any] | None = None,
        name: str | None = None,
        cwd: str | None = None,
        cols: int | None = None,
        rows: int | None = None,
        subscribe: bool = True,
    ) -> None:
        params: dict[str, Any] = {
            "channel": channel,
            "claim": dict(claim)
            if claim is not None
            else {"kind": "client", "clientId": self.client_id},
        }
        for key, value in (("name", name), ("cwd", cwd), ("cols", cols), ("rows", rows)):
            if value is not None:
                params[key] = value
        await self.request("createTerminal", params)
        if subscribe:
            await self.subscribe(channel)

    def terminal(self, channel: str) -> RemoteTerminal:
        """The in-process-like surface of a subscribed terminal (``run``, ``send_input``…)."""
        if channel not in self.mirrors:
            raise KeyError(f"not subscribed to {channel!r}")
        return RemoteTerminal(self, channel)

    async def run(
        self,
        channel: str,
        command_line: str,
        *,
        timeout: float | None = None,
        max_output_bytes: int | None = None,
    ) -> CommandResult:
        """Run one command in a subscribed terminal (see :meth:`RemoteTerminal.run`)."""
        return await self.terminal(channel).run(
            command_line, timeout=timeout, max_output_bytes=max_output_bytes
        )

    async def send_input(self, channel: str, data: str) -> None:
        await self.dispatch(channel, TerminalInput(data=data))

    async def dispose_terminal(self, channel: str) -> None:
        await self.request("disposeTerminal", {"channel": channel})
        self.mirrors.pop(channel, None)

    # -- inbound -----------------------------------------------------------------------------

    def _install(self, snapshot: Snapshot) -> None:
        state = snapshot.state
        if isinstance(state, OpaqueState):
            log.warning("ignored a snapshot of an unsupported channel %r", snapshot.resource)
            return
        mirror = self.mirrors.get(snapshot.resource)
        if mirror is None:
            self.mirrors[snapshot.resource] = Mirror(
                snapshot.resource,
                state,
                snapshot.fromSeq,
                self.client_id,
                scrollback=self.scrollback,
            )
        else:
            mirror.reset(state, snapshot.fromSeq)
        self._changed.unpark_all()

    def _apply(self, envelope: ActionEnvelope) -> None:
        self.last_seen_seq = max(self.last_seen_seq, envelope.serverSeq)
        mirror = self.mirrors.get(envelope.channel)
        if mirror is not None:
            mirror.apply(envelope)
        for listener in list(self._listeners):
            listener(envelope)
        self._changed.unpark_all()

    def _handle(self, frame: str | bytes) -> None:
        try:
            message = decode_message(frame)
        except ProtocolError as exc:
            log.warning("ignored a malformed frame from the server: %s", exc)
            return
        if isinstance(message, JsonRpcSuccess | JsonRpcError):
            waiter = self._waiting.get(message.id) if isinstance(message.id, int) else None
            if waiter is not None:
                waiter[1].append(message)
                waiter[0].set()
        elif isinstance(message, JsonRpcNotification) and message.method == "action":
            try:
                envelope = structure(message.params, ActionEnvelope)
            except ProtocolError as exc:
                log.warning("ignored a malformed envelope: %s", exc)
                return
            self._apply(envelope)

    # -- connection --------------------------------------------------------------------------

    async def _open(self, nursery: trio.Nursery) -> WebSocketConnection:
        """Open one WebSocket connection, held by a task in ``nursery``.

        The connection lives in its own inner nursery, so a refused or failed
        handshake surfaces here as one :class:`ClientError`, never as an
        exception group escaping into the caller's nursery.
        """
        ws: WebSocketConnection = await nursery.start(self._hold_connection)
        return ws

    async def _open_transport(
        self, parts: SplitResult
    ) -> tuple[trio.SocketStream | trio.SSLStream[trio.SocketStream], str, str]:
        """The stream for ``parts`` (TLS handshake done), its ``Host`` and target."""
        query = f"?{parts.query}" if parts.query else ""
        target = (parts.path or "/") + query
        host_header = parts.netloc.rpartition("@")[2]
        if parts.scheme == "ws+unix":
            path, _, resource = (parts.netloc or parts.path).partition(":")
            return await trio.open_unix_socket(path), "localhost", (resource or "/") + query
        if parts.scheme == "ws" and parts.hostname:
            return await trio.open_tcp_stream(parts.hostname, parts.port or 80), host_header, target
        if parts.scheme == "wss" and parts.hostname:
            tls = await trio.open_ssl_over_tcp_stream(
                parts.hostname,
                parts.port or 443,
                ssl_context=self.ssl_context or ssl.create_default_context(),
                https_compatible=True,
            )
            try:
                # Here, not lazily inside trio-websocket: its handshake waits forever
                # when the first write fails (as it does for a certificate that does
                # not verify).
                await tls.do_handshake()
            except BaseException:
                with trio.CancelScope(shield=True):
                    await tls.aclose()
                raise
            return tls, host_header, target
        raise ClientError(f"unsupported URL {parts.scheme}://…: use ws://, wss:// or ws+unix://")

    async def _hold_connection(self, *, task_status: trio.TaskStatus[WebSocketConnection]) -> None:
        parts = urlsplit(self.url)
        started = False
        stream: trio.abc.Stream | None = None
        try:
            async with trio.open_nursery() as inner:
                # We open the transport ourselves so that a refused handshake closes it.
                with trio.fail_after(self.connect_timeout):
                    stream, host_header, target = await self._open_transport(parts)
                    ws = await wrap_client_stream(
                        inner,
                        stream,
                        host_header,
                        target,
                        max_message_size=MAX_MESSAGE_SIZE,
                        receive_buffer_size=RECEIVE_BUFFER,
                    )
                done = trio.Event()
                finished = trio.Event()
                self._released[id(ws)] = (done, finished)
                started = True
                task_status.started(ws)
                try:
                    await done.wait()
                finally:
                    with trio.CancelScope(shield=True):
                        with trio.move_on_after(1):
                            await ws.aclose()  # the close handshake, while the reader runs
                        await close_transport(ws)
                    self._released.pop(id(ws), None)
                    finished.set()
                    inner.cancel_scope.cancel()
        except (
            ExceptionGroup,
            ConnectionRejected,
            HandshakeError,
            OSError,
            ConnectionClosed,
            trio.BrokenResourceError,  # e.g. a TLS certificate that does not verify
            trio.TooSlowError,
        ) as exc:
            if stream is not None and not started:
                with trio.CancelScope(shield=True):
                    await stream.aclose()
            leaf = _first_leaf(exc)
            if not isinstance(
                leaf,
                ConnectionRejected
                | HandshakeError
                | OSError
                | ConnectionClosed
                | trio.BrokenResourceError
                | trio.TooSlowError,
            ):
                raise
            if started:
                return  # the connection broke later: the reader reports it
            if isinstance(leaf, ConnectionRejected):
                body = (leaf.body or b"").decode(errors="replace").strip()
                raise ClientError(
                    f"connection refused by the server: HTTP {leaf.status_code} {body}"
                ) from None
            where = f"{parts.scheme}://{parts.netloc or parts.path}"
            if isinstance(leaf, trio.TooSlowError):
                why = f"no answer within {self.connect_timeout:g} s"
            elif isinstance(leaf, trio.BrokenResourceError):
                why = str(leaf.__cause__ or leaf)
            else:
                why = str(leaf)
            raise ClientError(f"cannot connect to {where}: {why}") from None

    def _release(self, ws: WebSocketConnection) -> None:
        """Let the task holding ``ws`` close it (handshake, then the transport)."""
        entry = self._released.get(id(ws))
        if entry is not None:
            entry[0].set()

    async def _release_and_wait(self, ws: WebSocketConnection) -> None:
        entry = self._released.get(id(ws))
        if entry is not None:
            entry[0].set()
            await entry[1].wait()

    async def _handshake(
        self, ws: WebSocketConnection, first: bool, subscriptions: Sequence[str] = (ROOT_URI,)
    ) -> None:
        """initialize (first time, subscribed to ``subscriptions``) or reconnect;
        installs snapshots / replays."""
        self._ws = ws
        if first:
            result = await self._call_on(
                ws,
                "initialize",
                {
                    "channel": ROOT_URI,
                    "protocolVersions": list(self.protocol_versions),
                    "clientId": self.client_id,
                    "clientInfo": {"name": "ahp-terminals", "version": __version__},
                    "initialSubscriptions": list(dict.fromkeys([ROOT_URI, *subscriptions])),
                    # This host's resume token (others ignore it): proof, at a reconnect,
                    # that this connection is this client (see ahp.server.session).
                    "_meta": {RESUME_META: self.resume_token or ""},
                },
            )
        else:
            self.process_extension = None
            try:
                result = await self._call_on(ws, "reconnect", self._reconnect_params())
            except RpcError as exc:
                if not (
                    exc.code == -32602
                    and self.dialect is Dialect.V1
                    and self.reconnect_form == "watermark"
                ):
                    raise
                log.info("the host refused a form A reconnect: retrying with per-channel cursors")
                self.reconnect_form = "cursors"
                result = await self._call_on(ws, "reconnect", self._reconnect_params())
        for mirror in self.mirrors.values():
            mirror.pending.clear()
        if first:
            meta = result.get("_meta")
            token = meta.get(RESUME_META) if isinstance(meta, dict) else None
            self.resume_token = token if isinstance(token, str) else None
            self.protocol_version = result["protocolVersion"]
            self.dialect = dialect_of(result["protocolVersion"])
            self.default_directory = result.get("defaultDirectory")
            self.last_seen_seq = max(self.last_seen_seq, result["serverSeq"])
            for raw in result["snapshots"]:
                self._install(structure(raw, Snapshot))
        elif "channels" in result:
            self._recover(structure(result, ReconnectChannels))
        elif result["type"] == "replay":
            for channel in result.get("missing", []):
                self.mirrors.pop(channel, None)
            for raw in result["actions"]:
                self._apply(structure(raw, ActionEnvelope))
        else:
            snapshots = [structure(raw, Snapshot) for raw in result["snapshots"]]
            kept = {s.resource for s in snapshots}
            for channel in list(self.mirrors):
                if channel not in kept:
                    del self.mirrors[channel]
            for snapshot in snapshots:
                self._install(snapshot)
        self._changed.unpark_all()

    def _reconnect_params(self) -> dict[str, Any]:
        params: dict[str, Any]
        if self.reconnect_form == "cursors":
            params = {
                "channel": ROOT_URI,
                "clientId": self.client_id,
                "subscriptions": [
                    {"channel": c, "lastSeenServerSeq": m.last_seq} for c, m in self.mirrors.items()
                ],
            }
        else:
            params = {
                "channel": ROOT_URI,
                "clientId": self.client_id,
                "lastSeenServerSeq": self.last_seen_seq,
                "subscriptions": list(self.mirrors),
            }
        if self.resume_token is not None:
            params["_meta"] = {RESUME_META: self.resume_token}
        return params

    def _recover(self, result: ReconnectChannels) -> None:
        """Apply a form B reconnect result: per channel, a replay, a snapshot or gone."""
        for recovery in result.channels:
            if isinstance(recovery, ChannelMissing):
                self.mirrors.pop(recovery.channel, None)
            elif isinstance(recovery, ChannelReplay):
                for raw in recovery.actions:
                    self._apply(structure(raw, ActionEnvelope))
            else:
                self._install(recovery.snapshot)

    async def _call_on(self, ws: WebSocketConnection, method: str, params: dict[str, Any]) -> Any:
        """A handshake request on ``ws`` before the reader runs (envelopes that arrive
        first are applied); its result, or :class:`RpcError`."""
        msg_id = next(self._ids)
        await ws.send_message(
            encode_message(JsonRpcRequest(id=msg_id, method=method, params=params))
        )
        while True:
            message = decode_message(await ws.get_message())
            if isinstance(message, JsonRpcNotification) and message.method == "action":
                self._apply(structure(message.params, ActionEnvelope))
                continue
            if isinstance(message, JsonRpcError) and message.id == msg_id:
                raise RpcError(message.error.code, message.error.message, message.error.data)
            if isinstance(message, JsonRpcSuccess) and message.id == msg_id:
                return message.result

    def _fail_waiting(self) -> None:
        for done, slot in self._waiting.values():
            if not done.is_set():
                slot.append(ConnectionLost("connection lost before the answer"))
                done.set()

    async def _run(self, nursery: trio.Nursery, first_ws: WebSocketConnection) -> None:
        ws = first_ws
        while True:
            self._connected.set()
            try:
                while True:
                    self._handle(await ws.get_message())
            except ConnectionClosed:
                pass
            self._connected = trio.Event()
            self._ws = None
            self._release(ws)
            self._fail_waiting()
            if self._closing or not self.auto_reconnect:
                self._lost = "the client closed" if self._closing else "the connection was lost"
                self._connected.set()  # requests now fail at once (no connection is coming)
                self._changed.unpark_all()  # waiters: ConnectionLost (see wait_for)
                return
            ws = await self._reconnect(nursery)

    async def _reconnect(self, nursery: trio.Nursery) -> WebSocketConnection:
        for attempt in itertools.count():
            await trio.sleep(RECONNECT_DELAYS[min(attempt, len(RECONNECT_DELAYS) - 1)])
            ws = None
            try:
                ws = await self._open(nursery)
                try:
                    with trio.fail_after(self.connect_timeout):
                        await self._handshake(ws, first=False)
                except RpcError as exc:
                    if exc.code != -32008:
                        raise
                    # (Its record expired: a disconnection longer than its grace.) The
                    # subscriptions are asked for again; channels that are gone are not.
                    log.info("server forgot this client: initializing afresh")
                    self._release(ws)
                    ws = await self._open(nursery)
                    channels = list(self.mirrors)
                    self.mirrors.clear()
                    with trio.fail_after(self.connect_timeout):
                        await self._handshake(ws, first=True, subscriptions=channels)
            except (ClientError, ConnectionClosed, trio.TooSlowError) as exc:
                if ws is not None:
                    self._release(ws)
                log.info("reconnect attempt %d failed: %s", attempt + 1, exc)
                continue
            self.reconnects += 1
            return ws
        raise AssertionError("unreachable")

    async def drop_connection(self) -> None:
        """Close the socket abruptly, without a close handshake (tests: the client
        then reconnects as after a network failure).

        A close handshake would wait for the server's close frame behind everything
        the server had queued for this client (up to its outbox bound).
        """
        ws = self._ws
        if ws is not None:
            await close_transport(ws)

    async def aclose(self) -> None:
        self._closing = True
        ws = self._ws
        if ws is not None:
            await self._release_and_wait(ws)


@asynccontextmanager
async def connect(
    url: str,
    *,
    token: str | None = None,
    client_id: str | None = None,
    auto_reconnect: bool = True,
    scrollback: int | None = DEFAULT_SCROLLBACK,
    ssl_context: ssl.SSLContext | None = None,
    connect_timeout: float = CONNECT_TIMEOUT,
    protocol_versions: Sequence[str] = PROTOCOL_VERSIONS,
    reconnect_form: ReconnectForm = "watermark",
) -> AsyncIterator[Client]:
    """Connect, ``initialize`` (subscribed to the root channel) and yield the client.

    ``url`` is ``ws://``, ``wss://`` (verified with ``ssl_context``, by default the
    system's CAs) or ``ws+unix://PATH:/``; opening it (TCP, TLS, the upgrade) may
    take ``connect_timeout`` seconds and ``initialize`` as long again, each
    reconnect too. Raises :class:`ClientError` with one
    clear message when the server cannot be reached, its certificate does not
    verify, or it refuses the connection (wrong token: HTTP 403).
    """
    client = Client(
        url,
        token=token,
        client_id=client_id or f"ahp-py-{secrets.token_hex(6)}",
        auto_reconnect=auto_reconnect,
        scrollback=scrollback,
        ssl_context=ssl_context,
        connect_timeout=connect_timeout,
        protocol_versions=protocol_versions,
        reconnect_form=reconnect_form,
    )
    setup_error: ClientError | None = None
    async with trio.open_nursery() as nursery:
        try:
            ws = await client._open(nursery)
            try:
                with trio.fail_after(connect_timeout):
                    await client._handshake(ws, first=True)
            except RpcError as exc:
                client._release(ws)
                if exc.code != -32005 or client.protocol_versions == LEGACY_VERSIONS:
                    raise
                # A host that refused the whole offer: once more with the 0.5 family alone.
                log.info(
                    "the host refused %s: offering %s", client.protocol_versions, LEGACY_VERSIONS
                )
                client.protocol_versions = LEGACY_VERSIONS
                ws = await client._open(nursery)
                try:
                    with trio.fail_after(connect_timeout):
                        await client._handshake(ws, first=True)
                except BaseException:
                    client._release(ws)
                    raise
            except BaseException:
                client._release(ws)
                raise
        except ClientError as exc:
            # Raised after the nursery, so callers get the error itself, not a group.
            setup_error = exc
        except ConnectionClosed as exc:
            setup_error = ClientError(f"the server closed the connection: {exc.reason}")
        except trio.TooSlowError:
            setup_error = ClientError(f"no answer to initialize within {connect_timeout:g} s")
        else:
            client._nursery = nursery
            nursery.start_soon(client._run, nursery, ws)
            try:
                yield client
            finally:
                with trio.CancelScope(shield=True), trio.move_on_after(2):
                    await client.aclose()
                nursery.cancel_scope.cancel()
    if setup_error is not None:
        raise setup_error
