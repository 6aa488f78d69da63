"""A Trio AHP client: the session's frames moved, its waiters woken, reconnects run.

Why: tests, the ``attach``/``ls``/``run`` commands and remote agents all need
the same careful client. Its rules — request ids and answers, the handshake,
mirrors folded with the project's reducers, what to do when a host refuses
something — are the pure :class:`~ahp.client.session.ClientSession`; its
connection is a :class:`~ahp.client.transport.Transport`. This module joins the
two: it sends what the session writes, feeds it what arrives, wakes the task
waiting for an answer, and runs the reconnect loop the session decides on.

Tasks and ownership: :func:`connect` owns a nursery with one connection task
(read, reconnect) and the transport's holding task, for the lifetime of the
``async with`` block. A request whose connection drops before its answer raises
:class:`ConnectionLost` (it may or may not have been applied); dispatched
actions that were pending are dropped on reconnect, as AHP specifies. A request,
notification or action made while a reconnect goes on waits for it at most
:data:`~ahp.client.remote.LOST_AFTER` (30 s) after the drop, then raises
:class:`ConnectionLost` with nothing sent (the client goes on reconnecting) —
the patience a command already had (``docs/agent.md``, *Honest ends*).

Buffering: inbound frames are applied as they arrive (no queue beyond the
transport's one-message buffer); :meth:`Client.changes` waiters are woken after
each applied envelope.

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
import math
import secrets
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractContextManager, asynccontextmanager
from typing import Any, Final, Unpack
from urllib.parse import parse_qs, urlencode, urlsplit, urlunsplit

import trio

from ahp.agent.command import CommandResult
from ahp.agent.options import RunChanges, RunOptions
from ahp.agent.registry import CommandRegistry
from ahp.agent.screen import ScreenModel
from ahp.client import remote
from ahp.client.errors import (
    GOING_AWAY,
    ClientError,
    ConnectionLost,
    NoAnswer,
    RpcError,
    ServerShutDown,
)
from ahp.client.mirror import Mirror
from ahp.client.remote import RemoteTerminal
from ahp.client.session import (
    PROTOCOL_VERSIONS,
    RECONNECT_DELAYS,
    Answer,
    Applied,
    ClientSession,
    Ignored,
    ReconnectForm,
    answer_too_large,
    reconnect_delay,
)
from ahp.client.transport import (
    CONNECT_TIMEOUT,
    MAX_MESSAGE_SIZE,
    RECEIVE_BUFFER,
    ConnectionClosed,
    Transport,
    open_transport,
)
from ahp.protocol.actions import ActionEnvelope, StateAction, TerminalInput
from ahp.protocol.dialect import Dialect
from ahp.protocol.jsonrpc import ErrorCode, JsonRpcErrorObject
from ahp.protocol.state import ROOT_URI, ChannelState, RootState, TerminalState
from ahp.reducers import DEFAULT_SCROLLBACK
from ahp.unwrap import BlockError
from ahp.version import __version__

__all__ = [
    "CONNECT_TIMEOUT",
    "HANDSHAKE_LIMIT",
    "MALFORMED_SHOWN",
    "MAX_MESSAGE_SIZE",
    "PROTOCOL_VERSIONS",
    "RECEIVE_BUFFER",
    "RECONNECT_DELAYS",
    "Client",
    "ClientError",
    "ConnectionLost",
    "NoAnswer",
    "RpcError",
    "ServerShutDown",
    "connect",
    "with_token",
    "without_token",
]

log = logging.getLogger("ahp.client")

#: Characters of a refused frame's reason kept for the error that ends a wait.
MALFORMED_SHOWN: Final = 200
#: Seconds a handshake (``initialize``, ``reconnect``) may take in all, however steadily
#: its answer arrives: past ``connect_timeout`` seconds with nothing arriving it fails
#: sooner. The answer may hold every subscribed terminal's scrollback (tens of MB), so
#: this is long; it stops a peer that trickles bytes from holding a connect for ever.
HANDSHAKE_LIMIT: Final = 600.0
#: Seconds a request must wait without anything arriving from the server before its
#: missing answer counts as the server not answering (:meth:`Client.unanswered_for`).
UNANSWERED_AFTER: Final = 1.0


def without_token(url: str) -> str:
    """``url`` without the ``tkn`` of its query (safe to show)."""
    parts = urlsplit(url)
    query = "&".join(
        f"{k}={v}" for k, values in parse_qs(parts.query).items() if k != "tkn" for v in values
    )
    return urlunsplit(parts._replace(query=query))


def with_token(url: str, token: str | None) -> str:
    """``url`` with ``tkn=token`` in its query (replacing one there), or as it is."""
    if token is None:
        return url
    parts = urlsplit(url)
    query = {k: v[0] for k, v in parse_qs(parts.query).items()}
    query["tkn"] = token
    return urlunsplit(parts._replace(query=urlencode(query)))


def _rpc_error(error: JsonRpcErrorObject) -> RpcError:
    return RpcError(error.code, error.message, error.data)


class _Forgotten(Exception):
    """The host no longer knows this client: ``initialize`` afresh (see _reconnect)."""


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
        request_timeout: float | None = None,
    ) -> None:
        #: Why the last frame that could not be used was refused (cut at
        #: :data:`MALFORMED_SHOWN`): an error that ends a wait says what came instead.
        self.last_malformed: str | None = None
        #: Seconds a request may wait for its answer (None: as long as the caller's
        #: cancel scope lets it); past it :meth:`request` raises :class:`NoAnswer`.
        self.request_timeout = request_timeout
        #: The protocol side (ids, mirrors, handshake, decisions).
        self.session = ClientSession(
            client_id,
            scrollback=scrollback,
            protocol_versions=protocol_versions,
            reconnect_form=reconnect_form,
            client_info={"name": "ahp-terminals", "version": __version__},
        )
        self.connect_timeout = connect_timeout
        #: For ``wss://`` (default: the system's trusted CAs, hostname checked).
        self.ssl_context = ssl_context
        self.url = with_token(url, token)
        self.auto_reconnect = auto_reconnect
        self.reconnects = 0
        self._waiting: dict[int, tuple[trio.Event, list[Answer | ConnectionLost]]] = {}
        #: When each waiting request was sent (Trio time), by id.
        self._sent_at: dict[int, float] = {}
        #: When the last frame arrived on the open connection (Trio time), if any did.
        self._heard_at: float | None = None
        #: When the oldest request sent since then that went without an answer (given up,
        #: or timed out) was sent: the server has been silent since (None: not known so).
        self._unanswered_since: float | None = None
        self._transport: Transport | None = None
        #: When the connection dropped (Trio time), while a reconnect goes on; else None.
        self.dropped_at: float | None = None
        self._connected = trio.Event()
        self._changed = trio.lowlevel.ParkingLot()
        self._closing = False
        #: Why the connection is gone for good (no reconnect will follow), else None.
        self._lost: str | None = None
        #: How the server closed the last connection that ended: its close code and
        #: reason (1001 ``going away``: it shut down); None when it ended without the
        #: server's close frame (a network drop), or none ended yet.
        self.server_close: tuple[int, str] | None = None
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
        self._change_callbacks: list[Callable[[], None]] = []
        self._connection_listeners: list[Callable[[str], None]] = []

    # -- the session's state -------------------------------------------------------------------

    @property
    def client_id(self) -> str:
        return self.session.client_id

    @property
    def read_only(self) -> bool:
        """The server admitted this client read-only: it watches, its actions are refused."""
        return self.session.read_only

    @property
    def scrollback(self) -> int | None:
        return self.session.scrollback

    @property
    def resume_token(self) -> str | None:
        """The host's resume token for this client (presented at every reconnect)."""
        return self.session.resume_token

    @property
    def mirrors(self) -> dict[str, Mirror]:
        return self.session.mirrors

    @property
    def protocol_version(self) -> str | None:
        return self.session.protocol_version

    @property
    def dialect(self) -> Dialect:
        """The wire shape negotiated (how actions are written)."""
        return self.session.dialect

    @property
    def default_directory(self) -> str | None:
        return self.session.default_directory

    @property
    def last_seen_seq(self) -> int:
        return self.session.last_seen_seq

    @property
    def protocol_versions(self) -> tuple[str, ...]:
        """What ``initialize`` offers, most preferred first."""
        return self.session.protocol_versions

    @protocol_versions.setter
    def protocol_versions(self, value: Sequence[str]) -> None:
        self.session.protocol_versions = tuple(value)

    @property
    def reconnect_form(self) -> ReconnectForm:
        return self.session.reconnect_form

    @reconnect_form.setter
    def reconnect_form(self, value: ReconnectForm) -> None:
        self.session.reconnect_form = value

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
        return self._transport is not None

    def unanswered_for(self) -> float | None:
        """Seconds the server has sent nothing while a request waited for its answer,
        or since a request that went unanswered was sent (timed out, or given up by
        its caller after :data:`UNANSWERED_AFTER` seconds or more with nothing
        arriving); None when the server is not known to be silent (anything arriving,
        or a new connection, ends it). For saying that a sidecar is stopped or
        overloaded rather than guessing about what it did; it reads state only."""
        now = trio.current_time()
        heard = -math.inf if self._heard_at is None else self._heard_at
        since = self._unanswered_since
        for sent in self._sent_at.values():
            if sent > heard and now - sent >= UNANSWERED_AFTER:
                since = sent if since is None else min(since, sent)
        return None if since is None or not self.connected else now - since

    @property
    def server_shut_down(self) -> bool:
        """The last connection ended because the server shuts down (it closed it with
        1001 ``going away``), not by a network drop: see :class:`ServerShutDown`."""
        return self.server_close is not None and self.server_close[0] == GOING_AWAY

    def _gone(self, why: str) -> ConnectionLost:
        """The error for a connection gone (:class:`ServerShutDown` after a 1001)."""
        return ServerShutDown(why) if self.server_shut_down else ConnectionLost(why)

    @property
    def lost(self) -> str | None:
        """Why the connection is gone for good (no reconnect will follow), else None."""
        return self._lost

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
                    raise self._gone(self._lost)
                await self._changed.park()

    def spawn_task(self, fn: Callable[[], Awaitable[None]]) -> None:
        """Run ``fn`` in the client's nursery (cancelled when the client closes)."""
        if self._nursery is None:
            raise ClientError("the client is not connected")
        self._nursery.start_soon(fn)

    def on_change(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call ``callback`` whenever :meth:`wait_for` predicates are re-checked (an
        applied envelope or snapshot, a connection lost or regained); returns an
        unregister function. The callback must not block."""
        self._change_callbacks.append(callback)
        return lambda: self._change_callbacks.remove(callback)

    def _notify(self) -> None:
        self._changed.unpark_all()
        for callback in list(self._change_callbacks):
            callback()

    def on_envelope(self, callback: Callable[[ActionEnvelope], None]) -> Callable[[], None]:
        """Call ``callback`` for every applied envelope; returns an unregister function."""
        self._listeners.append(callback)
        return lambda: self._listeners.remove(callback)

    def on_connection(self, callback: Callable[[str], None]) -> Callable[[], None]:
        """Call ``callback("dropped")`` when the connection drops and a reconnect will
        be tried, ``callback("reconnected")`` once it succeeded (after what it
        replayed was applied), ``callback("gone")`` when the connection is gone for
        good. Returns an unregister function."""
        self._connection_listeners.append(callback)
        return lambda: self._connection_listeners.remove(callback)

    def _tell_connection(self, what: str) -> None:
        for callback in list(self._connection_listeners):
            callback(what)

    # -- requests ------------------------------------------------------------------------------

    async def _send(self, frame: str) -> None:
        """Send once connected; during a reconnect this waits for it until
        :data:`~ahp.client.remote.LOST_AFTER` after the drop. Raises
        :class:`ConnectionLost` past that, or when there will be no connection any more."""
        await self.wait_connected(remote.LOST_AFTER)
        transport = self._transport
        if transport is None:  # closed for good (closing, or no automatic reconnect)
            raise ConnectionLost("connection closed")
        try:
            await transport.send(frame)
        except ConnectionClosed:
            raise ConnectionLost("connection closed") from None

    async def wait_connected(self, patience: float) -> None:
        """Return once connected (at once when it is); while a reconnect goes on, wait
        until ``patience`` seconds after the drop at most.

        Raises:
            ConnectionLost: no connection within that time, or none is coming (the
                client closed, or it does not reconnect).
        """
        if not self._connected.is_set():
            dropped = self.dropped_at
            deadline = math.inf if dropped is None else dropped + patience
            with trio.move_on_at(deadline):
                await self._connected.wait()
            if not self._connected.is_set():
                raise ConnectionLost(f"the connection has been down for more than {patience:g} s")
        if self._transport is None:
            raise self._gone(self._lost or "connection closed")
        await trio.lowlevel.checkpoint()

    async def request(self, method: str, params: Mapping[str, Any] | None = None) -> Any:
        """Send a request and return its result; raises :class:`RpcError` on an error answer.

        During a reconnect it waits for the connection until
        :data:`~ahp.client.remote.LOST_AFTER` after the drop (:class:`ConnectionLost`
        then, nothing sent); the answer itself is waited for :attr:`request_timeout`
        (:class:`NoAnswer`, a :class:`ClientError`, past it: the connection stays as it
        is), unless the connection drops first (:class:`ConnectionLost`)."""
        await self.wait_connected(remote.LOST_AFTER)
        transport = self._transport
        if transport is None:
            raise self._gone(self._lost or "connection closed")
        msg_id, frame = self.session.request(method, params)
        done = trio.Event()
        slot: list[Answer | ConnectionLost] = []
        self._waiting[msg_id] = (done, slot)
        sent = self._sent_at[msg_id] = trio.current_time()
        timeout = math.inf if self.request_timeout is None else self.request_timeout
        try:
            with trio.fail_after(timeout):
                try:
                    await transport.send(frame)
                except ConnectionClosed:
                    raise ConnectionLost("connection closed") from None
                await done.wait()
        except trio.TooSlowError:
            raise NoAnswer(method, timeout, without_token(self.url)) from None
        finally:
            self._waiting.pop(msg_id, None)
            self._sent_at.pop(msg_id, None)
            self.session.awaiting.discard(msg_id)
            self._note_unanswered(sent, answered=bool(slot))
        answer = slot[0]
        if isinstance(answer, ConnectionLost):
            raise answer
        if answer.error is not None:
            raise _rpc_error(answer.error)
        return answer.result

    async def notify(self, method: str, params: Mapping[str, Any]) -> None:
        await self._send(self.session.notification(method, params))

    async def ping(self) -> None:
        await self.request("ping", {"channel": ROOT_URI})

    async def subscribe(self, channel: str) -> ChannelState:
        """Subscribe to ``channel``; its state (mirrored from here on).

        Envelopes the host publishes right after its answer may be read before this
        call resumes: the session keeps them and applies them after the snapshot."""
        await self._subscribe_by(channel, lambda: self.request("subscribe", {"channel": channel}))
        self._notify()
        return self.state(channel)

    async def _subscribe_by(self, channel: str, ask: Callable[[], Awaitable[Any]]) -> None:
        """Subscribe ``channel`` with ``ask`` (which sends the request and returns its
        result), again while envelopes overflowed what the session keeps meanwhile."""
        while True:
            self.session.subscribing(channel)
            try:
                result = await ask()
            except BaseException:
                self.session.subscribe_failed(channel)
                raise
            overflowed = self.session.needs_resubscribe(channel)
            self.session.subscribed(result)
            if not overflowed:
                return
            self.session.subscribe_failed(channel)

    async def unsubscribe(self, channel: str) -> None:
        await self._send(self.session.unsubscribe(channel))

    async def dispatch(self, channel: str, action: StateAction) -> int:
        """Dispatch a client action (write-ahead: applied to :meth:`state` until echoed)."""
        client_seq, frame = self.session.dispatch(channel, action)
        await self._send(frame)
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
        options: RunOptions | None = None,
        /,
        **changes: Unpack[RunChanges],
    ) -> CommandResult:
        """Run one command in a subscribed terminal (see :meth:`RemoteTerminal.run`)."""
        return await self.terminal(channel).run(command_line, options, **changes)

    async def send_input(self, channel: str, data: str) -> None:
        await self.dispatch(channel, TerminalInput(data=data))

    async def dispose_terminal(self, channel: str) -> None:
        await self.request("disposeTerminal", {"channel": channel})
        self.session.disposed(channel)

    # -- inbound -------------------------------------------------------------------------------

    def _applied(self, envelope: ActionEnvelope) -> None:
        for listener in list(self._listeners):
            listener(envelope)
        self._notify()

    def _note_unanswered(self, sent: float, *, answered: bool) -> None:
        """A request sent at ``sent`` ended: without an answer (and nothing heard since
        it was sent, for :data:`UNANSWERED_AFTER` seconds or more), the server is
        silent since then (:meth:`unanswered_for`)."""
        heard = -math.inf if self._heard_at is None else self._heard_at
        if answered or heard >= sent or trio.current_time() - sent < UNANSWERED_AFTER:
            return
        if self._unanswered_since is None or sent < self._unanswered_since:
            self._unanswered_since = sent

    def _handle(self, frame: str | bytes) -> None:
        self._heard_at = trio.current_time()
        self._unanswered_since = None
        event = self.session.receive(frame)
        if isinstance(event, Applied):
            self._applied(event.envelope)
        elif isinstance(event, Answer):
            waiter = self._waiting.get(event.id)
            if waiter is not None:
                waiter[1].append(event)
                waiter[0].set()
        elif event.why.startswith("malformed"):
            log.warning("ignored a %s", event.why)
            self.last_malformed = event.why[:MALFORMED_SHOWN]

    # -- connection ----------------------------------------------------------------------------

    async def _open(self, nursery: trio.Nursery) -> Transport:
        return await open_transport(
            nursery, self.url, ssl_context=self.ssl_context, connect_timeout=self.connect_timeout
        )

    def _patience(self, transport: Transport) -> AbstractContextManager[object]:
        """A handshake's bound on ``transport``: it fails (:class:`trio.TooSlowError`)
        once nothing has arrived for :attr:`connect_timeout` seconds, or after
        :data:`HANDSHAKE_LIMIT` in all (see :meth:`Transport.patience`)."""
        return transport.patience(
            self.connect_timeout, limit=max(HANDSHAKE_LIMIT, self.connect_timeout)
        )

    async def _call_on(self, transport: Transport, msg_id: int, frame: str) -> Any:
        """A handshake request on ``transport`` before the reader runs (envelopes that
        arrive first are applied); its result, or :class:`RpcError`."""
        await transport.send(frame)
        while True:
            event = self.session.receive(await transport.receive())
            if isinstance(event, Applied):
                self._applied(event.envelope)
            elif isinstance(event, Answer) and event.id == msg_id:
                if event.error is not None:
                    raise _rpc_error(event.error)
                return event.result
            elif isinstance(event, Ignored) and event.why.startswith("malformed"):
                self.last_malformed = event.why[:MALFORMED_SHOWN]

    async def _initialize(self, transport: Transport, subscriptions: Sequence[str]) -> None:
        self._transport = transport
        result = await self._call_on(transport, *self.session.initialize_request(subscriptions))
        self.session.initialized(result)
        self._notify()

    async def _reconnect_on(self, transport: Transport) -> None:
        """``reconnect`` (and the retries the session decides on)."""
        self._transport = transport
        self.process_extension = None
        while True:
            msg_id, frame = self.session.reconnect_request()
            try:
                result = await self._call_on(transport, msg_id, frame)
            except RpcError as exc:
                step = self.session.retry_reconnect(
                    JsonRpcErrorObject(code=exc.code, message=exc.message, data=exc.data)
                )
                if step == "cursors":
                    log.info("the host refused a form A reconnect: retrying with cursors")
                    continue
                if step == "initialize":
                    raise _Forgotten from None
                if step == "one by one":
                    log.info(
                        "the host refused a reconnect too large to answer at once: "
                        "resuming the root channel, then subscribing one by one"
                    )
                    continue
                raise
            for envelope in self.session.reconnected(result):
                self._applied(envelope)
            await self._subscribe_aside(transport)
            self._notify()
            return

    async def _initialize_afresh(self, transport: Transport) -> None:
        """``initialize`` with the subscriptions a forgetful host dropped; when they are
        more than one answer carries, with none, then subscribed one by one."""
        channels = self.session.resubscriptions()
        try:
            await self._initialize(transport, channels)
        except RpcError as exc:
            refusal = JsonRpcErrorObject(code=exc.code, message=exc.message, data=exc.data)
            if not answer_too_large(refusal):
                raise
            self.session.set_aside(channels)
            await self._initialize(transport, ())
        await self._subscribe_aside(transport)

    async def _subscribe_aside(self, transport: Transport) -> None:
        """Subscribe, one request at a time on ``transport`` (before the reader runs),
        the channels the session set aside (see :meth:`ClientSession.set_aside`); one
        that is gone (-32008) is dropped, as a reconnect's ``missing`` channel is."""
        for channel in self.session.aside():

            async def ask(channel: str = channel) -> Any:
                msg_id, frame = self.session.request("subscribe", {"channel": channel})
                return await self._call_on(transport, msg_id, frame)

            try:
                await self._subscribe_by(channel, ask)
            except RpcError as exc:
                if exc.code != ErrorCode.NOT_FOUND:
                    raise
                self.session.disposed(channel)

    def _fail_waiting(self) -> None:
        self.session.lost()
        for done, slot in self._waiting.values():
            if not done.is_set():
                slot.append(self._gone("connection lost before the answer"))
                done.set()

    async def _run(self, nursery: trio.Nursery, first: Transport) -> None:
        transport = first
        while True:
            self.dropped_at = None
            self._heard_at = trio.current_time()  # (the handshake was answered)
            self._unanswered_since = None
            self._connected.set()
            try:
                while True:
                    self._handle(await transport.receive())
            except ConnectionClosed as exc:
                close = exc.reason
                # (Without the server's close frame the code is 1006, abnormal closure.)
                self.server_close = (
                    (close.code, close.reason or "")
                    if close is not None and close.code != 1006
                    else None
                )
            self._connected = trio.Event()
            self._transport = None
            self.dropped_at = trio.current_time()
            transport.release()
            self._fail_waiting()
            self._notify()  # (connected is False now)
            if self._closing or not self.auto_reconnect:
                self._lost = (
                    "the client closed"
                    if self._closing
                    else "the server shut down (1001 going away)"
                    if self.server_shut_down
                    else "the connection was lost"
                )
                self._connected.set()  # requests now fail at once (no connection is coming)
                self._notify()  # waiters: ConnectionLost (see wait_for)
                self._tell_connection("gone")
                return
            self._tell_connection("dropped")
            transport = await self._reconnect(nursery)
            self._tell_connection("reconnected")

    async def _reconnect(self, nursery: trio.Nursery) -> Transport:
        for attempt in itertools.count():
            await trio.sleep(reconnect_delay(attempt))
            transport = None
            try:
                transport = await self._open(nursery)
                try:
                    with self._patience(transport):
                        await self._reconnect_on(transport)
                except _Forgotten:
                    # (Its record expired: a disconnection longer than its grace.) The
                    # subscriptions are asked for again; channels that are gone are not.
                    log.info("server forgot this client: initializing afresh")
                    transport.release()
                    transport = await self._open(nursery)
                    with self._patience(transport):
                        await self._initialize_afresh(transport)
            except (ClientError, ConnectionClosed, trio.TooSlowError) as exc:
                if transport is not None:
                    transport.release()
                self._transport = None
                log.info("reconnect attempt %d failed: %s", attempt + 1, exc)
                continue
            self.reconnects += 1
            self._notify()
            return transport
        raise AssertionError("unreachable")

    async def drop_connection(self) -> None:
        """Close the socket abruptly, without a close handshake (tests: the client
        then reconnects as after a network failure).

        A close handshake would wait for the server's close frame behind everything
        the server had queued for this client (up to its outbox bound).
        """
        transport = self._transport
        if transport is not None:
            await transport.abort()

    async def aclose(self) -> None:
        self._closing = True
        transport = self._transport
        if transport is not None:
            await transport.aclose()


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
    request_timeout: float | None = None,
) -> AsyncIterator[Client]:
    """Connect, ``initialize`` (subscribed to the root channel) and yield the client.

    ``url`` is ``ws://``, ``wss://`` (verified with ``ssl_context``, by default the
    system's CAs) or ``ws+unix://PATH:/``; opening it (TCP, TLS, the upgrade) may
    take ``connect_timeout`` seconds, each reconnect's too. The handshake after it
    (``initialize``; a reconnect's ``reconnect``, whose answer may hold every
    subscribed terminal's scrollback) is bounded by progress, not total time: it fails
    once nothing has arrived for ``connect_timeout`` seconds, and however steadily its
    answer arrives it ends after :data:`HANDSHAKE_LIMIT` (600 s) at most. Every later
    request may wait ``request_timeout`` seconds (None: unbounded, the
    caller's cancel scope decides). While the connection is down and a reconnect goes
    on, requests and actions wait for it at most :data:`~ahp.client.remote.LOST_AFTER`
    (30 s) after the drop, then raise :class:`ConnectionLost`. Raises :class:`ClientError` with one
    clear message when the server cannot be reached, its certificate does not
    verify, or it refuses the connection (wrong token: HTTP 403). An error raised by
    the block leaves it as it was raised, not inside an ``ExceptionGroup``, unless
    the client's own task failed too (:mod:`ahp.unwrap`).
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
        request_timeout=request_timeout,
    )
    setup_error: ClientError | None = None
    with BlockError.unwrapped() as block:
        async with trio.open_nursery() as nursery:
            try:
                transport = await client._open(nursery)
                try:
                    with client._patience(transport):
                        await client._initialize(transport, ())
                except RpcError as exc:
                    transport.release()
                    refusal = JsonRpcErrorObject(code=exc.code, message=exc.message, data=exc.data)
                    offered = client.protocol_versions
                    if not client.session.retry_initialize(refusal):
                        raise
                    # A host that refused the whole offer: once more with the 0.5 family alone.
                    log.info("the host refused %s: offering %s", offered, client.protocol_versions)
                    transport = await client._open(nursery)
                    try:
                        with client._patience(transport):
                            await client._initialize(transport, ())
                    except BaseException:
                        transport.release()
                        raise
                except BaseException:
                    transport.release()
                    raise
            except ClientError as exc:
                # Raised after the nursery, so callers get the error itself, not a group.
                setup_error = exc
            except ConnectionClosed as exc:
                setup_error = ClientError(f"the server closed the connection: {exc.reason}")
            except trio.TooSlowError as exc:
                came = client.last_malformed
                setup_error = ClientError(
                    f"no answer to initialize: {exc}"
                    + (f" (the server sent what could not be read: {came})" if came else "")
                )
            else:
                client._nursery = nursery
                nursery.start_soon(client._run, nursery, transport)
                try:
                    with block.watching():
                        yield client
                finally:
                    with trio.CancelScope(shield=True), trio.move_on_after(2):
                        await client.aclose()
                    nursery.cancel_scope.cancel()
    if setup_error is not None:
        raise setup_error
