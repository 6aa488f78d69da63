"""Following a typed command to its end: the :class:`Collector` task.

(The command is typed, or refused, by :func:`ahp.agent.start.start_command`, which
hands it to a collector.)

How a command is delimited:

* **With command detection** (bash, zsh, fish started by this host): the
  command line is typed, the next ``terminal/commandExecuted`` names its
  ``commandId``, and its ``terminal/commandFinished`` gives the exit code. The
  output is what the terminal printed between the two.
* **Fallback** (any other shell): the command is typed wrapped in markers
  (:mod:`ahp.agent.markers`); the output is what lies between them and the exit
  code is parsed from the end marker.

A shell replaced (detected mode): a command that ``exec``-s another shell (``exec
bash --norc``) takes the place of the shell that reported commands; the new one
reports none. Seen as the terminal's shell process itself reading the terminal in
quiet, twice with nothing printed between, under another command line than it was
started with (the processes' ``shell_replaced``), and that program an interactive
shell: the command is over (``finished``, no exit code, a note saying command
detection was lost), and the terminal's later commands are delimited with markers,
as in a shell without detection
(:attr:`~ahp.agent.registry.CommandRegistry.detection_lost`; a holder that is such a
command, left open in the terminal's state, holds nothing). Any other program
(``exec python3``) is a command waiting for input.

A shell that stops reporting ends (detected mode: ``unset PROMPT_COMMAND`` removes
bash's end hook): once the shell's own line editor is seen reading at its prompt
(:func:`~ahp.agent.evidence.editor_reads`, twice with nothing printed between) and the
screen's last line is the prompt the command was typed at (after a Ctrl-C: a new line
and a prompt), the command is over (``finished``, no exit code, a note saying command
detection was lost); later commands use markers until the shell reports an end again
(:meth:`~ahp.agent.registry.CommandRegistry.detection_back`). A prompt never seen (bash's
stderr off the terminal: :func:`~ahp.agent.evidence.prompt_unseen`) takes a Ctrl-C
first, then quiet with nothing printed since (:meth:`InterruptAnswer.took_unseen
<ahp.agent.interrupt.InterruptAnswer.took_unseen>`).
Markers are typed in fish's syntax when the shell there is fish.

Marks nobody signed: in a terminal whose shell the host did not inject its integration
into (``port.signed_marks`` false: ``/bin/sh``), any program can print ``OSC 133``
marks; the terminal's detection is then never used: markers, and the foreground job
for what holds the terminal.

The collector task (in the terminal owner's nursery: the terminal's own, or the
client connection's) feeds the command's :class:`~ahp.agent.machine.CommandMachine`
with what it sees and ends on every path in a final status: its end, the shell's
exit (with the shell's exit code; none, and a note saying it did not run, when the
shell exited before it started the command), the terminal disposed, the follower ended
(the connection is gone: ``lost``), a crash of its own (``lost``, logged). Before
the final status is published it gives back the claim it found (when the
command was run with one and the terminal is still there), so that a ``run``
that returns has given it back. Its input watch asks the terminal's processes
for evidence after ``input_quiet`` seconds of quiet (:mod:`ahp.agent.evidence`),
and its timer enforces ``timeout``: Ctrl-C, then :data:`INTERRUPT_GRACE` for the end;
a command still running then (it ignores Ctrl-C) is killed as ``handle.kill()`` kills
(SIGKILL to its process groups) and still reported ``timed_out``, with a note saying
so. (A command that outlives even that keeps status ``running`` with ``timed_out``
set: see :func:`ahp.agent.surface.run_command`.)

Cancellation: the collector is cancelled with its owner's nursery and ends the
command then (``shell_exited`` when the terminal ended, else ``lost``).
"""

from __future__ import annotations

import logging
import math
from collections.abc import AsyncIterator
from typing import Final

import attrs
import trio

