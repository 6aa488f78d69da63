"""The in-process terminal as the agent layer's port: :class:`LocalPort`.

Why an adapter: :class:`ahp.agent.port.TerminalPort` names what the command
algorithm needs; an in-process :class:`~ahp.engine.Terminal` has all of it
under its own names (``subscribe``, ``dispatch``, its pty's
:class:`~ahp.pty.jobs.Jobs`). This maps one onto the other and adds nothing.
What it takes of the terminal is named here too (:class:`PortedTerminal`), so this
module depends on the engine's parts, not on :mod:`ahp.engine.terminal`, which
builds its port from it (one direction of import).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Final, Protocol

import trio

from ahp.agent.registry import CommandRegistry
from ahp.engine.launch import TerminalSpec
from ahp.engine.subscription import Subscription
from ahp.protocol.actions import StateAction, TerminalClaimed
from ahp.protocol.state import TerminalClaim, TerminalState
from ahp.pty import procfs
from ahp.pty.jobs import Jobs

__all__ = ["DETECTION_WAIT", "FOLLOW_BYTES", "LocalPort", "LocalProcesses", "PortedTerminal"]

#: Buffer of the subscription a command follows (beyond it: a resynchronisation).
FOLLOW_BYTES: Final = 64 * 1024 * 1024
#: How long a shell we injected may take to announce command detection.
DETECTION_WAIT: Final = 10.0


class LocalProcesses:
    """:class:`ahp.agent.port.ProcessPort` over a pty's :class:`~ahp.pty.jobs.Jobs`."""

    def __init__(self, jobs: Jobs) -> None:
        self._jobs = jobs

    async def tty_status(self) -> procfs.TtyStatus | None:
        return await self._jobs.scan_tty_status()

    async def job_mark(self) -> object:
        await trio.lowlevel.checkpoint()
        return self._jobs.mark()

    async def background_jobs(self, mark: object) -> dict[int, str]:
        assert mark is None or isinstance(mark, procfs.JobMark)
        return await self._jobs.settled_since(mark)


class PortedTerminal(Protocol):
    """What :class:`LocalPort` takes of an in-process :class:`~ahp.engine.Terminal`."""

    @property
    def uri(self) -> str: ...
    @property
    def state(self) -> TerminalState: ...
    @property
    def spec(self) -> TerminalSpec: ...
    @property
    def jobs(self) -> Jobs | None: ...
    @property
    def commands(self) -> CommandRegistry: ...
    @property
    def integrated(self) -> bool: ...
    @property
    def program_name(self) -> str: ...
    @property
    def closing(self) -> bool: ...
    @property
    def exited(self) -> trio.Event: ...
    @property
    def closed(self) -> trio.Event: ...
    def subscribe(self, *, max_bytes: int | None = None, paces: bool = True) -> Subscription: ...
    async def dispatch(self, action: StateAction) -> None: ...
    async def send_input(self, data: str | bytes) -> None: ...
    def spawn_task(self, fn: Callable[[], Awaitable[None]]) -> None: ...
    async def kill_command(self, mark: procfs.JobMark | None = None) -> None: ...


class LocalPort:
    """:class:`ahp.agent.port.TerminalPort` for an in-process terminal."""

    def __init__(self, terminal: PortedTerminal) -> None:
        self._terminal = terminal
        jobs = terminal.jobs
        self._processes = LocalProcesses(jobs) if jobs is not None else None

    @property
    def uri(self) -> str:
        return self._terminal.uri

    @property
    def state(self) -> TerminalState:
        return self._terminal.state

    def follow(self) -> Subscription:
        return self._terminal.subscribe(max_bytes=FOLLOW_BYTES)

    async def send_input(self, data: str) -> None:
        await self._terminal.send_input(data)

    async def set_claim(self, claim: TerminalClaim) -> None:
        terminal = self._terminal
        async with terminal.subscribe() as updates:
            await terminal.dispatch(TerminalClaimed(claim=claim))
            async for _ in updates:
                if terminal.state.claim == claim or terminal.closed.is_set():
                    break

    def spawn_task(self, fn: Callable[[], Awaitable[None]]) -> None:
        self._terminal.spawn_task(fn)

    @property
    def commands(self) -> CommandRegistry:
        return self._terminal.commands

    @property
    def detection_wait(self) -> float:
        # Only shells we injected can announce detection; give them time to start.
        return DETECTION_WAIT if self._terminal.integrated else 0.0

    @property
    def ended(self) -> bool:
        terminal = self._terminal
        return terminal.exited.is_set() or terminal.closing

    @property
    def shell_name(self) -> str | None:
        return self._terminal.program_name

    @property
    def signed_marks(self) -> bool:
        return self._terminal.integrated

    @property
    def processes(self) -> LocalProcesses | None:
        return self._processes if self._terminal.spec.use_pty else None

    async def kill_command(self, mark: object) -> None:
        assert mark is None or isinstance(mark, procfs.JobMark)
        await self._terminal.kill_command(mark)
