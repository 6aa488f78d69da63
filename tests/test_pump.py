"""The pty-read task's thread (:mod:`ahp.pty.pump`): on pipes and a real pty."""

from __future__ import annotations

import contextlib
import fcntl
import os
import pty
import sys
import threading
from collections.abc import Callable, Iterator

import pytest
import trio

from ahp.engine import open_host
from ahp.engine.pty_read import TRICKLE_PAUSE
from ahp.protocol.state import TerminalState
from ahp.pty import pump as pump_module
from ahp.pty.pump import PUMP_AHEAD, PUMP_THREADS, PUMP_TURN, ReadPump, reader_running
from tests.helpers import TIMEOUT, wait_for_state


@pytest.fixture
def pipe() -> Iterator[tuple[int, int]]:
    """A pipe the fixture closes: a test must not close either end itself."""
    r, w = os.pipe()
    os.set_blocking(r, False)
    yield r, w
    for fd in (r, w):
        with contextlib.suppress(OSError):
            os.close(fd)


async def _reader_gone() -> None:
    """Wait until the shared reader thread has ended (it ends within a round)."""
    while reader_running():  # noqa: ASYNC110 (a thread's state: no event to wait on)
        await trio.sleep(0.01)


async def _close_all(pumps: list[ReadPump], pipes: list[tuple[int, int]]) -> None:
    for pump in pumps:
        await pump.aclose()
    for r, w in pipes:
        os.close(r)
        os.close(w)


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


async def test_a_pump_reports_eof() -> None:
    # Its own pipe, not the fixture's: the fixture would close ``w`` a second time,
    # and by then the number may be the reader thread's wake pipe (which then closed
    # the next test's pipe when the thread ended: EBADF in a loaded run).
    r, w = os.pipe()
    os.set_blocking(r, False)
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
        os.close(r)


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


async def test_many_pumps_share_one_thread_which_ends_with_the_last() -> None:
    """Eight busy fds are read by at most PUMP_THREADS threads (not eight); closing
    one pump leaves the others served; the threads are gone once the last pump is
    closed."""
    pipes = [os.pipe() for _ in range(8)]
    for r, _ in pipes:
        os.set_blocking(r, False)
    pumps = [ReadPump(r, is_pty=False, quiet=60.0) for r, _ in pipes]
    threads_before = threading.active_count()
    try:
        for pump in pumps:
            pump.start()
        for index, (_, w) in enumerate(pipes):
            os.write(w, bytes([65 + index]) * 5000)
        with trio.fail_after(TIMEOUT):
            for index, pump in enumerate(pumps):
                got = b""
                while len(got) < 5000:
                    data = await pump.take()
                    assert data
                    got += data
                assert got == bytes([65 + index]) * 5000
            assert reader_running()
            assert threading.active_count() <= threads_before + PUMP_THREADS
            await pumps[0].aclose()
            os.write(pipes[1][1], b"still read")
            assert await pumps[1].take() == b"still read"
            for pump in pumps[1:]:
                await pump.aclose()
            await _reader_gone()
    finally:
        await _close_all(pumps, pipes)


async def test_a_cancelled_task_closes_its_pump_and_the_thread_ends(
    pipe: tuple[int, int],
) -> None:
    """A pty-read task cancelled while it waits in take() (a dispose): its aclose in a
    finally still runs, the thread drops the fd and ends."""
    r, w = pipe
    with trio.fail_after(TIMEOUT):
        async with trio.open_nursery() as nursery:

            async def reader() -> None:
                pump = ReadPump(r, is_pty=False, quiet=60.0)
                pump.start()
                try:
                    while True:
                        await pump.take()
                finally:
                    await pump.aclose()

            nursery.start_soon(reader)
            os.write(w, b"some")
            await trio.sleep(0.05)
            nursery.cancel_scope.cancel()
        await _reader_gone()


def test_the_reader_thread_count_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from ahp.pty.pump import _int_from_env

    for value, expected in (("", 2), ("x", 2), ("0", 1), ("4", 4), ("1000", 64)):
        monkeypatch.setenv("AHP_PUMP_THREADS", value)
        assert _int_from_env("AHP_PUMP_THREADS", 2, 1, 64) == expected


