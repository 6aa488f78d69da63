"""A terminal seen through a :class:`~ahp.client.Client`: the same surface as in-process.

Why: an agent that talks to a sidecar over the wire wants ``run``,
``send_input``, ``resize`` and ``state`` exactly like an embedded one. A
:class:`RemoteTerminal` adapts the client's mirror of one terminal channel to
:class:`ahp.run.TerminalDriver`, so :func:`ahp.run.run_command` serves both.

Buffering: :meth:`RemoteTerminal.follow` queues at most ``FOLLOW_QUEUE``
envelopes for its consumer; if the consumer falls further behind it receives
a fresh snapshot of the mirror instead of the missed envelopes (no silent gap).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Final

import trio

from ahp.protocol.actions import ActionEnvelope, TerminalClaimed, TerminalInput, TerminalResized
from ahp.protocol.state import Snapshot, TerminalClaim, TerminalState
from ahp.run import DEFAULT_MAX_OUTPUT, CommandResult, run_command

if TYPE_CHECKING:
    from ahp.client.connection import Client

__all__ = ["FOLLOW_QUEUE", "RemoteTerminal"]

FOLLOW_QUEUE: Final = 10_000
#: A remote shell may announce command detection a little after creation.
DETECTION_WAIT: Final = 3.0


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
        max_output_bytes: int = DEFAULT_MAX_OUTPUT,
        claim: TerminalClaim | None = None,
    ) -> CommandResult:
        """Run one command remotely; same contract as :meth:`ahp.engine.Terminal.run`."""
        return await run_command(
            self, command_line, timeout=timeout, max_output_bytes=max_output_bytes, claim=claim
        )

    async def wait_exited(self, timeout: float = math.inf) -> int | None:
        with trio.fail_after(timeout):
            await self.client.wait_for(lambda: self.state.exited or self._gone())
        return self.state.exitCode

    def _gone(self) -> bool:
        return self.uri not in self.client.mirrors


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
