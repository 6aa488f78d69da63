"""Non-pty execution (``exec_command``: ``ahp/engine/exec.py``, ``ahp/client/exec.py``)
with real processes.

Test rules:
- Every case runs a real program on real pipes through the engine; the AHP case
  watches the ``isPty: false`` terminal through a real server on port 0 and a real
  client.
- Processes are accounted for: after a timeout or a cancellation, nothing the
  command started is left running, and no child of this process is a zombie.
"""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import weakref
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trio

import ahp
from ahp.agent.budget import omission_marker
from ahp.client import RpcError, connect
from ahp.client.commands.exec import exec_status
from ahp.client.exec import exec_remote
from ahp.engine import Host
from ahp.engine.exec import EXEC_TERMINALS_KEPT, exec_command, find_exec, start_exec
from ahp.protocol import processes as xp
from ahp.protocol.jsonrpc import ErrorCode
from ahp.protocol.processes import MAX_EXEC_CHARS
from ahp.protocol.state import ROOT_URI
from ahp.pty import SpawnError, SpawnSpec, spawn
from ahp.server import ServeOptions, serve_host
from tests.helpers import TIMEOUT, open_fds, stat_fields, wait_for_text, zombies
from tests.wire import TOKEN, peer, running_server


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
        three = await exec_command(host, "exit 3")
        false = await exec_command(host, ["false"])
        true = await exec_command(host, ["true"])
    assert (three.status, three.exit_code, three.signal) == ("finished", 3, None)
    assert (false.status, false.exit_code) == ("finished", 1)
    assert (true.status, true.exit_code, true.done) == ("finished", 0, True)
    assert three.command_line == "exit 3" and false.command_line == "false"


@pytest.mark.parametrize(("sig", "name"), [("TERM", "SIGTERM"), ("KILL", "SIGKILL")])
async def test_a_signal_is_reported_by_name(host: Host, sig: str, name: str) -> None:
    with trio.fail_after(TIMEOUT):
        result = await exec_command(host, f"echo before; kill -{sig} $$; echo never")
    assert result.status == "killed" and result.signal == name
    assert result.exit_code is None and result.output == "before\n"


async def test_stdout_and_stderr_are_kept_apart(host: Host) -> None:
    with trio.fail_after(TIMEOUT):
        result = await exec_command(host, "echo out1; echo err1 >&2; echo out2; echo err2 >&2")
    assert result.output == "out1\nout2\n"
    assert result.stderr == "err1\nerr2\n"
    assert result.raw_output == "out1\nout2\n"
    assert result.total_lines == 2 and not result.truncated


async def test_the_terminal_shows_both_streams(host: Host) -> None:
    with trio.fail_after(TIMEOUT):
        result = await exec_command(
            host, "echo to-out; sleep 0.1; echo to-err >&2", uri="ahp-terminal:/x1"
        )
    state = host.get("ahp-terminal:/x1").state
    assert state.isPty is False and state.exitCode == 0
    assert "to-out" in state.text() and "to-err" in state.text()
    assert result.command_id == "ahp-terminal:/x1"


async def test_stdin_is_closed(host: Host) -> None:
    with trio.fail_after(TIMEOUT):
        cat = await exec_command(host, ["cat"])
        py = await exec_command(host, [sys.executable, "-c", "input()"])
        read = await exec_command(host, "read answer; echo read-status=$?")
    assert (cat.status, cat.exit_code, cat.output) == ("finished", 0, "")
    assert py.exit_code == 1 and "EOFError" in py.stderr
    assert read.output == "read-status=1\n"