from ahp.agent.evidence import (
    InputEvidence,
    TtyView,
    editor_reads,
    evidence_of,
    interactive_shell,
    looks_like_prompt,
    program_name,
    prompt_unseen,
)
from ahp.agent.holding import (
    INTERRUPT_GRACE,
    KILL_WAIT,
    replaced_by,
)
from ahp.agent.interrupt import TAKE_WAIT, InterruptAnswer
from ahp.agent.machine import INPUT_POLL, MAX_INPUT_POLL
from ahp.agent.markers import MARKER_LOOKBACK, MARKER_TAIL, Markers
from ahp.agent.occupants import BackgroundProcess
from ahp.agent.port import TerminalPort
from ahp.agent.prestart import PreStart, prompt_after, screen_line
from ahp.agent.record import CommandRecord
from ahp.agent.status import Event
from ahp.protocol.actions import (
    ActionEnvelope,
    TerminalCommandExecuted,
    TerminalCommandFinished,
    TerminalData,
    TerminalExited,
)
from ahp.protocol.state import CommandPart, Snapshot, TerminalClaim, TerminalState

__all__ = [
    "CLAIM_TIMEOUT",
    "INTERRUPT_GRACE",
    "KILL_WAIT",
    "PROMPT_LOOKBACK",
    "Collector",
    "Stream",
    "close_follower",
]

log = logging.getLogger("ahp.agent")

#: Bound on giving a claim back (and on closing a follower) at the end.
CLAIM_TIMEOUT: Final = 5.0
#: The end of the terminal's text read for the prompt a command is typed at.
PROMPT_LOOKBACK: Final = 4096
#: Bound on closing the follower at the end.
CLOSE_TIMEOUT: Final = 1.0
#: Ends after which the claim found is given back (the terminal is still there).
_GIVE_BACK: Final = frozenset({Event.ENDED, Event.FAILED})

Stream = AsyncIterator[Snapshot | ActionEnvelope]


async def close_follower(stream: Stream) -> None:
    """Close a follower (bounded by :data:`CLOSE_TIMEOUT`)."""
    aclose = getattr(stream, "aclose", None)
    if aclose is not None:
        with trio.move_on_after(CLOSE_TIMEOUT):
            await aclose()


def _fish(evidence: InputEvidence) -> bool:
    """The reader is fish (the terminal's shell, seen reading the terminal)."""
    return bool(evidence.programs) and program_name(evidence.programs[0]).lstrip("-") == "fish"


def _runs_nothing(line: str) -> bool:
    """The command line is empty, blank or one comment: no shell runs anything for it
    (its "not run" is no syntax error)."""
    text = line.strip()
    return not text or (text.startswith("#") and len(text.splitlines()) == 1)


def _no_exit_code(exit_code: int | None) -> str:
    """The note for a detected command's reported end (none when it has an exit code)."""
    if exit_code is not None:
        return ""
    return (
        "exit code unknown: the shell reported the command's end without its exit code "
        "(the hook that reports it did not run: removed, as fish's `functions -e "
        "__ahp_postexec` does)"
    )


