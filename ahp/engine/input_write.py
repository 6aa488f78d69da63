"""A terminal's input side: the input-write task, the bytes it has pending, and their pace.

Why a module of its own: input is the one flow of a terminal that runs *into* a program
that may not take it. What the reducer accepted waits here for the pty; the bytes
pending bound what a sender may push (:data:`INPUT_PACE`), and a sender must still be
able to stop waiting when the program reads nothing at all (:data:`INPUT_STALL`). Those
rules, the channel to the input-write task and the task itself are one concept, kept
apart from the output stages (:mod:`ahp.engine.terminal` runs the task,
:mod:`ahp.engine.reduce` feeds it):

* the reducer task asks :meth:`InputWrite.refusal` about a client's accepted input and
  hands the bytes on with :meth:`InputWrite.queue` (never waiting: a full channel is a
  rejection, :data:`INPUT_QUEUE`);
* a caller of ``Terminal.dispatch`` whose input left more than :data:`INPUT_PACE` bytes
  pending waits in :meth:`InputWrite.wait_room`;
* the input-write task (:meth:`InputWrite.write_task`) writes everything waiting in one write
  and wakes the waiters as the pending bytes fall.

Buffering: at most :data:`INPUT_QUEUE` writes, and
:data:`~ahp.reducers.core.MAX_PENDING_INPUT` bytes (the reducer's bound), wait between
the reducer and the pty; a client's input past :data:`INPUT_PACE` pending is rejected
while the pty takes none (:data:`INPUT_STALLED`). Ownership: all of it lives in the
terminal's Trio run; the pty's fd is the child's. Cancellation: :meth:`wait_room` is a
plain Trio wait; cancelling :meth:`write_task` drops what is still queued (the terminal is
closing).
"""

from __future__ import annotations

import logging
from typing import Final

import trio

from ahp.engine.channels import take_joined
from ahp.pty import Child, ChildGone

__all__ = ["INPUT_PACE", "INPUT_QUEUE", "INPUT_STALL", "INPUT_STALLED", "InputWrite"]

log = logging.getLogger(__name__)

#: Input chunks queued for the input-write task (bytes bounded by MAX_PENDING_INPUT).
INPUT_QUEUE: Final = 1024
#: Bytes of input pending for the pty past which a caller of ``Terminal.dispatch``
#: with input waits until the pty has taken them below it (backpressure: issue 25, 24
#: MiB of keystrokes into ``cat >/dev/null`` held 16 MiB pending, twice over while
#: joined for one write, +57 MiB of RSS). A single input larger than this is taken.
INPUT_PACE: Final = 1024 * 1024
#: Seconds a client's input sender waits past :data:`INPUT_PACE` while the pty takes
#: none of the pending input; then the program is taken as not reading (a full-screen
#: program busy or stopped in raw mode): the sender stops waiting, and until the pty
#: takes input again a client's input past INPUT_PACE pending is rejected to it
#: (:data:`INPUT_STALLED`). Without it a client that pasted more than INPUT_PACE into
#: such a program could do nothing else on its connection — no ping, no signal, no
#: dispose — until the program read. The library's input (no origin) waits on:
#: its caller's cancel scope bounds the wait, and nothing it sends is dropped.
INPUT_STALL: Final = 2.0
#: The reason a client's input is rejected while the pty takes none (:data:`INPUT_STALL`).
INPUT_STALLED: Final = (
    "the program has not read its input for {seconds:g} s ({pending} bytes pending): "
    "input is refused until it reads"
)


