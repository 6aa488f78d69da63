"""The ``x-ahp-terminals/*`` process extension: a real server on port 0, real clients.

What the remote run API gains from it (waiting for input with ``/proc``
evidence, background jobs, SIGKILL of a command's process groups) in both
dialects; what a bad or unauthorised request gets (a clear error, and the
connection and terminal keep working); the bounds of marks and answers; and
the heuristics the client keeps against a server without the extension.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st

from ahp.client import Client, RpcError, connect
from ahp.client.remote import RemoteTerminal
from ahp.protocol import processes as xp
from ahp.protocol.state import ClientClaim
from ahp.server.app import Sidecar
from tests.helpers import TIMEOUT, stat_fields
from tests.wire import running_server

URI = "ahp-terminal:/x"


async def _ready(client: Client, uri: str = URI) -> RemoteTerminal:
    await client.create_terminal(uri)
    term = client.terminal(uri)
    with trio.fail_after(TIMEOUT):
        await client.wait_for(lambda: term.state.supportsCommandDetection is not None)
    return term


@asynccontextmanager
async def served(**client_kwargs: Any) -> AsyncIterator[tuple[Sidecar, Client, RemoteTerminal]]:
    async with (
        running_server(shell="/bin/bash") as server,
        connect(server.url, **client_kwargs) as client,
    ):
        yield server, client, await _ready(client)


async def _error(client: Client, method: str, params: dict[str, Any]) -> RpcError:
    with pytest.raises(RpcError) as caught:
        await client.request(method, params)
    return caught.value


async def _still_works(client: Client, term: RemoteTerminal) -> None:
    await client.ping()
    result = await term.run("echo still-$((40+2))")
    assert result.status == "finished" and result.output == "still-42\n"


@pytest.mark.parametrize("versions", [("0.5.0",), ("1.0.0",)], ids=["0.5", "1.x"])
async def test_both_dialects_get_the_evidence(versions: tuple[str, ...]) -> None:
    async with served(protocol_versions=versions) as (_, client, term):
        assert client.protocol_version == versions[0]
        with trio.fail_after(TIMEOUT):
            result = await term.run("python3 -c 'input()'")
            assert result.status == "waiting_for_input" and result.handle is not None
            evidence = result.handle.input_evidence
            assert evidence is not None and evidence.source == "procfs" and evidence.readers
            await result.handle.send_input("\r")
            assert (await result.handle.wait()).status == "finished"
            left = await term.run("sleep 1000 & echo started")
    assert client.process_extension is True
    assert [p.command_line for p in left.background] == ["sleep 1000"]
    # Gone with the terminal (SIGKILL was sent; on a loaded machine it may take a moment).
    pid = left.background[0].pid
    with trio.fail_after(TIMEOUT):
        while (fields := stat_fields(pid)) is not None and fields[0] not in "ZX":  # noqa: ASYNC110 (/proc can only be polled)
            await trio.sleep(0.05)


async def test_remote_kill_ends_a_command_that_ignores_sigint() -> None:
    async with served() as (_, client, term):
        with trio.fail_after(TIMEOUT):
            handle = await term.start("trap '' INT; sleep 1000")
            await handle.wait(timeout=0.5)
            await handle.interrupt()  # ignored: the command goes on
            assert (await handle.wait(timeout=0.5)).status == "running"
            await handle.kill()
            killed = await handle.wait()
            await _still_works(client, term)
    assert killed.status == "killed" and killed.exit_code == 137


async def test_signal_request_spares_the_shell() -> None:
    async with served() as (_, client, term):
        with trio.fail_after(TIMEOUT):
            # Nothing running: the shell is in the foreground; it only gets Ctrl-C.
            idle = await term.signal_command("SIGKILL")
            assert idle is not None and idle.shellForeground and idle.groups == ()
            # (Readline drops what it read before the Ctrl-C: let the shell redraw first.)
            await client.wait_for(lambda: "^C" in term.screen().text())
            # bash at its prompt may hold that interrupt until the next key, which it then
            # drops (`echo still-42` ran as `cho still-42` now and then): a first command
            # gives it that key, whatever it makes of it.
            await term.run("true")
            await _still_works(client, term)
            handle = await term.start("sleep 1000")
            await handle.wait(timeout=0.5)
            sent = await term.signal_command("SIGTERM")
            assert sent is not None and not sent.shellForeground and len(sent.groups) == 1
            ended = await handle.wait()
            assert ended.exit_code == 143
            await _still_works(client, term)
        with pytest.raises(ValueError, match="SIGINT"):
            await term.signal_command("SIGSTOP")


async def test_tty_status_and_marks_on_the_wire() -> None:
    async with served() as (_, client, term):
        with trio.fail_after(TIMEOUT):
            status = await client.request(xp.TTY_STATUS, {"channel": URI})
            assert status["status"]["shellForeground"] is True
            assert status["status"]["shellReplaced"] is False
            assert status["status"]["unread"] >= 0
            mark = (await client.request(xp.JOB_MARK, {"channel": URI}))["mark"]
            assert set(mark) == {"known", "tick"}
            await term.run("sleep 1000 & sleep 1001 & true")
            since = await client.request(xp.JOBS, {"channel": URI, "since": mark})
            lines = sorted(job["commandLine"] for job in since["jobs"])
            assert lines == ["sleep 1000", "sleep 1001"] and since["truncated"] is False
            later = (await client.request(xp.JOB_MARK, {"channel": URI}))["mark"]
            none = await client.request(xp.JOBS, {"channel": URI, "since": later})
            assert none["jobs"] == []
            # Once the shell has exited there is nothing to see: null, not an error.
            await term.send_input("exit\r")
            await client.wait_for(lambda: term.state.exited)
            assert await client.request(xp.TTY_STATUS, {"channel": URI}) == {"status": None}
            assert await client.request(xp.JOB_MARK, {"channel": URI}) == {"mark": None}
            gone = await client.request(xp.SIGNAL, {"channel": URI, "signal": "SIGTERM"})
            assert gone == {"groups": [], "shellForeground": True}


async def test_answers_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("ahp.server.processes.MAX_JOBS_REPORTED", 2)
    async with served() as (_, client, term):
        with trio.fail_after(TIMEOUT):
            await term.run("sleep 1000 & sleep 1001 & sleep 1002 & true")
            jobs = await client.request(xp.JOBS, {"channel": URI})
    assert len(jobs["jobs"]) == 2 and jobs["truncated"] is True


@pytest.mark.parametrize(
    ("method", "params", "code", "path"),
    [
        (xp.TTY_STATUS, {"channel": "ahp-terminal:/nope"}, -32008, "$.params.channel"),
        (xp.TTY_STATUS, {"channel": "ahp-root://"}, -32008, "$.params.channel"),
        (xp.TTY_STATUS, {}, -32602, "$.params.channel"),
        (xp.JOB_MARK, {"channel": 5}, -32602, "$.params.channel"),
        (xp.SIGNAL, {"channel": URI, "signal": "SIGSTOP"}, -32602, "$.params.signal"),
        (xp.SIGNAL, {"channel": URI}, -32602, "$.params.signal"),
        (
            xp.JOBS,
            {"channel": URI, "since": {"known": list(range(1, xp.MAX_MARK_PIDS + 2)), "tick": 0}},
            -32602,
            "$.params.since.known",
        ),
        (
            xp.JOBS,
            {"channel": URI, "since": {"known": [0], "tick": 0}},
            -32602,
            "$.params.since.known[0]",
        ),
        (
            xp.JOBS,
            {"channel": URI, "since": {"known": [], "tick": -1}},
            -32602,
            "$.params.since.tick",
        ),
        (xp.JOBS, {"channel": URI, "since": {"known": [], "tick": "5"}}, -32602, None),
        (
            xp.SIGNAL,
            {"channel": URI, "signal": "SIGKILL", "since": {"known": [xp.MAX_PID + 1], "tick": 0}},
            -32602,
            "$.params.since.known[0]",
        ),
        ("x-ahp-terminals/unknown", {"channel": URI}, -32601, None),
    ],
)
async def test_bad_requests_get_clear_errors(
    method: str, params: dict[str, Any], code: int, path: str | None
) -> None:
    async with served() as (_, client, term):
        with trio.fail_after(TIMEOUT):
            handle = await term.start("sleep 1000")
            await handle.wait(timeout=0.3)
            error = await _error(client, method, params)
            assert error.code == code, error
            if path is not None:
                assert error.data == {"path": path}
            # Nothing was signalled; the connection and the terminal go on.
            assert not handle.done
            await handle.interrupt()
            assert (await handle.wait()).status == "interrupted"
            await _still_works(client, term)
    assert client.process_extension is not False or method.endswith("unknown")


async def test_holder_only_input_covers_signals() -> None:
    async with running_server(shell="/bin/bash") as server:
        server.state.holder_only_input = True
        async with connect(server.url) as holder, connect(server.url) as other:
            term = await _ready(holder)
            await other.subscribe(URI)
            await term.set_claim(ClientClaim(clientId=holder.client_id))
            with trio.fail_after(TIMEOUT):
                handle = await term.start("sleep 1000")
                await handle.wait(timeout=0.3)
                refused = await _error(other, xp.SIGNAL, {"channel": URI, "signal": "SIGKILL"})
                assert refused.code == -32009 and "claim" in refused.message
                # Reading is open to every client, like the output.
                seen = await other.request(xp.TTY_STATUS, {"channel": URI})
                assert seen["status"]["shellForeground"] is False
                assert not handle.done
                await handle.kill()
                killed = await handle.wait()
                await _still_works(holder, term)
                await other.ping()
    assert killed.status == "killed" and killed.exit_code == 137


async def test_without_the_extension_the_client_keeps_its_heuristics(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A server that answers -32601 (the extension removed from its request table)."""
    from ahp.server import session

    for method in xp.METHODS:
        monkeypatch.delitem(session._REQUESTS, method)
    async with served() as (_, client, term):
        with trio.fail_after(TIMEOUT):
            silent = await term.run("python3 -c 'input()'", yield_after=2)
            assert client.process_extension is False
            assert silent.status == "running"  # only silence: not concluded
            assert silent.handle is not None
            await silent.handle.send_input("\r")
            assert (await silent.handle.wait()).status == "finished"
            prompt = await term.run("read -p 'name? ' x; echo hi $x")
            assert prompt.status == "waiting_for_input" and prompt.handle is not None
            evidence = prompt.handle.input_evidence
            assert evidence is not None and evidence.source == "heuristic"
            await prompt.handle.send_input("bo\r")
            assert (await prompt.handle.wait()).output.endswith("hi bo\n")
            left = await term.run("sleep 1000 & echo started")
            assert left.background == ()
            handle = await term.start("sleep 1000; echo never")
            await handle.wait(timeout=0.5)
            await handle.kill()  # Ctrl-C, then Ctrl-\ if needed
            killed = await handle.wait()
    assert killed.status == "killed" and killed.exit_code == 130


