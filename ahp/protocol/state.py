"""Channel state types: the terminal channel and the root catalogue.

Why frozen attrs classes: reducers return new values and never mutate old ones,
so a snapshot handed to a subscriber (or kept in the replay log) stays valid
forever without copying. Optional fields default to ``None`` and are *omitted*
on the wire (never written as ``null``); the codec in :mod:`ahp.protocol.codec`
owns that rule. Part texts are :class:`~ahp.protocol.rope.Rope` values and the
content is a :class:`~ahp.protocol.parts.Parts` sequence, so that appending
output stays O(chunk) while old states are alive, whatever the number of parts;
``str(part.value)`` gives the text, and the content compares equal to a tuple.

One model for every protocol version: these classes hold the union of what the
0.5 family and 1.x can say, and :mod:`ahp.protocol.dialect` projects them onto
either wire shape. Two fields exist for that: ``exited`` (an exit is known even
when no code was reported: 1.x says ``{"status": "exited"}``, 0.5 cannot say it)
and a session claim's ``chat`` (required in 1.x, unknown to 0.5). Neither is
ever written by the plain codec, which speaks the 0.5 shape.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any, ClassVar, Final, Literal

from attrs import field, frozen

from ahp.protocol.parts import Parts
from ahp.protocol.rope import Rope

ROOT_URI: Final = "ahp-root://"
TERMINAL_SCHEME: Final = "ahp-terminal:"
#: C0 and C1 control characters and DEL: never part of a terminal URI a server takes
#: from a client (a URI is shown in every client's list; C1 ``\x9b`` is an 8-bit CSI).
URI_CONTROLS: Final = re.compile("[\x00-\x1f\x7f-\x9f]")


def _rope(value: Rope | str) -> Rope:
    return value if isinstance(value, Rope) else Rope(value)


def _parts(value: Iterable[ContentPart]) -> Parts[ContentPart]:
    return Parts.of(value)


@frozen
class ClientClaim:
    """The terminal is held by a connected client."""

    KIND: ClassVar[str] = "client"
    clientId: str


@frozen
class SessionClaim:
    """The terminal is held by a session, optionally narrowed to a turn / tool call."""

    KIND: ClassVar[str] = "session"
    session: str
    turnId: str | None = None
    toolCallId: str | None = None
    #: The chat that claimed it (1.x; None when the claim came from a 0.5 client).
    chat: str | None = None


TerminalClaim = ClientClaim | SessionClaim


@frozen
class UnclassifiedPart:
    """Output before, between or after commands, or from a terminal without detection."""

    TYPE: ClassVar[str] = "unclassified"
    value: Rope = field(converter=_rope)


@frozen
class CommandPart:
    """One detected command: its command line and its own output."""

    TYPE: ClassVar[str] = "command"
    commandId: str
    commandLine: str
    output: Rope = field(converter=_rope)
    timestamp: int
    isComplete: bool
    exitCode: int | None = None
    durationMs: int | None = None


ContentPart = UnclassifiedPart | CommandPart


@frozen
class TerminalLifecycle:
    """1.x ``TerminalLifecycleState``: running, or exited (with a code if one was reported)."""

    status: Literal["running", "exited"]
    exitCode: int | None = None


RUNNING: Final = TerminalLifecycle(status="running")


def lifecycle_of(exited: bool, exit_code: int | None) -> TerminalLifecycle:
    """The lifecycle of a terminal whose state says ``exited`` / ``exitCode``."""
    if exited or exit_code is not None:
        return TerminalLifecycle(status="exited", exitCode=exit_code)
    return RUNNING


def part_text(part: ContentPart) -> Rope:
    """The text of a part, whatever its type."""
    return part.output if isinstance(part, CommandPart) else part.value


@frozen
class TerminalState:
    """Full state of one terminal channel (``ahp-terminal:/<id>``)."""

    title: str
    claim: TerminalClaim
    content: Parts[ContentPart] = field(converter=_parts)
    cwd: str | None = None
    cols: int | None = None
    rows: int | None = None
    exitCode: int | None = None
    supportsCommandDetection: bool | None = None
    isPty: bool | None = None
    #: The process has exited (True also when it reported no code; see the module doc).
    exited: bool = False

    @property
    def lifecycle(self) -> TerminalLifecycle:
        return lifecycle_of(self.exited, self.exitCode)

    def text(self) -> str:
        """The naive VT stream: every part's text, concatenated."""
        return "".join(str(part_text(p)) for p in self.content)

    def tail(self, count: int) -> str:
        """The last ``count`` characters of :meth:`text`, cheaply."""
        out: list[str] = []
        have = 0
        for part in reversed(self.content):
            piece = part_text(part).tail(count - have)
            out.append(piece)
            have += len(piece)
            if have >= count:
                break
        return "".join(reversed(out))


@frozen
class TerminalInfo:
    """Catalogue entry for one terminal on the root channel."""

    resource: str
    title: str
    claim: TerminalClaim
    exitCode: int | None = None
    #: As :attr:`TerminalState.exited`.
    exited: bool = False

    @property
    def lifecycle(self) -> TerminalLifecycle:
        return lifecycle_of(self.exited, self.exitCode)


@frozen
class RootConfig:
    """Host configuration carried through on the root channel (opaque here)."""

    schema: dict[str, Any]
    values: dict[str, Any]


@frozen
class RootState:
    """State of ``ahp-root://``: a terminal host has no agents, only terminals."""

    agents: tuple[Any, ...]
    terminals: tuple[TerminalInfo, ...] | None = None
    activeSessions: int | None = None
    config: RootConfig | None = None


ChannelState = TerminalState | RootState


@frozen
class OpaqueState:
    """The state of a channel kind this host does not model (a session's, a canvas's),
    as received; it re-encodes verbatim."""

    raw: dict[str, Any]


@frozen
class Snapshot:
    """A channel's state at ``fromSeq`` (later envelopes have a larger serverSeq)."""

    resource: str
    state: ChannelState | OpaqueState
    fromSeq: int
