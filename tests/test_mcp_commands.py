"""Commands through the real MCP server (``python -m ahp mcp`` as a subprocess, driven by
the official MCP client over stdio): exit codes, timeouts, a prompt answered with
send_input, background commands read later, kill and interrupt, the screen, an
exited shell, and a watcher attached over AHP seeing the agent's command.

Waits are event-driven: a command that must still be running waits on a file the
test creates; ``wait_command`` returns when the command ends; every call is under
the session's generous ``fail_after``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import trio

from tests.test_mcp import TIMEOUT, _text, facts, mcp_session, screen_of, terminal_rows


async def _call(session: Any, name: str, **arguments: Any) -> Any:
    result = await session.call_tool(name, arguments)
    assert not result.is_error, f"{name}: {_text(result)}"
    return result


async def test_exit_codes_output_cwd_and_persistence(tmp_path: Path) -> None:
    async with mcp_session(tmp_path) as session:
        result = await _call(session, "run_command", command="printf 'a\\nb\\n'; false")
        data = facts(result)
        assert data["terminal"] == "main"
        assert data["status"] == "finished" and data["exit_code"] == 1
        assert data["output"].split() == ["a", "b"]
        assert "exit code 1" in _text(result)
        # The shell persists: variables and the directory survive between calls.
        await _call(session, "run_command", command=f"export GREETING=hi; cd {tmp_path}")
        result = await _call(session, "run_command", command='echo "$GREETING from $PWD"')
        assert facts(result)["output"].strip() == f"hi from {tmp_path}"
        # cwd: a new terminal starts there; an existing one changes there first.
        (tmp_path / "sub").mkdir()
        result = await _call(
            session, "run_command", command="pwd", terminal="other", cwd=str(tmp_path / "sub")
        )
        assert facts(result)["output"].strip() == str(tmp_path / "sub")
        result = await _call(session, "run_command", command="pwd", cwd="/")
        assert facts(result)["output"].strip() == "/"
        assert _text(result).startswith("$ pwd\n")  # the command as given, not the cd


async def test_exec_of_a_shell_leaves_the_terminal_usable(tmp_path: Path) -> None:
    """``exec bash --norc``: the answer was STILL RUNNING for good, and every later
    run_command there a busy error (the default terminal: the next one was picked).
    It is over, saying why; the terminal goes on running commands, and is idle."""
    async with mcp_session(tmp_path) as session:
        result = await _call(session, "run_command", command="exec bash --norc", timeout=60)
        data = facts(result)
        assert data["status"] == "finished" and data["exit_code"] is None, _text(result)
        assert "no exit code: command detection was lost" in _text(result)
        result = await _call(session, "run_command", command="echo ok")
        assert facts(result)["terminal"] == "main"
        assert facts(result)["exit_code"] == 0 and facts(result)["output"] == "ok\n"
        result = await _call(session, "run_command", command="echo named", terminal="main")
        assert facts(result)["output"] == "named\n"
        rows = terminal_rows(await _call(session, "list_terminals"))
        assert rows["main"]["state"] == "idle"


async def test_timeout_interrupts_and_the_terminal_stays_usable(tmp_path: Path) -> None:
    async with mcp_session(tmp_path) as session:
        result = await _call(session, "run_command", command="sleep 600", timeout=2)
        data = facts(result)
        assert data["status"] == "timed_out"
        assert "TIMED OUT" in _text(result)
        result = await _call(session, "run_command", command="echo after")
        assert facts(result)["exit_code"] == 0
        assert facts(result)["terminal"] == "main"


async def test_a_prompt_is_answered_through_send_input(tmp_path: Path) -> None:
    async with mcp_session(tmp_path) as session:
        result = await _call(
            session,
            "run_command",
            command='python3 -c \'n = input("name? "); print("hello", n)\'',
            yield_after=TIMEOUT,
        )
        data = facts(result)
        assert data["status"] == "waiting_for_input", _text(result)
        assert "name?" in data["output"]
        assert "WAITING FOR INPUT" in _text(result)
        result = await _call(
            session,
            "send_input",
            command_id=data["command_id"],
            text="bob",
            keys=["enter"],
            wait=TIMEOUT,
        )
        data = facts(result)
        assert data["status"] == "finished" and data["exit_code"] == 0
        assert "hello bob" in data["output"]


async def test_background_command_read_later_beside_others(tmp_path: Path) -> None:
    go = tmp_path / "go"
    async with mcp_session(tmp_path) as session:
        started = await _call(
            session,
            "run_command",
            command=f"echo waiting; while [ ! -e {go} ]; do sleep 0.1; done; echo done-$((6*7))",
            terminal="bg",
            yield_after=1,
        )
        data = facts(started)
        assert data["status"] == "running", _text(started)
        assert "STILL RUNNING" in _text(started)
        command_id = data["command_id"]
        # Other commands run meanwhile, in the default terminal.
        other = await _call(session, "run_command", command="echo meanwhile")
        assert facts(other)["terminal"] == "main"
        listed = await _call(session, "list_terminals")
        rows = terminal_rows(listed)
        assert rows["bg"]["state"] == "busy" and rows["bg"]["command_id"] == command_id
        assert rows["main"]["state"] == "idle"
        # Running in a busy terminal is refused with the way out.
        busy = await session.call_tool("run_command", {"command": "true", "terminal": "bg"})
        assert busy.is_error and "is busy running command" in _text(busy)
        await trio.Path(go).touch()
        done = await _call(session, "wait_command", command_id=command_id, timeout=TIMEOUT)
        assert facts(done)["status"] == "finished"
        # Only what is new since the last answer: run_command showed "waiting".
        assert facts(done)["output"] == "done-42\n", _text(done)
        again = await _call(session, "read_output", command_id=command_id)
        assert facts(again)["output"] == ""
        assert "(no new output)" in _text(again)
        everything = await _call(session, "read_output", command_id=command_id, full=True)
        assert facts(everything)["output"] == "waiting\ndone-42\n"
        whole = await _call(session, "wait_command", command_id=command_id, full=True)
        assert facts(whole)["output"] == "waiting\ndone-42\n"


async def test_kill_and_interrupt(tmp_path: Path) -> None:
    async with mcp_session(tmp_path) as session:
        started = await _call(session, "run_command", command="sleep 600", yield_after=1)
        command_id = facts(started)["command_id"]
        killed = await _call(session, "kill_command", command_id=command_id)
        assert facts(killed)["status"] == "killed", _text(killed)
        started = await _call(session, "run_command", command="sleep 600", yield_after=1)
        command_id = facts(started)["command_id"]
        stopped = await _call(session, "interrupt", command_id=command_id)
        assert facts(stopped)["status"] in ("interrupted", "finished"), _text(stopped)
        assert facts(stopped)["status"] != "running"
        late = await session.call_tool("send_input", {"command_id": command_id, "text": "x"})
        assert late.is_error and "has already ended" in _text(late)
        after = await _call(session, "run_command", command="echo still-here")
        assert facts(after)["exit_code"] == 0


async def test_budget_screen_and_exited_shell(tmp_path: Path) -> None:
    async with mcp_session(tmp_path) as session:
        result = await _call(
            session, "run_command", command="seq 1 20000", head_bytes=100, tail_bytes=100
        )
        data = facts(result)
        assert data["truncated"] is True and data["omitted_bytes"] > 0
        assert data["output"].startswith("1\n") and data["output"].rstrip().endswith("20000")
        assert f"output truncated: {data['omitted_bytes']} bytes" in _text(result)
        await _call(session, "run_command", command="clear; printf 'screen-%s\\n' x")
        screen = await _call(session, "read_screen", terminal="main")
        text, alternate = screen_of(screen)
        assert "screen-x" in text and alternate is False
        gone = await _call(session, "run_command", command="exit 3", terminal="ex")
        assert facts(gone)["status"] == "shell_exited", _text(gone)
        # Input to the exited shell goes nowhere: a tool error, not "sent".
        typed = await session.call_tool("send_input", {"terminal": "ex", "text": "echo x"})
        assert typed.is_error and "has exited" in _text(typed), _text(typed)
        back = await _call(session, "run_command", command="echo back", terminal="ex")
        assert facts(back)["exit_code"] == 0


async def test_watcher_over_ahp_sees_the_agents_command(tmp_path: Path) -> None:
    from ahp.client import connect
    from ahp.protocol.state import CommandPart

    sock = tmp_path / "ahp.sock"
    async with mcp_session(tmp_path, "--serve", "--unix", str(sock), "--token", "t3") as session:
        await _call(session, "create_terminal", terminal="main")
        async with connect(f"ws+unix://{sock}:/?tkn=t3", auto_reconnect=False) as watcher:
            uri = "ahp-terminal:/main"
            await watcher.subscribe(uri)
            result = await _call(session, "run_command", command="echo watched-$((6*7))")
            assert facts(result)["exit_code"] == 0

            def seen() -> bool:
                return any(
                    isinstance(part, CommandPart)
                    and part.commandLine == "echo watched-$((6*7))"
                    and part.isComplete
                    and part.exitCode == 0
                    and "watched-42" in str(part.output)
                    for part in watcher.terminal_state(uri).content
                )

            await watcher.wait_for(seen, timeout=TIMEOUT)


async def test_cancelling_run_command_interrupts_the_command(tmp_path: Path) -> None:
    """The client gives up on a call (notifications/cancelled): the command gets Ctrl-C."""
    from ahp.client import connect
    from ahp.protocol.state import CommandPart

    sock = tmp_path / "ahp.sock"
    async with mcp_session(tmp_path, "--serve", "--unix", str(sock), "--token", "t4") as session:
        await _call(session, "create_terminal", terminal="main")
        async with connect(f"ws+unix://{sock}:/?tkn=t4", auto_reconnect=False) as watcher:
            uri = "ahp-terminal:/main"
            await watcher.subscribe(uri)

            def part() -> CommandPart | None:
                for item in watcher.terminal_state(uri).content:
                    if isinstance(item, CommandPart) and item.commandLine == "sleep 600":
                        return item
                return None

            async with trio.open_nursery() as nursery:

                async def call() -> None:
                    await session.call_tool(
                        "run_command", {"command": "sleep 600", "yield_after": 600}
                    )

                nursery.start_soon(call)
                await watcher.wait_for(lambda: part() is not None, timeout=TIMEOUT)
                # The part appears at the shell's start hook, before its fork: a Ctrl-C in
                # between is dropped by bash and ``sleep 600`` runs on (a known bash race,
                # docs/agent.md; a quiet CI run hit it). Cancel once the job has started.
                await trio.sleep(0.5)
                nursery.cancel_scope.cancel()
            await watcher.wait_for(
                lambda: (p := part()) is not None and p.isComplete, timeout=TIMEOUT
            )
            finished = part()
            assert finished is not None and finished.exitCode not in (None, 0)
            after = await _call(session, "run_command", command="echo usable")
            assert facts(after)["exit_code"] == 0


async def test_a_cancelled_run_command_stays_tracked_until_it_ends(tmp_path: Path) -> None:
    """In-process: run_command cancelled while its command ignores Ctrl-C. The next
    run_command there waited 5 s and said "busy: ... holds it (typed by someone else)",
    with no command_id to kill, and nothing ended the command but close_terminal. It is
    tracked under its command_id (listed, kill_command ends it); a run_command in its
    terminal waits for its end, which its run's kill brings."""
    from ahp.engine import open_host
    from ahp.mcp.backend import HostBackend
    from ahp.mcp.toolbox import Toolbox
    from tests.helpers import wait_for_text

    async with open_host() as host:
        box = Toolbox(HostBackend(host), default_cwd=str(tmp_path))

        async def cancelled_run(word: str) -> None:
            async with trio.open_nursery() as nursery:
                command = f"trap '' INT; echo {word[0]}''{word[1:]}; sleep 60"
                args = {"command": command, "terminal": "k", "yield_after": 600}
                nursery.start_soon(box.call, "run_command", args)
                await wait_for_text(host.terminals["ahp-terminal:/k"], word)
                nursery.cancel_scope.cancel()

        async def row() -> dict[str, Any]:
            listed = await box.call("list_terminals", {})
            assert listed.data is not None
            rows: list[dict[str, Any]] = listed.data["terminals"]
            return next(r for r in rows if r["terminal"] == "k")

        with trio.fail_after(TIMEOUT):
            assert not (await box.call("create_terminal", {"terminal": "k"})).is_error
            await cancelled_run("first")
            listed = await row()
            assert listed["state"] == "busy" and listed["command_id"], listed
            killed = await box.call("kill_command", {"command_id": listed["command_id"]})
            assert "KILLED" in killed.text, killed.text
            await cancelled_run("second")
            after = await box.call("run_command", {"command": "echo next", "terminal": "k"})
            assert not after.is_error and after.data is not None, after.text
            assert after.data["output"] == "next\n", after.text
            assert (await row())["state"] == "idle"


