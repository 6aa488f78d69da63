"""The MCP server (``python -m ahp mcp``): pure layers, the SDK on Trio, and the real
server driven as a subprocess through the official MCP client over stdio.

Every wait on the subprocess sits under a generous ``trio.fail_after``; tool calls
that wait on a command are event-driven on the server side (``wait_command`` returns
as soon as the command ends), so nothing here depends on the machine's speed.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import attrs
import pytest
import trio
import trio.lowlevel
import trio.testing
from hypothesis import given
from hypothesis import strategies as st

from ahp.mcp import keys, render, tools
from ahp.mcp.contract import Handle
from ahp.mcp.output import ToolError
from ahp.mcp.render import terminal_uri
from ahp.mcp.stdio import MAX_LINE_BYTES, TOO_LONG, StdinLines
from ahp.mcp.tracked import CommandTable, Tracked

ROOT = Path(__file__).resolve().parents[1]
#: Generous bound for anything involving the subprocess on a loaded machine.
TIMEOUT = 120.0

# -- keys (pure) ---------------------------------------------------------------------------


def test_named_keys() -> None:
    assert keys.key_bytes("enter") == "\r"
    assert keys.key_bytes("ctrl-c") == "\x03"
    assert keys.key_bytes("Ctrl+C") == "\x03"
    assert keys.key_bytes("^C") == "\x03"
    assert keys.key_bytes("C-d") == "\x04"
    assert keys.key_bytes("up") == "\x1b[A"
    assert keys.key_bytes("escape") == "\x1b"
    assert keys.key_bytes("alt-b") == "\x1bb"
    assert keys.key_bytes("Page-Down") == "\x1b[6~"
    assert keys.keys_text(["ctrl-a", "ctrl-k", "enter"]) == "\x01\x0b\r"


def test_unknown_key_lists_the_known_ones() -> None:
    with pytest.raises(ValueError, match=r"unknown key 'ctrl-shift-x'.*enter, tab"):
        keys.key_bytes("ctrl-shift-x")


def test_too_many_keys_refused() -> None:
    with pytest.raises(ValueError, match="too many keys"):
        keys.keys_text(["enter"] * (keys.MAX_KEYS + 1))
    assert keys.keys_text(["enter"] * keys.MAX_KEYS) == "\r" * keys.MAX_KEYS


@given(st.sampled_from(sorted(keys.KEYS)))
def test_canonical_names_are_fixed_points(name: str) -> None:
    assert keys.normalise_key(name) == name
    assert keys.normalise_key(name.upper()) == name
    assert keys.key_bytes(name) == keys.KEYS[name]


@given(st.text(max_size=20))
def test_any_key_name_either_maps_or_raises_value_error(name: str) -> None:
    try:
        data = keys.key_bytes(name)
    except ValueError as exc:
        assert "unknown key" in str(exc)
    else:
        assert data


# -- tool schemas and argument checks (pure) ------------------------------------------------


def test_every_tool_has_a_description_and_an_object_schema() -> None:
    names = [spec.name for spec in tools.TOOLS]
    assert len(set(names)) == len(names)
    for spec in tools.TOOLS:
        assert len(spec.description) > 60, spec.name
        assert spec.input_schema["type"] == "object"
        assert spec.input_schema["additionalProperties"] is False
        for name, prop in spec.input_schema["properties"].items():
            assert "type" in prop, (spec.name, name)
        # Defaults satisfy the schema (the checker accepts them back).
        defaults = {
            k: v["default"] for k, v in spec.input_schema["properties"].items() if "default" in v
        }
        required = {k: "x" for k in spec.input_schema.get("required", ())}
        tools.check_arguments(spec, {**defaults, **required})


def test_arguments_checked_with_clear_messages() -> None:
    run = tools.tool("run_command")
    args = tools.check_arguments(run, {"command": "ls"})
    assert args["yield_after"] == tools.DEFAULT_YIELD_AFTER
    assert args["head_bytes"] == tools.DEFAULT_HEAD_BYTES
    assert args["timeout"] is None and args["terminal"] is None
    # JSON null is "not given"; a whole float is an integer.
    assert (
        tools.check_arguments(run, {"command": "ls", "cwd": None, "head_bytes": 10.0})["head_bytes"]
        == 10
    )
    cases: dict[str, dict[str, Any]] = {
        "missing required parameter 'command'": {},
        "unknown parameter 'cmd'": {"cmd": "ls"},
        "'command' must be a string, got a number": {"command": 3},
        "'command' must not be empty": {"command": ""},
        "'timeout' must be a number, got a string": {"command": "ls", "timeout": "5"},
        "'timeout' must be a number, got a boolean": {"command": "ls", "timeout": True},
        "'head_bytes' must be a whole number": {"command": "ls", "head_bytes": 1.5},
        "'command' is too long": {"command": "x" * (tools.MAX_COMMAND_CHARS + 1)},
        "must not contain NUL": {"command": "ls\x00"},
        "'timeout' must be a number, got NaN": {"command": "ls", "timeout": float("nan")},
    }
    for message, arguments in cases.items():
        with pytest.raises(tools.ArgumentError, match=message):
            tools.check_arguments(run, arguments)
    send = tools.tool("send_input")
    with pytest.raises(tools.ArgumentError, match="'text' is too long"):
        tools.check_arguments(send, {"text": "y" * (tools.MAX_INPUT_CHARS + 1)})
    assert tools.check_arguments(send, {"text": "y" * tools.MAX_INPUT_CHARS})["text"]
    with pytest.raises(tools.ArgumentError, match=r"'keys'\[1\] must be a string"):
        tools.check_arguments(send, {"keys": ["enter", 5]})
    with pytest.raises(tools.ArgumentError, match="'keys' has too many items"):
        tools.check_arguments(send, {"keys": ["enter"] * (keys.MAX_KEYS + 1)})
    with pytest.raises(tools.ArgumentError, match="unknown tool 'rm_rf'"):
        tools.tool("rm_rf")


def test_numbers_beyond_their_bounds_are_clamped_and_said() -> None:
    """Every number is a time or a size with named bounds: out of them it is clamped to
    the nearest one (never refused, never taken as is), and each clamp is one note."""
    run = tools.tool("run_command")
    cases = [
        ("timeout", 1e-300, tools.MIN_TIMEOUT, "below the least"),
        ("timeout", 0, tools.MIN_TIMEOUT, "below the least"),
        ("timeout", -5, tools.MIN_TIMEOUT, "below the least"),
        ("timeout", 1e300, tools.MAX_SECONDS, "above the most"),
        ("timeout", float("inf"), tools.MAX_SECONDS, "above the most"),
        ("yield_after", -1, 0.0, "below the least"),
        ("yield_after", tools.MAX_SECONDS * 2, tools.MAX_SECONDS, "above the most"),
        ("head_bytes", -1, 0, "below the least"),
        ("tail_bytes", 10**12, tools.MAX_BUDGET_BYTES, "above the most"),
        ("tail_bytes", 1e300, tools.MAX_BUDGET_BYTES, "above the most"),
    ]
    for name, given_value, used, side in cases:
        notes: list[str] = []
        args = tools.check_arguments(run, {"command": "ls", name: given_value}, notes)
        assert args[name] == used, (name, given_value)
        assert notes == [f"{name!r} {given_value!r} is {side} allowed: {used!r} was used"]
    notes = []
    args = tools.check_arguments(run, {"command": "ls", "timeout": 5, "tail_bytes": 10}, notes)
    assert (args["timeout"], args["tail_bytes"], notes) == (5, 10, [])
    wait = tools.tool("wait_command")
    notes = []
    assert tools.check_arguments(wait, {"command_id": "c", "timeout": -1}, notes)["timeout"] == 0
    assert len(notes) == 1
    create = tools.tool("create_terminal")
    notes = []
    args = tools.check_arguments(create, {"cols": 4096, "rows": 1}, notes)
    assert (args["cols"], args["rows"]) == (500, 5) and len(notes) == 2


@given(
    st.sampled_from(["timeout", "yield_after", "head_bytes", "tail_bytes"]),
    st.floats(allow_nan=False) | st.integers(min_value=-(10**30), max_value=10**30),
)
def test_any_number_ends_within_its_bounds(name: str, value: float) -> None:
    run = tools.tool("run_command")
    prop = run.input_schema["properties"][name]
    try:
        args = tools.check_arguments(run, {"command": "ls", name: value}, [])
    except tools.ArgumentError as exc:
        assert "whole number" in str(exc)  # a fraction where a count is meant
        return
    assert prop["minimum"] <= args[name] <= prop["maximum"]


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=8,
)


@given(
    st.sampled_from([spec.name for spec in tools.TOOLS]),
    st.dictionaries(
        st.sampled_from(["command", "terminal", "timeout", "keys", "text", "x", "full"]), _json
    ),
)
def test_arbitrary_arguments_are_accepted_or_refused_cleanly(name: str, arguments: Any) -> None:
    spec = tools.tool(name)
    try:
        checked = tools.check_arguments(spec, arguments)
    except tools.ArgumentError as exc:
        assert str(exc).startswith(f"{name}: ")
    else:
        assert set(checked) == set(spec.input_schema["properties"])


def test_terminal_names() -> None:
    assert terminal_uri("main") == "ahp-terminal:/main"
    assert terminal_uri("ahp-terminal:/build-2") == "ahp-terminal:/build-2"
    assert terminal_uri("ahp-terminal:/vscode/1:2") == "ahp-terminal:/vscode/1:2"
    for bad in ("../x", "a b", "x" * 65, "ahp-terminal:/", "ahp-terminal:/a b", "tab\t"):
        with pytest.raises(ToolError, match="bad terminal name"):
            terminal_uri(bad)
    assert render.display_name("ahp-terminal:/main") == "main"
    assert render.display_name("ahp-terminal:/vscode/1") == "ahp-terminal:/vscode/1"


# -- rendering (pure) ------------------------------------------------------------------------


@attrs.frozen
class _Bg:
    pid: int
    command_line: str


@attrs.frozen
class _Result:
    """A result value as the command API returns it (plain data)."""

    command_line: str = "make"
    status: str = "finished"
    output: str = "ok\n"
    exit_code: int | None = 0
    duration_ms: int = 1500
    truncated: bool = False
    omitted_bytes: int = 0
    omitted_lines: int = 0
    timed_out: bool = False
    waiting_for_input: bool = False
    alternate_screen: bool = False
    shell_exited: bool = False
    background: tuple[_Bg, ...] = ()
    command_id: str = "c1"
    note: str = ""
    holder: Any = None
    handle: Handle | None = None


def test_results_state_outcomes_plainly() -> None:
    text = render.format_result(_Result(), "main")
    assert text.splitlines() == [
        "$ make",
        "── terminal 'main', command_id c1",
        "ok",
        "── exit code 0 · 1.5 s",
    ]
    text = render.format_result(
        _Result(truncated=True, omitted_bytes=1234, omitted_lines=56, exit_code=2), "main"
    )
    assert "output truncated: 1234 bytes (56 lines) left out" in text
    assert "exit code 2" in text
    text = render.format_result(_Result(status="running", exit_code=None), "b")
    assert "STILL RUNNING after 1.5 s (command_id c1)" in text
    assert 'wait_command(command_id="c1")' in text
    text = render.format_result(
        _Result(status="waiting_for_input", exit_code=None, waiting_for_input=True), "b"
    )
    assert "WAITING FOR INPUT" in text and 'send_input(command_id="c1"' in text
    text = render.format_result(_Result(status="timed_out", exit_code=130, timed_out=True), "b")
    assert "TIMED OUT after 1.5 s: interrupted with Ctrl-C; exit code 130" in text
    # Killed after ignoring the Ctrl-C, or not over even then: the note says which.
    killed = "it ignored Ctrl-C for 5 s: killed (SIGKILL)"
    text = render.format_result(
        _Result(status="timed_out", exit_code=137, timed_out=True, note=killed), "b"
    )
    assert f"TIMED OUT after 1.5 s: {killed}; exit code 137" in text
    text = render.format_result(
        _Result(status="running", exit_code=None, timed_out=True, note="its timeout passed"), "b"
    )
    assert "STILL RUNNING after 1.5 s (command_id c1): its timeout passed" in text
    text = render.format_result(
        _Result(background=(_Bg(42, "sleep 1000 &"),), alternate_screen=True, output=""), "b"
    )
    assert "(no output)" in text
    assert "left running in the background: pid 42 `sleep 1000 &`" in text
    assert "used the full-screen (alternate) display" in text
    text = render.format_result(_Result(status="running", alternate_screen=True), "b")
    assert 'read_screen(terminal="b") shows it' in text
    for status, word in (
        ("interrupted", "INTERRUPTED"),
        ("killed", "KILLED"),
        ("shell_exited", "EXITED"),
    ):
        assert word in render.format_result(_Result(status=status), "b")
    text = render.format_result(_Result(status="lost", note="the connection is gone"), "b")
    assert "LOST after 1.5 s: the connection is gone; it may still run in terminal 'b'" in text
    text = render.format_result(_Result(status="lost"), "b")
    assert "LOST after 1.5 s: the command can no longer be followed" in text
    data = render.result_data(_Result(background=(_Bg(42, "x"),)), "main", "make all")
    assert data["command"] == "make all" and data["background"] == [
        {"pid": 42, "command_line": "x"}
    ]
    assert set(data) <= set(tools.COMMAND_RESULT_SCHEMA["properties"])


@attrs.frozen
class _Evidence:
    echo: bool = True
    source: str = "procfs"
    programs: tuple[str, ...] = ()
    full_screen: bool = False
    continuation: bool = False
    group_end: str = ""


def test_waiting_says_who_waits_and_for_what() -> None:
    waiting = _Result(status="waiting_for_input", exit_code=None, waiting_for_input=True)
    cases = {
        None: "the command is blocked reading the terminal (the prompt is above)",
        _Evidence(programs=("/usr/bin/python3 x.py",)): "python3 reads from the terminal",
        _Evidence(echo=False, programs=("sudo ls",)): "sudo reads the terminal with echo off",
        # A line editor turns echo off too, and polls: not a password.
        _Evidence(echo=False, source="poll", programs=("node",)): "node reads from the terminal",
        _Evidence(full_screen=True, programs=("vim",)): "vim waits for keys on a full-screen",
    }
    for evidence, words in cases.items():
        text = render.format_result(waiting, "main", evidence=evidence)
        assert f"WAITING FOR INPUT after 1.5 s: {words}" in text, text
    brief = render.format_result(waiting, "main", first=False, evidence=_Evidence(echo=False))
    assert brief.endswith(
        "WAITING FOR INPUT (echo off) after 1.5 s: answer with send_input, or interrupt"
    )
    brief = render.format_result(
        waiting, "main", first=False, evidence=_Evidence(echo=False, source="poll")
    )
    assert brief.endswith("WAITING FOR INPUT after 1.5 s: answer with send_input, or interrupt")


def test_an_incomplete_command_line_is_not_a_password_prompt() -> None:
    """The shell's line editor reading the rest of a line (``echo 'abc``) reads with echo
    off, as a password reader does: the answer said "(a password? ...)"."""
    waiting = _Result(status="waiting_for_input", exit_code=None, waiting_for_input=True)
    evidence = _Evidence(echo=False, programs=("/bin/bash -i",), continuation=True)
    for first in (True, False):
        text = render.format_result(waiting, "main", first=first, evidence=evidence)
        assert "password" not in text and "echo off" not in text, text
        assert "the command line is incomplete" in text and "interrupt" in text, text
    text = render.format_result(waiting, "main", evidence=evidence)
    assert "a trailing backslash or operator such as && or |" in text, text
    assert 'send the rest with send_input(command_id="c1"' in text.lower(), text


def test_follow_up_answers_are_short() -> None:
    """A follow-up has a one-line header and brief hints; new output only, said so."""
    waiting = _Result(status="waiting_for_input", exit_code=None, waiting_for_input=True)
    shown = render.Shown(">>> 1+1\n2\n>>>\n", new_only=True)
    text = render.format_result(waiting, "main", "python3", shown, first=False)
    assert text.splitlines() == [
        "── c1 in terminal 'main', new output:",
        ">>> 1+1",
        "2",
        ">>>",
        "── WAITING FOR INPUT after 1.5 s: answer with send_input, or interrupt",
    ]
    nothing = render.format_result(_Result(), "main", shown=render.Shown("", new_only=True))
    assert "(no new output)" in nothing
    cut = render.Shown("a\n", truncated=True, omitted_bytes=9, omitted_lines=3, new_only=True)
    text = render.format_result(_Result(truncated=False), "main", shown=cut, first=False)
    assert "output truncated: 9 bytes (3 lines)" in text
    text = render.format_result(_Result(status="running"), "main", first=False)
    assert text.endswith("── STILL RUNNING after 1.5 s")


def test_the_command_header_is_its_first_line() -> None:
    """A heredoc's body (or a long line) is counted, not sent back."""
    body = "\n".join(f"line {i}" for i in range(500))
    heredoc = f"cat > f.txt <<'EOF'\n{body}\nEOF"
    header = render.command_header(heredoc)
    assert header.startswith("$ cat > f.txt <<'EOF' ── [501 more lines (")
    assert header.endswith(" characters) not repeated]")
    assert len(header) < 100
    assert render.command_header("ls -l") == "$ ls -l"
    long = "echo " + "x" * 1000
    assert render.command_header(long) == (
        f"$ {long[: render.HEADER_CHARS]} ── [{1005 - render.HEADER_CHARS} more characters "
        "not repeated]"
    )
    text = render.format_result(_Result(command_line=heredoc), "main")
    assert "line 1\n" not in text