async def test_a_huge_output_is_cut_to_the_budget_with_exact_counts(host: Host) -> None:
    count = 200_000
    whole = "".join(f"{i}\n" for i in range(1, count + 1))
    with trio.fail_after(60):
        result = await exec_command(
            host, f"seq 1 {count}; seq 1 {count} >&2", head_bytes=1000, tail_bytes=2000
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
        result = await exec_command(host, command, timeout=1)
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
            await exec_command(
                host, f"echo $$ > {pid_file}; exec sleep 300", uri="ahp-terminal:/x2"
            )
    pid = int(pid_file.read_text())
    assert await gone([pid])
    # (Reaping follows the kill by a scheduler pass or two; on a loaded machine more. If
    # it took longer than KILL_WAIT, the terminal was disposed, which reaps it too.)
    uri = "ahp-terminal:/x2"
    with trio.move_on_after(TIMEOUT):
        while (uri in host and host.get(uri).returncode is None) or zombies():  # noqa: ASYNC110
            await trio.sleep(0.02)
    if uri in host:
        assert host.get(uri).returncode == -9
    assert zombies() == []


async def test_finished_terminals_are_kept_up_to_the_bound(host: Host) -> None:
    with trio.fail_after(60):
        results = [await exec_command(host, ["true"]) for _ in range(EXEC_TERMINALS_KEPT + 3)]
    uris = [r.command_id for r in results]
    assert [uri in host for uri in uris] == [False] * 3 + [True] * EXEC_TERMINALS_KEPT


async def test_a_host_that_ran_execs_is_freed_when_it_closes() -> None:
    # The execs' book was kept in module-level maps keyed weakly by the host, whose
    # values held the host: every host that ran an exec stayed alive, outputs and all.
    async with ahp.open_host() as host:
        with trio.fail_after(TIMEOUT):
            result = await exec_command(host, ["seq", "1", "1000"])
            running = await start_exec(host, ["sleep", "30"])  # one still running at close
        assert result.exit_code == 0 and find_exec(host, running.term.uri) is running
        ref = weakref.ref(host)
    del host, result, running
    gc.collect()
    assert ref() is None


async def test_an_automatic_exec_name_skips_a_terminal_that_took_it(host: Host) -> None:
    # A client can create the names execs get next; an exec without a name of its own
    # must not fail "already exists" for that.
    with trio.fail_after(TIMEOUT):
        first = await exec_command(host, ["true"])
        number = int(first.command_id.rsplit("-", 1)[1])
        for n in range(number + 1, number + 4):
            await host.create_terminal(f"ahp-terminal:/exec-{n}", argv=["cat"])
        result = await exec_command(host, ["true"])
    assert result.exit_code == 0
    assert result.command_id == f"ahp-terminal:/exec-{number + 4}"


async def test_bad_commands_are_refused_and_leave_nothing(host: Host) -> None:
    fds = open_fds()
    with pytest.raises(ValueError, match="must not be empty"):
        await exec_command(host, "  ")
    with pytest.raises(ValueError, match="must not be empty"):
        await exec_command(host, [])
    with pytest.raises(SpawnError, match="not found on PATH"):
        await exec_command(host, ["no-such-program-ahp"])
    with pytest.raises(SpawnError, match="does not exist"):
        await exec_command(host, ["true"], cwd="/no/such/dir")
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
                results.append(await exec_command(host, command, uri=uri))

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


async def test_cwd_and_env_reach_the_command(host: Host, tmp_path: Path) -> None:
    with trio.fail_after(TIMEOUT):
        result = await exec_command(
            host,
            "pwd; echo $AHP_EXEC_VALUE",
            cwd=str(tmp_path),
            env={"AHP_EXEC_VALUE": "forty-two"},
        )
    assert result.output == f"{tmp_path}\nforty-two\n"


async def test_a_process_left_running_is_reported_not_killed(host: Host, tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    with trio.fail_after(TIMEOUT):
        result = await exec_command(host, f"sleep 60 > /dev/null 2>&1 & echo $! > {pid_file}")
    pid = int(pid_file.read_text())
    try:
        assert result.status == "finished" and result.exit_code == 0
        assert [(b.pid, b.command_line) for b in result.background] == [(pid, "sleep 60")]
        assert alive(pid)
    finally:
        os.kill(pid, 9)


async def test_closing_stdout_early_still_waits_for_the_exit(host: Host) -> None:
    with trio.fail_after(TIMEOUT):
        result = await exec_command(host, "echo first; exec >&- 2>&-; sleep 0.3; exit 5")
    assert result.exit_code == 5 and result.output == "first\n"
    assert result.duration_ms >= 300


async def test_disposing_the_exec_terminal_ends_the_exec(host: Host) -> None:
    with trio.fail_after(TIMEOUT):
        started = await start_exec(host, "echo up; exec sleep 300")
        assert find_exec(host, started.uri) is started
        await wait_for_text(started.term, "up")
        await host.dispose(started.uri)
        await started.done.wait()
    result = started.result
    assert result is not None and result.status == "killed" and result.exit_code is None
    assert result.output == "up\n" and find_exec(host, started.uri) is started


# -- over AHP: x-ahp-terminals/exec -------------------------------------------------------


async def test_a_remote_client_execs_on_the_server(tmp_path: Path) -> None:
    async with running_server() as server, connect(server.url) as client:
        with trio.fail_after(TIMEOUT):
            result = await exec_remote(
                client, "echo out; echo err >&2; exit 6", cwd=str(tmp_path), tail_bytes=100
            )
            argv = await exec_remote(client, ["sh", "-c", "kill -TERM $$"])
            timed = await exec_remote(client, "echo started; exec sleep 300", timeout=0.5)
    assert (result.status, result.exit_code) == ("finished", 6)
    assert (result.output, result.stderr) == ("out\n", "err\n")
    assert result.command_id.startswith("ahp-terminal:/exec-")
    assert (argv.status, argv.signal) == ("killed", "SIGTERM")
    assert (timed.status, timed.signal, timed.output) == ("timed_out", "SIGKILL", "started\n")


async def test_a_remote_exec_is_its_starters_takes_no_input_and_can_be_signalled() -> None:
    # An exec's terminal was unclaimed: another client claimed it and its starter could
    # not dispose it; a signal did nothing (there is no shell) and input was accepted.
    async with running_server() as server, peer(server.url) as a, peer(server.url) as b:
        await a.initialize("starter")
        await b.initialize("other")
        started = await a.result(xp.EXEC, {"argv": ["sleep", "300"]})
        uri = started["channel"]
        await a.result("subscribe", {"channel": uri})
        await b.result("subscribe", {"channel": uri})
        # Another client's claim is refused: the starter holds it.
        await b.dispatch(
            uri, {"type": "terminal/claimed", "claim": {"kind": "client", "clientId": "other"}}
        )
        refused = await b.action(lambda x: x["action"]["type"] == "terminal/claimed")
        assert refused.get("rejectionReason"), refused
        # Input goes nowhere: rejected, saying why.
        await a.dispatch(uri, {"type": "terminal/input", "data": "hello\n"})
        rejected = await a.action(lambda x: x["action"]["type"] == "terminal/input")
        assert "takes no input" in rejected.get("rejectionReason", ""), rejected
        # A signal reaches the command's own group.
        answer = await a.result(xp.SIGNAL, {"channel": uri, "signal": "SIGTERM"})
        assert answer["shellForeground"] is False and len(answer["groups"]) == 1, answer
        result = await a.result(xp.EXEC_RESULT, {"channel": uri})
        assert (result["status"], result["signal"]) == ("killed", "SIGTERM"), result
        await a.result("disposeTerminal", {"channel": uri})


async def test_cancelling_a_remote_exec_disposes_it(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    async with (
        ahp.open_host() as host,
        running_server(host=host) as server,
        connect(server.url) as client,
    ):
        with trio.move_on_after(TIMEOUT) as scope:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(exec_remote, client, f"echo $$ > {pid_file}; exec sleep 300")
                while True:  # polled: the file is written by the command
                    if pid_file.exists() and pid_file.read_text().strip():
                        nursery.cancel_scope.cancel()
                        break
                    await trio.sleep(0.02)
        assert not scope.cancelled_caught
        assert await gone([int(pid_file.read_text())])
        assert [t for t in host.list_terminals() if "exec" in t.resource] == []


@pytest.mark.parametrize(
    ("params", "path"),
    [
        ({}, "$.params.argv"),
        ({"argv": ["true"], "command": "true"}, "$.params.argv"),
        ({"argv": []}, "$.params.argv"),
        ({"command": ""}, "$.params.command"),
        ({"command": "x" * (MAX_EXEC_CHARS + 1)}, "$.params.command"),
        ({"command": "true", "timeout": 0}, "$.params.timeout"),
        ({"command": "true", "headBytes": -1}, "$.params.headBytes"),
        ({"command": "true", "channel": "root"}, "$.params.channel"),
        # C1 controls (an 8-bit CSI) as createTerminal refuses them.
        ({"command": "true", "channel": "ahp-terminal:/x\x9b2J\x85"}, "$.params.channel"),
        ({"command": "true", "channel": "ahp-terminal:/x\x7f"}, "$.params.channel"),
        ({"command": "true", "cwd": "/no/such/dir"}, "$.params"),
        ({"argv": ["no-such-program-ahp"]}, "$.params"),
    ],
)
async def test_bad_exec_requests_are_refused(params: dict[str, object], path: str) -> None:
    async with (
        ahp.open_host() as host,
        running_server(host=host) as server,
        connect(server.url) as client,
    ):
        with pytest.raises(RpcError) as refused:
            await client.request(xp.EXEC, params)
        assert refused.value.code == ErrorCode.INVALID_PARAMS
        assert refused.value.data == {"path": path}
        assert host.list_terminals() == ()
        with pytest.raises(RpcError, match="no exec"):
            await client.request(xp.EXEC_RESULT, {"channel": "ahp-terminal:/nope"})


async def test_an_exec_counts_against_the_terminal_limit() -> None:
    options = ServeOptions(port=0, token=TOKEN, max_terminals=1)
    async with running_server(options) as server, connect(server.url) as client:
        with trio.fail_after(TIMEOUT):
            await client.create_terminal("ahp-terminal:/only")
            with pytest.raises(RpcError, match="terminal limit reached") as refused:
                await exec_remote(client, ["true"])
    assert refused.value.code == -32000


async def test_finished_execs_kept_for_their_results_give_way_at_the_limit() -> None:
    # Three finished execs filled a limit of 3 and every later request was refused.
    options = ServeOptions(port=0, token=TOKEN, max_terminals=3)
    async with running_server(options) as server, connect(server.url) as client:
        with trio.fail_after(TIMEOUT):
            for _ in range(3):
                assert (await exec_remote(client, ["true"])).exit_code == 0
            assert len(server.state.host.terminals) == 3  # kept, finished
            assert (await exec_remote(client, ["echo", "more"])).exit_code == 0
            await client.create_terminal("ahp-terminal:/mine")
            await client.create_terminal("ahp-terminal:/mine2")
            await client.create_terminal("ahp-terminal:/mine3")
            # Only live terminals left: the limit holds.
            with pytest.raises(RpcError, match="terminal limit reached"):
                await client.create_terminal("ahp-terminal:/one-too-many")


# -- the CLI: python -m ahp exec URL -- ARGV -----------------------------------------------


REPO = str(Path(__file__).resolve().parents[1])
#: A CLI process starts an interpreter and connects: seconds on a loaded 2-core machine.
CLI_TIMEOUT = 120


async def ahp_cli(*args: str) -> subprocess.CompletedProcess[str]:
    """``python -m ahp ARGS`` with stdin from /dev/null; stdout and stderr as text."""
    env = {k: v for k, v in os.environ.items() if k != "AHP_TOKEN"}
    env["PYTHONPATH"] = REPO
    with trio.fail_after(CLI_TIMEOUT):
        done = await trio.run_process(
            [sys.executable, "-m", "ahp", *args],
            stdin=subprocess.DEVNULL,
            capture_stdout=True,
            capture_stderr=True,
            check=False,
            env=env,
        )
    return subprocess.CompletedProcess(
        done.args, done.returncode, done.stdout.decode(), done.stderr.decode()
    )


async def test_the_cli_prints_both_streams_and_exits_with_the_code() -> None:
    async with running_server() as server:
        both = await ahp_cli("exec", server.url, "--", "sh", "-c", "echo out; echo err >&2; exit 3")
        timed = await ahp_cli("exec", server.url, "--timeout", "0.5", "--json", "--", "sleep 30")
        missing = await ahp_cli("exec", server.url, "--", "no-such-program-ahp", "x")
    assert (both.returncode, both.stdout, both.stderr) == (3, "out\n", "err\n")
    assert timed.returncode == 124 and "timed out after 0.5 s" in timed.stderr
    data = json.loads(timed.stdout)
    assert (data["status"], data["signal"], data["stderr"]) == ("timed_out", "SIGKILL", "")
    assert missing.returncode == 125 and "not found on PATH" in missing.stderr
    assert len(missing.stderr.strip().splitlines()) == 1


def test_the_cli_exit_status() -> None:
    assert exec_status(3, None, False) == 3 and exec_status(256 + 7, None, False) == 7
    assert exec_status(None, "SIGTERM", False) == 143 and exec_status(None, "SIGKILL", True) == 124
    assert exec_status(None, "SIG40", False) == 125  # no number known for it: a failure


async def test_a_signal_to_the_cli_kills_the_command(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    env = {k: v for k, v in os.environ.items() if k != "AHP_TOKEN"}
    env["PYTHONPATH"] = REPO
    async with running_server() as server:
        argv = [sys.executable, "-m", "ahp", "exec", server.url, "--"]
        argv.append(f"echo $$ > {pid_file}; exec sleep 300")
        proc = await trio.lowlevel.open_process(
            argv, stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env
        )
        try:
            with trio.fail_after(CLI_TIMEOUT):
                while True:  # polled: the file is written by the command
                    if pid_file.exists() and pid_file.read_text().strip():
                        break
                    await trio.sleep(0.02)
                proc.send_signal(15)
                code = await proc.wait()
        finally:
            with trio.CancelScope(shield=True):
                if proc.returncode is None:
                    proc.kill()
                    await proc.wait()
        assert proc.stderr is not None
        stderr = (await proc.stderr.receive_some(4096)).decode()
        await proc.stderr.aclose()
        assert code == 128 + 15 and "SIGTERM: the command was killed" in stderr
        assert await gone([int(pid_file.read_text())])


# -- MCP: run_command with pty false --------------------------------------------------------


async def test_mcp_run_command_without_a_pty(tmp_path: Path) -> None:
    from tests.test_mcp import _text, mcp_session

    async with mcp_session(tmp_path) as session:
        answer = await session.call_tool(
            "run_command",
            {"command": "echo out; echo err >&2; cat; exit 4", "pty": False, "cwd": str(tmp_path)},
        )
        killed = await session.call_tool("run_command", {"command": "kill -TERM $$", "pty": False})
        timed = await session.call_tool(
            "run_command", {"command": "sleep 30", "pty": False, "timeout": 0.5}
        )
        listed = await session.call_tool("list_terminals", {})
    text = _text(answer)
    assert not answer.is_error and "no terminal (pty false)" in text
    assert "\nout\n── stderr:\nerr\n── exit code 4 · " in text
    assert "KILLED by SIGTERM" in _text(killed)
    assert "TIMED OUT after" in _text(timed) and "SIGKILL" in _text(timed)
    # Finished runs are no terminals to use: not listed (they stay in the catalogue).
    assert _text(listed).startswith("no terminals yet"), _text(listed)


async def test_mcp_run_command_without_a_pty_runs_where_a_terminal_would(tmp_path: Path) -> None:
    """Probe J: pty false ran in $HOME (exec's default), not in the server's directory
    as a terminal does, and refused a relative cwd that a new terminal takes from the
    server's directory. Both now follow the one rule."""
    from tests.test_mcp import _text, mcp_session

    (tmp_path / "sub").mkdir()
    async with mcp_session(tmp_path) as session:
        plain = await session.call_tool("run_command", {"command": "pwd", "pty": False})
        relative = await session.call_tool(
            "run_command", {"command": "pwd", "pty": False, "cwd": "sub"}
        )
        in_terminal = await session.call_tool("run_command", {"command": "pwd"})
    assert not plain.is_error and f"\n{tmp_path}\n── exit code 0" in _text(plain), _text(plain)
    assert not relative.is_error, _text(relative)
    assert f"\n{tmp_path / 'sub'}\n── exit code 0" in _text(relative)
    assert f"\n{tmp_path}\n── exit code 0" in _text(in_terminal)


async def test_mcp_run_command_without_a_pty_over_connect(tmp_path: Path) -> None:
    from tests.test_mcp import _text, mcp_session

    sock = tmp_path / "side.sock"
    async with ahp.open_host() as host, trio.open_nursery() as nursery:
        sidecar = await nursery.start(serve_host, host, ServeOptions(unix=str(sock), token="t-1"))
        async with mcp_session(tmp_path, "--connect", sidecar.url) as session:
            answer = await session.call_tool(
                "run_command", {"command": "echo on-$((6*7)); echo e >&2", "pty": False}
            )
        nursery.cancel_scope.cancel()
    assert "\non-42\n── stderr:\ne\n── exit code 0 · " in _text(answer)
