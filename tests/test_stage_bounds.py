"""The terminal's channel bounds, exceeded: waiting producers, rejected input, nothing lost.

Test rules (see conftest): real ptys and processes; every wait under
``fail_after``. Filling a channel relies on Trio's scheduling only: tasks started
together run in one batch before a task they wake (the reducer) runs.
"""

from __future__ import annotations

import time
from functools import partial

import pytest
import trio
import trio.testing

from ahp.engine import Outbox, Terminal, open_host
from ahp.engine import parse as parse_module
from ahp.engine.envelopes import Published
from ahp.engine.input_write import INPUT_QUEUE
from ahp.engine.parse import PARSE_CHUNK, PARSE_PLAIN, PARSE_SLICE, parse_pieces
from ahp.engine.terminal import PARSE_QUEUE, REDUCER_QUEUE
from ahp.protocol import ActionEnvelope, TerminalData, TerminalExited
from ahp.protocol.actions import ActionOrigin, TerminalInput, TerminalTitleChanged
from tests.helpers import TIMEOUT, wait_for_state


async def test_callers_beyond_the_reducer_queue_wait_and_all_apply() -> None:
    # Callers started in one scheduler batch all queue before the reducer runs.
    async with open_host() as host:
        term = await host.create_terminal(argv=["cat"])
        sender = Outbox(max_bytes=1 << 30)
        host.hub.subscribe(term.uri, sender)
        count = 4 * REDUCER_QUEUE
        used: list[int] = []

        async def dispatch(i: int) -> None:
            used.append(term._to_reducer.statistics().current_buffer_used)
            await term.dispatch(
                TerminalTitleChanged(title=f"t{i}"),
                origin=ActionOrigin(clientId="c", clientSeq=i),
                sender=sender,
            )

        with trio.fail_after(TIMEOUT):
            async with trio.open_nursery() as nursery:
                for i in range(count):
                    nursery.start_soon(dispatch, i)
            await wait_for_state(term, lambda _: len(sender) >= count)
        assert max(used) == REDUCER_QUEUE  # the channel was full: later callers waited
        titles = [
            item.envelope
            for item in sender.get_nowait(coalesce=False)
            if isinstance(item, Published)
            and isinstance(item.envelope.action, TerminalTitleChanged)
        ]
        assert len(titles) == count and all(e.rejectionReason is None for e in titles)
        assert sorted(e.origin.clientSeq for e in titles if e.origin) == list(range(count))
        last = titles[-1].action
        assert isinstance(last, TerminalTitleChanged)  # (as every one of titles is)
        assert term.state.title == last.title


async def test_input_beyond_the_input_queue_is_rejected_and_the_terminal_lives() -> None:
    async with open_host() as host:
        # The program never reads: the pty's input buffer fills and the writer waits.
        term = await host.create_terminal(
            argv=["sh", "-c", "stty -icanon -echo; echo ready; exec sleep 600"], grace=0.2
        )
        await wait_for_state(term, lambda s: "ready" in s.text())
        sender = Outbox(max_bytes=1 << 30)
        host.hub.subscribe(term.uri, sender)
        await term.send_input("y" * 65536)  # more than the kernel takes
        await trio.testing.wait_all_tasks_blocked()  # the writer holds it, waiting
        extra = INPUT_QUEUE + 100
        for i in range(extra):
            await term.dispatch(TerminalInput(data="x"), origin=ActionOrigin("c", i), sender=sender)
        # The reducer takes items in order: once this is applied, every input was decided.
        await term.dispatch(TerminalTitleChanged(title="decided"))
        await wait_for_state(term, lambda s: s.title == "decided")
        echoes = [
            item.envelope
            for item in sender.get_nowait(coalesce=False)
            if isinstance(item, Published) and item.envelope.origin is not None
        ]
        rejected = [e for e in echoes if e.rejectionReason]
        assert len(echoes) == extra
        assert len(rejected) == extra - INPUT_QUEUE
        assert all("input queue full" in (e.rejectionReason or "") for e in rejected)
        assert term.running
        await term.dispatch(TerminalTitleChanged(title="still here"))  # (after the rejections)
        await wait_for_state(term, lambda s: s.title == "still here")


