"""The commands for people (``attach``, ``ls``, ``run``) and the examples, for real.

Every command runs as a ``python -m ahp`` subprocess against a live server (an
in-process host served on a free port). ``attach`` is driven inside tmux: keys go
in with ``send-keys`` and the screen is read with ``capture-pane``, polled under
an absolute deadline (there is no other way to read tmux).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import attrs
import orjson
import pytest
import trio
import trio_websocket
from hypothesis import given, settings
from hypothesis import strategies as st

import ahp
from ahp.agent import INTERRUPT_GRACE
from ahp.client.commands.attach import banner
from ahp.client.commands.common import MAX_ERROR_LINE, REQUEST_TIMEOUT, SERVER_SHUT_DOWN
from ahp.client.commands.common import main as cli_main
from ahp.client.commands.run import (
    HARD_TIMEOUT_MARGIN,
    TAIL_BYTES,
    OutputPrinter,
    printed_output,
    split_options,
)
from ahp.client.connection import ClientError, RpcError, connect
from ahp.engine import Host
from ahp.server import ServeOptions, serve_host
from ahp.server.app import SERVE_CHILD_NICE
from ahp.server.session import ServerState
from tests.helpers import TIMEOUT, first_line, kill_and_reap, wait_for_text

REPO = Path(__file__).resolve().parents[1]
ENV = {"PYTHONPATH": str(REPO)}


@attrs.define
class Server:
    host: Host
    url: str
    stop: trio.CancelScope
    state: ServerState

    @property
    def bare_url(self) -> str:
        """The URL without its token."""
        return self.url.split("?", 1)[0]

    @property
    def token(self) -> str:
        return self.url.split("tkn=", 1)[1]


@asynccontextmanager
async def served(shell: str | None = None) -> AsyncIterator[Server]:
    """An in-process host (bash terminals, hermetic rc) served on a free port.

    ``server.stop.cancel()`` stops serving (closing every connection), the host lives on.
    """
    async with ahp.open_host(shell=shell) as host, trio.open_nursery() as nursery:

        async def serve(*, task_status: trio.TaskStatus[Server]) -> None:
            with trio.CancelScope() as stop:
                async with trio.open_nursery() as inner:
                    options = ServeOptions(port=0, token="test-token")
                    sidecar = await inner.start(serve_host, host, options)
                    task_status.started(Server(host, sidecar.url, stop, sidecar.state))

        yield await nursery.start(serve)
        nursery.cancel_scope.cancel()


def _env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "AHP_TOKEN"}
    return {**env, **ENV, **(extra or {})}


#: Bound for one whole ``python -m ahp`` run (interpreter start, imports, the command,
#: a detection wait): several single waits' worth, for a loaded 2-core machine.
PROCESS_TIMEOUT = 3 * TIMEOUT


async def cli(
    *args: str, env: dict[str, str] | None = None, timeout: float = PROCESS_TIMEOUT
) -> subprocess.CompletedProcess[str]:
    """``python -m ahp ARGS`` with stdin from /dev/null; stdout and stderr as text."""
    return await _run([sys.executable, "-m", "ahp", *args], env, timeout)


async def cli_shell(script: str) -> subprocess.CompletedProcess[str]:
    """``bash -c SCRIPT`` (a pipeline around ``python -m ahp``), as :func:`cli` runs."""
    return await _run(["bash", "-c", script], None, PROCESS_TIMEOUT)


async def _run(
    argv: list[str], env: dict[str, str] | None, timeout: float
) -> subprocess.CompletedProcess[str]:
    with trio.fail_after(timeout):
        done = await trio.run_process(
            argv,
            stdin=subprocess.DEVNULL,
            capture_stdout=True,
            capture_stderr=True,
            check=False,
            env=_env(env),
            cwd=str(REPO),
        )
    return subprocess.CompletedProcess(
        done.args, done.returncode, done.stdout.decode(), done.stderr.decode()
    )


@asynccontextmanager
async def serve_process(
    *args: str, env: dict[str, str] | None = None, log: Path | None = None
) -> AsyncIterator[tuple[trio.Process, str]]:
    """A real ``python -m ahp serve --port 0 ARGS`` (its stderr into ``log``, else
    discarded) and its URL; killed and reaped at the end."""
    with open(log or os.devnull, "wb") as stderr:  # noqa: ASYNC230 (before any task runs)
        proc = await trio.lowlevel.open_process(
            [sys.executable, "-m", "ahp", "serve", "--port", "0", *args],
            stdout=subprocess.PIPE,
            stderr=stderr,
            env=_env(env),
            cwd=str(REPO),
        )
    try:
        line = await first_line(proc, TIMEOUT)
        yield proc, line.decode().strip()
    finally:
        await kill_and_reap(proc)


def one_line_error(done: subprocess.CompletedProcess[str]) -> str:
    """Assert the failure is one stderr line, no traceback, non-zero; return the line."""
    assert done.returncode != 0, done
    assert "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    return lines[0]


def free_port() -> int:
    """A TCP port with nothing listening on it."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


# -- serve start-up and the command line -----------------------------------------------------


async def test_serve_start_up_failures_are_one_line(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = str(busy.getsockname()[1])
        done = await cli("serve", "--port", port)
        # (What to do, said: another serve may hold it, --port 0 takes any free port.)
        assert one_line_error(done) == (
            f"ahp-terminals serve: cannot listen on 127.0.0.1:{port}: Address already in use "
            "(another program, perhaps another `ahp-terminals serve`, listens there): choose "
            "another --port, or --port 0 for any free one"
        )
        assert done.returncode == 1
    missing = tmp_path / "no-such-dir" / "ahp.sock"
    done = await cli("serve", "--unix", str(missing))
    line = one_line_error(done)
    assert line == f"ahp-terminals serve: cannot listen on {missing}: No such file or directory"
    # A file that is not a socket is not removed (it was, and replaced by the socket).
    notes = tmp_path / "notes.txt"
    notes.write_text("keep me")
    done = await cli("serve", "--unix", str(notes))
    assert one_line_error(done) == (
        f"ahp-terminals serve: cannot listen on {notes}: it exists and is not a socket "
        "(left as it is)"
    )
    assert notes.read_text() == "keep me"
    # An address that is not this machine's, a name that does not resolve.
    done = await cli("serve", "--host", "10.255.255.1", "--port", "0")
    assert one_line_error(done) == (
        "ahp-terminals serve: cannot listen on 10.255.255.1: Cannot assign requested address"
    )
    done = await cli("serve", "--host", "no-such-host.invalid")
    assert one_line_error(done).startswith(
        "ahp-terminals serve: cannot listen on no-such-host.invalid: "
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--port", "99999"], "argument --port: 99999 is not a TCP port (0-65535)"),
        (["--port", "-1"], "argument --port: -1 is not a TCP port (0-65535)"),
        (["--port", "http"], "argument --port: not a port number: 'http'"),
        (["--scrollback", "-1"], "argument --scrollback: must be at least 1, not -1"),
        (["--scrollback", "0"], "argument --scrollback: must be at least 1, not 0"),
        (["--shell", "/nonexistent"], "argument --shell: no executable '/nonexistent'"),
        (["--cwd", "/nonexistent"], "argument --cwd: no directory '/nonexistent'"),
        (["--cwd", "/etc/passwd"], "argument --cwd: no directory '/etc/passwd'"),
        (["--flood-nice", "20"], "argument --flood-nice: invalid choice: 20"),
    ],
)
async def test_serve_refuses_bad_options_before_listening(args: list[str], message: str) -> None:
    done = await cli("serve", *args)
    assert done.returncode == 2, done
    assert message in done.stderr.splitlines()[-1], done.stderr
    assert done.stdout == ""  # no URL: it never listened


@pytest.mark.parametrize(
    ("args", "env"),
    [
        (["--token", "same", "--read-token", "same"], {}),
        ([], {"AHP_TOKEN": "same", "AHP_READ_TOKEN": "same"}),
        (["--token", "same"], {"AHP_READ_TOKEN": "same"}),
    ],
    ids=["options", "environment", "mixed"],
)
async def test_serve_refuses_a_read_only_token_equal_to_the_token_in_one_line(
    args: list[str], env: dict[str, str]
) -> None:
    # Probe P: a 56-line traceback (exit 1), where every other bad start-up input is
    # one line and exit 2.
    done = await cli("serve", "--port", "0", *args, env=env)
    assert one_line_error(done).startswith(
        "ahp-terminals serve: the read-only token must differ from the token"
    )
    assert done.returncode == 2 and done.stdout == ""


