"""Tests for ``ahp.pty``: real ptys, real pipes, real processes.

Test rules:
- No mocks: every test spawns real children through ``spawn`` (or ``spawn_with`` to
  pick the launcher) and talks to them through the public ``Child`` API.
- Every wait on real I/O sits under ``trio.fail_after(TIMEOUT)``, a generous absolute
  bound; synchronisation is on output, exit or /proc state, never on a sleep.
  (``wait_until`` polls /proc under that bound; a poll interval is not a sleep-as-sync.)
- The autouse ``no_leaks`` fixture checks, around every test, that the count of open fds
  and the set of our child processes (zombies included) are unchanged.
- No ``autojump_clock`` here: the children run in real time.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Final

import pytest
import trio
import trio.testing

from ahp.engine import open_host
from ahp.pty import (
    WRITE_CHUNK,
    Child,
    ChildGone,
    SpawnError,
    SpawnSpec,
    spawn,
)
from ahp.pty.launch import default_launcher, ignored_signals, python_launcher, spawn_with
from tests.helpers import stat_fields, wait_for_text

TIMEOUT: Final = 10.0
READ_SIZE: Final = 65536
ENV: Final[Mapping[str, str]] = {"PATH": os.environ.get("PATH", os.defpath), "TERM": "dumb"}

# --- helpers: /proc inspection ---------------------------------------------------------


def open_fd_count() -> int:
    return len(os.listdir("/proc/self/fd"))


def children_of(ppid: int) -> set[int]:
    """Pids (zombies included) whose parent is ``ppid``, by scanning /proc."""
    found = set()
    for name in os.listdir("/proc"):
        if name.isdigit():
            fields = stat_fields(int(name))
            if fields is not None and int(fields[1]) == ppid:
                found.add(int(name))
    return found


def state_of(pid: int) -> str | None:
    """Single-letter process state (R, S, T, Z, ...) or None if the pid is gone."""
    fields = stat_fields(pid)
    return None if fields is None else fields[0]


def comm_of(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except (FileNotFoundError, ProcessLookupError):
        return None


def is_dead(pid: int) -> bool:
    return state_of(pid) in (None, "Z", "X")


async def wait_until(predicate: Callable[[], bool]) -> None:
    """Poll a /proc condition; callers bound it with fail_after."""
    while not predicate():  # noqa: ASYNC110 - /proc state has no event to wait on
        await trio.sleep(0.01)


@pytest.fixture(autouse=True)
def no_leaks() -> Iterator[None]:
    fds_before = open_fd_count()
    children_before = children_of(os.getpid())
    yield
    assert children_of(os.getpid()) == children_before, "a child was left unreaped"
    assert open_fd_count() == fds_before, "an fd leaked"


# --- helpers: driving a child ----------------------------------------------------------


def make_spec(
    *argv: str, cwd: str | Path = "/", cols: int = 80, rows: int = 24, use_pty: bool = True
) -> SpawnSpec:
    return SpawnSpec(argv=argv, cwd=str(cwd), env=ENV, cols=cols, rows=rows, use_pty=use_pty)


@asynccontextmanager
async def running(spec: SpawnSpec, launcher: tuple[str, ...] | None = None) -> AsyncIterator[Child]:
    child = await (spawn(spec) if launcher is None else spawn_with(spec, launcher=launcher))
    try:
        yield child
    finally:
        await child.terminate(grace=0.5)


async def read_until(child: Child, needle: bytes, seen: bytearray | None = None) -> bytes:
    """Read until ``needle`` appears (or EOF); returns everything read."""
    buf = bytearray() if seen is None else seen
    with trio.fail_after(TIMEOUT):
        while needle not in buf:
            data = child.read_nowait(READ_SIZE)
            if data is None:
                await child.wait_readable()
            elif data == b"":
                break
            else:
                buf += data
    return bytes(buf)


async def read_to_eof(child: Child) -> bytes:
    """The brief's read loop: read_nowait until None, then wait_readable; stop at b""."""
    buf = bytearray()
    with trio.fail_after(TIMEOUT):
        while True:
            data = child.read_nowait(READ_SIZE)
            if data is None:
                await child.wait_readable()
            elif data == b"":
                return bytes(buf)
            else:
                buf += data


