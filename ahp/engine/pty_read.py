"""A terminal's pty-read stage: the master's bytes, in batches, into the parse channel.

Why a module of its own: reading is the stage where the kernel's work meets the
loop's, and it holds the rules of that meeting, apart from the rest of
:mod:`ahp.engine.terminal` (which runs :meth:`PtyRead.read_task` in the terminal's
nursery):

* each round reads the master until EAGAIN or :data:`READ_BATCH` bytes and hands the
  batch on with ``send_nowait`` (waiting only when the parse channel is full: the
  backpressure that fills the kernel's pty buffer and blocks the child);
* a short batch that follows the last one within :data:`TRICKLE_GAP`, with no input
  typed in between (a program writing a line at a time), is handed on at once as
  every batch is, and the next read waits :data:`TRICKLE_PAUSE` first: the lines
  gather in the kernel's buffer and go through the stages together (a keystroke's
  echo, which input precedes, and the first batch after a pause never wait);
* under sustained output (a full batch, or a terminal that floods the host) a
  :class:`~ahp.pty.pump.ReadPump` thread of this task's own reads while the stages
  work, until the output pauses (the ``read`` releases the GIL: issue 23);
* when every subscriber is behind, the fastest live one paces the reads
  (:meth:`~ahp.engine.hub.Hub.wait_pacer`: as long as it reads, however slowly; a
  stalled one at most :data:`~ahp.engine.hub.PACE_WINDOW`);
* after the process exited, a pty still held open (a background job) is read until
  it stays quiet for :data:`EXIT_LINGER`, and for at most :data:`EXIT_READ_LIMIT` (a
  job that keeps printing would hold the exit back for as long as it prints); then,
  or at EOF (EIO), the task closes its channel.

Buffering: one batch at a time (at most :data:`READ_BATCH` bytes read on the loop, a
pump's batches as :mod:`ahp.pty.pump` bounds them); the parse channel's bound is the
terminal's. Ownership: the child's fds are the child's; a pump and its thread live
only inside :meth:`PtyRead.read_task`'s call. Cancellation: the task's waits are plain
Trio waits; :meth:`PtyRead.process_exited` cancels only a wait for readability (the
reader then lingers), never a hand-on.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Final

import trio

from ahp.engine.hub import Hub
from ahp.pty import Child
from ahp.pty.pump import PUMP_QUIET, PUMP_QUIET_FLOODING, ReadPump

__all__ = [
    "EXIT_LINGER",
    "EXIT_READ_LIMIT",
    "READ_BATCH",
    "READ_SIZE",
    "THREADED_READS",
    "TRICKLE_GAP",
    "TRICKLE_PAUSE",
    "PtyRead",
]

#: One kernel read (the pty hands out ~4 KiB at a time whatever we ask for).
READ_SIZE: Final = 64 * 1024
#: Reads are gathered until EAGAIN or until this many bytes: one batch for the parser.
#: About what the pty buffers (Linux: ~17 KB from the child to the master).
READ_BATCH: Final = 16 * 1024
#: Under sustained output (a batch came back full), read in a thread of the pty-read
#: task's own while the stages work (:mod:`ahp.pty.pump`); False reads on the loop only.
THREADED_READS: bool = os.environ.get("AHP_THREADED_READS", "1") != "0"
#: A short batch read within this many seconds of the last one, with no input typed in
#: between, continues a stream of them (a program writing a line at a time: 100 000
#: ``echo``s were 100 000 rounds of every stage, 21 us a line in the server and 26 in a
#: client's mirror); the next read then waits :data:`TRICKLE_PAUSE`.
TRICKLE_GAP: Final = 0.002
#: How long the next read waits in such a stream (what is written meanwhile is read
#: whole: a round of the stages for a millisecond's lines, not for each line).
TRICKLE_PAUSE: Final = 0.001
#: After the process exits, a pty still held open is read until quiet this long.
EXIT_LINGER: Final = 0.1
#: ... and for at most this many seconds after the exit: a background job printing
#: more often than every EXIT_LINGER (a loop, a daemon started with ``setsid``) kept
#: the terminal from ever reporting its exit. What it prints later stays in the pty
#: (the job blocks once the kernel's buffer is full, until the terminal is disposed).
EXIT_READ_LIMIT: Final = 1.0


def _nothing_typed() -> int:
    return 0


class PtyRead:
    """One terminal's pty-read stage and its figures (see the module docstring).

    Args:
        uri: the terminal's (the hub paces its reads by it).
        hub: where the terminal publishes (its pacer).
        on_output: called with each batch read (``True``: from the child's own stderr
            pipe); must not block nor raise (see :mod:`ahp.engine.exec`).
    """

    def __init__(
        self, uri: str, hub: Hub, on_output: Callable[[bool, bytes], None] | None = None
    ) -> None:
        self.uri = uri
        self._hub = hub
        self._on_output = on_output
        #: Called (and dropped) with the next batch read, while the host's watchers sleep
        #: (:class:`~ahp.engine.alarm.OutputAlarm`); must not block nor raise.
        self.waker: Callable[[], None] | None = None
        #: The output floods the host: read by a pump's thread even in small batches.
        self.flooding = False
        #: Figures for tests and benchmarks: batches and bytes read, and the times the
        #: task found the parse channel full and waited.
        self.batches = 0
        self.bytes = 0
        self.parse_waits = 0
        #: Pauses taken in streams of short batches (:data:`TRICKLE_PAUSE`).
        self.trickle_pauses = 0
        #: How many inputs the terminal has taken for its pty so far (set by the
        #: terminal: a stream of short batches is one with none typed in between).
        self.typed: Callable[[], int] = _nothing_typed
        self._short_at = -1.0  # (Trio time of the last short batch handed on)
        self._typed_at_short = 0  # (self.typed() then)
        self._exited = False
        self._read_until = 0.0  # (after the exit: the Trio time reading stops)
        self._wait_scopes: set[trio.CancelScope] = set()  # the read tasks' waits

    def process_exited(self) -> None:
        """The process is gone: each reader ends a wait for readability and from now on
        reads what is left until the pty is quiet for :data:`EXIT_LINGER`, for at most
        :data:`EXIT_READ_LIMIT` from now."""
        self._read_until = trio.current_time() + EXIT_READ_LIMIT
        self._exited = True
        for scope in self._wait_scopes:
            scope.cancel()

    async def read_task(
        self, child: Child, to_parse: trio.MemorySendChannel[bytes], error: bool = False
    ) -> None:
        """Read until EAGAIN or a full batch, hand the batch on, wait; close at the end.
        ``error``: read the child's own stderr pipe instead of its output.

        The wait for readability runs in a cancel scope kept across rounds (entering
        and leaving one per wait cost ~5 us a keystroke, issue 23): it is in
        ``_wait_scopes`` only while the task waits, so :meth:`process_exited` ends a
        wait and nothing else; a cancel that came as the wait ended anyway makes the
        loop replace the scope before it awaits anything else."""
        async with to_parse:
            while True:
                with trio.CancelScope() as wait_scope:
                    while not wait_scope.cancel_called:
                        if await self._round(child, to_parse, error, wait_scope):
                            return

    async def _round(
        self,
        child: Child,
        to_parse: trio.MemorySendChannel[bytes],
        error: bool,
        wait_scope: trio.CancelScope,
    ) -> bool:
        """One batch read and handed on, then the wait for more; whether reading ended."""
        if self._exited and self._read_long_enough():
            return True
        chunks: list[bytes] = []
        size = 0
        eof = False
        while size < READ_BATCH:
            data = child.read_nowait(READ_SIZE, error=error)
            if data is None:
                break
            if not data:
                eof = True
                break
            chunks.append(data)
            size += len(data)
        if chunks:
            batch = chunks[0] if len(chunks) == 1 else b"".join(chunks)
            self._took(error, batch)
            try:
                to_parse.send_nowait(batch)
            except trio.WouldBlock:
                self.parse_waits += 1  # the parser is behind: wait (backpressure)
                await to_parse.send(batch)
        if eof:
            return True
        if chunks:
            pacer = self._hub.pacer(self.uri)
            if pacer is not None:
                await self._hub.wait_pacer(self.uri, pacer)
                return False
            if THREADED_READS and (size >= READ_BATCH or self.flooding):
                # Sustained output: a thread reads while the stages work. (A
                # flooding child the host runs below it prints in small
                # batches: read on the loop, they cost it 10x the CPU.)
                return await self._pump(child, to_parse, error)
            if size >= READ_BATCH:
                await trio.lowlevel.checkpoint()  # fairness: one batch at a time
                return False
            # Drained (EAGAIN): the wait below is the checkpoint (reading again
            # first would cost a read, EAGAIN mostly, per batch).
            if not error and self._trickling():
                self.trickle_pauses += 1
                await trio.sleep(TRICKLE_PAUSE)  # (the lines gather meanwhile)
                return False
        if self._exited:
            # The process is gone but something still holds the pty open.
            left = self._read_until - trio.current_time()
            with trio.move_on_after(min(EXIT_LINGER, left)) as linger:
                await child.wait_readable(error=error)
            return linger.cancelled_caught
        self._wait_scopes.add(wait_scope)
        try:
            await child.wait_readable(error=error)
        finally:
            self._wait_scopes.discard(wait_scope)
        return False

    def _trickling(self) -> bool:
        """Whether the short batch just handed on continues a stream of them (within
        :data:`TRICKLE_GAP` of the last, nothing typed in between); notes it."""
        now = trio.current_time()
        typed = self.typed()
        streak = now - self._short_at < TRICKLE_GAP and typed == self._typed_at_short
        self._short_at = now
        self._typed_at_short = typed
        return streak

    def _took(self, error: bool, batch: bytes) -> None:
        """A batch was read (from the loop or a pump): count it, tell the hooks."""
        self.batches += 1
        self.bytes += len(batch)
        if self._on_output is not None:
            self._on_output(error, batch)
        waker = self.waker
        if waker is not None:
            self.waker = None
            waker()

    async def _pump(
        self, child: Child, to_parse: trio.MemorySendChannel[bytes], error: bool = False
    ) -> bool:
        """Read through a :class:`~ahp.pty.pump.ReadPump` until the output pauses;
        whether it reached EOF. The pump is stopped (and its thread gone) on return.
        ``error``: the child's own stderr pipe instead of its output."""
        pump = ReadPump(
            child.error_fd if error else child.output_fd,
            is_pty=child.is_pty,
            # A flooding child the host runs below it pauses for longer than PUMP_QUIET
            # whenever the CPU is contended; each pause handed reading back to the loop.
            quiet=PUMP_QUIET_FLOODING if self.flooding else PUMP_QUIET,
        )
        pump.start()
        try:
            while True:
                data = await pump.take()
                if data is None:
                    return False
                if not data:
                    return True
                self._took(error, data)
                try:
                    to_parse.send_nowait(data)
                except trio.WouldBlock:
                    self.parse_waits += 1
                    await to_parse.send(data)
                pacer = self._hub.pacer(self.uri)
                if pacer is not None:
                    await self._hub.wait_pacer(self.uri, pacer)
                if self._exited and self._read_long_enough():
                    return True
        finally:
            await pump.aclose()

    def _read_long_enough(self) -> bool:
        """After the exit: whether :data:`EXIT_READ_LIMIT` has passed (reading ends)."""
        return trio.current_time() >= self._read_until
