"""Memory of the sidecar: idle, per idle terminal, and after a very large output.

Why in a fresh worker process each time: RSS only tells something about one
process, and CPython's allocator keeps memory it has once used, so every
figure here starts from a new ``python -m ahp.bench.worker``. The terminals'
programs (``cat``) are separate processes, so "per terminal" is what the
sidecar itself pays: a nursery of tasks, channels, a scanner, a state.

The large-output figure runs ``cat FILE FILE`` (twice the workload) through
the engine with no subscriber and reads RSS afterwards: with bounded
scrollback and a bounded replay log it stays flat whatever the output size.
"""

from __future__ import annotations

import attrs
import trio

from ahp.bench.processes import open_worker
from ahp.bench.procfs import status_kb
from ahp.bench.workload import Workload

__all__ = ["IdleRun", "LargeOutputRun", "idle_run", "large_output_run"]

#: Time given to new terminals' tasks to reach their idle waits before measuring.
SETTLE = 0.5


@attrs.frozen
class IdleRun:
    idle_kb: int
    base_kb: int
    terminals: int
    with_terminals_kb: int

    @property
    def per_terminal_kb(self) -> float:
        return (self.with_terminals_kb - self.base_kb) / self.terminals


@attrs.frozen
class LargeOutputRun:
    before_kb: int
    after_kb: int
    peak_kb: int
    seconds: float
    nbytes: int


async def idle_run(cwd: str, terminals: int) -> IdleRun:
    """RSS of an idle sidecar, and its growth with ``terminals`` idle ``cat`` terminals."""
    async with open_worker() as worker:
        await worker.call("gc")
        await trio.sleep(SETTLE)
        idle = worker.rss_kb()
        # One terminal created and disposed first: first-use imports and caches.
        reply = await worker.call("create", argv=["cat"], cwd=cwd)
        await worker.call("dispose", uri=reply["uri"])
        await worker.call("gc")
        base = worker.rss_kb()
        for _ in range(terminals):
            await worker.call("create", argv=["cat"], cwd=cwd)
        await trio.sleep(SETTLE)
        await worker.call("gc")
        return IdleRun(
            idle_kb=idle, base_kb=base, terminals=terminals, with_terminals_kb=worker.rss_kb()
        )


async def large_output_run(workload: Workload, repeat: int = 2) -> LargeOutputRun:
    """RSS before and after ``cat``-ing the workload ``repeat`` times, nobody subscribed."""
    async with open_worker() as worker:
        await worker.call("gc")
        before = worker.rss_kb()
        reply = await worker.call(
            "run", argv=["cat", *[str(workload.path)] * repeat], cwd=str(workload.path.parent)
        )
        await worker.call("gc")
        return LargeOutputRun(
            before_kb=before,
            after_kb=worker.rss_kb(),
            peak_kb=status_kb(worker.pid, "VmHWM"),
            seconds=reply["seconds"],
            nbytes=reply["bytes_read"],
        )
