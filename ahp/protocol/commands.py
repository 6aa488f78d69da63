"""Typed params and results of the JSON-RPC commands a terminal host answers.

Why typed: params are validated by the one codec, so every malformed field
yields a ``-32602`` error whose ``data.path`` names it (``$.params.cols``).
Unknown extra keys (``_meta``, ``capabilities``, ``x-`` extensions…) are
ignored, as AHP requires.

Both protocol families are modelled here: 1.x added ``clientInfo`` /
``serverInfo``, subscribe options (``delivery``, ``view`` and the windowed
delivery offer ``flowControl``, which this host declines by leaving it out of
its answer), ``listSessions`` paging, and two ``reconnect`` forms — the 0.5
shape with an optional ``windows`` (:class:`ReconnectParams`) and per-channel
cursors (:class:`ReconnectCursorParams`, answered by
:class:`ReconnectChannels`); :func:`reconnect_form` tells them
apart by the element type of ``subscriptions``. Results are typed both ways:
the server builds them as these classes and encodes them with
:func:`ahp.protocol.dialect.result_json` (the converter; the snapshots inside
are projected per dialect), the client reads them back with the converter.
"""

from __future__ import annotations

from typing import Any, ClassVar, Final, Literal

from attrs import frozen

from ahp.protocol.state import Snapshot, TerminalClaim

__all__ = [
    "MAX_RESUME_TOKEN",
    "RESUME_META",
    "ResumeTokenError",
    "resume_token",
    "ChannelFlowControl",
    "ChannelMissing",
    "ChannelReceiveLimits",
    "ChannelRecovery",
    "ChannelReplay",
    "ChannelReplayCursor",
    "ChannelSnapshot",
    "CreateTerminalParams",
    "DispatchActionParams",
    "Implementation",
    "InitializeParams",
    "InitializeResult",
    "ListSessionsParams",
    "ListSessionsResult",
    "ReconnectChannels",
    "ReconnectCursorParams",
    "ReconnectParams",
    "ReconnectReplay",
    "ReconnectSnapshot",
    "ResumedChannelSubscription",
    "ResumedWindows",
    "SubscribeFlowControl",
    "SubscribeParams",
    "SubscribeResult",
    "WindowCheckpoint",
    "WindowCheckpoints",
    "reconnect_form",
]


@frozen
class Implementation:
    """Who is on the other end (``clientInfo`` / ``serverInfo``); informational only."""

    name: str
    version: str | None = None
    title: str | None = None


@frozen
class InitializeParams:
    channel: str
    clientId: str
    protocolVersions: Any = None
    initialSubscriptions: tuple[str, ...] = ()
    locale: str | None = None
    clientInfo: Implementation | None = None


@frozen
class InitializeResult:
    protocolVersion: str
    serverSeq: int
    snapshots: tuple[Snapshot, ...]
    defaultDirectory: str | None = None
    serverInfo: Implementation | None = None
    #: A chat feature (a prefix that turns a chat message into a terminal command):
    #: read when a server sends it, never set by this host.
    terminalCommandPrefix: str | None = None


# -- windowed delivery (1.x, experimental): offered by clients, declined here -----------------


@frozen
class ChannelReceiveLimits:
    windowBytes: int
    maximumFrameBytes: int
    maximumMessageBytes: int


@frozen
class SubscribeFlowControl:
    """A client's offer of windowed delivery for one subscription."""

    receive: ChannelReceiveLimits


@frozen
class ChannelFlowControl:
    """An accepted offer (this host never sends one: leaving it out declines)."""

    clientReceive: ChannelReceiveLimits
    hostReceive: ChannelReceiveLimits


@frozen
class WindowCheckpoint:
    channel: str
    lastAppliedServerSeq: int | None = None


@frozen
class WindowCheckpoints:
    """``reconnect.windows`` (form A): progress of windowed subscriptions."""

    items: tuple[WindowCheckpoint, ...]


@frozen
class ResumedChannelSubscription:
    channel: str
    flowControl: ChannelFlowControl
    recovery: Literal["replay", "snapshot", "live"]


@frozen
class ResumedWindows:
    """A reconnect result's ``windows`` (only when the request carried ``windows``)."""

    items: tuple[ResumedChannelSubscription, ...]


# -- reconnect ----------------------------------------------------------------------------------


@frozen
class ReconnectParams:
    """Form A (0.5 and 1.x): one connection-wide cursor over string subscriptions."""

    channel: str
    clientId: str
    lastSeenServerSeq: int
    subscriptions: tuple[str, ...] = ()
    windows: WindowCheckpoints | None = None


@frozen
class ChannelReplayCursor:
    channel: str
    #: The newest serverSeq the client applied on this channel; 0: no baseline yet.
    lastSeenServerSeq: int


