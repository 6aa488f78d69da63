"""Hostile arguments and hostile neighbours, through the real MCP server (issue 26).

Each test drives ``python -m ahp mcp`` as a subprocess through the official MCP
client: a number far outside its bounds is clamped to the named bound and the
answer says so (a ``timeout`` of 1e-300 used to leave the default terminal busy
for good); a terminal another client resized to 4096 x 4096 is rendered by
``read_screen`` at a bounded size; a command printing one endless line does not
grow the server's memory with the output. Nothing is timed: the assertions are
about what the answers say and how much memory the server held at its peak.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import trio

from ahp.agent.render import MAX_JOINED_LINE, LineRenderer
from ahp.mcp import tools
from ahp.mcp.toolbox import MAX_SCREEN_COLS, MAX_SCREEN_ROWS
from tests.test_mcp import TIMEOUT, _text, facts, mcp_session, screen_of, terminal_rows


async def _call(session: Any, name: str, **arguments: Any) -> Any:
    result = await session.call_tool(name, arguments)
    assert not result.is_error, f"{name}: {_text(result)}"
    return result


def _note(result: Any) -> str:
    notes = [line for line in _text(result).splitlines() if line.startswith("── note: ")]
    assert len(notes) == 1, _text(result)
    return notes[0]


async def test_a_tiny_timeout_is_raised_and_leaves_no_busy_terminal(tmp_path: Path) -> None:
    async with mcp_session(tmp_path) as session:
        result = await _call(session, "run_command", command="echo tiny-$((6*7))", timeout=1e-300)
        assert _note(result) == (
            f"── note: 'timeout' 1e-300 is below the least allowed: {tools.MIN_TIMEOUT!r} was used"
        )
        data = facts(result)
        assert data["status"] == "finished" and data["output"] == "tiny-42\n", _text(result)
        after = await _call(session, "run_command", command="echo after")
        assert facts(after)["terminal"] == "main"  # not main-2: main is not left busy
        assert terminal_rows(await _call(session, "list_terminals"))["main"]["state"] == "idle"


async def test_negative_and_huge_times_are_clamped(tmp_path: Path) -> None:
    async with mcp_session(tmp_path) as session:
        result = await _call(session, "run_command", command="echo neg", timeout=-5)
        assert "'timeout' -5 is below the least allowed" in _note(result)
        assert facts(result)["status"] == "finished"
        result = await _call(session, "run_command", command="echo big", timeout=1e300)
        assert f"'timeout' 1e+300 is above the most allowed: {tools.MAX_SECONDS!r}" in _note(result)
        assert facts(result)["output"] == "big\n"
        result = await _call(session, "run_command", command="echo y", yield_after=1e300)
        assert "'yield_after' 1e+300 is above the most allowed" in _note(result)
        started = await _call(
            session, "run_command", command="echo up-$((6*7)); sleep 600", yield_after=-1
        )
        assert "'yield_after' -1 is below the least allowed: 0.0 was used" in _note(started)
        command_id = facts(started)["command_id"]
        assert facts(started)["status"] == "running"
        waited = await _call(session, "wait_command", command_id=command_id, timeout=-3)
        assert "'timeout' -3 is below the least allowed: 0.0 was used" in _note(waited)
        assert facts(waited)["status"] == "running"
        sent = await _call(session, "send_input", command_id=command_id, text="x", wait=-1)
        assert "'wait' -1 is below the least allowed" in _note(sent)
        # Kill once the shell has read the line and runs it (under load the kill could
        # otherwise come while the line still sits unread in the pty: its Ctrl-C then
        # discards the line, and no command ever ends).
        output = facts(started)["output"] + facts(waited)["output"]
        with trio.fail_after(TIMEOUT):
            while "up-42" not in output:
                polled = await _call(session, "wait_command", command_id=command_id, timeout=1)
                output += facts(polled)["output"]
        killed = await _call(session, "kill_command", command_id=command_id)
        assert facts(killed)["status"] == "killed"


async def test_not_a_number_is_refused_with_its_name(tmp_path: Path) -> None:
    async with mcp_session(tmp_path) as session:
        for value, message in (("soon", "must be a number, got a string"), (True, "a boolean")):
            result = await session.call_tool("run_command", {"command": "ls", "timeout": value})
            assert result.is_error and message in _text(result), _text(result)
        result = await session.call_tool("run_command", {"command": "ls", "head_bytes": 2.5})
        assert result.is_error and "'head_bytes' must be a whole number" in _text(result)


async def test_sizes_are_clamped(tmp_path: Path) -> None:
    async with mcp_session(tmp_path) as session:
        result = await _call(
            session, "run_command", command="seq 1 30000", head_bytes=-1, tail_bytes=10**15
        )
        notes = [line for line in _text(result).splitlines() if line.startswith("── note: ")]
        assert notes == [
            "── note: 'head_bytes' -1 is below the least allowed: 0 was used",
            f"── note: 'tail_bytes' {10**15} is above the most allowed: "
            f"{tools.MAX_BUDGET_BYTES} was used",
        ]
        assert facts(result)["output"].endswith("29999\n30000\n")
        created = await _call(session, "create_terminal", terminal="wide", cols=10**9, rows=-4)
        assert "'cols' 1000000000 is above the most allowed: 500 was used" in _text(created)
        assert "'rows' -4 is below the least allowed: 5 was used" in _text(created)


async def test_read_screen_is_bounded_whatever_size_another_client_set(tmp_path: Path) -> None:
    from ahp.client import connect

    sock = tmp_path / "ahp.sock"
    async with mcp_session(tmp_path, "--serve", "--unix", str(sock), "--token", "t") as session:
        await _call(session, "run_command", command="printf 'big-%s\\n' screen")
        async with connect(f"ws+unix://{sock}:/?tkn=t", auto_reconnect=False) as other:
            uri = "ahp-terminal:/main"
            await other.subscribe(uri)
            await other.terminal(uri).resize(4096, 4096)
            await other.wait_for(lambda: other.terminal_state(uri).cols == 4096, timeout=TIMEOUT)
        screen = await _call(session, "read_screen", terminal="main")
        text, _ = screen_of(screen)
        assert "big-screen" in text
        assert len(text.splitlines()) <= MAX_SCREEN_ROWS
        assert max(map(len, text.splitlines())) <= MAX_SCREEN_COLS
        assert (
            f"the terminal is 4096x4096 (set by another client), more than read_screen renders: "
            f"shown at {MAX_SCREEN_COLS}x{MAX_SCREEN_ROWS}"
        ) in _text(screen)
        # The server is not stuck: a command still runs in that terminal.
        after = await _call(session, "run_command", command="echo alive", terminal="main")
        assert facts(after)["output"] == "alive\n"


def _server_pid(cwd: Path) -> int:
    """The ``python -m ahp mcp`` child of this process started in ``cwd``."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rpartition(")")[2].split()[1])
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
            where = os.readlink(f"/proc/{entry}/cwd")
        except OSError:
            continue
        if ppid == os.getpid() and b"mcp" in cmdline and where == str(cwd):
            return int(entry)
    raise AssertionError("no MCP server process found")