def test_the_echo_of_typed_lines_is_left_out() -> None:
    typed = "def f(n):\r    return n * n\r\r"
    output = ">>> def f(n):\n...     return n * n\n...\n>>>\n"
    assert render.elide_echo(output, typed) == (output, 0)  # two lines: kept
    lines = [f"row {i}" for i in range(50)]
    typed = "cat > x <<'EOF'\r" + "\r".join(lines) + "\rEOF\r"
    echoed = "$ cat > x <<'EOF'\n" + "".join(f"> {line}\n" for line in lines) + "> EOF\nok\n"
    text, left_out = render.elide_echo(echoed, typed)
    assert left_out == 51
    assert text == "$ cat > x <<'EOF'\n── [51 more lines you typed, echoed by the terminal]\nok\n"
    # Output that does not echo the text is not touched.
    assert render.elide_echo("other\nthings\n", typed) == ("other\nthings\n", 0)


@given(st.text(max_size=300), st.integers(0, 200), st.integers(0, 200))
def test_budget_text_keeps_the_budget_and_counts_the_rest(text: str, head: int, tail: int) -> None:
    from ahp.agent.budget import omission_marker

    shown = render.budget_text(text, head, tail)
    size = len(text.encode("utf-8", "surrogatepass"))
    assert shown.new_only
    if size <= head + tail:
        assert shown.text == text and not shown.truncated
        return
    whole = text if text.endswith("\n") else text + "\n"
    if not shown.truncated:  # the last line's newline was all that did not fit
        assert shown.text == whole
        return
    marker = omission_marker(shown.omitted_bytes, shown.omitted_lines) + "\n"
    before, found, after = shown.text.partition(marker)
    assert found and shown.omitted_bytes > 0
    assert whole.endswith(after)
    assert whole.startswith(before) or whole.startswith(before[:-1])
    kept = len((before + after).encode("utf-8", "surrogatepass"))
    assert kept <= head + tail + 1


