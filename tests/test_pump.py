"""The pty-read task's thread (:mod:`ahp.pty.pump`): on pipes and a real pty."""

from __future__ import annotations

import contextlib
import os
import pty

import pytest
import trio

from ahp.engine import open_host
from ahp.pty.pump import ReadPump
from tests.helpers import TIMEOUT, wait_for_state


@pytest.fixture
def pipe() -> tuple[int, int]:
    r, w = os.pipe()
    os.set_blocking(r, False)
    yield r, w
    for fd in (r, w):
        with contextlib.suppress(OSError):
            os.close(fd)


async def _take_all(pump: ReadPump) -> bytes:
    got = b""
    while (data := await pump.take()) is not None:
        if not data:
            break
        got += data
    return got


async def test_a_pump_hands_over_what_was_written_and_ends_when_quiet(
    pipe: tuple[int, int],
) -> None:
    r, w = pipe
    os.write(w, b"x" * 10_000)
    pump = ReadPump(r, is_pty=False, quiet=0.02)
    pump.start()
    try:
        with trio.fail_after(TIMEOUT):
            assert await _take_all(pump) == b"x" * 10_000
            assert await pump.take() is None  # quiet: reading goes back to the task
    finally:
        await pump.aclose()


async def test_a_pump_reports_eof(pipe: tuple[int, int]) -> None:
    r, w = pipe
    os.write(w, b"last words")
    os.close(w)
    pump = ReadPump(r, is_pty=False, quiet=1.0)
    pump.start()
    try:
        with trio.fail_after(TIMEOUT):
            assert await pump.take() == b"last words"
            assert await pump.take() == b""
    finally:
        await pump.aclose()


async def test_the_buffer_bound_stops_the_thread_reading(pipe: tuple[int, int]) -> None:
    """Past ``buffer_bytes`` untaken, the thread waits (the writer then blocks); taking
    lets it go on, and nothing is lost."""
    r, w = pipe
    os.set_blocking(w, False)
    pump = ReadPump(r, is_pty=False, buffer_bytes=4096, quiet=1.0)
    pump.start()
    sent = 0
    try:
        with trio.fail_after(TIMEOUT):
            # Fill the pipe and the pump's buffer: writes stop succeeding.
            stuck = 0
            while stuck < 20:
                try:
                    sent += os.write(w, b"y" * 4096)
                    stuck = 0
                except BlockingIOError:
                    stuck += 1
                    await trio.sleep(0.01)
            reads = pump.reads
            await trio.sleep(0.1)
            assert pump.reads == reads  # over its bound, the thread reads nothing more
            got = b""
            while len(got) < sent:
                data = await pump.take()
                assert data, data
                got += data
            assert got == b"y" * sent
    finally:
        await pump.aclose()


async def test_close_while_the_thread_waits_for_room_or_data(pipe: tuple[int, int]) -> None:
    r, w = pipe
    os.write(w, b"z" * 8192)
    pump = ReadPump(r, is_pty=False, buffer_bytes=1024, quiet=10.0)
    pump.start()
    with trio.fail_after(TIMEOUT):
        with trio.move_on_after(0.05):
            await trio.sleep_forever()  # the thread fills its buffer and waits for room
        await pump.aclose()
    idle = ReadPump(r, is_pty=False, quiet=60.0)  # would poll for a minute: closed at once
    idle.start()
    with trio.fail_after(TIMEOUT):
        with trio.move_on_after(0.05) as scope:
            await idle.take()  # cancelled: nothing is lost
        assert scope.cancelled_caught
        await idle.aclose()


async def test_a_pty_master_reports_eof_once_the_slave_closes() -> None:
    master, slave = pty.openpty()
    os.set_blocking(master, False)
    try:
        os.write(slave, b"from the child\n")
        os.close(slave)
        pump = ReadPump(master, is_pty=True, quiet=1.0)
        pump.start()
        try:
            with trio.fail_after(TIMEOUT):
                assert await _take_all(pump) == b"from the child\r\n"
        finally:
            await pump.aclose()
    finally:
        os.close(master)


async def test_sustained_output_through_the_engine_arrives_whole() -> None:
    """A burst large enough to start the pump (several full batches), then a pause,
    then more: every byte reaches the state once, in order."""
    async with open_host() as host:
        with trio.fail_after(TIMEOUT):
            term = await host.create_terminal(
                argv=[
                    "sh",
                    "-c",
                    "seq 1 60000; sleep 0.2; echo middle; seq 60001 70000",
                ]
            )
        await wait_for_state(term, lambda s: s.exited)
    text = term.state.text().replace("\r\n", "\n")
    lines = text.split("\n")
    expected = [str(i) for i in range(1, 60001)] + ["middle"]
    expected += [str(i) for i in range(60001, 70001)]
    assert lines[: len(expected)] == expected
    assert term.read_batches < 60000 // 50  # batched, not one read per line