def process_extension(client: Client) -> bool | None:
    """``client.process_extension``, read through a call: mypy would keep it narrowed
    across the reconnect that changes it."""
    return client.process_extension


async def test_a_reconnect_asks_again() -> None:
    """The server behind a URL may change across a reconnect: the client forgets what
    it learnt and the next request finds out again."""
    async with served() as (_, client, term):
        with trio.fail_after(TIMEOUT):
            assert (await term.run("true")).status == "finished"
            assert process_extension(client) is True
            await client.drop_connection()
            await client.wait_for(lambda: client.reconnects == 1)
            assert process_extension(client) is None
            left = await term.run("sleep 1000 & true")
    assert process_extension(client) is True
    assert [p.command_line for p in left.background] == ["sleep 1000"]


@given(
    known=st.lists(st.integers(min_value=-5, max_value=xp.MAX_PID + 5), max_size=20),
    tick=st.integers(min_value=-5, max_value=xp.MAX_TICK + 5),
)
def test_mark_problem_accepts_exactly_the_bounded_marks(known: list[int], tick: int) -> None:
    problem = xp.mark_problem(xp.JobMarkWire(known=tuple(known), tick=tick))
    valid = all(1 <= pid <= xp.MAX_PID for pid in known) and 0 <= tick <= xp.MAX_TICK
    assert (problem is None) == valid
    if problem is not None and not all(1 <= pid <= xp.MAX_PID for pid in known):
        first = next(i for i, pid in enumerate(known) if not 1 <= pid <= xp.MAX_PID)
        assert problem[0] == f"known[{first}]"


def test_mark_problem_bounds_the_pid_count() -> None:
    at = xp.JobMarkWire(known=tuple(range(1, xp.MAX_MARK_PIDS + 1)), tick=0)
    over = xp.JobMarkWire(known=tuple(range(1, xp.MAX_MARK_PIDS + 2)), tick=0)
    assert xp.mark_problem(at) is None
    assert xp.mark_problem(over) == ("known", f"at most {xp.MAX_MARK_PIDS} pids")
