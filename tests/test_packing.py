"""Packed scrollback (:mod:`ahp.engine.packing`, ``Rope`` packing): the text never
changes, only how it is held; a host over its budget packs old text, and its
packer ends with its terminals."""

from __future__ import annotations

import functools
import time

import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st

from ahp.engine import open_host, packing
from ahp.engine.packing import pack_scrollback
from ahp.protocol.rope import PACK_MIN_CHARS, Packed, Rope, pack_chunk, swap_chunk
from ahp.protocol.state import ClientClaim, TerminalState
from ahp.reducers.scrollback import cold_chunks
from ahp.reducers.terminal import append_data
from tests.helpers import TIMEOUT, wait_for_state

LINE = "printing, printing, printing, printing, printing\r\n"


def _packed(rope: Rope) -> int:
    return sum(isinstance(c, Packed) for c in rope._chunks)


def test_packing_keeps_every_views_text() -> None:
    """Old views, the newest, a branch and a trimmed view read the same text after
    their shared chunks were packed; the newest keep characters stay unpacked."""
    ropes = [Rope()]
    for i in range(40):
        ropes.append(ropes[-1].append(f"{i:04d} " + LINE * 200))
    old, newest = ropes[10], ropes[-1]
    texts = [str(r) for r in ropes]
    for rope in ropes:
        rope._joined = None  # (drop the caches: read through the chunks again)
    found = newest.cold_chunks(len(LINE) * 400)
    assert found and all(len(text) >= PACK_MIN_CHARS for _, _, text in found)
    assert old.cold_chunks(0) == []  # an older view leaves packing to the newest
    for chunks, index, text in found:
        packed = pack_chunk(text)
        assert packed is not None and len(packed) == len(text)
        swap_chunk(chunks, index, text, packed)
    assert _packed(newest) == len(found) == 38  # all but the last two chunks
    assert newest.cold_chunks(0) == [
        (newest._chunks, i, newest._chunks[i]) for i in range(38, 40)
    ]  # (only chunks not looked at yet are offered again)
    assert [str(r) for r in ropes] == texts
    assert str(old.append("branch")) == texts[10] + "branch"
    assert str(newest.drop_prefix(12345)) == texts[-1][12345:]
    assert newest.head(9000) == texts[-1][:9000]
    assert newest.tail(len(newest)) == texts[-1]
    assert newest == texts[-1]


def test_text_that_does_not_compress_is_not_packed() -> None:
    import random

    rng = random.Random(7)
    noise = "".join(chr(rng.randrange(33, 127)) for _ in range(20_000))
    assert pack_chunk(noise) is None
    assert pack_chunk(LINE * 400) is not None


@given(st.lists(st.text(min_size=1, max_size=6000), min_size=1, max_size=12), st.data())
def test_packed_ropes_read_as_their_text(pieces: list[str], data: st.DataObject) -> None:
    """Any text (surrogates included), any pieces packed: the same string."""
    rope = Rope()
    for piece in pieces:
        rope = rope.append(piece)
    text = "".join(pieces)
    for index, chunk in enumerate(rope._chunks):
        if isinstance(chunk, str) and data.draw(st.booleans()):
            swap_chunk(rope._chunks, index, chunk, Packed(_zstd(chunk), len(chunk)))
    rope._joined = None
    cut = data.draw(st.integers(0, len(text)))
    assert str(rope) == text
    assert str(rope.drop_prefix(cut)) == text[cut:]
    assert rope.head(cut) == text[:cut]
    assert rope.tail(cut) == (text[-cut:] if cut else "")


def _zstd(text: str) -> bytes:
    import zstandard

    return zstandard.compress(text.encode("utf-8", "surrogatepass"), 1)


def test_cold_chunks_of_a_state_spare_the_newest_text() -> None:
    state = TerminalState(title="t", claim=ClientClaim(clientId=""), content=())
    for _ in range(20):
        state = append_data(state, LINE * 100)
    assert cold_chunks(state, 10**9) == []
    found = cold_chunks(state, len(LINE) * 100 * 5)
    assert len(found) == 15


