"""The command state machine: events in, transitions out, clocks passed in.

Why sans-I/O (as :class:`ahp.reducers.TerminalCore` is for the reducer, or h11's
state table for HTTP): what a command's status is after any order of events
(output, a wait for input seen, an answer, an interrupt, its end, the shell's
exit, a lost connection) must be decidable and testable without a pty, a
clock or Trio. :class:`CommandMachine` applies :data:`ahp.agent.status.TRANSITIONS`
and nothing else; the collector (:mod:`ahp.agent.collector`) and the handle feed
it events and carry out the I/O.

It also keeps the two clocks the collector needs, as numbers passed in: when
the output was last seen (waiting for input is only looked for after
``input_quiet`` seconds of quiet) and the back-off between looks while quiet
without evidence (:data:`INPUT_POLL` doubling up to :data:`MAX_INPUT_POLL`), and
the *episodes* of waiting for input (each is reported to ``wait`` once).

Pure: no I/O, no clock of its own.
"""

from __future__ import annotations

from typing import Final

import attrs

from ahp.agent.status import FINAL_STATUSES, REQUESTED_ENDS, TRANSITIONS, Event, Status

__all__ = ["INPUT_POLL", "MAX_INPUT_POLL", "CommandMachine", "IllegalEvent", "Transition"]

#: While quiet and not waiting, evidence is looked for again after this long at
#: first, then twice as long each time up to ``MAX_INPUT_POLL`` (a long silent build
#: costs a ``/proc`` scan every two seconds, not four a second).
INPUT_POLL: Final = 0.25
MAX_INPUT_POLL: Final = 2.0

#: Events that ask for an end (see :data:`ahp.agent.status.REQUESTED_ENDS`).
_ASKING: Final = frozenset({Event.INTERRUPT, Event.TIME_OUT, Event.KILL})


class IllegalEvent(ValueError):
    """An event the table has no row for in a live status (a bug in the caller)."""


@attrs.frozen
class Transition:
    """One applied event: the status before and after (equal for many events)."""

    event: Event
    before: Status
    after: Status

    @property
    def ended(self) -> bool:
        """This transition made the command final."""
        return self.after in FINAL_STATUSES and self.before not in FINAL_STATUSES


class CommandMachine:
    """The status of one command and the clocks of its input watch.

    Every method takes the current time (``now``, seconds on any monotonic clock)
    when it needs one. :meth:`handle` returns the :class:`Transition` applied, or
    ``None`` once the command is final (nothing leads out of a final status).
    """

    def __init__(self, *, now: float, input_quiet: float) -> None:
        if not input_quiet > 0:
            raise ValueError("input_quiet must be positive")
        self.input_quiet = input_quiet
        self.status = Status.RUNNING
        #: End-asking events seen (interrupt, time_out, kill).
        self.asked: set[Event] = set()
        #: The command itself runs (not only typed): waiting for input may be looked for.
        self.executing = False
        self.exit_code: int | None = None
        #: Why it is believed to wait for input (the collector's evidence), while it does.
        self.evidence: object | None = None
        #: One sentence for the agent about how it ended (or why it was refused).
        self.note = ""
        #: Waiting-for-input episodes so far, and the last one a ``wait`` returned.
        self.episode = 0
        self.reported = 0
        self.last_output = now
        self._poll = INPUT_POLL
        self._next = now

    # -- reading -------------------------------------------------------------------------------

    @property
    def done(self) -> bool:
        return self.status in FINAL_STATUSES

    @property
    def waiting(self) -> bool:
        return self.status is Status.WAITING_FOR_INPUT

    @property
    def settled(self) -> bool:
        """Over, or waiting for input in an episode no ``wait`` returned yet."""
        return self.settled_since(self.reported)

    def settled_since(self, reported: int) -> bool:
        """Over, or waiting for input in an episode after ``reported`` (the
        :attr:`reported` a waiter found when it began: it returns for an episode that
        another waiter, woken by the same change, acknowledged first)."""
        return self.done or (self.waiting and self.episode > reported)

    def acknowledge(self) -> None:
        """A ``wait`` returned the current state: this episode is reported."""
        if self.waiting:
            self.reported = self.episode

    # -- events --------------------------------------------------------------------------------

    def handle(
        self,
        event: Event,
        now: float,
        *,
        exit_code: int | None = None,
        evidence: object | None = None,
        note: str = "",
    ) -> Transition | None:
        """Apply ``event``; ``exit_code`` goes with ``ended``/``shell_exited``,
        ``evidence`` with ``input_seen``, ``note`` with any end.

        Raises:
            IllegalEvent: the table has no row for ``event`` in the current status.
        """
        before = self.status
        row = TRANSITIONS.get(before)
        if row is None:
            return None  # final: nothing leads out
        after = row.get(event)
        if after is None:
            raise IllegalEvent(f"{event} is not an event of a {before} command")
        if event in _ASKING:
            self.asked.add(event)
        for asking, status in REQUESTED_ENDS.get(event, ()):
            if asking in self.asked:
                after = status
                break
        if event is Event.EXECUTING:
            self.executing = True
            self.last_output = now
        elif event is Event.OUTPUT or event is Event.INPUT_SENT or event in _ASKING:
            self.last_output = now
            self._poll = INPUT_POLL
            self._next = now
        if after is Status.WAITING_FOR_INPUT:
            if before is not Status.WAITING_FOR_INPUT:
                self.episode += 1
            self.evidence = evidence
        else:
            self.evidence = None
        if after in FINAL_STATUSES:
            if exit_code is not None:
                self.exit_code = exit_code
            self.note = note
        self.status = after
        return Transition(event, before, after)

    # -- the input watch's clock ---------------------------------------------------------------

    def next_look(self, *, unstarted: bool = False) -> float | None:
        """When to look for evidence of waiting for input next (a time on the caller's
        clock; in the past: now), or ``None`` while there is nothing to look for (not
        executing yet, waiting already, or over): wait for the next event instead.

        ``unstarted``: look at a line not started yet too, once an end was asked for
        (fallback mode: the shell may have dropped it, start marker and all)."""
        if self.done or self.waiting:
            return None
        if not self.executing and not (unstarted and self.asked):
            return None
        return max(self.last_output + self.input_quiet, self._next)

    def looked(self, now: float, *, steady: bool = False) -> None:
        """A look at ``now`` found no evidence: the next one waits for the back-off
        (``steady``: :data:`INPUT_POLL`, no back-off: the caller times something, such
        as a shell's quiet after a Ctrl-C)."""
        if steady:
            self._next = now + INPUT_POLL
            return
        self._next = now + self._poll
        self._poll = min(self._poll * 2, MAX_INPUT_POLL)