# -- the command table's bound (pure) -------------------------------------------------------


@attrs.define
class _Handle:
    """The identity and completion flag of a command (all the table looks at)."""

    id: str
    done: bool = False


def _tracked(cid: str, *, done: bool) -> Tracked:
    return Tracked(
        command_id=cid,
        uri="ahp-terminal:/main",
        command="true",
        handle=_Handle(cid, done=done),  # type: ignore[arg-type]
        last=_Result(command_id=cid),
    )


def test_command_table_is_bounded() -> None:
    table = CommandTable(limit=3)
    table.add(_tracked("a", done=True))
    table.add(_tracked("b", done=False))
    table.add(_tracked("c", done=True))
    table.add(_tracked("d", done=False))  # over the limit: the oldest finished one goes
    assert len(table) == 3
    with pytest.raises(ToolError, match="no command 'a'"):
        table.get("a")
    table.add(_tracked("e", done=False))  # then the next finished one
    with pytest.raises(ToolError, match="no command 'c'"):
        table.get("c")
    with pytest.raises(ToolError, match="3 commands are running"):
        table.add(_tracked("f", done=False))  # all running: refused, nothing lost
    assert [table.get(c).command_id for c in "bde"] == ["b", "d", "e"]
    assert table.running_in("ahp-terminal:/main") is table.get("e")
    table.forget_terminal("ahp-terminal:/main")
    assert len(table) == 0


