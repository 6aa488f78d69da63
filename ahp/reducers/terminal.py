"""The terminal channel reducer: ``(state, action) -> state``, pure.

Why pure: the server, the Trio client's mirror and the conformance fixtures all
fold the same actions through this one function, so two parties that saw the
same envelopes hold equal states. Nothing here reads a clock or touches I/O;
timestamps arrive inside the actions (set by the server).

Appending output is O(len(data)), whatever the number of parts: part texts are
:class:`Rope` views, so the tail part grows without copying even while older
states are retained, and the content is a :class:`~ahp.protocol.parts.Parts`
sequence, whose last part is replaced in O(1). A ``commandFinished`` looks for
its command from the end (it is almost always the last part).
"""

from __future__ import annotations

from attrs import evolve

from ahp.protocol.actions import (
    StateAction,
    TerminalClaimed,
    TerminalCleared,
    TerminalCommandDetectionAvailable,
    TerminalCommandExecuted,
    TerminalCommandFinished,
    TerminalCwdChanged,
    TerminalData,
    TerminalExited,
    TerminalResized,
    TerminalTitleChanged,
)
from ahp.protocol.parts import Parts
from ahp.protocol.rope import Rope
from ahp.protocol.state import CommandPart, TerminalState, UnclassifiedPart

__all__ = ["append_data", "reduce_terminal"]


def append_data(state: TerminalState, data: str) -> TerminalState:
    """Append output to the tail: a running command's output, else unclassified text."""
    if not data:
        return state
    content = state.content
    tail = content.last
    if tail is not None:
        if isinstance(tail, CommandPart):
            if not tail.isComplete:
                grown = CommandPart(
                    commandId=tail.commandId,
                    commandLine=tail.commandLine,
                    output=tail.output.append(data),
                    timestamp=tail.timestamp,
                    isComplete=False,
                    exitCode=tail.exitCode,
                    durationMs=tail.durationMs,
                )
                return evolve(state, content=content.replace_last(grown))
        else:
            text = UnclassifiedPart(value=tail.value.append(data))
            return evolve(state, content=content.replace_last(text))
    return evolve(state, content=content.append(UnclassifiedPart(value=Rope(data))))


def _finish(state: TerminalState, action: TerminalCommandFinished) -> TerminalState:
    content = state.content
    index = len(content)
    for part in reversed(content):  # the command is almost always the last part
        index -= 1
        if isinstance(part, CommandPart) and part.commandId == action.commandId:
            done = evolve(
                part, isComplete=True, exitCode=action.exitCode, durationMs=action.durationMs
            )
            return evolve(state, content=content.replace(index, done))
    return state


def reduce_terminal(state: TerminalState, action: StateAction) -> TerminalState:
    """Apply one action to a terminal state; unknown or foreign actions are no-ops."""
    match action:
        case TerminalData(data=data):
            return append_data(state, data)
        case TerminalResized(cols=cols, rows=rows):
            return evolve(state, cols=cols, rows=rows)
        case TerminalClaimed(claim=claim):
            return evolve(state, claim=claim)
        case TerminalTitleChanged(title=title):
            return evolve(state, title=title)
        case TerminalCwdChanged(cwd=cwd):
            return evolve(state, cwd=cwd)
        case TerminalExited(exitCode=code):
            # ``exited`` records the exit even without a code (1.x lifecycle).
            return evolve(state, exitCode=code, exited=True)
        case TerminalCleared():
            return evolve(state, content=Parts())
        case TerminalCommandDetectionAvailable():
            return evolve(state, supportsCommandDetection=True)
        case TerminalCommandExecuted(commandId=cid, commandLine=line, timestamp=ts):
            part = CommandPart(
                commandId=cid, commandLine=line, output=Rope(), timestamp=ts, isComplete=False
            )
            return evolve(state, content=state.content.append(part), supportsCommandDetection=True)
        case TerminalCommandFinished():
            return _finish(state, action)
        case _:
            return state
