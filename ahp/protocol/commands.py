"""Typed params and results of the JSON-RPC commands a terminal host answers.

Why typed: params are validated by the one codec, so every malformed field
yields a ``-32602`` error whose ``data.path`` names it (``$.params.cols``).
Unknown extra keys (``_meta``, ``clientInfo``, ``delivery``, ``flowControl``…)
are ignored, as AHP requires.
"""

from __future__ import annotations

from typing import Any, Literal

from attrs import frozen

from ahp.protocol.state import Snapshot, TerminalClaim

__all__ = [
    "CreateTerminalParams",
    "DispatchActionParams",
    "InitializeParams",
    "InitializeResult",
    "ReconnectParams",
    "ReconnectReplay",
    "ReconnectSnapshot",
    "SubscribeParams",
    "SubscribeResult",
]


@frozen
class InitializeParams:
    channel: str
    clientId: str
    protocolVersions: Any = None
    initialSubscriptions: tuple[str, ...] = ()
    locale: str | None = None


@frozen
class InitializeResult:
    protocolVersion: str
    serverSeq: int
    snapshots: tuple[Snapshot, ...]
    defaultDirectory: str | None = None


@frozen
class ReconnectParams:
    channel: str
    clientId: str
    lastSeenServerSeq: int
    subscriptions: tuple[str, ...] = ()


@frozen
class ReconnectReplay:
    type: Literal["replay"]
    actions: tuple[Any, ...]  # encoded ActionEnvelope objects
    missing: tuple[str, ...]


@frozen
class ReconnectSnapshot:
    type: Literal["snapshot"]
    snapshots: tuple[Snapshot, ...]


@frozen
class SubscribeParams:
    channel: str


@frozen
class SubscribeResult:
    snapshot: Snapshot


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
