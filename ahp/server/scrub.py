"""Secrets wiped from the environment block the process was started with.

Why: ``os.environ.pop("AHP_TOKEN")`` keeps the token out of what the terminals'
processes inherit, but ``/proc/PID/environ`` shows the block the kernel wrote on the
process's stack at ``exec``, whatever was unset since; any process of the same user
reads it without a ptrace right (probe K read both tokens from a terminal with
``tr '\\0' '\\n' </proc/$PPID/environ``). Nothing reads that block after start-up
(CPython copied it into ``os.environ``, libc's ``environ`` array no longer points at
a removed entry), so its values can be overwritten with NUL bytes.

How: the block's bounds are fields 50 and 51 of ``/proc/self/stat``
(``env_start``, ``env_end``); it is read and written through ``/proc/self/mem`` (a
process may write its own memory there; a bad address is an ``OSError``, never a
crash), and only when what is read there is exactly what ``/proc/self/environ``
shows. Best effort: anything unexpected (not Linux, a kernel that refuses writes to
``/proc/self/mem``, a block moved by ``prctl``) leaves it as it was, and says so by
the count returned. The same user can still read the server's memory where it may
ptrace it (``docs/threat-model.md``). Blocking file calls, each immediate; called
once at start-up.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

__all__ = ["environment_bounds", "scrub_start_environment"]


def environment_bounds() -> tuple[int, int] | None:
    """``(env_start, env_end)`` of this process (``/proc/self/stat``), or None."""
    try:
        with open("/proc/self/stat", "rb") as f:
            stat = f.read()
        # Fields after the command name, which is in parentheses and may hold spaces:
        # the first of them is field 3 (state), so field N is at index N - 3.
        fields = stat[stat.rindex(b")") + 2 :].split()
        start, end = int(fields[50 - 3]), int(fields[51 - 3])
    except (OSError, ValueError, IndexError):
        return None
    return (start, end) if 0 < start < end else None


def scrub_start_environment(names: Iterable[str]) -> int:
    """Overwrite the value of every ``NAME=value`` entry of ``names`` in the start-up
    environment block with NUL bytes (``/proc/PID/environ`` then shows ``NAME=``
    followed by NULs); returns how many entries were overwritten (0 when none was
    there or the block could not be written: see the module docstring)."""
    wanted = {name.encode() + b"=" for name in names}
    bounds = environment_bounds()
    if not wanted or bounds is None:
        return 0
    start, end = bounds
    try:
        with open("/proc/self/environ", "rb") as f:
            shown = f.read()
        fd = os.open("/proc/self/mem", os.O_RDWR | os.O_CLOEXEC)
    except OSError:
        return 0
    scrubbed = 0
    try:
        block = os.pread(fd, end - start, start)
        if block != shown:
            return 0  # not the block /proc shows: leave it alone
        offset = 0
        for entry in block.split(b"\0"):
            name, eq, value = entry.partition(b"=")
            if eq and name + b"=" in wanted and value:
                at = start + offset + len(name) + 1
                if os.pwrite(fd, bytes(len(value)), at) == len(value):
                    scrubbed += 1
            offset += len(entry) + 1
    except OSError:
        pass  # (what was overwritten before the error stays overwritten)
    finally:
        os.close(fd)
    return scrubbed
