"""A terminal seen through a :class:`~ahp.client.Client`: the same surface as in-process.

Why: an agent that talks to a sidecar over the wire wants ``run``,
``send_input``, ``resize`` and ``state`` exactly like an embedded one. A
:class:`RemoteTerminal` adapts the client's mirror of one terminal channel to
:class:`ahp.run.TerminalDriver`, so :func:`ahp.run.run_command` serves both.

Buffering: :meth:`RemoteTerminal.follow` queues at most ``FOLLOW_QUEUE``
envelopes for its consumer; if the consumer falls further behind it receives
a fresh snapshot of the mirror instead of the missed envelopes (no silent gap).

What a client cannot see: the server's processes. So remotely

* *waiting for input* is a heuristic: the output has been quiet for
  ``input_quiet`` seconds and its last line looks like a prompt
  (:func:`ahp.run.looks_like_prompt`: ends in ``:``, ``?``, ``>``…). A prompt that
  ends otherwise, or a silent read (``read`` with no prompt), is not detected: the
  command stays ``running`` until ``yield_after`` or ``timeout``;
* ``background`` is always empty;
* :meth:`CommandHandle.kill <ahp.run.CommandHandle.kill>` sends Ctrl-C and, if the
  command is still running after :data:`KILL_GRACE`, Ctrl-\\ (SIGQUIT) — not SIGKILL.

Command collectors (handles) run in the client connection's nursery: they end
with the command or when the client closes.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, Final

import trio

from ahp.protocol.actions import ActionEnvelope, TerminalClaimed, TerminalInput, TerminalResized
from ahp.protocol.state import CommandPart, Snapshot, TerminalClaim, TerminalState
from ahp.run import (
    DEFAULT_INPUT_QUIET,
    CommandHandle,
    CommandRegistry,
    CommandResult,
    InputEvidence,
    run_command,
    start_command,
)
from ahp.vt.screen import Screen, ScreenModel

if TYPE_CHECKING:
    from ahp.client.connection import Client

__all__ = ["FOLLOW_QUEUE", "RemoteTerminal"]

FOLLOW_QUEUE: Final = 10_000
#: A remote shell may announce command detection a little after creation.
DETECTION_WAIT: Final = 3.0
#: ``kill`` remotely: Ctrl-C, then Ctrl-\\ if the command still runs after this long.
KILL_GRACE: Final = 2.0


class RemoteTerminal:
    """One terminal channel of a connected client (the client must be subscribed)."""

    def __init__(self, client: Client, uri: str) -> None:
        self.client = client
        self.uri = uri

    @property
    def state(self) -> TerminalState:
        return self.client.terminal_state(self.uri)

    @property
    def detection_wait(self) -> float:
        return DETECTION_WAIT if self.state.supportsCommandDetection is None else 0.0

    def follow(self) -> _Follower:
        """The mirror's current state, then every envelope the client applies for it.

        An iterator object, not a generator: a consumer may cancel one ``__anext__``
        (a timeout) and keep iterating.
        """
        return _Follower(self)

    async def send_input(self, data: str) -> None:
        await self.client.dispatch(self.uri, TerminalInput(data=data))

    async def interrupt(self) -> None:
        await self.send_input("\x03")

    async def resize(self, cols: int, rows: int) -> None:
        await self.client.dispatch(self.uri, TerminalResized(cols=cols, rows=rows))

    async def set_claim(self, claim: TerminalClaim) -> None:
        """Claim the terminal; returns once the server confirmed or refused it."""
        mirror = self.client.mirrors[self.uri]
        await self.client.dispatch(self.uri, TerminalClaimed(claim=claim))
        await self.client.wait_for(lambda: not mirror.pending, timeout=30)

    async def run(
        self,
        command_line: str,
        *,
        timeout: float | None = None,
        yield_after: float | None = None,
        head_bytes: int | None = None,
        tail_bytes: int | None = None,
        input_quiet: float = DEFAULT_INPUT_QUIET,
        claim: TerminalClaim | None = None,
        max_output_bytes: int | None = None,
    ) -> CommandResult:
        """Run one command remotely; same contract as :meth:`ahp.engine.Terminal.run`
        (but see the module doc for what a client cannot see)."""
        return await run_command(
            self,
            command_line,
            timeout=timeout,
            yield_after=yield_after,
            head_bytes=head_bytes,
            tail_bytes=tail_bytes,
            input_quiet=input_quiet,
            claim=claim,
            max_output_bytes=max_output_bytes,
        )

    async def start(
        self,
        command_line: str,
        *,
        head_bytes: int | None = None,
        tail_bytes: int | None = None,
        input_quiet: float = DEFAULT_INPUT_QUIET,
        claim: TerminalClaim | None = None,
        max_output_bytes: int | None = None,
    ) -> CommandHandle:
        """Start one command remotely and return its handle (see :meth:`run`)."""
        return await start_command(
            self,
            command_line,
            head_bytes=head_bytes,
            tail_bytes=tail_bytes,
            input_quiet=input_quiet,
            claim=claim,
            max_output_bytes=max_output_bytes,
        )

    def screen(self) -> Screen:
        """The visible screen, rendered from the client's mirror (see :mod:`ahp.vt.screen`)."""
        models = self.client.screen_models
        model = models.get(self.uri)
        if model is None:
            _forget_unsubscribed(models, self.client.mirrors)
            model = models[self.uri] = ScreenModel(self.state.cols or 80, self.state.rows or 24)
        return model.update(self.state)

    # -- TerminalDriver: what a client can and cannot do -------------------------------------

    def spawn_task(self, fn: Callable[[], Awaitable[None]]) -> None:
        self.client.spawn_task(fn)

    @property
    def commands(self) -> CommandRegistry:
        """Recent commands started through this client in this terminal."""
        registries = self.client.command_registries
        registry = registries.get(self.uri)
        if registry is None:
            _forget_unsubscribed(registries, self.client.mirrors)
            registry = registries[self.uri] = CommandRegistry()
        return registry

    def command(self, command_id: str) -> CommandHandle:
        """The handle of a recent command started through this client (KeyError else)."""
        return self.commands.get(command_id)

    @property
    def sees_processes(self) -> bool:
        return False

    def input_evidence(self) -> InputEvidence | None:
        return None

    @property
    def ended(self) -> bool:
        return self._gone() or self.state.exited

    def job_mark(self) -> object:
        return None

    async def background_jobs(self, mark: object) -> dict[int, str]:
        await trio.lowlevel.checkpoint()
        return {}

    async def kill_command(self, mark: object = None) -> None:
        """Ctrl-C, then Ctrl-\\ if a command is still running after :data:`KILL_GRACE`."""
        await self.send_input("\x03")
        with trio.move_on_after(KILL_GRACE):
            await self.client.wait_for(lambda: not _running(self.state) or self._gone())
            return
        await self.send_input("\x1c")

    async def wait_exited(self, timeout: float = math.inf) -> int | None:
        with trio.fail_after(timeout):
            await self.client.wait_for(lambda: self.state.exited or self._gone())
        return self.state.exitCode

    def _gone(self) -> bool:
        return self.uri not in self.client.mirrors