def test_default_command_bound_is_named() -> None:
    from ahp.mcp.tracked import MAX_TRACKED_COMMANDS

    table = CommandTable()
    assert table.limit == MAX_TRACKED_COMMANDS
    for n in range(MAX_TRACKED_COMMANDS + 10):
        table.add(_tracked(str(n), done=True))
    assert len(table) == MAX_TRACKED_COMMANDS


# -- the stdin reader, and why the SDK's own one is not used --------------------------------


async def test_stdin_lines_split_bounded_and_eof() -> None:
    r, w = os.pipe()
    lines = StdinLines(r)
    try:
        os.write(w, b'{"a": 1}\n{"b"')
        assert await lines.__anext__() == '{"a": 1}\n'
        os.write(w, b": 2}\n\xff\n")
        assert await lines.__anext__() == '{"b": 2}\n'
        # Undecodable bytes are kept as lone surrogates (the screen refuses them naming
        # the byte), not replaced, and not fatal.
        assert await lines.__anext__() == "\udcff\n"
        # A line over the bound is dropped up to its newline and reported once.
        big = b"x" * (MAX_LINE_BYTES + 100_000) + b"\n" + b'{"c": 3}\n'

        async def feed() -> None:
            await trio.to_thread.run_sync(os.write, w, big)
            os.write(w, b"tail")
            os.close(w)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(feed)
            with trio.fail_after(TIMEOUT):
                assert await lines.__anext__() == TOO_LONG
                assert await lines.__anext__() == '{"c": 3}\n'
                assert await lines.__anext__() == "tail"  # a last line without newline
                with pytest.raises(StopAsyncIteration):
                    await lines.__anext__()
    finally:
        lines.release()


