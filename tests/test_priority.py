"""Flooding terminals run below the host while they flood (:mod:`ahp.engine.priority`):
the pure watch against a reference model, then real terminals printing in a loop
and their autogroup's nice value in ``/proc`` (where the kernel has autogroups)."""

from __future__ import annotations

import errno
from typing import cast

import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st

from ahp.engine import Terminal, open_host, priority
from ahp.engine.priority import (
    FLOOD_BYTES,
    FLOOD_NICE,
    FLOOD_OFF,
    FLOOD_ON,
    FLOOD_TICK,
    NICE_WEIGHTS,
    FloodKeeper,
    FloodWatch,
    flood_level,
)
from ahp.pty import child as child_module
from ahp.pty import pump
from tests.helpers import own_autogroup, wait_for_text
from tests.test_faults import eventually

#: Prints for 3 s (several MB/s), then is quiet.
FLOOD_THEN_QUIET = (
    "timeout 3 sh -c 'while :; do echo flooding flooding flooding flooding; done'; "
    "echo; echo quiet now; exec sleep 60"
)


def _group_nice(pid: int | None) -> int | None:
    """The nice value of ``pid``'s autogroup; None without autogroups."""
    try:
        with open(f"/proc/{pid}/autogroup") as f:
            words = f.read().split()
    except OSError:
        return None
    return int(words[-1]) if words else None


# -- the watch (pure) ---------------------------------------------------------------------------


def _model(
    deltas: list[int], typed: list[bool], *, flood: int, quiet: int, on: int, off: int, wait: int
) -> list[tuple[bool, bool]]:
    """(flooding, lowered) of key "f" after each tick, the plain way: "f" gets the
    output ``deltas``, "i" (never any output) the inputs ``typed``."""
    flooding, out, busy, calm, idle = False, [], 0, 0, wait + 1
    for delta, key_typed in zip(deltas, typed, strict=True):
        busy = busy + 1 if delta > flood else 0
        calm = calm + 1 if delta < quiet else 0
        if busy >= on:
            flooding = True
        elif calm >= off:
            flooding = False
        idle = 0 if key_typed else idle + 1
        out.append((flooding, flooding and idle <= wait))
    return out


@given(
    st.lists(st.tuples(st.sampled_from([0, 100, 1000, 5000, 20000]), st.booleans()), max_size=60),
    st.integers(1, 4),
    st.integers(1, 5),
    st.integers(0, 6),
)
def test_the_watch_follows_the_model(
    ticks: list[tuple[int, bool]], on: int, off: int, wait: int
) -> None:
    """Each change is asked for once, when the wanted state flips, and confirmed; a
    flood is lowered only while another terminal had input in the last ``wait`` ticks."""
    watch: FloodWatch[str] = FloodWatch(
        flood_bytes=4000, quiet_bytes=500, on=on, off=off, interactive=wait
    )
    output = inputs = 0
    applied, seen = (False, False), []
    assert watch.tick({"f": (0, 0), "i": (0, 0)}) == []  # (new keys only start counting)
    for delta, typed in ticks:
        output += delta
        inputs += typed
        changes = watch.tick({"f": (output, 0), "i": (0, inputs)})
        for key, flooding, lowered in changes:
            assert key == "f" and (flooding, lowered) != applied
            watch.settled(key, flooding, lowered)
            applied = (flooding, lowered)
        assert len(changes) <= 1
        seen.append(applied)
    deltas = [d for d, _ in ticks]
    inputs_by_tick = [t for _, t in ticks]
    assert seen == _model(deltas, inputs_by_tick, flood=4000, quiet=500, on=on, off=off, wait=wait)
    assert watch.lowered() == (["f"] if applied[1] else [])


