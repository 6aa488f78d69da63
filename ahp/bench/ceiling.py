"""The baseline: what a bare Trio reader gets out of the pty, with nothing else.

Why: the tty layer, not the reader, sets the ceiling (a cooked pty master hands
out ~3-4 KB per read whatever the buffer size), so every figure of the engine
and the server is judged as a fraction of this one, measured in the same run.
The reader does what the engine's reader does and nothing more: read until
EAGAIN, then ``wait_readable`` (waiting before every read costs 30-45%). The
echo baseline writes one byte to the master of a pty running ``cat`` and reads
the echo back: the kernel's round trip, to compare the sidecar's with.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence

import attrs
import trio

from ahp.bench.procfs import MachineCpu
from ahp.bench.threads import SAMPLE_SELF, ThreadBudget, ThreadSampler
from ahp.bench.workload import Workload
from ahp.pty import Child, SpawnSpec, spawn

__all__ = ["READ_SIZE", "BareRun", "bare_echo", "bare_read", "child_env"]

READ_SIZE = 64 * 1024
#: Round trips before the measured ones (caches, first-time allocations).
ECHO_WARMUP = 20
#: Unmeasured keystrokes before an idle-then-type series (each costs its pause).
IDLE_WARMUP = 3


@attrs.frozen
class BareRun:
    seconds: float
    nbytes: int
    reads: int
    #: CPU time of this process (the reader) and busy cores of the whole machine.
    cpu_seconds: float
    machine_cores: float
    #: Where the reader's thread and ``cat`` spent the run (None: not measured).
    threads: ThreadBudget | None = None


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["TERM"] = "xterm-256color"
    return env


async def _spawn(argv: Sequence[str], cwd: str) -> Child:
    return await spawn(SpawnSpec(argv=tuple(argv), cwd=cwd, env=child_env()))


async def bare_read(workload: Workload, repeat: int = 1) -> BareRun:
    """``cat`` the workload into a pty and read the master until EOF (EIO)."""
    child = await _spawn(workload.gate_argv(repeat), str(workload.path.parent))
    try:
        fd = child.input_fd
        read = child.read_nowait
        total = reads = 0
        machine = MachineCpu()
        with ThreadSampler(os.getpid(), interval=SAMPLE_SELF) as sampler:
            cpu = time.process_time()
            start = time.perf_counter()
            os.write(fd, b"\r")  # release the gate: output starts now
            while True:
                data = read(READ_SIZE)
                if data is None:
                    await child.wait_readable()
                    continue
                if not data:
                    break
                total += len(data)
                reads += 1
            seconds = time.perf_counter() - start
            cpu = time.process_time() - cpu
            machine.stop()
    finally:
        with trio.CancelScope(shield=True):
            await child.terminate(grace=0.5)
    return BareRun(
        seconds=seconds,
        nbytes=total,
        reads=reads,
        cpu_seconds=cpu,
        machine_cores=machine.busy_cores,
        threads=sampler.budget,
    )


async def bare_echo(count: int, cwd: str, *, pause: float = 0.0) -> list[float]:
    """Seconds per round trip: one byte written to a ``cat`` pty, its echo read back
    (after sleeping ``pause`` seconds, for the idle-then-type case)."""
    child = await _spawn(["cat"], cwd)
    try:
        fd = child.input_fd
        samples: list[float] = []
        warmup = IDLE_WARMUP if pause else ECHO_WARMUP
        for i in range(warmup + count):
            if pause:
                await trio.sleep(pause)
            start = time.perf_counter()
            os.write(fd, b"x")
            got = b""
            while b"x" not in got:
                data = child.read_nowait(1024)
                if data is None:
                    await child.wait_readable()
                    continue
                if not data:
                    raise RuntimeError("cat exited during the echo benchmark")
                got += data
            if i >= warmup:
                samples.append(time.perf_counter() - start)
            if i % 64 == 63:
                await trio.lowlevel.checkpoint()
    finally:
        with trio.CancelScope(shield=True):
            await child.terminate(grace=0.5)
    return samples
