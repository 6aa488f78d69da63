"""A terminal's reducer stage: the one writer of its state, and what publishes it.

Why a module of its own: every keystroke and every output batch of a terminal goes
through this stage (the hot path), and it holds the rules of the state's one writer,
apart from :mod:`ahp.engine.terminal` (which sends it actions and runs
:meth:`Reduce.task` in the terminal's nursery):

* it drives a :class:`~ahp.reducers.TerminalCore` (state, claim and rejection
  rules, healing values, scrollback, catalogue changes): it applies parsed output,
  client and library actions (``Terminal.dispatch``) and the exit, and publishes
  every applied action through the hub;
* a client's or the library's action is decided on: rejected to its sender (with
  the true value when the client's mirror may have applied it anyway), or
  accepted; accepted input goes on to the input-write stage
  (:meth:`~ahp.engine.input_write.InputWrite.queue`; refused after all while the pty
  takes none, :meth:`~ahp.engine.input_write.InputWrite.refusal`), and an accepted
  resize resizes the pty;
* ``terminal/exited`` is applied once both the output ended (the parse task's last
  item) and the exit watcher reported the exit code, so every byte the process wrote
  is published before it; a command left open then finishes with the shell's code;
* each task step drains everything waiting in the inbox and applies it; after the
  batch it tells the terminal (its host) once if the catalogue entry changed, and
  only then gives the verdicts that ``Terminal.dispatch(wait=True)`` callers wait for.

Buffering: at most :data:`REDUCER_QUEUE` items wait in the inbox (parsed batches,
actions, the ends); a full inbox is the backpressure of the parse task and of the
callers of ``Terminal.dispatch``. The stage never waits on anyone: it publishes into
bounded outboxes that decide for themselves (:mod:`ahp.engine.outbox`), and input
beyond the input channel's bound (or :data:`~ahp.reducers.core.MAX_PENDING_INPUT`
bytes) is rejected, not queued. Ownership: the core is the stage's (its task is the
only writer; the terminal reads its state, and applies the exit itself once the
task is gone); the callbacks to the terminal are held only while the task runs, so
no cycle between the two outlives it (a disposed terminal is freed without the
garbage collector). Cancellation: the task's only wait is its inbox; a batch is
applied without a checkpoint, and its verdicts are given on every way out. Once the
task is gone the terminal calls :meth:`Reduce.forget_queued`: what is still queued is
refused, its waiters released, and the inbox closed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Final

import trio

from ahp.engine.hub import Hub
from ahp.engine.input_write import INPUT_QUEUE, InputWrite
from ahp.engine.outbox import Outbox
from ahp.engine.parse import Parse
from ahp.protocol.actions import (
    ActionOrigin,
    StateAction,
    TerminalCommandFinished,
    TerminalExited,
    action_type,
)
from ahp.protocol.state import CommandPart
from ahp.pty import Child
from ahp.reducers import Accepted, Rejected, TerminalCore, Verdict
from ahp.reducers.core import rejected_echo

__all__ = [
    "OUTPUT_ENDED",
    "REDUCER_QUEUE",
    "ClientAction",
    "OutputEnded",
    "ProcessExited",
    "Reduce",
    "ReducerItem",
]

log = logging.getLogger("ahp.engine")

#: Items queued for the reducer: parsed batches, client and library actions, the exit.
REDUCER_QUEUE: Final = 64


class ClientAction:
    """A client's or the library's action on its way to the reducer; ``decided`` (if
    any) is set once the reducer has accepted or rejected it, or the terminal closed."""

    __slots__ = ("action", "decided", "origin", "sender")

    def __init__(
        self,
        action: StateAction,
        origin: ActionOrigin | None,
        sender: Outbox | None,
        decided: trio.Event | None = None,
    ) -> None:
        self.action = action
        self.origin = origin
        self.sender = sender
        #: Set once the action was applied or rejected and the catalogue told.
        self.decided = decided


class OutputEnded:
    """The parse task's last item: every byte of output has been parsed."""


class ProcessExited:
    """The exit watcher's item: the process's exit code (None: killed by a signal)."""

    __slots__ = ("code",)

    def __init__(self, code: int | None) -> None:
        self.code = code


OUTPUT_ENDED: Final = OutputEnded()

#: What the reducer receives: a parsed batch, an action to decide on, or an end.
ReducerItem = Sequence[StateAction] | ClientAction | OutputEnded | ProcessExited


