"""A command's statuses, the events that move it, and the one table of transitions.

Why a table: a command followed for an agent can end in many ways (its own end,
a Ctrl-C it was sent, the shell exiting, the terminal disposed, the client's
connection lost, a bug in the collector) and while it runs it may wait for
input, be answered, wait again. Kept in flags and strings, one of those paths
was forgotten ("lost" was neither a status nor final). Here every status and
every event is named, :data:`TRANSITIONS` says for each live status what each
event leads to, and everything else is derived from it: :data:`FINAL_STATUSES`
(statuses without a row: no way out), :data:`STATUSES` (the enum of the MCP
output schema), ``CommandResult.done`` and the table in ``docs/agent.md``
(:func:`markdown_table`, checked by a test).

Requested ends: an interrupt, a hard timeout or a kill does not end the command
by itself; its *end* does. :data:`REQUESTED_ENDS` says how an end is reported
once one of them was asked for (a kill before a timeout before an interrupt).

Pure: no I/O, no clock.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Final

__all__ = [
    "FINAL_STATUSES",
    "LIVE_STATUSES",
    "REQUESTED_ENDS",
    "STATUSES",
    "TRANSITIONS",
    "Event",
    "Status",
    "markdown_table",
]


class Status(enum.StrEnum):
    """What a command is doing, or how it ended (the value of ``CommandResult.status``)."""

    #: Typed and not over (it may be starting, working, or quiet).
    RUNNING = "running"
    #: Blocked reading the terminal (evidence in ``handle.input_evidence``).
    WAITING_FOR_INPUT = "waiting_for_input"
    #: It ended by itself; ``exit_code`` is its exit code.
    FINISHED = "finished"
    #: The hard ``timeout`` passed: it was interrupted (Ctrl-C) and ended.
    TIMED_OUT = "timed_out"
    #: It ended after ``handle.interrupt()``.
    INTERRUPTED = "interrupted"
    #: It ended after ``handle.kill()``.
    KILLED = "killed"
    #: The shell itself exited (``exit_code`` is the shell's), or the terminal was disposed.
    SHELL_EXITED = "shell_exited"
    #: Nobody follows it any more: the client's connection is gone, or the collector failed.
    LOST = "lost"
    #: Never typed: the terminal was busy with another command (see ``result.holder``).
    REFUSED = "refused"


class Event(enum.StrEnum):
    """What the collector, the handle or the start procedure tells the machine."""

    #: The command itself started (the shell reported it, or the begin marker came).
    EXECUTING = "executing"
    #: The command printed something.
    OUTPUT = "output"
    #: Quiet, and the terminal's processes show a read of the terminal (evidence).
    INPUT_SEEN = "input_seen"
    #: Input was typed for it (``handle.send_input``).
    INPUT_SENT = "input_sent"
    #: ``handle.interrupt()``: Ctrl-C was sent.
    INTERRUPT = "interrupt"
    #: The hard timeout passed: Ctrl-C was sent.
    TIME_OUT = "time_out"
    #: ``handle.kill()``: its process groups were killed.
    KILL = "kill"
    #: Its end: the shell's ``commandFinished`` or the end marker (an exit code).
    ENDED = "ended"
    #: The terminal's process (the shell) exited (its exit code).
    SHELL_EXITED = "shell_exited"
    #: The terminal was disposed while the command ran.
    DISPOSED = "disposed"
    #: The collector stopped following: the connection is gone or the client closed.
    LOST = "lost"
    #: The collector failed (a bug; logged).
    FAILED = "failed"
    #: The terminal was busy: the command was not typed.
    REFUSED = "refused"


_RUNNING: Final = Status.RUNNING
_WAITING: Final = Status.WAITING_FOR_INPUT

#: The ends, the same from every live status.
_ENDS: Final[Mapping[Event, Status]] = {
    Event.ENDED: Status.FINISHED,
    Event.SHELL_EXITED: Status.SHELL_EXITED,
    Event.DISPOSED: Status.SHELL_EXITED,
    Event.LOST: Status.LOST,
    Event.FAILED: Status.LOST,
}

#: For each live status, what each event leads to. A status without a row is final:
#: no event leads out of it.
TRANSITIONS: Final[Mapping[Status, Mapping[Event, Status]]] = {
    _RUNNING: {
        Event.EXECUTING: _RUNNING,
        Event.OUTPUT: _RUNNING,
        Event.INPUT_SEEN: _WAITING,
        Event.INPUT_SENT: _RUNNING,
        Event.INTERRUPT: _RUNNING,
        Event.TIME_OUT: _RUNNING,
        Event.KILL: _RUNNING,
        **_ENDS,
        Event.REFUSED: Status.REFUSED,
    },
    _WAITING: {
        Event.EXECUTING: _WAITING,
        # Output after the evidence: it was not waiting after all (or no longer).
        Event.OUTPUT: _RUNNING,
        Event.INPUT_SEEN: _WAITING,
        Event.INPUT_SENT: _RUNNING,
        # Acting on it: the old evidence is stale until seen anew.
        Event.INTERRUPT: _RUNNING,
        Event.TIME_OUT: _RUNNING,
        Event.KILL: _RUNNING,
        **_ENDS,
    },
}

#: How an end is reported once an end was asked for: per ending event, the asking
#: events in order of precedence and the status each gives.
REQUESTED_ENDS: Final[Mapping[Event, tuple[tuple[Event, Status], ...]]] = {
    Event.ENDED: (
        (Event.KILL, Status.KILLED),
        (Event.TIME_OUT, Status.TIMED_OUT),
        (Event.INTERRUPT, Status.INTERRUPTED),
    ),
    Event.SHELL_EXITED: ((Event.KILL, Status.KILLED),),
}

#: Statuses a command can still leave.
LIVE_STATUSES: Final = frozenset(TRANSITIONS)


def _reachable() -> tuple[Status, ...]:
    found: dict[Status, None] = {_RUNNING: None}
    for row in TRANSITIONS.values():
        found.update(dict.fromkeys(row.values()))
    for asked in REQUESTED_ENDS.values():
        found.update(dict.fromkeys(status for _, status in asked))
    return tuple(status for status in Status if status in found)


#: Every status a command can have, in the enum's order (the MCP schema's enum).
STATUSES: Final[tuple[str, ...]] = tuple(str(s) for s in _reachable())
#: Statuses after which the command is over (its handle is ``done``): those no
#: event leads out of.
FINAL_STATUSES: Final[frozenset[str]] = frozenset(
    str(s) for s in _reachable() if s not in TRANSITIONS
)


def markdown_table() -> str:
    """The transitions as a Markdown table (``docs/agent.md`` carries it verbatim)."""
    events = list(Event)
    live = list(TRANSITIONS)
    lines = [
        "| event | " + " | ".join(f"from `{s}`" for s in live) + " |",
        "|---|" + "---|" * len(live),
    ]
    for event in events:
        cells = []
        for status in live:
            target = TRANSITIONS[status].get(event)
            if target is None:
                cells.append("—")
                continue
            cell = f"`{target}`"
            asked = REQUESTED_ENDS.get(event)
            if asked:
                cell += " (" + ", ".join(f"`{s}` after `{e}`" for e, s in asked) + ")"
            cells.append(cell)
        lines.append(f"| `{event}` | " + " | ".join(cells) + " |")
    final = ", ".join(f"`{s}`" for s in Status if str(s) in FINAL_STATUSES)
    lines.append("")
    lines.append(f"Final statuses (no event leads out of them): {final}.")
    return "\n".join(lines) + "\n"