async def test_concurrent_calls_get_separate_default_terminals(tmp_path: Path) -> None:
    """In-process: two run_command calls at once never share a terminal."""
    from ahp.engine import open_host
    from ahp.mcp.backend import HostBackend
    from ahp.mcp.toolbox import Toolbox

    gate = tmp_path / "gate"
    outputs: list[Any] = []
    async with open_host() as host:
        box = Toolbox(HostBackend(host))

        async def run(tag: str) -> None:
            command = f"while [ ! -e {gate} ]; do sleep 0.1; done; echo {tag}"
            outputs.append(await box.call("run_command", {"command": command}))

        with trio.fail_after(TIMEOUT):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(run, "one")
                nursery.start_soon(run, "two")
                # Both are typing or running: wait until the second terminal exists.
                async with host.subscribe_root() as catalogue:
                    async for _ in catalogue:
                        if len(host.terminals) == 2:
                            break
                await trio.Path(gate).touch()
        terminals = sorted(out.data["terminal"] for out in outputs)
        assert terminals == ["main", "main-2"], [out.text for out in outputs]
        assert sorted(out.data["output"].strip() for out in outputs) == ["one", "two"]


async def test_connect_runs_commands_in_the_sidecars_terminals(tmp_path: Path) -> None:
    from ahp.engine import open_host
    from ahp.server import ServeOptions, serve_host

    sock = tmp_path / "side.sock"
    async with open_host() as host, trio.open_nursery() as nursery:
        sidecar = await nursery.start(serve_host, host, ServeOptions(unix=str(sock), token="tkn-5"))
        await host.create_terminal("ahp-terminal:/theirs", cwd=str(tmp_path))
        async with mcp_session(tmp_path, "--connect", sidecar.url) as session:
            result = await _call(
                session,
                "run_command",
                command="echo remote; exit_code() { return 3; }; exit_code",
                terminal="theirs",
            )
            data = facts(result)
            assert data["status"] == "finished" and data["exit_code"] == 3
            assert "remote" in data["output"]
            result = await _call(session, "run_command", command="pwd")  # creates 'main' there
            assert "ahp-terminal:/main" in host
            screen = await _call(session, "read_screen", terminal="theirs")
            assert "remote" in screen_of(screen)[0]
        nursery.cancel_scope.cancel()


