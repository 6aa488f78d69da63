"""The agent layer: commands run in a terminal for an agent, in-process or remote.

Why a package: "run this, give me the output and the exit code, and tell me if
it waits for me" is an agent's most common wish, and it is more than one idea.
Each module holds one (``docs/agent.md`` is the guide):

* :mod:`~ahp.agent.status` — the statuses, the events and the one transition
  table everything else is derived from; :mod:`~ahp.agent.machine` — the
  sans-I/O state machine that applies it (events in, transitions out, clocks
  passed in);
* :mod:`~ahp.agent.options` — :class:`RunOptions`, the one value every surface
  takes;
* :mod:`~ahp.agent.port` — :class:`TerminalPort`, what the layer needs from a
  terminal (the in-process and the remote terminal implement it);
* :mod:`~ahp.agent.start` — typing a command (or refusing to, when the terminal
  is busy); :mod:`~ahp.agent.collector` — following it to its end
  (:mod:`~ahp.agent.interrupt` — whether the shell took a Ctrl-C);
  :mod:`~ahp.agent.markers` — the fallback's markers for shells without command
  detection; :mod:`~ahp.agent.line` — a command line as text (line ends, control
  characters);
* :mod:`~ahp.agent.evidence` — why a command is believed to wait for input;
* :mod:`~ahp.agent.record`, :mod:`~ahp.agent.command` — what is known about a
  command, and the agent's :class:`CommandHandle` on it with the
  :class:`CommandResult` it returns; :mod:`~ahp.agent.occupants` — who else is in
  the terminal (the :class:`Holder`, a :class:`BackgroundProcess`);
  :mod:`~ahp.agent.registry` — a terminal's recent handles;
* :mod:`~ahp.agent.surface` — ``run``/``start``/``command`` once for both
  terminals, :func:`wait_any`, :func:`as_completed`;
* :mod:`~ahp.agent.budget`, :mod:`~ahp.agent.render` — the output budget and
  the line renderer (pure);
* :mod:`~ahp.agent.screen` — the screen model (``term.screen()``).

Non-pty execution builds on these from above: :mod:`ahp.engine.exec` runs a
command on a host, :mod:`ahp.client.exec` on a server (``ahp.exec_command``).
"""

from typing import TYPE_CHECKING

from ahp.exports import lazy_exports

if TYPE_CHECKING:
    from ahp.agent.collector import INTERRUPT_GRACE
    from ahp.agent.command import CommandHandle, CommandResult
    from ahp.agent.evidence import InputEvidence, evidence_of, looks_like_prompt
    from ahp.agent.line import CommandLineError
    from ahp.agent.occupants import BackgroundProcess, Holder
    from ahp.agent.options import DEFAULT_INPUT_QUIET, DEFAULT_MAX_OUTPUT, RunChanges, RunOptions
    from ahp.agent.port import ProcessPort, TerminalPort
    from ahp.agent.record import MAX_RAW_OUTPUT
    from ahp.agent.registry import MAX_COMMANDS_KEPT, CommandRegistry
    from ahp.agent.render import strip_escapes
    from ahp.agent.start import TerminalExitedError, start_command
    from ahp.agent.status import FINAL_STATUSES, STATUSES, Event, Status
    from ahp.agent.surface import CommandSurface, as_completed, run_command, wait_any

#: Public name -> module that defines it. Imported on first use, so that the pure
#: modules (``ahp.agent.status``, ``ahp.agent.machine``…) load no Trio.
_EXPORTS = {
    "BackgroundProcess": "ahp.agent.occupants",
    "CommandHandle": "ahp.agent.command",
    "CommandLineError": "ahp.agent.line",
    "CommandRegistry": "ahp.agent.registry",
    "CommandResult": "ahp.agent.command",
    "CommandSurface": "ahp.agent.surface",
    "DEFAULT_INPUT_QUIET": "ahp.agent.options",
    "DEFAULT_MAX_OUTPUT": "ahp.agent.options",
    "Event": "ahp.agent.status",
    "FINAL_STATUSES": "ahp.agent.status",
    "Holder": "ahp.agent.occupants",
    "INTERRUPT_GRACE": "ahp.agent.collector",
    "InputEvidence": "ahp.agent.evidence",
    "MAX_COMMANDS_KEPT": "ahp.agent.registry",
    "MAX_RAW_OUTPUT": "ahp.agent.record",
    "ProcessPort": "ahp.agent.port",
    "RunChanges": "ahp.agent.options",
    "RunOptions": "ahp.agent.options",
    "STATUSES": "ahp.agent.status",
    "Status": "ahp.agent.status",
    "TerminalExitedError": "ahp.agent.start",
    "TerminalPort": "ahp.agent.port",
    "as_completed": "ahp.agent.surface",
    "evidence_of": "ahp.agent.evidence",
    "looks_like_prompt": "ahp.agent.evidence",
    "run_command": "ahp.agent.surface",
    "start_command": "ahp.agent.start",
    "strip_escapes": "ahp.agent.render",
    "wait_any": "ahp.agent.surface",
}


__getattr__ = lazy_exports("ahp.agent", _EXPORTS, globals())


__all__ = [
    "DEFAULT_INPUT_QUIET",
    "DEFAULT_MAX_OUTPUT",
    "FINAL_STATUSES",
    "INTERRUPT_GRACE",
    "MAX_COMMANDS_KEPT",
    "MAX_RAW_OUTPUT",
    "STATUSES",
    "BackgroundProcess",
    "CommandHandle",
    "CommandLineError",
    "CommandRegistry",
    "CommandResult",
    "CommandSurface",
    "Event",
    "Holder",
    "InputEvidence",
    "ProcessPort",
    "RunChanges",
    "RunOptions",
    "Status",
    "TerminalExitedError",
    "TerminalPort",
    "as_completed",
    "evidence_of",
    "looks_like_prompt",
    "run_command",
    "start_command",
    "strip_escapes",
    "wait_any",
]
