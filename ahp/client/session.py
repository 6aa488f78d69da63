"""One client connection's protocol state machine (transport-free), as the server's.

Why transport-free: every rule of the client side of AHP — request ids and the
answers that match them, the handshake's parameters and how its results are
read, the per-channel mirrors folded with the project's reducers, write-ahead
dispatch, and what to do when a host refuses something — lives here, driven by
frames in and frames out, so it is tested without a socket (unit and property
tests in ``tests/test_client_session.py``). :mod:`ahp.client.connection` moves
the frames (Trio, :mod:`ahp.client.transport`) and wakes whoever waits.

Protocol: a method that sends returns the frame to send (and the request's id);
:meth:`ClientSession.receive` takes one inbound frame and returns what happened
(:class:`Answer` to one of our requests, :class:`Applied` envelope); results are
read as the typed classes of :mod:`ahp.protocol.commands`, through the one
converter (:mod:`ahp.protocol.codec`). Malformed frames from the server are
reported (:class:`Ignored`), never raised: the connection goes on.

Decisions (the transport acts on them): a host that refuses the whole version
offer (``-32005``) is asked again with the 0.5 family alone
(:meth:`ClientSession.retry_initialize`); a 1.x host that refuses a form A
``reconnect`` (``-32602``) is asked with per-channel cursors, and a host that
forgot this client (``-32008``) gets a fresh ``initialize`` with the same
subscriptions (:meth:`ClientSession.retry_reconnect`); a host that refuses a
handshake because the snapshots asked for are more than one answer carries
(:func:`answer_too_large`) is asked again with the root channel alone, and the
terminals are then subscribed one by one (:meth:`ClientSession.set_aside`); a
reconnect attempt waits :func:`reconnect_delay`.

Buffering: none of its own. Every mirror is bounded by its scrollback
(:class:`~ahp.client.mirror.Mirror`); the set of requests awaiting an answer is
as large as the requests the caller has in flight, and is emptied when the
connection is lost (:meth:`ClientSession.lost`).

Pure: no I/O, no Trio, no clock (the layering test holds it to that).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any, Final, Literal

import attrs

from ahp.client.mirror import Mirror
from ahp.protocol.actions import ActionEnvelope, StateAction
from ahp.protocol.codec import ProtocolError, decode_message, encode_message, structure
from ahp.protocol.commands import (
    READ_ONLY_META,
    RESUME_META,
    ChannelMissing,
    ChannelReplay,
    InitializeResult,
    ReconnectChannels,
    ReconnectReplay,
    ReconnectSnapshot,
    SubscribeResult,
)
from ahp.protocol.dialect import LEGACY_VERSIONS, MODERN_VERSIONS, Dialect, action_json, dialect_of
from ahp.protocol.jsonrpc import (
    ErrorCode,
    JsonRpcError,
    JsonRpcErrorObject,
    JsonRpcNotification,
    JsonRpcRequest,
    JsonRpcSuccess,
)
from ahp.protocol.state import ROOT_URI, ChannelState, OpaqueState, Snapshot
from ahp.reducers import DEFAULT_SCROLLBACK

__all__ = [
    "LEGACY_VERSIONS",
    "PROTOCOL_VERSIONS",
    "RECONNECT_DELAYS",
    "Answer",
    "Applied",
    "ClientSession",
    "Ignored",
    "Inbound",
    "ReconnectForm",
    "ReconnectStep",
    "answer_too_large",
    "reconnect_delay",
]

#: What ``initialize`` offers: the 1.x family first, then the 0.5 family.
PROTOCOL_VERSIONS: Final = (*MODERN_VERSIONS, *LEGACY_VERSIONS)
ReconnectForm = Literal["watermark", "cursors"]
#: Seconds before each reconnect attempt (the last one repeats).
RECONNECT_DELAYS: Final = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0)
#: Envelopes kept at most for a channel whose ``subscribe`` answer was sent but not yet
#: read (see :meth:`ClientSession.subscribing`); past it the subscribe is asked again.
MAX_EARLY_ENVELOPES: Final = 4096
#: ``reconnect`` error: the host no longer knows this client (its record expired).
CLIENT_FORGOTTEN: Final = ErrorCode.NOT_FOUND
#: Handshake error (with ``data.limit``): the snapshots asked for exceed one answer.
ANSWER_TOO_LARGE: Final = -32000


def reconnect_delay(attempt: int) -> float:
    """Seconds to wait before reconnect attempt ``attempt`` (0-based)."""
    return RECONNECT_DELAYS[min(max(attempt, 0), len(RECONNECT_DELAYS) - 1)]


@attrs.frozen
class Answer:
    """The server answered our request ``id``: ``result`` or ``error``."""

    id: int
    result: Any = None
    error: JsonRpcErrorObject | None = None


@attrs.frozen
class Applied:
    """An envelope was folded into the mirrors (and may wake waiters)."""

    envelope: ActionEnvelope


@attrs.frozen
class Ignored:
    """A frame that could not be used (malformed, or an answer nobody awaits)."""

    why: str


Inbound = Answer | Applied | Ignored
#: What to do after a refused ``reconnect``: ask again with per-channel cursors,
#: ``initialize`` afresh with the same subscriptions, or give up on this attempt.
ReconnectStep = Literal["cursors", "initialize", "one by one", "fail"]


def answer_too_large(error: JsonRpcErrorObject) -> bool:
    """Whether a refused ``initialize`` or ``reconnect`` says that the snapshots asked for
    are more than one answer carries (this host's ``-32000`` with ``data.limit``: see
    :data:`ahp.server.handshake.MAX_ANSWER_SCROLLBACK`); asked one by one, they are not."""
    return (
        error.code == ANSWER_TOO_LARGE
        and isinstance(error.data, dict)
        and isinstance(error.data.get("limit"), int)
    )


class ClientSession:
    """The protocol side of one client: ids, mirrors, handshake, decisions.

    Owns its mirrors; the transport owns the socket and the waiters. One session
    lives across reconnects (the mirrors and cursors carry over).
    """

    def __init__(
        self,
        client_id: str,
        *,
        scrollback: int | None = DEFAULT_SCROLLBACK,
        protocol_versions: Sequence[str] = PROTOCOL_VERSIONS,
        reconnect_form: ReconnectForm = "watermark",
        client_info: Mapping[str, str] | None = None,
    ) -> None:
        self.client_id = client_id
        #: ``clientInfo`` of ``initialize`` (who we are; informational).
        self.client_info = dict(client_info or {"name": "ahp-terminals"})
        self.scrollback = scrollback
        #: What ``initialize`` offers, most preferred first.
        self.protocol_versions = tuple(protocol_versions)
        #: ``reconnect`` form: one connection-wide cursor, or one cursor per channel (1.x).
        self.reconnect_form: ReconnectForm = reconnect_form
        self.mirrors: dict[str, Mirror] = {}
        self.protocol_version: str | None = None
        #: The wire shape negotiated (how actions are written).
        self.dialect = Dialect.V05
        self.default_directory: str | None = None
        self.last_seen_seq = 0
        #: The host's resume token for this client (from ``initialize``; None if the host
        #: hands out none): presented at every reconnect, proof that this is the client.
        self.resume_token: str | None = None
        #: The server admitted this connection read-only (it may watch, not act).
        self.read_only = False
        #: Ids of our requests not answered yet.
        self.awaiting: set[int] = set()
        #: The channels of the mirrors a forgetful host dropped (see :meth:`retry_reconnect`).
        self._resubscribe: list[str] = []
        #: Channels to subscribe one by one after the handshake (:meth:`set_aside`), in order;
        #: left out of every ``reconnect`` until their ``subscribe`` is answered.
        self._aside: dict[str, None] = {}
        #: Envelopes of channels with a ``subscribe`` in flight, by channel;
        #: None once more than MAX_EARLY_ENVELOPES came (the subscribe must be asked again).
        self._early: dict[str, list[ActionEnvelope] | None] = {}
        self._ids = itertools.count(1)
        self._client_seq = itertools.count(1)

    # -- outbound ------------------------------------------------------------------------------

    def request(self, method: str, params: Mapping[str, Any] | None = None) -> tuple[int, str]:
        """A request's id and frame; its answer comes back as an :class:`Answer`."""
        msg_id = next(self._ids)
        self.awaiting.add(msg_id)
        frame = encode_message(JsonRpcRequest(id=msg_id, method=method, params=dict(params or {})))
        return msg_id, frame

    def notification(self, method: str, params: Mapping[str, Any]) -> str:
        return encode_message(JsonRpcNotification(method=method, params=dict(params)))

    def dispatch(self, channel: str, action: StateAction) -> tuple[int, str]:
        """The ``clientSeq`` and frame of a client action, applied write-ahead to the
        channel's mirror until the server's echo confirms or rejects it."""
        client_seq = next(self._client_seq)
        mirror = self.mirrors.get(channel)
        if mirror is not None:
            mirror.add_pending(client_seq, action)
        params = {
            "channel": channel,
            "clientSeq": client_seq,
            "action": action_json(action, self.dialect),
        }
        return client_seq, self.notification("dispatchAction", params)

    def unsubscribe(self, channel: str) -> str:
        self.mirrors.pop(channel, None)
        self._aside.pop(channel, None)
        return self.notification("unsubscribe", {"channel": channel})

    def initialize_request(self, subscriptions: Sequence[str] = (ROOT_URI,)) -> tuple[int, str]:
        """``initialize``, subscribed to the root channel and ``subscriptions``.

        The connection's cursor starts again from its answer: a fresh ``initialize`` goes
        to a host that does not know this client (the first connection, one that forgot
        it, or a server restarted on the same address, whose sequence starts again: a
        cursor kept from before asked it for a replay from far ahead, and the mirrors
        silently missed what came between)."""
        self.last_seen_seq = 0
        return self.request(
            "initialize",
            {
                "channel": ROOT_URI,
                "protocolVersions": list(self.protocol_versions),
                "clientId": self.client_id,
                "clientInfo": dict(self.client_info),
                "initialSubscriptions": list(dict.fromkeys([ROOT_URI, *subscriptions])),
                # This host's resume token (other hosts ignore the key): asked for, or
                # presented again (see ahp.server.identity.take_identity).
                "_meta": {RESUME_META: self.resume_token or ""},
            },
        )

    def reconnect_request(self) -> tuple[int, str]:
        """``reconnect`` in :attr:`reconnect_form` from the mirrors' cursors (the channels
        set aside left out: their mirrors are behind the connection's cursor)."""
        resumed = {c: m for c, m in self.mirrors.items() if c not in self._aside}
        if self.reconnect_form == "cursors":
            params: dict[str, Any] = {
                "channel": ROOT_URI,
                "clientId": self.client_id,
                "subscriptions": [
                    {"channel": c, "lastSeenServerSeq": m.last_seq} for c, m in resumed.items()
                ],
            }
        else:
            params = {
                "channel": ROOT_URI,
                "clientId": self.client_id,
                "lastSeenServerSeq": self.last_seen_seq,
                "subscriptions": list(resumed),
            }
        if self.resume_token is not None:
            params["_meta"] = {RESUME_META: self.resume_token}
        return self.request("reconnect", params)

    # -- inbound -------------------------------------------------------------------------------

    def receive(self, frame: str | bytes) -> Inbound:
        """Take one frame from the server."""
        try:
            message = decode_message(frame)
        except ProtocolError as exc:
            return Ignored(f"malformed frame: {exc}")
        if isinstance(message, JsonRpcSuccess | JsonRpcError):
            msg_id = message.id
            if not isinstance(msg_id, int) or msg_id not in self.awaiting:
                return Ignored(f"an answer to no request of ours (id {msg_id!r})")
            self.awaiting.discard(msg_id)
            if isinstance(message, JsonRpcError):
                return Answer(msg_id, error=message.error)
            return Answer(msg_id, result=message.result)
        if isinstance(message, JsonRpcNotification) and message.method == "action":
            try:
                envelope = structure(message.params, ActionEnvelope)
            except ProtocolError as exc:
                return Ignored(f"malformed envelope: {exc}")
            self.apply(envelope)
            return Applied(envelope)
        return Ignored("a message this client does not handle")

    def apply(self, envelope: ActionEnvelope) -> None:
        self.last_seen_seq = max(self.last_seen_seq, envelope.serverSeq)
        mirror = self.mirrors.get(envelope.channel)
        if mirror is not None:
            mirror.apply(envelope)
        if envelope.channel in self._early:
            # The host may have answered our subscribe and then published this; the
            # transport reads both before the caller installs the answer: keep it.
            early = self._early[envelope.channel]
            if early is not None:
                if len(early) < MAX_EARLY_ENVELOPES:
                    early.append(envelope)
                else:
                    self._early[envelope.channel] = None

    def subscribing(self, channel: str) -> None:
        """A ``subscribe`` of ``channel`` is about to be sent: keep its envelopes that
        arrive before :meth:`subscribed` reads the answer (bounded by
        :data:`MAX_EARLY_ENVELOPES`)."""
        self._early.setdefault(channel, [])

    def subscribe_failed(self, channel: str) -> None:
        """The ``subscribe`` of ``channel`` was refused or lost: keep nothing for it."""
        self._early.pop(channel, None)

    def install(self, snapshot: Snapshot) -> bool:
        """Start (or reset) the mirror of the snapshot's channel; False for a channel
        of a kind this client cannot mirror (kept out)."""
        # (Everything the host published before the snapshot has reached this client:
        # the snapshot holds its channel's, and other channels' came first on the link.)
        self.last_seen_seq = max(self.last_seen_seq, snapshot.fromSeq)
        state = snapshot.state
        if isinstance(state, OpaqueState):
            return False
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
        return True

    # -- results -------------------------------------------------------------------------------

    def _connected(self) -> None:
        # Dispatched actions that were pending are dropped on (re)connect, as AHP specifies.
        for mirror in self.mirrors.values():
            mirror.pending.clear()

    def initialized(self, result: Any) -> list[Snapshot]:
        """Read an ``initialize`` result; returns the snapshots not installed (opaque)."""
        value = structure(result, InitializeResult)
        meta = result.get("_meta") if isinstance(result, dict) else None
        token = meta.get(RESUME_META) if isinstance(meta, dict) else None
        self.resume_token = token if isinstance(token, str) else None
        self.read_only = isinstance(meta, dict) and meta.get(READ_ONLY_META) is True
        self._connected()
        self.protocol_version = value.protocolVersion
        self.dialect = dialect_of(value.protocolVersion)
        self.default_directory = value.defaultDirectory
        self.last_seen_seq = max(self.last_seen_seq, value.serverSeq)
        return [s for s in value.snapshots if not self.install(s)]

    def reconnected(self, result: Any) -> list[ActionEnvelope]:
        """Read a ``reconnect`` result (either form); returns the replayed envelopes
        (already applied), for the transport's listeners."""
        self._connected()
        replayed: list[ActionEnvelope] = []
        if isinstance(result, dict) and "channels" in result:
            for recovery in structure(result, ReconnectChannels).channels:
                if isinstance(recovery, ChannelMissing):
                    self.mirrors.pop(recovery.channel, None)
                elif isinstance(recovery, ChannelReplay):
                    replayed += self._replay(recovery.actions)
                else:
                    self.install(recovery.snapshot)
        elif isinstance(result, dict) and result.get("type") == "replay":
            replay = structure(result, ReconnectReplay)
            for channel in replay.missing:
                self.mirrors.pop(channel, None)
            replayed += self._replay(replay.actions)
        else:
            snapshots = structure(result, ReconnectSnapshot).snapshots
            kept = {s.resource for s in snapshots}
            for channel in list(self.mirrors):
                if channel not in kept and channel not in self._aside:
                    del self.mirrors[channel]
            for snapshot in snapshots:
                self.install(snapshot)
        return replayed

    def _replay(self, actions: Sequence[Any]) -> list[ActionEnvelope]:
        envelopes = [structure(raw, ActionEnvelope) for raw in actions]
        for envelope in envelopes:
            self.apply(envelope)
        return envelopes

    def subscribed(self, result: Any) -> ChannelState | None:
        """Read a ``subscribe`` result; the channel's state (None: not mirrorable)."""
        snapshot = structure(result, SubscribeResult).snapshot
        if snapshot is None:
            raise ProtocolError("a subscribe result without a snapshot")
        early = self._early.pop(snapshot.resource, [])
        self._aside.pop(snapshot.resource, None)
        if not self.install(snapshot):
            return None
        mirror = self.mirrors[snapshot.resource]
        for envelope in early or ():
            mirror.apply(envelope)  # (those at or below the snapshot's fromSeq are skipped)
        return mirror.state

    def needs_resubscribe(self, channel: str) -> bool:
        """Whether more envelopes came during the subscribe of ``channel`` than were kept
        (:data:`MAX_EARLY_ENVELOPES`): its mirror may have a gap; subscribe again."""
        return channel in self._early and self._early[channel] is None

    def disposed(self, channel: str) -> None:
        self.mirrors.pop(channel, None)
        self._aside.pop(channel, None)

    # -- decisions -----------------------------------------------------------------------------

    def retry_initialize(self, error: JsonRpcErrorObject) -> bool:
        """After a refused ``initialize``: True to ask again on a new connection (the
        offer is now the 0.5 family alone), False to give up."""
        if (
            error.code != ErrorCode.UNSUPPORTED_PROTOCOL_VERSION
            or self.protocol_versions == LEGACY_VERSIONS
        ):
            return False
        self.protocol_versions = LEGACY_VERSIONS
        return True

    def retry_reconnect(self, error: JsonRpcErrorObject) -> ReconnectStep:
        """After a refused ``reconnect``: what to send next (see the module docstring).
        ``"initialize"`` forgets the mirrors; :meth:`resubscriptions` has their channels."""
        if (
            error.code == ErrorCode.INVALID_PARAMS
            and self.dialect is Dialect.V1
            and self.reconnect_form == "watermark"
        ):
            self.reconnect_form = "cursors"
            return "cursors"
        if error.code == CLIENT_FORGOTTEN:
            self._resubscribe = list(self.mirrors)
            self.mirrors.clear()
            self._aside.clear()
            return "initialize"
        if answer_too_large(error):
            rest = [c for c in self.mirrors if c != ROOT_URI and c not in self._aside]
            if rest:
                self.set_aside(rest)
                return "one by one"
        return "fail"

    def resubscriptions(self) -> list[str]:
        """The channels to ask for in the fresh ``initialize`` after ``"initialize"``."""
        return list(self._resubscribe)

    def set_aside(self, channels: Sequence[str]) -> None:
        """Subscribe ``channels`` one by one once the handshake is answered (:meth:`aside`):
        every ``reconnect`` leaves them out until then, so a connection that drops
        between two of them resumes none of them from a cursor their mirrors are behind."""
        self._aside.update(dict.fromkeys(channels))

    def aside(self) -> list[str]:
        """The channels set aside and not subscribed yet, in order."""
        return list(self._aside)

    def lost(self) -> list[int]:
        """The connection is gone: the ids of the requests that will never be answered
        (no longer awaited)."""
        ids = sorted(self.awaiting)
        self.awaiting.clear()
        return ids
