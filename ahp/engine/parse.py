"""A terminal's parse stage: the pty's bytes in, the state's actions out, in turns.

Why a module of its own: parsing is the one stage whose cost per byte varies by a
hundred times with what the program prints (plain text at the UTF-8 decoder's speed,
dense escape sequences at ~2 us a byte), so it holds the rules that keep one
terminal's output from holding the loop, apart from :mod:`ahp.engine.terminal`
(which runs :meth:`Parse.task` in the terminal's nursery):

* it drives an :class:`~ahp.vt.OutputParser` (UTF-8, escape scanning,
  shell-integration marks, titles and cwd reports; the clocks passed in) over
  everything waiting in its inbox at once;
* output is fed in chunks of at most :data:`PARSE_CHUNK` bytes, output that parses
  slowly in slices of :data:`PARSE_SLICE`, and a batch without an ``ESC`` byte (plain
  text) in pieces of up to :data:`PARSE_PLAIN` bytes, not joined;
* before a piece that would take the step past :data:`PARSE_TURN` of parsing it hands
  on what it parsed (one action of the turn's data, :func:`ahp.vt.parser.compact`,
  which also keeps only the last title change) and checkpoints.

Buffering: one inbox batch (at most what the pty-read stage queued) and its parsed
actions; the channels' bounds are the terminal's. Ownership: the parser is the task's
own. Cancellation: the task's waits are its inbox and the hand-ons; cancelled, it
drops what it holds (the terminal is closing).
"""

from __future__ import annotations

import socket
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Final

import trio

from ahp.engine.channels import take_joined
from ahp.engine.pty_read import READ_BATCH
from ahp.protocol.actions import StateAction
from ahp.vt import OutputParser
from ahp.vt.parser import compact

__all__ = [
    "PARSE_CHUNK",
    "PARSE_PLAIN",
    "PARSE_SLICE",
    "PARSE_STEP",
    "PARSE_TURN",
    "Parse",
    "parse_pieces",
]

#: Output the parse task feeds in one step once parsing is slow (escape-dense output
#: costs the scanner ~2 us a byte: 16 KB held the loop ~25 ms); between slices it
#: checkpoints. Output that parses fast is fed whole.
PARSE_SLICE: Final = 2048
#: Output the parse task feeds in one step otherwise; between chunks it checkpoints.
#: Four pumped batches drained at once are up to 1 MiB: a title before every line
#: (~0.03 us a byte) held the loop 39 ms of CPU in one step (issue 25,
#: ``benchmarks/loop_steps.py "fragmented scrollback"``); 64 KiB of it is ~2 ms, of
#: plain text ~0.1 ms.
PARSE_CHUNK: Final = 64 * 1024
#: Output without an ``ESC`` byte is fed in pieces of up to this many bytes (most of a
#: pumped batch at once), each handed on as it is, not joined with the turn's others. No
#: escape sequence can start in it (one held from the last batch is only continued), so
#: it parses at the UTF-8 decoder's speed (~0.2 ms for 192 KiB), and cutting it in
#: PARSE_CHUNK pieces bought nothing: the slices' copies, a feed each and the join of
#: their text (a memory pass over UCS-4 text, 4 bytes a character once one emoji is in
#: it) cost the parse task 0.20-0.25 CPU-s per 100 MB of the bench's stream against
#: 0.14-0.15 fed whole. Not 256 KiB: its text, and the frame encoded from it, then
#: crossed :data:`ahp.engine.memory.MMAP_THRESHOLD` (1 MiB; each block a mapping of its
#: own, its pages faulted in and unmapped), which cost more than the join saved
#: (benchmarks/README.md, "Session 17"); 192 KiB is at most 768 KiB of text.
PARSE_PLAIN: Final = 192 * 1024
#: Seconds a read batch may take to parse before parsing counts as slow.
PARSE_STEP: Final = 0.004
#: Seconds of parsing in one step of the parse task: it hands on what it parsed and
#: checkpoints before a piece that would take it past this (at the last piece's
#: pace). Pieces that parse fast (plain text, ~0.1 ms a chunk) go several to a step,
#: their data joined into one action (one publish, one frame); a slow one goes alone,
#: as before.
PARSE_TURN: Final = 0.0005

