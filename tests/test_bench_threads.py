"""The bench's thread budget (``ahp.bench.threads``) on real threads and processes.

A busy thread of this process, a ``cat`` copying ``/dev/zero`` as a grandchild (under
``sh``), and a main thread asleep: each part lands where the kernel's accounting puts it.
No timing is asserted beyond "ran some" and "slept most": shares on a loaded machine vary.
"""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import threading
import time
from typing import Final

from ahp.bench.threads import OTHER_SHARE, ThreadSampler

#: What the busy threads hash: hashlib releases the GIL for data this large, so the
#: sampler's thread (Python, needing the GIL) is not starved by the thread it watches.
_BLOCK: Final = bytes(1 << 20)


def _spin(stop: threading.Event) -> None:
    while not stop.is_set():
        hashlib.sha256(_BLOCK).digest()


def test_the_main_thread_a_busy_thread_and_the_program_are_told_apart() -> None:
    stop = threading.Event()
    spinner = threading.Thread(target=_spin, args=(stop,))
    cat = subprocess.Popen(
        ["sh", "-c", "cat /dev/zero > /dev/null; exit 0"], start_new_session=True
    )
    try:
        time.sleep(0.05)  # (sh has started its cat)
        sampler = ThreadSampler(os.getpid())
        sampler.start()
        spinner.start()
        time.sleep(0.4)  # the main thread sleeps
        stop.set()
        spinner.join()
        budget = sampler.stop()
    finally:
        stop.set()
        os.killpg(cat.pid, signal.SIGKILL)  # (sh and its cat)
        cat.wait()
    assert budget is not None
    assert budget.main.slept > 0.5, budget
    assert budget.busiest is not None and budget.busiest.ran >= OTHER_SHARE, budget
    assert budget.program is not None and budget.program.ran > 0.05, budget
    for part in (budget.main, budget.busiest, budget.program):
        assert min(part.ran, part.waited, part.slept) >= 0, part
        assert part.ran + part.waited + part.slept <= 1.1, part


def test_a_quiet_process_has_no_busiest_thread_and_no_program() -> None:
    sampler = ThreadSampler(os.getpid(), program="no-such-program")
    sampler.start()
    time.sleep(0.3)  # (long enough that a test runner's own threads stay under the share)
    budget = sampler.stop()
    assert budget is not None
    assert budget.busiest is None and budget.program is None
    assert budget.main.slept > 0.5


def test_a_process_that_is_gone_reports_nothing() -> None:
    gone = subprocess.Popen(["true"])
    gone.wait()
    sampler = ThreadSampler(gone.pid)
    sampler.start()
    assert sampler.stop() is None


def test_the_cpu_ran_counts_a_thread_that_ended_meanwhile_and_never_goes_back() -> None:
    """A thread that spins, is sampled, and ends before the sampler stops keeps what
    was seen of it (the sum of live threads' counters would have dropped by it)."""
    sampler = ThreadSampler(os.getpid())
    sampler.start()
    spun: list[float] = []

    def spin() -> None:
        spent = time.thread_time()
        end = time.perf_counter() + 0.3
        while time.perf_counter() < end:
            hashlib.sha256(_BLOCK).digest()
        spun.append(time.thread_time() - spent)

    worker = threading.Thread(target=spin)
    worker.start()
    worker.join()
    time.sleep(0.1)  # (it ended; a sample or more sees it gone)
    sampler.stop()
    ran = sampler.ran_seconds()
    assert ran >= 0
    # All but the last sample's worth of its life was seen (SAMPLE is 25 ms).
    assert ran >= spun[0] - 0.1, (ran, spun)
