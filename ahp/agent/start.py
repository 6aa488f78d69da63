"""Typing a command, or refusing to: :func:`start_command`.

Why apart from the collector: starting is a decision taken once, before anything is
typed (is the terminal busy, which way are commands delimited, which shell reads
them), and the :class:`~ahp.agent.collector.Collector` follows what was typed from
then on.

Never typing into a busy terminal: :func:`start_command` first asks what holds
the terminal (:func:`~ahp.agent.holding.holder_of`): a command of this surface that
is not over, a detected command the shell reports running, or (without detection,
when the processes can be seen) a foreground job other than the shell. If one does,
the command is not typed: its handle is over at once with status ``refused``, the
holder named in ``result.holder`` and ``result.note`` saying how to answer it
(``send_input``) or stop it (``interrupt``). A holder that is already ending
(interrupted, timed out, killed, its run cancelled) is given
:data:`~ahp.agent.holding.ENDING_WAIT` to end first. One start at a time per
terminal (per client, remotely): :attr:`CommandRegistry.starting
<ahp.agent.registry.CommandRegistry.starting>`.

Which way: with the terminal's command detection when the shell reports commands
with marks the host signed; else wrapped in markers (:mod:`ahp.agent.markers`), in
fish's syntax when the shell is fish (:func:`_shell_name`).

A terminal that exits while a command is being started (a shell that exits at
once, or after a while, before its first prompt): every wait of the start (the
first snapshot, command detection's announcement, the prompt after the previous
command) ends on the exit seen on the follower, and the state is looked at again
before the typing: :class:`TerminalExitedError`, nothing typed. An exit after the
typing is the collector's: the command's status is ``shell_exited``, without an exit
code when the shell had not started it (its note says it did not run).

Cancellation: cancelling :func:`start_command` before the command is typed
leaves nothing behind (the follower closed, the claim given back). Typing and
registering the command are shielded from cancellation (bounded by
:data:`TYPE_TIMEOUT`): keys that may have reached the shell always belong to a
registered command, followed by its collector in the terminal owner's nursery, so
that its end is attributed to it and the next command waits for it (a cancelled
``run`` then interrupts it; a cancelled ``start`` may return its handle).

The follower the collector reads is opened just before the typing, and the shell's
command parts known then are not this command's: what an ending holder printed and
reported while this start waited for it is not taken for this command's start.
"""

from __future__ import annotations

import secrets
import time
from typing import Final

import trio

from ahp.agent.collector import (
    CLAIM_TIMEOUT,
    PROMPT_LOOKBACK,
    Collector,
    Stream,
    close_follower,
)
from ahp.agent.command import CommandHandle
from ahp.agent.evidence import editor_reads
from ahp.agent.holding import INTERRUPT_GRACE, before_prompt, holder_of, refusal_note
from ahp.agent.line import command_text, keystrokes
from ahp.agent.markers import Markers, group, wrap
from ahp.agent.options import RunOptions
from ahp.agent.port import TerminalPort
from ahp.agent.prestart import PreStart, screen_line
from ahp.agent.record import CommandRecord
from ahp.agent.status import Event
from ahp.protocol.actions import (
    ActionEnvelope,
    TerminalCommandDetectionAvailable,
    TerminalExited,
)
from ahp.protocol.state import CommandPart, Snapshot, TerminalState

__all__ = ["TerminalExitedError", "start_command"]


class TerminalExitedError(RuntimeError):
    """``run``/``start`` on a terminal whose process (its shell) has exited: nothing is
    typed. A :class:`RuntimeError`, as before it had a class of its own."""

    def __init__(self) -> None:
        super().__init__("the terminal's process has exited")


#: Bound on typing a command (shielded from cancellation): longer (a remote
#: connection being re-established), the typing is abandoned and the command
#: registered all the same (its keys may have been sent); its collector follows it.
TYPE_TIMEOUT: Final = 10.0

#: Looks at the terminal's processes for the name of the shell reading it (a shell
#: drawing its prompt reads nothing yet), and the pause between two looks.
SHELL_LOOKS: Final = 10

SHELL_LOOK_PAUSE: Final = 0.05


