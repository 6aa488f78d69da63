"""A started command, for the agent: its :class:`CommandHandle` and :class:`CommandResult`.

Why a handle: ``run`` returns early (waiting for input, ``yield_after``) and
``start`` at once, so the agent needs something to come back to. The handle reads
the command's :class:`~ahp.agent.record.CommandRecord` (kept up to date by the
collector task in the terminal owner's nursery) and acts through the terminal's
:class:`CommandControls` (what a :class:`~ahp.agent.port.TerminalPort` offers for
it). All methods can be called from any task of the same Trio run; none of them
waits for ever unless asked to (``wait()`` without a timeout waits for the
command to settle).

Why the result beside it: a :class:`CommandResult` is the frozen value an agent
framework codes against (``docs/agent.md``): the same from an in-process
:class:`~ahp.engine.Terminal`, a remote :class:`~ahp.client.RemoteTerminal`, the
CLI's ``run --json`` and the MCP tools. A result returned before the command's end
carries its handle, and the handle makes results: one concept, one module.
"""

from __future__ import annotations

import math
import time
from typing import Protocol

import attrs
import trio

from ahp.agent.evidence import InputEvidence
from ahp.agent.occupants import BackgroundProcess, Holder
from ahp.agent.record import CommandRecord
from ahp.agent.status import FINAL_STATUSES, Event, Status

__all__ = ["CommandControls", "CommandHandle", "CommandResult"]


class CommandControls(Protocol):
    """What a handle acts through: the terminal's input and its jobs."""

    async def send_input(self, data: str) -> None: ...

    async def kill_command(self, mark: object) -> None:
        """Kill the running command's process groups: the foreground job and every
        job started since ``mark`` (as well as this side can)."""
        ...


@attrs.frozen
class CommandResult:
    """The result of one command (see ``docs/agent.md``).

    Attributes:
        command_line: the command as submitted.
        status: ``"finished"`` (exit code known), ``"running"`` (still running:
            ``yield_after`` or a ``wait`` timeout passed; see :attr:`handle`),
            ``"waiting_for_input"`` (blocked reading the terminal; answer with
            ``handle.send_input``), ``"timed_out"`` (the hard ``timeout`` passed and
            the command was interrupted), ``"interrupted"`` / ``"killed"`` (by the
            handle), ``"shell_exited"`` (the terminal's shell exited first, or the
            terminal was disposed), ``"lost"`` (the handle stopped following the
            command while it ran: the connection is gone, the client closed, or its
            collector failed), ``"refused"`` (never typed: the terminal was busy with
            :attr:`holder`). One of :data:`~ahp.agent.status.STATUSES`; see ``docs/agent.md``.
        output: the *rendered* output (progress bars as their last state, cursor
            moves applied, no escapes, the alternate screen's contents left out)
            within the budget: head, a marker line, tail.
        raw_output: the output as the terminal printed it (VT text), the most
            recent ``head_bytes + tail_bytes`` bytes of it.
        exit_code: the exit code when the command finished; the shell's own exit
            code when the command ended the shell (``shell_exited``); else ``None``.
        duration_ms: wall time, on this side's clock, from the typing of the command
            to its result being final (or to now), whatever the mode (the shell's own
            measure, from its start mark to its end mark, leaves out the reading of
            the line and what the end takes: the jobs it left are looked for).
        truncated: ``output`` left something out (see the omitted counts).
        omitted_bytes: exactly how many bytes of rendered output were left out.
        omitted_lines: how many whole lines were left out (a line cut at the edge
            of the head or the tail counts as shown).
        total_bytes: the size of the whole rendered output (UTF-8, one newline per line).
        total_lines: its number of lines.
        timed_out: the hard timeout passed.
        waiting_for_input: the command is blocked reading the terminal.
        alternate_screen: the command used the alternate screen (a pager, an
            editor); what it showed there is not in ``output`` (see ``term.screen()``).
        shell_exited: the terminal's shell itself exited (also when a ``kill`` ended it:
            a command whose process replaced the shell's, with ``exec``).
        background: processes the command left running (in-process only; a remote
            client cannot see the server's processes and reports none).
        command_id: the id of the command's :class:`~ahp.agent.CommandHandle` (of an
            exec: its terminal's URI).
        note: one sentence for the agent: why it waits for input and how to answer,
            why it was refused, how it was lost (empty when there is nothing to say).
        holder: the command that held the terminal (``refused`` only).
        handle: the handle while the command still runs, else ``None``.
        stderr: a non-pty run's (``exec_command``) stderr, rendered within the same
            budget as ``output``; empty for a terminal command (its stderr is in
            ``output``).
        signal: the name of the signal that ended a non-pty run (``"SIGKILL"``),
            else ``None``.
    """

    command_line: str
    status: str
    output: str
    raw_output: str
    exit_code: int | None
    duration_ms: int
    truncated: bool
    omitted_bytes: int
    omitted_lines: int
    total_bytes: int
    total_lines: int
    timed_out: bool
    waiting_for_input: bool
    alternate_screen: bool
    shell_exited: bool
    background: tuple[BackgroundProcess, ...]
    command_id: str
    note: str = ""
    holder: Holder | None = None
    handle: CommandHandle | None = attrs.field(default=None, eq=False, repr=False)
    stderr: str = ""
    signal: str | None = None

    @property
    def done(self) -> bool:
        """The command is over (any final status)."""
        return self.status in FINAL_STATUSES

    def to_json(self) -> dict[str, object]:
        """A JSON-ready dict of every field but :attr:`handle`."""
        return attrs.asdict(self, filter=lambda a, _: a.name != "handle")


