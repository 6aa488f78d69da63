"""A sidecar that went away (``mcp --connect``): every call is answered, none waits for ever.

A real ``python -m ahp serve --port 0`` runs as a subprocess and is killed with
SIGKILL (no close frame: the client only sees the socket end and reconnects in
vain), or stopped with SIGSTOP (the connection stays up; nothing is answered).
``LOST_AFTER`` is shortened so that the tests take seconds, not 30 s each.

Before: a client request made while the client reconnected waited for the
connection with no bound (``Client.request`` and ``_send``), so creating or
closing a terminal over a lost sidecar never answered; and the toolbox held
its setup lock across that wait, so every later ``run_command`` and
``create_terminal`` hung behind it, on terminals that had nothing to do with it.
And a sidecar that stayed connected but answered nothing (SIGSTOP) held a create,
a close or a new terminal's setup for ever: ``mcp --connect`` now bounds every
request by ``REQUEST_TIMEOUT`` (shortened here too).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from ahp.client import ConnectionLost, connect
from ahp.mcp.backend import ClientBackend
from ahp.mcp.output import ToolOutput
from ahp.mcp.toolbox import Toolbox
from tests.helpers import TIMEOUT, first_line, kill_and_reap

ROOT = Path(__file__).resolve().parents[1]
#: The patience the tests give a reconnect (the real one is 30 s).
PATIENCE = 1.0


@asynccontextmanager
async def sidecar(tmp_path: Path, name: str = "serve") -> AsyncIterator[tuple[trio.Process, str]]:
    """``python -m ahp serve --port 0`` as a subprocess, and the URL it printed."""
    with (tmp_path / f"{name}-stderr.log").open("wb") as errlog:
        proc = await trio.lowlevel.open_process(
            [sys.executable, "-m", "ahp", "serve", "--port", "0", "--shell", "/bin/bash"],
            stdout=subprocess.PIPE,
            stderr=errlog,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            cwd=str(tmp_path),
        )
    try:
        line = await first_line(proc, TIMEOUT)
        yield proc, line.decode().strip()
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGCONT)
        await kill_and_reap(proc)


async def _killed(proc: trio.Process) -> None:
    proc.send_signal(signal.SIGKILL)
    with trio.fail_after(TIMEOUT):
        await proc.wait()


async def test_client_requests_give_up_when_the_server_stays_away(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Requests, notifications and actions made during a reconnect that never succeeds
    raise ConnectionLost once the connection has been down LOST_AFTER (they waited for
    ever); the client goes on reconnecting."""
    monkeypatch.setattr("ahp.client.remote.LOST_AFTER", PATIENCE)
    uri = "ahp-terminal:/t"
    async with sidecar(tmp_path) as (proc, url), connect(url) as client:
        await client.create_terminal(uri)
        await _killed(proc)
        with trio.fail_after(TIMEOUT):
            await client.wait_for(lambda: not client.connected)
        attempts: list[tuple[str, Any]] = [
            ("createTerminal", lambda: client.create_terminal("ahp-terminal:/new")),
            ("disposeTerminal", lambda: client.dispose_terminal(uri)),
            ("ping", client.ping),
            ("subscribe", lambda: client.subscribe("ahp-terminal:/other")),
            ("dispatch", lambda: client.send_input(uri, "echo x\r")),
            ("unsubscribe", lambda: client.unsubscribe(uri)),
        ]
        for what, attempt in attempts:
            with trio.fail_after(TIMEOUT), pytest.raises(ConnectionLost, match="down for more"):
                await attempt()
            assert client.lost is None, what  # (still reconnecting)


@asynccontextmanager
async def toolbox_over(url: str) -> AsyncIterator[Toolbox]:
    async with connect(url) as client:
        yield Toolbox(ClientBackend(client))


async def _call(box: Toolbox, name: str, **arguments: Any) -> ToolOutput:
    with trio.fail_after(TIMEOUT):
        return await box.call(name, arguments)


async def test_every_tool_call_is_answered_when_the_sidecar_is_killed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """create_terminal, close_terminal and run_command in a new terminal were never
    answered, and a run_command in the existing terminal hung behind them; now each is a
    tool error once the connection has been down LOST_AFTER, and list_terminals says
    that the connection is down (it showed the old state as if all were well)."""
    monkeypatch.setattr("ahp.client.remote.LOST_AFTER", PATIENCE)
    async with sidecar(tmp_path) as (proc, url), toolbox_over(url) as box:
        up = await _call(box, "run_command", command="echo up-$((6*7))")
        assert not up.is_error and "up-42" in up.text, up.text
        await _killed(proc)
        client = box.backend.client  # type: ignore[attr-defined]
        with trio.fail_after(TIMEOUT):
            await client.wait_for(lambda: not client.connected)
        listed = await _call(box, "list_terminals")
        assert "the connection to the sidecar has been down for" in listed.text, listed.text
        assert listed.data is not None and "reconnecting" in listed.data["connection"]
        calls: list[tuple[str, dict[str, Any]]] = [
            ("create_terminal", {"terminal": "n"}),
            ("run_command", {"command": "echo x", "terminal": "brandnew"}),
            ("run_command", {"command": "echo b", "terminal": "main"}),
            ("close_terminal", {"terminal": "main"}),
        ]
        answers: dict[int, ToolOutput] = {}

        async def one(i: int, name: str, arguments: dict[str, Any]) -> None:
            answers[i] = await _call(box, name, **arguments)

        async with trio.open_nursery() as nursery:
            for i, (name, arguments) in enumerate(calls):
                nursery.start_soon(one, i, name, arguments)
        for i, (name, arguments) in enumerate(calls):
            assert answers[i].is_error, (name, arguments, answers[i].text)
            assert "down for more than" in answers[i].text, (name, answers[i].text)


