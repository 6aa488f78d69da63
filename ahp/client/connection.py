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
"""

from __future__ import annotations

import itertools
import logging
import secrets
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Any, Final
from urllib.parse import parse_qs, urlencode, urlsplit, urlunsplit

import trio

from ahp.client.mirror import Mirror
from ahp.client.remote import RemoteTerminal
from ahp.protocol.actions import ActionEnvelope, StateAction, TerminalInput
from ahp.protocol.codec import (
    ProtocolError,
    decode_message,
    dumps,
    encode_message,
    structure,
    unstructure,
)
from ahp.protocol.jsonrpc import (
    JsonRpcError,
    JsonRpcNotification,
    JsonRpcRequest,
    JsonRpcSuccess,
)
from ahp.protocol.state import ROOT_URI, ChannelState, RootState, Snapshot, TerminalState
from ahp.run import DEFAULT_MAX_OUTPUT, CommandResult
from ahp.ws import (
    ConnectionClosed,
    ConnectionRejected,
    HandshakeError,
    WebSocketConnection,
    connect_websocket_url,
    wrap_client_stream,
)

__all__ = ["Client", "ClientError", "ConnectionLost", "RpcError", "connect"]

log = logging.getLogger("ahp.client")

PROTOCOL_VERSIONS: Final = ("0.5.0",)
#: Largest inbound message (a big snapshot or replay); the server's default outbox is 16 MiB.
MAX_MESSAGE_SIZE: Final = 64 * 1024 * 1024
RECEIVE_BUFFER: Final = 256 * 1024
RECONNECT_DELAYS: Final = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0)


class ClientError(Exception):
    """The client could not connect or was refused (one clear message)."""


class ConnectionLost(ClientError):
    """The connection dropped before a request was answered."""


class RpcError(ClientError):
    """The server answered a request with a JSON-RPC error."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(f"{message} ({code})")
        self.code = code
        self.message = message
        self.data = data


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
        self, url: str, *, token: str | None, client_id: str, auto_reconnect: bool
    ) -> None:
        self.url = _with_token(url, token)
        self.client_id = client_id
        self.auto_reconnect = auto_reconnect
        self.mirrors: dict[str, Mirror] = {}
        self.protocol_version: str | None = None
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
        self._nursery: trio.Nursery | None = None
        self._listeners: list[Callable[[ActionEnvelope], None]] = []

    # -- state -------------------------------------------------------------------------------

    def state(self, channel: str) -> ChannelState:
        """The mirrored state of a subscribed channel (KeyError if not subscribed)."""
        return self.mirrors[channel].state

    def terminal_state(self, channel: str) -> TerminalState:
        state = self.state(channel)
        assert isinstance(state, TerminalState)
        return state

    @property
    def root(self) -> RootState:
        state = self.state(ROOT_URI)
        assert isinstance(state, RootState)
        return state

    async def wait_for(
        self, predicate: Callable[[], bool], *, timeout: float | None = None
    ) -> None:
        """Wait until ``predicate()`` holds (re-checked after every applied envelope)."""
        with trio.fail_after(timeout) if timeout is not None else trio.CancelScope():
            while not predicate():
                await self._changed.park()

    def on_envelope(self, callback: Callable[[ActionEnvelope], None]) -> Callable[[], None]:
        """Call ``callback`` for every applied envelope; returns an unregister function."""
        self._listeners.append(callback)
        return lambda: self._listeners.remove(callback)

    # -- requests ----------------------------------------------------------------------------

    async def _send(self, text: str) -> None:
        await self._connected.wait()
        ws = self._ws
        assert ws is not None
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
        return snapshot.state

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
                "action": unstructure(action, StateAction),
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
        max_output_bytes: int = DEFAULT_MAX_OUTPUT,
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
        mirror = self.mirrors.get(snapshot.resource)
        if mirror is None:
            self.mirrors[snapshot.resource] = Mirror(
                snapshot.resource, snapshot.state, snapshot.fromSeq, self.client_id
            )
        else:
            mirror.reset(snapshot.state, snapshot.fromSeq)
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
        parts = urlsplit(self.url)
        try:
            if parts.scheme == "ws+unix":
                path, _, resource = parts.netloc.partition(":")
                stream = await trio.open_unix_socket(path or parts.path.split(":")[0])
                target = (resource or "/") + (f"?{parts.query}" if parts.query else "")
                return await wrap_client_stream(
                    nursery,
                    stream,
                    "localhost",
                    target,
                    max_message_size=MAX_MESSAGE_SIZE,
                    receive_buffer_size=RECEIVE_BUFFER,
                )
            return await connect_websocket_url(
                nursery,
                self.url,
                max_message_size=MAX_MESSAGE_SIZE,
                receive_buffer_size=RECEIVE_BUFFER,
            )
        except ConnectionRejected as exc:
            body = (exc.body or b"").decode(errors="replace").strip()
            raise ClientError(
                f"connection refused by the server: HTTP {exc.status_code} {body}"
            ) from None
        except (HandshakeError, OSError) as exc:
            raise ClientError(f"cannot connect to {parts.scheme}://{parts.netloc}: {exc}") from None

    async def _handshake(self, ws: WebSocketConnection, first: bool) -> None:
        """initialize (first time) or reconnect; installs snapshots / replays."""
        self._ws = ws
        if first:
            await ws.send_message(
                encode_message(
                    JsonRpcRequest(
                        id=0,
                        method="initialize",
                        params={
                            "channel": ROOT_URI,
                            "protocolVersions": list(PROTOCOL_VERSIONS),
                            "clientId": self.client_id,
                            "initialSubscriptions": [ROOT_URI],
                        },
                    )
                )
            )
        else:
            await ws.send_message(
                dumps(
                    {
                        "jsonrpc": "2.0",
                        "id": 0,
                        "method": "reconnect",
                        "params": {
                            "channel": ROOT_URI,
                            "clientId": self.client_id,
                            "lastSeenServerSeq": self.last_seen_seq,
                            "subscriptions": list(self.mirrors),
                        },
                    }
                )
            )
        while True:
            message = decode_message(await ws.get_message())
            if isinstance(message, JsonRpcNotification) and message.method == "action":
                self._apply(structure(message.params, ActionEnvelope))
                continue
            if isinstance(message, JsonRpcError) and message.id == 0:
                raise RpcError(message.error.code, message.error.message, message.error.data)
            if isinstance(message, JsonRpcSuccess) and message.id == 0:
                break
        result = message.result
        for mirror in self.mirrors.values():
            mirror.pending.clear()
        if first:
            self.protocol_version = result["protocolVersion"]
            self.default_directory = result.get("defaultDirectory")
            self.last_seen_seq = max(self.last_seen_seq, result["serverSeq"])
            for raw in result["snapshots"]:
                self._install(structure(raw, Snapshot))
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
            self._fail_waiting()
            if self._closing or not self.auto_reconnect:
                self._changed.unpark_all()
                return
            ws = await self._reconnect(nursery)

    async def _reconnect(self, nursery: trio.Nursery) -> WebSocketConnection:
        for attempt in itertools.count():
            await trio.sleep(RECONNECT_DELAYS[min(attempt, len(RECONNECT_DELAYS) - 1)])
            try:
                ws = await self._open(nursery)
                try:
                    await self._handshake(ws, first=False)
                except RpcError as exc:
                    if exc.code != -32008:
                        raise
                    log.info("server forgot this client: initializing afresh")
                    await ws.aclose()
                    ws = await self._open(nursery)
                    self.mirrors.clear()
                    await self._handshake(ws, first=True)
            except (ClientError, ConnectionClosed) as exc:
                log.info("reconnect attempt %d failed: %s", attempt + 1, exc)
                continue
            self.reconnects += 1
            return ws
        raise AssertionError("unreachable")

    async def drop_connection(self) -> None:
        """Close the socket abruptly (tests: the client then reconnects)."""
        ws = self._ws
        if ws is not None:
            await ws.aclose(4000, "client dropped the connection")

    async def aclose(self) -> None:
        self._closing = True
        ws = self._ws
        if ws is not None:
            await ws.aclose()


@asynccontextmanager
async def connect(
    url: str,
    *,
    token: str | None = None,
    client_id: str | None = None,
    auto_reconnect: bool = True,
) -> AsyncIterator[Client]:
    """Connect, ``initialize`` (subscribed to the root channel) and yield the client.

    Raises :class:`ClientError` with one clear message when the server cannot be
    reached or refuses the connection (wrong token: HTTP 403).
    """
    client = Client(
        url,
        token=token,
        client_id=client_id or f"ahp-py-{secrets.token_hex(6)}",
        auto_reconnect=auto_reconnect,
    )
    async with trio.open_nursery() as nursery:
        ws = await client._open(nursery)
        await client._handshake(ws, first=True)
        nursery.start_soon(client._run, nursery, ws)
        try:
            yield client
        finally:
            with trio.CancelScope(shield=True), trio.move_on_after(2):
                await client.aclose()
            nursery.cancel_scope.cancel()