async def test_stdin_lines_read_is_cancellable() -> None:
    r, w = os.pipe()
    lines = StdinLines(r)
    finished = trio.Event()
    try:
        async with trio.open_nursery() as nursery:

            async def read() -> None:
                with trio.CancelScope() as scope:
                    nursery_scopes.append(scope)
                    await lines.__anext__()
                finished.set()

            nursery_scopes: list[trio.CancelScope] = []
            nursery.start_soon(read)
            await trio.testing.wait_all_tasks_blocked()
            nursery_scopes[0].cancel()
            with trio.fail_after(TIMEOUT):
                await finished.wait()  # returns without any input arriving
    finally:
        lines.release()
        os.close(w)


async def test_sdk_stdin_reader_blocks_cancellation() -> None:
    """Evidence for ahp.mcp.stdio: the SDK's stdio_server, reading stdin through anyio's
    thread-backed file, cannot be cancelled until a line (or EOF) arrives."""
    from mcp.server.stdio import stdio_server

    r, w = os.pipe()
    stdin = anyio.wrap_file(os.fdopen(r, encoding="utf-8"))
    stdout = anyio.wrap_file(os.fdopen(os.open(os.devnull, os.O_WRONLY), "w", encoding="utf-8"))
    exited = trio.Event()
    scope = trio.CancelScope()

    async def serve() -> None:
        with scope:
            async with stdio_server(stdin=stdin, stdout=stdout) as (read_stream, write_stream):
                write_stream.close()
                try:
                    async for _ in read_stream:
                        pass
                finally:
                    read_stream.close()
        exited.set()

    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(serve)
            await trio.testing.wait_all_tasks_blocked()
            scope.cancel()
            await trio.testing.wait_all_tasks_blocked()
            assert not exited.is_set()  # cancelled, yet still inside: the thread holds it
            os.close(w)  # only EOF (or a line) lets it finish
            w = -1
            with trio.fail_after(TIMEOUT):
                await exited.wait()
    finally:
        if w >= 0:
            os.close(w)
        await stdout.aclose()
        await stdin.aclose()


# -- the SDK's servers run on Trio ----------------------------------------------------------


async def test_sdk_servers_run_on_trio() -> None:
    """Both SDK server layers, and the SDK client, run inside trio (through anyio)."""
    import mcp_types
    import sniffio
    from mcp.client.session import ClientSession
    from mcp.server import MCPServer, Server

    seen: list[str] = []

    async def list_tools(ctx: Any, params: Any) -> mcp_types.ListToolsResult:
        return mcp_types.ListToolsResult(
            tools=[mcp_types.Tool(name="lib", input_schema={"type": "object"})]
        )

    async def call_tool(ctx: Any, params: Any) -> mcp_types.CallToolResult:
        await trio.lowlevel.checkpoint()  # a Trio primitive inside a handler
        seen.append(sniffio.current_async_library())
        return mcp_types.CallToolResult(content=[mcp_types.TextContent(type="text", text="ok")])

    lowlevel = Server("probe", on_list_tools=list_tools, on_call_tool=call_tool)
    fast = MCPServer("fprobe")

    @fast.tool()
    async def lib() -> str:
        await trio.lowlevel.checkpoint()
        seen.append(sniffio.current_async_library())
        return "ok"

    for server in (lowlevel, fast._lowlevel_server):
        c2s_send, c2s_recv = anyio.create_memory_object_stream[Any](10)
        s2c_send, s2c_recv = anyio.create_memory_object_stream[Any](10)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(
                server.run, c2s_recv, s2c_send, server.create_initialization_options()
            )
            with trio.fail_after(TIMEOUT):
                async with ClientSession(s2c_recv, c2s_send) as session:
                    await session.initialize()
                    listed = await session.list_tools()
                    assert [t.name for t in listed.tools] == ["lib"]
                    result = await session.call_tool("lib", {})
                    assert not result.is_error
            nursery.cancel_scope.cancel()
    assert seen == ["trio", "trio"]


# -- the real server over stdio ------------------------------------------------------------


def _text(result: Any) -> str:
    return "\n".join(block.text for block in result.content if block.type == "text")


_STATUS_WORDS = (
    ("exit code ", "finished"),
    ("FINISHED", "finished"),
    ("STILL RUNNING", "running"),
    ("WAITING FOR INPUT", "waiting_for_input"),
    ("TIMED OUT", "timed_out"),
    ("INTERRUPTED", "interrupted"),
    ("KILLED", "killed"),
    ("the terminal's shell EXITED", "shell_exited"),
    ("LOST", "lost"),
)


def facts(result: Any) -> dict[str, Any]:
    """A command answer's facts, read back from its text as a model reads them (the
    server sends nothing else by default: asserted here)."""
    import re

    assert result.structured_content is None, "the output must travel once: text only"
    lines = _text(result).splitlines()
    remarks: list[str] = []
    while lines and lines[-1].startswith(render.MARK + " "):
        remarks.insert(0, lines.pop()[len(render.MARK) + 1 :])
    if lines[0].startswith("$ "):
        header = re.fullmatch(r"── terminal '(.+)', command_id (\S+)", lines[1])
        body = lines[2:]
    else:
        header = re.fullmatch(r"── (\S+) in terminal '(.+)', (?:new )?output:", lines[0])
        body = lines[1:]
    assert header is not None, lines[:2]
    terminal, command_id = header.groups() if lines[0].startswith("$ ") else header.groups()[::-1]
    output = "" if body in (["(no output)"], ["(no new output)"]) else "\n".join(body) + "\n"
    status = next(s for r in remarks for word, s in _STATUS_WORDS if r.startswith(word))
    code = next((re.search(r"(?:exit code|with code) (-?\d+)", r) for r in remarks), None)
    cut = next((m for r in remarks if (m := re.match(r"output truncated: (\d+) bytes", r))), None)
    return {
        "terminal": terminal,
        "command_id": command_id,
        "status": status,
        "exit_code": int(code.group(1)) if code else None,
        "output": output,
        "truncated": cut is not None,
        "omitted_bytes": int(cut.group(1)) if cut else 0,
        "remarks": remarks,
    }


