"""What the MCP tools need from a terminal: the agent-facing command API, as protocols.

Why: the tools are a thin layer over the run API that in-process terminals
(:class:`ahp.engine.Terminal`) and remote ones (:class:`ahp.client.RemoteTerminal`)
both expose — ``run`` (with ``yield_after``), ``CommandHandle`` (``wait``,
``read_new``, ``output``, ``result``, ``send_input``, ``interrupt``, ``kill``),
``CommandResult`` and ``screen()``. Naming exactly the subset used here, structurally, lets the type
checker confirm that both kinds of terminal fit, and keeps the layer free of
either implementation's internals. Nothing here runs: these are types only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

__all__ = [
    "AgentTerminal",
    "Background",
    "Commands",
    "Evidence",
    "Handle",
    "Holder",
    "Result",
    "ScreenView",
]


class Background(Protocol):
    """A process a command left running (``ahp.BackgroundProcess``)."""

    @property
    def pid(self) -> int: ...
    @property
    def command_line(self) -> str: ...


class Evidence(Protocol):
    """Why a command is believed to wait for input (``ahp.agent.InputEvidence``)."""

    @property
    def echo(self) -> bool: ...
    @property
    def source(self) -> str: ...
    @property
    def programs(self) -> tuple[str, ...]: ...
    @property
    def full_screen(self) -> bool: ...
    @property
    def continuation(self) -> bool: ...
    @property
    def group_end(self) -> str: ...


class Holder(Protocol):
    """The command that held a terminal when another was refused (``ahp.agent.Holder``)."""

    @property
    def command_line(self) -> str: ...
    @property
    def command_id(self) -> str | None: ...
    @property
    def status(self) -> str: ...


class Result(Protocol):
    """A command's result so far (``ahp.CommandResult``)."""

    @property
    def command_line(self) -> str: ...
    @property
    def status(self) -> str: ...
    @property
    def output(self) -> str: ...
    @property
    def exit_code(self) -> int | None: ...
    @property
    def duration_ms(self) -> int: ...
    @property
    def truncated(self) -> bool: ...
    @property
    def omitted_bytes(self) -> int: ...
    @property
    def omitted_lines(self) -> int: ...
    @property
    def timed_out(self) -> bool: ...
    @property
    def waiting_for_input(self) -> bool: ...
    @property
    def alternate_screen(self) -> bool: ...
    @property
    def shell_exited(self) -> bool: ...
    @property
    def background(self) -> Sequence[Background]: ...
    @property
    def command_id(self) -> str: ...
    @property
    def note(self) -> str: ...
    @property
    def holder(self) -> Holder | None: ...
    @property
    def handle(self) -> Handle | None: ...


class Handle(Protocol):
    """A started command (``ahp.CommandHandle``)."""

    @property
    def id(self) -> str: ...
    @property
    def terminal_uri(self) -> str: ...
    @property
    def command_line(self) -> str: ...
    @property
    def done(self) -> bool: ...
    @property
    def input_evidence(self) -> Evidence | None: ...

    async def wait(self, timeout: float | None = None) -> Result: ...
    def read_new(self) -> str: ...
    def output(self) -> str: ...
    def result(self) -> Result: ...
    async def send_input(self, data: str) -> None: ...
    async def interrupt(self) -> None: ...
    async def kill(self) -> None: ...


class ScreenView(Protocol):
    """The visible screen (``ahp.Screen``)."""

    @property
    def cursor_row(self) -> int: ...
    @property
    def cursor_col(self) -> int: ...
    @property
    def alternate_screen(self) -> bool: ...
    def text(self) -> str: ...


class Commands(Protocol):
    """What the tools read of a terminal's commands (``ahp.agent.CommandRegistry``)."""

    @property
    def detection_lost(self) -> bool:
        """A command replaced the shell (``exec bash``) by one without command detection:
        the command part it left open in the terminal's state holds nothing."""
        ...

    def all(self) -> tuple[Handle, ...]:
        """The terminal's recent command handles, oldest first."""
        ...


class AgentTerminal(Protocol):
    """A terminal the tools drive (in-process ``Terminal`` or ``RemoteTerminal``)."""

    @property
    def commands(self) -> Commands: ...

    async def run(
        self,
        command_line: str,
        *,
        timeout: float | None = None,
        yield_after: float | None = None,
        head_bytes: int | None = None,
        tail_bytes: int | None = None,
    ) -> Result: ...

    def screen(self) -> ScreenView: ...
    async def send_input(self, data: str) -> None: ...
    async def interrupt(self) -> None: ...