class InputWrite:
    """One terminal's pending input and its input-write task (see the module docstring).

    Args:
        uri: the terminal's, for the log.
    """

    def __init__(self, uri: str) -> None:
        self.uri = uri
        #: Bytes accepted for the pty and not yet written.
        self.pending = 0
        #: The child's input side is gone: later input is published but not written.
        self.gone = False
        #: The child's ``input_written`` when a client's wait for :data:`INPUT_PACE`
        #: found the pty taking nothing for :data:`INPUT_STALL` (None: not stalled); the
        #: stall lasts while the count stays there (:meth:`stalled`).
        self.stall_mark: int | None = None
        self._child: Child | None = None
        self._to_writer: trio.MemorySendChannel[bytes] | None = None
        self._room = trio.lowlevel.ParkingLot()  # senders waiting for INPUT_PACE
        self._done = False  # the task ended: nobody waits for it any more

    def open(self, child: Child) -> trio.MemoryReceiveChannel[bytes]:
        """Set up the channel to the input-write task for ``child``; the task's end."""
        self._child = child
        self._to_writer, inbox = trio.open_memory_channel[bytes](INPUT_QUEUE)
        return inbox

    def queue(self, data: bytes) -> bool:
        """Hand ``data`` (accepted input) to the input-write task, without waiting;
        False when its channel is full (:data:`INPUT_QUEUE`) or closed."""
        writer = self._to_writer
        assert writer is not None
        try:
            writer.send_nowait(data)
        except (trio.WouldBlock, trio.BrokenResourceError, trio.ClosedResourceError):
            return False
        self.pending += len(data)
        return True

    def refusal(self, size: int) -> str | None:
        """Why a client's accepted input of ``size`` bytes is refused after all (the pty
        took none of what is pending for :data:`INPUT_STALL` and it would pass
        :data:`INPUT_PACE`), or None."""
        pending = self.pending
        if pending + size <= INPUT_PACE or not self.stalled():
            return None
        return INPUT_STALLED.format(seconds=INPUT_STALL, pending=pending)

    def stalled(self) -> bool:
        """Whether the pty has taken no input since a client's wait found it stalled
        (:data:`INPUT_STALL`); the stall ends with the first byte it takes."""
        mark = self.stall_mark
        if mark is None:
            return False
        child = self._child
        if child is None or child.input_written != mark:
            self.stall_mark = None
            return False
        return True

    async def wait_room(self, *, stall: bool) -> None:
        """Wait while more than :data:`INPUT_PACE` bytes of input are pending (ends when
        the input side goes or the input-write task ends). With ``stall`` (a client's
        input) the wait also ends once the pty took none of it for :data:`INPUT_STALL`
        seconds, and at once while that stall lasts (the reducer rejects a client's
        input past INPUT_PACE then: memory stays bounded by the pace)."""
        while self.pending > INPUT_PACE and not self._done:
            child = self._child
            if not stall or child is None:
                await self._room.park()
                continue
            if self.stalled():
                return
            mark = child.input_written
            with trio.move_on_after(INPUT_STALL) as waited:
                await self._room.park()
            if waited.cancelled_caught and child.input_written == mark:
                self.stall_mark = mark
                log.info("terminal %s: the program read no input for %gs", self.uri, INPUT_STALL)
                return

    async def write_task(self, inbox: trio.MemoryReceiveChannel[bytes]) -> None:
        """The input-write task: write input to the pty in order, everything waiting in
        one write (senders waiting for :data:`INPUT_PACE` are woken as the pending bytes
        fall). Returns when the child's input side is gone."""
        child = self._child
        assert child is not None
        try:
            await self._write_loop(child, inbox)
        finally:
            self._done = True
            self._room.unpark_all()

    async def _write_loop(self, child: Child, inbox: trio.MemoryReceiveChannel[bytes]) -> None:
        async with inbox:
            while True:
                data = await take_joined(inbox)  # everything waiting: one write
                try:
                    # One write(2) first: a keystroke is in the kernel without the
                    # checkpoint that write() takes after each slice (a scheduler pass
                    # per keystroke); what the kernel did not take goes through write().
                    written = child.write_nowait(data)
                    if written < len(data):
                        await child.write(data[written:] if written else data)
                except (ChildGone, trio.ClosedResourceError):
                    self.gone = True  # later input is published but not written
                    return
                finally:
                    # Nothing is pending once the input side is gone (what is still
                    # queued is dropped with the channel).
                    self.pending = 0 if self.gone else self.pending - len(data)
                    if self._room and self.pending <= INPUT_PACE:
                        self._room.unpark_all()