@frozen
class ReconnectCursorParams:
    """Form B (1.x): one cursor per channel."""

    channel: str
    clientId: str
    subscriptions: tuple[ChannelReplayCursor, ...]


#: The key, under ``_meta`` of ``initialize`` / ``reconnect`` params and of the
#: ``initialize`` result, that carries this host's resume token (an extension: other
#: hosts ignore it, other clients never send it). In a request: the token an earlier
#: ``initialize`` of this ``clientId`` returned, or ``""`` (none yet: bind this id to a
#: token); in the result: the token.
RESUME_META: Final = "x-ahp-terminals/resume"
#: ``InitializeResult._meta`` key telling a read-only connection what it is (the viewer
#: page hides "Take over" then; ``attach`` says it only watches).
READ_ONLY_META: Final = "ahp-terminals/readOnly"
#: Longest resume token accepted in a request (this host's are 32 characters).
MAX_RESUME_TOKEN: Final = 256


class ResumeTokenError(ValueError):
    """A malformed resume token (not a string, or longer than :data:`MAX_RESUME_TOKEN`)."""


def resume_token(params: Any) -> str | None:
    """The resume token a request presents (``_meta[RESUME_META]``), or None.

    Raises:
        ResumeTokenError: the value is not a string of at most MAX_RESUME_TOKEN.
    """
    meta = params.get("_meta") if isinstance(params, dict) else None
    if not isinstance(meta, dict) or RESUME_META not in meta:
        return None
    token = meta[RESUME_META]
    if not isinstance(token, str) or len(token) > MAX_RESUME_TOKEN:
        raise ResumeTokenError(f"a string of at most {MAX_RESUME_TOKEN} characters")
    return token


def reconnect_form(params: Any) -> type[ReconnectParams] | type[ReconnectCursorParams]:
    """Which reconnect form ``params`` (raw JSON) uses: form B when ``subscriptions``
    holds objects, or is an empty list with no ``lastSeenServerSeq``; form A
    otherwise (so a malformed request is reported against the 0.5 shape)."""
    if not isinstance(params, dict):
        return ReconnectParams
    subscriptions = params.get("subscriptions")
    if isinstance(subscriptions, list):
        if subscriptions:
            return ReconnectCursorParams if isinstance(subscriptions[0], dict) else ReconnectParams
        if "lastSeenServerSeq" not in params:
            return ReconnectCursorParams
    return ReconnectParams


@frozen
class ReconnectReplay:
    type: Literal["replay"]
    actions: tuple[Any, ...]  # encoded ActionEnvelope objects
    missing: tuple[str, ...]
    windows: ResumedWindows | None = None


@frozen
class ReconnectSnapshot:
    type: Literal["snapshot"]
    snapshots: tuple[Snapshot, ...]
    #: 1.x: requested channels that cannot be resumed (0.5 had no such field here).
    missing: tuple[str, ...] | None = None
    windows: ResumedWindows | None = None


@frozen
class ChannelReplay:
    KIND: ClassVar[str] = "replay"
    channel: str
    actions: tuple[Any, ...]  # encoded ActionEnvelope objects, ascending serverSeq


@frozen
class ChannelSnapshot:
    KIND: ClassVar[str] = "snapshot"
    channel: str
    snapshot: Snapshot


@frozen
class ChannelMissing:
    KIND: ClassVar[str] = "missing"
    channel: str


ChannelRecovery = ChannelReplay | ChannelSnapshot | ChannelMissing


@frozen
class ReconnectChannels:
    """Form B's result: exactly one recovery per requested channel."""

    channels: tuple[ChannelRecovery, ...]


# -- subscriptions and the rest ------------------------------------------------------------------


@frozen
class SubscribeParams:
    channel: str
    #: Advisory bound on intentional buffering (``maxLatencyMs``); honoured trivially:
    #: this host does not hold output back to coalesce it.
    delivery: dict[str, Any] | None = None
    #: Chat-only (``turns``); ignored here, as the spec allows.
    view: dict[str, Any] | None = None
    flowControl: SubscribeFlowControl | None = None


@frozen
class SubscribeResult:
    snapshot: Snapshot | None = None
    flowControl: ChannelFlowControl | None = None


@frozen
class ListSessionsParams:
    channel: str
    limit: int | None = None
    cursor: str | None = None


@frozen
class ListSessionsResult:
    #: Sessions (a terminal host has none: always empty here).
    items: tuple[Any, ...]
    nextCursor: str | None = None


@frozen
class DispatchActionParams:
    channel: str
    clientSeq: int
    action: dict[str, Any]  # structured separately: a bad action is rejected, not an error


@frozen
class CreateTerminalParams:
    channel: str
    claim: TerminalClaim
    name: str | None = None
    cwd: str | None = None
    cols: int | None = None
    rows: int | None = None


@frozen
class ChannelParams:
    channel: str
