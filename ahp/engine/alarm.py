"""The host's watchers sleep while its terminals print nothing: :class:`OutputAlarm`.

Why: the flood watch (:mod:`ahp.engine.priority`) and the scrollback packer
(:mod:`ahp.engine.packing`) look at the host's terminals on a timer, four times a
second each while any terminal exists. On an idle sidecar those looks were all it did:
3.7 wake-ups and 1.7 ms of CPU a second, each ~170 us cold (session 12), on a host a
fleet keeps around for hours. What they watch changes only with output (a rate; the
retained scrollback), so once a look finds nothing to do, the watcher waits on this
alarm instead of its timer, and the first batch any terminal reads after that rings it.

How: :meth:`OutputAlarm.wait` hands every live terminal the alarm's ring
(:attr:`~ahp.engine.terminal.Terminal.output_waker`); a terminal's read tasks call and
drop it with the first batch they read (one attribute test per batch while nobody
waits); ringing clears the others' and sets each sleeper's deadline to the delay it
asked for (a tick, a packing period) from now, so the watchers wake off the output's
path, as their timers woke them before. The host rings it when its last terminal goes
(the sleepers wake at once, see there is nothing left, and end), and arms each terminal
created while someone sleeps.

Ownership and cancellation: owned by the host, used from its tasks (one Trio thread); a
wait is a cancel scope around ``sleep_forever`` whose deadline the ring sets, cancelled
with its task. Holds no terminal: the live ones are looked up from ``terminals()`` at
each wait and ring (and no loop over them runs in a waiting frame).
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import TYPE_CHECKING

import trio

if TYPE_CHECKING:
    from ahp.engine.terminal import Terminal

__all__ = ["OutputAlarm"]


class OutputAlarm:
    """Wakes the host's watchers a while after the first output since they went to sleep."""

    def __init__(self, terminals: Callable[[], Collection[Terminal]]) -> None:
        self._terminals = terminals
        #: Each sleeping watcher's scope and the delay it asked for.
        self._sleepers: dict[trio.CancelScope, float] = {}
        #: Times the alarm rang (figures for tests).
        self.rings = 0

    @property
    def armed(self) -> bool:
        """Someone sleeps until output."""
        return bool(self._sleepers)

    async def wait(self, delay: float) -> None:
        """Return ``delay`` seconds after some terminal reads output, or at once when the
        host's last terminal goes (:meth:`ring` with ``gone``).

        The ring only sets the sleepers' deadlines: nobody wakes on the output's path
        (the first keystroke after a pause would otherwise wait for both watchers'
        steps before its echo is sent)."""
        if not self._sleepers:
            self._arm_all()  # (not a loop here: its variable would hold a terminal)
        with trio.CancelScope() as scope:
            self._sleepers[scope] = delay
            try:
                await trio.sleep_forever()
            finally:
                self._sleepers.pop(scope, None)

    def _arm_all(self) -> None:
        """Every live terminal rings the alarm with its next batch."""
        for terminal in self._terminals():
            terminal.output_waker = self.ring

    def arm(self, terminal: Terminal) -> None:
        """``terminal`` is new: it rings the alarm too while someone sleeps."""
        if self._sleepers:
            terminal.output_waker = self.ring

    def ring(self, *, gone: bool = False) -> None:
        """Output came (``gone``: the terminals are gone): every sleeper wakes after its
        delay (at once when gone); O(sleepers + terminals)."""
        sleepers, self._sleepers = self._sleepers, {}
        if not sleepers:
            return
        self.rings += 1
        for terminal in self._terminals():
            terminal.output_waker = None
        now = trio.current_time()
        for scope, delay in sleepers.items():
            scope.deadline = min(scope.deadline, now if gone else now + delay)
