"""The recent commands of one terminal, by id: :class:`CommandRegistry`.

Why: an agent comes back to a command (its output, its end, an answer to its
prompt) with only ``result.command_id``; and a terminal must know which of its
commands still holds it (:meth:`CommandRegistry.holder`: a new command is
refused while one runs).

Buffering: at most :data:`MAX_COMMANDS_KEPT` handles (each retains at most
:data:`~ahp.agent.budget.RETAINED_OUTPUT_BYTES` of output); beyond it the oldest
finished one is forgotten (else the oldest). Forgetting a running command's
handle does not stop its collector.

It also keeps what the commands learned about the terminal's shell: whether a
command replaced it (``exec bash``) by a shell without command detection
(:attr:`CommandRegistry.detection_lost`: later commands are delimited with
markers), or stopped reporting a command's end (``unset PROMPT_COMMAND``: markers too,
until a command's end is reported again); and the lock that lets one command start
at a time (:attr:`CommandRegistry.starting`). No I/O.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

import trio

if TYPE_CHECKING:
    from ahp.agent.command import CommandHandle

__all__ = ["MAX_COMMANDS_KEPT", "CommandRegistry"]

#: Handles kept per terminal (see :class:`CommandRegistry`).
MAX_COMMANDS_KEPT: Final = 8


class CommandRegistry:
    """The recent command handles of one terminal, oldest first."""

    def __init__(self, limit: int = 0) -> None:
        self.limit = limit or MAX_COMMANDS_KEPT
        self._handles: dict[str, CommandHandle] = {}
        #: A command replaced the shell (``exec bash``) by one without command detection,
        #: or the shell stopped reporting a command's end.
        self.detection_lost = False
        #: The interactive shell that replaced the terminal's shell (``exec fish``: its
        #: name), once seen: markers are typed in its syntax.
        self.replaced_by: str | None = None
        #: Held while a command is started, from the busy check until it is added.
        self.starting = trio.Lock()
        #: When the shell stopped reporting a command's end: the ids of the command parts
        #: the terminal's state held then (a part completed since, of a command typed
        #: with markers, shows the shell reports commands again: its hooks came back).
        self.lost_known: frozenset[str] | None = None

    def lose_detection(self, known: frozenset[str] | None = None) -> None:
        """Later commands are delimited with markers (``known``: see :attr:`lost_known`;
        ``None``: for good)."""
        self.detection_lost = True
        self.lost_known = known

    def detection_back(self, done: str) -> bool:
        """The shell, which had stopped reporting ends, reported the end of command part
        ``done``: if it is a new one, detection is back (see :attr:`lost_known`)."""
        if not self.detection_lost or self.lost_known is None or done in self.lost_known:
            return False
        self.detection_lost = False
        self.lost_known = None
        return True

    def add(self, handle: CommandHandle) -> None:
        self._handles[handle.id] = handle
        while len(self._handles) > self.limit:
            victim = next((h for h in self._handles.values() if h.done), None)
            if victim is None:
                victim = next(iter(self._handles.values()))
            del self._handles[victim.id]

    def get(self, command_id: str) -> CommandHandle:
        """The handle of ``command_id``; KeyError when unknown or forgotten."""
        try:
            return self._handles[command_id]
        except KeyError:
            raise KeyError(f"no command {command_id!r} (unknown, or forgotten)") from None

    def all(self) -> tuple[CommandHandle, ...]:
        """Oldest first."""
        return tuple(self._handles.values())

    def running(self) -> CommandHandle | None:
        """The most recent command not over, if any (it holds the terminal)."""
        for handle in reversed(self._handles.values()):
            if not handle.done:
                return handle
        return None