def _peak_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError("no VmHWM")


#: Output of the memory test: one line with no newline (the case that was held whole).
ENDLESS_LINE_BYTES = 20_000_000
#: What the server may grow by at its peak for it (it grew by ~3.9 bytes per byte).
PEAK_GROWTH_KIB = 40_000


async def test_memory_is_bounded_while_a_command_prints_an_endless_line(tmp_path: Path) -> None:
    async with mcp_session(tmp_path) as session:
        await _call(session, "run_command", command="seq 1 100000 | tail -1")  # warm
        pid = _server_pid(tmp_path)
        before = _peak_kib(pid)
        result = await _call(
            session,
            "run_command",
            command=f"head -c {ENDLESS_LINE_BYTES} /dev/zero | tr '\\0' x; echo",
            yield_after=TIMEOUT,
        )
        data = facts(result)
        assert data["status"] == "finished" and data["truncated"], _text(result)
        assert data["omitted_bytes"] > ENDLESS_LINE_BYTES - 2 * tools.DEFAULT_TAIL_BYTES
        grown = _peak_kib(pid) - before
        assert grown < PEAK_GROWTH_KIB, f"the server's peak grew by {grown} KiB"


def test_an_endless_line_goes_on_in_pieces() -> None:
    """The renderer's own bound (pure): the scrolled-out part of one logical line is
    handed on in pieces of MAX_JOINED_LINE characters, the rest stays small."""
    lines: list[str] = []
    renderer = LineRenderer(lines.append, cols=80, rows=24)
    chunk = "y" * 65_536
    for _ in range(3 * MAX_JOINED_LINE // len(chunk) + 1):
        renderer.feed(chunk)
    assert lines and all(len(line) == MAX_JOINED_LINE for line in lines)
    assert len(lines) == 3
    rest = "".join(renderer.lines())
    assert len(rest) < MAX_JOINED_LINE
    assert sum(map(len, lines)) + len(rest) == (3 * MAX_JOINED_LINE // len(chunk) + 1) * len(chunk)


def test_the_window_is_bounded_whatever_size_is_asked() -> None:
    from ahp.agent.render import MAX_WINDOW_COLS, MAX_WINDOW_ROWS

    renderer = LineRenderer(lambda _line: None, cols=4096, rows=4096)
    assert (renderer.cols, renderer.rows) == (MAX_WINDOW_COLS, MAX_WINDOW_ROWS)
    renderer.feed("\r\n".join("z" * 1200 for _ in range(700)))
    assert len(renderer.lines()) <= MAX_WINDOW_ROWS


async def test_cols_and_rows_of_an_answered_screen_within_bounds_are_kept(
    tmp_path: Path,
) -> None:
    """At or below the bound the terminal's own screen is shown, with no note."""
    async with mcp_session(tmp_path) as session:
        await _call(
            session, "create_terminal", terminal="edge", cols=MAX_SCREEN_COLS, rows=MAX_SCREEN_ROWS
        )
        await _call(session, "run_command", command="echo edge-ok", terminal="edge")
        screen = await _call(session, "read_screen", terminal="edge")
        assert "edge-ok" in screen_of(screen)[0]
        assert "more than read_screen renders" not in _text(screen)
        with trio.fail_after(TIMEOUT):
            await _call(session, "close_terminal", terminal="edge")
