"""The commands started through the tools: :class:`Tracked` and the bounded
:class:`CommandTable` of them.

Why a module of its own: a later call (``read_output``, ``wait_command``,
``send_input``, ``kill_command``) comes back to a command by its
``command_id`` alone, so the tools keep each command's handle (while it runs)
or last result, and its read cursor. Bounded by :data:`MAX_TRACKED_COMMANDS`:
the oldest finished commands are forgotten first; when all are running a new
command is refused. Ownership: the table holds the handles, not the commands
(forgetting one does not stop it). Used from one Trio thread; no I/O.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Final

import attrs

from ahp.mcp.contract import Handle, Result
from ahp.mcp.output import ToolError
from ahp.mcp.render import Shown, budget_text, display_name, elide_echo

__all__ = ["MAX_TRACKED_COMMANDS", "CommandTable", "Tracked"]

#: Commands whose handles are kept for read_output / wait_command / kill_command.
MAX_TRACKED_COMMANDS: Final = 256


@attrs.define
class Tracked:
    """A command started through the tools: its handle while it runs, else its last result."""

    command_id: str
    uri: str
    command: str  # as the model wrote it (without a ``cd`` we put in front)
    handle: Handle | None  # None: it was over when run() returned
    last: Result
    #: An answer has shown the output of a command that had no handle.
    consumed: bool = False

    def read(self, *, full: bool, head_bytes: int, tail_bytes: int, typed: str = "") -> Shown:
        """What the next answer shows, and the cursor moved past it (synchronous: call it
        right after taking the result). ``typed``: text just sent, whose echo is left out."""
        handle = self.handle
        if full:
            return self._whole(head_bytes, tail_bytes)
        if handle is not None:
            new = handle.read_new()
        else:
            new = "" if self.consumed else self.last.output
            self.consumed = True
        echo = 0
        if typed:
            new, echo = elide_echo(new, typed)
        shown = budget_text(new, head_bytes, tail_bytes)
        return attrs.evolve(shown, echo_lines=echo)

    def _whole(self, head_bytes: int, tail_bytes: int) -> Shown:
        """All the output kept for the command, within this call's budget (the cursor
        moved to its end)."""
        self.consumed = True
        if self.handle is not None:
            self.handle.read_new()
            shown = budget_text(self.handle.output(), head_bytes, tail_bytes)
        else:
            # The result's output, already budgeted by the call that ran it: cut again
            # when this budget is smaller, else shown with that first cut's counts.
            shown = budget_text(self.last.output, head_bytes, tail_bytes)
            if not shown.truncated:
                shown = Shown.whole(self.last)
        return attrs.evolve(shown, new_only=False)

    @property
    def terminal(self) -> str:
        return display_name(self.uri)

    @property
    def done(self) -> bool:
        return self.handle is None or self.handle.done

    def result(self) -> Result:
        """The result so far, without waiting."""
        if self.handle is not None:
            self.last = self.handle.result()
        return self.last

    async def wait(self, timeout: float) -> Result:
        """Until the command ends, waits for input, or ``timeout`` s pass (never stops it)."""
        if self.handle is not None:
            self.last = await self.handle.wait(timeout=timeout)
        return self.last


class CommandTable:
    """Started commands by id, bounded by ``limit`` (oldest finished ones evicted first).

    Not thread-safe; used from one Trio thread. No I/O.
    """

    def __init__(self, limit: int = MAX_TRACKED_COMMANDS) -> None:
        self.limit = limit
        self._by_id: OrderedDict[str, Tracked] = OrderedDict()

    def __len__(self) -> int:
        return len(self._by_id)

    def check_room(self) -> None:
        """Make room for one more command, or raise ``ToolError`` when all are running."""
        while len(self._by_id) >= self.limit:
            victim = next((cid for cid, t in self._by_id.items() if t.done), None)
            if victim is None:
                raise ToolError(
                    f"{len(self._by_id)} commands are running, the most this server tracks; "
                    "stop some with kill_command or close_terminal first"
                )
            del self._by_id[victim]

    def add(self, tracked: Tracked) -> None:
        """Keep ``tracked``, newest last (one kept under the same id before is replaced:
        a ``pty: false`` run's id is its exec terminal's name, which a restarted
        ``--connect`` server may give again)."""
        self._by_id.pop(tracked.command_id, None)
        self.check_room()
        self._by_id[tracked.command_id] = tracked

    def get(self, command_id: str) -> Tracked:
        tracked = self._by_id.get(command_id)
        if tracked is None:
            raise ToolError(
                f"no command {command_id!r}: use the command_id a run_command result gave "
                "(list_terminals shows the running ones)"
            )
        return tracked

    def running_in(self, uri: str) -> Tracked | None:
        """The newest unfinished command started in terminal ``uri``."""
        for tracked in reversed(self._by_id.values()):
            if tracked.uri == uri and not tracked.done:
                return tracked
        return None

    def forget_terminal(self, uri: str) -> None:
        for cid in [cid for cid, t in self._by_id.items() if t.uri == uri]:
            del self._by_id[cid]
