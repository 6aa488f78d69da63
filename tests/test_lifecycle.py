"""A terminal's lifetime at its edges: spawning, failing to spawn, disposing meanwhile.

Test rules (see conftest): real processes; every wait under ``fail_after``. The
races here are driven by Trio's own scheduling (a task that checkpoints until
another one has reached a given point), never by sleeps.
"""

from __future__ import annotations

import contextlib

import pytest
import trio

from ahp.engine import Host, Terminal, TerminalNotFound, open_host
from ahp.pty import SpawnError
from tests.helpers import TIMEOUT, children, open_fds

URI = "ahp-terminal:/racy"


@pytest.mark.parametrize(
    "bad", [{"cwd": "/nonexistent"}, {"argv": ["no-such-program-xyz"]}], ids=["cwd", "program"]
)
async def test_dispose_racing_a_failing_spawn_returns(bad: dict[str, object]) -> None:
    """Regression: the URI was reserved before the launch was validated, the spawn
    failed before ``closed`` was set, and a dispose that found the reserved URI
    waited for ``closed`` (shielded) for good."""
    fds = open_fds()
    async with open_host() as host:

        async def create(done: trio.Event) -> None:
            try:
                with pytest.raises(SpawnError):
                    await host.create_terminal(URI, **bad)  # type: ignore[arg-type]
            finally:
                done.set()

        async def dispose(done: trio.Event, reserved: list[bool]) -> None:
            while not done.is_set():
                if URI in host:
                    reserved.append(True)
                    with contextlib.suppress(TerminalNotFound):
                        await host.dispose(URI)
                    return
                await trio.lowlevel.checkpoint()

        for _ in range(10):  # the scheduler orders the two tasks at random: try often
            done = trio.Event()
            reserved: list[bool] = []
            with trio.fail_after(TIMEOUT):
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(create, done)
                    nursery.start_soon(dispose, done, reserved)
            # A launch that cannot start never reserves its URI.
            assert reserved == []
            assert URI not in host
        assert host.list_terminals() == ()
    assert children() == []
    assert open_fds() == fds


async def test_host_shutdown_racing_a_failing_spawn_returns() -> None:
    """The same race against the host's shutdown (which disposes every terminal)."""

    async def create(host: Host, done: trio.Event) -> None:
        try:
            with pytest.raises(SpawnError):
                await host.create_terminal(URI, cwd="/nonexistent")
        finally:
            done.set()

    for _ in range(10):
        with trio.fail_after(TIMEOUT):
            async with open_host() as host, trio.open_nursery() as nursery:
                done = trio.Event()
                nursery.start_soon(create, host, done)
                while URI not in host and not done.is_set():
                    await trio.lowlevel.checkpoint()
                await host.aclose()
    assert children() == []


async def test_dispose_while_spawning_cancels_the_spawn() -> None:
    """A dispose that arrives while a valid terminal is still starting ends it: the
    create reports it (or returns a terminal that is already closed), and nothing is
    left behind."""
    fds = open_fds()
    async with open_host() as host:

        async def create(outcome: list[Terminal | SpawnError]) -> None:
            try:
                outcome.append(await host.create_terminal(URI, argv=["cat"], grace=0.5))
            except SpawnError as exc:
                outcome.append(exc)

        async def dispose() -> None:
            while URI not in host:
                await trio.lowlevel.checkpoint()
            await host.dispose(URI)

        for _ in range(5):
            outcome: list[Terminal | SpawnError] = []
            with trio.fail_after(TIMEOUT):
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(create, outcome)
                    nursery.start_soon(dispose)
            assert URI not in host
            [result] = outcome
            if not isinstance(result, SpawnError):
                assert result.closed.is_set()
        assert host.list_terminals() == ()
    assert children() == []
    assert open_fds() == fds
