"""Non-pty execution (``host.exec``, ``ahp/agent/exec.py``) with real processes.

Test rules:
- Every case runs a real program on real pipes through the engine; the AHP case
  watches the ``isPty: false`` terminal through a real server on port 0 and a real
  client.
- Processes are accounted for: after a timeout or a cancellation, nothing the
  command started is left running, and no child of this process is a zombie.
"""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trio

import ahp
from ahp.agent.budget import omission_marker
from ahp.agent.exec import EXEC_TERMINALS_KEPT
from ahp.client import connect
from ahp.engine import Host
from ahp.protocol.state import ROOT_URI
from ahp.pty import SpawnError, SpawnSpec, spawn
from tests.helpers import TIMEOUT, open_fds, stat_fields, zombies
from tests.wire import running_server


@pytest.fixture
async def host() -> AsyncIterator[Host]:
    async with ahp.open_host() as host:
        yield host


def alive(pid: int) -> bool:
    fields = stat_fields(pid)
    return fields is not None and fields[0] != "Z"


async def gone(pids: list[int]) -> bool:
    """Whether every pid is gone (or a zombie about to be reaped by init) within TIMEOUT."""
    with trio.move_on_after(TIMEOUT):
        while True:  # polled: nothing signals a process's end to a non-parent
            if not any(alive(pid) for pid in pids):
                return True
            await trio.sleep(0.02)
    return False


async def test_exit_codes_are_exact(host: Host) -> None:
    with trio.fail_after(TIMEOUT):
        three = await host.exec("exit 3")
        false = await host.exec(["false"])
        true = await host.exec(["true"])
    assert (three.status, three.exit_code, three.signal) == ("finished", 3, None)
    assert (false.status, false.exit_code) == ("finished", 1)
    assert (true.status, true.exit_code, true.done) == ("finished", 0, True)
    assert three.command_line == "exit 3" and false.command_line == "false"


@pytest.mark.parametrize(("sig", "name"), [("TERM", "SIGTERM"), ("KILL", "SIGKILL")])
async def test_a_signal_is_reported_by_name(host: Host, sig: str, name: str) -> None:
    with trio.fail_after(TIMEOUT):
        result = await host.exec(f"echo before; kill -{sig} $$; echo never")
    assert result.status == "killed" and result.signal == name
    assert result.exit_code is None and result.output == "before\n"


async def test_stdout_and_stderr_are_kept_apart(host: Host) -> None:
    with trio.fail_after(TIMEOUT):
        result = await host.exec("echo out1; echo err1 >&2; echo out2; echo err2 >&2")
    assert result.output == "out1\nout2\n"
    assert result.stderr == "err1\nerr2\n"
    assert result.raw_output == "out1\nout2\n"
    assert result.total_lines == 2 and not result.truncated


async def test_the_terminal_shows_both_streams(host: Host) -> None:
    with trio.fail_after(TIMEOUT):
        result = await host.exec("echo to-out; sleep 0.1; echo to-err >&2", uri="ahp-terminal:/x1")
    state = host.get("ahp-terminal:/x1").state
    assert state.isPty is False and state.exitCode == 0
    assert "to-out" in state.text() and "to-err" in state.text()
    assert result.command_id == "ahp-terminal:/x1"


async def test_stdin_is_closed(host: Host) -> None:
    with trio.fail_after(TIMEOUT):
        cat = await host.exec(["cat"])
        py = await host.exec([sys.executable, "-c", "input()"])
        read = await host.exec("read answer; echo read-status=$?")
    assert (cat.status, cat.exit_code, cat.output) == ("finished", 0, "")
    assert py.exit_code == 1 and "EOFError" in py.stderr
    assert read.output == "read-status=1\n"


async def test_a_huge_output_is_cut_to_the_budget_with_exact_counts(host: Host) -> None:
    count = 200_000
    whole = "".join(f"{i}\n" for i in range(1, count + 1))
    with trio.fail_after(60):
        result = await host.exec(
            f"seq 1 {count}; seq 1 {count} >&2", head_bytes=1000, tail_bytes=2000
        )
    assert result.truncated and result.total_lines == count
    assert result.total_bytes == len(whole)
    head, marker, tail = result.output.partition(
        omission_marker(result.omitted_bytes, result.omitted_lines) + "\n"
    )
    assert marker and whole.startswith(head) and whole.endswith(tail)
    assert len(head) <= 1000 and len(tail) <= 2000
    assert len(head) + len(tail) + result.omitted_bytes == len(whole)
    assert result.stderr.startswith("1\n2\n") and result.stderr.endswith(f"\n{count}\n")
    assert "omitted" in result.stderr and len(result.stderr) < 3200
    assert len(result.raw_output.encode()) <= 3000 and result.raw_output.endswith(f"{count}\n")


