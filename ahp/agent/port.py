"""What the agent layer needs from a terminal: :class:`TerminalPort`, one narrow port.

Why: the same command algorithm (:mod:`ahp.agent.collector`) runs against an
in-process terminal (:class:`ahp.engine.Terminal`, through its adapter) and a
remote one (:class:`ahp.client.RemoteTerminal`). Naming exactly what it uses —
the state, its envelopes, input, a claim, a nursery, and what the terminal's
processes show (:class:`ProcessPort`) — keeps this layer free of either side's
internals and lets the type checker confirm both fit. Types only.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Protocol

from ahp.agent.command import CommandControls
from ahp.protocol.actions import ActionEnvelope
from ahp.protocol.state import Snapshot, TerminalClaim, TerminalState

if TYPE_CHECKING:
    from ahp.agent.registry import CommandRegistry
    from ahp.pty.procfs import TtyStatus

__all__ = ["ProcessPort", "TerminalPort"]


class ProcessPort(Protocol):
    """What the terminal's processes show (in-process from ``/proc``, remotely the
    server's answers). Every call may answer "nothing seen" (``None``, ``{}``)."""

    async def tty_status(self) -> TtyStatus | None:
        """The pty's foreground job: its reads, polls, echo flag, unread output."""
        ...

    async def job_mark(self) -> object:
        """An opaque mark of the terminal's jobs now (before a command is typed)."""
        ...

    async def background_jobs(self, mark: object) -> dict[int, str]:
        """Jobs of the terminal's session started since ``mark`` and still running:
        pid → command line."""
        ...


class TerminalPort(CommandControls, Protocol):
    """A terminal as :func:`ahp.agent.start.start_command` drives it (and, through
    :class:`~ahp.agent.command.CommandControls`, its commands' handles: input, kill)."""

    @property
    def uri(self) -> str: ...

    @property
    def state(self) -> TerminalState: ...

    def follow(self) -> AsyncIterator[Snapshot | ActionEnvelope]:
        """Yields the current snapshot first, then every later envelope (a fresh
        snapshot when the follower fell behind); ends when nothing more can come
        (the terminal closed, the connection is gone)."""
        ...

    async def set_claim(self, claim: TerminalClaim) -> None:
        """Claim the terminal; returns once the state shows the new claim (or refused)."""
        ...

    def spawn_task(self, fn: Callable[[], Awaitable[None]]) -> None:
        """Run ``fn`` in the nursery of whatever owns the terminal (it must not raise)."""
        ...

    @property
    def commands(self) -> CommandRegistry:
        """Where the terminal's recent command handles are kept."""
        ...

    @property
    def detection_wait(self) -> float:
        """How long to wait for command detection to be announced before falling back."""
        ...

    @property
    def ended(self) -> bool:
        """The terminal's process has exited or the terminal is being disposed."""
        ...

    @property
    def shell_name(self) -> str | None:
        """The name of the terminal's program (``"bash"``, ``"fish"``) when this side
        knows it (in-process), else ``None`` (the processes may tell)."""
        ...

    @property
    def signed_marks(self) -> bool | None:
        """Whether the terminal's command marks are signed (the host injected its
        integration into the shell, with a nonce): ``False`` when they are not, and
        program output can forge them (``printf '\\033]133;C\\007'``); the agent
        layer then delimits commands with its own markers whatever the terminal's
        state says. ``None`` while not known (remotely: learned from the process
        extension's ``ttyStatus``, absent from older servers): taken as signed."""
        ...

    @property
    def processes(self) -> ProcessPort | None:
        """What the terminal's processes show; ``None`` when nothing can be seen (no
        pty, a server without the process extension): the screen heuristics apply."""
        ...
