"""Actions and the envelope that sequences them.

Why one module: the set of action types is the protocol's vocabulary, and the
codec, the reducers and the server's dispatch rules all switch on it. Each
action is a frozen class whose wire tag is a ``ClassVar`` (``TYPE``), never a
defaulted field, so the tag can never be omitted on encode. Action types this
host does not know (``session/*``, future additions) decode to
:class:`UnknownAction`, which keeps the raw JSON object and re-encodes it
verbatim; every reducer treats it as a no-op.
"""

from __future__ import annotations

from typing import Any, ClassVar, Final

from attrs import frozen

from ahp.protocol.state import TerminalClaim, TerminalInfo

__all__ = [
    "CLIENT_DISPATCHABLE",
    "ActionEnvelope",
    "ActionOrigin",
    "RootActiveSessionsChanged",
    "RootAction",
    "RootAgentsChanged",
    "RootConfigChanged",
    "RootTerminalsChanged",
    "StateAction",
    "TerminalAction",
    "TerminalClaimed",
    "TerminalCleared",
    "TerminalCommandDetectionAvailable",
    "TerminalCommandExecuted",
    "TerminalCommandFinished",
    "TerminalCwdChanged",
    "TerminalData",
    "TerminalExited",
    "TerminalInput",
    "TerminalResized",
    "TerminalTitleChanged",
    "UnknownAction",
]


@frozen
class TerminalData:
    """Output from the pty (server-authoritative); appends to the content."""

    TYPE: ClassVar[str] = "terminal/data"
    data: str


@frozen
class TerminalInput:
    """Keystrokes for the pty; a reducer no-op (side effect only)."""

    TYPE: ClassVar[str] = "terminal/input"
    data: str


@frozen
class TerminalResized:
    TYPE: ClassVar[str] = "terminal/resized"
    cols: int
    rows: int


@frozen
class TerminalClaimed:
    TYPE: ClassVar[str] = "terminal/claimed"
    claim: TerminalClaim


@frozen
class TerminalTitleChanged:
    TYPE: ClassVar[str] = "terminal/titleChanged"
    title: str


@frozen
class TerminalCwdChanged:
    TYPE: ClassVar[str] = "terminal/cwdChanged"
    cwd: str


@frozen
class TerminalExited:
    TYPE: ClassVar[str] = "terminal/exited"
    exitCode: int | None = None


@frozen
class TerminalCleared:
    TYPE: ClassVar[str] = "terminal/cleared"


@frozen
class TerminalCommandDetectionAvailable:
    TYPE: ClassVar[str] = "terminal/commandDetectionAvailable"


@frozen
class TerminalCommandExecuted:
    TYPE: ClassVar[str] = "terminal/commandExecuted"
    commandId: str
    commandLine: str
    timestamp: int


@frozen
class TerminalCommandFinished:
    TYPE: ClassVar[str] = "terminal/commandFinished"
    commandId: str
    exitCode: int | None = None
    durationMs: int | None = None


@frozen
class RootTerminalsChanged:
    TYPE: ClassVar[str] = "root/terminalsChanged"
    terminals: tuple[TerminalInfo, ...]


@frozen
class RootAgentsChanged:
    TYPE: ClassVar[str] = "root/agentsChanged"
    agents: tuple[Any, ...]


@frozen
class RootActiveSessionsChanged:
    TYPE: ClassVar[str] = "root/activeSessionsChanged"
    activeSessions: int


@frozen
class RootConfigChanged:
    TYPE: ClassVar[str] = "root/configChanged"
    config: dict[str, Any]
    replace: bool | None = None


@frozen
class UnknownAction:
    """An action type this host does not model; re-encoded verbatim, never applied."""

    raw: dict[str, Any]

    @property
    def type(self) -> str:
        value = self.raw.get("type")
        return value if isinstance(value, str) else ""


TerminalAction = (
    TerminalData
    | TerminalInput
    | TerminalResized
    | TerminalClaimed
    | TerminalTitleChanged
    | TerminalCwdChanged
    | TerminalExited
    | TerminalCleared
    | TerminalCommandDetectionAvailable
    | TerminalCommandExecuted
    | TerminalCommandFinished
)
RootAction = (
    RootTerminalsChanged | RootAgentsChanged | RootActiveSessionsChanged | RootConfigChanged
)
StateAction = TerminalAction | RootAction | UnknownAction

#: Action types a client may dispatch (``@clientDispatchable`` upstream).
CLIENT_DISPATCHABLE: Final[frozenset[str]] = frozenset(
    {
        TerminalInput.TYPE,
        TerminalResized.TYPE,
        TerminalClaimed.TYPE,
        TerminalTitleChanged.TYPE,
        TerminalCleared.TYPE,
        RootConfigChanged.TYPE,
    }
)


def action_type(action: StateAction) -> str:
    """The wire ``type`` tag of any action, known or not."""
    if isinstance(action, UnknownAction):
        return action.type
    return action.TYPE


@frozen
class ActionOrigin:
    """Who dispatched an echoed client action."""

    clientId: str
    clientSeq: int


@frozen
class ActionEnvelope:
    """One sequenced state change on a channel (``action`` notification params)."""

    channel: str
    action: StateAction
    serverSeq: int
    origin: ActionOrigin | None = None
    rejectionReason: str | None = None
