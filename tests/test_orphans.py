"""What a ``serve`` leaves behind, and what outlives it (probe M findings 1, 4, 6).

Why: a sidecar run as PID 1 of its container adopts every process that detaches
from a terminal and must reap it (else zombies pile up until it exits); processes
that detached (``setsid``) must not outlive its exit; a killed server's children
must not run on (their death signal); SIGHUP must stop it cleanly. Each case runs
a real ``python -m ahp serve`` and real commands through the real client, and
looks at the processes in ``/proc``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio

from ahp.pty import orphans
from ahp.pty.process import own_child
from tests.helpers import TIMEOUT, first_line, stat_fields
from tests.test_cli import PROCESS_TIMEOUT, _env, cli
from tests.test_pty import make_spec

REPO = Path(__file__).resolve().parents[1]


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def _alive(pid: int) -> bool:
    fields = stat_fields(pid)
    return fields is not None and fields[0] not in ("Z", "X")


def _children(pid: int) -> list[int]:
    return [
        int(entry)
        for entry in os.listdir("/proc")
        if entry.isdigit() and (f := stat_fields(int(entry))) is not None and int(f[1]) == pid
    ]


def _zombie_children(pid: int) -> list[int]:
    return [c for c in _children(pid) if (f := stat_fields(c)) is not None and f[0] == "Z"]


def _matching(root: int, text: str) -> list[int]:
    return [pid for pid in orphans.descendants(root) if _cmdline(pid) == text]


async def _until(predicate: object, what: str, timeout: float = TIMEOUT) -> None:
    assert callable(predicate)
    with trio.move_on_after(timeout):
        while not predicate():  # noqa: ASYNC110 (no event says when /proc changes)
            await trio.sleep(0.05)
        return
    raise AssertionError(f"timed out waiting until {what}")


@asynccontextmanager
async def _serve(
    *args: str, prefix: tuple[str, ...] = ()
) -> AsyncIterator[tuple[trio.Process, str]]:
    """A real ``serve`` (under ``prefix``, e.g. ``unshare``); yields it and its URL."""
    proc = await trio.lowlevel.open_process(
        [*prefix, sys.executable, "-m", "ahp", "serve", "--no-rc", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=_env(),
        cwd=str(REPO),
    )
    try:
        line = await first_line(proc, PROCESS_TIMEOUT)
        yield proc, line.decode().split()[0]
    finally:
        with trio.CancelScope(shield=True):
            if proc.returncode is None:
                proc.send_signal(signal.SIGKILL)
            await proc.wait()
            if proc.stdout is not None:
                await proc.stdout.aclose()


def _kill_all(pids: list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _ns_pid(pid: int) -> int:
    """``pid``'s pid in its own (innermost) PID namespace."""
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[-1]) for line in f if line.startswith("NSpid:"))


def _main_thread_children() -> list[int] | None:
    """The children the main thread forked (None: the kernel does not tell)."""
    try:
        with open(f"/proc/self/task/{os.getpid()}/children") as f:
            return [int(pid) for pid in f.read().split()]
    except FileNotFoundError:
        return None


def _foreign_child() -> subprocess.Popen[bytes]:
    """A child not started by ``ahp.pty``: exits 3 at once."""
    return subprocess.Popen(["sh", "-c", "exit 3"])