def terminal_rows(result: Any) -> dict[str, dict[str, Any]]:
    """list_terminals' answer, read back from its text: name -> state, cwd, command_id."""
    import re

    assert result.structured_content is None
    rows: dict[str, dict[str, Any]] = {}
    text = _text(result)
    if text.startswith("no terminals yet"):
        return rows
    for line in text.splitlines():
        name, _, rest = line.partition(": ")
        fields = rest.split(" · ")
        cwd = next((f[4:] for f in fields if f.startswith("cwd ")), None)
        command = re.search(r" (cmd-\S+) `", fields[0])
        rows[name] = {
            "state": fields[0].split(",")[0],
            "cwd": cwd,
            "command_id": command.group(1) if command else None,
        }
    return rows


def screen_of(result: Any) -> tuple[str, bool]:
    """read_screen's answer: the screen's text and whether the alternate screen is on."""
    assert result.structured_content is None
    first, _, rest = _text(result).partition("\n")
    lines = [line for line in rest.splitlines() if not line.startswith(render.MARK + " ")]
    return "\n".join(lines), "full-screen (alternate) display" in first


@asynccontextmanager
async def mcp_session(tmp_path: Path, *args: str) -> AsyncIterator[Any]:
    """``python -m ahp mcp ARGS`` as a subprocess, with an initialized SDK client session."""
    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "ahp", "mcp", *args],
        env={"PYTHONPATH": str(ROOT), "SHELL": "/bin/bash", "HOME": os.environ["HOME"]},
        cwd=str(tmp_path),
    )
    errlog = os.fdopen(os.open(tmp_path / "mcp-stderr.log", os.O_WRONLY | os.O_CREAT), "w")
    with errlog:
        try:
            with trio.fail_after(TIMEOUT):
                async with (
                    stdio_client(params, errlog=errlog) as (read, write),
                    ClientSession(read, write) as session,
                ):
                    await session.initialize()
                    yield session
        finally:
            errlog.flush()
            log = (tmp_path / "mcp-stderr.log").read_text()
            assert "Traceback" not in log, log


async def test_lists_the_tools(tmp_path: Path) -> None:
    async with mcp_session(tmp_path) as session:
        listed = await session.list_tools()
        by_name = {tool.name: tool for tool in listed.tools}
        assert set(by_name) == {spec.name for spec in tools.TOOLS}
        run = by_name["run_command"]
        assert run.input_schema["required"] == ["command"]
        assert {"terminal", "cwd", "timeout", "yield_after", "head_bytes", "tail_bytes"} <= set(
            run.input_schema["properties"]
        )
        assert run.output_schema is None  # text only: see docs/mcp.md
        assert {"full", "timeout"} <= set(by_name["wait_command"].input_schema["properties"])
        assert "full" in by_name["send_input"].input_schema["properties"]
        assert "waiting_for_input" in run.description
        assert by_name["list_terminals"].annotations.read_only_hint is True
        assert session.initialize_result.instructions


async def test_bad_arguments_are_tool_errors_and_the_server_lives_on(tmp_path: Path) -> None:
    async with mcp_session(tmp_path) as session:
        calls: list[tuple[str, dict[str, Any], str]] = [
            ("run_command", {}, "missing required parameter 'command'"),
            ("run_command", {"command": "ls", "timeout": "soon"}, "'timeout' must be a number"),
            ("run_command", {"command": "ls", "terminal": "../etc"}, "bad terminal name"),
            ("run_command", {"command": "ls", "shell": "zsh"}, "unknown parameter 'shell'"),
            ("send_input", {"terminal": "main", "keys": ["hyper-x"]}, "unknown key 'hyper-x'"),
            ("send_input", {"terminal": "nowhere", "text": "x"}, "no terminal 'nowhere'"),
            ("send_input", {"text": "x"}, "exactly one of command_id or terminal"),
            ("wait_command", {"command_id": "c999"}, "no command 'c999'"),
            ("read_screen", {"terminal": "nowhere"}, "no terminal 'nowhere'"),
            ("close_terminal", {"terminal": "nowhere"}, "no terminal 'nowhere'"),
            ("create_terminal", {"cwd": str(tmp_path / "missing")}, "is not a directory"),
            ("rm_rf", {}, "unknown tool 'rm_rf'"),
        ]
        for name, arguments, message in calls:
            result = await session.call_tool(name, arguments)
            assert result.is_error, (name, arguments)
            assert message in _text(result), (name, _text(result))
        listed = await session.call_tool("list_terminals", {})
        assert not listed.is_error
        assert terminal_rows(listed) == {}