LAUNCHERS: Final = pytest.mark.parametrize(
    "launcher", [default_launcher(), python_launcher()], ids=["default", "python-helper"]
)

# --- output, EOF and exit status -------------------------------------------------------


async def test_echo_output_is_read_back() -> None:
    async with running(make_spec("echo", "hello pty")) as child:
        assert child.is_pty
        output = await read_to_eof(child)
        assert output == b"hello pty\r\n"  # ONLCR: the pty turns \n into \r\n


@pytest.mark.parametrize("use_pty", [True, False], ids=["pty", "pipes"])
async def test_eof_after_exit_delivers_all_output(use_pty: bool) -> None:
    async with running(make_spec("seq", "1", "100000", use_pty=use_pty)) as child:
        output = await read_to_eof(child)
        assert output.replace(b"\r\n", b"\n") == b"".join(b"%d\n" % i for i in range(1, 100001))
        with trio.fail_after(TIMEOUT):
            assert await child.wait() == 0
        assert child.read_nowait(READ_SIZE) == b""  # EOF is sticky (pty: EIO again)


async def test_pty_eof_follows_session_leader_exit_despite_background_holder() -> None:
    # The background sleep still holds the slave, but the session leader's exit hangs
    # the terminal up: EOF arrives at once and the foreground group gets SIGHUP.
    async with running(make_spec("sh", "-c", "sleep 30 & echo $!")) as child:
        output = await read_to_eof(child)
        with trio.fail_after(TIMEOUT):
            assert await child.wait() == 0
            await wait_until(lambda: is_dead(int(output)))


async def test_exit_code_is_reported() -> None:
    async with running(make_spec("sh", "-c", "exit 3")) as child:
        with trio.fail_after(TIMEOUT):
            assert await child.wait() == 3
        assert child.returncode == 3


async def test_death_by_signal_is_none() -> None:
    async with running(make_spec("sh", "-c", "kill -USR1 $$")) as child:
        with trio.fail_after(TIMEOUT):
            assert await child.wait() is None
        assert child.returncode == -signal.SIGUSR1


# --- controlling terminal, signals, window size ---------------------------------------


@LAUNCHERS
async def test_ctrl_c_interrupts_foreground_job(launcher: tuple[str, ...]) -> None:
    spec = make_spec("sh", "-c", "sleep 30; echo survived")
    async with running(spec, launcher) as child:

        def sleeping_child() -> bool:
            return any(comm_of(pid) == "sleep" for pid in children_of(child.pid))

        with trio.fail_after(TIMEOUT):
            await wait_until(sleeping_child)
        (sleep_pid,) = children_of(child.pid)
        # The pid we hold is the real child: its own session leader, and the pty's
        # foreground process group is its group (setsid did not fork).
        assert os.getsid(child.pid) == child.pid
        assert os.getpgid(child.pid) == child.pid
        assert os.tcgetpgrp(child.output_fd) == child.pid
        assert os.getsid(sleep_pid) == child.pid

        await child.write(b"\x03")
        with trio.fail_after(TIMEOUT):
            assert await child.wait() is None
            await wait_until(lambda: is_dead(sleep_pid))
        assert child.returncode == -signal.SIGINT
        assert b"survived" not in await read_to_eof(child)


async def test_initial_window_size_is_honoured() -> None:
    async with running(make_spec("stty", "size", cols=132, rows=43)) as child:
        assert await read_to_eof(child) == b"43 132\r\n"


async def test_resize_is_seen_by_child() -> None:
    async with running(make_spec("sh", "-c", "read x; stty size")) as child:
        child.resize(100, 30)
        await child.write(b"\n")
        assert b"30 100\r\n" in await read_to_eof(child)


