"""Test helpers shared by the real-pty test modules."""

from __future__ import annotations

import os
from collections.abc import Callable

import trio

from ahp.engine import Terminal
from ahp.protocol import ActionEnvelope, Snapshot, TerminalState

#: Generous absolute bound for any single wait on real I/O.
TIMEOUT = 20


async def wait_for_state(
    terminal: Terminal, predicate: Callable[[TerminalState], bool], timeout: float = TIMEOUT
) -> TerminalState:
    """Follow the terminal until ``predicate(state)`` holds; return that state."""
    with trio.fail_after(timeout):
        async with terminal.subscribe() as sub:
            async for item in sub:
                if isinstance(item, Snapshot | ActionEnvelope) and predicate(terminal.state):
                    return terminal.state
    raise AssertionError(f"{terminal.uri} closed before the condition held: {terminal.state!r}")


async def wait_for_text(terminal: Terminal, needle: str, timeout: float = TIMEOUT) -> str:
    state = await wait_for_state(terminal, lambda s: needle in s.text(), timeout)
    return state.text()


def own_autogroup() -> str | None:
    """This process's autogroup line; None without autogroups, or when a cgroup (not
    an autogroup) schedules it: the kernel then shows an empty file."""
    try:
        with open("/proc/self/autogroup") as f:
            return f.read().strip() or None
    except FileNotFoundError:
        return None


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def stat_fields(pid: int) -> list[str] | None:
    """Fields of ``/proc/<pid>/stat`` after the command name (state, ppid, ...), or
    None when the process is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None


def children() -> list[int]:
    """Pids whose parent is this process (zombies included)."""
    me = os.getpid()
    return [
        int(entry)
        for entry in os.listdir("/proc")
        if entry.isdigit()
        and (fields := stat_fields(int(entry))) is not None
        and int(fields[1]) == me
    ]


def zombies() -> list[int]:
    return [pid for pid in children() if (fields := stat_fields(pid)) and fields[0] == "Z"]


async def kill_and_reap(proc: trio.Process) -> None:
    """Kill ``proc`` if it still runs, wait for it and close its stdout (shielded:
    for ``finally`` blocks)."""
    with trio.CancelScope(shield=True):
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        if proc.stdout is not None:
            await proc.stdout.aclose()


async def first_line(proc: trio.Process, timeout: float = TIMEOUT) -> bytes:
    """What ``proc`` printed on stdout up to its first newline (a server's URL), read in
    chunks (so it may hold more after it); fails if stdout ends first or ``timeout`` passes."""
    assert proc.stdout is not None
    line = b""
    with trio.fail_after(timeout):
        while not line.endswith(b"\n"):
            chunk = await proc.stdout.receive_some(4096)
            assert chunk, line
            line += chunk
    return line