def _thread_nices() -> dict[int, int]:
    """Every thread of this process: its niceness (``/proc/self/task/TID/stat``)."""
    nices = {}
    for tid in os.listdir("/proc/self/task"):
        with contextlib.suppress(OSError):
            with open(f"/proc/self/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            nices[int(tid)] = int(fields[16])
    return nices


async def test_the_reader_thread_runs_below_the_loops_priority(
    pipe: tuple[int, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """With PUMP_NICE (``$AHP_PUMP_NICE``) a reader thread's niceness is the loop's plus
    it (at most 19), in a thread of its own; the loop's own is untouched."""
    monkeypatch.setattr(pump_module, "PUMP_NICE", 5)
    r, w = pipe
    loop_nice = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    with trio.fail_after(TIMEOUT):
        await _reader_gone()  # (an earlier test's reader thread: a new one is started)
    before = set(_thread_nices())
    os.write(w, b"x" * 1000)
    pump = ReadPump(r, is_pty=False, quiet=10.0)
    pump.start()
    try:
        with trio.fail_after(TIMEOUT):
            assert await pump.take() == b"x" * 1000  # (the thread has run)
        new = {tid: nice for tid, nice in _thread_nices().items() if tid not in before}
        assert min(19, loop_nice + 5) in new.values(), (new, loop_nice)
        assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == loop_nice
    finally:
        await pump.aclose()


async def test_a_reader_runs_at_most_pump_ahead_ahead_of_the_loop() -> None:
    """Three pipes of 200 KiB per reader thread and tasks that do not take: each reader
    stops once its pumps hold PUMP_AHEAD (plus one turn) in all, leaving the rest in
    the kernel; a take lets it read on."""
    size = 200 * 1024
    assert 2 * size < PUMP_AHEAD + PUMP_TURN < 3 * size
    count = 3 * PUMP_THREADS
    bound = PUMP_THREADS * (PUMP_AHEAD + PUMP_TURN)
    pipes = [os.pipe() for _ in range(count)]
    pumps = []
    try:
        for r, w in pipes:
            os.set_blocking(r, False)
            os.set_blocking(w, False)
            fcntl.fcntl(w, fcntl.F_SETPIPE_SZ, 256 * 1024)  # (64 KiB by default)
            assert os.write(w, b"y" * size) == size
            pumps.append(ReadPump(r, is_pty=False, quiet=10.0))
        for pump in pumps:
            pump.start()
        with trio.fail_after(TIMEOUT):
            while sum(p.size for p in pumps) < PUMP_AHEAD:  # noqa: ASYNC110 (a thread's progress)
                await trio.sleep(0.01)
            await trio.sleep(0.2)  # (time to read on, were it allowed to)
            held = sum(p.size for p in pumps)
            assert PUMP_AHEAD <= held <= bound < count * size, held
            got = 0
            while got < count * size:  # each take lets its reader read on: all arrives
                for pump in pumps:
                    if pump.size:
                        got += len(await pump.take() or b"")
                await trio.sleep(0.01)
            assert got == count * size
    finally:
        await _close_all(pumps, pipes)


async def test_lingering_pumps_past_the_ahead_bound_are_all_woken(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Streaming output lingers below PUMP_WAKE before its task is woken; pumps that
    linger past PUMP_AHEAD together make the thread hold, and a hold ends only with a
    take: so the hold wakes every lingering task first (else they wait on each other
    for ever). Eight pipes of 60 KiB each on one thread: all delivered, whole."""
    monkeypatch.setattr(pump_module, "PUMP_THREADS", 1)
    size = 60 * 1024
    assert pump_module.PUMP_LINGER_FROM <= size < pump_module.PUMP_WAKE
    assert 8 * size > PUMP_AHEAD
    pipes = [os.pipe() for _ in range(8)]
    for r, _ in pipes:
        os.set_blocking(r, False)
    pumps = [ReadPump(r, is_pty=False, quiet=60.0) for r, _ in pipes]
    got = [b""] * len(pumps)

    async def take(index: int) -> None:
        while len(got[index]) < size:
            data = await pumps[index].take()
            assert data
            got[index] += data

    try:
        for pump in pumps:
            pump.start()
        with trio.fail_after(TIMEOUT):
            async with trio.open_nursery() as nursery:
                for index in range(len(pumps)):
                    nursery.start_soon(take, index)
                await trio.sleep(0.05)  # (every task waits in take())
                for index, (_, w) in enumerate(pipes):
                    os.write(w, bytes([65 + index]) * size)
        assert got == [bytes([65 + index]) * size for index in range(len(pumps))]
    finally:
        await _close_all(pumps, pipes)


async def test_which_waiting_tasks_are_woken_and_which_linger() -> None:
    """The thread's rule (pure, the lock aside): a round that read PUMP_LINGER_FROM or
    more of output below PUMP_WAKE lingers; a short read (an echo), EOF, an end or a
    full-enough pump wakes at once; a linger ends after PUMP_LINGER."""
    due, linger = pump_module._due, pump_module.PUMP_LINGER
    pumps = [ReadPump(-1, is_pty=False) for _ in range(5)]
    try:
        streaming, echo, at_eof, full, idle = pumps
        for pump in pumps:
            pump.waiting = True
            pump.size = pump_module.PUMP_LINGER_FROM
        full.size = pump_module.PUMP_WAKE
        at_eof.eof = True
        lingering: dict[ReadPump, float] = {}
        hot = {streaming, at_eof, full}
        assert due([streaming, echo, at_eof, full], hot, lingering, 10.0) == [echo, at_eof, full]
        assert lingering == {streaming: 10.0}
        assert due([streaming], hot, lingering, 10.0 + linger / 2) == []  # more came
        assert due([], set(), lingering, 10.0 + linger / 2) == []  # nothing came
        assert due([], set(), lingering, 10.0 + 2 * linger) == [streaming] and not lingering
        assert due([streaming], {streaming}, lingering, 20.0) == []
        assert due([streaming], set(), lingering, 20.0) == [streaming]  # the burst's tail
        assert due([idle], set(), lingering, 30.0) == [idle] and not lingering
        streaming.waiting = False
        assert due([streaming], {streaming}, lingering, 40.0) == [] and not lingering
    finally:
        for pump in pumps:
            await pump.aclose()


async def test_a_program_writing_a_line_at_a_time_is_read_in_batches() -> None:
    """A program printing a line at a time writes each line by itself (a shell loop with
    command detection's trap; a program printing to a line-buffered tty): every line was
    a round of every stage (100 000 ``echo``s: 21 us each in the server, 26 in a client's
    mirror). A short batch that follows the last one closely, with nothing typed in
    between, now makes the next read wait TRICKLE_PAUSE: the lines gather in the
    kernel's buffer. A pause comes before every batch after the first of the stream (or
    the stream broke for longer than TRICKLE_GAP): batches <= elapsed / TRICKLE_PAUSE,
    whatever the load (it was 1307 batches in 0.69 s). Every line arrives once, in order."""
    lines = 2000
    writer = (
        "import os, time\n"
        f"for i in range({lines}):\n"
        "    os.write(1, b'%d\\n' % i)\n"
        "    time.sleep(0.0002)\n"
    )
    async with open_host() as host:
        with trio.fail_after(TIMEOUT):
            started = trio.current_time()
            term = await host.create_terminal(argv=[sys.executable, "-c", writer])
            await wait_for_state(term, lambda s: s.exited)
            elapsed = trio.current_time() - started
    text = term.state.text().replace("\r\n", "\n")
    assert text.split("\n")[:lines] == [str(i) for i in range(lines)]
    assert term._read.trickle_pauses > 0
    assert term.read_batches <= elapsed / TRICKLE_PAUSE + 2, (term.read_batches, elapsed)


def _holds_x(count: int) -> Callable[[TerminalState], bool]:
    return lambda state: state.text().count("x") >= count


async def test_a_keystrokes_echo_never_waits_for_a_stream() -> None:
    """Keys typed one at a time into ``cat``, each after the last one's echo: input comes
    between every two batches, so no read waits (an echo is handed on at once)."""
    async with open_host() as host:
        with trio.fail_after(TIMEOUT):
            term = await host.create_terminal(argv=["cat"])
            for n in range(40):
                await term.send_input("x")
                await wait_for_state(term, _holds_x(n + 1))
    assert term._read.trickle_pauses == 0