def test_an_unconfirmed_change_is_asked_for_again_and_a_gone_key_forgotten() -> None:
    watch: FloodWatch[str] = FloodWatch()
    big = FLOOD_BYTES + 1
    watch.tick({"a": (0, 0), "b": (0, 0)})
    for i in range(1, FLOOD_ON):
        assert watch.tick({"a": (i * big, 0), "b": (0, 1)}) == []
    n = FLOOD_ON
    assert watch.tick({"a": (n * big, 0), "b": (0, 2)}) == [("a", True, True)]
    # Refused (the kernel's rate limit): asked for again at the next tick.
    n += 1
    assert watch.tick({"a": (n * big, 0), "b": (0, 2)}) == [("a", True, True)]
    watch.settled("a", True, True)
    n += 1
    assert watch.tick({"a": (n * big, 0), "b": (0, 2)}) == []
    for _ in range(FLOOD_OFF - 1):
        assert watch.tick({"a": (n * big, 0), "b": (0, 2)}) == []
    assert watch.tick({"a": (n * big, 0), "b": (0, 2)}) == [("a", False, False)]
    watch.tick({"b": (0, 2)})  # "a" disposed: forgotten
    assert watch.lowered() == []
    assert watch.tick({"a": (0, 0), "b": (0, 2)}) == []  # back: counts from here
    watch.settled("gone", True, True)  # (a late confirmation for a forgotten key is ignored)


def test_a_flood_with_nobody_typing_beside_it_is_not_lowered() -> None:
    """A flood alone (or beside terminals nobody typed in for INTERACTIVE_TICKS) is
    marked, not lowered; its own input does not count (it is the one flooding)."""
    watch: FloodWatch[str] = FloodWatch()
    big = FLOOD_BYTES + 1
    watch.tick({"a": (0, 0), "b": (0, 0)})
    changes = []
    for i in range(1, FLOOD_ON + 1):
        changes += watch.tick({"a": (i * big, i), "b": (0, 0)})
    assert changes == [("a", True, False)]


def test_an_input_between_ticks_lowers_a_flood_at_once() -> None:
    watch: FloodWatch[str] = FloodWatch()
    big = FLOOD_BYTES + 1
    watch.tick({"a": (0, 0), "b": (0, 0)})
    for i in range(1, FLOOD_ON + 1):
        for key, flooding, lowered in watch.tick({"a": (i * big, 0), "b": (0, 0)}):
            watch.settled(key, flooding, lowered)
    assert watch.floods_unlowered
    assert watch.typed("a") == []  # (the flood's own input: it is not waiting on anyone)
    assert watch.typed("b") == [("a", True, True)]
    watch.settled("a", True, True)
    assert watch.lowered() == ["a"]
    assert watch.typed("gone") == []


@pytest.mark.parametrize(
    "kwargs",
    [
        {"quiet_bytes": FLOOD_BYTES + 1},
        {"on": 0},
        {"off": 0},
        {"quiet_bytes": -1},
        {"interactive": -1},
    ],
)
def test_the_watch_refuses_nonsense(kwargs: dict[str, int]) -> None:
    with pytest.raises(ValueError, match="need"):
        FloodWatch(**kwargs)


# -- real terminals -----------------------------------------------------------------------------


async def test_a_flooding_terminal_runs_below_the_host_beside_a_typist() -> None:
    """A terminal printing several MB/s is marked flooding; alone it keeps its
    priority, and once someone types in another terminal its autogroup gets
    FLOOD_NICE, until its output is quiet: then its own value (here ``child_nice`` 3)
    again. The typist's terminal and the server's own group are never touched.
    Without autogroups (a cgroup schedules this process: containers) only the
    terminal's wanted value is checked."""
    ours = own_autogroup()
    async with open_host() as host, trio.open_nursery() as nursery:
        host.child_nice = 3
        typist = await host.create_terminal(argv=["cat"])
        flood = await host.create_terminal(argv=["sh", "-c", FLOOD_THEN_QUIET])
        await eventually(lambda: flood.flooding)
        assert flood.group_nice == 3  # nobody types beside it

        async def type_slowly() -> None:
            while True:
                await typist.send_input("x")
                await trio.sleep(0.1)

        nursery.start_soon(type_slowly)
        await eventually(lambda: flood.group_nice == FLOOD_NICE)
        if ours is not None:
            await eventually(lambda: _group_nice(flood.pid) == FLOOD_NICE)
            assert _group_nice(typist.pid) == 3
            assert own_autogroup() == ours
        assert typist.group_nice == 3 and not typist.flooding
        await wait_for_text(flood, "quiet now")
        await eventually(lambda: flood.group_nice == 3 and not flood.flooding)
        if ours is not None:
            await eventually(lambda: _group_nice(flood.pid) == 3)
        assert host._floods is not None
        nursery.cancel_scope.cancel()
    assert host._floods is None  # the watch ended with the last terminal