async def test_a_host_over_its_budget_packs_and_the_packer_ends_with_its_terminals() -> None:
    """Real terminals printing repetitive lines, a budget below what they retain: old
    chunks get packed, every terminal's text stays what it printed; once the
    terminals are disposed the packer task returns."""
    script = f"yes '{LINE[:-2]}' | head -n 30000"
    async with open_host() as host:
        terminals = [await host.create_terminal(argv=["sh", "-c", script]) for _ in range(3)]
        for terminal in terminals:
            await wait_for_state(terminal, lambda s: s.exited)
        expected = [terminal.state.text() for terminal in terminals]
        with trio.fail_after(TIMEOUT):
            async with trio.open_nursery() as nursery:
                done = trio.Event()

                async def packer() -> None:
                    await pack_scrollback(lambda: terminals, budget=1000, keep=10_000)
                    done.set()

                nursery.start_soon(packer)
                while not all(_packed_in(t.state) for t in terminals):  # noqa: ASYNC110
                    await trio.sleep(0.01)  # (the packer's progress: no event to wait on)
                for terminal in terminals:
                    terminal.state.content[0].value._joined = None  # type: ignore[union-attr]
                assert [t.state.text() for t in terminals] == expected
                terminals.clear()  # (as the host's table, once every terminal is gone)
                await done.wait()


def _packed_in(state: TerminalState) -> bool:
    return any(
        isinstance(chunk, Packed)
        for part in state.content
        for chunk in getattr(part, "value", getattr(part, "output", Rope()))._chunks
    )


async def test_a_terminal_disposed_during_a_pass_leaves_the_pass_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A pass over terminals with much text, one chunk per thread call: once a terminal
    is disposed, no later call packs its text (the pass lets go of it, so a trim can
    return it), and the pass says so through ``released``."""
    script = f"yes '{LINE[:-2]}' | head -n 30000"
    calls: list[list[str]] = []
    real = packing._pack_all

    def spy(texts: list[str]) -> list[Packed | None]:
        calls.append(texts)
        time.sleep(0.01)  # (in the worker thread: the pass lasts while the test disposes)
        return real(texts)

    monkeypatch.setattr(packing, "_pack_all", spy)
    async with open_host() as host:
        terminals = [await host.create_terminal(argv=["sh", "-c", script]) for _ in range(3)]
        for terminal in terminals:
            await wait_for_state(terminal, lambda s: s.exited)
        released = trio.Event()
        with trio.fail_after(TIMEOUT):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(
                    functools.partial(
                        pack_scrollback,
                        lambda: terminals,
                        budget=1000,
                        keep=10_000,
                        step=1,
                        released=released.set,
                    )
                )
                while not calls:  # noqa: ASYNC110 (the packer's progress: no event)
                    await trio.sleep(0.001)
                victim = terminals.pop()  # (the host's table drops it as dispose does)
                texts = {id(t) for _, _, t in cold_chunks_all(victim.state)}
                await host.dispose(victim.uri)
                seen = len(calls)
                await released.wait()
                assert len(calls) > seen  # the pass went on with the other terminals
                assert not any(id(t) in texts for batch in calls[seen:] for t in batch)
                terminals.clear()


def cold_chunks_all(state: TerminalState) -> list[tuple[object, int, str]]:
    """Every text chunk of ``state`` (packed or not yet)."""
    found: list[tuple[object, int, str]] = []
    for part in state.content:
        rope = getattr(part, "value", getattr(part, "output", Rope()))
        found.extend((rope._chunks, i, c) for i, c in enumerate(rope._chunks) if isinstance(c, str))
    return found


async def test_the_budget_counts_bytes_so_text_with_emoji_is_packed_sooner() -> None:
    """A terminal printing a line with an emoji holds its text at four bytes a character
    (CPython's widest ``str``): its scrollback weighs that, the packer's budget counts
    it, and a budget of twice its characters (which counting characters would not
    pass) packs it; ASCII text weighs a byte a character."""
    wide = f"yes '{LINE[:-2]} \U0001f389' | head -n 30000"
    plain = f"yes '{LINE[:-2]}' | head -n 30000"
    async with open_host() as host:
        emoji = await host.create_terminal(argv=["sh", "-c", wide])
        ascii_ = await host.create_terminal(argv=["sh", "-c", plain])
        for terminal in (emoji, ascii_):
            await wait_for_state(terminal, lambda s: s.exited)
        assert ascii_.scrollback_bytes == ascii_.scrollback_chars
        assert 3.9 * emoji.scrollback_chars < emoji.scrollback_bytes < 4.1 * emoji.scrollback_chars
        terminals = [emoji]
        with trio.fail_after(TIMEOUT):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(
                    functools.partial(
                        pack_scrollback,
                        lambda: terminals,
                        budget=2 * emoji.scrollback_chars,
                        keep=10_000,
                    )
                )
                while not _packed_in(emoji.state):  # noqa: ASYNC110 (no event to wait on)
                    await trio.sleep(0.01)
                terminals.clear()
