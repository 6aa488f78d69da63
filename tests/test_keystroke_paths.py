"""A keystroke takes the stage path, and that path loses and reorders nothing.

* Every stage's work is done by that stage's task, whatever the input's size: reads
  by pty-read, parsing by parse, the state by the reducer, the pty's input by
  input-write (no shortcut folds one task's work into another's).
* Input reaches the program whole and in order (pastes larger than the pty takes at
  once, keystrokes right behind them).
* Output is published whole and in order (keystrokes' short reads and pastes' long
  ones mixed).
* Dispatched actions apply once each, in order.

Real ptys and real programs throughout.
"""

from __future__ import annotations

import hashlib
import re
import sys
from collections.abc import Callable
from typing import Any

import pytest
import trio
import trio.lowlevel
import trio.testing

from ahp import keystroke
from ahp.engine import Outbox, Published, open_host
from ahp.engine import terminal as terminal_module
from ahp.engine.terminal import REDUCER_QUEUE
from ahp.protocol import ActionEnvelope, TerminalData
from ahp.protocol.actions import ActionOrigin, TerminalInput, TerminalTitleChanged
from ahp.vt import OutputParser
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


def _task() -> str:
    """The running Trio task's function, with its class (``Reduce.task``...)."""
    return ".".join(trio.lowlevel.current_task().name.rsplit(".", 2)[-2:])


async def test_each_stage_s_work_is_done_by_its_own_task(monkeypatch: pytest.MonkeyPatch) -> None:
    # Spies that call through to the real code and record which task ran it.
    seen: dict[str, set[str]] = {"read": set(), "parse": set(), "apply": set(), "write": set()}

    def spy(kind: str, real: Callable[..., Any], when: Callable[[Any], bool]) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            result = real(*args, **kwargs)
            if when(result):
                seen[kind].add(_task())
            return result

        return call

    real_feed = OutputParser.feed
    monkeypatch.setattr(OutputParser, "feed", spy("parse", real_feed, lambda _: True))
    async with open_host() as host:
        term = await host.create_terminal(argv=["cat"], grace=0.2)
        await wait_for_state(term, lambda _: term.running)
        child = term._child
        assert child is not None
        core = term._core
        # (Instance attributes: the tasks call these on the same objects.)
        child.read_nowait = spy("read", child.read_nowait, bool)  # type: ignore[method-assign]
        child.write_nowait = spy("write", child.write_nowait, bool)  # type: ignore[method-assign]
        child.write = spy("write", child.write, lambda _: True)  # type: ignore[method-assign]
        core.apply = spy("apply", core.apply, lambda _: True)  # type: ignore[method-assign]
        sender = Outbox(max_bytes=1 << 26)
        host.hub.subscribe(term.uri, sender)
        with trio.fail_after(TIMEOUT):
            # Keystrokes one at a time, each echo awaited (every stage idle when it
            # comes), from the library and as a client's action; then a paste.
            for i in range(10):
                if i % 2:
                    await term.send_input(f"{i}")
                else:
                    await term.dispatch(
                        TerminalInput(data=f"{i}"),
                        origin=ActionOrigin(clientId="c", clientSeq=i),
                        sender=sender,
                        checkpoint=False,
                    )
                await wait_for_text(term, f"{i}")
            await term.send_input("P" * 3000 + "\r")
            await wait_for_state(term, lambda s: s.text().count("P" * 3000) >= 2)
        recorded = {kind: set(tasks) for kind, tasks in seen.items()}
    assert recorded == {
        "read": {"PtyRead.read_task"},
        "parse": {"Terminal._parse_task"},
        "apply": {"Reduce.task"},
        "write": {"InputWrite.write_task"},
    }


async def test_the_folding_shortcuts_are_gone() -> None:
    # (Issue 23: the caller ran the reducer, the reducer wrote the pty, pty-read parsed.)
    for name in ("INLINE_OUTPUT", "INLINE_DISPATCH", "DIRECT_WRITE"):
        assert not hasattr(terminal_module, name)
    for name in ("_reduce_inline", "_write_direct", "_parse_and_reduce", "_reduce_now"):
        assert not hasattr(terminal_module.Terminal, name)


async def test_the_echo_spin_is_gone() -> None:
    # (Session 12: it did not pay in three A/Bs; see ahp.keystroke's removed tricks.)
    assert "echo_spin" not in keystroke.TRICKS
    assert not hasattr(terminal_module, "ECHO_SPIN")
    assert not hasattr(terminal_module.Terminal, "_spin_for_echo")


async def test_input_reaches_the_program_whole_and_in_order() -> None:
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


async def test_output_is_published_whole_and_in_order() -> None:
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
                    # kilobytes) with keystrokes right behind it.
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
            # Then keystrokes one at a time, each echo awaited (the stages idle each time).
            for i in range(5):
                await term.send_input(f"e{i}")
                await wait_for_text(term, f"e{i}")


async def test_dispatched_actions_apply_once_each_and_in_order() -> None:
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