async def test_a_timeout_kills_the_group_and_reaps_it(host: Host, tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    command = f"sleep 300 & echo $! > {pids}; echo $$ >> {pids}; echo started; wait"
    with trio.fail_after(TIMEOUT):
        result = await host.exec(command, timeout=1)
    assert result.status == "timed_out" and result.timed_out
    assert result.signal == "SIGKILL" and result.output == "started\n"
    background, shell = (int(line) for line in pids.read_text().split())
    assert await gone([background, shell])
    assert zombies() == []


async def test_cancelling_the_caller_kills_and_reaps(host: Host, tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    with trio.move_on_after(TIMEOUT):
        async with trio.open_nursery() as nursery:

            async def cancel_once_started() -> None:
                while True:  # polled: the file is written by the command
                    if pid_file.exists() and pid_file.read_text().strip():
                        nursery.cancel_scope.cancel()
                        return
                    await trio.sleep(0.02)

            nursery.start_soon(cancel_once_started)
            await host.exec(f"echo $$ > {pid_file}; exec sleep 300", uri="ahp-terminal:/x2")
    pid = int(pid_file.read_text())
    assert await gone([pid])
    assert host.get("ahp-terminal:/x2").returncode == -9
    assert zombies() == []


async def test_finished_terminals_are_kept_up_to_the_bound(host: Host) -> None:
    with trio.fail_after(60):
        results = [await host.exec(["true"]) for _ in range(EXEC_TERMINALS_KEPT + 3)]
    uris = [r.command_id for r in results]
    assert [uri in host for uri in uris] == [False] * 3 + [True] * EXEC_TERMINALS_KEPT


async def test_bad_commands_are_refused_and_leave_nothing(host: Host) -> None:
    fds = open_fds()
    with pytest.raises(ValueError, match="must not be empty"):
        await host.exec("  ")
    with pytest.raises(ValueError, match="must not be empty"):
        await host.exec([])
    with pytest.raises(SpawnError, match="not found on PATH"):
        await host.exec(["no-such-program-ahp"])
    with pytest.raises(SpawnError, match="does not exist"):
        await host.exec(["true"], cwd="/no/such/dir")
    assert host.list_terminals() == () and open_fds() == fds


async def test_the_pty_layer_refuses_pipe_options_on_a_pty() -> None:
    env = {"PATH": os.environ["PATH"]}
    with pytest.raises(SpawnError, match="need pipes"):
        await spawn(SpawnSpec(argv=("true",), cwd="/", env=env, stdin_closed=True))
    fds = open_fds()
    child = await spawn(
        SpawnSpec(
            argv=("sh", "-c", "echo e >&2"),
            cwd="/",
            env=env,
            use_pty=False,
            stdin_closed=True,
            stderr_apart=True,
        )
    )
    assert child.input_fd == -1 and child.error_fd >= 0
    await child.wait()
    assert child.read_nowait(100, error=True) == b"e\n" and child.read_nowait(100) == b""
    await child.terminate()
    assert child.error_fd == -1 and open_fds() == fds


async def test_an_ahp_client_watches_the_exec_terminal(tmp_path: Path) -> None:
    uri = "ahp-terminal:/exec-watched"
    go = tmp_path / "go"
    command = f"echo hello; while [ ! -e {go} ]; do sleep 0.02; done; echo bye >&2; exit 4"
    async with ahp.open_host() as host, running_server(host=host) as server:
        async with connect(server.url) as client, trio.open_nursery() as nursery:
            results = []

            async def run() -> None:
                results.append(await host.exec(command, uri=uri))

            nursery.start_soon(run)
            with trio.fail_after(TIMEOUT):
                await client.subscribe(ROOT_URI)
                await client.wait_for(
                    lambda: any(t.resource == uri for t in client.root.terminals or ())
                )
                await client.subscribe(uri)
                state = client.terminal_state(uri)
                assert state.isPty is False
                await client.wait_for(lambda: "hello" in client.terminal_state(uri).text())
                go.touch()
                await client.wait_for(lambda: client.terminal_state(uri).exitCode == 4)
        final = client.terminal_state(uri)
    assert "hello" in final.text() and "bye" in final.text()
    assert results[0].exit_code == 4 and results[0].stderr == "bye\n"