class Reduce:
    """One terminal's reducer stage (see the module docstring).

    Args:
        uri: the terminal's (its channel at the hub).
        core: the terminal's state and rules, written by this stage alone from now on.
        hub: where every applied action is published.
        inputs: the terminal's input-write stage, which takes the accepted input.
        exited: set once ``terminal/exited`` is applied and published.
        parse: the terminal's parse stage, whose count of prompts is noted when a line
            end is typed (:attr:`line_typed_at`).
    """

    def __init__(
        self,
        uri: str,
        core: TerminalCore,
        hub: Hub,
        inputs: InputWrite,
        exited: trio.Event,
        *,
        parse: Parse,
    ) -> None:
        self.uri = uri
        self._parse = parse
        self._core = core
        self._hub = hub
        self._input = inputs
        self._exited = exited
        #: Where the parse task, the exit watcher and ``Terminal.dispatch`` hand their
        #: items (bounded: :data:`REDUCER_QUEUE`).
        self.to_reducer, self._inbox = trio.open_memory_channel[ReducerItem](REDUCER_QUEUE)
        self._child: Child | None = None
        #: Called after each input accepted for the pty (while the task runs).
        self._on_input: Callable[[], None] | None = None
        self._output_ended = False
        self._exit_code: ProcessExited | None = None
        #: Inputs accepted for the pty (each a write).
        self.inputs = 0
        #: Prompt starts parsed when a line end was last typed (None: none typed); see
        #: :attr:`ahp.engine.Terminal.line_pending`.
        self.line_typed_at: int | None = None
        #: Task steps, each a batch of everything that was waiting (a figure for tests).
        self.batches = 0

    async def task(
        self,
        child: Child,
        on_info_changed: Callable[[], None],
        on_input: Callable[[], None] | None,
    ) -> None:
        """The only writer of the state: apply everything waiting, then call
        ``on_info_changed`` once if the catalogue entry changed, then give the batch's
        verdicts. Resizes go to ``child``; ``on_input`` is called after each input
        accepted for the pty. Neither callback may block nor raise; both are dropped
        when the task ends."""
        self._child = child
        self._on_input = on_input
        core = self._core
        inbox = self._inbox
        # (The inbox is closed by forget_queued, after the task: callers may be waiting
        # for a verdict on what is still queued.)
        try:
            while True:
                try:
                    item = inbox.receive_nowait()
                except trio.WouldBlock:
                    item = await inbox.receive()
                self.batches += 1
                decided: list[trio.Event] | None = None
                try:
                    while True:
                        self._reduce(item)
                        if item.__class__ is ClientAction:
                            assert isinstance(item, ClientAction)
                            if item.decided is not None:
                                decided = [*(decided or ()), item.decided]
                        try:
                            item = inbox.receive_nowait()
                        except trio.WouldBlock:
                            break
                    if core.info_changed:
                        core.info_changed = False
                        on_info_changed()
                finally:
                    # Verdicts are given once the batch is applied and the catalogue told.
                    for event in decided or ():
                        event.set()
        finally:
            self._on_input = None  # (it holds the terminal: no cycle outlives the task)

    def _reduce(self, item: ReducerItem) -> None:
        cls = item.__class__
        if cls is ClientAction:
            assert isinstance(item, ClientAction)
            self._client_action(item.action, item.origin, item.sender)
        elif cls is ProcessExited:
            assert isinstance(item, ProcessExited)
            self._exit_code = item
            self._maybe_exited()
        elif cls is OutputEnded:
            self._output_ended = True
            self._maybe_exited()
        else:
            assert not isinstance(item, ClientAction | ProcessExited | OutputEnded)
            for action in item:
                self._apply(action)

    def _apply(self, action: StateAction, origin: ActionOrigin | None = None) -> None:
        """Apply an action to the state and publish it (the task only)."""
        self._hub.publish(self.uri, self._core.apply(action), origin)

    def _maybe_exited(self) -> None:
        """Apply ``terminal/exited`` once the output ended and the exit code is known."""
        if self._output_ended and self._exit_code is not None and not self._exited.is_set():
            code = self._exit_code.code
            self._apply(TerminalExited(exitCode=code))
            content = self._core.state.content
            if content and isinstance(last := content[-1], CommandPart) and not last.isComplete:
                # The shell exited inside the command (``echo bye; exit 7``): it ends with
                # the shell's code; left open, every client's view held it running for good.
                self._apply(TerminalCommandFinished(commandId=last.commandId, exitCode=code))
            self._exited.set()

    def _client_action(
        self, action: StateAction, origin: ActionOrigin | None, sender: Outbox | None
    ) -> None:
        inputs = self._input
        verdict: Verdict = self._core.decide(action, origin, pending_input=inputs.pending)
        if (
            verdict.__class__ is Accepted
            and verdict.write is not None
            and origin is not None
            and inputs.stall_mark is not None  # (the keystroke's path: one test)
            and (stalled := inputs.refusal(len(verdict.write))) is not None
        ):
            verdict = Rejected(stalled)
        if verdict.__class__ is Rejected:
            assert isinstance(verdict, Rejected)
            if origin is None:  # an in-process caller: nobody to echo to
                log.info(
                    "terminal %s: %s rejected: %s", self.uri, action_type(action), verdict.reason
                )
                return
            self._hub.reject(sender, self.uri, rejected_echo(action), origin, verdict.reason)
            if verdict.heal is not None:
                # Some clients' mirrors apply even rejected echoes: send them the true value.
                self._hub.send_to(sender, self.uri, verdict.heal)
            return
        assert not isinstance(verdict, Rejected)
        if verdict.write and not inputs.gone:
            if not inputs.queue(verdict.write):
                if origin is not None:
                    reason = f"input queue full ({INPUT_QUEUE} writes pending)"
                    self._hub.reject(sender, self.uri, action, origin, reason)
                return
            self.inputs += 1
            write = verdict.write
            if b"\r" in write or b"\n" in write:
                self.line_typed_at = self._parse.prompts
            if self._on_input is not None:
                self._on_input()
        if verdict.resize is not None and self._child is not None:
            self._child.resize(*verdict.resize)
        self._apply(verdict.action, origin)

    def refuse_closing(
        self, action: StateAction, origin: ActionOrigin | None, sender: Outbox | None
    ) -> None:
        """A client's action that reached a closing terminal: rejected to its sender
        (a client waiting for its echo must get an answer), never silently dropped."""
        if origin is not None:
            reason = "the terminal is not running (starting, or closing)"
            self._hub.reject(sender, self.uri, rejected_echo(action), origin, reason)

    def forget_queued(self) -> None:
        """The task is gone: release whoever waits for a verdict on a queued action,
        and close the inbox (callers waiting for room give up)."""
        inbox = self._inbox
        while True:
            try:
                item = inbox.receive_nowait()
            except (trio.WouldBlock, trio.EndOfChannel, trio.ClosedResourceError):
                break
            if isinstance(item, ClientAction):
                self.refuse_closing(item.action, item.origin, item.sender)
                if item.decided is not None:
                    item.decided.set()
        inbox.close()
