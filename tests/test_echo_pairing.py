"""A keystroke's echo waits for the output it causes, and leaves with it (issue 17).

The outbox does not wake its consumer for a lone ``terminal/input`` echo when the
consumer asked for it (:attr:`Outbox.on_lone_echo`); the WebSocket writer then
waits at most ``ECHO_PAIR_WAIT`` for the output. Checked here: the outbox's rule
(in memory), the echo of input that prints nothing still arrives (real server,
real terminal without a pty, raw client), and an echo with its output arrives
in order before it.
"""

from __future__ import annotations

import trio

from ahp.engine.envelopes import Published
from ahp.engine.outbox import Outbox
from ahp.protocol.actions import ActionEnvelope, ActionOrigin, TerminalData, TerminalInput
from tests.helpers import TIMEOUT
from tests.test_faults import T1, collect_until, create, type_, until_text
from tests.wire import peer, running_server

ORIGIN = ActionOrigin(clientId="c", clientSeq=1)


def _echo(seq: int, *, rejected: bool = False) -> Published:
    return Published(
        ActionEnvelope(
            "t",
            TerminalInput("x"),
            seq,
            origin=ORIGIN,
            rejectionReason="no" if rejected else None,
        )
    )


async def test_a_lone_echo_calls_the_hook_instead_of_waking_the_consumer() -> None:
    box = Outbox(max_bytes=10_000)
    calls: list[int] = []
    box.on_lone_echo = lambda: calls.append(len(box))
    taken: list[list[object]] = []

    async def consumer() -> None:
        taken.append(list(await box.get_batch()))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(consumer)
        await trio.testing.wait_all_tasks_blocked()
        assert box.put(_echo(1))
        assert box.put(_echo(2))  # typing on: still asleep
        await trio.testing.wait_all_tasks_blocked()
        assert taken == [] and calls == [1, 2]
        data = Published(ActionEnvelope("t", TerminalData("xx"), 3))
        assert box.put(data)  # the output wakes it: everything, in order
    assert [p.seq for p in taken[0]] == [1, 2, 3]  # type: ignore[attr-defined]
    # A rejected input and a server's own output are never held back.
    assert box.put(_echo(4, rejected=True))
    assert box.put(_echo(5))
    assert calls == [1, 2]


async def test_an_echo_of_input_that_prints_nothing_still_arrives() -> None:
    async with running_server() as srv, peer(srv.url) as p:
        await p.initialize("c1")
        await create(p)
        await p.result("subscribe", {"channel": T1})
        # Nothing may print the keystroke: no pty echo, and a program that reads
        # without echoing (not the shell: readline echoes by itself).
        await type_(p, T1, "stty -echo; echo READY-$((40+2)); cat >/dev/null\r")
        await collect_until(p, T1, until_text("READY-42"))
        # One after another: each echo's wait runs out (the writer's wait scope fires
        # and is replaced each time), and every echo still arrives, in order.
        for key in "xyz":
            await type_(p, T1, key)
            with trio.fail_after(TIMEOUT):
                echo = await p.action(
                    lambda q, key=key: q["action"] == {"type": "terminal/input", "data": key}
                )
            assert echo["origin"]["clientId"] == "c1"
        await type_(p, T1, "\r\x04")  # and the terminal goes on
        await type_(p, T1, "echo DONE-$((40+2))\r")
        await collect_until(p, T1, until_text("DONE-42"))
