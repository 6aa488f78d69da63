"""Drain on SIGTERM and the token file, against a real ``python -m ahp serve``.

Each test starts the sidecar as a subprocess (bash terminals, hermetic rc), talks to
it with a raw JSON-RPC peer and plain HTTP probes, signals it, and checks what the
client saw (the order of the last ``commandFinished`` and the 1001 close), what the
probes answered, the exit status, and that no process of a terminal outlives it.
Commands that must "finish during the drain" wait for a file the test creates, so
nothing depends on timing. The pure parts (:func:`command_in_progress`, the token
file) are tested without a server.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st

from ahp.engine import Outbox, open_host
from ahp.protocol.actions import TerminalInput
from ahp.protocol.state import ClientClaim, CommandPart, TerminalState, UnclassifiedPart
from ahp.server.drain import (
    GOING_AWAY,
    GOODBYE_TIMEOUT,
    busy_terminals,
    command_in_progress,
    drain,
)
from ahp.server.session import ServerState, Session
from ahp.tokenfile import MAX_TOKEN_FILE, TokenFileError, read_token_file
from ahp.ws import ConnectionClosed
from tests.helpers import TIMEOUT, kill_and_reap, stat_fields, wait_for_state
from tests.wire import Peer, peer, running_server

REPO = Path(__file__).resolve().parents[1]
CLIENT = {"kind": "client", "clientId": "drain-test"}


# -- the pure parts ---------------------------------------------------------------------------


def _state(*parts: CommandPart | UnclassifiedPart, exited: bool = False) -> TerminalState:
    return TerminalState(title="t", claim=ClientClaim(clientId="c"), content=parts, exited=exited)


def _command(complete: bool) -> CommandPart:
    return CommandPart(
        commandId="c1", commandLine="make", output="", timestamp=0, isComplete=complete
    )


def test_a_command_is_in_progress_until_its_part_completes() -> None:
    assert not command_in_progress(_state())
    assert not command_in_progress(_state(UnclassifiedPart(value="$ ")))
    assert command_in_progress(_state(_command(False)))
    assert command_in_progress(_state(_command(False), UnclassifiedPart(value="output")))
    assert not command_in_progress(_state(_command(True), UnclassifiedPart(value="$ ")))
    # An exited terminal runs nothing, whatever its last part says.
    assert not command_in_progress(_state(_command(False), exited=True))


@given(st.lists(st.booleans(), max_size=8), st.booleans())
def test_only_the_last_command_counts(completes: list[bool], exited: bool) -> None:
    parts = [_command(c) for c in completes]
    expected = bool(completes) and not completes[-1] and not exited
    assert command_in_progress(_state(*parts, exited=exited)) is expected


def test_the_token_file_is_read_stripped_and_refused_when_unusable(tmp_path: Path) -> None:
    good = tmp_path / "token"
    good.write_text("  s3cret-token\n")
    assert read_token_file(str(good)) == "s3cret-token"
    empty = tmp_path / "empty"
    empty.write_text(" \n")
    big = tmp_path / "big"
    big.write_text("x" * (MAX_TOKEN_FILE + 1))
    spaced = tmp_path / "spaced"
    spaced.write_text("two words\n")
    binary = tmp_path / "binary"
    binary.write_bytes(b"\xff\xfe")
    cases = {
        str(tmp_path / "missing"): "cannot read",
        str(tmp_path): "cannot read",  # a directory
        str(empty): "is empty",
        str(big): f"larger than {MAX_TOKEN_FILE} bytes",
        str(spaced): "no spaces",
        str(binary): "not UTF-8",
    }
    for path, why in cases.items():
        with pytest.raises(TokenFileError, match=why) as caught:
            read_token_file(path)
        assert "two words" not in str(caught.value)  # the content is never quoted
    # At the bound exactly, it is taken.
    edge = tmp_path / "edge"
    edge.write_text("y" * MAX_TOKEN_FILE)
    assert read_token_file(str(edge)) == "y" * MAX_TOKEN_FILE


def test_a_token_file_that_is_not_a_regular_file_is_refused_without_waiting(
    tmp_path: Path,
) -> None:
    # Probe Q: a FIFO with no writer made read_token_file wait in open() for ever (and
    # with it `serve` and every client). Now it is refused at once, as a directory or a
    # device is; a symbolic link to a regular file is still followed.
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    outcome: list[BaseException | str] = []

    def read() -> None:
        try:
            outcome.append(read_token_file(str(fifo)))
        except BaseException as exc:  # (handed to the test's thread)
            outcome.append(exc)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(TIMEOUT)
    waited = reader.is_alive()
    if waited:
        # Let the old code's open() return (a writer came), so no thread is left behind.
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        reader.join(TIMEOUT)
    assert not waited, f"read_token_file still waited on the FIFO after {TIMEOUT} s"
    [caught] = outcome
    assert isinstance(caught, TokenFileError), caught
    assert "not a regular file (a FIFO)" in str(caught) and str(fifo) in str(caught)
    with pytest.raises(TokenFileError, match=r"not a regular file \(a character device\)"):
        read_token_file("/dev/null")
    with pytest.raises(TokenFileError, match=r"cannot read .*not a regular file \(a directory\)"):
        read_token_file(str(tmp_path))
    good = tmp_path / "token"
    good.write_text("s3cret\n")
    link = tmp_path / "link"
    link.symlink_to(good)
    assert read_token_file(str(link)) == "s3cret"


# -- a real sidecar ---------------------------------------------------------------------------


@attrs.define
class Served:
    proc: trio.Process
    url: str
    port: int
    stderr: Path

    @property
    def token(self) -> str:
        return self.url.split("tkn=", 1)[1]


def _env(extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("AHP_TOKEN", "AHP_TOKEN_FILE")}
    return {**env, "PYTHONPATH": str(REPO), **extra}


async def _start_run(url: str, command: str, out: Path, err: Path) -> trio.Process:
    """``ahp-terminals run URL -- COMMAND`` started, its stdout and stderr into files."""
    with open(out, "wb") as o, open(err, "wb") as e:  # noqa: ASYNC230 (local files)
        return await trio.lowlevel.open_process(
            [sys.executable, "-m", "ahp", "run", url, "--", command],
            stdin=subprocess.DEVNULL,
            stdout=o,
            stderr=e,
            env=_env({}),
            cwd=str(REPO),
        )


@asynccontextmanager
async def sidecar(
    tmp_path: Path, *args: str, env: dict[str, str] | None = None
) -> AsyncIterator[Served]:
    """``python -m ahp serve --port 0 --shell bash ARGS``; killed and reaped at the end."""
    stderr = tmp_path / "serve.log"
    with open(stderr, "wb") as log:  # noqa: ASYNC230 (a local file, before any task runs)
        proc = await trio.lowlevel.open_process(
            [sys.executable, "-m", "ahp", "serve", "--port", "0", "--shell", "bash", *args],
            stdout=subprocess.PIPE,
            stderr=log,
            env=_env(env or {}),
            cwd=str(REPO),
        )
    try:
        assert proc.stdout is not None
        line = b""
        with trio.fail_after(TIMEOUT):
            while not line.endswith(b"\n"):
                chunk = await proc.stdout.receive_some(4096)
                assert chunk, f"serve exited: {stderr.read_text()}"
                line += chunk
        url = line.decode().strip()
        port = int(url.split(":")[2].split("/")[0])
        yield Served(proc, url, port, stderr)
    finally:
        await kill_and_reap(proc)


async def http_get(port: int, target: str) -> int:
    """The status of a plain ``GET target`` (0 when the connection is refused)."""
    try:
        stream = await trio.open_tcp_stream("127.0.0.1", port)
    except OSError:
        return 0
    try:
        request = f"GET {target} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n"
        await stream.send_all(request.encode())
        reply = b""
        with trio.fail_after(TIMEOUT):
            while b"\r\n" not in reply and (chunk := await stream.receive_some(4096)):
                reply += chunk
    except (trio.BrokenResourceError, OSError):
        return 0
    finally:
        await stream.aclose()
    return int(reply.split()[1]) if reply else 0


async def wait_for_status(port: int, target: str, status: int) -> None:
    """Probe until ``target`` answers ``status`` (the signal is handled asynchronously)."""
    with trio.fail_after(TIMEOUT):
        while await http_get(port, target) != status:  # noqa: ASYNC110 (a probe is polled)
            await trio.sleep(0.05)


async def open_terminal(p: Peer, uri: str) -> None:
    assert await p.result("createTerminal", {"channel": uri, "claim": CLIENT}) is None
    await p.result("subscribe", {"channel": uri})


async def start_command(p: Peer, uri: str, line: str) -> None:
    """Type ``line`` and wait until the shell reports it started (commandExecuted)."""
    await p.dispatch(uri, {"type": "terminal/input", "data": line + "\r"})
    await p.action(
        lambda a: a["channel"] == uri and a["action"]["type"] == "terminal/commandExecuted"
    )


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        return ""


async def read_pid(path: Path) -> int:
    """The pid a command wrote to ``path`` (a file has no event to wait on)."""
    with trio.fail_after(TIMEOUT):
        while not (text := _read(path)):  # noqa: ASYNC110
            await trio.sleep(0.02)
    return int(text)


async def wait_gone(pid: int) -> None:
    with trio.fail_after(TIMEOUT):
        while not gone(pid):  # noqa: ASYNC110 (/proc has no event to wait on)
            await trio.sleep(0.02)


def gone(pid: int) -> bool:
    fields = stat_fields(pid)
    return fields is None or fields[0] == "Z"


async def closed_code(p: Peer) -> tuple[int, list[dict[str, Any]]]:
    """Read until the server closes; its close code and the actions received before
    (its reason, for the drain's and the shutdown's closes: always ``going away``)."""
    seen: list[dict[str, Any]] = list(p.notes)
    p.notes.clear()
    with trio.fail_after(TIMEOUT):
        try:
            while True:
                seen.append(await p.recv())
        except ConnectionClosed as exc:
            assert exc.reason is not None
            code: int = exc.reason.code
            if code == GOING_AWAY[0]:
                # Probe M: SIGINT's close said "server going away", the drain's "going away".
                assert exc.reason.reason == GOING_AWAY[1], exc.reason
            return code, seen


async def test_a_drain_lets_a_running_command_finish_then_says_goodbye(tmp_path: Path) -> None:
    go = tmp_path / "go"
    async with sidecar(tmp_path, "--drain-timeout", "60") as served:
        async with peer(served.url) as p:
            await p.initialize("drain-test")
            await open_terminal(p, "ahp-terminal:/busy")
            await open_terminal(p, "ahp-terminal:/idle")  # at its prompt: holds nothing
            await start_command(
                p,
                "ahp-terminal:/busy",
                f"while [ ! -e {go} ]; do sleep 0.05; done; echo finished-after-drain",
            )
            served.proc.send_signal(signal.SIGTERM)
            await wait_for_status(served.port, "/readyz", 503)
            assert await http_get(served.port, "/healthz") == 200  # alive all the same
            refused = await p.call(
                "createTerminal", {"channel": "ahp-terminal:/late", "claim": CLIENT}
            )
            assert refused["error"]["code"] == -32000, refused
            assert refused["error"]["message"] == "draining"
            # A new client can still connect and watch during the drain.
            async with peer(served.url) as watcher:
                await watcher.initialize("watcher")
            go.touch()
            code, seen = await closed_code(p)
        assert code == 1001
        finished = [
            m
            for m in seen
            if m.get("method") == "action"
            and m["params"]["action"]["type"] == "terminal/commandFinished"
        ]
        assert finished and finished[0]["params"]["channel"] == "ahp-terminal:/busy"
        with trio.fail_after(TIMEOUT):
            assert await served.proc.wait() == 0
        log = served.stderr.read_text()
        assert "draining" in log and served.token not in log


async def test_a_drain_lets_a_running_exec_command_finish(tmp_path: Path) -> None:
    """An ``x-ahp-terminals/exec`` command (no pty, no shell) holds the drain as a
    shell's command does (session 19's probe: it was killed at once), and its client
    gets its result before the goodbye."""
    go, done = tmp_path / "go", tmp_path / "done"
    uri = "ahp-terminal:/exec-drain"
    command = f"while [ ! -e {go} ]; do sleep 0.05; done; echo ok > {done}; exit 3"
    async with sidecar(tmp_path, "--drain-timeout", "60") as served:
        async with peer(served.url) as p:
            await p.initialize("drain-test")
            await p.result("subscribe", {"channel": "ahp-root://"})
            started = await p.result("x-ahp-terminals/exec", {"command": command, "channel": uri})
            assert started["channel"] == uri
            await p.result("subscribe", {"channel": uri})
            served.proc.send_signal(signal.SIGTERM)
            await wait_for_status(served.port, "/readyz", 503)
            await trio.sleep(0.3)  # (several of the drain's looks: the exec holds it)
            assert not done.exists()
            go.touch()
            exited = await p.action(
                lambda a: a["channel"] == uri and a["action"]["type"] == "terminal/exited"
            )
            assert exited["action"].get("exitCode") == 3, exited
            # As exec_remote does: the result once terminal/exited came (the drain gives
            # an ended exec's result a moment to be fetched before its goodbye).
            await trio.sleep(0.3)  # (a client that takes its time: the drain looks on)
            result = await p.result("x-ahp-terminals/execResult", {"channel": uri})
            assert result["exit_code"] == 3, result
            code, _ = await closed_code(p)
        assert code == 1001
        assert done.read_text() == "ok\n"  # it finished: not killed by the drain
        with trio.fail_after(TIMEOUT):
            assert await served.proc.wait() == 0


async def test_a_command_outliving_the_drain_timeout_is_disposed(tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"
    async with sidecar(tmp_path, "--drain-timeout", "0.5") as served:
        async with peer(served.url) as p:
            await p.initialize("drain-test")
            await open_terminal(p, "ahp-terminal:/busy")
            await start_command(
                p, "ahp-terminal:/busy", f"sh -c 'echo $$ > {pidfile}; exec sleep 1000'"
            )
            pid = await read_pid(pidfile)
            served.proc.send_signal(signal.SIGTERM)
            code, _ = await closed_code(p)
        assert code == 1001
        with trio.fail_after(TIMEOUT):
            assert await served.proc.wait() == 0
        await wait_gone(pid)
        assert "still running are disposed" in served.stderr.read_text()


async def test_a_second_sigterm_ends_the_drain_at_once(tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"
    # A drain far longer than the test's own deadline: only the second signal ends it.
    async with sidecar(tmp_path, "--drain-timeout", "3600") as served:
        async with peer(served.url) as p:
            await p.initialize("drain-test")
            await open_terminal(p, "ahp-terminal:/busy")
            await start_command(
                p, "ahp-terminal:/busy", f"sh -c 'echo $$ > {pidfile}; exec sleep 1000'"
            )
            pid = await read_pid(pidfile)
            served.proc.send_signal(signal.SIGTERM)
            await wait_for_status(served.port, "/readyz", 503)
            served.proc.send_signal(signal.SIGTERM)
            # Probe Q: the hard exit said no goodbye (the client saw the TCP connection
            # drop, 1006, as a network failure): it gives the connections their 1001 first.
            code, _ = await closed_code(p)
            assert code == 1001
            with trio.fail_after(TIMEOUT):
                assert await served.proc.wait() == 1
        await wait_gone(pid)
        assert "again: killing 1 terminal(s)" in served.stderr.read_text()


async def test_run_after_a_second_sigterm_says_the_server_shut_down(tmp_path: Path) -> None:
    # Probe Q: `run` during a drain that a second SIGTERM cut short saw its connection
    # drop without a close, tried to reconnect for 10 s, waited 10 s more to dispose its
    # terminal, then advised an `rm` of it on a server that had exited. With the 1001
    # close it says at once that the server shut down (125), and advises nothing.
    pidfile = tmp_path / "pid"
    async with sidecar(tmp_path, "--drain-timeout", "3600") as served:
        out, err = tmp_path / "out", tmp_path / "err"
        command = f"sh -c 'echo $$ > {pidfile}; exec sleep 1000'"
        run = await _start_run(served.url, command, out, err)
        try:
            pid = await read_pid(pidfile)
            served.proc.send_signal(signal.SIGTERM)
            await wait_for_status(served.port, "/readyz", 503)
            served.proc.send_signal(signal.SIGTERM)
            with trio.fail_after(TIMEOUT):
                assert await served.proc.wait() == 1
                code = await run.wait()
        finally:
            await kill_and_reap(run)
        await wait_gone(pid)
    said = err.read_text()
    assert code == 125, said
    assert "the server shut down" in said and "rm" not in said.split(), said
    assert "connection lost" not in said, said


async def test_sigint_shuts_down_at_once_without_a_drain(tmp_path: Path) -> None:
    async with sidecar(tmp_path, "--drain-timeout", "3600") as served:
        async with peer(served.url) as p:
            await p.initialize("drain-test")
            await open_terminal(p, "ahp-terminal:/busy")
            await start_command(p, "ahp-terminal:/busy", "sleep 1000")
            served.proc.send_signal(signal.SIGINT)
            code, _ = await closed_code(p)
        assert code == 1001
        with trio.fail_after(TIMEOUT):
            assert await served.proc.wait() == 0


async def test_the_token_comes_from_the_file_and_stays_out_of_ps_and_terminals(
    tmp_path: Path,
) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("file-token-123\n")
    async with sidecar(tmp_path, env={"AHP_TOKEN_FILE": str(token_file)}) as served:
        # A token from a file is not printed (stdout is a container's log).
        assert "?" not in served.url
        served.url += "?tkn=file-token-123"
        cmdline = Path(f"/proc/{served.proc.pid}/cmdline").read_bytes()  # noqa: ASYNC240
        assert b"file-token-123" not in cmdline
        async with peer(served.url) as p:
            await p.initialize("drain-test")
            await open_terminal(p, "ahp-terminal:/t")
            await p.dispatch(
                "ahp-terminal:/t",
                {"type": "terminal/input", "data": 'echo "[${AHP_TOKEN_FILE-unset}]"\r'},
            )
            await p.text_until("ahp-terminal:/t", "[unset]")
        served.proc.send_signal(signal.SIGTERM)
        with trio.fail_after(TIMEOUT):
            assert await served.proc.wait() == 0
        assert "file-token-123" not in served.stderr.read_text()


@pytest.mark.parametrize(
    ("content", "extra", "why"),
    [
        (None, {}, "cannot read AHP_TOKEN_FILE"),
        ("\n", {}, "is empty"),
        ("tok\n", {"AHP_TOKEN": "other"}, "both set"),
    ],
)
async def test_an_unusable_token_file_is_one_line(
    tmp_path: Path, content: str | None, extra: dict[str, str], why: str
) -> None:
    token_file = tmp_path / "token"
    if content is not None:
        token_file.write_text(content)
    with trio.fail_after(TIMEOUT):
        done = await trio.run_process(
            [sys.executable, "-m", "ahp", "serve", "--port", "0"],
            stdin=subprocess.DEVNULL,
            capture_stdout=True,
            capture_stderr=True,
            check=False,
            env=_env({"AHP_TOKEN_FILE": str(token_file), **extra}),
            cwd=str(REPO),
        )
    assert done.returncode == 2 and done.stdout == b""
    lines = done.stderr.decode().strip().splitlines()
    assert len(lines) == 1 and why in lines[0], done.stderr


async def test_after_the_goodbye_a_new_connection_is_closed_at_once() -> None:
    async with running_server() as served, peer(served.url) as before:
        await before.initialize("before")
        # No terminal runs anything: the drain goes straight to the goodbye.
        assert await drain(served.state, timeout=TIMEOUT) == []
        code, _ = await closed_code(before)
        assert code == 1001
        assert served.state.sessions == set()
        async with peer(served.url) as after:
            code, seen = await closed_code(after)
        assert code == 1001 and seen == []


async def test_the_goodbye_is_bounded_and_the_drain_can_be_cancelled(
    autojump_clock: trio.abc.Clock, caplog: pytest.LogCaptureFixture
) -> None:
    # A connection that never leaves (its session has no transport draining it): the
    # goodbye gives up after GOODBYE_TIMEOUT. Trio primitives only, so the clock jumps.
    caplog.set_level(logging.INFO, logger="ahp.server")
    async with open_host() as host:
        state = ServerState(host=host)
        stuck = Session(state, Outbox(max_bytes=1024))
        state.sessions.add(stuck)
        started = trio.current_time()
        assert await drain(state, timeout=5.0) == []
        assert trio.current_time() - started == pytest.approx(GOODBYE_TIMEOUT)
        assert stuck.close_request == GOING_AWAY and stuck.outbox.closed
        assert "did not finish the goodbye" in caplog.text
        # Cancelled in the goodbye's wait: it ends there, the state says draining.
        again = ServerState(host=host)
        again.sessions.add(Session(again, Outbox(max_bytes=1024)))
        with trio.move_on_after(0.5) as scope:
            await drain(again, timeout=5.0)
        assert scope.cancelled_caught and again.draining and again.going_away == GOING_AWAY


async def test_a_mark_printed_in_a_shell_without_integration_holds_no_drain() -> None:
    # /bin/sh gets no integration: a program that prints OSC 133;C opens a command part
    # no shell will end, which held a drain for its whole timeout.
    async with open_host() as host:
        state = ServerState(host=host)
        term = await host.create_terminal("ahp-terminal:/sh", shell="/bin/sh")
        await term.send_input("printf 'x\\033]133;C\\007y\\n'\r")
        await wait_for_state(term, command_in_progress)
        with trio.fail_after(TIMEOUT):
            while busy_terminals(state):  # noqa: ASYNC110 (the printf job, until it exits)
                await trio.sleep(0.05)
        assert command_in_progress(term.state)


async def test_a_line_typed_before_the_shell_takes_it_up_holds_the_drain() -> None:
    # Probe P: a command typed just before SIGTERM, not started yet (no commandExecuted
    # mark parsed), held nothing: the drain said goodbye and the command was ended.
    # The shell is stopped while the line is typed, so it cannot take it up meanwhile.
    async with open_host() as host:
        state = ServerState(host=host)
        term = await host.create_terminal("ahp-terminal:/typed", shell="bash")
        await wait_for_state(term, lambda s: bool(s.supportsCommandDetection))
        assert term.integrated and busy_terminals(state) == []
        pid = term.pid
        assert pid is not None
        os.kill(pid, signal.SIGSTOP)
        try:
            await term.dispatch(TerminalInput(data="true\r"), wait=True)
            assert busy_terminals(state) == ["ahp-terminal:/typed"]
        finally:
            os.kill(pid, signal.SIGCONT)
        # The shell runs it and shows its next prompt: the drain is held no more.
        with trio.fail_after(TIMEOUT):
            while busy_terminals(state):  # noqa: ASYNC110 (the drain polls the same way)
                await trio.sleep(0.05)
        await term.dispatch(TerminalInput(data="x"), wait=True)  # no line end: holds nothing
        assert busy_terminals(state) == []


async def test_run_reports_a_command_that_finishes_during_the_drain_as_finished(
    tmp_path: Path,
) -> None:
    # Probe P: `run` while serve drained after SIGTERM: a command that finished within
    # the drain timeout was reported as ended by the shutdown (exit 125), or run waited
    # 10 s more and advised an `rm` on a server already gone, depending on whether the
    # goodbye or run's dispose of its terminal came first. Several runs whose commands
    # end at the same moment (a file the test creates): each races the goodbye.
    go = tmp_path / "go"
    count = 6
    async with sidecar(tmp_path, "--drain-timeout", "60") as served:
        runs: list[trio.Process] = []
        outs: list[tuple[Path, Path]] = []
        try:
            for i in range(count):
                ready = tmp_path / f"ready-{i}"
                command = (
                    f"touch {ready}; while [ ! -e {go} ]; do sleep 0.05; done; "
                    f"echo finished-{i}; sh -c 'exit 3'"
                )
                out, err = tmp_path / f"out-{i}", tmp_path / f"err-{i}"
                runs.append(await _start_run(served.url, command, out, err))
                outs.append((out, err))
            with trio.fail_after(TIMEOUT * 3):
                for i in range(count):
                    while not (tmp_path / f"ready-{i}").exists():  # noqa: ASYNC110
                        await trio.sleep(0.05)
            served.proc.send_signal(signal.SIGTERM)
            await wait_for_status(served.port, "/readyz", 503)
            go.touch()
            with trio.fail_after(TIMEOUT * 2):
                codes = [await run.wait() for run in runs]
                assert await served.proc.wait() == 0
        finally:
            for run in runs:
                await kill_and_reap(run)
    for i, ((out, err), code) in enumerate(zip(outs, codes, strict=True)):
        assert (code, out.read_text(), err.read_text()) == (3, f"finished-{i}\n", "")