#: Where the parse stage hands its actions (the reducer's channel, behind a hand-on).
ToReducer = Callable[[Sequence[StateAction]], Awaitable[None]]


def parse_pieces(data: bytes, *, slow: bool, plain: bool = False) -> list[bytes]:
    """``data`` cut for the parse task's steps: chunks of at most :data:`PARSE_CHUNK`
    bytes, or :data:`PARSE_SLICE` once parsing is ``slow``, or :data:`PARSE_PLAIN` when
    it is ``plain`` (no ``ESC`` in it: never slow); ``[data]`` when it fits."""
    size = PARSE_PLAIN if plain else PARSE_SLICE if slow else PARSE_CHUNK
    if len(data) <= size:
        return [data]
    return [data[i : i + size] for i in range(0, len(data), size)]


class Parse:
    """One terminal's parse stage (see the module docstring).

    Args:
        use_pty: the output comes from a pty (``\\r\\n`` line ends).
        nonce: the shell integration's, when the terminal has it (marks without it
            are not trusted).
    """

    def __init__(self, *, use_pty: bool, nonce: str | None) -> None:
        self._use_pty = use_pty
        self._nonce = nonce
        #: The most bytes the task fed its parser in one step (<= PARSE_CHUNK, or
        #: PARSE_PLAIN for plain text); a figure for tests.
        self.largest_feed = 0
        self._parser: OutputParser | None = None

    @property
    def prompts(self) -> int:
        """Prompt starts parsed so far (0 before the task started)."""
        return 0 if self._parser is None else self._parser.prompts

    async def task(self, inbox: trio.MemoryReceiveChannel[bytes], to_reducer: ToReducer) -> None:
        """Bytes in, actions out: feed every batch waiting to the parser at once, until
        the inbox ends; then hand on what the parser still held."""
        parser = OutputParser(
            use_pty=self._use_pty,
            nonce=self._nonce,
            last_titles=True,  # (compact() drops all but the last of a feed anyway)
            hostname=socket.gethostname(),  # (an OSC 7 naming another host is no cwd here)
        )
        self._parser = parser
        slow = False  # the last feed was slow: feed in slices (see PARSE_SLICE)
        async with inbox:
            while True:
                try:
                    data = await take_joined(inbox)  # one parse and one hop for all
                except trio.EndOfChannel:
                    break
                # (memchr: no ESC, no escape sequence can start in the batch)
                plain = data.find(b"\x1b") < 0
                pieces = parse_pieces(data, slow=slow, plain=plain)
                turn = time.perf_counter()
                parsed: list[StateAction] = []
                feeds = 0  # feeds whose actions are in parsed
                pace = 0.0  # seconds a byte, of the turn's last piece
                for index, piece in enumerate(pieces):
                    # A piece that would take the turn past PARSE_TURN (at the last
                    # piece's pace) starts the next turn: a step is one slow piece or
                    # fast ones up to PARSE_TURN, never both.
                    if index and time.perf_counter() - turn + pace * len(piece) > PARSE_TURN:
                        if parsed:  # (the turn's feeds: one hand-on, data joined)
                            await to_reducer(compact(parsed, join=feeds > 1 and not plain))
                            parsed, feeds = [], 0
                        await trio.lowlevel.checkpoint()  # (between turns: others get one)
                        turn = time.perf_counter()
                    start = time.perf_counter()
                    self.largest_feed = max(self.largest_feed, len(piece))
                    actions = parser.feed(  # (compacted once, with the turn's others)
                        piece, wall_ms=int(time.time() * 1000), mono_ms=time.monotonic() * 1000
                    )
                    # Slow when a whole read batch of such output would hold the loop
                    # longer than PARSE_STEP (escape-dense output costs ~2 us a byte).
                    took = time.perf_counter() - start
                    pace = took / max(1, len(piece))
                    slow = took * READ_BATCH > PARSE_STEP * len(piece)
                    if actions:
                        parsed += actions
                        feeds += 1
                if parsed:  # (plain pieces are big enough alone: not joined)
                    await to_reducer(compact(parsed, join=feeds > 1 and not plain))
        tail = parser.close(wall_ms=int(time.time() * 1000), mono_ms=time.monotonic() * 1000)
        if tail:
            await to_reducer(tail)
