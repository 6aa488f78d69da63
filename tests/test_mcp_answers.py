"""What an agent reads from the real MCP server (issue 20): each answer carries the
output once, only what is new since the last answer about the command (the whole
on request), never the body of a heredoc it typed, nor the terminal's echo of
multi-line text it sent; ``--structured`` moves the facts into ``structuredContent``.

The server is ``python -m ahp mcp`` as a subprocess, driven by the official MCP
client over stdio; waits are event-driven (a REPL's prompt, a command's end).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.test_mcp import TIMEOUT, _text, facts, mcp_session


async def _call(session: Any, name: str, **arguments: Any) -> Any:
    result = await session.call_tool(name, arguments)
    assert not result.is_error, f"{name}: {_text(result)}"
    return result


async def _answer(session: Any, command_id: str, text: str) -> Any:
    return await _call(
        session, "send_input", command_id=command_id, text=text, keys=["enter"], wait=TIMEOUT
    )


async def test_a_repl_session_reads_each_output_once(tmp_path: Path) -> None:
    async with mcp_session(tmp_path) as session:
        started = await _call(session, "run_command", command="python3 -q", yield_after=TIMEOUT)
        data = facts(started)
        assert data["status"] == "waiting_for_input", _text(started)
        command_id = data["command_id"]
        first = await _answer(session, command_id, "x = 6 * 7")
        assert facts(first)["status"] == "waiting_for_input", _text(first)
        assert "x = 6 * 7" in facts(first)["output"]
        second = await _answer(session, command_id, "print('value', x)")
        out = facts(second)["output"]
        assert "value 42" in out
        assert "x = 6 * 7" not in out, "an earlier step's output came back"
        # A follow-up is short: one header line, the new output, one brief status line.
        text = _text(second)
        assert text.splitlines()[0] == f"── {command_id} in terminal 'main', new output:"
        assert text.splitlines()[-1].startswith("── WAITING FOR INPUT after ")
        assert "send_input(command_id=" not in text  # the long hint was in the first answer
        assert len(text) < 200, text
        # Nothing new: said so.
        read = await _call(session, "read_output", command_id=command_id)
        assert facts(read)["output"] == "" and "(no new output)" in _text(read)
        # The whole output on request.
        whole = await _call(session, "wait_command", command_id=command_id, timeout=0, full=True)
        assert "x = 6 * 7" in facts(whole)["output"] and "value 42" in facts(whole)["output"]
        done = await _answer(session, command_id, "exit()")
        assert facts(done)["status"] == "finished" and facts(done)["exit_code"] == 0
        assert "value 42" not in facts(done)["output"]


async def test_a_heredoc_is_not_sent_back(tmp_path: Path) -> None:
    lines = [f"line {i:04d}: " + "lorem ipsum dolor sit amet " * 2 for i in range(500)]
    body = "\n".join(lines)
    command = f"cat > heredoc.txt <<'EOF'\n{body}\nEOF\n"
    assert len(command) > 30_000
    async with mcp_session(tmp_path) as session:
        result = await _call(session, "run_command", command=command)
        text = _text(result)
        assert facts(result)["status"] == "finished" and facts(result)["exit_code"] == 0
        assert text.splitlines()[0] == (
            f"$ cat > heredoc.txt <<'EOF' ── [501 more lines ({len(command) - 26} characters) "
            "not repeated]"
        )
        assert "lorem" not in text
        assert len(text) < 300, text
    assert (tmp_path / "heredoc.txt").read_text() == body + "\n"


async def test_the_echo_of_typed_lines_is_left_out(tmp_path: Path) -> None:
    lines = [f"typed row {i}" for i in range(40)]
    async with mcp_session(tmp_path) as session:
        started = await _call(
            session, "run_command", command="cat > typed.txt; echo saved", yield_after=TIMEOUT
        )
        command_id = facts(started)["command_id"]
        assert facts(started)["status"] == "waiting_for_input", _text(started)
        done = await _call(
            session,
            "send_input",
            command_id=command_id,
            text="\r".join(lines) + "\r",
            keys=["ctrl-d"],
            wait=TIMEOUT,
        )
        data = facts(done)
        assert data["status"] == "finished", _text(done)
        assert data["output"] == (
            "typed row 0\n── [39 more lines you typed, echoed by the terminal]\nsaved\n"
        ), _text(done)
    assert (tmp_path / "typed.txt").read_text() == "".join(f"{line}\n" for line in lines)


async def test_structured_answers_carry_the_output_once(tmp_path: Path) -> None:
    async with mcp_session(tmp_path, "--structured") as session:
        listed = await session.list_tools()
        run = next(tool for tool in listed.tools if tool.name == "run_command")
        assert run.output_schema is not None
        result = await _call(session, "run_command", command="echo structured-$((6*7))")
        data = result.structured_content
        assert data["output"] == "structured-42\n" and data["exit_code"] == 0
        assert data["status"] == "finished" and data["new_only"] is False
        (block,) = result.content
        assert (
            block.text
            == f"{data['command_id']} in terminal 'main': exit code 0 · "
            + (block.text.rsplit("· ", 1)[1])
        )
        assert "structured-42" not in block.text
        clamped = await _call(session, "run_command", command="true", timeout=-1)
        assert clamped.structured_content["notes"] == [
            "'timeout' -1 is below the least allowed: 1.0 was used"
        ]
        terminals = await _call(session, "list_terminals")
        assert terminals.structured_content["terminals"][0]["terminal"] == "main"


async def test_a_remote_terminals_follow_ups_are_new_only_too(tmp_path: Path) -> None:
    """--connect: the same cursor over a sidecar's terminal (``RemoteTerminal`` handles)."""
    import trio

    from ahp.engine import open_host
    from ahp.server import ServeOptions, serve_host

    sock = tmp_path / "side.sock"
    async with open_host() as host, trio.open_nursery() as nursery:
        sidecar = await nursery.start(serve_host, host, ServeOptions(unix=str(sock), token="t6"))
        async with mcp_session(tmp_path, "--connect", sidecar.url) as session:
            started = await _call(
                session,
                "run_command",
                command="echo first-part; read -p 'name? ' n; echo \"hello $n\"",
                yield_after=TIMEOUT,
            )
            data = facts(started)
            assert data["status"] == "waiting_for_input", _text(started)
            assert "first-part" in data["output"]
            done = await _answer(session, data["command_id"], "Ada")
            assert facts(done)["status"] == "finished", _text(done)
            assert "hello Ada" in facts(done)["output"]
            assert "first-part" not in facts(done)["output"]
        nursery.cancel_scope.cancel()