@pytest.mark.parametrize("nice", [None, 0, 3], ids=["default", "0", "3"])
async def test_serve_shell_by_name_is_found_on_path_and_niced(nice: int | None) -> None:
    """``--shell bash`` is found on PATH; the terminals' programs run at niceness
    ``--child-nice`` (by default SERVE_CHILD_NICE) above the server's."""
    extra = [] if nice is None else ["--child-nice", str(nice)]
    proc = await trio.lowlevel.open_process(
        [sys.executable, "-m", "ahp", "serve", "--port", "0", "--shell", "bash", *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=_env(),
        cwd=str(REPO),
    )
    try:
        line = await first_line(proc, TIMEOUT)
        done = await cli(
            "run", line.decode().strip(), "--", "echo $0; awk '{print $19}' /proc/self/stat"
        )
        assert done.returncode == 0, done
        shell, niceness = done.stdout.split()[-2:]
        assert shell.endswith("bash")
        wanted = SERVE_CHILD_NICE if nice is None else nice
        assert int(niceness) == min(19, os.getpriority(os.PRIO_PROCESS, 0) + wanted)
        proc.send_signal(signal.SIGTERM)
        with trio.fail_after(TIMEOUT):
            assert await proc.wait() == 0
    finally:
        await kill_and_reap(proc)


@pytest.mark.parametrize(("bind", "shown"), [("0.0.0.0", "127.0.0.1"), ("::", "[::1]")])
async def test_serve_on_a_wildcard_prints_a_loopback_url(bind: str, shown: str) -> None:
    """Bound to a wildcard, ``serve`` prints the loopback address of the family (probe M:
    ``ws://0.0.0.0:PORT/``, which browsers refuse), and that URL works."""
    if bind == "::" and not socket.has_ipv6:
        pytest.skip("no IPv6 here")
    proc = await trio.lowlevel.open_process(
        [sys.executable, "-m", "ahp", "serve", "--host", bind, "--port", "0", "--no-rc"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=_env(),
        cwd=str(REPO),
    )
    try:
        line = await first_line(proc, PROCESS_TIMEOUT)
        url = line.decode().strip()
        assert url.startswith(f"ws://{shown}:"), url
        done = await cli("ls", url)
        assert done.returncode == 0, done
        proc.send_signal(signal.SIGTERM)
        with trio.fail_after(PROCESS_TIMEOUT):
            assert await proc.wait() == 0
    finally:
        await kill_and_reap(proc)


async def test_serve_cwd_is_where_terminals_and_execs_start(tmp_path: Path) -> None:
    """Probe M (finding 7): terminals started in $HOME, and serve had no way to say
    otherwise (the image's shared /workspace was not where commands ran)."""
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    async with serve_process("--shell", "bash", "--cwd", str(workspace)) as (_, url):
        done = await cli("run", url, "--", "pwd")
        assert (done.returncode, done.stdout) == (0, f"{workspace}\n"), done
        done = await cli("exec", url, "--", "pwd")
        assert (done.returncode, done.stdout) == (0, f"{workspace}\n"), done
        # A client's own cwd still wins.
        done = await cli("run", url, "--cwd", str(tmp_path), "--", "pwd")
        assert (done.returncode, done.stdout) == (0, f"{tmp_path}\n"), done


async def test_serve_falls_back_when_the_environment_s_shell_or_home_is_unusable(
    tmp_path: Path,
) -> None:
    """Probe M (finding 3): with ``SHELL=/nonexistent/zsh`` or ``HOME=/nonexistent``, serve
    started and said ready while every new terminal was refused ("executable ... does
    not exist", "cwd ... does not exist"). Now it says so at start-up and falls back:
    /bin/sh, the current directory."""
    log = tmp_path / "serve.log"
    env = {"SHELL": "/nonexistent/zsh", "HOME": "/nonexistent/home"}
    async with serve_process(env=env, log=log) as (_, url):
        done = await cli("run", url, "--", "echo $0; pwd")
        assert done.returncode == 0, done
        assert done.stdout.split() == ["/bin/sh", str(REPO)], done
        done = await cli("exec", url, "--", "pwd")
        assert (done.returncode, done.stdout) == (0, f"{REPO}\n"), done
    text = log.read_text()
    assert "$SHELL '/nonexistent/zsh' names no executable: new terminals run /bin/sh" in text
    home = "$HOME '/nonexistent/home' is not a directory this user can enter"
    assert f"{home}: new terminals start in {REPO}" in text


async def test_no_command_prints_usage_and_exits_2() -> None:
    done = await cli()
    assert done.returncode == 2
    assert done.stderr.startswith("usage: ahp-terminals") and "serve" in done.stderr
    assert done.stdout == ""


# -- ls ----------------------------------------------------------------------------------------


async def test_ls_table_and_json() -> None:
    async with served() as server:
        host = server.host
        await host.create_terminal(
            "ahp-terminal:/build",
            name="build",
            claim=ahp.SessionClaim(session="agent:/s1", toolCallId="call-7"),
        )
        done_term = await host.create_terminal("ahp-terminal:/done", argv=["sh", "-c", "exit 5"])
        with trio.fail_after(TIMEOUT):
            assert await done_term.wait_exited() == 5
        table, as_json = await cli("ls", server.url), await cli("ls", server.url, "--json")
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0].split() == ["URI", "TITLE", "CLAIM", "STATUS"]
    rows = {line.split()[0]: line for line in lines[1:]}
    assert set(rows) == {"ahp-terminal:/build", "ahp-terminal:/done"}
    assert rows["ahp-terminal:/build"].split()[1:] == [
        "build",
        "session:agent:/s1/call-7",
        "running",
    ]
    assert rows["ahp-terminal:/done"].rstrip().endswith("exited 5")
    # Columns are aligned: every row's CLAIM starts where the header's does.
    claim_at = lines[0].index("CLAIM")
    assert rows["ahp-terminal:/build"][claim_at:].startswith("session:")

    assert as_json.returncode == 0, as_json.stderr
    items = {item["uri"]: item for item in json.loads(as_json.stdout)}
    assert items["ahp-terminal:/build"] == {
        "uri": "ahp-terminal:/build",
        "title": "build",
        "claim": {"kind": "session", "session": "agent:/s1", "toolCallId": "call-7"},
        "running": True,
        "exitCode": None,
    }
    assert items["ahp-terminal:/done"]["running"] is False
    assert items["ahp-terminal:/done"]["exitCode"] == 5


async def test_ls_stops_showing_the_claim_of_a_client_gone_for_good() -> None:
    from ahp.client import connect

    async with served() as server:
        async with connect(server.url, client_id="alice", auto_reconnect=False) as alice:
            await alice.create_terminal("ahp-terminal:/held", name="held")
            held = server.host.get("ahp-terminal:/held")
            assert held.state.claim == ahp.ClientClaim("alice")
        # Alice left; within the reconnect grace her claim stands (she may come back).
        done = await cli("ls", server.url, "--json")
        assert [t["claim"] for t in json.loads(done.stdout)] == [
            {"kind": "client", "clientId": "alice"}
        ]
        # Once the server forgets her, the next client to connect sees the claim released.
        server.state.clients.grace = 0.0
        await trio.sleep(0.01)
        done = await cli("ls", server.url)
        row = done.stdout.splitlines()[1].split()
        assert row == ["ahp-terminal:/held", "held", "-", "running"]
        assert server.host.get("ahp-terminal:/held").state.claim == ahp.ClientClaim("")


#: A clientId a hostile client can set: a title change (OSC 0), colours (CSI) and a
#: clipboard write (OSC 52), plus a C1 CSI and a DEL.
HOSTILE_ID = "evil\x1b]0;OWNED\x07\x1b[31mRED\x1b[0m\x1b]52;c;aGFja2Vk\x07\x9b2J\x7f"


async def test_server_strings_reach_the_operator_without_control_characters() -> None:
    """A clientId and a session claim's ids are whatever a client sent: ``ls`` (its
    table, and with ``--host``) shows their control characters as ``\\xNN``, so
    nothing reaches the operator's terminal that it would obey; ``--json`` keeps them
    exact. (Terminal URIs cannot hold control characters: the server refuses them.)"""
    from ahp.client import connect

    async with (
        served() as server,
        connect(server.url, client_id=HOSTILE_ID, auto_reconnect=False) as evil,
    ):
        await evil.create_terminal("ahp-terminal:/held", name="held")
        await server.host.create_terminal(
            "ahp-terminal:/agent",
            name="agent",
            claim=ahp.SessionClaim(session="agent:/\x1b]0;T\x07", turnId="\x1b[2J"),
        )
        table = await cli("ls", server.url)
        hosts = await cli("ls", "--host", server.url)
        as_json = await cli("ls", server.url, "--json")
    for done in (table, hosts):
        assert done.returncode == 0, done.stderr
        assert not any(c in done.stdout for c in "\x1b\x07\x9b\x7f"), repr(done.stdout)
    shown = "client:evil\\x1b]0;OWNED\\x07\\x1b[31mRED\\x1b[0m\\x1b]52;c;aGFja2Vk\\x07\\x9b2J\\x7f"
    rows = {line.split()[0]: line.split() for line in table.stdout.splitlines()[1:]}
    assert rows["ahp-terminal:/held"] == ["ahp-terminal:/held", "held", shown, "running"]
    assert rows["ahp-terminal:/agent"][2] == "session:agent:/\\x1b]0;T\\x07/\\x1b[2J"
    assert shown in hosts.stdout
    claims = {t["uri"]: t["claim"] for t in json.loads(as_json.stdout)}
    assert claims["ahp-terminal:/held"] == {"kind": "client", "clientId": HOSTILE_ID}
    assert claims["ahp-terminal:/agent"]["session"] == "agent:/\x1b]0;T\x07"


def test_printable_shows_every_control_character() -> None:
    from ahp.client.commands.common import printable

    controls = "".join(map(chr, (*range(0x20), *range(0x7F, 0xA0))))
    assert printable(controls) == "".join(f"\\x{ord(c):02x}" for c in controls)
    assert printable("plain é 漢 😀 \u200b") == "plain é 漢 😀 \u200b"  # left as they are
    assert printable("a\tb\r\nc") == "a\\x09b\\x0d\\x0ac"


async def test_rm_closes_terminals_and_reports_unknown_ones() -> None:
    async with served() as server:
        host = server.host
        first = await host.create_terminal("ahp-terminal:/a", name="a")
        await host.create_terminal("ahp-terminal:/b", name="b")
        await host.create_terminal("ahp-terminal:/keep", name="keep")
        pid = first.pid
        assert pid is not None
        done = await cli("rm", server.url, "a", "ahp-terminal:/b", "nope")
        assert done.returncode == 1
        assert done.stdout == "closed ahp-terminal:/a\nclosed ahp-terminal:/b\n"
        assert done.stderr == "ahp-terminals rm: ahp-terminal:/nope: no such terminal\n"
        assert set(host.terminals) == {"ahp-terminal:/keep"}
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)  # the process was ended and reaped
        done = await cli("rm", server.url, "keep")
        assert (done.returncode, done.stdout, done.stderr) == (0, "closed ahp-terminal:/keep\n", "")
        assert not host.terminals
        ls = await cli("ls", server.url)
        assert ls.stdout.splitlines()[1:] == []


# -- run ---------------------------------------------------------------------------------------


