"""The engine in-process: pty -> read -> parse -> reduce -> subscribers, no sockets.

Why: this is what an agent embedding the library gets, and it isolates the
engine's own cost from the WebSocket's. One run creates a terminal behind the
workload's gate, attaches N in-process subscribers (``term.subscribe``),
releases the gate and times until every subscriber has seen
``terminal/exited``. Each subscriber counts the characters it received (the
snapshot's text plus every ``terminal/data``) so a run that lost output is
visible, and the data envelopes it got: with the bytes, that is the batching
figure (how many kernel reads became one action). The in-process echo
(:func:`engine_echo`) splits the sidecar's keystroke latency into the engine's
part and the WebSocket's.
"""

from __future__ import annotations

import time

import attrs
import trio

from ahp.bench.procfs import MachineCpu
from ahp.bench.workload import Workload
from ahp.engine import Host, Subscription
from ahp.protocol.actions import ActionEnvelope, TerminalData, TerminalExited
from ahp.protocol.state import Snapshot, TerminalState

__all__ = ["FAST_SUBSCRIBER_BYTES", "EngineRun", "SubscriberCount", "engine_echo", "engine_run"]

#: Outbox bound for the benchmark's subscribers: they keep up, so it is never reached
#: (a resynchronisation would show in ``resyncs``).
FAST_SUBSCRIBER_BYTES = 256 * 1024 * 1024
#: Round trips before the measured ones.
ECHO_WARMUP = 20


@attrs.define
class SubscriberCount:
    chars: int = 0
    data_envelopes: int = 0
    resyncs: int = 0
    exit_seen: bool = False


@attrs.frozen
class EngineRun:
    seconds: float
    cpu_seconds: float
    machine_cores: float
    subscribers: tuple[SubscriberCount, ...]
    #: Data actions the terminal published (one per read batch) and the bytes read.
    read_batches: int
    bytes_read: int


async def _consume(sub: Subscription, count: SubscriberCount) -> None:
    async with sub:
        async for item in sub:
            if isinstance(item, Snapshot):
                if count.chars or count.data_envelopes:
                    count.resyncs += 1
                state = item.state
                if isinstance(state, TerminalState):
                    count.chars += len(state.text())
            elif isinstance(item, ActionEnvelope):
                action = item.action
                if isinstance(action, TerminalData):
                    count.chars += len(action.data)
                    count.data_envelopes += 1
                elif isinstance(action, TerminalExited):
                    count.exit_seen = True
                    return


async def engine_run(
    host: Host, workload: Workload, subscribers: int, *, repeat: int = 1
) -> EngineRun:
    """One gated ``cat`` through the engine to ``subscribers`` in-process subscribers."""
    term = await host.create_terminal(
        argv=workload.gate_argv(repeat), cwd=str(workload.path.parent)
    )
    counts = [SubscriberCount() for _ in range(subscribers)]
    try:
        subs = [term.subscribe(max_bytes=FAST_SUBSCRIBER_BYTES) for _ in range(subscribers)]
        machine = MachineCpu()
        cpu = time.process_time()
        start = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for sub, count in zip(subs, counts, strict=True):
                nursery.start_soon(_consume, sub, count)
            await term.send_input("\r")
        seconds = time.perf_counter() - start
        cpu = time.process_time() - cpu
        machine.stop()
    finally:
        with trio.CancelScope(shield=True):
            await host.dispose(term.uri)
    return EngineRun(
        seconds=seconds,
        cpu_seconds=cpu,
        machine_cores=machine.busy_cores,
        subscribers=tuple(counts),
        read_batches=term.read_batches,
        bytes_read=term.bytes_read,
    )


async def engine_echo(host: Host, count: int, cwd: str) -> list[float]:
    """Seconds per keystroke round trip in-process: ``send_input`` to the echo's envelope.

    The same ``cat`` terminal as the WebSocket echo, without the socket: the
    difference between the two figures is what the server and the client add.
    """
    term = await host.create_terminal(argv=["cat"], cwd=cwd)
    samples: list[float] = []
    try:
        async with term.subscribe(max_bytes=FAST_SUBSCRIBER_BYTES) as sub:
            for i in range(ECHO_WARMUP + count):
                start = time.perf_counter()
                await term.send_input("x")
                async for item in sub:
                    if (
                        isinstance(item, ActionEnvelope)
                        and isinstance(item.action, TerminalData)
                        and "x" in item.action.data
                    ):
                        break
                if i >= ECHO_WARMUP:
                    samples.append(time.perf_counter() - start)
    finally:
        with trio.CancelScope(shield=True):
            await host.dispose(term.uri)
    return samples
