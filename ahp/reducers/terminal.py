"""The terminal channel reducer: ``(state, action) -> state``, pure.

Why pure: the server, the Trio client's mirror and the conformance fixtures all
fold the same actions through this one function, so two parties that saw the
same envelopes hold equal states. Nothing here reads a clock or touches I/O;
timestamps arrive inside the actions (set by the server).

Appending output is O(len(data)): part texts are :class:`Rope` views, so the
tail part grows without copying even while older states are retained.
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
from ahp.protocol.rope import Rope
from ahp.protocol.state import CommandPart, ContentPart, TerminalState, UnclassifiedPart

__all__ = ["append_data", "reduce_terminal"]


def append_data(state: TerminalState, data: str) -> TerminalState:
    """Append output to the tail: a running command's output, else unclassified text."""
    if not data:
        return state
    content = state.content
    if content:
        tail = content[-1]
        if isinstance(tail, CommandPart):
            if not tail.isComplete:
                new_tail: CommandPart | UnclassifiedPart = evolve(tail, output=tail.output + data)
                return evolve(state, content=(*content[:-1], new_tail))
        else:
            return evolve(state, content=(*content[:-1], UnclassifiedPart(value=tail.value + data)))
    return evolve(state, content=(*content, UnclassifiedPart(value=Rope(data))))


def _finish(state: TerminalState, action: TerminalCommandFinished) -> TerminalState:
    changed = False
    parts: list[ContentPart] = []
    for part in state.content:
        if isinstance(part, CommandPart) and part.commandId == action.commandId:
            done = evolve(
                part, isComplete=True, exitCode=action.exitCode, durationMs=action.durationMs
            )
            parts.append(done)
            changed = True
        else:
            parts.append(part)
    return evolve(state, content=tuple(parts)) if changed else state


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
            return evolve(state, content=())
        case TerminalCommandDetectionAvailable():
            return evolve(state, supportsCommandDetection=True)
        case TerminalCommandExecuted(commandId=cid, commandLine=line, timestamp=ts):
            part = CommandPart(
                commandId=cid, commandLine=line, output=Rope(), timestamp=ts, isComplete=False
            )
            return evolve(state, content=(*state.content, part), supportsCommandDetection=True)
        case TerminalCommandFinished():
            return _finish(state, action)
        case _:
            return state
