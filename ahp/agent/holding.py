"""What holds a terminal before a command is typed into it, and what to say when one does.

Why a module of its own: a command is never typed into a busy terminal
(:func:`ahp.agent.start.start_command` asks first), and what counts as busy has
several sources that change as the agent layer learns about programs: a command of
this surface not over yet (one that is ending gets :data:`ENDING_WAIT` first), a
command the shell reports running, a foreground job other than the shell (without
detection), and not a command that replaced the shell by another shell now at its
prompt (``exec bash``: command detection is lost, markers from then on). Those rules
and the refusal's wording live here; the collector follows commands.

I/O: only through the terminal's port (its processes' status); no waiting but the
grace given to an ending command.
"""

from __future__ import annotations

from typing import Final

import trio

from ahp.agent.command import CommandHandle
from ahp.agent.evidence import TtyView, evidence_of, interactive_shell
from ahp.agent.occupants import Holder
from ahp.agent.port import TerminalPort
from ahp.protocol.state import CommandPart, TerminalState

__all__ = [
    "ENDING_WAIT",
    "INTERRUPT_GRACE",
    "KILL_WAIT",
    "before_prompt",
    "holder_of",
    "refusal_note",
    "replaced_by",
]

#: How long to wait for the shell to report an interrupted command's end; a command
#: that ignored its Ctrl-C this long (a timeout's, a cancelled run's) is killed.
INTERRUPT_GRACE: Final = 5.0
#: After such a command was killed, how long ``run`` waits for its end (the kill's
#: delivery, the shell's report) before returning it ``running``.
KILL_WAIT: Final = 2.0
#: How long a holder that is ending (interrupted, timed out, killed, its run
#: cancelled) is given to end before a new command is refused: its Ctrl-C's grace,
#: then its kill's (one rule for every surface: ``run``, the MCP ``run_command``).
ENDING_WAIT: Final = INTERRUPT_GRACE + KILL_WAIT


def _last_command(state: TerminalState) -> CommandPart | None:
    content = state.content
    return content[-1] if content and isinstance(content[-1], CommandPart) else None


def before_prompt(state: TerminalState) -> bool:
    """The last command finished and nothing was printed after it: the shell has not
    drawn its prompt yet, so its line editor is not reading (a command typed now
    would be echoed twice: by the kernel, then by the editor)."""
    part = _last_command(state)
    return part is not None and part.isComplete


def _ending(handle: CommandHandle) -> bool:
    return bool(handle.record.machine.asked)


async def holder_of(port: TerminalPort, *, detected: bool) -> Holder | None:
    """What holds the terminal now (see the module doc), or ``None``: at the prompt.
    ``detected``: the shell has command detection (else its foreground is asked)."""
    running = port.commands.running()
    if running is not None and _ending(running):
        with trio.move_on_after(ENDING_WAIT):
            await running.wait_done()
        running = port.commands.running()
    if running is not None:
        return Holder(running.command_line, running.id, running.status)
    state = port.state
    part = _last_command(state) if detected else None
    if detected and (part is None or part.isComplete):
        return None
    processes = port.processes
    status = await processes.tty_status() if processes is not None else None
    replacing = _replacing_shell(status) if part is not None else None
    if replacing is not None:
        # The open command replaced the shell by one without detection (``exec bash``),
        # now at its prompt: it holds nothing; markers from now on, in its syntax.
        port.commands.lose_detection()
        port.commands.replaced_by = interactive_shell(replacing)
        return None
    waiting = "waiting_for_input" if evidence_of(status) is not None else "running"
    if part is not None:
        return Holder(part.commandLine, None, waiting)
    if status is None or status.shell_foreground is not False:
        await trio.lowlevel.checkpoint()
        return None
    line = status.programs[0] if status.programs else f"process group {status.foreground_pgrp}"
    return Holder(line, None, waiting)


def replaced_by(status: TtyView | None) -> str | None:
    """The command line of the program that replaced the terminal's shell process
    (``exec``: ``status.shell_replaced``) when that process, in the foreground, reads
    or polls the terminal with nothing unread; else ``None``. (A builtin ``read`` of
    the shell itself keeps the shell's command line.)"""
    if status is None or not status.shell_replaced or not status.shell_foreground:
        return None
    if status.unread or not status.programs or not (status.readers or status.tty_pollers):
        return None
    return status.programs[0]


def _replacing_shell(status: TtyView | None) -> str | None:
    """:func:`replaced_by`, when that program is an interactive shell at its prompt."""
    line = replaced_by(status)
    return line if line is not None and interactive_shell(line) is not None else None


def refusal_note(holder: Holder) -> str:
    """One sentence for any surface (library, CLI, MCP): what holds it, what to do."""
    what = "waiting for input" if holder.status == "waiting_for_input" else "running"
    which = f"command {holder.command_id}, " if holder.command_id is not None else ""
    return (
        f"not typed: the terminal is busy with {holder.command_line!r} ({which}{what}): "
        "answer it with send_input or stop it with interrupt, then run again"
    )