async def test_run_exit_code_output_and_json() -> None:
    async with served() as server:
        several = await cli("run", server.url, "--", "sh", "-c", "echo hi; exit 3")
        one = await cli("run", server.url, "--", "echo one; echo two >&2; (exit 4)")
        as_json = await cli("run", "--json", server.url, "--", "printf 'a\\033[1mb\\033[0m\\n'")
        # The token from --token, else from $AHP_TOKEN, when the URL has none.
        by_option = await cli("run", server.bare_url, "--token", server.token, "--", "echo opt")
        by_env = await cli(
            "run", server.bare_url, "--", "echo env", env={"AHP_TOKEN": server.token}
        )
        # Terminals created for a command are disposed afterwards.
        assert not server.host.terminals
    assert (several.returncode, several.stdout) == (3, "hi\n"), several.stderr
    assert (one.returncode, one.stdout) == (4, "one\ntwo\n"), one.stderr
    assert as_json.returncode == 0, as_json.stderr
    result = json.loads(as_json.stdout)
    assert set(result) == {f.name for f in attrs.fields(ahp.CommandResult)} - {"handle"}
    assert result["output"] == "ab\n" and "\x1b[1m" in result["raw_output"]
    assert result["exit_code"] == 0 and result["timed_out"] is False
    assert (by_option.returncode, by_option.stdout) == (0, "opt\n"), by_option.stderr
    assert (by_env.returncode, by_env.stdout) == (0, "env\n"), by_env.stderr


async def test_run_into_a_pipe_closed_early_ends_quietly_and_disposes_its_terminal() -> None:
    """``run URL -- CMD | head``: the reader leaving is a shell's SIGPIPE status, not
    "ahp-terminals run: Broken pipe" and 125, and the terminal ``run`` created is disposed."""
    async with served() as server:
        script = (
            f"set -o pipefail; {sys.executable} -m ahp run '{server.url}' -- 'seq 1 300000'"
            ' | head -n 2; echo "status ${PIPESTATUS[0]}"'
        )
        done = await cli_shell(script)
        assert not server.host.terminals
    assert done.stdout == "1\n2\nstatus 141\n", done.stderr
    assert done.stderr == ""


async def test_run_in_a_named_terminal_into_a_closed_pipe_interrupts_the_command() -> None:
    # With --terminal the command ran on after `run` ended (141), holding the terminal:
    # the next run there was refused until it ended by itself.
    async with served() as server:
        await server.host.create_terminal("ahp-terminal:/kept", name="kept")
        script = (
            f"set -o pipefail; {sys.executable} -m ahp run '{server.url}' --terminal kept "
            "-- 'seq 1 300000; sleep 60' | head -n 1; echo \"status ${PIPESTATUS[0]}\""
        )
        done = await cli_shell(script)
        assert done.stdout == "1\nstatus 141\n", done.stderr
        after = await cli("run", server.url, "--terminal", "kept", "--", "echo next")
    assert (after.returncode, after.stdout) == (0, "next\n"), after.stderr


async def test_run_in_a_named_terminal_and_timeout() -> None:
    async with served() as server:
        term = await server.host.create_terminal("ahp-terminal:/shared", name="shared")
        named = await cli("run", server.url, "--terminal", "shared", "--", "echo in-$((6*7))")
        assert (named.returncode, named.stdout) == (0, "in-42\n"), named.stderr
        # The named terminal is used, not disposed.
        await wait_for_text(term, "in-42")
        assert "ahp-terminal:/shared" in server.host.terminals
        slow = await cli("run", server.url, "--timeout", "1", "--", "echo started; sleep 30")
    assert slow.returncode == 124, slow
    assert slow.stdout.startswith("started\n")  # (then the tty echoes ^C)
    assert "timed out" in one_line_error(slow)


async def test_run_timeout_is_a_hard_limit_when_the_command_ignores_ctrl_c() -> None:
    """``run --timeout 1`` of a command that ignores Ctrl-C waited as long as the command
    did (100 s for ``trap "" INT; sleep 100``); it is now killed after the timeout and
    the Ctrl-C grace (at the latest ``run`` stops waiting HARD_TIMEOUT_MARGIN later),
    exits 124 saying so and closes its terminal."""
    async with served() as server:
        started = trio.current_time()
        done = await cli("run", server.url, "--timeout", "1", "--", 'trap "" INT; sleep 100')
        took = trio.current_time() - started
        assert not server.host.terminals  # disposed: the sleep is gone with it
    assert done.returncode == 124, done
    assert "ignored Ctrl-C" in one_line_error(done)
    assert took < 1 + INTERRUPT_GRACE + HARD_TIMEOUT_MARGIN + PROCESS_TIMEOUT / 2


async def test_a_server_that_answers_no_request_ends_the_command() -> None:
    """A server that answers ``initialize`` and then nothing held ``run``, ``exec`` and
    ``rm`` for good; each request now waits at most REQUEST_TIMEOUT (patched small in
    the library's client here: the CLI passes its own) and fails with a clear error."""

    async def mute(request: trio_websocket.WebSocketRequest) -> None:
        ws = await request.accept()
        with contextlib.suppress(trio_websocket.ConnectionClosed):
            while True:
                message = orjson.loads(await ws.get_message())
                if message.get("method") == "initialize":
                    result = {"protocolVersion": "0.5.0", "serverSeq": 0, "snapshots": []}
                    await ws.send_message(
                        orjson.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result})
                    )

    async with trio.open_nursery() as nursery:
        server = await nursery.start(trio_websocket.serve_websocket, mute, "127.0.0.1", 0, None)
        port = server.port
        async with connect(f"ws://127.0.0.1:{port}/", request_timeout=0.3) as client:
            with pytest.raises(ClientError, match=r"no answer to 'createTerminal' within 0\.3 s"):
                await client.create_terminal("ahp-terminal:/mute")
        nursery.cancel_scope.cancel()
    assert REQUEST_TIMEOUT <= 60  # (the CLI's bound: a command fails in bounded time)


async def test_run_exits_with_the_shell_s_exit_code() -> None:
    """Issue 20, defect 5: ``run -- 'exit 7'`` exited 125 (the code was lost)."""
    async with served() as server:
        done = await cli("run", "--json", server.url, "--", "echo bye; exit 7")
    assert done.returncode == 7, done.stderr
    result = json.loads(done.stdout)
    assert (result["status"], result["exit_code"]) == ("shell_exited", 7)


@pytest.mark.parametrize("dies", ["at-once", "after-1s"])
async def test_run_into_a_shell_that_exits_at_start_up_fails_in_one_line(
    dies: str, tmp_path: Path
) -> None:
    """Probe M (finding 2): against ``serve --shell /bin/false`` (or a shell that exits
    a second after it started), ``run`` hung for good (the exit came during the wait
    for command detection, and was missed), or printed a traceback; now 125 and one
    line, as for a ``--terminal`` whose process had exited. Several tries: the exit
    lands in different waits."""
    shell = "/bin/false"
    if dies == "after-1s":
        script = tmp_path / "dying-shell"
        script.write_text("#!/bin/sh\nsleep 1; exit 3\n")
        script.chmod(0o755)
        shell = str(script)
    async with serve_process("--shell", shell) as (_, url):
        for _ in range(3):
            done = await cli("run", url, "--", "echo hi")
            assert done.returncode == 125, done
            assert re.fullmatch(
                r"ahp-terminals run: the process of ahp-terminal:/run-\w+ has exited \(code [13]\)"
                r"( before the command started: it did not run)?",
                one_line_error(done),
            ), done.stderr
            assert done.stdout == ""


async def test_run_returns_when_a_password_prompt_waits() -> None:
    """Issue 20, defect 2: a getpass prompt (it reads /dev/tty) made ``run`` without a
    timeout hang for good; it now returns, saying the command waits for input."""
    async with served() as server:
        done = await cli("run", server.url, "--", "python3 -c 'import getpass; getpass.getpass()'")
    assert done.returncode == 125 and done.stdout == "Password:\n"
    assert one_line_error(done) == "ahp-terminals run: the command is waiting for input"


async def test_run_in_a_busy_terminal_is_refused() -> None:
    """Issue 20, defect 3: a command typed into a terminal whose command waits at a
    prompt was read by that command as its answer. Now nothing is typed."""
    async with served() as server:
        term = await server.host.create_terminal("ahp-terminal:/busy", name="busy")
        with trio.fail_after(TIMEOUT):
            first = await term.run('read -p "name? " n; echo "got $n"')
        assert first.status == "waiting_for_input" and first.handle is not None
        done = await cli("run", server.url, "--terminal", "busy", "--", "echo second")
        line = one_line_error(done)
        assert done.returncode == 125 and done.stdout == ""
        assert line.startswith("ahp-terminals run: refused: not typed: the terminal is busy with ")
        assert "read -p" in line and "waiting for input" in line
        with trio.fail_after(TIMEOUT):
            await first.handle.send_input("agent\r")
            answered = await first.handle.wait()
    assert answered.output.endswith("got agent\n")


async def test_run_without_command_detection() -> None:
    """A shell without integration: the marker fallback, after the detection wait."""
    async with served(shell="/bin/sh") as server:
        done = await cli("run", "--json", server.url, "--", "echo plain; (exit 6)")
    assert done.returncode == 6, done.stderr
    result = json.loads(done.stdout)
    assert (result["output"], result["exit_code"]) == ("plain\n", 6)


@pytest.mark.parametrize("limit", ["3000000", "0"])
async def test_run_takes_large_output_limits_and_zero_for_the_bound(limit: str) -> None:
    async with served() as server:
        done = await cli(
            "run",
            server.url,
            "--max-output-bytes",
            limit,
            "--",
            "seq 1 200000",
            timeout=3 * TIMEOUT,
        )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "".join(f"{n}\n" for n in range(1, 200001))
    assert done.stderr == ""