async def test_a_setup_that_waits_on_a_sidecar_holds_up_no_other_call(tmp_path: Path) -> None:
    """Two sidecars (``--connect A --connect B``); B stops answering (SIGSTOP: its
    connection stays up). A run_command that creates a terminal on B waits for B, and
    meanwhile a run_command in A's ``main`` runs and answers (it waited for the first
    one's setup lock, for as long as B stayed stopped). The terminal being set up is
    refused as busy or existing, not set up twice."""
    from ahp.client.fleet import connect_many, host_label
    from ahp.mcp.fleet import FleetBackend

    async with (
        sidecar(tmp_path, "a") as (_, url_a),
        sidecar(tmp_path, "b") as (proc_b, url_b),
        connect_many([url_a, url_b]) as fleet,
    ):
        box = Toolbox(FleetBackend(fleet))
        on_b = f"ahp-terminal:/{host_label(url_b)}/new1"
        proc_b.send_signal(signal.SIGSTOP)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(box.call, "run_command", {"command": "echo a", "terminal": on_b})
            await trio.testing.wait_all_tasks_blocked()  # (it waits for B's createTerminal)
            main = await _call(box, "run_command", command="echo main-$((6*7))")
            assert not main.is_error and "main-42" in main.text, main.text
            twice = await _call(box, "create_terminal", terminal=on_b)
            assert twice.is_error and "already exists" in twice.text, twice.text
            again = await _call(box, "run_command", command="echo a", terminal=on_b)
            assert again.is_error and "busy" in again.text, again.text
            nursery.cancel_scope.cancel()
        proc_b.send_signal(signal.SIGCONT)


@pytest.mark.parametrize("hosts", ["one", "fleet"])
async def test_every_tool_call_is_answered_when_the_sidecar_is_frozen(
    hosts: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sidecar that is up but frozen (SIGSTOP: its connection stays open, nothing is
    answered): create_terminal, run_command in a new terminal and close_terminal waited
    for their answers for ever (the client bounds a request only when asked to). Now
    ``mcp --connect`` bounds each request by REQUEST_TIMEOUT (patched small here): each
    call is a tool error naming the sidecar, and once it runs again the next call works.
    ``fleet``: the same through ``--connect`` given several times (one host here)."""
    from ahp.mcp.server import McpOptions, open_backend

    monkeypatch.setattr("ahp.mcp.server.REQUEST_TIMEOUT", PATIENCE)
    # (The process extension's own bound, 10 s, two asks in a run: shortened too.)
    monkeypatch.setattr("ahp.client.remote.EXTENSION_TIMEOUT", 2 * PATIENCE)
    async with sidecar(tmp_path) as (proc, url):
        options = McpOptions(connect=url) if hosts == "one" else McpOptions(connect_many=(url,))
        async with open_backend(options) as backend:
            await _frozen_then_back(Toolbox(backend), proc, url, pty_false=hosts == "one")


async def _frozen_then_back(box: Toolbox, proc: trio.Process, url: str, *, pty_false: bool) -> None:
    """A run, the sidecar stopped, calls that need its answers, then it runs again
    (``pty_false``: a ``pty: false`` run among the calls; one sidecar only)."""
    from ahp.client.connection import without_token

    up = await _call(box, "run_command", command="echo up-$((6*7))")
    assert not up.is_error and "up-42" in up.text, up.text
    said = f"the sidecar at {without_token(url)} did not answer within {PATIENCE:g} s"
    proc.send_signal(signal.SIGSTOP)
    # Probe Q: a run in the terminal already there (typing is no request) said
    # "(no output) STILL RUNNING after 30.0 s ... it keeps running": not known, the
    # sidecar answered nothing and the line may never have been typed. The answer
    # says so (the first call of the freeze: no earlier call went unanswered).
    ran = await _call(box, "run_command", command="echo frozen", yield_after=2 * PATIENCE)
    said_run = f"the sidecar at {without_token(url)} has answered nothing for"
    assert ran.is_error and said_run in ran.text, ran.text
    assert "is not known" in ran.text and "STILL RUNNING" not in ran.text, ran.text
    # And list_terminals says first that the sidecar is not answering.
    listed = await _call(box, "list_terminals")
    assert not listed.is_error, listed.text
    first = listed.text.splitlines()[0]
    assert "answered nothing" in first or "not answering" in first, listed.text
    calls: list[tuple[str, dict[str, Any]]] = [
        ("create_terminal", {"terminal": "n"}),
        ("run_command", {"command": "echo x", "terminal": "brandnew"}),
        ("close_terminal", {"terminal": "main"}),
    ]
    if pty_false:
        calls.append(("run_command", {"command": "echo y", "pty": False}))
    try:
        for name, arguments in calls:
            answer = await _call(box, name, **arguments)
            assert answer.is_error and said in answer.text, (name, answer.text)
            assert "tkn=" not in answer.text
    finally:
        proc.send_signal(signal.SIGCONT)
    # The sidecar did it all once it ran again; the tools work on.
    with trio.fail_after(TIMEOUT):
        while not box.backend.exists("ahp-terminal:/brandnew"):  # noqa: ASYNC110
            await trio.sleep(0.05)
    back = await _call(box, "run_command", command="echo back-$((6*7))", terminal="brandnew")
    assert not back.is_error and "back-42" in back.text, back.text