class CommandHandle:
    """A command typed into a terminal (``term.start``, or ``result.handle`` of a
    ``term.run`` that returned before the end).

    Buffering: the record's (rendered output up to
    :data:`~ahp.agent.budget.RETAINED_OUTPUT_BYTES`); :meth:`read_new` keeps the
    lines of one screen it already returned.
    """

    def __init__(self, record: CommandRecord, port: CommandControls) -> None:
        self.record = record
        self._port = port
        self._read_lines = 0  # finished lines returned by read_new
        self._read_live: list[str] = []  # window lines returned by read_new as they were
        self._settled = 0  # lines returned by read_settled (an index into the whole output)

    @property
    def id(self) -> str:
        return self.record.id

    @property
    def terminal_uri(self) -> str:
        return self.record.terminal_uri

    @property
    def command_line(self) -> str:
        return self.record.command_line

    # -- reading -------------------------------------------------------------------------------

    @property
    def done(self) -> bool:
        """The command is over (any final status)."""
        return self.record.machine.done

    @property
    def status(self) -> str:
        return str(self.record.status)

    @property
    def input_evidence(self) -> InputEvidence | None:
        """Why the command is believed to wait for input (``None`` when it is not)."""
        return self.record.evidence

    def result(self) -> CommandResult:
        """The result so far, without waiting (with this handle in it while the command
        is not over)."""
        result = _result_of(self.record)
        return result if self.done else attrs.evolve(result, handle=self)

    def output(self) -> str:
        """All rendered output retained so far (the oldest lines beyond
        :data:`~ahp.agent.budget.RETAINED_OUTPUT_BYTES` are dropped; see
        :attr:`dropped_bytes`)."""
        return self.record.budget.retained_text(self.record.live())

    @property
    def dropped_bytes(self) -> int:
        """Rendered bytes no longer retained by :meth:`output`."""
        return self.record.budget.dropped_bytes

    def read_new(self) -> str:
        """Rendered output since the last call, as lines ending in ``\\n``.

        A line still on the screen (the cursor can reach it: a progress bar) is
        returned as it is now and again whenever it changes.
        """
        budget = self.record.budget
        finished = budget.finished_lines(self._read_lines)
        self._read_lines = budget.lines
        live = self.record.live()
        out: list[str] = []
        seen = self._read_live
        for line in finished:
            if seen and seen[0] == line:
                seen = seen[1:]
                continue
            seen = []
            out.append(line)
        start = 0
        while start < len(live) and start < len(seen) and live[start] == seen[start]:
            start += 1
        out.extend(live[start:])
        self._read_live = live
        return "".join(line + "\n" for line in out)

    def read_settled(self, *, final: bool = False) -> str:
        """Rendered lines since the last call that are done changing, each once, as
        lines ending in ``\n``: the finished ones and the window's lines above the
        cursor's line; with ``final`` (or once the command is over) the rest too.

        For printing output as it comes (``ahp-terminals run``): a progress bar is
        printed once, as it ended; a line a program redraws after moving the cursor up
        was printed as it was then. Lines older than what the handle retains
        (:data:`~ahp.agent.budget.RETAINED_OUTPUT_BYTES`) and not read in time are
        skipped.
        """
        budget = self.record.budget
        live = self.record.live()
        ready = len(live) if final or self.done else self.record.renderer.settled_lines()
        ready = min(ready, len(live))
        out = budget.finished_lines(self._settled)
        start = max(0, self._settled - budget.lines)
        out.extend(live[start:ready])
        self._settled = max(self._settled, budget.lines + ready)
        return "".join(line + "\n" for line in out)

    @property
    def settled(self) -> bool:
        """Over, or waiting for input in an episode no ``wait`` returned yet."""
        return self.record.machine.settled

    async def wait_settled(self) -> None:
        """Until :attr:`settled` as it was counted when this call began (never returns
        for a command that runs for ever): every waiter on one command, woken by the
        same wait for input, returns for it, whichever of them acknowledges it first."""
        machine = self.record.machine
        reported = machine.reported
        while not machine.settled_since(reported):
            await self.record.changed.wait()

    def acknowledge(self) -> None:
        """Count the current wait for input as reported (``wait`` does this itself)."""
        self.record.machine.acknowledge()

    async def wait(self, timeout: float | None = None) -> CommandResult:
        """Wait until the command is over or waits for input, or ``timeout`` passes
        (then its status is ``running``). Never interrupts the command.

        A wait for input that an earlier ``wait`` (or ``run``) already returned does
        not end the next ``wait`` at once: that one returns when the command ends,
        when it waits for input anew (after more output or input), or on timeout.
        Several ``wait`` calls at once (parallel tool calls) all return for the same
        wait for input: the episode each counts from is the one reported when it began.
        """
        with trio.move_on_after(math.inf if timeout is None else timeout):
            await self.wait_settled()
        self.acknowledge()
        return self.result()

    async def wait_done(self) -> None:
        """Until the command is over (whatever it waits for meanwhile)."""
        await self.record.over.wait()

    async def wait_output(self, timeout: float | None = None) -> None:
        """Wait until new output arrives, the command ends, or ``timeout`` passes."""
        with trio.move_on_after(math.inf if timeout is None else timeout):
            if not self.done:
                await self.record.output_arrived.wait()

    # -- acting --------------------------------------------------------------------------------

    async def send_input(self, data: str) -> None:
        """Type ``data`` into the terminal (the answer to a prompt, with ``\\r``)."""
        self.record.apply(Event.INPUT_SENT)
        await self._port.send_input(data)

    async def interrupt(self) -> None:
        """Ctrl-C to the foreground job; the final status becomes ``interrupted``."""
        if self.done:
            return
        self.record.apply(Event.INTERRUPT)
        await self._port.send_input("\x03")

    async def kill(self) -> None:
        """Kill the command's whole process group: SIGKILL (remotely sent by the
        server; against a server without the process extension, Ctrl-C then Ctrl-\\)."""
        if self.done:
            return
        self.record.apply(Event.KILL)
        await self._port.kill_command(self.record.job_mark)

    def __repr__(self) -> str:
        status = self.record.status
        return f"<CommandHandle {self.id} {self.command_line!r} {Status(status)}>"