async def test_a_password_prompt_is_said_to_read_with_echo_off(tmp_path: Path) -> None:
    """getpass reads /dev/tty with echo off: the answer says so, and the answer goes in."""
    program = 'python3 -c \'import getpass; print("got", getpass.getpass("pass: "))\''
    async with mcp_session(tmp_path) as session:
        started = await _call(session, "run_command", command=program, yield_after=TIMEOUT)
        data = facts(started)
        assert data["status"] == "waiting_for_input", _text(started)
        assert "reads the terminal with echo off" in _text(started)
        done = await _answer(session, data["command_id"], "s3cret")
        assert facts(done)["status"] == "finished", _text(done)
        assert "got s3cret" in facts(done)["output"]


async def test_parallel_waits_on_one_command_all_see_it_wait_for_input(tmp_path: Path) -> None:
    """send_input with ``wait`` and a wait_command on one command at once (parallel tool
    calls): both answer WAITING FOR INPUT when it asks again. One did, and the other
    waited out its whole timeout ("(no new output) WAITING FOR INPUT after 20.6 s")."""
    import trio

    program = 'python3 -c \'input("a? "); import time; time.sleep(1); input("b? ")\''
    async with mcp_session(tmp_path) as session:
        started = await _call(session, "run_command", command=program, yield_after=TIMEOUT)
        assert facts(started)["status"] == "waiting_for_input", _text(started)
        command_id = facts(started)["command_id"]
        answers: list[Any] = []

        async def answer() -> None:
            answers.append(
                await _call(
                    session, "send_input", command_id=command_id, text="1", keys=["enter"], wait=600
                )
            )

        async def wait() -> None:
            answers.append(await _call(session, "wait_command", command_id=command_id, timeout=600))

        async with trio.open_nursery() as nursery:  # (under the session's fail_after)
            nursery.start_soon(answer)
            nursery.start_soon(wait)
        assert [facts(a)["status"] for a in answers] == ["waiting_for_input"] * 2, [
            _text(a) for a in answers
        ]
        assert "b?" in "".join(facts(a)["output"] for a in answers)
        done = await _answer(session, command_id, "2")
        assert facts(done)["status"] == "finished", _text(done)


