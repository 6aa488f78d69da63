"""``run``, ``start`` and ``command``, once: :class:`CommandSurface`, and waiting on many.

Why one surface: the in-process :class:`ahp.engine.Terminal` and the remote
:class:`ahp.client.RemoteTerminal` offer the same command API to an agent; each
only says how to reach its terminal (:meth:`CommandSurface._command_port`, a
:class:`~ahp.agent.port.TerminalPort`), and the options are one value
(:class:`~ahp.agent.options.RunOptions`, or its fields as keywords).

``run``: returns when the command is over, waits for input (status
``waiting_for_input``, with ``result.handle``), ``yield_after`` passed (status
``running``, with ``result.handle``), or ``timeout`` passed (the command is
interrupted and given :data:`~ahp.agent.collector.INTERRUPT_GRACE` to end, then
killed and given :data:`~ahp.agent.collector.KILL_WAIT`; status ``timed_out``; one
that outlives even the kill is returned ``running`` with ``timed_out`` set, its
handle and a note); at once, status ``refused``, when the terminal is busy.
Cancelling a ``run`` call interrupts the command (the ``\\x03`` is sent
shielded, bounded by :data:`CANCEL_INTERRUPT_TIMEOUT`) and re-raises; a command
that ignores the Ctrl-C for :data:`~ahp.agent.collector.INTERRUPT_GRACE` is then
killed as a timeout's is, by its collector in the terminal owner's nursery (the
cancelled caller does not wait for that), status ``killed``. A ``run`` cancelled
while it types still registers the command (its keys may have reached the shell:
see :mod:`ahp.agent.start`) and interrupts it so; the next ``run`` waits for an
ending command :data:`~ahp.agent.holding.ENDING_WAIT` (its Ctrl-C's grace, then its
kill's) before it is refused.
"""

from __future__ import annotations

import abc
import math
from collections.abc import AsyncIterator, Iterable, Sequence
from typing import Unpack

import trio

from ahp.agent.collector import INTERRUPT_GRACE, KILL_WAIT
from ahp.agent.command import CommandHandle, CommandResult
from ahp.agent.options import RunChanges, RunOptions
from ahp.agent.port import TerminalPort
from ahp.agent.registry import CommandRegistry
from ahp.agent.start import start_command

__all__ = ["CommandSurface", "as_completed", "run_command", "wait_any"]

#: Bound on the shielded Ctrl-C sent when a ``run`` call is cancelled.
CANCEL_INTERRUPT_TIMEOUT = 1.0


async def run_command(
    port: TerminalPort, command_line: str, options: RunOptions | None = None
) -> CommandResult:
    """Run ``command_line`` and return its result (see the module doc)."""
    options = options or RunOptions()
    handle = await start_command(port, command_line, options)
    now = trio.current_time()
    hard = math.inf
    if options.timeout is not None:
        hard = now + options.timeout + INTERRUPT_GRACE + KILL_WAIT
    soft = now + options.yield_after if options.yield_after is not None else math.inf
    try:
        with trio.move_on_at(min(hard, soft)):
            return await handle.wait()
        return handle.result()
    except trio.Cancelled:
        if not handle.done:
            try:
                with trio.CancelScope(shield=True), trio.move_on_after(CANCEL_INTERRUPT_TIMEOUT):
                    await handle.interrupt()
            finally:
                handle.record.cancelled.set()  # its collector kills it if it ignores that
        raise


async def wait_any(
    handles: Sequence[CommandHandle], timeout: float | None = None
) -> CommandHandle | None:
    """The first handle whose command is over or waits for input (as
    :meth:`CommandHandle.wait` counts it), or ``None`` on timeout."""
    if not handles:
        raise ValueError("no handles to wait for")
    winner: list[CommandHandle] = [h for h in handles if h.settled][:1]
    if not winner:
        with trio.move_on_after(math.inf if timeout is None else timeout):
            async with trio.open_nursery() as nursery:

                async def one(handle: CommandHandle) -> None:
                    await handle.wait_settled()
                    if not winner:
                        winner.append(handle)
                    nursery.cancel_scope.cancel()

                for handle in handles:
                    nursery.start_soon(one, handle)
    if not winner:
        return None
    winner[0].acknowledge()
    return winner[0]


async def _any_done(handles: Sequence[CommandHandle]) -> None:
    async with trio.open_nursery() as nursery:

        async def one(handle: CommandHandle) -> None:
            await handle.wait_done()
            nursery.cancel_scope.cancel()

        for handle in handles:
            nursery.start_soon(one, handle)


async def as_completed(handles: Iterable[CommandHandle]) -> AsyncIterator[CommandResult]:
    """Final results in the order the commands end (this waits past
    ``waiting_for_input``: answer prompts through the handles meanwhile, or use
    :func:`wait_any`). Nothing runs between iterations."""
    remaining = list(handles)
    while remaining:
        done = [h for h in remaining if h.done]
        if not done:
            await _any_done(remaining)
            continue
        for handle in done:
            remaining.remove(handle)
            yield handle.result()


class CommandSurface(abc.ABC):
    """``run``, ``start`` and ``command`` for a terminal that can hand out a
    :class:`~ahp.agent.port.TerminalPort`: in-process and remote, one algorithm."""

    @abc.abstractmethod
    def _command_port(self) -> TerminalPort:
        """The port :func:`run_command` / :func:`start_command` work through."""

    @property
    @abc.abstractmethod
    def commands(self) -> CommandRegistry:
        """Recent commands started in this terminal (see
        :data:`~ahp.agent.registry.MAX_COMMANDS_KEPT`)."""

    async def run(
        self,
        command_line: str,
        options: RunOptions | None = None,
        /,
        **changes: Unpack[RunChanges],
    ) -> CommandResult:
        """Type ``command_line`` into this terminal and return its :class:`CommandResult`.

        Returns when the command is over; early with status ``waiting_for_input``
        when it blocks reading the terminal (after ``input_quiet`` s of quiet; answer
        with ``result.handle.send_input``), with status ``running`` after
        ``yield_after`` s (``result.handle`` follows it), at once with status
        ``refused`` when another command holds the terminal (``result.holder``,
        ``result.note``). On ``timeout`` the command is interrupted (``\\x03``), and
        killed when it ignores that for ``INTERRUPT_GRACE`` s: status ``timed_out``;
        cancelling the call interrupts it too (killed ``INTERRUPT_GRACE`` s later if it
        ignores that; its handle is in :attr:`commands`). ``output`` is the rendered text, its
        first ``head_bytes`` and last ``tail_bytes``. With ``claim`` the terminal is
        claimed until the command ends and the claim found is given back. Options: a
        :class:`RunOptions`, or its fields as keywords (both: the keywords change the
        value).
        """
        return await run_command(
            self._command_port(), command_line, (options or RunOptions()).with_changes(changes)
        )

    async def start(
        self,
        command_line: str,
        options: RunOptions | None = None,
        /,
        **changes: Unpack[RunChanges],
    ) -> CommandHandle:
        """Type ``command_line`` and return its :class:`CommandHandle` at once (see
        :meth:`run`; ``timeout`` is enforced by the handle's collector,
        ``yield_after`` means nothing here); the handle's collector ends with the
        command or the terminal. A refused command's handle is over at once."""
        return await start_command(
            self._command_port(), command_line, (options or RunOptions()).with_changes(changes)
        )

    def command(self, command_id: str) -> CommandHandle:
        """The handle of a recent command (``result.command_id``); KeyError when
        unknown or forgotten (see :data:`~ahp.agent.registry.MAX_COMMANDS_KEPT`)."""
        return self.commands.get(command_id)