def _unshare_permitted() -> bool:
    try:
        done = subprocess.run(
            ["unshare", "--pid", "--fork", "--mount-proc", "true"],
            capture_output=True,
            timeout=PROCESS_TIMEOUT,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0


async def test_serve_as_pid_1_reaps_the_orphans_it_adopts() -> None:
    """As PID 1 of a PID namespace (a container with no init), the sidecar adopts what
    detaches from its terminals: their zombies are reaped (probe M: 10 stayed)."""
    if not _unshare_permitted():
        pytest.skip("unshare --pid --fork --mount-proc is not permitted here (needs root)")
    async with _serve("--port", "0", prefix=("unshare", "--pid", "--fork", "--mount-proc")) as (
        proc,
        url,
    ):
        (server,) = _children(proc.pid)  # unshare's child: PID 1 inside
        assert _ns_pid(server) == 1
        script = "for i in 1 2 3 4 5; do (sleep 0.2 &); setsid sleep 0.3 & done; wait; echo done"
        done = await cli("run", url, "--", script)
        assert done.returncode == 0, done
        # Every sleep has exited (they outlived their parents: adopted by the server) ...
        await _until(
            lambda: not _matching(server, "sleep 0.2") + _matching(server, "sleep 0.3"),
            "the sleeps exited",
        )
        # ... and none is left a zombie.
        await _until(lambda: not _zombie_children(server), "the orphans' zombies are reaped")
        os.kill(server, signal.SIGTERM)  # (unshare passes no signal on)
        with trio.fail_after(PROCESS_TIMEOUT):
            assert await proc.wait() == 0


async def test_detached_processes_do_not_outlive_the_server() -> None:
    """``setsid cmd &`` and ``(setsid cmd &)`` from a terminal are killed when the server
    exits after SIGTERM (probe M: they ran on)."""
    async with _serve("--port", "0", "--drain-timeout", "1") as (proc, url):
        # (Until both are sessions of their own, sid == pid: `run` disposes its terminal at
        # once, and a sleep not yet past its setsid died with the terminal's session.)
        script = (
            "setsid sleep 1103 & (setsid sleep 1104 &); for i in $(seq 200); do n=0;"
            " for p in $(pgrep -f '^sleep 110[34]$'); do"
            ' [ "$(ps -o sid= -p $p | tr -d " ")" = "$p" ] && n=$((n+1)); done;'
            " [ $n = 2 ] && break; sleep 0.05; done; echo started"
        )
        done = await cli("run", url, "--", script)
        assert done.returncode == 0, done
        found: list[int] = []

        def started() -> bool:
            found[:] = [p for t in ("sleep 1103", "sleep 1104") for p in _matching(proc.pid, t)]
            return len(found) == 2

        try:
            await _until(started, "both detached sleeps run below the server")
            proc.send_signal(signal.SIGTERM)
            with trio.fail_after(PROCESS_TIMEOUT):
                assert await proc.wait() == 0
            assert [pid for pid in found if _alive(pid)] == []
        finally:
            _kill_all(found)


async def test_an_exec_command_dies_with_a_killed_server() -> None:
    """``ahp exec -- sleep 101`` while the server is SIGKILLed: the command dies by its
    death signal (probe M: it ran on), however long after its start (the fork is made
    by the loop's thread, not by a worker thread that may exit when idle)."""
    async with _serve("--port", "0") as (proc, url):
        client = await trio.lowlevel.open_process(
            [sys.executable, "-m", "ahp", "exec", url, "--", "sleep", "101"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=_env(),
        )
        found: list[int] = []
        try:

            def started() -> bool:
                found[:] = _matching(proc.pid, "sleep 101")
                return bool(found)

            await _until(started, "the exec'd sleep runs")
            proc.send_signal(signal.SIGKILL)
            await proc.wait()
            await _until(lambda: not any(_alive(pid) for pid in found), "the sleep died")
        finally:
            _kill_all(found)
            with trio.CancelScope(shield=True):
                client.kill()
                await client.wait()


async def test_sighup_shuts_down_cleanly(tmp_path: Path) -> None:
    """SIGHUP stops the server as SIGINT does: exit 0, its socket file removed, the
    terminals' processes gone, a HUP-ignoring command included (probe M: it died by
    the signal, left its socket and a terminal running)."""
    sock = tmp_path / "ahp.sock"
    async with _serve("--unix", str(sock)) as (proc, url):
        client = await trio.lowlevel.open_process(
            [sys.executable, "-m", "ahp", "run", url, "--", "trap '' HUP; sleep 1000"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=_env(),
        )
        found: list[int] = []
        try:

            def started() -> bool:
                found[:] = _matching(proc.pid, "sleep 1000")
                return bool(found)

            await _until(started, "the command runs")
            proc.send_signal(signal.SIGHUP)
            with trio.fail_after(PROCESS_TIMEOUT):
                assert await proc.wait() == 0
            assert not sock.exists()
            assert [pid for pid in found if _alive(pid)] == []
        finally:
            _kill_all(found)
            with trio.CancelScope(shield=True):
                client.kill()
                await client.wait()


async def test_children_are_forked_by_the_loop_thread() -> None:
    """The death signal follows the thread that forked: a child of a trio worker thread
    would be killed when that thread exits idle (about 10 s later). So the fork is made
    by the thread that runs the loop (here the main thread)."""
    from ahp.pty import spawn

    if _main_thread_children() is None:
        pytest.skip("no /proc/PID/task/TID/children on this kernel (CONFIG_PROC_CHILDREN)")
    for use_pty in (True, False):
        child = await spawn(make_spec("sleep", "30", use_pty=use_pty))
        try:
            assert child.pid in (_main_thread_children() or [])
        finally:
            await child.terminate(0)


async def test_the_reaper_takes_foreign_zombies_and_leaves_our_statuses() -> None:
    """:func:`orphans.reap_zombies` reaps a zombie child that ``ahp.pty`` did not start,
    and reaps ours through their Process, which keeps the status for its owner."""
    from ahp.pty import spawn

    ours = await spawn(make_spec("sh", "-c", "exit 7", use_pty=False))
    foreign = _foreign_child()
    try:
        await _until(
            lambda: all((f := stat_fields(p)) and f[0] == "Z" for p in (ours.pid, foreign.pid)),
            "both exited",
        )
        assert own_child(ours.pid) is not None
        reaped, complete = orphans.reap_zombies()
        assert (reaped, complete) == (1, True)
        assert stat_fields(foreign.pid) is None  # reaped: gone
        assert own_child(ours.pid) is None  # reaped through its Process ...
        with trio.fail_after(TIMEOUT):
            assert await ours.wait() == 7  # ... which kept the status
    finally:
        await ours.terminate(0)
        foreign.returncode = 0  # (reaped above: Popen must not wait for it again)