async def test_resize_delivers_sigwinch() -> None:
    script = "trap 'echo winch; exit 0' WINCH; echo ready; while :; do sleep 0.05; done"
    async with running(make_spec("sh", "-c", script)) as child:
        seen = bytearray()
        await read_until(child, b"ready", seen)
        child.resize(90, 20)
        assert b"winch" in await read_until(child, b"winch", seen)
        with trio.fail_after(TIMEOUT):
            assert await child.wait() == 0


async def test_resize_validates_and_is_noop_when_not_applicable() -> None:
    async with running(make_spec("cat", use_pty=False)) as child:
        child.resize(100, 30)  # pipe mode: no-op
        with pytest.raises(ValueError, match="window size"):
            child.resize(0, 30)
    child.resize(100, 30)  # closed: no-op


async def test_signal_group_reaches_the_group() -> None:
    async with running(make_spec("sh", "-c", "echo ready; sleep 30 & wait")) as child:
        await read_until(child, b"ready")
        child.signal_group(signal.SIGUSR1)
        with trio.fail_after(TIMEOUT):
            assert await child.wait() is None
        assert child.returncode == -signal.SIGUSR1
        child.signal_group(signal.SIGKILL)  # reaped: must not signal a reusable pid


# --- cwd and spawn errors ---------------------------------------------------------------


async def test_cwd_is_honoured(tmp_path: Path) -> None:
    expected = await trio.Path(tmp_path).resolve()
    async with running(make_spec("pwd", "-P", cwd=tmp_path)) as child:
        output = await read_to_eof(child)
        assert output.decode().strip() == str(expected)


@pytest.mark.parametrize(
    ("argv", "cwd", "message"),
    [
        (("sh",), "/nope", "cwd '/nope' does not exist"),
        (("sh",), "/etc/passwd", "cwd '/etc/passwd' is not a directory"),
        (("sh",), "relative/dir", "is not an absolute path"),
        ((), "/", "argv is empty"),
        (("zsh-x-not-installed",), "/", "executable 'zsh-x-not-installed' not found on PATH"),
        (("/nope/bin/sh",), "/", "executable '/nope/bin/sh' does not exist"),
        (("/etc",), "/", "executable '/etc' is a directory"),
        (("./passwd",), "/etc", "executable './passwd' is not executable"),
        (("sh", "a\0b"), "/", "contains a NUL character"),
    ],
)
@pytest.mark.parametrize("use_pty", [True, False], ids=["pty", "pipes"])
async def test_spawn_errors_are_clear_and_leak_nothing(
    argv: tuple[str, ...], cwd: str, message: str, use_pty: bool
) -> None:
    fds = open_fd_count()
    with pytest.raises(SpawnError, match=message.replace("'", ".")):
        await spawn(SpawnSpec(argv=argv, cwd=cwd, env=ENV, use_pty=use_pty))
    assert open_fd_count() == fds


async def test_spawn_errors_for_env_and_size() -> None:
    with pytest.raises(SpawnError, match="name 'A=B' is invalid"):
        await spawn(SpawnSpec(argv=("sh",), cwd="/", env={"A=B": "1"}))
    with pytest.raises(SpawnError, match="window size 0x24 is invalid"):
        await spawn(make_spec("sh", cols=0))
    with pytest.raises(SpawnError, match="not found on PATH"):
        await spawn(SpawnSpec(argv=("sh",), cwd="/", env={"PATH": "/nonexistent"}))


async def test_exec_failure_after_validation_leaks_nothing() -> None:
    fds = open_fd_count()
    with pytest.raises(SpawnError, match="could not start 'sh'") as info:
        await spawn_with(make_spec("sh"), launcher=("/nonexistent/launcher",))
    assert isinstance(info.value.__cause__, FileNotFoundError)
    assert open_fd_count() == fds