async def test_long_calls_report_progress(tmp_path: Path) -> None:
    """A client that asks for progress gets it while a command runs (and can reset its
    own timeout on it); here the first report is what lets the command finish."""
    gate = tmp_path / "gate"
    reports: list[tuple[float, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        reports.append((progress, message))
        await trio.Path(gate).touch()

    async with mcp_session(tmp_path) as session:
        result = await session.call_tool(
            "run_command",
            {"command": f"while [ ! -e {gate} ]; do sleep 0.1; done; echo through"},
            progress_callback=on_progress,
        )
        assert not result.is_error, _text(result)
        assert facts(result)["status"] == "finished"
        assert reports and reports[0][0] > 0
        assert reports[0][1] is not None and reports[0][1].startswith("run_command: ")


async def test_a_full_screen_program_is_seen_and_driven_with_keys(tmp_path: Path) -> None:
    async with mcp_session(tmp_path) as session:
        started = await _call(
            session,
            "run_command",
            command="printf 'line one\\nline two\\n' | less",
            yield_after=TIMEOUT,
        )
        data = facts(started)
        assert data["status"] == "waiting_for_input", _text(started)
        screen = await _call(session, "read_screen", terminal="main")
        text, alternate = screen_of(screen)
        assert alternate is True
        assert "line one\nline two" in text
        assert "full-screen (alternate) display" in _text(screen)
        done = await _call(
            session, "send_input", command_id=data["command_id"], text="q", wait=TIMEOUT
        )
        assert facts(done)["status"] == "finished", _text(done)
        assert "used the full-screen (alternate) display" in _text(done)


async def test_a_shell_killed_by_a_signal_is_exited_not_busy(tmp_path: Path) -> None:
    """A shell killed by a signal has no exit code: its terminal used to stay "busy" for
    good (its last command part open), every later run_command refused, the default
    terminal moved to main-2, interrupt "sent Ctrl-C" to nobody. It is exited: the next
    run_command there starts a new shell."""
    async with mcp_session(tmp_path) as session:
        gone = await _call(session, "run_command", command="kill -9 $$", terminal="sig")
        assert facts(gone)["status"] == "shell_exited", _text(gone)
        listed = await _call(session, "list_terminals")
        assert terminal_rows(listed)["sig"]["state"] == "exited", _text(listed)
        stopped = await _call(session, "interrupt", terminal="sig")
        assert "no running shell" in _text(stopped), _text(stopped)
        back = await _call(session, "run_command", command="echo back", terminal="sig")
        assert facts(back)["exit_code"] == 0, _text(back)
        await _call(session, "run_command", command="kill -KILL $$")  # the default one
        again = await _call(session, "run_command", command="echo same-terminal")
        assert facts(again)["exit_code"] == 0 and facts(again)["terminal"] == "main", _text(again)