@attrs.define
class Collector:
    """Follows one command to its end (the task :func:`start_command` spawns)."""

    record: CommandRecord
    port: TerminalPort
    stream: Stream
    markers: Markers | None
    known: frozenset[str]
    give_back: TerminalClaim | None
    timeout: float | None
    #: The shell's id of the command (detected mode), once seen.
    command_id: str | None = None
    #: The activity event current when the shell itself was last seen reading.
    shell_read_seen: trio.Event | None = None
    #: Fallback only: after an interrupt the shell was seen back at its prompt.
    back_at_prompt: bool = False
    #: The collector's nursery (the watcher ends the follower through it).
    scope: trio.CancelScope | None = None
    #: Detected mode: what the terminal printed after the typing, until the start.
    pre_start: PreStart | None = None
    #: Set when pre-start output arrives (replaced by the watcher once seen).
    pre_activity: trio.Event = attrs.Factory(trio.Event)
    #: The timeout's Ctrl-C was ignored for :data:`INTERRUPT_GRACE`: the command was killed.
    escalated: bool = False
    #: Detected mode: the command line of the interactive shell that replaced the
    #: terminal's shell (``exec bash``), once seen at its prompt.
    replaced_by: str | None = None
    #: Detected mode: the command line of another program that replaced the terminal's
    #: shell (``exec python3``), once seen reading the terminal.
    replaced_program: str | None = None
    #: Detected mode, the command started: the shell was seen back at its prompt
    #: (twice, nothing printed between) without reporting the command's end.
    marks_lost: bool = False
    #: Detected mode: the shell dropped the group the command's lines were typed in and
    #: runs the later lines as commands of their own (:meth:`_group_dropped`).
    group_dropped: bool = False
    #: The shell's answer to the Ctrl-Cs sent before the command's end (whether it
    #: took them).
    interrupt: InterruptAnswer = attrs.field(
        default=attrs.Factory(lambda self: InterruptAnswer(self.port), takes_self=True)
    )

    async def run(self) -> None:
        record = self.record
        failure: str | None = None
        try:
            async with trio.open_nursery() as nursery:
                self.scope = nursery.cancel_scope
                nursery.start_soon(self._watch_input)
                if self.pre_start is not None:
                    nursery.start_soon(self._watch_start, self.pre_start)
                if self.timeout is not None:
                    nursery.start_soon(self._time_out, self.timeout)
                nursery.start_soon(self._escalate_cancel)
                if self.markers is None:
                    await self._follow_detected()
                else:
                    await self._follow_markers(self.markers)
                nursery.cancel_scope.cancel()
        except Exception as exc:  # never let a collector take down the terminal or client
            log.exception("command %s in %s: collector failed", record.id, record.terminal_uri)
            failure = f"the collector failed: {exc!r}"
        finally:
            with trio.CancelScope(shield=True):
                try:
                    if failure is not None:
                        await self._end(Event.FAILED, note=failure)
                    elif not record.machine.done:
                        await self._end_unfollowed()
                except Exception:
                    log.exception("command %s: ending it failed", record.id)
                    record.apply(Event.FAILED, note="the collector failed while ending it")
                await close_follower(self.stream)

    async def _end_unfollowed(self) -> None:
        """The follower ended, or the collector was cancelled or failed, before the
        command's end was seen."""
        if self.port.ended:
            await self._end(
                Event.DISPOSED,
                exit_code=self._shell_exit_code(),
                note="the terminal ended while the command ran",
            )
        else:
            await self._end(
                Event.LOST,
                note="the terminal can no longer be followed "
                "(the connection is gone or the client closed)",
            )

    def _shell_exit_code(self) -> int | None:
        try:
            return self.port.state.exitCode
        except KeyError:  # a remote terminal no longer mirrored (disposed)
            return None

    # -- the end -------------------------------------------------------------------------------

    async def _end(
        self,
        event: Event,
        *,
        exit_code: int | None = None,
        note: str = "",
    ) -> None:
        """Finish: the jobs the command left (when it ended by itself and they can be
        seen), the claim given back, then the final event."""
        record = self.record
        if record.machine.done:
            return
        processes = self.port.processes
        # (After a kill every job started since the mark was killed with it: what a
        # scan finds then is still dying, not left behind.)
        killed = Event.KILL in record.machine.asked or self.escalated
        if event is Event.ENDED and processes is not None and not killed:
            jobs = await processes.background_jobs(record.job_mark)
            record.background = tuple(
                BackgroundProcess(pid, line) for pid, line in sorted(jobs.items())
            )
        if self.give_back is not None and event in _GIVE_BACK and not self.port.ended:
            claim, self.give_back = self.give_back, None
            if self.port.state.claim != claim:
                with trio.CancelScope(shield=True), trio.move_on_after(CLAIM_TIMEOUT):
                    await self.port.set_claim(claim)
        if event in (Event.SHELL_EXITED, Event.DISPOSED):
            record.shell_gone = True
        if event is Event.SHELL_EXITED and not record.machine.executing:
            # The shell never reported starting it (no start mark, no command id): it
            # exited before it read the line (one that exits at start-up), and its exit
            # code is not the command's.
            code = "" if exit_code is None else f" with code {exit_code}"
            note = (
                f"not run: the terminal's shell exited{code} before it started the command "
                "(that is not the command's exit code); open a new terminal"
            )
            exit_code = None
        if (
            event is Event.SHELL_EXITED
            and self.replaced_program is not None
            and Event.KILL in record.machine.asked
        ):
            note = (
                f"its process, {program_name(self.replaced_program)!r}, had replaced the "
                "terminal's shell (exec): killing it ended the terminal's process"
            )
        if self.escalated and not note and Event.KILL not in record.machine.asked:
            note = f"it ignored Ctrl-C for {INTERRUPT_GRACE:g} s: killed (SIGKILL)"
        elif self.escalated and not note and record.cancelled.is_set():
            note = (
                f"its run was cancelled and it ignored the Ctrl-C for {INTERRUPT_GRACE:g} s: "
                "killed (SIGKILL)"
            )
        record.apply(event, exit_code=exit_code, note=note)

    async def _time_out(self, timeout: float) -> None:
        """The hard timeout: Ctrl-C; a command not over :data:`INTERRUPT_GRACE` later
        is killed as ``handle.kill()`` kills (its process groups), still reported
        ``timed_out``."""
        await trio.sleep(timeout)
        record = self.record
        if record.machine.done:
            return
        record.apply(Event.TIME_OUT)
        await self.port.send_input("\x03")
        with trio.move_on_after(INTERRUPT_GRACE):
            await record.over.wait()
            return
        if Event.KILL in record.machine.asked:
            return  # the agent killed it already
        self.escalated = True
        await self.port.kill_command(record.job_mark)

    async def _escalate_cancel(self) -> None:
        """The ``run`` that started the command was cancelled and sent it a Ctrl-C
        (:attr:`CommandRecord.cancelled`): one not over :data:`INTERRUPT_GRACE` later
        is killed, as a timeout's is (its process groups), and reported ``killed``.
        Here, in the terminal owner's nursery, so the cancelled caller does not wait."""
        record = self.record
        await record.cancelled.wait()
        with trio.move_on_after(INTERRUPT_GRACE):
            await record.over.wait()
            return
        if Event.KILL in record.machine.asked or self.escalated:
            return  # killed already: by the agent, or by the timeout
        self.escalated = True
        record.apply(Event.KILL)
        await self.port.kill_command(record.job_mark)

    # -- following -----------------------------------------------------------------------------

    async def _follow_detected(self) -> None:
        record = self.record
        async for item in self.stream:
            if isinstance(item, Snapshot):
                # A resynchronisation: output in the gap is lost, the end is not (nor
                # the start: a command that is not one of ``known`` is this one).
                state = item.state
                assert isinstance(state, TerminalState)
                for part in state.content:
                    if not isinstance(part, CommandPart):
                        continue
                    if self.command_id is None and part.commandId not in self.known:
                        self.command_id = part.commandId
                        record.apply(Event.EXECUTING)
                    if part.commandId == self.command_id and part.isComplete:
                        await self._end(
                            Event.ENDED,
                            exit_code=part.exitCode,
                            note=_no_exit_code(part.exitCode),
                        )
                        return
                if state.exited:
                    await self._end(Event.SHELL_EXITED, exit_code=state.exitCode)
                    return
                continue
            action = item.action
            if (
                isinstance(action, TerminalCommandExecuted)
                and self.command_id is None
                and action.commandId not in self.known  # (an earlier command's)
            ):
                if self.group_dropped or self._group_dropped(action.commandLine):
                    # Not this command's start: it ends back at the prompt (_watch_start).
                    self.group_dropped = True
                    continue
                self.command_id = action.commandId
                record.apply(Event.EXECUTING)
            elif isinstance(action, TerminalData):
                if self.command_id is not None:
                    record.output(action.data)
                    if record.machine.asked:
                        self.interrupt.heard(action.data)
                elif self.pre_start is not None:
                    self.pre_start.feed(action.data)
                    if record.machine.asked:
                        self.interrupt.heard(action.data)
                    self.pre_activity.set()
            elif (
                isinstance(action, TerminalCommandFinished) and action.commandId == self.command_id
            ):
                await self._end(
                    Event.ENDED,
                    exit_code=action.exitCode,
                    note=_no_exit_code(action.exitCode),
                )
                return
            elif isinstance(action, TerminalExited):
                await self._end(Event.SHELL_EXITED, exit_code=action.exitCode)
                return

    def _group_dropped(self, command_line: str) -> bool:
        """A command typed grouped line by line (:func:`ahp.agent.markers.group`) that
        the shell starts as another line (``command_line`` is not the group's) after it
        drew its prompt again (:meth:`PreStart.prompt_again`): a line it could not parse
        dropped the group, and a later line runs as a command of its own (bash; the
        known limit of the group). Both are needed: bash reports a line kept out of its
        history by its first simple command, not the group."""
        pre = self.pre_start
        if not self.record.group_end or pre is None or not command_line:
            return False
        return not command_line.startswith("{") and pre.prompt_again()

    async def _detection_lost(self, known: frozenset[str] | None, why: str) -> None:
        """End the command: its shell reports no end of it (``why``); later commands
        use markers (``known``: see :meth:`CommandRegistry.lose_detection
        <ahp.agent.registry.CommandRegistry.lose_detection>`; None: for good). The
        follower, waiting for an end that will not come, is cancelled."""
        self.port.commands.lose_detection(known)
        await self._end(Event.ENDED, note=f"command detection was lost: {why}")
        if self.scope is not None:
            self.scope.cancel()

    async def _follow_markers(self, markers: Markers) -> None:
        record = self.record
        async for item in self.stream:
            if isinstance(item, Snapshot):
                # A resynchronisation: output in the gap is lost; the end marker may
                # be in it, and then it is in the state.
                state = item.state
                assert isinstance(state, TerminalState)
                tail = state.tail(MARKER_LOOKBACK)
                end = markers.find_end(tail)
                if end is not None:
                    await self._end(Event.ENDED, exit_code=end)
                    return
                markers.resynchronised(tail)
                if markers.started and not record.machine.executing:
                    record.apply(Event.EXECUTING)
                if state.exited:
                    await self._end(Event.SHELL_EXITED, exit_code=state.exitCode)
                    return
                continue
            action = item.action
            if isinstance(action, TerminalExited):
                await self._end(Event.SHELL_EXITED, exit_code=action.exitCode)
                return
            if not isinstance(action, TerminalData):
                continue
            if record.machine.asked:
                self.interrupt.heard(action.data)
            text = markers.feed(action.data)
            if markers.started and not record.machine.executing:
                record.apply(Event.EXECUTING)
            record.output(text)
            if markers.done:
                await self._end(Event.ENDED, exit_code=markers.exit_code)
                return

    # -- a line the shell did not start ---------------------------------------------------------

    async def _watch_start(self, pre: PreStart) -> None:
        """Detected mode, until the shell reports the command's start: once the
        terminal is quiet and the shell itself is seen reading it again (twice, with
        nothing printed in between), the line was not started. Back at the prompt it
        was typed at, or after an interrupt: the command is over (the shell dropped
        it: a syntax error, a Ctrl-C before it ran). fish back at its prompt with the
        line still in its editor (it keeps a line it refuses): the line is cleared
        first (:meth:`_clear_kept_line`). At another prompt (``> ``: an unclosed quote
        or block): it waits for input, the rest of the line (evidence
        ``continuation``)."""
        record = self.record
        pause = self.record.machine.input_quiet
        seen: int | None = None
        while self.command_id is None and not self._over():
            count = pre.count
            if self.pre_activity.is_set():
                self.pre_activity = trio.Event()
            with trio.move_on_after(pause):
                await self.pre_activity.wait()
            if pre.count != count:
                seen = self.interrupt.untaken = None
                pause = self.record.machine.input_quiet
                continue
            reading = await self._shell_reads(pre)
            if self.command_id is not None or self._over():
                return
            if not reading or pre.count != count:
                seen = self.interrupt.untaken = None
                pause = min(pause * 2, MAX_INPUT_POLL)
                continue
            if seen != count:
                seen, pause = count, INPUT_POLL  # a second look, nothing printed between
                continue
            asked = bool(record.machine.asked)
            if asked and not await self.interrupt.took(pre.prompt):
                pause = INPUT_POLL
                continue
            kept = pre.kept_line() if not asked and _fish(reading) else None
            if kept is not None:
                await self._clear_kept_line(pre, kept)
                return
            if asked or pre.back_at_prompt():
                record.output(pre.after_first() if self.group_dropped else pre.said())
                if self.group_dropped:
                    why = (
                        "not run as one command: the shell could not parse one of its lines "
                        "(the output says why) and dropped the group they were typed in (bash "
                        "reads them one by one); it ran the lines after that one as commands "
                        "of their own (the output shows them)"
                    )
                elif asked:
                    why = "not run: it was interrupted before the shell started it"
                elif _runs_nothing(record.command_line):
                    why = "not run: the line runs nothing (empty, blank or a comment)"
                else:
                    why = (
                        "not run: the shell is back at its prompt without running it (the "
                        "output says why: a syntax error?)"
                    )
                await self._end(Event.ENDED, note=f"{why}; no exit code")
                if self.scope is not None:
                    self.scope.cancel()  # the follower waits for a start that will not come
                return
            if not record.machine.waiting:
                # The shell reads the rest of the command line (``> ``: an unclosed quote,
                # bracket or block): answered with send_input, or interrupted.
                evidence = attrs.evolve(reading, continuation=True, group_end=record.group_end)
                record.apply(Event.INPUT_SEEN, evidence=evidence)
            pause = MAX_INPUT_POLL

    async def _clear_kept_line(self, pre: PreStart, prompt: str) -> None:
        """fish refused the typed line (a syntax error: its message is the output) and
        keeps it in its editor, where the next command's keys would be appended to it
        (``(exit 42)echo next``). The line is cleared with a Ctrl-C (fish's
        ``cancel-commandline``: ``^C``, a new line, its prompt) and the command ended
        as not run once fish has shown it took it (at most :data:`TAKE_WAIT`), so that
        the next command is typed at an empty prompt."""
        record = self.record
        record.output(pre.said_kept())
        pre.mark()
        await self.port.send_input("\x03")
        cleared = False
        with trio.move_on_after(TAKE_WAIT):
            while True:
                self.pre_activity = activity = trio.Event()
                cleared = prompt_after(pre.since_mark(), prompt)
                if cleared:
                    break
                await activity.wait()
        how = (
            "it was cleared with Ctrl-C"
            if cleared
            else f"a Ctrl-C to clear it had no answer in {TAKE_WAIT:g} s (the next command "
            "may be appended to it)"
        )
        await self._end(
            Event.ENDED,
            note="not run: fish refused the line (the output says why: a syntax error) and "
            f"kept it in its editor; {how}; no exit code",
        )
        if self.scope is not None:
            self.scope.cancel()  # the follower waits for a start that will not come

    async def _shell_reads(self, pre: PreStart) -> InputEvidence | None:
        """Evidence that the shell itself (no job of its own) reads the terminal,
        nothing unread; without the processes to look at, that the last line looks
        like a prompt."""
        processes = self.port.processes
        if processes is None:
            await trio.lowlevel.checkpoint()
            if looks_like_prompt(pre.last_line()):
                return InputEvidence(readers=(), echo=True, source="heuristic")
            return None
        status = await processes.tty_status()
        if status is None or not status.shell_foreground or status.unread:
            return None
        readers = status.readers or status.tty_pollers
        if not readers:
            return None
        return InputEvidence(
            readers=readers, echo=status.echo, source="procfs", programs=status.programs
        )

    # -- waiting for input ---------------------------------------------------------------------

    async def _watch_input(self) -> None:
        """Conclude ``waiting_for_input`` from quiet output plus the processes' evidence
        (the machine keeps the clock: when to look, and the back-off)."""
        record = self.record
        machine = record.machine
        while not self._over():
            due = machine.next_look(unstarted=self.markers is not None)
            now = trio.current_time()
            if due is None or now < due:
                with trio.move_on_at(math.inf if due is None else due):
                    await record.activity.wait()
                continue
            activity = record.activity
            evidence = await self._evidence()
            if self._over():
                return
            if self.replaced_by is not None:
                self.port.commands.replaced_by = interactive_shell(self.replaced_by)
                await self._detection_lost(
                    None,
                    f"the terminal's shell was replaced by {program_name(self.replaced_by)!r} "
                    "(exec), now at its own prompt, which reports no command's end; later "
                    "commands here are delimited with markers",
                )
                return
            if self.marks_lost:
                state = self.port.state
                unseen = (
                    " (its line editor reads after the Ctrl-C; its prompt is not shown: "
                    "bash's stderr is not the terminal)"
                    if self.record.machine.asked and not self._prompt_seen()
                    else ""
                )
                await self._detection_lost(
                    frozenset(p.commandId for p in state.content if isinstance(p, CommandPart)),
                    f"the shell is back at its prompt{unseen} but reported no end of the "
                    "command (its hooks were removed, e.g. `unset PROMPT_COMMAND`, or its "
                    "marks sent elsewhere): exit code unknown; later commands here are "
                    "delimited with markers until the shell reports one's end again",
                )
                return
            if self.back_at_prompt:
                note = (
                    "the shell dropped the rest of the command line (its end marker) "
                    "when interrupted: exit code unknown"
                    if machine.executing
                    else "not run: it was interrupted before the shell started it; no exit code"
                )
                await self._end(Event.ENDED, note=note)
                if self.scope is not None:
                    self.scope.cancel()  # the follower waits for a marker that will not come
                return
            if activity.is_set():
                continue  # something happened meanwhile: the evidence may be stale
            if evidence is not None:
                record.apply(Event.INPUT_SEEN, evidence=evidence)
            else:
                machine.looked(trio.current_time(), steady=self.interrupt.untaken is not None)

    def _over(self) -> bool:
        return self.record.machine.done

    def _ended_in_state(self) -> bool:
        """The terminal's state already shows the command's end (the collector has
        not caught up yet): the shell, back at its prompt, reads the terminal."""
        state = self.port.state
        if state.exited:
            return True
        if self.command_id is not None:
            return any(
                isinstance(p, CommandPart) and p.commandId == self.command_id and p.isComplete
                for p in reversed(state.content)
            )
        markers = self.markers
        return markers is not None and markers.find_end(state.tail(MARKER_TAIL)) is not None

    def _replacement(self, status: TtyView | None) -> str | None:
        """Detected mode, the command started: the command line of the program that
        replaced the terminal's shell (``exec``) and reads the terminal, nothing
        unread (see :func:`ahp.agent.holding.replaced_by`); else ``None``."""
        if self.markers is not None or self.command_id is None:
            return None
        return replaced_by(status)

    def _at_prompt_unreported(self, status: TtyView | None) -> bool:
        """Detected mode, the command started and its end not reported: the shell is
        back at its prompt, its line editor reading (:func:`editor_reads`), and the
        screen shows that prompt: its last line is the prompt the command was typed
        at, or, once a Ctrl-C was sent (which ends a builtin ``read`` too), the shell
        answered it with a new line and a prompt. A builtin ``read`` (canonical mode;
        or a prompt of its own on screen) is not this: it waits for input."""
        pre = self.pre_start
        if self.markers is not None or self.command_id is None or pre is None:
            return False
        if not editor_reads(status):
            return False
        if self.record.machine.asked:
            return self._prompt_seen() or prompt_unseen(status)
        last = screen_line(self.port.state.tail(PROMPT_LOOKBACK)).strip()
        return bool(last) and last == pre.prompt

    def _prompt_seen(self) -> bool:
        """The shell answered the (latest) Ctrl-C with a new line and a prompt."""
        pre = self.pre_start
        return pre is not None and self.interrupt.prompt_seen(pre.prompt)

    def _screen_says_input(self) -> bool:
        """A full-screen program (it reads keys), or a prompt-like last line."""
        record = self.record
        if record.renderer.alternate:
            return True
        live = record.live()
        return bool(live) and looks_like_prompt(live[-1])

    async def _evidence(self) -> InputEvidence | None:
        if self._ended_in_state():
            await trio.lowlevel.checkpoint()
            return None
        full_screen = self.record.renderer.alternate
        processes = self.port.processes
        if processes is not None:
            status = await processes.tty_status()
            other = self._replacement(status)
            if other is not None and status is not None:
                # A second look with nothing in between: not a program on its way out.
                seen, self.shell_read_seen = self.shell_read_seen, self.record.activity
                if seen is not self.record.activity:
                    return None
                if interactive_shell(other) is not None:
                    self.replaced_by = other
                    return None
                self.replaced_program = other
                return InputEvidence(
                    readers=status.readers or status.tty_pollers,
                    echo=status.echo,
                    source="procfs" if status.readers else "poll",
                    programs=status.programs,
                    full_screen=full_screen,
                    replaced_shell=True,
                )
            if self._at_prompt_unreported(status):
                # A second look with nothing in between: not a command on its way out.
                seen, self.shell_read_seen = self.shell_read_seen, self.record.activity
                if seen is not self.record.activity:
                    self.interrupt.untaken = None
                elif self.record.machine.asked and not self._prompt_seen():
                    self.marks_lost = await self.interrupt.took_unseen()
                else:
                    self.marks_lost = True
                return None
            evidence = evidence_of(status)
            if evidence is None:
                return None
            if evidence.source == "poll_unseen" and not self._screen_says_input():
                return None
            if status is not None and status.shell_foreground:
                # The shell reads: a builtin's prompt, or the shell back at its prompt
                # with the command's end still on its way to us. A second look with
                # nothing in between tells them apart.
                seen, self.shell_read_seen = self.shell_read_seen, self.record.activity
                if seen is not self.record.activity:
                    self.interrupt.untaken = None
                    return None
                if self.markers is not None and self.record.machine.asked:
                    # Interrupted in a shell without detection: an interactive shell
                    # drops the rest of the line, end marker included; it is back at
                    # its prompt once it has shown it took the Ctrl-C.
                    self.back_at_prompt = await self.interrupt.took("")
                    return None
            return attrs.evolve(evidence, full_screen=full_screen)
        # Nothing to see (a remote server without the extension, no pty): quiet, and
        # either a full-screen program (it reads keys) or a prompt-like last line.
        await trio.lowlevel.checkpoint()
        if self._screen_says_input():
            return InputEvidence(readers=(), echo=True, source="heuristic", full_screen=full_screen)
        return None