async def test_create_list_type_and_close_terminals(tmp_path: Path) -> None:
    async with mcp_session(tmp_path) as session:
        created = await session.call_tool(
            "create_terminal", {"terminal": "work", "cwd": str(tmp_path)}
        )
        assert not created.is_error, _text(created)
        assert "created terminal 'work'" in _text(created)
        again = await session.call_tool("create_terminal", {"terminal": "work"})
        assert again.is_error and "already exists" in _text(again)
        listed = await session.call_tool("list_terminals", {})
        rows = terminal_rows(listed)
        assert list(rows) == ["work"] and rows["work"]["state"] == "idle"
        assert rows["work"]["cwd"] == str(tmp_path)
        # Without cwd a terminal starts where the server was started; relative cwds too.
        (tmp_path / "sub").mkdir()
        for name, arguments in (("plain", {}), ("rel", {"cwd": "sub"})):
            created = await session.call_tool("create_terminal", {"terminal": name, **arguments})
            assert not created.is_error, _text(created)
        listed = await session.call_tool("list_terminals", {})
        cwds = {name: r["cwd"] for name, r in terminal_rows(listed).items()}
        assert cwds == {"work": str(tmp_path), "plain": str(tmp_path), "rel": str(tmp_path / "sub")}
        for name in ("plain", "rel"):
            assert not (await session.call_tool("close_terminal", {"terminal": name})).is_error
        sent = await session.call_tool(
            "send_input", {"terminal": "work", "text": "echo hi", "keys": ["enter"]}
        )
        assert not sent.is_error and "sent 8 characters" in _text(sent)
        closed = await session.call_tool("close_terminal", {"terminal": "work"})
        assert not closed.is_error
        listed = await session.call_tool("list_terminals", {})
        assert terminal_rows(listed) == {}