@pytest.mark.parametrize("count", [3000, 30000])
async def test_run_says_when_it_truncates_and_counts_what_it_prints(count: int) -> None:
    async with served() as server:
        done = await cli("run", server.url, "--max-output-bytes", "10000", "--", f"seq 1 {count}")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    printed = len(done.stdout.encode())
    assert 9000 < printed <= 10_000
    # Whole lines: the first ones as they came, then the last ones (at most half).
    head = [str(n) for n in range(1, len(lines) + 1)]
    cut = next(i for i, (a, b) in enumerate(zip(lines, head, strict=False)) if a != b)
    tail = lines[cut:]
    assert lines[:cut] == head[:cut]
    assert tail == [str(n) for n in range(count + 1 - len(tail), count + 1)]
    assert len("".join(f"{t}\n" for t in tail).encode()) <= 5000
    # Exact whatever the size (the result counts all of the output).
    dropped = count - len(lines)
    dropped_bytes = sum(len(f"{n}\n") for n in range(cut + 1, count + 1 - len(tail)))
    assert done.stderr == (
        f"ahp-terminals run: output truncated: {dropped_bytes} bytes in {dropped} lines dropped, "
        f"printed {printed} bytes: the first ones as they came and the last 5000 at most "
        "(--max-output-bytes 10000)\n"
    )


async def test_run_says_nothing_when_all_of_the_output_was_printed() -> None:
    """Regression (probe P): output past the head (``limit - tail``) that fits in the
    tail is all printed at the end; ``run`` said "output truncated: 0 bytes in 0 lines
    dropped" all the same."""
    async with served() as server:
        done = await cli("run", server.url, "--max-output-bytes", "100", "--", "seq 1 20")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "".join(f"{n}\n" for n in range(1, 21))  # 51 bytes: 48 + 3
    assert done.stderr == ""


async def test_run_prints_a_progress_bar_once_it_settled() -> None:
    bar = "for p in 10 40 70 100; do printf '%s%%\\r' $p; sleep 0.1; done; echo; echo next"
    async with served() as server:
        done = await cli("run", server.url, "--", bar)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "100%\nnext\n"


@pytest.mark.parametrize(
    ("output", "limit", "cut_before", "text", "dropped"),
    [
        ("a\nb\nc\n", 100, False, "a\nb\nc\n", 0),
        ("a\nb\nc\n", 4, False, "b\nc\n", 2),
        ("a\nb\nc\n", 3, False, "c\n", 4),  # "\nc\n" would start with a partial line
        ("abcdef\n", 3, False, "ef\n", 4),  # one line longer than the limit: its end
        ("a\nb\nc\n", 100, True, "b\nc\n", None),  # already cut: first line dropped
        ("é\nx\n", 3, False, "x\n", 3),
    ],
)
def test_printed_output(
    output: str, limit: int, cut_before: bool, text: str, dropped: int | None
) -> None:
    printed = printed_output(output, limit, cut_before=cut_before)
    assert (printed.text, printed.dropped) == (text, dropped)
    assert printed.truncated == (text != output)


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet="ab\né", max_size=80), st.integers(min_value=1, max_value=90))
def test_printed_output_is_a_bounded_suffix_of_whole_lines(output: str, limit: int) -> None:
    printed = printed_output(output, limit)
    assert output.endswith(printed.text)
    assert len(printed.text.encode()) <= limit
    assert printed.truncated == (printed.text != output)
    before = output[: len(output) - len(printed.text)]
    if before and "\n" in printed.text[:-1]:
        assert before.endswith("\n")  # starts at a line start when it can


@attrs.define
class CuttableProxy:
    """A TCP proxy to a server's port: :meth:`down` breaks every connection it
    carries and closes its port (connections refused), :meth:`up` opens the same
    port again. A network failure, as ``run`` sees one."""

    target: int
    nursery: trio.Nursery
    port: int = 0
    accepted: int = 0
    serving: trio.CancelScope | None = None

    async def up(self) -> None:
        self.serving = await self.nursery.start(self._serve)

    def down(self) -> None:
        assert self.serving is not None
        self.serving.cancel()

    async def _serve(self, *, task_status: trio.TaskStatus[trio.CancelScope]) -> None:
        with trio.CancelScope() as scope:
            listeners = await trio.open_tcp_listeners(self.port, host="127.0.0.1")
            self.port = listeners[0].socket.getsockname()[1]
            task_status.started(scope)
            await trio.serve_listeners(self._carry, listeners)

    async def _carry(self, client: trio.SocketStream) -> None:
        self.accepted += 1
        try:
            server = await trio.open_tcp_stream("127.0.0.1", self.target)
            try:
                async with trio.open_nursery() as nursery:

                    async def pump(a: trio.SocketStream, b: trio.SocketStream) -> None:
                        broken = (trio.BrokenResourceError, trio.ClosedResourceError)
                        with contextlib.suppress(*broken):
                            while data := await a.receive_some(65536):
                                await b.send_all(data)
                        nursery.cancel_scope.cancel()

                    nursery.start_soon(pump, client, server)
                    nursery.start_soon(pump, server, client)
            finally:
                await trio.aclose_forcefully(server)
        finally:
            await trio.aclose_forcefully(client)


@asynccontextmanager
async def cuttable_proxy(url: str) -> AsyncIterator[tuple[CuttableProxy, str]]:
    """A :class:`CuttableProxy` (up) to ``url``'s server, and the URL through it."""
    target = int(url.split("://", 1)[1].split("/", 1)[0].rsplit(":", 1)[1])
    async with trio.open_nursery() as nursery:
        proxy = CuttableProxy(target, nursery)
        await proxy.up()
        yield proxy, url.replace(f":{target}/", f":{proxy.port}/", 1)
        nursery.cancel_scope.cancel()


async def test_run_reconnects_when_its_connection_breaks_and_carries_on() -> None:
    """Regression (probe B, item 1): a connection lost while the command ran ended
    ``run`` with 125 and left the terminal it created on the server, running and
    claimed. It reconnects now (replay), prints the rest of the output, exits with
    the command's code and disposes its terminal."""
    async with served() as server, cuttable_proxy(server.url) as (proxy, url):
        script = "for i in $(seq 1 20); do echo line-$i; sleep 0.1; done; (exit 3)"
        proc = await trio.lowlevel.open_process(
            [sys.executable, "-m", "ahp", "run", url, "--", script],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=_env(),
            cwd=str(REPO),
        )
        try:
            assert proc.stderr is not None and proc.stdout is not None
            out = b""
            with trio.fail_after(TIMEOUT):
                while b"line-3\n" not in out:
                    chunk = await proc.stdout.receive_some(4096)
                    assert chunk, out
                    out += chunk
            proxy.down()
            await proxy.up()
            with trio.fail_after(TIMEOUT):
                out += b"".join([chunk async for chunk in proc.stdout])
                err = b"".join([chunk async for chunk in proc.stderr])
                status = await proc.wait()
        finally:
            await kill_and_reap(proc)
        assert proxy.accepted >= 2  # (it did reconnect, through the proxy)
        assert not server.host.terminals  # disposed, over the new connection
    assert (status, err.decode()) == (3, "")
    assert out.decode() == "".join(f"line-{i}\n" for i in range(1, 21))


def _printed_line_by_line(feeds: list[str], limit: int) -> tuple[str, int, int, bool]:
    """What :class:`OutputPrinter` prints, by its definition, one line at a time: the
    first lines while they fit in ``limit - tail``, then the most recent lines within
    ``tail`` bytes (a line longer than the tail: its end alone)."""
    tail_limit = min(limit // 2, TAIL_BYTES)
    head: list[str] = []
    tail: list[str] = []
    used, holding = 0, False
    for whole in (line for text in feeds for line in text.splitlines(keepends=True)):
        size = len(whole.encode("utf-8", "surrogatepass"))
        if not holding and used + size <= limit - tail_limit:
            head.append(whole)
            used += size
            continue
        holding = True
        line = whole
        if size > tail_limit:
            line = whole.encode("utf-8", "surrogatepass")[-tail_limit:].decode("utf-8", "ignore")
            tail = []
        tail.append(line)
        while sum(len(x.encode("utf-8", "surrogatepass")) for x in tail) > tail_limit:
            tail.pop(0)
    text = "".join(head + tail)
    # Truncated: something was dropped (held back past the head and then printed in the
    # tail is not dropped).
    dropped = text != "".join(feeds)
    return text, len(text.encode("utf-8", "surrogatepass")), len(head) + len(tail), dropped


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.text(alphabet="ab\né\x0c\u2028😀", max_size=120), max_size=8),
    st.integers(min_value=1, max_value=200),
)
def test_output_printer_prints_lines_as_defined_whatever_the_pieces(
    feeds: list[str], limit: int
) -> None:
    """The printer skips the Python work for lines it will drop (``run`` of a flood of
    short lines spent seconds in it, holding its reader); what it prints is still
    exactly what feeding it line by line gives."""
    written: list[str] = []
    printer = OutputPrinter(limit, written.append)
    for text in feeds:
        printer.feed(text)
    printer.close()
    got = ("".join(written), printer.printed_bytes, printer.printed_lines, printer.truncated)
    assert got == _printed_line_by_line(feeds, limit)


