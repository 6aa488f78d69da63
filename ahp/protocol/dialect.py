"""Protocol versions, their two wire dialects, and projecting one state onto each.

Why: clients in the field speak two families of AHP. The 0.5 family (0.3.x to
0.8.x: June's clients, the seed) writes an exit as ``exitCode?`` and a session
claim as ``{session, turnId?, toolCallId?}``; from 0.9 on (0.9.x, 0.10.x and
1.x: the official clients today, VS Code's agent host) a terminal carries a
required ``lifecycle`` (``{"status": "running"}`` or ``{"status": "exited",
"exitCode"?}``) and a session claim a required ``chat``. Every action payload is
the same in both. So the server keeps one internal state (the engine's; see
:mod:`ahp.protocol.state`) and each connection picks a :class:`Dialect` at
``initialize``; what it is sent is projected here, at the wire boundary.

Negotiation (:func:`negotiate`): the highest offered version that lies in one
of :data:`SUPPORTED_VERSIONS` (caret ranges: same major, and the same minor
while the major is 0), regardless of the order offered; None when nothing
overlaps (the server then answers ``-32005`` with ``supportedVersions``).

Projection rules (the 0.5 dialect is the plain codec's output):

- ``lifecycle`` replaces ``exitCode`` on ``TerminalState`` and ``TerminalInfo``
  in 1.x. An exit without a code is ``{"status": "exited"}`` there; the 0.5
  shape cannot say it, so a 0.5 client sees no ``exitCode`` (what 0.5 servers
  always sent for such an exit) and learns of it from the ``terminal/exited``
  action it receives either way.
- A session claim made by a 1.x client keeps its ``chat``; 0.5 clients are sent
  the claim without it. A session claim made by a 0.5 client has no chat; 1.x
  clients are sent ``chat`` equal to the ``session`` URI: in the 0.5 model a
  session was one conversation, and no URI the claimant did not name is
  invented.
- ``isPty`` is sent to both (the seed's 0.5 shape and 1.x both define it).

Upstream clients (README, *Upstream clients tested*): the stored 1.x Go client
decodes a snapshot's state by its top-level keys and takes any object with
``lifecycle`` for a session, so it cannot read a 1.x terminal snapshot; that is
its bug, and the 1.x shape is kept as the spec has it. Clients whose reducers
predate 1.x (0.8 and older) that offer 1.x anyway get 1.x and keep ``exitCode``
beside ``lifecycle`` in their mirror; the server answers what was offered.

Pure: no I/O. Encoding a 0.5 value costs nothing extra; a 1.x value is the
0.5 encoding with the two fields rewritten.
"""

from __future__ import annotations

import enum
from typing import Any, Final

import attrs

from ahp.protocol.actions import (
    ActionEnvelope,
    RootTerminalsChanged,
    StateAction,
    TerminalClaimed,
)
from ahp.protocol.codec import unstructure
from ahp.protocol.state import (
    OpaqueState,
    RootState,
    SessionClaim,
    Snapshot,
    TerminalClaim,
    TerminalInfo,
    TerminalLifecycle,
    TerminalState,
)

__all__ = [
    "LEGACY_VERSIONS",
    "MODERN_VERSIONS",
    "SUPPORTED_VERSIONS",
    "Dialect",
    "action_json",
    "claim_json",
    "dialect_of",
    "envelope_json",
    "lifecycle_json",
    "negotiate",
    "parse_version",
    "projects",
    "result_json",
    "snapshot_json",
    "state_json",
    "terminal_info_json",
]


class Dialect(enum.Enum):
    """The wire shape of one connection."""

    #: 0.3.x to 0.8.x: ``exitCode``, session claims without ``chat``.
    V05 = "0.5"
    #: 0.9.x, 0.10.x and 1.x: ``lifecycle``, session claims with ``chat``.
    V1 = "1.x"


#: What this host accepts, as caret ranges (what ``-32005`` lists).
SUPPORTED_VERSIONS: Final = (
    "^1.0.0",
    "^0.10.0",
    "^0.9.0",
    "^0.8.0",
    "^0.7.0",
    "^0.6.0",
    "^0.5.0",
    "^0.4.0",
    "^0.3.0",
)
#: Lowest and highest 0.x minor accepted, and the first minor of the 1.x dialect.
MIN_MINOR: Final = 3
MAX_MINOR: Final = 10
LIFECYCLE_MINOR: Final = 9
#: Highest major accepted (1.x: any minor, as caret ranges allow).
MAX_MAJOR: Final = 1
#: What clients offer to get each dialect (``ahp.client`` offers both, 1.x first).
MODERN_VERSIONS: Final = ("1.0.0", "0.9.0")
LEGACY_VERSIONS: Final = ("0.5.0",)
#: Longest version string looked at (longer entries are not versions).
MAX_VERSION_LENGTH: Final = 32


def parse_version(text: Any) -> tuple[int, int, int] | None:
    """``MAJOR.MINOR.PATCH`` as AHP writes it, else None: ASCII digits without leading
    zeros, no ``-pre`` or ``+build`` suffix (the 1.x reference's negotiation refuses
    those as malformed, and an entry that is not a version is not offered)."""
    if not isinstance(text, str) or len(text) > MAX_VERSION_LENGTH:
        return None
    parts = text.split(".")
    if len(parts) != 3 or not all(_number(p) for p in parts):
        return None
    return int(parts[0]), int(parts[1]), int(parts[2])


