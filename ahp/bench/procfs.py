"""Memory and CPU of a process, and what machine this is, from ``/proc``.

Why ``/proc`` and not psutil: it is all the benchmark needs (``VmRSS``,
``VmHWM``, utime+stime) and it adds no dependency. Linux only, like the pty
layer.
"""

from __future__ import annotations

import os
import platform
import sys
import time
from typing import Any

__all__ = ["MachineCpu", "cpu_seconds", "machine_info", "rss_kb", "status_kb"]

_TICKS = os.sysconf("SC_CLK_TCK")


def status_kb(pid: int | str, field: str) -> int:
    """A ``kB`` field of ``/proc/PID/status`` (``VmRSS``, ``VmHWM``), 0 if absent."""
    with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def rss_kb(pid: int | str = "self") -> int:
    """Resident set size of ``pid`` in KiB (the process alone, not its children)."""
    return status_kb(pid, "VmRSS")


def cpu_seconds(pid: int | str = "self") -> float:
    """User + system CPU time consumed by ``pid`` so far (all its threads)."""
    with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    # fields[0] is the state (field 3 of stat(5)); utime and stime are fields 14, 15.
    return (int(fields[11]) + int(fields[12])) / _TICKS


class MachineCpu:
    """Busy cores of the whole machine between :meth:`start` and :meth:`stop` (``/proc/stat``).

    Why: on a shared 2-core machine a pipeline of cat, kernel pty work, server and
    client can be CPU-bound as a whole even when no single process is; this says
    how saturated the machine was during a run (everyone's load included).
    """

    def __init__(self) -> None:
        self._start = self._read()
        self.busy_cores = 0.0

    @staticmethod
    def _read() -> tuple[int, int]:
        with open("/proc/stat", encoding="ascii") as stat:
            fields = [int(x) for x in stat.readline().split()[1:]]
        idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
        return sum(fields) - idle, sum(fields)

    def stop(self) -> float:
        busy, total = self._read()
        busy0, total0 = self._start
        if total > total0:
            self.busy_cores = (busy - busy0) / (total - total0) * (os.cpu_count() or 1)
        return self.busy_cores


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def machine_info() -> dict[str, Any]:
    """Cores, CPU, Python, kernel and the load average when asked (shared machines!)."""
    return {
        "cores": os.cpu_count(),
        "cores_usable": len(os.sched_getaffinity(0)),
        "cpu": _cpu_model(),
        "python": sys.version.split()[0],
        "implementation": platform.python_implementation(),
        "kernel": platform.release(),
        "system": platform.system(),
        "machine": platform.machine(),
        "loadavg": list(os.getloadavg()),
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
