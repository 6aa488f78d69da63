"""The MCP tools in-process (``ahp.mcp.toolbox.Toolbox`` on a real host, real bash
shells): where a command runs (``cwd``), what ``full`` answers show, what a
``pty: false`` run leaves behind, and what a busy or stopped command is called.

Waits are event-driven (a command ends, a file appears), each under ``TIMEOUT``.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio

from ahp.client import Client, connect
from ahp.engine import open_host
from ahp.mcp.backend import ClientBackend, HostBackend
from ahp.mcp.output import ToolOutput
from ahp.mcp.render import terminal_uri
from ahp.mcp.toolbox import Toolbox
from ahp.server import ServeOptions, serve_host

#: Generous bound for one tool call on a loaded machine.
TIMEOUT = 60.0


@asynccontextmanager
async def toolbox(start: Path, **options: Any) -> AsyncIterator[Toolbox]:
    """A toolbox on its own host whose start directory (``--cwd``) is ``start``."""
    async with open_host(shell="/bin/bash") as host:
        with trio.fail_after(TIMEOUT):
            yield Toolbox(HostBackend(host), default_cwd=str(start), **options)


async def call(box: Toolbox, name: str, **arguments: Any) -> ToolOutput:
    out = await box.call(name, arguments)
    assert not out.is_error, f"{name}: {out.text}"
    return out


async def pwd(box: Toolbox, **arguments: Any) -> str:
    out = await call(box, "run_command", command="pwd", **arguments)
    assert out.data is not None
    output: str = out.data["output"]
    return output.strip()


async def test_cwd_is_one_rule_in_every_mode(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Probe J: in an existing terminal a relative cwd was the shell's to resolve (after
    ``cd elsewhere``, cwd 'sub' failed: no such file), ``~`` was taken literally (a
    new terminal: "cwd '<start>/~' is not a directory"), ``-`` went to OLDPWD, and pty
    false refused a relative cwd. Now: ``~`` is the server's home, a relative path is
    from the start directory, in a new terminal, an existing one and pty false."""
    home = tmp_path / "home"
    start = tmp_path / "start"
    for directory in (home / "proj", start / "sub", start / "-", tmp_path / "elsewhere"):
        directory.mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    async with toolbox(start) as box:
        assert await pwd(box, terminal="t", cwd="sub") == str(start / "sub")  # new
        await call(box, "run_command", command=f"cd {tmp_path / 'elsewhere'}", terminal="t")
        assert await pwd(box, terminal="t", cwd="sub") == str(start / "sub")  # existing
        assert await pwd(box, terminal="t", cwd="-") == str(start / "-")
        assert await pwd(box, terminal="t", cwd="~") == str(home)
        assert await pwd(box, terminal="t", cwd="~/proj") == str(home / "proj")
        assert await pwd(box, terminal="u", cwd="~/proj") == str(home / "proj")  # new
        assert await pwd(box, terminal="v", cwd="~") == str(home)
        assert await pwd(box, pty=False, cwd="~/proj") == str(home / "proj")
        assert await pwd(box, pty=False, cwd="sub") == str(start / "sub")
        assert await pwd(box, pty=False) == str(start)  # was the home directory
        out = await call(box, "create_terminal", terminal="w", cwd="~/proj")
        assert await pwd(box, terminal="w") == str(home / "proj"), out.text