async def test_cancelled_spawn_leaks_nothing() -> None:
    fds = open_fd_count()
    with trio.CancelScope() as scope:
        scope.cancel()
        await spawn(make_spec("sleep", "30"))
    assert scope.cancelled_caught
    assert open_fd_count() == fds
    assert children_of(os.getpid()) == set()


async def test_relative_path_entries_resolve_against_cwd(tmp_path: Path) -> None:
    tool = tmp_path / "bin" / "tool"
    tool.parent.mkdir()
    tool.write_text("#!/bin/sh\necho tool ran\n")
    tool.chmod(0o755)
    env = {"PATH": f"bin:{ENV['PATH']}"}
    async with running(SpawnSpec(argv=("tool",), cwd=str(tmp_path), env=env)) as child:
        assert await read_to_eof(child) == b"tool ran\r\n"


# --- pipe mode ----------------------------------------------------------------------------


async def test_pipe_mode_merges_stdout_and_stderr() -> None:
    async with running(make_spec("sh", "-c", "echo out; echo err >&2", use_pty=False)) as child:
        assert not child.is_pty
        assert child.input_fd != child.output_fd
        assert os.getsid(child.pid) == child.pid  # own session at once, so signal_group works
        output = await read_to_eof(child)
        assert output == b"out\nerr\n"  # no pty: no \r\n translation
        with trio.fail_after(TIMEOUT):
            assert await child.wait() == 0


async def test_pipe_mode_input_round_trip() -> None:
    async with running(make_spec("head", "-n", "1", use_pty=False)) as child:
        await child.write(b"ping\n")
        assert await read_to_eof(child) == b"ping\n"
        with trio.fail_after(TIMEOUT):
            assert await child.wait() == 0


# --- writing --------------------------------------------------------------------------------


async def _write_while_ticking(child: Child, payload: bytes) -> tuple[int, int]:
    """Write ``payload`` while another task ticks; return (ticks, the most bytes the
    child accepted between two ticks).

    The loop's responsiveness is counted in bytes, not seconds: a write that kept the
    loop would get far more than a slice through between two ticks, while a wall-clock
    gap also grows when a loaded machine simply does not run this process.
    """
    ticks = 0
    written = 0
    most_between_ticks = 0
    done = trio.Event()
    write_once = child._write_once

    def counting_write_once(fd: int, chunk: memoryview) -> int | None:
        nonlocal written
        accepted = write_once(fd, chunk)
        written += accepted or 0
        return accepted

    child._write_once = counting_write_once  # type: ignore[method-assign]

    async def ticker() -> None:
        nonlocal ticks, most_between_ticks
        last = written
        while not done.is_set():
            await trio.lowlevel.checkpoint()
            most_between_ticks = max(most_between_ticks, written - last)
            last = written
            ticks += 1

    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(ticker)
            with trio.fail_after(TIMEOUT):
                await child.write(payload)
            done.set()
    finally:
        del child._write_once  # (back to the class's method)
    assert written == len(payload)
    return ticks, most_between_ticks


PAYLOAD: Final = (b"x" * 1023 + b"\n") * (10 * 1024)  # 10 MiB of 1 KiB lines (ICANON-safe)


@pytest.mark.parametrize("use_pty", [True, False], ids=["pty", "pipes"])
async def test_ten_megabyte_write_does_not_block_the_loop(use_pty: bool) -> None:
    # The child counts what it received, so the test also proves nothing was lost.
    script = f"stty -echo 2>/dev/null; echo ready; head -c {len(PAYLOAD)} | wc -c"
    async with running(make_spec("sh", "-c", script, use_pty=use_pty)) as child:
        seen = bytearray()
        await read_until(child, b"ready", seen)  # echo is off before we write
        ticks, most_between_ticks = await _write_while_ticking(child, PAYLOAD)
        assert ticks >= len(PAYLOAD) // WRITE_CHUNK  # a checkpoint after every slice
        # The ticker ran between every two slices (Trio may run the writer twice in a
        # row across one scheduling batch, never more).
        assert most_between_ticks <= 2 * WRITE_CHUNK
        output = bytes(seen) + await read_to_eof(child)
        assert output.split() == [b"ready", str(len(PAYLOAD)).encode()]


