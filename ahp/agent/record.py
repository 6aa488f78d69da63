"""One command's record: its state machine, its output, and the events waiters wait on.

Why a record apart from the handle: the collector task (:mod:`ahp.agent.collector`)
writes what happens to a command and the agent reads it through the
:class:`~ahp.agent.command.CommandHandle`; both go through this object's public
methods, so neither reaches into the other's members. Every change of status
goes through :meth:`CommandRecord.apply` (the machine's table).

Buffering: rendered output up to :data:`~ahp.agent.budget.RETAINED_OUTPUT_BYTES`
(:class:`~ahp.agent.budget.OutputBudget`), the renderer's window (one screen),
the raw output's most recent bytes (at most :data:`MAX_RAW_OUTPUT`).
"""

from __future__ import annotations

import secrets
import time
from typing import TYPE_CHECKING, Final

import trio

from ahp.agent.budget import RETAINED_OUTPUT_BYTES, OutputBudget
from ahp.agent.machine import CommandMachine, Transition
from ahp.agent.occupants import BackgroundProcess, Holder
from ahp.agent.render import LineRenderer
from ahp.agent.status import Event, Status

if TYPE_CHECKING:
    from ahp.agent.evidence import InputEvidence

__all__ = ["MAX_RAW_OUTPUT", "CommandRecord", "RawTail"]

#: Upper bound of ``raw_output`` (the most recent bytes are kept).
MAX_RAW_OUTPUT: Final = RETAINED_OUTPUT_BYTES


class RawTail:
    """The raw output, bounded to the most recent ``limit`` bytes' worth of UTF-8
    (held up to twice that between trims)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.chunks: list[str] = []
        self.size = 0

    def add(self, text: str) -> None:
        if not text:
            return
        self.chunks.append(text)
        self.size += len(text.encode("utf-8", "surrogatepass"))
        if self.size > 2 * self.limit:
            self._trim()

    def _trim(self) -> None:
        joined = "".join(self.chunks).encode("utf-8", "surrogatepass")
        kept = joined[max(0, len(joined) - self.limit) :].decode("utf-8", "ignore")
        self.chunks = [kept]
        self.size = len(kept.encode("utf-8", "surrogatepass"))

    def text(self) -> str:
        if self.size > self.limit:
            self._trim()
        return "".join(self.chunks)


class CommandRecord:
    """What is known about one command. Written by its collector (and by the handle's
    acting methods, through :meth:`apply`); read by its handle.

    Wake-ups: :attr:`changed` is set (and replaced) when the status changes,
    :attr:`activity` on every event, :attr:`output_arrived` when output arrives or
    the command ends, :attr:`over` once, at the end.
    """

    def __init__(
        self,
        terminal_uri: str,
        command_line: str,
        *,
        head_bytes: int,
        tail_bytes: int,
        input_quiet: float,
        cols: int,
        rows: int,
    ) -> None:
        self.id = f"cmd-{secrets.token_hex(6)}"
        self.terminal_uri = terminal_uri
        self.command_line = command_line
        self.machine = CommandMachine(now=trio.current_time(), input_quiet=input_quiet)
        self.budget = OutputBudget(head_bytes, tail_bytes)
        self.renderer = LineRenderer(self.budget.add, cols=cols, rows=rows)
        self.raw = RawTail(min(MAX_RAW_OUTPUT, max(1, head_bytes + tail_bytes)))
        self.started = time.monotonic()
        self.ended: float | None = None
        self.background: tuple[BackgroundProcess, ...] = ()
        #: What holds the terminal (a refused command only).
        self.holder: Holder | None = None
        #: The jobs before the command was typed (see ProcessPort.job_mark).
        self.job_mark: object = None
        #: It ended with the terminal's process (exited, killed, or disposed), whatever
        #: its status says (``killed``: its process was the shell's, replaced by exec).
        self.shell_gone = False
        #: The line that closes the group a command of several lines was typed in (``}``,
        #: fish's ``end``; see :func:`~ahp.agent.markers.group`), else empty.
        self.group_end = ""
        self.changed = trio.Event()
        self.activity = trio.Event()
        self.output_arrived = trio.Event()
        self.over = trio.Event()
        #: Set when the ``run`` that started the command was cancelled (after its
        #: Ctrl-C): the collector kills a command that ignores it for
        #: :data:`~ahp.agent.holding.INTERRUPT_GRACE`, as a timeout's.
        self.cancelled = trio.Event()

    # -- writing -------------------------------------------------------------------------------

    def apply(
        self,
        event: Event,
        *,
        exit_code: int | None = None,
        evidence: InputEvidence | None = None,
        note: str = "",
    ) -> Transition | None:
        """Apply ``event`` to the machine and wake whoever waits on what changed."""
        transition = self.machine.handle(
            event, trio.current_time(), exit_code=exit_code, evidence=evidence, note=note
        )
        if transition is None:
            return None
        self.activity.set()
        self.activity = trio.Event()
        if transition.ended:
            self.ended = time.monotonic()
            self.renderer.flush()
            self.over.set()
            self._output_changed()
        if transition.after is not transition.before or transition.ended:
            self.changed.set()
            self.changed = trio.Event()
        return transition

    def output(self, text: str) -> None:
        """Output of the command (VT text)."""
        if not text or self.machine.done:
            return
        self.raw.add(text)
        self.renderer.feed(text)
        self.apply(Event.OUTPUT)
        self._output_changed()

    def _output_changed(self) -> None:
        self.output_arrived.set()
        self.output_arrived = trio.Event()

    # -- reading -------------------------------------------------------------------------------

    @property
    def status(self) -> Status:
        return self.machine.status

    @property
    def evidence(self) -> InputEvidence | None:
        evidence = self.machine.evidence
        return evidence if evidence is not None else None  # type: ignore[return-value]

    def live(self) -> list[str]:
        """The renderer's window: lines the cursor can still change."""
        return self.renderer.lines()