async def test_a_keystroke_lowers_a_flood_before_the_next_tick(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The first keystroke after a quiet spell does not wait for the watch's tick:
    the input path wakes the watch (here the next tick is a minute away)."""
    async with open_host() as host:
        typist = await host.create_terminal(argv=["cat"])
        flood = await host.create_terminal(argv=["sh", "-c", FLOOD_THEN_QUIET])
        await eventually(lambda: flood.flooding)
        monkeypatch.setattr(priority, "FLOOD_TICK", 60.0)
        await trio.sleep(2 * FLOOD_TICK)  # (the tick under way passes; the next is far)
        assert flood.flooding and flood.group_nice == 0
        await typist.send_input("x")
        await eventually(lambda: flood.group_nice == FLOOD_NICE, timeout=2)


async def test_flood_nice_zero_leaves_every_terminal_as_it_is() -> None:
    """With ``flood_nice`` 0 a flood is still seen (its reads go to a pump's thread),
    but no priority changes."""
    async with open_host() as host:
        host.flood_nice = 0
        flood = await host.create_terminal(argv=["sh", "-c", FLOOD_THEN_QUIET])
        await eventually(lambda: flood.flooding)
        assert flood.group_nice == 0
        if own_autogroup() is not None:
            assert _group_nice(flood.pid) == 0
        await wait_for_text(flood, "quiet now")
        await eventually(lambda: not flood.flooding)


async def test_a_flooding_terminals_small_batches_are_read_by_a_thread() -> None:
    """Output in small batches (a child the host runs below it, starved on a busy
    machine) is read on the loop unless the terminal floods: then by a pump."""
    async with open_host() as host:
        host.flood_nice = 0
        trickle = await host.create_terminal(
            argv=["sh", "-c", "while :; do echo trickle; sleep 0.005; done"]
        )
        await wait_for_text(trickle, "trickle")
        await trio.sleep(0.3)
        assert not pump.reader_running()  # (batches of a line: read by the task)
        trickle.set_flooding(True)
        await eventually(pump.reader_running)
        await host.dispose(trickle.uri)
    assert not pump.reader_running()


async def test_a_refused_autogroup_change_is_tried_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """The kernel takes one autogroup change per 100 ms from an unprivileged process
    (EAGAIN, not reproducible as root): set_group_nice says "again"; a child gone or a
    kernel without autogroups (other errors) says "nothing to do"."""
    async with open_host() as host:
        terminal = await host.create_terminal(argv=["sleep", "60"])
        child = terminal._child
        assert child is not None
        failure = errno.EAGAIN

        def refuse(pid: int, nice: int) -> bool:
            raise OSError(failure, "refused")

        monkeypatch.setattr(child_module, "_renice_autogroup", refuse)
        assert not terminal.set_flooding(True, FLOOD_NICE)
        failure = errno.ESRCH
        assert terminal.set_flooding(True, FLOOD_NICE)
        assert terminal.group_nice == FLOOD_NICE
        assert terminal.set_flooding(False)  # (back to 0: "nothing to do" too)
        assert terminal.group_nice == 0


async def test_a_pipe_terminal_is_never_reniced() -> None:
    """Pipe children share the server's own group: nothing to do, at once."""
    async with open_host() as host:
        terminal = await host.create_terminal(argv=["sleep", "60"], use_pty=False)
        ours = own_autogroup()
        assert terminal.set_flooding(True, FLOOD_NICE)
        assert own_autogroup() == ours


@pytest.mark.parametrize(
    ("nice", "floods", "level"),
    [(10, 0, 10), (10, 1, 10), (10, 2, 14), (10, 4, 17), (10, 30, 19), (0, 5, 0), (3, 4, 10)],
)
def test_more_floods_go_deeper_to_weigh_what_one_does(nice: int, floods: int, level: int) -> None:
    assert flood_level(nice, floods) == level
    if nice > 0 and floods > 0 and level < 19:
        assert floods * NICE_WEIGHTS[level] <= NICE_WEIGHTS[nice]


async def test_several_floods_share_one_floods_weight() -> None:
    """Two floods beside a typist are lowered deeper than one (flood_level)."""
    async with open_host() as host, trio.open_nursery() as nursery:
        typist = await host.create_terminal(argv=["cat"])
        floods = [await host.create_terminal(argv=["sh", "-c", FLOOD_THEN_QUIET]) for _ in "ab"]

        async def type_slowly() -> None:
            while True:
                await typist.send_input("x")
                await trio.sleep(0.1)

        nursery.start_soon(type_slowly)
        wanted = flood_level(FLOOD_NICE, 2)
        assert wanted > FLOOD_NICE
        await eventually(lambda: all(f.group_nice == wanted for f in floods))
        if own_autogroup() is not None:
            await eventually(lambda: all(_group_nice(f.pid) == wanted for f in floods))
        nursery.cancel_scope.cancel()


class _FakeTerminal:
    """What FloodKeeper reads of a terminal; its output grows by a flood per look, and
    ``refuse`` priority changes are refused (the kernel's rate limit) first."""

    def __init__(self, nonce: str, *, floods: bool, refuse: int = 0) -> None:
        self.nonce = nonce
        self.floods = floods
        self.refuse = refuse
        self.spec = type("Spec", (), {"use_pty": True})()
        self.closing = False
        self.flooding = False
        self.inputs = 0
        self.nice = 0
        self._output = 0

    @property
    def bytes_read(self) -> int:
        if self.floods:
            self._output += 2 * FLOOD_BYTES
        return self._output

    def set_flooding(self, flooding: bool, nice: int = 0) -> bool:
        self.flooding = flooding
        if self.refuse and nice != self.nice:
            self.refuse -= 1
            return False
        self.nice = nice
        return True


async def test_a_refused_change_of_level_is_set_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """When a second flood makes both go deeper and the kernel refuses the first one's
    new level, it is set again at a later pass (before, the keeper counted the level as
    applied and the refused flood stayed at the old one)."""
    monkeypatch.setattr(priority, "FLOOD_TICK", 0.01)
    first = _FakeTerminal("a", floods=True)
    second = _FakeTerminal("b", floods=False)
    typist = _FakeTerminal("t", floods=False)
    terminals = [first, second, typist]
    keeper = FloodKeeper(lambda: cast("list[Terminal]", terminals), lambda: FLOOD_NICE)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(keeper.run)

        async def typing() -> None:
            while True:
                typist.inputs += 1
                await trio.sleep(0.01)

        nursery.start_soon(typing)
        await eventually(lambda: first.nice == FLOOD_NICE)
        first.refuse = 1  # (its move to the deeper level is refused once)
        second.floods = True
        deeper = flood_level(FLOOD_NICE, 2)
        await eventually(lambda: second.nice == deeper)
        await eventually(lambda: first.nice == deeper, timeout=5)
        assert typist.nice == 0
        nursery.cancel_scope.cancel()