@pytest.mark.parametrize("use_pty", [True, False], ids=["pty", "pipes"])
async def test_write_after_exit_raises_child_gone(use_pty: bool) -> None:
    async with running(make_spec("true", use_pty=use_pty)) as child:
        await read_to_eof(child)
        with trio.fail_after(TIMEOUT):
            assert await child.wait() == 0
            with pytest.raises(ChildGone):
                await child.write(b"x" * (1024 * 1024))


async def test_concurrent_writers_are_refused() -> None:
    spec = make_spec("sleep", "30", use_pty=False)
    async with running(spec) as child, trio.open_nursery() as nursery:
        # Nobody reads stdin: the first write fills the pipe buffer and parks.
        nursery.start_soon(child.write, b"y" * (1024 * 1024))
        await trio.testing.wait_all_tasks_blocked()
        with pytest.raises(trio.BusyResourceError):
            await child.write(b"z")
        nursery.cancel_scope.cancel()  # cancellation mid-write is allowed


async def test_closed_child_refuses_io() -> None:
    async with running(make_spec("cat")) as child:
        child.close_fds()
        child.close_fds()  # idempotent
        assert child.output_fd == -1
        assert child.input_fd == -1
        with pytest.raises(trio.ClosedResourceError):
            child.read_nowait(READ_SIZE)
        with pytest.raises(trio.ClosedResourceError):
            await child.wait_readable()
        with pytest.raises(trio.ClosedResourceError):
            await child.write(b"x")
        with pytest.raises(ValueError, match="max_bytes"):
            child.read_nowait(0)


async def test_close_wakes_a_blocked_reader() -> None:
    async with running(make_spec("sleep", "30")) as child:
        with trio.fail_after(TIMEOUT):
            async with trio.open_nursery() as nursery:

                async def reader() -> None:
                    with pytest.raises(trio.ClosedResourceError):
                        await child.wait_readable()

                nursery.start_soon(reader)
                await trio.testing.wait_all_tasks_blocked()
                child.close_fds()


# --- terminate, reaping, cancellation --------------------------------------------------------


async def test_terminate_escalates_to_sigkill() -> None:
    script = "trap '' HUP TERM; echo ready; while :; do sleep 0.1; done"
    async with running(make_spec("sh", "-c", script)) as child:
        await read_until(child, b"ready")
        grace = 0.3
        start = trio.current_time()
        with trio.fail_after(TIMEOUT):
            await child.terminate(grace=grace)
        elapsed = trio.current_time() - start
        # It waited the grace, then did not wait for anything else (a generous upper
        # bound: a loaded machine may take seconds to run the escalation).
        assert grace <= elapsed < grace + 10.0
        assert child.returncode == -signal.SIGKILL
        assert child.pid not in children_of(os.getpid())
        assert child.output_fd == -1
        await child.terminate()  # idempotent, immediate


async def test_terminate_of_stopped_child() -> None:
    async with running(make_spec("sh", "-c", "echo ready; exec sleep 30")) as child:
        await read_until(child, b"ready")
        child.signal_group(signal.SIGSTOP)
        with trio.fail_after(TIMEOUT):
            await wait_until(lambda: state_of(child.pid) == "T")
        start = trio.current_time()
        grace = 5.0
        with trio.fail_after(TIMEOUT):
            await child.terminate(grace=grace)
        assert trio.current_time() - start < grace  # SIGCONT let SIGHUP act at once
        assert child.returncode == -signal.SIGHUP


async def test_cancelled_terminate_still_reaps() -> None:
    script = "trap '' HUP TERM; echo ready; while :; do sleep 0.1; done"
    async with running(make_spec("sh", "-c", script)) as child:
        await read_until(child, b"ready")
        with trio.fail_after(TIMEOUT):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(child.terminate, 60.0)
                await trio.testing.wait_all_tasks_blocked()  # terminate() is in its grace period
                nursery.cancel_scope.cancel()
        assert child.returncode == -signal.SIGKILL
        assert child.output_fd == -1


