"""An idle host makes no wake-ups (:mod:`ahp.engine.alarm`): the flood watch and the
scrollback packer sleep while no terminal prints, and wake a while after the first output.

Checked: the pure watch's ``silent`` verdict; a real host whose terminal prints nothing
runs neither watcher for a second; output after the sleep wakes them and a flood is
still seen; the last terminal disposed while they sleep ends them; a terminal the watch
changed, disposed while it sleeps, is freed at once (no waiting frame holds it).
"""

from __future__ import annotations

import gc
import weakref

import trio

from ahp.engine import open_host
from ahp.engine.priority import INTERACTIVE_TICKS, FloodWatch
from tests.helpers import wait_for_text
from tests.test_faults import eventually

WATCHERS = ("_watch_floods", "_pack_scrollback")


class _Steps(trio.abc.Instrument):
    """Task steps of the host's watchers."""

    def __init__(self) -> None:
        self.count = 0

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        if task.name.endswith(WATCHERS):
            self.count += 1


def _silent(watch: FloodWatch[str], **counters: tuple[int, int]) -> bool:
    """Whether ``watch`` is silent after one tick of ``counters``."""
    watch.tick(counters)
    return watch.silent


def test_the_watch_is_silent_only_when_nothing_can_change() -> None:
    watch: FloodWatch[str] = FloodWatch(flood_bytes=100, quiet_bytes=10, on=2, off=2)
    assert not _silent(watch, a=(0, 0))  # a new key: its first rate comes at the next tick
    assert _silent(watch, a=(0, 0))
    assert not _silent(watch, a=(5, 0))  # it printed (even below the quiet threshold)
    assert _silent(watch, a=(5, 0))
    assert not _silent(watch, a=(5, 0), b=(0, 0))  # "b" is new
    assert not _silent(watch, a=(5, 1), b=(0, 0))  # "a" was typed in
    for _ in range(INTERACTIVE_TICKS):
        # Typed in lately: a flood elsewhere would be lowered on a tick.
        assert not _silent(watch, a=(5, 1), b=(0, 0))
    assert _silent(watch, a=(5, 1), b=(0, 0))
    for output in (1000, 2000, 3000):
        assert not _silent(watch, a=(5, 1), b=(output, 0))
    assert not _silent(watch, a=(5, 1), b=(3000, 0))  # "b" floods until FLOOD_OFF quiet ticks
    assert _silent(watch, a=(5, 1), b=(3000, 0))


async def test_an_idle_host_runs_no_watcher_and_output_wakes_them() -> None:
    steps = _Steps()
    trio.lowlevel.add_instrument(steps)
    try:
        async with open_host() as host:
            host.flood_nice = 0
            quiet = await host.create_terminal(argv=["cat"])
            flood = await host.create_terminal(
                argv=["sh", "-c", "read _; exec sh -c 'while :; do echo flooding; done'"]
            )
            alarm = host._alarm
            await eventually(lambda: alarm.armed and alarm.rings == 0)
            await trio.sleep(0.3)  # (the packer's last period, then it waits too)
            before = steps.count
            await trio.sleep(1.0)
            assert steps.count == before  # four looks a second each, before
            await quiet.send_input("x\r")  # output: the echo
            await wait_for_text(quiet, "x")
            await eventually(lambda: alarm.rings >= 1)
            await eventually(lambda: steps.count > before)  # (a tick or a period later)
            await flood.send_input("\r")
            await eventually(lambda: flood.flooding)  # the watch ticks again
            await host.dispose(flood.uri)
    finally:
        trio.lowlevel.remove_instrument(steps)


async def test_the_watchers_end_when_the_last_terminal_goes_while_they_sleep() -> None:
    async with open_host() as host:
        terminal = await host.create_terminal(argv=["cat"])
        await eventually(lambda: host._alarm.armed)
        assert host._floods is not None and host._packing
        await host.dispose(terminal.uri)
        await eventually(lambda: host._floods is None and not host._packing)
        assert not host._alarm.armed
        again = await host.create_terminal(argv=["cat"])  # and they start again
        assert host._floods is not None and host._packing
        await host.dispose(again.uri)


async def test_a_terminal_the_watch_changed_is_freed_while_it_sleeps() -> None:
    """Regression: the flood keeper's loop over its changes left the last terminal it
    changed in a local of the frame that then slept until output."""
    gc.collect()
    gc.disable()
    try:
        async with open_host() as host:
            host.flood_nice = 0
            keep = await host.create_terminal(argv=["cat"])  # (the host keeps watching)
            flood = await host.create_terminal(
                argv=["sh", "-c", "timeout 1 sh -c 'while :; do echo flooding; done'; exec cat"]
            )
            ref = weakref.ref(flood)

            def flooding() -> bool:
                terminal = ref()
                return terminal is not None and terminal.flooding

            await eventually(flooding)
            await eventually(lambda: not flooding())  # (a change back, applied)
            await eventually(lambda: host._alarm.armed)  # (both watchers asleep)
            await host.dispose(flood.uri)
            del flood
            await trio.lowlevel.checkpoint()
            assert ref() is None
            await host.dispose(keep.uri)
    finally:
        gc.enable()