async def test_a_command_is_text_its_line_ends_and_control_characters(tmp_path: Path) -> None:
    """CRLF ends lines (the header showed a raw CR); a lone CR too: ``exit 5`` after it
    ended the shell untracked, after an answer saying ``first``, exit code 0. A Ctrl-C in
    a command is a tool error naming it (``cho b: command not found``)."""
    touched = tmp_path / "touched"
    async with mcp_session(tmp_path) as session:
        crlf = await _call(session, "run_command", command="echo one\r\necho two\r\nfalse\r\n")
        data = facts(crlf)
        assert (data["status"], data["exit_code"], data["output"]) == ("finished", 1, "one\ntwo\n")
        assert (
            _text(crlf).splitlines()[0]
            == "$ echo one ── [2 more lines (15 characters) not repeated]"
        )
        split = await _call(
            session, "run_command", command=f"echo first\rsleep 0.2; touch {touched}; exit 5"
        )
        data = facts(split)
        assert (data["status"], data["exit_code"]) == ("shell_exited", 5), _text(split)
        assert data["output"].startswith("first\n") and touched.exists()
        refused = await session.call_tool("run_command", {"command": "echo a\x03echo b"})
        assert refused.is_error and "U+0003 (Ctrl-C)" in _text(refused), _text(refused)
        assert "send_input" in _text(refused)


async def test_an_incomplete_command_line_is_said_to_be_one(tmp_path: Path) -> None:
    """An unclosed quote, a trailing operator, a heredoc without its end: bash reads the
    rest at its ``> `` prompt with its line editor, echo off. The answer said "reads the
    terminal with echo off (a password? ...)"; it says the line is incomplete, and what to
    do. A real password read (``read -s``) is still said to be one."""
    async with mcp_session(tmp_path) as session:
        for terminal, command, rest, output in (
            ("q", "echo 'abc", "def'", "abc\ndef\n"),
            ("o", "echo a &&", "echo b", "a\nb\n"),
            # Typed inside ``{ … }`` to run as one command, whose ``}`` went into the
            # heredoc's body: the answer says so, and to close the group after the rest.
            ("h", "cat <<EOF\nhello", "EOF\n}", "hello\n}\n"),
        ):
            started = await _call(
                session, "run_command", command=command, terminal=terminal, yield_after=TIMEOUT
            )
            text = _text(started)
            assert facts(started)["status"] == "waiting_for_input", text
            assert "the command line is incomplete" in text and "password" not in text, text
            assert ("send a line `}` after the rest" in text) == ("\n" in command), text
            done = await _answer(session, facts(started)["command_id"], rest)
            assert facts(done)["status"] == "finished", _text(done)
            assert facts(done)["output"].endswith(output), _text(done)
        secret = await _call(
            session, "run_command", command="read -s -p 'pw: ' x; echo got $x", yield_after=TIMEOUT
        )
        assert "reads the terminal with echo off (a password?" in _text(secret), _text(secret)
        done = await _answer(session, facts(secret)["command_id"], "s3cret")
        assert facts(done)["output"].endswith("got s3cret\n"), _text(done)


async def test_a_refusal_by_the_run_layer_is_a_tool_error(tmp_path: Path) -> None:
    """If another client's command slips in between the toolbox's look and ``run()``,
    the run layer refuses to type; the model is told who holds the terminal."""
    import trio

    from ahp.engine import open_host
    from ahp.mcp.backend import HostBackend
    from ahp.mcp.toolbox import Toolbox, _foreign_busy
    from tests.helpers import wait_for_state

    class Blind(Toolbox):
        def _busy(self, uri: str) -> bool:  # the look that a race would defeat
            return False

    async with open_host(shell="/bin/bash") as host:
        box = Blind(HostBackend(host), default_cwd=str(tmp_path))
        with trio.fail_after(TIMEOUT):
            assert not (await box.call("run_command", {"command": "true"})).is_error
            terminal = host.terminals["ahp-terminal:/main"]
            await terminal.send_input("read -p 'theirs? ' x\r")  # typed by someone else
            await wait_for_state(
                terminal, lambda _: _foreign_busy(box.backend, "ahp-terminal:/main")
            )
            refused = await box.call("run_command", {"command": "echo mine"})
        assert refused.is_error, refused.text
        assert "is busy: `read -p 'theirs? ' x` holds it" in refused.text
        assert "mine" not in terminal.state.text()