def _forget_unsubscribed(per_channel: dict[str, Any], mirrors: Mapping[str, object]) -> None:
    """Drop what is kept for channels the client no longer mirrors (bounds the dicts
    by the subscribed channels, plus the one about to be added)."""
    for uri in [uri for uri in per_channel if uri not in mirrors]:
        del per_channel[uri]


def _running(state: TerminalState) -> bool:
    """A detected command is running (without detection: assumed running)."""
    if not state.supportsCommandDetection:
        return not state.exited
    content = state.content
    return bool(content) and isinstance(content[-1], CommandPart) and not content[-1].isComplete


class _Follower:
    """Envelopes of one channel, queued from the client's envelope callback."""

    def __init__(self, terminal: RemoteTerminal) -> None:
        self._terminal = terminal
        self._send, self._receive = trio.open_memory_channel[ActionEnvelope](FOLLOW_QUEUE)
        self._lagged = False
        self._first = True
        self._unregister = terminal.client.on_envelope(self._on_envelope)

    def _on_envelope(self, envelope: ActionEnvelope) -> None:
        if envelope.channel != self._terminal.uri or self._lagged:
            return
        try:
            self._send.send_nowait(envelope)
        except trio.WouldBlock:
            self._lagged = True

    def _snapshot(self) -> Snapshot:
        terminal = self._terminal
        mirror = terminal.client.mirrors[terminal.uri]
        return Snapshot(resource=terminal.uri, state=terminal.state, fromSeq=mirror.last_seq)

    def __aiter__(self) -> _Follower:
        return self

    async def __anext__(self) -> Snapshot | ActionEnvelope:
        if self._first:
            self._first = False
            await trio.lowlevel.checkpoint()
            return self._snapshot()
        if self._lagged:
            while True:
                try:
                    self._receive.receive_nowait()
                except trio.WouldBlock:
                    break
            self._lagged = False
            await trio.lowlevel.checkpoint()
            return self._snapshot()
        return await self._receive.receive()

    async def aclose(self) -> None:
        self._unregister()
        await trio.lowlevel.checkpoint()