async def test_cancelled_wait_then_terminate_leaves_no_zombie() -> None:
    child = await spawn(make_spec("cat"))
    with trio.fail_after(TIMEOUT):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(child.wait)
            await trio.testing.wait_all_tasks_blocked()
            nursery.cancel_scope.cancel()
    assert not is_dead(child.pid)
    assert child.pid in children_of(os.getpid())
    with trio.fail_after(TIMEOUT):
        await child.terminate(grace=1.0)
    assert child.returncode == -signal.SIGHUP
    assert child.pid not in children_of(os.getpid())


async def test_many_children_are_all_reaped_and_closed() -> None:
    count = 50
    fds = open_fd_count()
    children: list[Child] = []

    async def start(use_pty: bool) -> None:
        children.append(await spawn(make_spec("cat", use_pty=use_pty)))

    with trio.fail_after(TIMEOUT):
        async with trio.open_nursery() as nursery:
            for i in range(count):
                nursery.start_soon(start, i % 5 != 0)  # mostly ptys, some pipes
        assert children_of(os.getpid()) == {child.pid for child in children}
        assert open_fd_count() > fds + count  # one master or two pipe ends, plus a pidfd
        async with trio.open_nursery() as nursery:
            for child in children:
                nursery.start_soon(child.terminate, 1.0)
    assert children_of(os.getpid()) == set()
    assert open_fd_count() == fds
    assert all(child.returncode == -signal.SIGHUP for child in children)


_NOHUP = """
import signal, sys, trio
for sig in (signal.SIGHUP, signal.SIGINT, signal.SIGQUIT):
    signal.signal(sig, signal.SIG_IGN)  # as nohup, or a shell's background job, leaves them
from ahp.engine import open_host

async def main():
    async with open_host() as host:
        with trio.fail_after(30):
            pty = await host.create_terminal(argv=["sleep", "60"])
            await trio.sleep(0.3)
            await pty.interrupt()  # Ctrl-C: SIGINT to the foreground job
            await pty.wait_exited()
            print("pty", pty.returncode)
            pipes = await host.create_terminal(argv=["sleep", "60"], use_pty=False)
            await trio.sleep(0.3)
            pipes.signal_process(signal.SIGQUIT)
            await pipes.wait_exited()
            print("pipes", pipes.returncode)

trio.run(main)
"""


async def test_a_server_that_ignores_signals_starts_programs_that_do_not() -> None:
    """A server started by nohup (or as a background job) ignores SIGHUP, SIGINT and
    SIGQUIT, and an ignored disposition survives exec: its terminals' programs must
    still get the defaults, or Ctrl-C interrupts nothing (ahp.pty.launch)."""
    done = await trio.run_process(
        [sys.executable, "-c", _NOHUP], capture_stdout=True, capture_stderr=True, check=False
    )
    assert done.stdout.decode().split() == ["pty", "-2", "pipes", "-3"], done.stderr.decode()


@pytest.mark.parametrize("use_pty", [True, False], ids=["pty", "pipes"])
async def test_ignored_signals_are_not_inherited(use_pty: bool) -> None:
    before = ignored_signals()
    previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGHUP, signal.SIGQUIT)}
    try:
        assert {signal.SIGHUP, signal.SIGQUIT} <= set(ignored_signals())
        async with open_host() as host:
            term = await host.create_terminal(
                argv=["grep", "SigIgn", "/proc/self/status"], use_pty=use_pty
            )
            text = await wait_for_text(term, "SigIgn:")
            with trio.fail_after(TIMEOUT):
                await term.wait_exited()
            text = text[text.index("SigIgn:") :]
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    mask = int(text.split()[1], 16)
    assert not mask & (1 << (signal.SIGHUP - 1)) and not mask & (1 << (signal.SIGQUIT - 1)), text
    assert ignored_signals() == before
