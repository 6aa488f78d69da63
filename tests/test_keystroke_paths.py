"""The engine's keystroke shortcuts (``ahp.keystroke``) lose and reorder nothing.

* ``direct_write``: the reducer writes input to the pty itself while input-write is
  idle, and hands input-write what the kernel did not take; input that arrives
  meanwhile queues behind it. The program must read every byte, in order.
* ``inline_output``: pty-read parses and applies a short read itself while the parse
  and reducer tasks are idle; larger reads go through the tasks. The published
  output must be every byte, in order, whichever path each read took.

* ``inline_dispatch``: a caller applies its action itself while the reducer is idle;
  actions arriving while it has work queue. Each must apply once, in order.

Each runs with the shortcut on and off (real ptys, real programs).
"""

from __future__ import annotations

import hashlib
import re
import sys

import pytest
import trio
import trio.lowlevel
import trio.testing

from ahp.engine import Outbox, Published, open_host
from ahp.engine import terminal as terminal_module
from ahp.engine.terminal import REDUCER_QUEUE
from ahp.keystroke import SMALL_READ
from ahp.protocol import ActionEnvelope, TerminalData
from ahp.protocol.actions import ActionOrigin, TerminalTitleChanged
from tests.helpers import TIMEOUT, wait_for_state, wait_for_text

#: Reads exactly N bytes of raw input and prints their SHA-256.
_DIGEST = (
    "import hashlib, sys, termios, tty\n"
    "tty.setraw(0)\n"
    "print('ready', flush=True)\n"
    "n = int(sys.argv[1]); data = b''\n"
    "while len(data) < n:\n"
    "    data += sys.stdin.buffer.read1(n - len(data))\n"
    "print('\\r\\ndigest', hashlib.sha256(data).hexdigest(), flush=True)\n"
)

_DIGEST_LINE = re.compile(r"digest ([0-9a-f]{64})")


@pytest.mark.parametrize("direct", [True, False], ids=["direct_write", "queued"])
async def test_input_reaches_the_program_whole_and_in_order(
    direct: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(terminal_module, "DIRECT_WRITE", direct)
    # Pastes larger than the pty takes at once (the rest waits in input-write), with
    # keystrokes right behind them and on their own.
    pieces = ["p" * 50_000, *"abcdefghij", "q" * 20_000, *[f"{i % 10}" for i in range(40)]]
    expected = "".join(pieces).encode()
    async with open_host() as host:
        term = await host.create_terminal(
            argv=[sys.executable, "-c", _DIGEST, str(len(expected))], grace=0.2
        )
        await wait_for_text(term, "ready")
        with trio.fail_after(TIMEOUT):
            for i, piece in enumerate(pieces):
                await term.send_input(piece)
                if i % 7 == 0:
                    await trio.lowlevel.checkpoint()  # sometimes input-write gets a turn in between
        state = await wait_for_state(term, lambda s: _DIGEST_LINE.search(s.text()) is not None)
        found = _DIGEST_LINE.search(state.text())
        assert found is not None and found.group(1) == hashlib.sha256(expected).hexdigest()
        if direct:
            assert term.direct_writes > 0
        else:
            assert term.direct_writes == 0


@pytest.mark.parametrize("inline", [True, False], ids=["inline_output", "through_tasks"])
async def test_output_is_published_whole_and_in_order_whichever_path(
    inline: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(terminal_module, "INLINE_OUTPUT", SMALL_READ if inline else 0)
    async with open_host() as host:
        # Raw and silent: cat writes back each read as it came, byte for byte.
        term = await host.create_terminal(
            argv=["sh", "-c", "stty raw -echo; echo ready; exec cat"], grace=0.2
        )
        await wait_for_text(term, "ready")
        typed: list[str] = []
        published: list[str] = []
        async with term.subscribe(max_bytes=1 << 26) as sub:
            with trio.fail_after(TIMEOUT):
                for i in range(80):
                    # Keystrokes one by one (short reads), now and then a paste (reads of
                    # kilobytes, through the tasks) with keystrokes right behind it.
                    chunk = f"k{i}." if i % 10 else "L" * 6000 + f"<{i}>"
                    typed.append(chunk)
                    await term.send_input(chunk)
                    if i % 3 == 0:
                        await trio.lowlevel.checkpoint()
                expected = "".join(typed)
                async for item in sub:
                    if isinstance(item, ActionEnvelope) and isinstance(item.action, TerminalData):
                        published.append(item.action.data)
                        if sum(map(len, published)) >= len(expected):
                            break
            assert "".join(published) == expected
            # Then keystrokes one at a time, each echo awaited: the stages are idle
            # when it comes (under load, the burst above may have had no short read).
            for i in range(5):
                await term.send_input(f"e{i}")
                await wait_for_state(term, lambda s, i=i: f"e{i}" in s.text())
        if inline:
            assert term.inline_batches > 0
        else:
            assert term.inline_batches == 0


@pytest.mark.parametrize("inline", [True, False], ids=["inline_dispatch", "through_reducer"])
async def test_dispatched_actions_apply_once_each_and_in_order(
    inline: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(terminal_module, "INLINE_DISPATCH", inline)
    async with open_host() as host:
        term = await host.create_terminal(argv=["cat"], grace=0.2)
        await wait_for_state(term, lambda _: term.running)
        sender = Outbox(max_bytes=1 << 30)
        host.hub.subscribe(term.uri, sender)
        count = 3 * REDUCER_QUEUE

        async def dispatch(i: int) -> None:
            await term.dispatch(
                TerminalTitleChanged(title=f"t{i}"),
                origin=ActionOrigin(clientId="c", clientSeq=i),
                sender=sender,
            )

        with trio.fail_after(TIMEOUT):
            # Callers one after another, then many started in one scheduler batch.
            for i in range(count // 3):
                await dispatch(i)
            async with trio.open_nursery() as nursery:
                for i in range(count // 3, count):
                    nursery.start_soon(dispatch, i)
            await wait_for_state(term, lambda _: len(sender) >= count)
        seqs = [
            item.envelope.origin.clientSeq
            for item in sender.get_nowait(coalesce=False)
            if isinstance(item, Published)
            and isinstance(item.envelope.action, TerminalTitleChanged)
            and item.envelope.origin is not None
        ]
        assert seqs[: count // 3] == list(range(count // 3))  # (awaited one by one)
        assert sorted(seqs) == list(range(count))  # each once
        assert (term.inline_dispatches > 0) is inline


@pytest.mark.parametrize("direct", [True, False], ids=["direct_write", "queued"])
async def test_a_spin_without_its_echo_rests_the_spinning(
    direct: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(terminal_module, "DIRECT_WRITE", direct)
    # (The rest is long here so that the second keystroke surely falls in it.)
    monkeypatch.setattr(terminal_module, "ECHO_SPIN_REST", 3600.0)
    async with open_host() as host:
        # Nothing is ever echoed: every spin ends without its echo.
        term = await host.create_terminal(
            argv=["sh", "-c", "stty -echo; echo ready; exec cat >/dev/null"], grace=0.2
        )
        await wait_for_text(term, "ready")
        with trio.fail_after(TIMEOUT):
            await term.send_input("a")
            await trio.testing.wait_all_tasks_blocked()  # (a spin is not blocked)
            assert (term.spins, term.spin_misses) == (1, 1)
            await term.send_input("b")
            await trio.testing.wait_all_tasks_blocked()
        assert term.direct_writes == (2 if direct else 0)
        assert (term.spins, term.spin_misses) == (1, 1)  # no spin in the rest