def _result_of(record: CommandRecord) -> CommandResult:
    """The result so far, without a handle (the handle puts itself in while the
    command is not over: :meth:`CommandHandle.result`)."""
    machine = record.machine
    budgeted = record.budget.render(record.live())
    end = record.ended if record.ended is not None else time.monotonic()
    elapsed = int((end - record.started) * 1000)
    status = machine.status
    note = machine.note
    evidence = record.evidence
    if not note and evidence is not None:
        note = evidence.describe()
    if not note and not machine.done and Event.TIME_OUT in machine.asked:
        note = (
            "its timeout passed, but neither Ctrl-C nor SIGKILL ended it yet: it holds the "
            "terminal until it ends (wait for it, or dispose the terminal)"
        )
    return CommandResult(
        command_line=record.command_line,
        status=str(status),
        output=budgeted.text,
        raw_output=record.raw.text(),
        exit_code=machine.exit_code,
        duration_ms=elapsed,
        truncated=budgeted.truncated,
        omitted_bytes=budgeted.omitted_bytes,
        omitted_lines=budgeted.omitted_lines,
        total_bytes=budgeted.total_bytes,
        total_lines=budgeted.total_lines,
        timed_out=Event.TIME_OUT in machine.asked,
        waiting_for_input=machine.waiting,
        alternate_screen=record.renderer.used_alternate,
        shell_exited=status is Status.SHELL_EXITED or record.shell_gone,
        background=record.background,
        command_id=record.id,
        note=note,
        holder=record.holder,
    )