async def test_sigterm_with_stdin_open_disposes_terminals_and_exits(tmp_path: Path) -> None:
    """The Trio stdin reader lets a signal stop the server while the client holds stdin."""
    import json

    from tests.helpers import kill_and_reap, stat_fields

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = await trio.lowlevel.open_process(
        [sys.executable, "-m", "ahp", "mcp"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=env,
        cwd=str(tmp_path),
    )
    assert proc.stdin is not None and proc.stdout is not None
    buffer = b""

    async def request(message: dict[str, Any]) -> dict[str, Any] | None:
        nonlocal buffer
        await proc.stdin.send_all(json.dumps(message).encode() + b"\n")  # type: ignore[union-attr]
        if "id" not in message:
            return None
        while True:
            while b"\n" in buffer:
                line, buffer = buffer.split(b"\n", 1)
                answer = json.loads(line)
                if answer.get("id") == message["id"]:
                    return answer  # type: ignore[no-any-return]
            chunk = await proc.stdout.receive_some()  # type: ignore[union-attr]
            assert chunk, "the server closed stdout"
            buffer += chunk

    try:
        with trio.fail_after(TIMEOUT):
            await request(
                {
                    "jsonrpc": "2.0",
                    "id": 1,
                    "method": "initialize",
                    "params": {
                        "protocolVersion": "2025-06-18",
                        "capabilities": {},
                        "clientInfo": {"name": "test", "version": "1"},
                    },
                }
            )
            await request({"jsonrpc": "2.0", "method": "notifications/initialized"})
            answer = await request(
                {
                    "jsonrpc": "2.0",
                    "id": 2,
                    "method": "tools/call",
                    "params": {"name": "create_terminal", "arguments": {"terminal": "t"}},
                }
            )
            assert answer is not None and not answer["result"]["isError"], answer
            shells = [
                int(pid)
                for pid in os.listdir("/proc")
                if pid.isdigit()
                and (fields := stat_fields(int(pid))) is not None
                and int(fields[1]) == proc.pid
            ]
            assert shells, "the terminal's shell is a child of the server"
            proc.terminate()  # stdin stays open
            assert await proc.wait() == 0
        for pid in shells:
            fields = stat_fields(pid)
            assert fields is None or fields[0] == "Z", f"shell {pid} outlived the server"
    finally:
        await kill_and_reap(proc)
        await proc.stdin.aclose()


async def test_serve_lets_a_watcher_attach_over_ahp(tmp_path: Path) -> None:
    """``--serve``: a person's client sees, live, what the agent types in its terminal."""
    from ahp.client import connect

    sock = tmp_path / "ahp.sock"
    async with mcp_session(tmp_path, "--serve", "--unix", str(sock), "--token", "tkn-1") as session:
        # The listener is up before the MCP handshake completes.
        created = await session.call_tool("create_terminal", {"terminal": "main"})
        assert not created.is_error, _text(created)
        async with connect(f"ws+unix://{sock}:/?tkn=tkn-1", auto_reconnect=False) as watcher:
            uri = "ahp-terminal:/main"
            assert uri in {t.resource for t in watcher.root.terminals or ()}
            await watcher.subscribe(uri)
            sent = await session.call_tool(
                "send_input", {"terminal": "main", "text": "echo agent-$((6*7))", "keys": ["enter"]}
            )
            assert not sent.is_error, _text(sent)
            await watcher.wait_for(
                lambda: "agent-42" in watcher.terminal_state(uri).text(), timeout=TIMEOUT
            )


async def test_connect_drives_an_existing_sidecar(tmp_path: Path) -> None:
    """``--connect URL``: the tools act on a running sidecar's terminals (none hosted)."""
    from ahp.engine import open_host
    from ahp.server import ServeOptions, serve_host
    from tests.helpers import wait_for_text

    sock = tmp_path / "side.sock"
    async with open_host() as host, trio.open_nursery() as nursery:
        sidecar = await nursery.start(serve_host, host, ServeOptions(unix=str(sock), token="tkn-2"))
        existing = await host.create_terminal("ahp-terminal:/theirs", cwd=str(tmp_path))
        async with mcp_session(tmp_path, "--connect", sidecar.url) as session:
            listed = await session.call_tool("list_terminals", {})
            assert list(terminal_rows(listed)) == ["theirs"]
            sent = await session.call_tool(
                "send_input", {"terminal": "theirs", "text": "echo remote-$((6*7))\r"}
            )
            assert not sent.is_error, _text(sent)
            await wait_for_text(existing, "remote-42", timeout=TIMEOUT)
            created = await session.call_tool("create_terminal", {"terminal": "mine"})
            assert not created.is_error, _text(created)
            assert "ahp-terminal:/mine" in host
            closed = await session.call_tool("close_terminal", {"terminal": "mine"})
            assert not closed.is_error, _text(closed)
            assert "ahp-terminal:/mine" not in host
        nursery.cancel_scope.cancel()


async def test_startup_errors_are_one_line(tmp_path: Path) -> None:
    """An unreachable --connect, a busy --serve port: one stderr line, nothing on stdout."""
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        for args, message in (
            (["--connect", f"ws+unix://{tmp_path}/none.sock:/"], "ahp-terminals mcp: "),
            (["--serve", "--port", str(port)], "ahp-terminals mcp: Address already in use"),
        ):
            with trio.fail_after(TIMEOUT):
                result = await trio.run_process(
                    [sys.executable, "-m", "ahp", "mcp", *args],
                    env={**os.environ, "PYTHONPATH": str(ROOT)},
                    stdin=subprocess.DEVNULL,
                    capture_stdout=True,
                    capture_stderr=True,
                    check=False,
                )
            assert result.returncode == 1
            assert result.stdout == b""
            (line,) = result.stderr.decode().splitlines()
            assert line.startswith(message), line


async def test_serve_without_a_port_takes_a_free_one_and_says_which(tmp_path: Path) -> None:
    """Two agent sessions started from the same configuration both serve (no fixed port)."""
    import re

    first, second = tmp_path / "a", tmp_path / "b"
    first.mkdir()
    second.mkdir()
    async with mcp_session(first, "--serve") as one, mcp_session(second, "--serve") as two:
        for session in (one, two):
            assert not (await session.call_tool("list_terminals", {})).is_error
        ports = []
        for where in (first, second):
            log = (where / "mcp-stderr.log").read_text()
            served = re.search(
                r"ahp-terminals mcp: terminals served at ws://127\.0\.0\.1:(\d+)/\?tkn=", log
            )
            assert served is not None, log
            ports.append(int(served.group(1)))
            # The hint names this very Python, so it works from a venv not on PATH.
            assert f"ahp-terminals mcp: watch with: {sys.executable} -m ahp attach 'ws://" in log, (
                log
            )
        assert 0 not in ports and ports[0] != ports[1]


async def test_a_missing_sdk_is_one_line_naming_an_install_that_works(tmp_path: Path) -> None:
    """The package is not on an index: the hint installs the extra from the checkout."""
    program = (
        "import sys; sys.modules['mcp'] = None; from ahp.cli import main; "
        "sys.argv = ['ahp', 'mcp']; raise SystemExit(main())"
    )
    with trio.fail_after(TIMEOUT):
        result = await trio.run_process(
            [sys.executable, "-c", program],
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            stdin=subprocess.DEVNULL,
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
    assert result.returncode == 2 and result.stdout == b""
    (line,) = result.stderr.decode().splitlines()
    assert line == (
        "ahp-terminals mcp: the MCP SDK is not installed: pip install '.[mcp]' in the "
        "ahp-terminals checkout (or pip install mcp)"
    )
    assert "ahp-terminals[mcp]" not in line


def test_the_configuration_in_the_docs_uses_the_console_script() -> None:
    """docs/mcp.md's client configuration: the installed script, no fixed port."""
    import json
    import re

    text = (ROOT / "docs" / "mcp.md").read_text()
    block = re.search(r"```json\n(.*?)```", text, re.DOTALL)
    assert block is not None
    config = json.loads(block.group(1))
    (server,) = config["mcpServers"].values()
    assert server["command"].endswith("ahp-terminals")
    assert server["args"][0] == "mcp" and "--port" not in server["args"]
    assert "python3" not in block.group(1)


# -- the toolbox in-process, on a real host -------------------------------------------------


async def test_terminal_count_is_bounded(tmp_path: Path) -> None:
    from ahp.engine import open_host
    from ahp.mcp.backend import HostBackend
    from ahp.mcp.toolbox import MAX_TERMINALS, Toolbox

    kwdefaults = Toolbox.__init__.__kwdefaults__
    assert kwdefaults is not None
    assert kwdefaults["max_terminals"] == MAX_TERMINALS
    async with open_host() as host:
        box = Toolbox(HostBackend(host), max_terminals=2)
        with trio.fail_after(TIMEOUT):
            for name in ("a", "b"):
                assert not (await box.call("create_terminal", {"terminal": name})).is_error
            refused = await box.call("create_terminal", {"terminal": "c"})
            assert refused.is_error and "already 2 terminals" in refused.text
            assert sorted(host.terminals) == ["ahp-terminal:/a", "ahp-terminal:/b"]
            assert not (await box.call("close_terminal", {"terminal": "a"})).is_error
            assert not (await box.call("create_terminal", {})).is_error  # a fresh name
            assert sorted(host.terminals) == ["ahp-terminal:/b", "ahp-terminal:/term-1"]


async def test_a_terminal_that_cannot_start_is_a_tool_error() -> None:
    from ahp.engine import open_host
    from ahp.mcp.backend import HostBackend
    from ahp.mcp.toolbox import Toolbox

    async with open_host(shell="/nonexistent/shell") as host:
        box = Toolbox(HostBackend(host))
        with trio.fail_after(TIMEOUT):
            out = await box.call("create_terminal", {"terminal": "x"})
            assert out.is_error and out.text.startswith("cannot create terminal 'x': ")
            out = await box.call("run_command", {"command": "true"})
            assert out.is_error and out.text.startswith("cannot create terminal 'main': ")
        assert not host.terminals


async def test_stdin_lines_release_twice_closes_nothing_else() -> None:
    """A second ``release`` must not close the fd number again: by then another
    file may hold it."""
    r, w = os.pipe()
    lines = StdinLines(r)
    lines.release()
    other_r, other_w = os.pipe()  # likely reuses ``r``'s number
    try:
        lines.release()
        os.fstat(other_r)  # still open
        os.fstat(other_w)
    finally:
        for fd in (other_r, other_w, w):
            os.close(fd)
