"""Where a server's threads and its terminal's program spent a run: running, waiting, asleep.

Why: issue 23 asks, where a goal cannot be met, for a measurement of what bounds it, and
a stream's rate is set by the busiest part of its pipeline, not by the sum of their CPU.
The kernel keeps, per thread, the nanoseconds it ran and the nanoseconds it was runnable
but waited for a CPU (``/proc/PID/task/TID/schedstat``); the rest of its time it slept
(in a system call -- a pty ``read`` waiting for the tty's flush worker, ``epoll_wait`` --
or on a lock such as the GIL). :class:`ThreadSampler` reads them for a server process's
threads and for its descendants running the terminal's program (``cat``), and
:meth:`ThreadSampler.stop` turns them into shares of the run's time: the server's main
thread (an event loop, for every server measured here), its busiest other thread (a pty
reader thread in the sidecar), and the program.

Sampling: a thread of its own reads the counters every :data:`SAMPLE` seconds, because a
pty reader thread ends with its pump (50 ms after the output pauses) and only samples
see it. A sample reads two small files per thread and child (~0.2 ms of CPU with the
GIL held for a process of seven threads), in the process that measures: the bench's,
beside the servers it measures; for the bare reader, which is that process, every
:data:`SAMPLE_SELF` seconds (its one thread lives through the run).

Linux only; where ``schedstat`` is missing (a kernel built without it) nothing is
reported (:meth:`ThreadSampler.stop` returns None).
"""

from __future__ import annotations

import os
import threading
import time
from typing import Final

import attrs

__all__ = ["OTHER_SHARE", "SAMPLE", "SAMPLE_SELF", "Shares", "ThreadBudget", "ThreadSampler"]

#: Seconds between two samples.
SAMPLE: Final = 0.025
#: Seconds between two samples of the measuring process itself (see the module).
SAMPLE_SELF: Final = 0.1
#: A server thread other than the main one is reported when it ran at least this share
#: of the run (a pty reader thread runs a fifth or more; Trio's cached workers, the
#: scrollback packer's thread, far less).
OTHER_SHARE: Final = 0.05


@attrs.frozen
class Shares:
    """Fractions of the run's time (each 0-1): on a CPU, runnable but waiting for one,
    and the rest of the thread's life in the run, asleep."""

    ran: float
    waited: float
    slept: float


@attrs.frozen
class ThreadBudget:
    """One run's shares: the server's main thread, its busiest other thread (None when
    no other ran :data:`OTHER_SHARE`), and the program's processes together (None when
    none was seen)."""

    main: Shares
    busiest: Shares | None
    program: Shares | None


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            return f.read()
    except OSError:
        return None  # (it ended meanwhile)


def _counters(text: str | None) -> tuple[int, int] | None:
    if text is None:
        return None
    fields = text.split()
    return (int(fields[0]), int(fields[1])) if len(fields) >= 2 else None


def _tasks(pid: int | str) -> list[str]:
    try:
        return os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []


class ThreadSampler:
    """Samples ``pid``'s threads and its descendants whose name starts with ``program``
    (see the module docstring) between :meth:`start` and :meth:`stop`.

    Ownership: the sampling thread is started by :meth:`start` and joined by
    :meth:`stop` (within one :data:`SAMPLE`); a sampler is used once. As a context
    manager it starts on entry and stops on exit, whatever ends the block, keeping the
    result in :attr:`budget`.
    """

    def __init__(self, pid: int, *, program: str = "cat", interval: float = SAMPLE) -> None:
        self.pid = pid
        self.program = program
        self.interval = interval
        #: key -> (time, ns ran, ns waited), first and last seen; keys are thread ids
        #: of ``pid`` and ``"p<pid>"`` for the program's processes.
        self._first: dict[int | str, tuple[float, int, int]] = {}
        self._last: dict[int | str, tuple[float, int, int]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="thread-sampler", daemon=True)
        self._own = -1
        self._started = 0.0
        self._running = False  # past start()'s first look
        #: What :meth:`stop` found (set on leaving the ``with`` block).
        self.budget: ThreadBudget | None = None

    def __enter__(self) -> ThreadSampler:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.budget = self.stop()  # (joins its thread within one sample)

    def _seen(self, key: int | str, now: float, counters: tuple[int, int] | None) -> None:
        if counters is not None:
            if key not in self._first:
                # One that began after start() began at zero: what it did before its
                # first sample counts too (a busy thread can hold the GIL past several).
                self._first[key] = (now, *counters) if not self._running else (now, 0, 0)
            self._last[key] = (now, *counters)

    def _take(self) -> None:
        now = time.perf_counter()
        children: list[str] = []
        for task in _tasks(self.pid):
            tid = int(task)
            if tid != self._own:
                self._seen(tid, now, _counters(_read(f"/proc/{self.pid}/task/{task}/schedstat")))
            children += (_read(f"/proc/{self.pid}/task/{task}/children") or "").split()
        for child in children:  # (every descendant: grandchildren are appended as found)
            for task in _tasks(child):
                children += (_read(f"/proc/{child}/task/{task}/children") or "").split()
            if (_read(f"/proc/{child}/comm") or "").startswith(self.program):
                self._seen(f"p{child}", now, _counters(_read(f"/proc/{child}/schedstat")))

    def _run(self) -> None:
        self._own = threading.get_native_id()
        while not self._stop.wait(self.interval):
            self._take()

    def start(self) -> None:
        self._started = time.perf_counter()
        self._take()
        self._running = True
        self._thread.start()

    def ran_seconds(self) -> float:
        """CPU seconds ``pid``'s threads ran between :meth:`start` and the last sample
        (after :meth:`stop`: to its end). Each thread counts from :meth:`start` (or its
        birth) to its last sample, so one that ended meanwhile keeps what was seen of it
        (at most a :data:`SAMPLE` of its end is lost), and the sum never goes back."""
        return sum(
            (self._last[k][1] - self._first[k][1]) / 1e9 for k in self._last if isinstance(k, int)
        )

    def stop(self) -> ThreadBudget | None:
        """The run's shares (None when the server's main thread was never read)."""
        self._stop.set()
        self._thread.join()
        self._take()
        wall = time.perf_counter() - self._started
        if self.pid not in self._last or wall <= 0:
            return None

        def shares(key: int | str) -> Shares:
            t0, ran0, waited0 = self._first[key]
            t1, ran1, waited1 = self._last[key]
            ran, waited = (ran1 - ran0) / 1e9 / wall, (waited1 - waited0) / 1e9 / wall
            return Shares(ran, waited, max(0.0, (t1 - t0) / wall - ran - waited))

        others = [shares(k) for k in self._last if isinstance(k, int) and k != self.pid]
        busiest = max(others, key=lambda s: s.ran + s.waited, default=None)
        if busiest is not None and busiest.ran < OTHER_SHARE:
            busiest = None
        programs = [shares(k) for k in self._last if isinstance(k, str)]
        program = (
            Shares(
                sum(s.ran for s in programs),
                sum(s.waited for s in programs),
                sum(s.slept for s in programs),
            )
            if programs
            else None
        )
        return ThreadBudget(main=shares(self.pid), busiest=busiest, program=program)