async def _shell_name(port: TerminalPort) -> str | None:
    """The name of the terminal's shell (``None``: not seen; a POSIX-like shell is then
    assumed, as for a remote server without the process extension): the shell a
    command put in its place (``exec fish``), else the terminal's program."""
    name = port.commands.replaced_by or port.shell_name
    if name is None and port.processes is not None:
        for _ in range(SHELL_LOOKS):
            status = await port.processes.tty_status()
            if status is None or status.programs:
                break
            await trio.sleep(SHELL_LOOK_PAUSE)
        if status is not None and status.programs:
            name = status.programs[0].split(" ", 1)[0].rsplit("/", 1)[-1]
    return name.lstrip("-") if name is not None else None


def _pastes(shell: str | None) -> bool:
    """A command of several lines goes to ``shell`` as one bracketed paste. zsh and fish
    parse a pasted buffer as a whole before they run any of it (a syntax error
    anywhere: nothing runs); bash parses it line by line, as typed (a syntax error
    drops that line only, the later ones run), so bash gets the group. zsh and fish
    bind the paste's start and end in their default key maps whether or not they
    switch the terminal's mode on (zsh with ``zle_bracketed_paste`` unset, fish with
    ``--no-config``), and keys typed before the editor reads (its prompt not drawn
    yet) wait for it in the tty."""
    return shell in ("zsh", "fish")


async def start_command(
    port: TerminalPort, command_line: str, options: RunOptions
) -> CommandHandle:
    """Type ``command_line`` into the terminal and return its handle at once (over
    already, status ``refused``, when the terminal is busy: see the module doc).

    One start at a time per terminal (per client, remotely): a second caller waits
    until the first's command is registered, then finds the terminal busy (both
    passed the busy check before either was registered, and both were typed).

    ``command_line`` is text (:func:`~ahp.agent.line.command_text`): ``\r\n`` and a
    lone ``\r`` are line ends, a TAB is typed as a TAB.

    Raises:
        TerminalExitedError: the terminal's process has exited (a ``RuntimeError``).
        CommandLineError: ``command_line`` holds a control character (a ``ValueError``;
            a TAB, in fish); nothing was typed.
    """
    command_line = command_text(command_line)
    async with port.commands.starting:
        return await _start(port, command_line, options)


