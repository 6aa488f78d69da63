"""Giving memory back to the system after large frees (issue 25 item 4, issue 23 item 4).

Why: CPython frees objects, but the C allocator keeps what it once used. glibc
serves allocations under its *mmap threshold* from its heap and returns heap
pages only from the top; worse, the threshold is dynamic: once a large block
(an 8 MiB frame, a 1 MB catalogue) is freed, it rises to that size (up to 32
MiB), so every later block of that size comes from the heap too and stays
there. Measured here: 30 connections holding unfinished 8 MiB frames left the
server at 302 MB after they closed; 16 terminals of 20 MB output left it 200 MB
above its start after they were disposed. Two remedies, both glibc-only
(elsewhere they do nothing):

* :func:`configure_allocator` fixes the mmap threshold at
  :data:`MMAP_THRESHOLD`: every block from that size on is its own mapping,
  returned to the system when freed (a process-wide setting: the server calls
  it at start-up; a library user may).
* :class:`Trimmer` calls ``malloc_trim(0)`` (which returns the free pages in
  the middle of the heap too) after a large free — a terminal disposed, a
  connection closed — at most once per :data:`TRIM_INTERVAL` and
  :data:`TRIM_DELAY` after the first request, so a burst of frees shares one
  trim. The call runs in a worker thread (ctypes releases the GIL), but it
  holds the heap's lock while it works (~0.6 ms per MB returned here), so an
  allocation on the event loop may wait that long: worth it after a large free,
  not after every small one. A full pass of the cyclic garbage collector comes
  first, on the loop (0.6-4.4 ms after ``serve``'s freeze): what was freed may sit
  in reference cycles, which an idle server never collects on its own.

Ownership and cancellation: a :class:`Trimmer` runs its one pending trim as a
task in the nursery it is given; cancelling the nursery cancels the wait (a
trim already in its thread finishes on its own, touching nothing of ours).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import logging
from collections.abc import Callable
from typing import Final

import trio

__all__ = [
    "MMAP_THRESHOLD",
    "TRIM_DELAY",
    "TRIM_INTERVAL",
    "Trimmer",
    "configure_allocator",
    "malloc_trim",
]

log = logging.getLogger("ahp.engine")

#: Blocks from this size on get a mapping of their own (returned when freed), kept
#: fixed instead of rising after the first large free. Not glibc's initial 128 KiB: the
#: read path's blocks (a pump's take of up to 256 KiB, its decoded text, the joins and
#: frames made of it) were then each an ``mmap``, page faults and a ``munmap`` (a TLB
#: flush on every core): 16 terminals at once through ``serve`` ran at 0.73x the
#: aggregate and 1.34x the server CPU of 1 MiB (3 interleaved pairs). Blocks under it
#: come from the heap, whose free pages the trims return.
MMAP_THRESHOLD: Final = 1024 * 1024
#: ``mallopt`` parameter numbers (glibc's malloc.h).
_M_TRIM_THRESHOLD: Final = -1
_M_MMAP_THRESHOLD: Final = -3
#: Free memory at the top of the heap beyond which glibc returns it at once (fixed too).
TRIM_THRESHOLD: Final = 1024 * 1024
#: Seconds between two trims, at least.
TRIM_INTERVAL: Final = 1.0
#: Seconds a trim waits after the first request (the frees of a burst share it).
TRIM_DELAY: Final = 0.2


def _libc() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name or None)
    except OSError:
        return None
    if not hasattr(libc, "malloc_trim") or not hasattr(libc, "mallopt"):
        return None  # not glibc (musl, macOS): nothing to do
    return libc


_LIBC: Final = _libc()


def configure_allocator() -> bool:
    """Fix glibc's mmap and trim thresholds (see the module docstring); False when
    the C library is not glibc. Process-wide; call it once, early."""
    if _LIBC is None:
        return False
    ok = bool(_LIBC.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD))
    return bool(_LIBC.mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD)) and ok


def malloc_trim() -> bool:
    """Return the allocator's free pages to the system now (blocking; glibc only).
    True if memory was returned."""
    if _LIBC is None:
        return False
    return bool(_LIBC.malloc_trim(0))


class Trimmer:
    """Coalesced, rate-limited :func:`malloc_trim` calls, off the event loop.

    Each trim is preceded by a full pass of the cyclic garbage collector on the loop,
    so that what a closed connection or a disposed terminal left in
    reference cycles is freed before the trim, not at the next busy spell.

    Args:
        nursery: where the pending trim's task runs.
        trim: the blocking call (tests may count calls); default :func:`malloc_trim`.
    """

    def __init__(self, nursery: trio.Nursery, trim: Callable[[], bool] | None = None) -> None:
        self._nursery = nursery
        self._trim = trim if trim is not None else malloc_trim
        self._pending = False
        self._last = -float("inf")
        #: Trims run (figures for tests).
        self.trims = 0
        self.enabled = _LIBC is not None or trim is not None

    def request(self) -> None:
        """Something large was freed: trim soon (at most one trim is pending)."""
        if self._pending or not self.enabled:
            return
        self._pending = True
        try:
            self._nursery.start_soon(self._run)
        except RuntimeError:  # the nursery is closing: no more trims
            self._pending = False

    async def _run(self) -> None:
        try:
            now = trio.current_time()
            await trio.sleep_until(max(now + TRIM_DELAY, self._last + TRIM_INTERVAL))
        finally:
            self._pending = False
        self.trims += 1
        # What was freed may be cyclic garbage (an exception's traceback holding a
        # frame that held a snapshot, a connection's tasks): the collector's own passes
        # follow allocations, and an idle server allocates nothing, so it stayed until
        # the next busy spell (issue 25's snapshot readers kept +17 to +26 MiB 9 s
        # after, in 3 of 6 runs; with this pass +1 to +9). On the loop (a pass holds
        # the GIL anyway); ahp.engine.collector's freeze keeps it short.
        gc.collect()
        self._last = trio.current_time()  # (the interval is between trims)
        await trio.to_thread.run_sync(self._trim, abandon_on_cancel=True)