async def test_a_parser_that_falls_behind_stops_the_reader_and_loses_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A full parse channel is the backpressure: the reader stops reading (the kernel's
    pty buffer fills and the program blocks) until the parser takes again; no byte is
    lost or reordered. The parse task is held back at its start until the reader has
    found the channel full."""
    original = Terminal._parse_task

    async def held_back(self: Terminal, inbox: trio.MemoryReceiveChannel[bytes]) -> None:
        while self.parse_waits == 0:  # noqa: ASYNC110 (the reader's wait is silent)
            await trio.sleep(0.01)
        await original(self, inbox)

    monkeypatch.setattr(Terminal, "_parse_task", held_back)
    async with open_host() as host:
        term = await host.create_terminal(argv=["seq", "1", "200000"])
        text: list[str] = []
        with trio.fail_after(4 * TIMEOUT):
            async with term.subscribe(max_bytes=1 << 30) as sub:
                async for item in sub:
                    if not isinstance(item, ActionEnvelope):
                        text.append(item.state.text())  # type: ignore[union-attr]
                    elif isinstance(item.action, TerminalData):
                        text.append(item.action.data)
                    elif isinstance(item.action, TerminalExited):
                        break
        assert term.parse_waits > 0
        assert term.read_batches >= PARSE_QUEUE
        lines = "".join(text).split("\r\n")
        assert lines == [*(str(n) for n in range(1, 200_001)), ""]


async def test_dispatch_can_wait_for_the_verdict_and_is_released_on_dispose() -> None:
    async with open_host() as host:
        term = await host.create_terminal(argv=["cat"], grace=0.2)
        await term.dispatch(TerminalTitleChanged(title="applied"), wait=True)
        assert term.state.title == "applied"  # no wait for an envelope needed
        await term.dispatch(TerminalTitleChanged(title="x" * 10**5), wait=True)  # rejected
        assert term.state.title == "applied"
        # Callers waiting for a verdict while the terminal is disposed are released.
        with trio.fail_after(TIMEOUT):
            async with trio.open_nursery() as nursery:
                for i in range(4 * REDUCER_QUEUE):
                    nursery.start_soon(
                        partial(term.dispatch, TerminalTitleChanged(title=f"{i}"), wait=True)
                    )
                nursery.start_soon(host.dispose, term.uri)
        assert term.closed.is_set()


def test_parse_pieces_cut_at_the_chunk_and_at_the_slice() -> None:
    data = bytes(range(256)) * (PARSE_CHUNK // 64)  # 4 chunks
    pieces = parse_pieces(data, slow=False)
    assert [len(p) for p in pieces] == [PARSE_CHUNK] * 4 and b"".join(pieces) == data
    slices = parse_pieces(data[: 3 * PARSE_SLICE + 1], slow=True)
    assert [len(p) for p in slices] == [PARSE_SLICE] * 3 + [1]
    assert parse_pieces(data[:PARSE_CHUNK], slow=False) == [data[:PARSE_CHUNK]]
    assert parse_pieces(b"", slow=True) == [b""]
    # Plain output (no ESC) is never slow: it is cut at PARSE_PLAIN, slow or not.
    big = b"x" * (2 * PARSE_PLAIN + 5)
    for slow in (False, True):
        cut = parse_pieces(big, slow=slow, plain=True)
        assert [len(p) for p in cut] == [PARSE_PLAIN, PARSE_PLAIN, 5] and b"".join(cut) == big
    assert parse_pieces(big[:PARSE_PLAIN], slow=True, plain=True) == [big[:PARSE_PLAIN]]


async def test_a_pumped_batch_over_the_parse_chunk_is_parsed_in_chunks() -> None:
    """Output read in bulk while the loop was busy comes as one batch of up to the
    pump's buffer (256 KiB); the parse task feeds it in PARSE_CHUNK pieces, with a
    checkpoint between, and nothing is lost."""
    line = "\x1b]0;t\x07" + "x" * 60 + "\n"
    count = 60_000
    script = f"import sys; sys.stdout.write({line!r} * {count}); sys.stdout.flush()"
    async with open_host() as host:
        term = await host.create_terminal(argv=["python3", "-c", script])
        total = count * (len(line.encode()) + 1)  # (the pty's \r\n)
        with trio.fail_after(TIMEOUT):
            while term.bytes_read < 64 * 1024:  # noqa: ASYNC110 (a counter, not an event)
                await trio.sleep(0.01)
            # The loop busy on purpose: the reader thread fills its buffer meanwhile.
            time.sleep(0.5)  # noqa: ASYNC251
            while term.bytes_read < total:  # noqa: ASYNC110
                await trio.sleep(0.01)
            await term.exited.wait()
        assert term.bytes_read == total
        assert term.largest_feed == PARSE_CHUNK  # a larger batch came, and was cut


async def _pumped_output(script: str) -> tuple[int, list[str]]:
    """Run ``python3 -c script`` with the loop held busy once 64 KiB came (the reader
    thread fills its buffer meanwhile: the rest arrives in big batches); the terminal's
    largest parser feed, and the text of every ``terminal/data`` envelope, in order."""
    async with open_host() as host:
        term = await host.create_terminal(argv=["python3", "-c", script])
        sender = Outbox(max_bytes=1 << 30)
        host.hub.subscribe(term.uri, sender)
        with trio.fail_after(TIMEOUT):
            while term.bytes_read < 64 * 1024:  # noqa: ASYNC110 (a counter, not an event)
                await trio.sleep(0.01)
            time.sleep(0.5)  # noqa: ASYNC251 (the loop busy: the reader fills its buffer)
            await term.exited.wait()
        return term.largest_feed, [
            item.envelope.action.data
            for item in sender.get_nowait(coalesce=False)
            if isinstance(item, Published) and isinstance(item.envelope.action, TerminalData)
        ]


@pytest.mark.parametrize("turn", [0.0, 60.0])
async def test_a_turn_of_parsed_chunks_is_handed_on_joined(
    monkeypatch: pytest.MonkeyPatch, turn: float
) -> None:
    """A batch over PARSE_CHUNK with escape sequences in it is fed in chunks either way;
    the chunks fed in one turn (PARSE_TURN of parsing) reach the reducer as one joined
    action, so a subscriber gets one envelope of the whole batch's text when the turn is
    long, one per chunk (at most PARSE_CHUNK characters) when it ends after every chunk;
    nothing is lost either way."""
    monkeypatch.setattr(parse_module, "PARSE_TURN", turn)
    line = "\x1b[1m" + "x" * 95 + "\n"  # (a colour: not plain)
    count = 40_000
    script = f"import sys; sys.stdout.write({line!r} * {count}); sys.stdout.flush()"
    total = count * (len(line) + 1)  # (the pty's \r\n)
    largest_feed, texts = await _pumped_output(script)
    sizes = [len(text) for text in texts]
    assert sum(sizes) == total
    assert largest_feed == PARSE_CHUNK
    if turn:
        assert max(sizes) > PARSE_CHUNK + 1  # a pumped batch's chunks, joined
    else:
        # (+1: a chunk ending in ESC leaves it to the next, which may begin an OSC)
        assert max(sizes) <= PARSE_CHUNK + 1


async def test_plain_output_is_fed_whole_up_to_the_plain_piece() -> None:
    """Output without an ESC byte read in bulk (a pumped batch of up to 256 KiB) is fed
    in pieces of up to PARSE_PLAIN, not PARSE_CHUNK, each its own envelope (never
    joined past it), and nothing is lost; multi-byte characters split between pieces
    come through whole."""
    line = "gr\u00f6\u00dfe \U0001f600 " + "x" * 80 + "\n"
    count = 20_000
    script = f"import sys; sys.stdout.write({line!r} * {count}); sys.stdout.flush()"
    expected = (line.replace("\n", "\r\n")) * count
    largest_feed, texts = await _pumped_output(script)
    assert "".join(texts) == expected
    assert PARSE_CHUNK < largest_feed <= PARSE_PLAIN  # a pumped batch, fed whole
    # (+3: a character split at the piece before comes with this one)
    assert max(len(t.encode()) for t in texts) <= PARSE_PLAIN + 3