async def test_a_cwd_that_cannot_be_looked_at_is_a_clear_tool_error(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Probe J: cwd '/proc/1/cwd' (EACCES from stat) was "run_command failed: [Errno
    13] …" and a traceback in the log. A name too long for the file system is such a
    cwd on any machine (ENAMETOOLONG, raised by ``is_dir`` as EACCES is)."""
    bad = "/" + "x" * 300
    caplog.set_level(logging.ERROR, logger="ahp.mcp")
    async with toolbox(tmp_path) as box:
        await call(box, "run_command", command="true", terminal="old")
        for arguments in (
            {"terminal": "new"},
            {"terminal": "old"},
            {"pty": False},
        ):
            out = await box.call("run_command", {"command": "pwd", "cwd": bad, **arguments})
            assert out.is_error, out.text
            assert out.text == f"cwd {bad!r} is not accessible: file name too long", arguments
    assert not caplog.records, [r.getMessage() for r in caplog.records]


async def test_full_answers_keep_the_calls_budget(tmp_path: Path) -> None:
    """Probe J: wait_command(full=true, head_bytes=50, tail_bytes=50) answered 16,216
    characters (108,964 after a run with a 100 kB budget): the budget was not applied."""
    go = tmp_path / "go"
    async with toolbox(tmp_path) as box:
        # A finished command whose run kept everything.
        ran = await call(
            box, "run_command", command="seq 1 20000", head_bytes=100_000, tail_bytes=100_000
        )
        assert ran.data is not None and len(ran.data["output"]) > 100_000
        waited = await call(
            box,
            "wait_command",
            command_id=ran.data["command_id"],
            full=True,
            head_bytes=50,
            tail_bytes=50,
        )
        assert waited.data is not None
        assert waited.data["truncated"] and len(waited.data["output"]) < 300, waited.text
        assert waited.data["output"].startswith("1\n2\n") and waited.data["output"].endswith(
            "19999\n20000\n"
        )
        # A running one, followed through its handle.
        started = await call(
            box,
            "run_command",
            command=f"seq 1 20000; while [ ! -e {go} ]; do sleep 0.1; done",
            yield_after=0,
        )
        assert started.data is not None and started.data["status"] == "running"
        command_id = started.data["command_id"]
        seen = ""  # (the command's output, read as it comes)
        while not seen.endswith("\n20000\n"):
            out = await call(box, "read_output", command_id=command_id)
            assert out.data is not None
            seen += out.data["output"]
            await trio.sleep(0.05)
        waited = await call(
            box,
            "wait_command",
            command_id=command_id,
            full=True,
            head_bytes=50,
            tail_bytes=50,
            timeout=0,
        )
        assert waited.data is not None
        assert waited.data["truncated"] and len(waited.data["output"]) < 300, waited.text
        go.touch()
        await call(box, "wait_command", command_id=command_id, timeout=TIMEOUT)


async def test_pty_false_runs_hold_no_terminal_slot_and_are_followed_by_their_id(
    tmp_path: Path,
) -> None:
    """Probe J: each finished pty false run was listed as an ``exec-N`` terminal and
    counted against the terminal limit (with 2 of them the 30th named terminal was
    refused), and read_output refused the command_id its answer gave."""
    async with toolbox(tmp_path, max_terminals=2) as box:
        answers = [
            await call(box, "run_command", command=f"echo run-{n}; exit {n}", pty=False)
            for n in range(3)
        ]
        for name in ("a", "b"):
            await call(box, "create_terminal", terminal=name)
        refused = await box.call("create_terminal", {"terminal": "c"})
        assert refused.is_error and "already 2 terminals" in refused.text
        listed = await call(box, "list_terminals")
        assert listed.data is not None
        assert [row["terminal"] for row in listed.data["terminals"]] == ["a", "b"], listed.text
        for n, answer in enumerate(answers):
            assert answer.data is not None
            command_id = answer.data["command_id"]
            assert command_id.startswith("exec-") and command_id == answer.data["terminal"]
            assert f"command_id {command_id}" in answer.text
            for tool in ("read_output", "wait_command"):
                out = await call(box, tool, command_id=command_id, full=True)
                assert out.data is not None
                assert out.data["command_id"] == command_id
                assert out.data["exit_code"] == n and out.data["output"] == f"run-{n}\n"


async def test_a_stopped_job_is_said_to_be_stopped(tmp_path: Path) -> None:
    """Probe J: a command stopped with Ctrl-Z was "left running in the background"."""
    ready = tmp_path / "ready"
    program = f"import time; open({str(ready)!r}, 'w').close(); time.sleep(600)"
    async with toolbox(tmp_path) as box:
        started = await call(
            box, "run_command", command=f'python3 -c "{program}"', terminal="z", yield_after=0
        )
        assert started.data is not None
        while not ready.exists():  # noqa: ASYNC110 (a file can only be polled)
            await trio.sleep(0.05)
        out = await call(
            box, "send_input", command_id=started.data["command_id"], keys=["ctrl-z"], wait=30
        )
        assert "left STOPPED (suspended, e.g. by Ctrl-Z; not running): pid " in out.text, out.text
        assert "`fg` in terminal 'z' resumes it" in out.text
        assert "left running in the background" not in out.text
        await call(box, "run_command", command="kill -9 %1", terminal="z")


async def test_a_busy_terminal_error_names_what_to_wait_for(tmp_path: Path) -> None:
    """Probe J: while another call was starting a command in the terminal, the busy
    error said "Wait for it (wait_command)" with no command_id to wait for."""
    go = tmp_path / "go"
    async with toolbox(tmp_path) as box:
        started = await call(
            box,
            "run_command",
            command=f"while [ ! -e {go} ]; do sleep 0.1; done",
            terminal="x",
            yield_after=0,
        )
        assert started.data is not None
        command_id = started.data["command_id"]
        busy = await box.call("run_command", {"command": "true", "terminal": "x"})
        assert busy.is_error and f'wait_command(command_id="{command_id}")' in busy.text
        go.touch()
        await call(box, "wait_command", command_id=command_id, timeout=TIMEOUT)
        # A command another call is still starting there has no id yet.
        box._starting.add(terminal_uri("x"))
        busy = await box.call("run_command", {"command": "true", "terminal": "x"})
        assert busy.is_error and "another call is starting a command there" in busy.text
        assert "wait_command" not in busy.text, busy.text
        box._starting.discard(terminal_uri("x"))


@pytest.mark.parametrize("remote", [False, True], ids=["local", "remote"])
@pytest.mark.parametrize("delay", ["0", "0.1", "0.4"])
async def test_a_shell_that_exits_at_start_up_is_said_so_without_a_traceback(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, delay: str, remote: bool
) -> None:
    # The shell exits while the command is being started (probe M): depending on the
    # moment, the answer was "run_command failed: the terminal's process has exited"
    # with a traceback logged. Now: a tool error saying so, or the shell's exit as the
    # command's end; never a "failed" with a traceback.
    script = tmp_path / "dies"
    script.write_text(f"#!/bin/sh\nsleep {delay}\nexit 3\n")
    script.chmod(0o755)
    caplog.set_level(logging.WARNING)
    async with open_host(shell=str(script)) as host, trio.open_nursery() as nursery:
        if remote:
            sidecar = await nursery.start(serve_host, host, ServeOptions(port=0))
            client = await nursery.start(_connected, sidecar.url)
            box = Toolbox(ClientBackend(client), default_cwd=str(tmp_path))
        else:
            box = Toolbox(HostBackend(host), default_cwd=str(tmp_path))
        with trio.fail_after(TIMEOUT):
            for _ in range(3):
                out = await box.call("run_command", {"command": "echo never"})
                assert "failed:" not in out.text, out.text
                assert "exited" in out.text or "EXITED" in out.text, out.text
                assert "never\n" not in out.text.replace("$ echo never", ""), out.text
        nursery.cancel_scope.cancel()
    assert not [r for r in caplog.records if r.exc_info], [r.getMessage() for r in caplog.records]


async def _connected(url: str, task_status: trio.TaskStatus[Client]) -> None:
    async with connect(url) as client:
        task_status.started(client)
        await trio.sleep_forever()
