"""What a command run returns: :class:`CommandResult` and :class:`BackgroundProcess`.

Why a module of its own: the same frozen values come from an in-process
:class:`~ahp.engine.Terminal`, a remote :class:`~ahp.client.RemoteTerminal`, the
CLI's ``run --json`` and the MCP tools, and are the contract an agent framework
codes against (``docs/agent.md`` describes it). Pure data.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs

from ahp.agent.status import FINAL_STATUSES, STATUSES

if TYPE_CHECKING:
    from ahp.agent.handle import CommandHandle

__all__ = [
    "FINAL_STATUSES",
    "STATUSES",
    "BackgroundProcess",
    "CommandResult",
    "Holder",
]


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


@attrs.frozen
class CommandResult:
    """The result of one command (see ``docs/agent.md``).

    Attributes:
        command_line: the command as submitted.
        status: ``"finished"`` (exit code known), ``"running"`` (still running:
            ``yield_after`` or a ``wait`` timeout passed; see :attr:`handle`),
            ``"waiting_for_input"`` (blocked reading the terminal; answer with
            ``handle.send_input``), ``"timed_out"`` (the hard ``timeout`` passed and
            the command was interrupted), ``"interrupted"`` / ``"killed"`` (by the
            handle), ``"shell_exited"`` (the terminal's shell exited first, or the
            terminal was disposed), ``"lost"`` (the handle stopped following the
            command while it ran: the connection is gone, the client closed, or its
            collector failed), ``"refused"`` (never typed: the terminal was busy with
            :attr:`holder`). One of :data:`STATUSES`; see ``docs/agent.md``.
        output: the *rendered* output (progress bars as their last state, cursor
            moves applied, no escapes, the alternate screen's contents left out)
            within the budget: head, a marker line, tail.
        raw_output: the output as the terminal printed it (VT text), the most
            recent ``head_bytes + tail_bytes`` bytes of it.
        exit_code: the exit code when the command finished; the shell's own exit
            code when the command ended the shell (``shell_exited``); else ``None``.
        duration_ms: wall time from submission to the end (or to now).
        truncated: ``output`` left something out (see the omitted counts).
        omitted_bytes: exactly how many bytes of rendered output were left out.
        omitted_lines: how many whole lines were left out (a line cut at the edge
            of the head or the tail counts as shown).
        total_bytes: the size of the whole rendered output (UTF-8, one newline per line).
        total_lines: its number of lines.
        timed_out: the hard timeout passed.
        waiting_for_input: the command is blocked reading the terminal.
        alternate_screen: the command used the alternate screen (a pager, an
            editor); what it showed there is not in ``output`` (see ``term.screen()``).
        shell_exited: the terminal's shell itself exited.
        background: processes the command left running (in-process only; a remote
            client cannot see the server's processes and reports none).
        command_id: the id of the command's :class:`~ahp.agent.CommandHandle` (of an
            exec: its terminal's URI).
        note: one sentence for the agent: why it waits for input and how to answer,
            why it was refused, how it was lost (empty when there is nothing to say).
        holder: the command that held the terminal (``refused`` only).
        handle: the handle while the command still runs, else ``None``.
        stderr: a non-pty run's (``exec_command``) stderr, rendered within the same
            budget as ``output``; empty for a terminal command (its stderr is in
            ``output``).
        signal: the name of the signal that ended a non-pty run (``"SIGKILL"``),
            else ``None``.
    """

    command_line: str
    status: str
    output: str
    raw_output: str
    exit_code: int | None
    duration_ms: int
    truncated: bool
    omitted_bytes: int
    omitted_lines: int
    total_bytes: int
    total_lines: int
    timed_out: bool
    waiting_for_input: bool
    alternate_screen: bool
    shell_exited: bool
    background: tuple[BackgroundProcess, ...]
    command_id: str
    note: str = ""
    holder: Holder | None = None
    handle: CommandHandle | None = attrs.field(default=None, eq=False, repr=False)
    stderr: str = ""
    signal: str | None = None

    @property
    def done(self) -> bool:
        """The command is over (any final status)."""
        return self.status in FINAL_STATUSES

    def to_json(self) -> dict[str, object]:
        """A JSON-ready dict of every field but :attr:`handle`."""
        return attrs.asdict(self, filter=lambda a, _: a.name != "handle")