def _number(part: str) -> bool:
    """A SemVer numeric identifier: ASCII digits, no leading zero (but ``0``)."""
    return part.isascii() and part.isdigit() and (part == "0" or not part.startswith("0"))


def _accepted(version: tuple[int, int, int]) -> bool:
    major, minor, _ = version
    if major == 0:
        return MIN_MINOR <= minor <= MAX_MINOR
    return 1 <= major <= MAX_MAJOR


def negotiate(offered: Any) -> str | None:
    """The highest acceptable entry of ``offered`` (exactly as offered), or None.

    A non-list offers nothing (legacy clients sent an integer).
    """
    if not isinstance(offered, list):
        return None
    best: tuple[int, int, int] | None = None
    chosen: str | None = None
    for entry in offered:
        version = parse_version(entry)
        if version is not None and _accepted(version) and (best is None or version > best):
            best, chosen = version, entry
    return chosen


def dialect_of(version: str) -> Dialect:
    """The dialect of a negotiated version (anything unparsable: 0.5)."""
    parsed = parse_version(version)
    if parsed is None:
        return Dialect.V05
    major, minor, _ = parsed
    return Dialect.V1 if major >= 1 or minor >= LIFECYCLE_MINOR else Dialect.V05


# -- projection -------------------------------------------------------------------------------


def lifecycle_json(lifecycle: TerminalLifecycle) -> dict[str, Any]:
    out: dict[str, Any] = {"status": lifecycle.status}
    if lifecycle.exitCode is not None:
        out["exitCode"] = lifecycle.exitCode
    return out


def claim_json(claim: TerminalClaim, dialect: Dialect) -> dict[str, Any]:
    out: dict[str, Any] = unstructure(claim, TerminalClaim)
    if dialect is Dialect.V1 and isinstance(claim, SessionClaim):
        out["chat"] = claim.chat if claim.chat is not None else claim.session
    return out


def _terminal_json(value: TerminalState | TerminalInfo, dialect: Dialect) -> dict[str, Any]:
    out: dict[str, Any] = unstructure(value)
    if dialect is Dialect.V1:
        out.pop("exitCode", None)
        out["lifecycle"] = lifecycle_json(value.lifecycle)
        out["claim"] = claim_json(value.claim, dialect)
    return out


def terminal_info_json(info: TerminalInfo, dialect: Dialect) -> dict[str, Any]:
    return _terminal_json(info, dialect)


def state_json(state: TerminalState | RootState | OpaqueState, dialect: Dialect) -> dict[str, Any]:
    if isinstance(state, TerminalState):
        return _terminal_json(state, dialect)
    out: dict[str, Any] = unstructure(state)
    if dialect is Dialect.V1 and isinstance(state, RootState) and state.terminals is not None:
        out["terminals"] = [_terminal_json(t, dialect) for t in state.terminals]
    return out


def snapshot_json(snapshot: Snapshot, dialect: Dialect) -> dict[str, Any]:
    return {
        "resource": snapshot.resource,
        "state": state_json(snapshot.state, dialect),
        "fromSeq": snapshot.fromSeq,
    }


def projects(action: StateAction) -> bool:
    """Whether ``action`` is written differently in 1.x (a catalogue, or a session claim)."""
    return isinstance(action, RootTerminalsChanged) or (
        isinstance(action, TerminalClaimed) and isinstance(action.claim, SessionClaim)
    )


def action_json(action: StateAction, dialect: Dialect) -> dict[str, Any]:
    out: dict[str, Any] = unstructure(action, StateAction)
    if dialect is Dialect.V1:
        if isinstance(action, RootTerminalsChanged):
            out["terminals"] = [_terminal_json(t, dialect) for t in action.terminals]
        elif isinstance(action, TerminalClaimed):
            out["claim"] = claim_json(action.claim, dialect)
    return out


def envelope_json(envelope: ActionEnvelope, dialect: Dialect) -> dict[str, Any]:
    out: dict[str, Any] = unstructure(envelope, ActionEnvelope)
    if dialect is Dialect.V1 and projects(envelope.action):
        out["action"] = action_json(envelope.action, dialect)
    return out


def result_json(result: Any, dialect: Dialect) -> Any:
    """A typed command result (a class of :mod:`ahp.protocol.commands`), encoded by the
    one converter; in 1.x every :class:`Snapshot` inside it is projected
    (:func:`snapshot_json`). The result's own fields are the same in both dialects."""
    encoded = unstructure(result)
    if dialect is Dialect.V1:
        encoded = _project_snapshots(result, encoded)
    return encoded


def _project_snapshots(value: Any, encoded: Any) -> Any:
    """``encoded`` (the converter's output for ``value``) with the snapshots inside it
    written in 1.x, walking ``value``'s attrs fields and tuples beside their encoding."""
    if isinstance(value, Snapshot):
        return snapshot_json(value, Dialect.V1)
    if attrs.has(type(value)) and isinstance(encoded, dict):
        for field in attrs.fields(type(value)):
            if field.name in encoded:
                encoded[field.name] = _project_snapshots(
                    getattr(value, field.name), encoded[field.name]
                )
        return encoded
    if isinstance(value, tuple) and isinstance(encoded, list):
        return [_project_snapshots(v, e) for v, e in zip(value, encoded, strict=True)]
    return encoded
