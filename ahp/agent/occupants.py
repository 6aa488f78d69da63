"""Who else is in a terminal: :class:`Holder` and :class:`BackgroundProcess`.

Why a module of its own: a command's record notes them as it learns them (the
command that held the terminal when a new one was refused, the processes a
command left running), non-pty execution reports the second, and both end up in
the :class:`~ahp.agent.command.CommandResult`. Pure data, below every module
that builds or reads them.
"""

from __future__ import annotations

import attrs

__all__ = ["BackgroundProcess", "Holder"]


@attrs.frozen
class BackgroundProcess:
    """A process the command started that was still running when it finished."""

    pid: int
    command_line: str


@attrs.frozen
class Holder:
    """The command that holds a terminal (why a new one was refused).

    Attributes:
        command_line: its command line, as typed (or as the shell reported it).
        command_id: its handle's id when it was started through this terminal
            surface (``term.command(command_id)``), else ``None`` (typed by someone
            else: answer with ``term.send_input`` or stop it with ``term.interrupt``).
        status: ``running`` or ``waiting_for_input``.
    """

    command_line: str
    command_id: str | None
    status: str