@pytest.mark.parametrize("comes_back", [True, False], ids=["comes-back", "never"])
async def test_run_that_cannot_reconnect_disposes_its_terminal_or_names_it(
    comes_back: bool,
) -> None:
    """Regression (probe B, item 1): ``run`` gives up after ``RECONNECT_WINDOW`` (1 s
    here: the constants are set for the test) with 125, and disposes the terminal it
    created over the next connection that succeeds within ``DISPOSE_TIMEOUT``; when
    none does, it says on stderr that the terminal was left, and how to close it."""
    dispose = 4 if comes_back else 1
    program = (
        "import sys; import ahp.client.commands.run as r; "
        f"r.RECONNECT_WINDOW = 1.0; r.DISPOSE_TIMEOUT = {dispose}; "
        "from ahp.cli import main; sys.exit(main(sys.argv[1:]))"
    )
    async with served() as server, cuttable_proxy(server.url) as (proxy, url):
        proc = await trio.lowlevel.open_process(
            [sys.executable, "-c", program, "run", url, "--", "echo begin; sleep 60"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=_env(),
            cwd=str(REPO),
        )
        try:
            assert proc.stderr is not None and proc.stdout is not None
            out = b""
            with trio.fail_after(TIMEOUT):
                while b"begin\n" not in out:
                    chunk = await proc.stdout.receive_some(4096)
                    assert chunk, out
                    out += chunk
            (uri,) = server.host.terminals
            proxy.down()
            if comes_back:
                await trio.sleep(1.5)  # (longer than the window: run gives up first)
                await proxy.up()
            with trio.fail_after(TIMEOUT):
                err = b"".join([chunk async for chunk in proc.stderr])
                status = await proc.wait()
        finally:
            await kill_and_reap(proc)
        lines = err.decode().splitlines()
        assert status == 125, err
        assert lines[-1] == (
            "ahp-terminals run: connection lost while the command ran (no reconnect within 1 s)"
        )
        if comes_back:
            assert not server.host.terminals  # disposed over the new connection
        else:
            assert list(server.host.terminals) == [uri]
            name = uri.removeprefix("ahp-terminal:/")
            assert lines[0] == (
                f"ahp-terminals run: the terminal {uri} was left on the server (no connection "
                f"within 1 s); close it with: ahp-terminals rm URL {name}"
            ), lines


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
async def test_run_stopped_by_a_signal_interrupts_and_disposes(signum: signal.Signals) -> None:
    """(Probe M: on SIGINT, ``run`` said nothing on stderr, unlike SIGTERM and SIGHUP.)"""
    async with served() as server:
        host = server.host
        proc = await trio.lowlevel.open_process(
            [sys.executable, "-m", "ahp", "run", server.url, "--", "echo begin; sleep 600"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=_env(),
            cwd=str(REPO),
        )
        try:
            assert proc.stderr is not None and proc.stdout is not None
            # The output is printed as it comes, not at the end.
            out = b""
            with trio.fail_after(TIMEOUT):
                while b"begin\n" not in out:
                    chunk = await proc.stdout.receive_some(4096)
                    assert chunk, out
                    out += chunk

            def busy() -> bool:
                return any(
                    isinstance(p, ahp.CommandPart) and not p.isComplete
                    for t in host.terminals.values()
                    for p in t.state.content
                )

            with trio.fail_after(TIMEOUT):
                while not busy():  # noqa: ASYNC110 (the host has no event for this)
                    await trio.sleep(0.05)
                proc.send_signal(signum)
                err = b"".join([chunk async for chunk in proc.stderr])
                out += b"".join([chunk async for chunk in proc.stdout])
                assert await proc.wait() == 128 + signum
                while host.terminals:  # noqa: ASYNC110
                    await trio.sleep(0.05)
        finally:
            await kill_and_reap(proc)
    assert err.decode() == f"ahp-terminals run: {signum.name}: the command was interrupted\n"
    # What came is kept: printed before the status line, with the interrupt's echo.
    assert out.decode().startswith("begin\n"), out


async def test_run_and_exec_say_so_at_once_when_the_server_shuts_down(tmp_path: Path) -> None:
    """Probe M (finding 5): a server's shutdown (SIGTERM, its drain, the 1001 goodbye,
    its terminals disposed) was taken for a network drop: ``run`` waited 10 s for a
    reconnect and 10 s to dispose, then named the terminal as left on the server
    (wrong: it was disposed); ``exec`` said "connection lost". Both now say the server
    shut down, in one line, 125."""
    async with serve_process("--shell", "bash", "--drain-timeout", "1") as (server, url):
        clients = []
        try:
            for name in ("run", "exec"):
                started = tmp_path / name
                line = f"touch {started}; sleep 600"
                words = [line] if name == "run" else ["sh", "-c", line]
                proc = await trio.lowlevel.open_process(
                    [sys.executable, "-m", "ahp", name, url, "--", *words],
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE,
                    env=_env(),
                    cwd=str(REPO),
                )
                clients.append(proc)
                with trio.fail_after(PROCESS_TIMEOUT):
                    while not started.exists():  # noqa: ASYNC110 (a file has no event)
                        await trio.sleep(0.05)
            server.send_signal(signal.SIGTERM)
            with trio.fail_after(PROCESS_TIMEOUT):
                assert await server.wait() == 0
                for proc, name in zip(clients, ["run", "exec"], strict=True):
                    assert proc.stderr is not None
                    err = b"".join([chunk async for chunk in proc.stderr]).decode()
                    assert await proc.wait() == 125, err
                    assert err == f"ahp-terminals {name}: {SERVER_SHUT_DOWN}\n"
        finally:
            for proc in clients:
                await kill_and_reap(proc)


async def test_run_refuses_a_control_character_in_one_line() -> None:
    # A command is text for the shell (ahp.agent.line): the CLI printed a traceback.
    async with served() as server:
        done = await cli("run", server.url, "--", "echo a\x1bb")
        assert done.returncode == 125, done
        assert done.stderr.startswith(
            "ahp-terminals run: the command holds the control character"
        ), done
        assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done
        assert not server.host.terminals  # (refused before anything was created)


async def test_run_refuses_piped_input_it_cannot_forward(tmp_path: Path) -> None:
    data = tmp_path / "input"
    data.write_text("abc\n")
    read_end, write_end = os.pipe()
    os.write(write_end, b"abc\n")
    os.close(write_end)
    async with served() as server:
        for stdin in (read_end, os.open(data, os.O_RDONLY)):
            try:
                with trio.fail_after(TIMEOUT):
                    done = await trio.run_process(
                        [sys.executable, "-m", "ahp", "run", server.url, "--", "cat"],
                        stdin=stdin,
                        capture_stdout=True,
                        capture_stderr=True,
                        check=False,
                        env=_env(),
                        cwd=str(REPO),
                    )
            finally:
                os.close(stdin)
            assert done.returncode == 125
            assert done.stderr.decode() == (
                "ahp-terminals run: standard input is not forwarded (the command reads from its "
                "remote terminal): put the data in the command line, or run with < /dev/null\n"
            )
            assert not server.host.terminals
        # An empty pipe (or /dev/null, as in the other tests) is fine.
        read_end, write_end = os.pipe()
        os.close(write_end)
        try:
            with trio.fail_after(TIMEOUT):
                done = await trio.run_process(
                    [sys.executable, "-m", "ahp", "run", server.url, "--", "echo fine"],
                    stdin=read_end,
                    capture_stdout=True,
                    check=False,
                    env=_env(),
                    cwd=str(REPO),
                )
        finally:
            os.close(read_end)
        assert (done.returncode, done.stdout) == (0, b"fine\n")


def test_run_takes_its_options_after_the_url() -> None:
    assert split_options(["--timeout", "2", "--json", "--", "ls", "-l"]) == (
        ["--timeout", "2", "--json"],
        ["ls", "-l"],
    )
    assert split_options(["--timeout=2", "echo", "--json"]) == (["--timeout=2"], ["echo", "--json"])
    assert split_options(["--", "--json"]) == ([], ["--json"])


# -- bad input ---------------------------------------------------------------------------------


async def test_bad_inputs_give_one_line_and_a_non_zero_exit() -> None:
    nowhere = f"ws://127.0.0.1:{free_port()}/?tkn=x"
    async with served() as server:
        wrong = server.bare_url + "?tkn=wrong"
        cases: dict[str, tuple[tuple[str, ...], str]] = {
            "ls unreachable": (("ls", nowhere), "cannot connect"),
            "run unreachable": (("run", nowhere, "--", "true"), "cannot connect"),
            "attach unreachable": (("attach", nowhere, "t1"), "cannot connect"),
            "ls wrong token": (("ls", wrong), "403"),
            "run wrong token": (("run", wrong, "--", "true"), "403"),
            "attach wrong token": (("attach", wrong, "t1"), "403"),
            "ls no token": (("ls", server.bare_url), "403"),
            "run unknown terminal": (
                ("run", server.url, "--terminal", "nope", "--", "true"),
                "no terminal ahp-terminal:/nope",
            ),
            "ls malformed": (("ls", "localhost:8765"), "malformed URL"),
            "run malformed": (("run", "ws://host:port/", "--", "true"), "malformed URL"),
            "attach malformed": (("attach", "ws://", "t1"), "malformed URL"),
            "run no command": (("run", server.url), "no command"),
            "run --timeout nan": (
                ("run", server.url, "--timeout", "nan", "--", "true"),
                "--timeout must be a positive, finite number of seconds",
            ),
            "exec --timeout inf": (
                ("exec", server.url, "--timeout", "inf", "--", "true"),
                "--timeout must be a positive, finite number of seconds",
            ),
            "run bad cwd": (("run", server.url, "--cwd", "/nonexistent", "--", "true"), "cwd"),
            "run output bound": (
                ("run", server.url, "--max-output-bytes", "30000000", "--", "true"),
                "--max-output-bytes 30000000 is out of range: 0 to 8388608",
            ),
            "attach --shell": (
                ("attach", server.url, "t1", "--shell", "/bin/zsh"),
                "serve --shell",
            ),
            "attach a typo": (("attach", server.url, "tpyo"), "no terminal ahp-terminal:/tpyo"),
            "attach --create from /dev/null": (
                ("attach", server.url, "t1", "--create"),
                "standard input is not a terminal, so none is created",
            ),
        }
        results: dict[str, subprocess.CompletedProcess[str]] = {}

        # A few at a time: twenty Python start-ups at once on a loaded 2-core machine
        # took longer than one command's timeout.
        limit = trio.CapacityLimiter(4)

        async def one(name: str, args: tuple[str, ...]) -> None:
            async with limit:
                results[name] = await cli(*args, timeout=3 * TIMEOUT)

        async with trio.open_nursery() as nursery:
            for name, (args, _) in cases.items():
                nursery.start_soon(one, name, args)
        assert not server.host.terminals  # nothing was created by a failed command
    for name, (args, expected) in cases.items():
        done = results[name]
        line = one_line_error(done)
        assert line.startswith(f"ahp-terminals {args[0]}: "), (name, line)
        assert expected in line, (name, line)
        assert done.stdout == "", (name, done.stdout)
        expected_code = 125 if args[0] in ("run", "exec") else 1
        assert done.returncode == expected_code, (name, done.returncode)
    # The token is never echoed in an error.
    assert all("test-token" not in r.stderr for r in results.values())


#: The viewer page's address where a command's URL belongs (probe P: "malformed URL"
#: only), and what it should have been: (pasted, the URL named, how to make it).
VIEWER_ADDRESSES = [
    (
        "http://127.0.0.1:8765/#tkn=secret-token",
        "ws://127.0.0.1:8765/?tkn=TOKEN",
        "ws:// for http://, ?tkn= for #tkn=",
    ),
    (  # the address bar, once the page took the token out of it
        "http://127.0.0.1:8765/",
        "ws://127.0.0.1:8765/?tkn=TOKEN",
        "ws:// for http:// and ?tkn=TOKEN added",
    ),
    (
        "https://box.example:9000/#ro=secret-token",
        "wss://box.example:9000/?tkn=READ-ONLY-TOKEN",
        "wss:// for https://, ?tkn= for #ro=; it only watches",
    ),
]


async def test_a_url_a_command_cannot_use_says_which_url_to_give() -> None:
    commands = {
        "run": ("--", "true"),
        "exec": ("--", "true"),
        "ls": (),
        "rm": ("t1",),
        "attach": ("t1",),
    }
    cases: dict[tuple[str, str], tuple[str, ...]] = {}
    for pasted, _, _ in VIEWER_ADDRESSES:
        for command, rest in commands.items():
            cases[(command, pasted)] = (command, pasted, *rest)
    cases[("ls --host", VIEWER_ADDRESSES[0][0])] = ("ls", "--host", VIEWER_ADDRESSES[0][0])
    cases[("ls", "localhost:8765")] = ("ls", "localhost:8765")
    results: dict[tuple[str, str], subprocess.CompletedProcess[str]] = {}
    limit = trio.CapacityLimiter(4)

    async def one(key: tuple[str, str], args: tuple[str, ...]) -> None:
        async with limit:
            results[key] = await cli(*args, timeout=3 * TIMEOUT)

    async with trio.open_nursery() as nursery:
        for key, args in cases.items():
            nursery.start_soon(one, key, args)
    for pasted, wanted, how in VIEWER_ADDRESSES:
        for command in [*commands, "ls --host"]:
            done = results.get((command, pasted))
            if done is None:
                continue
            line = one_line_error(done)
            assert done.returncode == (125 if command in ("run", "exec") else 1), done
            shown = pasted.replace("secret-token", "…")
            assert line == (
                f"ahp-terminals {command.split()[0]}: {shown!r} is the viewer page's address; "
                "this command takes the connect URL, the first line `ahp-terminals serve` prints: "
                f"{wanted} (the page's address with {how})"
            ), line
            assert "secret-token" not in done.stderr  # a token is never repeated
    line = one_line_error(results[("ls", "localhost:8765")])
    assert line == (
        "ahp-terminals ls: malformed URL 'localhost:8765': give the connect URL, the first line "
        "`ahp-terminals serve` prints: ws://HOST:PORT/?tkn=TOKEN (wss:// with --tls-cert, "
        "ws+unix://PATH:/?tkn=TOKEN with --unix)"
    )


async def test_nothing_listening_asks_whether_serve_runs_there(tmp_path: Path) -> None:
    # Probe P: "cannot connect to ws://127.0.0.1:8766: all attempts to connect to
    # 127.0.0.1:8766 failed", and nothing said what to check.
    port = free_port()
    socket_path = tmp_path / "gone.sock"
    done = {
        "tcp": await cli("ls", f"ws://127.0.0.1:{port}/?tkn=x"),
        "wss": await cli("run", f"wss://127.0.0.1:{port}/?tkn=x", "--", "true"),
        "unix": await cli("attach", f"ws+unix://{socket_path}:/?tkn=x", "t1"),
    }
    assert one_line_error(done["tcp"]) == (
        f"ahp-terminals ls: cannot connect to ws://127.0.0.1:{port}: connection refused: is "
        f"`ahp-terminals serve` running at 127.0.0.1:{port}?"
    )
    # (wss:// was refused as a malformed URL by every command, though serve --tls-cert
    # prints it and the library connects to it.)
    assert one_line_error(done["wss"]) == (
        f"ahp-terminals run: cannot connect to wss://127.0.0.1:{port}: connection refused: is "
        f"`ahp-terminals serve` running at 127.0.0.1:{port}?"
    )
    assert one_line_error(done["unix"]) == (
        f"ahp-terminals attach: cannot connect to ws+unix://{socket_path}:/: No such file or "
        f"directory: is `ahp-terminals serve --unix {socket_path}` running?"
    )


# -- attach, in tmux ---------------------------------------------------------------------------


#: How long a pane may take to show what a test waits for. A pane can only be polled
#: (tmux reports no events), and under load the chain behind one screen (tmux, the
#: attach process starting Python, the server, a shell starting) took longer than the
#: usual bound: generous, since a pass costs nothing and only a failure waits it out.
PANE_TIMEOUT = 4 * TIMEOUT


class Tmux:
    """A private tmux server (its own socket, no config) driven by its command line."""

    def __init__(self, directory: str) -> None:
        self.socket_path = os.path.join(directory, "sock")
        rcfile = os.path.join(directory, "bashrc")
        with open(rcfile, "w") as f:
            f.write("PS1='local$ '\n")
        #: A plain local shell for a pane, with the prompt ``local$``.
        self.local_shell = shlex.join(["bash", "--noprofile", "--rcfile", rcfile, "-i"])

    async def __call__(self, *args: str) -> str:
        with trio.fail_after(TIMEOUT):
            done = await trio.run_process(
                ["tmux", "-S", self.socket_path, "-f", "/dev/null", *args],
                capture_stdout=True,
                capture_stderr=True,
                env=_env(),
                cwd=str(REPO),
            )
        return str(done.stdout.decode())

    async def type(self, target: str, text: str) -> None:
        """Type ``text`` literally, then Enter."""
        await self("send-keys", "-t", target, "-l", text)
        await self("send-keys", "-t", target, "Enter")

    async def screen(self, target: str) -> str:
        return await self("capture-pane", "-p", "-t", target)

    async def wait(
        self, target: str, predicate: Callable[[str], bool], timeout: float = PANE_TIMEOUT
    ) -> str:
        """Poll the pane until ``predicate(screen)`` holds (bounded by ``timeout``)."""
        screen = ""
        with trio.move_on_after(timeout):
            while True:
                screen = await self.screen(target)
                if predicate(screen):
                    return screen
                await trio.sleep(0.05)
        raise AssertionError(f"pane {target} never matched; it shows:\n{screen}")

    async def pane_pid(self, target: str) -> int:
        return int((await self("display-message", "-p", "-t", target, "#{pane_pid}")).strip())


@pytest.fixture
async def tmux() -> AsyncIterator[Tmux]:
    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed")
    directory = tempfile.mkdtemp(prefix="ahp-tmux-")  # short: socket paths are limited
    server = Tmux(directory)
    try:
        yield server
    finally:
        with trio.CancelScope(shield=True):
            await trio.run_process(
                ["tmux", "-S", server.socket_path, "kill-server"],
                check=False,
                capture_stderr=True,
            )
        shutil.rmtree(directory, ignore_errors=True)


def child_pids(pid: int) -> list[str]:
    with open(f"/proc/{pid}/task/{pid}/children") as f:
        return f.read().split()


def attach_command(url: str, terminal: str, *, create: bool = True) -> str:
    return shlex.join(
        [sys.executable, "-m", "ahp", "attach", url, terminal, *(["--create"] if create else [])]
    )


def last_line(screen: str) -> str:
    lines = [line for line in screen.splitlines() if line.strip()]
    return lines[-1].rstrip() if lines else ""


async def start_local_shell(tmux: Tmux, name: str) -> None:
    """A tmux session running a plain local shell (prompt ``local$``) sized 120x40."""
    await tmux("new-session", "-d", "-s", name, "-x", "120", "-y", "40", tmux.local_shell)
    await tmux.wait(name, lambda s: last_line(s) == "local$")


async def test_attach_type_detach_and_reattach_sees_the_history(tmux: Tmux, tmp_path: Path) -> None:
    saved = tmp_path / "stty-before"
    async with served() as server:
        await start_local_shell(tmux, "one")
        await tmux.type("one", f"stty -g > {saved}")
        attach = attach_command(server.url, "t1") + "; echo attach-status=$?"
        await tmux.type("one", attach)
        # The terminal was created (sized like the pane) and its prompt is shown, under
        # a banner that names it and the detach key.
        screen = await tmux.wait("one", lambda s: last_line(s) == "$")
        assert "[ahp attach: created and attached ahp-terminal:/t1; Ctrl-] detaches" in screen
        state = server.host.get("ahp-terminal:/t1").state
        assert (state.cols, state.rows) == (120, 40)
        await tmux.type("one", "echo hello-$((6*7))")
        await tmux.wait("one", lambda s: "hello-42" in s)

        await tmux("send-keys", "-t", "one", "C-]")
        screen = await tmux.wait("one", lambda s: last_line(s) == "local$")
        assert "ahp-terminals attach: detached from ahp-terminal:/t1; it keeps running" in screen
        assert "attach-status=0" in screen
        assert server.host.get("ahp-terminal:/t1").running
        # The claim of the terminal it created was given back: its owner (or anyone)
        # can rm it at once, not 5 minutes after the attach's client is forgotten.
        claim = server.host.get("ahp-terminal:/t1").state.claim
        assert isinstance(claim, ahp.ClientClaim) and claim.clientId == "", claim
        # The local terminal is back in its original mode.
        await tmux.type("one", f"stty -g | cmp -s - {saved} && echo tty-$((1+1))-restored")
        await tmux.wait("one", lambda s: "tty-2-restored" in s)

        await tmux.type("one", "clear")
        await tmux.wait("one", lambda s: "hello-42" not in s and last_line(s) == "local$")
        await tmux.type("one", attach)
        # Re-attached: the history is on screen again and the shell answers.
        await tmux.wait("one", lambda s: "hello-42" in s and last_line(s) == "$")
        await tmux.type("one", "echo again-$((6*7))")
        await tmux.wait("one", lambda s: "again-42" in s)


#: A remote program that asks the terminal for the cursor position and the device
#: attributes, and reads the answers (as ``vi`` does when it starts).
ASKS = (
    "printf '\\033[6n\\033[c\\033]11;?\\007'; read -rs -d c; read -rs -t 1 -d x; "
    "echo asked-$((6*7))"
)


def last_command_line(server: Server, uri: str) -> str:
    parts = [p for p in server.host.get(uri).state.content if isinstance(p, ahp.CommandPart)]
    return parts[-1].commandLine if parts else ""


async def test_replayed_history_makes_the_local_terminal_answer_nothing(tmux: Tmux) -> None:
    async with served() as server:
        await start_local_shell(tmux, "q")
        attach = attach_command(server.url, "tq")
        await tmux.type("q", attach)
        await tmux.wait("q", lambda s: last_line(s) == "$")
        # Live, the local terminal answers and the remote program reads the answers.
        await tmux.type("q", ASKS)
        await tmux.wait("q", lambda s: "asked-42" in s and last_line(s) == "$")
        if shutil.which("vi") is not None:
            await tmux.type("q", "vi")
            await tmux.wait("q", lambda s: s.count("~") > 5)
            # vim asks the terminal questions as it starts and reads the answers for a
            # while after drawing; ":q" typed in that window can be taken as an answer.
            await trio.sleep(1.0)
            await tmux.type("q", ":q")
            await tmux.wait("q", lambda s: last_line(s) == "$")
        await tmux("send-keys", "-t", "q", "C-]")
        await tmux.wait("q", lambda s: last_line(s) == "local$")

        # Attach again: the history (with the questions in it) is drawn, and the next
        # command reaches the remote shell exactly as typed.
        await tmux.type("q", "clear; " + attach)
        await tmux.wait("q", lambda s: "asked-42" in s and last_line(s) == "$")
        await tmux.type("q", "echo clean-$((6*7))")
        await tmux.wait("q", lambda s: "clean-42" in s and last_line(s) == "$")
        with trio.fail_after(TIMEOUT):
            while last_command_line(server, "ahp-terminal:/tq") != "echo clean-$((6*7))":
                assert "clean" not in last_command_line(server, "ahp-terminal:/tq")
                await trio.sleep(0.05)

        # The remote shell exits; attaching to the exited terminal shows its history
        # and leaves nothing in the local shell's input.
        await tmux.type("q", "exit 5")
        await tmux.wait("q", lambda s: last_line(s) == "local$")
        await tmux.type("q", "clear; " + attach + " < /dev/tty; echo status=$?")
        screen = await tmux.wait("q", lambda s: "status=5" in s and last_line(s) == "local$")
        assert "ahp-terminal:/tq has exited (code 5)" in screen
        assert "asked-42" in screen and "keeps running" not in screen
        await tmux.type("q", "echo local-$((6*7))")
        screen = await tmux.wait("q", lambda s: "local-42" in s.replace("$((6*7))", ""))
        assert "local$ echo local-$((6*7))" in screen.splitlines(), screen
        # And with stdin not a terminal: no "it keeps running" for an exited terminal.
        done = await cli("attach", server.url, "tq")
        assert done.returncode == 5, done
        assert done.stderr.strip() == "ahp-terminals attach: ahp-terminal:/tq has exited (code 5)"
        assert "\x1b[6n" not in done.stdout and "\x1b[c" not in done.stdout


async def test_two_attached_panes_show_the_same_screen_and_follow_resizes(tmux: Tmux) -> None:
    async with served() as server:
        for name in ("a", "b"):
            await tmux(
                "new-session", "-d", "-s", name, "-x", "120", "-y", "40",
                attach_command(server.url, "t2"),
            )  # fmt: skip
            await tmux.wait(name, lambda s: last_line(s) == "$")
        await tmux.type("b", "echo both-$((6*7))")
        await tmux.type("a", "echo and-$((6*7))")
        for name in ("a", "b"):
            await tmux.wait(name, lambda s: "and-42" in s and last_line(s) == "$")
        screens: list[str] = []

        async def same() -> bool:
            # (Below the banner, which says which pane created the terminal.)
            screens[:] = [(await tmux.screen(n)).split("\n", 1)[1] for n in ("a", "b")]
            return screens[0] == screens[1]

        with trio.move_on_after(TIMEOUT):
            while not await same():  # noqa: ASYNC110 (tmux can only be polled)
                await trio.sleep(0.05)
        assert screens[0] == screens[1], screens
        assert "both-42" in screens[0]

        # A local window size change reaches the remote terminal.
        await tmux("resize-window", "-t", "a", "-x", "100", "-y", "30")
        await tmux.wait("a", lambda s: len(s.splitlines()) == 30)
        term = server.host.get("ahp-terminal:/t2")
        with trio.fail_after(TIMEOUT):
            while (term.state.cols, term.state.rows) != (100, 30):  # noqa: ASYNC110
                await trio.sleep(0.05)
        await tmux.type("a", "stty size")
        await tmux.wait("a", lambda s: "30 100" in s)


async def test_attach_ends_cleanly_on_remote_exit_sigterm_and_connection_loss(
    tmux: Tmux, tmp_path: Path
) -> None:
    saved = tmp_path / "stty-before"
    restored = f"stty -g | cmp -s - {saved} && echo tty-$((1+1))-restored"
    async with served() as server:
        await start_local_shell(tmux, "c")
        await tmux.type("c", f"stty -g > {saved}")

        # The remote process exits: attach exits with its code.
        await tmux.type("c", attach_command(server.url, "t3") + "; echo attach-status=$?")
        await tmux.wait("c", lambda s: last_line(s) == "$")
        await tmux.type("c", "exit 3")
        screen = await tmux.wait("c", lambda s: last_line(s) == "local$")
        assert "ahp-terminals attach: ahp-terminal:/t3 exited with code 3" in screen
        assert "attach-status=3" in screen
        await tmux.type("c", restored)
        await tmux.wait("c", lambda s: "tty-2-restored" in s)

        # SIGTERM: restored, status 128 + 15.
        await tmux.type("c", "clear; " + attach_command(server.url, "t4") + "; echo status=$?")
        await tmux.wait("c", lambda s: last_line(s) == "$")
        shell_pid = await tmux.pane_pid("c")
        children = child_pids(shell_pid)
        assert len(children) == 1, children
        os.kill(int(children[0]), signal.SIGTERM)
        screen = await tmux.wait("c", lambda s: last_line(s) == "local$")
        assert "ahp-terminals attach: SIGTERM: detached from ahp-terminal:/t4" in screen
        assert "status=143" in screen
        await tmux.type("c", restored)
        await tmux.wait("c", lambda s: "tty-2-restored" in s)

        # The server goes away (it closes with 1001): said so (probe M, finding 5: it was
        # "connection lost", as for a network drop), status 1, restored.
        await tmux.type("c", "clear; " + attach_command(server.url, "t4") + "; echo status=$?")
        await tmux.wait("c", lambda s: last_line(s) == "$")
        server.stop.cancel()
        screen = await tmux.wait("c", lambda s: last_line(s) == "local$")
        assert "ahp-terminals attach: the server shut down (1001 going away)" in screen
        assert "status=1" in screen
        await tmux.type("c", restored)
        await tmux.wait("c", lambda s: "tty-2-restored" in s)


# -- examples ----------------------------------------------------------------------------------


async def test_agent_example_on_a_taken_port_says_so_in_one_line() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        with trio.fail_after(TIMEOUT * 2):
            done = await trio.run_process(
                [sys.executable, str(REPO / "examples" / "agent.py"), "--port", str(port)],
                capture_stdout=True,
                capture_stderr=True,
                check=False,
                env=_env(),
                cwd=str(REPO),
            )
    assert done.returncode == 1
    assert done.stderr.decode().splitlines() == [
        f"agent.py: cannot serve on port {port}: Address already in use"
    ]


async def test_agent_example_runs_its_commands() -> None:
    with trio.fail_after(TIMEOUT * 2):
        done = await trio.run_process(
            [sys.executable, str(REPO / "examples" / "agent.py"), "--port", "0", "--exit"],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
            env=_env(),
            cwd=str(REPO),
        )
    out = done.stdout.decode()
    assert done.returncode == 0, done.stderr.decode()
    assert out.startswith("serving ws://127.0.0.1:")
    # The attach line is a command that works here (probe P: it said `python -m ahp`,
    # which the system's Python does not have): this venv's console script.
    attach = next(line for line in out.splitlines() if line.startswith("attach with: "))
    words = shlex.split(attach.removeprefix("attach with: "))
    assert words[0] == str(Path(sys.executable).with_name("ahp-terminals")), attach
    assert os.access(words[0], os.X_OK) and words[1] == "attach", attach
    assert words[2].startswith("ws://127.0.0.1:") and words[3:] == ["agent"], attach
    assert "$ echo hello from the agent\nhello from the agent\n-> exit 0 in " in out
    assert "$ (exit 3)\n-> exit 3 in " in out
    # Issue 20, defect 5: each run gave back the claim the previous one had not yet.
    assert "\nclaim given back: ClientClaim(" in out, out


async def test_agent_example_stops_quietly_on_ctrl_c() -> None:
    proc = await trio.lowlevel.open_process(
        [sys.executable, str(REPO / "examples" / "agent.py"), "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_env(),
        cwd=str(REPO),
    )
    try:
        assert proc.stdout is not None and proc.stderr is not None
        out = b""
        with trio.fail_after(TIMEOUT * 2):
            while b"still serving (Ctrl-C to stop)\n" not in out:
                chunk = await proc.stdout.receive_some(4096)
                assert chunk, out
                out += chunk
            proc.send_signal(signal.SIGINT)
            async for chunk in proc.stdout:
                out += chunk
            err = b"".join([chunk async for chunk in proc.stderr])
            assert await proc.wait() == 130
        assert out.endswith(b"stopped\n")
        assert b"Traceback" not in err and b"ExceptionGroup" not in err, err.decode()
    finally:
        await kill_and_reap(proc)


def _readme_block(heading: str) -> str:
    """The first ```python block after ``heading`` in the README."""
    text = (REPO / "README.md").read_text()
    after = text.split(heading, 1)[1]
    return after.split("```python\n", 1)[1].split("```", 1)[0]


async def test_readme_embedding_quick_start_runs_in_its_own_directory(tmp_path: Path) -> None:
    script = tmp_path / "quick_start.py"
    script.write_text(_readme_block("## The library"))
    # A stray check.py where the script is started: the example's own one runs instead.
    (tmp_path / "check.py").write_text("raise SystemExit('the stray check ran')\n")
    bin_dir = os.path.dirname(sys.executable)
    path = f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"
    with trio.fail_after(TIMEOUT * 2):
        done = await trio.run_process(
            [sys.executable, str(script)],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
            env=_env({"PATH": path}),
            cwd=str(tmp_path),
        )
    out = done.stdout.decode()
    assert done.returncode == 0, done.stderr.decode()
    assert out.startswith("watch with: ahp-terminals attach 'ws://127.0.0.1:")
    assert "finished 0 " in out and "all good" in out, out


async def test_watcher_example_exits_when_the_server_goes_away() -> None:
    async with served() as server:
        await server.host.create_terminal("ahp-terminal:/w", name="w")
        proc = await trio.lowlevel.open_process(
            [sys.executable, str(REPO / "examples" / "watcher.py"), server.url],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=_env(),
            cwd=str(REPO),
        )
        try:
            assert proc.stdout is not None and proc.stderr is not None
            out = b""
            with trio.fail_after(TIMEOUT):
                while b"watching ahp-terminal:/w\n" not in out:
                    chunk = await proc.stdout.receive_some(4096)
                    assert chunk, out
                    out += chunk
                server.stop.cancel()
                err = b"".join([chunk async for chunk in proc.stderr])
                assert await proc.wait() == 1
            assert err.decode() == "watcher: the server shut down (1001 going away)\n"
        finally:
            await kill_and_reap(proc)


async def test_watcher_example_prints_finished_commands() -> None:
    async with served() as server:
        term = await server.host.create_terminal("ahp-terminal:/w", name="w")
        async with trio.open_nursery() as nursery:
            proc = await trio.lowlevel.open_process(
                [sys.executable, str(REPO / "examples" / "watcher.py"), server.url, "--count", "2"],
                stdout=subprocess.PIPE,
                env=_env(),
                cwd=str(REPO),
            )
            assert proc.stdout is not None
            out = b""
            try:
                with trio.fail_after(PROCESS_TIMEOUT):
                    while b"watching ahp-terminal:/w\n" not in out:
                        chunk = await proc.stdout.receive_some(4096)
                        assert chunk, out
                        out += chunk
                    await term.run("echo one")
                    await term.run("sleep 0.2; (exit 3)")
                    async for chunk in proc.stdout:
                        out += chunk
                    assert await proc.wait() == 0
            finally:
                await kill_and_reap(proc)
            nursery.cancel_scope.cancel()
    lines = out.decode().splitlines()
    assert lines[0] == "watching ahp-terminal:/w"
    first, second = (line.split("  ") for line in lines[1:])
    assert first[0] == second[0] == "ahp-terminal:/w"
    assert (first[1], first[3]) == ("exit 0", "echo one")
    assert (second[1], second[3]) == ("exit 3", "sleep 0.2; (exit 3)")
    # The server stamps each mark when it parses it: the start's stamp may come a few
    # ms after bash printed it (a loaded machine), which shortens what a 0.2 s sleep
    # shows (199 ms once in a suite run).
    assert int(second[2].removesuffix(" ms")) >= 150


async def test_an_unreadable_answer_to_initialize_is_named() -> None:
    """A server answering ``initialize`` with what is not JSON-RPC made the client wait
    out its connect timeout and say only "no answer to initialize": it now says what
    came instead."""

    async def garbled(request: trio_websocket.WebSocketRequest) -> None:
        ws = await request.accept()
        with contextlib.suppress(trio_websocket.ConnectionClosed):
            await ws.get_message()
            await ws.send_message("this is not json")
            await ws.get_message()

    async with trio.open_nursery() as nursery:
        server = await nursery.start(trio_websocket.serve_websocket, garbled, "127.0.0.1", 0, None)
        with pytest.raises(ClientError, match="could not be read: malformed frame"):
            async with connect(f"ws://127.0.0.1:{server.port}/", connect_timeout=0.5):
                pass
        nursery.cancel_scope.cancel()


def test_a_servers_huge_error_message_is_cut(capsys: pytest.CaptureFixture[str]) -> None:
    """A server's error message is printed on one line of at most MAX_ERROR_LINE
    characters, its length said (a 10 MB message was printed whole)."""

    async def refused() -> int:
        raise RpcError(-32009, "\x1b[31mno" + "o" * 10_000_000)

    assert cli_main("ahp-terminals rm", refused) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and len(err) < MAX_ERROR_LINE + 200, len(err)
    assert "characters)" in err and "\x1b" not in err


async def test_attach_with_the_read_only_token_says_it_only_watches(tmp_path: Path) -> None:
    # Keystrokes vanished (the server refused each) under a banner saying "attached".
    read = "read-only-secret"
    options = ServeOptions(port=0, token="test-token", read_token=read)
    async with ahp.open_host() as host, trio.open_nursery() as nursery:
        sidecar = await nursery.start(serve_host, host, options)
        await host.create_terminal("ahp-terminal:/w", argv=["cat"])
        read_url = sidecar.url.replace("test-token", read)
        async with connect(read_url) as client:
            assert client.read_only
        async with connect(sidecar.url) as client:
            assert not client.read_only
        done = await cli("attach", read_url, "w", timeout=3 * TIMEOUT)
        nursery.cancel_scope.cancel()
    assert done.returncode == 0, done
    assert "ahp-terminals attach: end of input" in done.stderr, done.stderr
    assert banner("ahp-terminal:/w", created=False, read_only=True) == (
        "[ahp attach: watching ahp-terminal:/w (read-only token: keystrokes are not sent); "
        "Ctrl-] detaches]"
    )


_IMPORTED = """
import sys
from ahp.cli import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
print(" ".join(sorted(m for m in sys.modules if m.startswith(("ahp", "trio")))))
"""


@pytest.mark.parametrize(
    ("argv", "absent"),
    [
        (["--help"], ("trio", "ahp.server", "ahp.client", "ahp.mcp", "ahp.engine")),
        (["ls", "--help"], ("ahp.server", "ahp.mcp", "ahp.engine.host", "ahp.bench")),
        (["run", "--help"], ("ahp.server", "ahp.mcp", "ahp.engine.host", "ahp.bench")),
        (["play", "--help"], ("trio", "ahp.server", "ahp.client")),
    ],
)
def test_a_subcommand_imports_only_its_own_layer(argv: list[str], absent: tuple[str, ...]) -> None:
    """Every subcommand's parser was built for every run, importing the server, the
    client, MCP and the bench (0.35 s before a client command did anything); now only
    the subcommand's own module is imported ("--help" imports none)."""
    done = subprocess.run(
        [sys.executable, "-c", _IMPORTED, *argv],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    modules = set(done.stdout.split())
    assert "ahp.cli" in modules
    for prefix in absent:
        assert not any(m == prefix or m.startswith(prefix + ".") for m in modules), (prefix, done)


async def test_the_clients_take_the_token_from_the_token_file(tmp_path: Path) -> None:
    # Probe P: serve read $AHP_TOKEN_FILE, the clients did not (HTTP 403). Their order
    # is serve's: --token (or the URL's tkn), then the file, then $AHP_TOKEN.
    secret = tmp_path / "token"
    async with served() as server:
        secret.write_text(server.token + "\n")
        by_file = {"AHP_TOKEN_FILE": str(secret)}
        ran = await cli("run", server.bare_url, "--", "echo file", env=by_file)
        listed = await cli("ls", server.bare_url, env=by_file)
        many = await cli("ls", "--host", server.bare_url, env=by_file)
        # --token wins over the file, and so does the URL's tkn.
        secret.write_text("wrong-token")
        by_option = await cli("ls", server.bare_url, "--token", server.token, env=by_file)
        by_url = await cli("ls", server.url, env=by_file)
        refused = await cli("ls", server.bare_url, env=by_file)
        both = await cli("ls", server.bare_url, env={**by_file, "AHP_TOKEN": server.token})
        missing = await cli("ls", server.bare_url, env={"AHP_TOKEN_FILE": str(tmp_path / "no")})
    assert (ran.returncode, ran.stdout) == (0, "file\n"), ran.stderr
    assert listed.returncode == 0 and many.returncode == 0, (listed.stderr, many.stderr)
    assert by_option.returncode == 0 and by_url.returncode == 0, by_option.stderr
    assert "$AHP_TOKEN_FILE" in one_line_error(refused)  # (the 403's hint names it)
    assert (
        one_line_error(both)
        == "ahp-terminals ls: AHP_TOKEN and AHP_TOKEN_FILE are both set: set one"
    )
    assert one_line_error(missing).startswith("ahp-terminals ls: cannot read AHP_TOKEN_FILE ")
