"""Terminals whose output floods the host: read by threads, run below it beside typists.

Why: on a machine with few cores a terminal printing in a loop competes with the
server for the CPU, and the server is the one every other client waits on. The
kernel's autogroup scheduling gives each session (every pty child calls ``setsid``)
an equal share whatever its processes' niceness, so four shells printing lines on 2
cores left the server's group 2/5 of the machine, and a keystroke in another terminal
waited 100-270 ms for its echo (issue 25's ``fragmented scrollback``, ``big session
claim``, ``child title loop``). A static ``--child-nice`` mends that but slows every
program all the time, and a process's niceness cannot be lowered again without
privilege. An autogroup's nice value can be (0-19), so the host watches each
terminal's output and input and, while a terminal floods and another is
interactive (someone typed in it in the last 5 s), gives the flooding terminal's
autogroup :data:`FLOOD_NICE` (several floods deeper, so that together they weigh
what one does: :func:`flood_level`): the server then gets the CPU it needs to keep
up and answer the keystroke, the flooding program gets the rest (on an idle machine, all it
had: niceness only weighs under contention), and once its output is quiet again, or
nobody else types, its share comes back. A flood with nobody typing beside it is
not lowered: there the server and the program are one pipeline, and starving the
program slowed it (a lone ``cat`` through the engine at 0.78x).

A child run below the host prints in small batches whenever the CPU is contended
(it is descheduled between them), and small batches were read by the terminal's
pty-read task on the loop, not by a pump's thread (:mod:`ahp.pty.pump` starts on a
full batch, and ends after 50 ms without output): thirty such terminals cost the loop
ten times the CPU and another client's echo up to 155 ms. So a flooding terminal is
read through a pump whatever its batches, and its pump waits
:data:`~ahp.pty.pump.PUMP_QUIET_FLOODING` (0.5 s) of silence before it ends.

What counts as flooding (:class:`FloodWatch`, pure, no I/O): more than
:data:`FLOOD_BYTES` of output per :data:`FLOOD_TICK` for :data:`FLOOD_ON` ticks in a
row; it ends after :data:`FLOOD_OFF` ticks in a row under :data:`QUIET_BYTES` (an
eighth: a flooding program at the lower priority still prints much, and must not
flip back and forth). A prompt, a keystroke's echo, a test run's report are far below
it; a ``cat`` of a large file, a verbose build or a title loop are above.

Where the priority does nothing: a kernel without autogroups, and children scheduled
by a cgroup (containers, systemd slices) — there the server and its children share
one group, niceness counts per process, and ``serve --child-nice`` is the tool. Pipe
children share the server's own group and are never touched.

Cost: one task per host while it has terminals, a wake-up per :data:`FLOOD_TICK`
reading one counter per terminal while any prints or was typed in during the last
:data:`INTERACTIVE_TICKS` ticks (then it sleeps until output: :mod:`ahp.engine.alarm`);
a change is one ``/proc`` write (the kernel takes one per 100 ms from an unprivileged
process; a refused one is retried next tick).

Ownership and cancellation: :meth:`FloodKeeper.run` runs in the host's nursery
(:meth:`ahp.engine.Host.create_terminal` starts it when none runs) and ends when
the host has no terminal left; cancelled with the host. It holds no terminal across
its sleep (a disposed one is freed at once; its group ends with its processes).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Hashable, Mapping
from typing import TYPE_CHECKING, Final, Generic, TypeVar

import attrs
import trio

if TYPE_CHECKING:
    from ahp.engine.alarm import OutputAlarm
    from ahp.engine.terminal import Terminal

__all__ = [
    "FLOOD_BYTES",
    "FLOOD_NICE",
    "FLOOD_OFF",
    "FLOOD_ON",
    "FLOOD_TICK",
    "INTERACTIVE_TICKS",
    "NICE_WEIGHTS",
    "QUIET_BYTES",
    "FloodWatch",
    "flood_level",
    "FloodKeeper",
]

#: Nice value of a flooding terminal's autogroup while another terminal is
#: interactive (``serve --flood-nice``; 0: never); several floods go deeper, so that
#: together they weigh what one does (:func:`flood_level`). At 10 a group weighs 110
#: against the server's 1024.
FLOOD_NICE: Final = 10
#: Seconds between two looks at the terminals' counters.
FLOOD_TICK: Final = 0.25
#: Output bytes per tick above which a tick counts as flooding (512 KiB/s).
FLOOD_BYTES: Final = 128 * 1024
#: Output bytes per tick under which a tick counts as quiet (64 KiB/s).
QUIET_BYTES: Final = FLOOD_BYTES // 8
#: Flooding ticks in a row before the terminal counts as flooding (0.5 s).
FLOOD_ON: Final = 2
#: Quiet ticks in a row before it no longer does (1 s).
FLOOD_OFF: Final = 4
#: Ticks after its last input during which a terminal that does not flood counts as
#: interactive (5 s): someone waits for its echo.
INTERACTIVE_TICKS: Final = 20

#: The kernel's weight for each nice value 0-19 (``sched_prio_to_weight``): a group
#: at nice 0 weighs 1024.
NICE_WEIGHTS: Final = (
    1024, 820, 655, 526, 423, 335, 272, 215, 172, 137,
    110, 87, 70, 56, 45, 36, 29, 23, 18, 15,
)  # fmt: skip

K = TypeVar("K", bound=Hashable)


def flood_level(nice: int, floods: int) -> int:
    """The nice value for each of ``floods`` lowered floods: ``nice`` for one, and
    deeper (at most 19) for more, so that together they weigh no more than one at
    ``nice`` (``nice`` 0: 0, lowering is off). Thirty floods at 10 weighed 3300
    against the server's 1024 and still took three quarters of the CPU from it
    (issue 25's ``silent subscriber``); at 19, 450."""
    if nice <= 0 or floods <= 0:
        return max(nice, 0)
    budget = NICE_WEIGHTS[min(nice, 19)]
    for level in range(min(nice, 19), 19):
        if floods * NICE_WEIGHTS[level] <= budget:
            return level
    return 19


@attrs.define
class _Track:
    output: int  # the output counter at the last tick
    inputs: int  # the input counter at the last tick
    busy: int = 0  # flooding ticks in a row
    quiet: int = 0  # quiet ticks in a row
    flooding: bool = False
    idle: int = INTERACTIVE_TICKS + 1  # ticks since its last input (capped)
    applied: tuple[bool, bool] = (False, False)  # (flooding, lowered), as confirmed


class FloodWatch(Generic[K]):
    """Which terminals flood, and which of those to lower, from counters sampled once
    per tick.

    Pure: :meth:`tick` takes every live key's output and input counters (counters
    only grow) and returns ``(key, flooding, lowered)`` for each key whose applied
    state differs from the wanted one; the caller applies each and confirms with
    :meth:`settled` (an unconfirmed change is asked for again at the next tick).
    A flooding key is lowered only while another key is interactive (had input in
    the last ``interactive`` ticks and does not flood): a flood nobody else waits
    beside keeps its share (lowered, a lone ``cat`` ran at 0.78x). Keys absent from a
    tick are forgotten.
    """

    def __init__(
        self,
        *,
        flood_bytes: int = FLOOD_BYTES,
        quiet_bytes: int = QUIET_BYTES,
        on: int = FLOOD_ON,
        off: int = FLOOD_OFF,
        interactive: int = INTERACTIVE_TICKS,
    ) -> None:
        if not 0 <= quiet_bytes <= flood_bytes or on < 1 or off < 1 or interactive < 0:
            raise ValueError(
                "need 0 <= quiet_bytes <= flood_bytes, on and off >= 1, interactive >= 0"
            )
        self._flood, self._quiet, self._on, self._off = flood_bytes, quiet_bytes, on, off
        self._interactive = interactive
        self._tracks: dict[K, _Track] = {}
        self._someone_waits = False
        #: The last tick found nothing to watch: no key new, printing, flooding or
        #: recently typed in, and no change to apply, so nothing to lower either (the
        #: keeper may sleep until output).
        self.silent = False

    def tick(self, counters: Mapping[K, tuple[int, int]]) -> list[tuple[K, bool, bool]]:
        """One tick: ``counters`` maps every live key to ``(output bytes, inputs)`` so
        far (a new key starts counting from here: it neither floods nor is interactive
        on its first tick)."""
        tracks = self._tracks
        for gone in tracks.keys() - counters.keys():
            del tracks[gone]
        silent = True
        for key, (output, inputs) in counters.items():
            track = tracks.get(key)
            if track is None:
                tracks[key] = _Track(output=output, inputs=inputs)
                silent = False
                continue
            delta, track.output = output - track.output, output
            silent = silent and not delta
            track.busy = track.busy + 1 if delta > self._flood else 0
            track.quiet = track.quiet + 1 if delta < self._quiet else 0
            if track.busy >= self._on:
                track.flooding = True
            elif track.quiet >= self._off:
                track.flooding = False
            typed, track.inputs = inputs != track.inputs, inputs
            track.idle = 0 if typed else min(track.idle + 1, self._interactive + 1)
            silent = silent and not track.flooding and track.idle > self._interactive
        changes = self._changes()
        self.silent = silent and not changes
        return changes

    def typed(self, key: K) -> list[tuple[K, bool, bool]]:
        """``key`` had input just now (between ticks): the changes that makes (floods
        lowered at once rather than at the next tick). Rates are left to :meth:`tick`."""
        track = self._tracks.get(key)
        if track is None:
            return []
        track.idle = 0
        return self._changes()

    @property
    def floods_unlowered(self) -> bool:
        """Some key floods and is not lowered (as confirmed): an input elsewhere would
        lower it. O(keys)."""
        return any(t.flooding and not t.applied[1] for t in self._tracks.values())

    def _changes(self) -> list[tuple[K, bool, bool]]:
        tracks = self._tracks
        someone_waits = any(not t.flooding and t.idle <= self._interactive for t in tracks.values())
        self._someone_waits = someone_waits
        changes: list[tuple[K, bool, bool]] = []
        for key, track in tracks.items():
            wanted = (track.flooding, track.flooding and someone_waits)
            if wanted != track.applied:
                changes.append((key, *wanted))
        return changes

    def settled(self, key: K, flooding: bool, lowered: bool) -> None:
        """The caller applied ``(flooding, lowered)`` to ``key``."""
        track = self._tracks.get(key)
        if track is not None:
            track.applied = (flooding, lowered)

    def to_lower(self) -> list[K]:
        """The keys that should be lowered now (as of the last tick or input)."""
        if not self._someone_waits:
            return []
        return [key for key, track in self._tracks.items() if track.flooding]

    def lowered(self) -> list[K]:
        """The keys lowered now (as confirmed)."""
        return [key for key, track in self._tracks.items() if track.applied[1]]


class FloodKeeper:
    """The host's flood watch at work: :meth:`run` applies :class:`FloodWatch`'s
    changes to the terminals every :data:`FLOOD_TICK`, and :meth:`typed` (the input
    path, synchronous) wakes it at once when an input should lower a flood.

    Holds no terminal: the watch is keyed by each terminal's nonce, and the live
    terminals are looked up from ``terminals()`` on every pass.
    """

    def __init__(
        self,
        terminals: Callable[[], Collection[Terminal]],
        nice: Callable[[], int],
        alarm: OutputAlarm | None = None,
    ) -> None:
        self._terminals = terminals
        self._nice = nice
        #: Rung by the first output after a silent tick (None: tick all the time).
        self._alarm = alarm
        self._watch: FloodWatch[str] = FloodWatch()
        self._typed: set[str] = set()
        self._poked = trio.Event()
        self._level = 0  # the nice value of the lowered floods
        #: An input now should lower a flood (kept by :meth:`run`: the input path reads
        #: one attribute per input).
        self.waiting = False

    def typed(self, terminal: Terminal) -> None:
        """``terminal`` took an input; wakes :meth:`run` if that lowers a flood."""
        if self.waiting and not terminal.flooding:
            self._typed.add(terminal.nonce)
            self._poked.set()

    def _apply(
        self, changes: list[tuple[str, bool, bool]], live: dict[str, Terminal], level: int
    ) -> bool:
        """Apply ``changes`` to the live terminals; whether every one took."""
        settled = True
        for key, flooding, lowered in changes:
            terminal = live.get(key)
            nice = level if lowered else 0
            if terminal is None or terminal.set_flooding(flooding, nice):
                self._watch.settled(key, flooding, lowered)
            else:
                settled = False
        return settled

    async def run(self) -> None:
        """Until ``terminals()`` is empty (cancellable at every wait)."""
        next_tick = trio.current_time()
        while self._terminals():
            live = {t.nonce: t for t in self._terminals() if t.spec.use_pty and not t.closing}
            ticked = trio.current_time() >= next_tick
            if ticked:  # (rates are per tick: no catching up)
                next_tick = trio.current_time() + FLOOD_TICK
                counters = {key: (t.bytes_read, t.inputs) for key, t in live.items()}
                changes = self._watch.tick(counters)
            else:
                changes = []
                for key in self._typed:
                    changes += self._watch.typed(key)
            self._typed.clear()
            # Every lowered flood at the level for their number (flood_level): when
            # the number changes, the others are set again too; the level counts as
            # applied once all took (a refused one is set again at the next pass).
            to_lower = self._watch.to_lower()
            level = flood_level(self._nice(), len(to_lower))
            if level != self._level:
                changes += [(key, True, True) for key in to_lower]
            settled = self._apply(changes, live, level)
            if settled:
                self._level = level
            self.waiting = self._nice() > 0 and self._watch.floods_unlowered
            # No local may hold a terminal across the waits below (a disposed one is
            # freed at once, without the garbage collector): the loop over the changes
            # is in _apply for that.
            del live, changes
            if ticked and self._watch.silent and self._alarm is not None:
                # Nothing printed, floods or was typed in lately: no tick can change
                # anything before a terminal prints again (an idle host sleeps).
                await self._alarm.wait(FLOOD_TICK)  # (a tick after the output began)
                next_tick = trio.current_time()
                continue
            self._poked = trio.Event()
            with trio.move_on_at(max(next_tick, trio.current_time())):
                await self._poked.wait()