async def _start(port: TerminalPort, command_line: str, options: RunOptions) -> CommandHandle:
    """:func:`start_command`'s work, under its lock."""
    head, tail = options.budget()
    if port.state.exited:
        raise TerminalExitedError
    state = port.state
    record = CommandRecord(
        port.uri,
        command_line,
        head_bytes=head,
        tail_bytes=tail,
        input_quiet=options.input_quiet,
        cols=state.cols or 80,
        rows=state.rows or 24,
    )
    handle = CommandHandle(record, port)
    claim = options.claim
    found_claim = port.state.claim
    claimed = False
    stream = port.follow()
    spawned = False
    try:
        first = await stream.__anext__()
        assert isinstance(first, Snapshot)
        assert isinstance(first.state, TerminalState)
        state = first.state
        if state.exited:
            raise TerminalExitedError
        # A command replaced the shell by one without detection, or the shell stopped
        # reporting ends: markers from then on.
        lost = port.commands.detection_lost
        last = _last_part(state)
        if lost and port.signed_marks and last is not None and last.isComplete:
            lost = not port.commands.detection_back(last.commandId)
        if (
            state.supportsCommandDetection
            and port.signed_marks is None
            and port.processes is not None
        ):
            await port.processes.tty_status()  # (a remote port learns signed_marks)
        # Marks nobody signed (no integration of ours) may be program output: never
        # a command's boundaries (markers instead, whatever the state says).
        unsigned = port.signed_marks is False
        detected = bool(state.supportsCommandDetection) and not lost and not unsigned
        if not detected and not lost and not unsigned:
            with trio.move_on_after(port.detection_wait):
                async for item in stream:
                    _check_alive(item)
                    if isinstance(item, ActionEnvelope) and isinstance(
                        item.action, TerminalCommandDetectionAvailable
                    ):
                        detected = True
                        break
        if port.ended:
            raise TerminalExitedError
        holder = await holder_of(port, detected=detected)
        detected = detected and not port.commands.detection_lost  # (holder_of may learn it)
        if holder is not None:
            record.holder = holder
            record.apply(Event.REFUSED, note=refusal_note(holder))
            return handle
        if detected and before_prompt(port.state):
            await _prompt_drawn(port, stream)
        token = secrets.token_hex(8)
        shell = None
        if not detected or "\n" in command_line.rstrip("\n") or "\t" in command_line:
            shell = await _shell_name(port)
        fish = shell == "fish"
        paste = False
        if not detected:
            typed = wrap(command_line, token, fish=fish)
        else:
            typed = group(command_line, fish=fish)
            if typed != command_line.rstrip("\n"):
                # Several lines: pasted as one, where the shell parses them as a whole.
                paste = _pastes(shell)
                if paste:
                    typed = command_line.rstrip("\n")
                else:
                    record.group_end = "end" if fish else "}"
        keys = keystrokes(typed, fish=fish, paste=paste)  # (refused before the claim)
        if claim is not None:
            claimed = True
            await port.set_claim(claim)
        processes = port.processes
        if processes is not None:
            record.job_mark = await processes.job_mark()
        # A fresh follower, from now: what the old one queued meanwhile (the end of a
        # holder waited for, its prompt) is not this command's, nor its start.
        with trio.CancelScope(shield=True):  # (closed once: cancelled, the finally closes)
            await close_follower(stream)
        stream = port.follow()
        first = await stream.__anext__()
        assert isinstance(first, Snapshot)
        assert isinstance(first.state, TerminalState)
        known = frozenset(p.commandId for p in first.state.content if isinstance(p, CommandPart))
        record.started = time.monotonic()
        prompt = screen_line(port.state.tail(PROMPT_LOOKBACK))
        if port.ended:  # (an exit seen by now is not in the stream any more)
            raise TerminalExitedError
        # Typing and registering, shielded from cancellation (bounded: typing is quick):
        # keys that may have reached the shell belong to a registered command, whose
        # collector attributes its end to it and which the caller's cancellation
        # interrupts (see the module doc).
        with trio.CancelScope(shield=True), trio.move_on_after(TYPE_TIMEOUT):
            await port.send_input(keys)
        collector = Collector(
            record,
            port,
            stream,
            markers=None if detected else Markers(token),
            known=known,
            give_back=found_claim if claim is not None else None,
            timeout=options.timeout,
            pre_start=(
                PreStart(prompt, typed.count("\n") + 1, typed.split("\n", 1)[0])
                if detected
                else None
            ),
        )
        port.spawn_task(collector.run)
        spawned = True
        port.commands.add(handle)
    finally:
        if not spawned:
            with trio.CancelScope(shield=True):
                await close_follower(stream)
                if claimed:
                    with trio.move_on_after(CLAIM_TIMEOUT):
                        await port.set_claim(found_claim)
    return handle


def _check_alive(item: Snapshot | ActionEnvelope) -> None:
    """Raise :class:`TerminalExitedError` when ``item``, taken from the follower
    before the typing (the collector never sees it), says the terminal exited.

    Raises:
        TerminalExitedError: it did.
    """
    if isinstance(item, ActionEnvelope):
        if isinstance(item.action, TerminalExited):
            raise TerminalExitedError
    elif isinstance(item.state, TerminalState) and item.state.exited:
        raise TerminalExitedError


def _last_part(state: TerminalState) -> CommandPart | None:
    for part in reversed(state.content):
        if isinstance(part, CommandPart):
            return part
    return None


#: While waiting for the shell's prompt, how often its processes are looked at.
PROMPT_LOOK: Final = 0.25


async def _prompt_drawn(port: TerminalPort, stream: Stream) -> None:
    """The previous command just ended: let the shell draw its prompt (something is
    printed after the command's end), or be seen reading at it in its line editor's
    way (a prompt that goes nowhere: ``exec 2>/dev/null`` in bash); at most
    :data:`INTERRUPT_GRACE`.

    Raises:
        TerminalExitedError: the terminal exited meanwhile.
    """
    with trio.move_on_after(INTERRUPT_GRACE):
        while before_prompt(port.state) and not port.ended:
            with trio.move_on_after(PROMPT_LOOK):
                async for item in stream:
                    _check_alive(item)
                    if not before_prompt(port.state):
                        return
            processes = port.processes
            if processes is not None and editor_reads(await processes.tty_status()):
                return
