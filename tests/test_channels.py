"""The stages' two channel moves (``ahp.engine.channels``): take everything waiting, hand on."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from ahp.engine.channels import hand_on, take_joined


async def test_take_joined_takes_everything_waiting_in_one_step() -> None:
    send, receive = trio.open_memory_channel[bytes](4)
    for piece in (b"ab", b"c", b"def"):
        send.send_nowait(piece)
    assert await take_joined(receive) == b"abcdef"
    send.send_nowait(b"x")  # (one item alone comes back as it is)
    assert await take_joined(receive) == b"x"


async def test_take_joined_also_takes_the_items_of_waiting_senders() -> None:
    send, receive = trio.open_memory_channel[bytes](1)
    async with trio.open_nursery() as nursery:
        for piece in (b"1", b"2", b"3"):
            nursery.start_soon(send.send, piece)
            await trio.testing.wait_all_tasks_blocked()
        assert await take_joined(receive) == b"123"


async def test_take_joined_returns_what_came_before_the_end_then_ends() -> None:
    send, receive = trio.open_memory_channel[bytes](4)
    send.send_nowait(b"last")
    await send.aclose()
    assert await take_joined(receive) == b"last"
    with pytest.raises(trio.EndOfChannel):
        await take_joined(receive)


async def test_take_joined_waits_for_the_first_item() -> None:
    send, receive = trio.open_memory_channel[bytes](4)
    got: list[bytes] = []
    async with trio.open_nursery() as nursery:

        async def take() -> None:
            got.append(await take_joined(receive))

        nursery.start_soon(take)
        await trio.testing.wait_all_tasks_blocked()
        assert got == []
        await send.send(b"late")
    assert got == [b"late"]


async def test_hand_on_waits_only_when_the_channel_is_full() -> None:
    send, receive = trio.open_memory_channel[int](1)
    await hand_on(send, 1)  # room: no wait
    with trio.move_on_after(0.05) as waited:
        await hand_on(send, 2)  # full: waits (backpressure), cancellable
    assert waited.cancelled_caught
    assert receive.receive_nowait() == 1
    with pytest.raises(trio.WouldBlock):
        receive.receive_nowait()  # the cancelled hand-on sent nothing
