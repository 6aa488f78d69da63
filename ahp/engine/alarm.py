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
waits); ringing clears the others' and wakes every waiter at once. The host rings it
when its last terminal goes, so a watcher that waits sees there is nothing left and
ends, and arms each terminal created while someone waits.

Ownership and cancellation: owned by the host, used from its tasks (one Trio thread); a
wait is a plain :class:`trio.Event` wait, cancelled with its task. Holds no terminal:
the live ones are looked up from ``terminals()`` at each wait and ring.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import TYPE_CHECKING

import trio

if TYPE_CHECKING:
    from ahp.engine.terminal import Terminal

__all__ = ["OutputAlarm"]


class OutputAlarm:
    """Wakes the host's watchers at the first output after they went to sleep."""

    def __init__(self, terminals: Callable[[], Collection[Terminal]]) -> None:
        self._terminals = terminals
        self._event: trio.Event | None = None
        #: Times the alarm rang (figures for tests).
        self.rings = 0

    @property
    def armed(self) -> bool:
        """Someone waits for output."""
        return self._event is not None

    async def wait(self) -> None:
        """Return once some terminal reads output, or the host's last terminal goes
        (:meth:`ring`). Every waiter of the moment wakes at the same ring."""
        event = self._event
        if event is None:
            event = self._event = trio.Event()
            for terminal in self._terminals():
                terminal.output_waker = self.ring
        await event.wait()

    def arm(self, terminal: Terminal) -> None:
        """``terminal`` is new: it rings the alarm too while someone waits."""
        if self._event is not None:
            terminal.output_waker = self.ring

    def ring(self) -> None:
        """Wake every waiter (a terminal read output, or the terminals are gone)."""
        event, self._event = self._event, None
        if event is None:
            return
        self.rings += 1
        for terminal in self._terminals():
            terminal.output_waker = None
        event.set()
