"""The embedding API: ``open_host``, ``Terminal.run`` and friends, on real shells."""

from __future__ import annotations

import pytest
import trio

import ahp
from ahp.agent.render import strip_escapes
from ahp.client import connect
from ahp.protocol import (
    ActionEnvelope,
    ClientClaim,
    SessionClaim,
    TerminalClaimed,
    TerminalState,
)
from ahp.server import ServeOptions
from tests.helpers import TIMEOUT

SHELLS = ["/bin/bash", "/bin/sh"]  # with command detection, and the marker fallback


@pytest.mark.parametrize("shell", SHELLS)
async def test_run_collects_output_and_exit_code(shell: str) -> None:
    async with ahp.open_host() as host:
        term = await host.create_terminal(shell=shell)
        with trio.fail_after(TIMEOUT):
            result = await term.run("echo hello; echo oops >&2; false")
            assert result.output == "hello\noops\n"
            assert result.raw_output == "hello\r\noops\r\n"
            assert result.exit_code == 1
            assert not result.truncated and not result.timed_out
            assert result.duration_ms >= 0
            again = await term.run("printf 'a\\033[31mred\\033[0m\\n'; (exit 7)")
        assert again.output == "ared\n"
        assert "\x1b[31m" in again.raw_output
        assert again.exit_code == 7
        assert again.command_line.startswith("printf")


@pytest.mark.parametrize("shell", SHELLS)
async def test_run_timeout_interrupts(shell: str) -> None:
    async with ahp.open_host() as host:
        term = await host.create_terminal(shell=shell)
        with trio.fail_after(TIMEOUT):
            result = await term.run("echo started; sleep 30", timeout=1)
            assert result.timed_out
            assert "started" in result.output
            # The shell is usable again: the sleep was interrupted.
            after = await term.run("echo next")
        assert after.output == "next\n" and after.exit_code == 0


@pytest.mark.parametrize("shell", SHELLS)
async def test_cancelling_run_interrupts_the_command(shell: str) -> None:
    async with ahp.open_host() as host:
        term = await host.create_terminal(shell=shell)
        with trio.move_on_after(1):
            await term.run("sleep 30")
        with trio.fail_after(TIMEOUT):
            result = await term.run("echo alive")
        assert result.output == "alive\n"


@pytest.mark.parametrize("shell", SHELLS)
async def test_output_limit_keeps_the_most_recent_bytes(shell: str) -> None:
    async with ahp.open_host() as host:
        term = await host.create_terminal(shell=shell)
        with trio.fail_after(TIMEOUT):
            result = await term.run("seq 1 50000", max_output_bytes=1000)
        assert result.truncated
        assert len(result.raw_output.encode()) <= 1000
        assert result.output.endswith("49999\n50000\n")
        assert result.exit_code == 0


async def test_run_marks_the_terminal_with_a_session_claim() -> None:
    claim = SessionClaim(session="agent:/s1", turnId="turn-1", toolCallId="call-9")
    async with ahp.open_host() as host:
        term = await host.create_terminal(shell="/bin/bash", claim=ClientClaim("editor"))
        seen: list[object] = []
        with trio.fail_after(TIMEOUT):
            async with term.subscribe() as sub:
                result = await term.run("echo tool", claim=claim)
                async for item in sub:
                    if isinstance(item, ActionEnvelope) and isinstance(
                        item.action, TerminalClaimed
                    ):
                        seen.append(item.action.claim)
                        if len(seen) == 2:
                            break
        assert result.output == "tool\n"
        assert seen == [claim, ClientClaim("editor")]
        assert term.state.claim == ClientClaim("editor")


async def test_host_serves_while_an_agent_runs_commands() -> None:
    async with ahp.open_host() as host, trio.open_nursery() as nursery:
        sidecar = await nursery.start(ahp.serve_host, host, ServeOptions(port=0))
        term = await host.create_terminal("ahp-terminal:/agent", shell="/bin/bash")
        with trio.fail_after(TIMEOUT):
            async with connect(sidecar.url) as editor:
                await editor.subscribe(term.uri)
                result = await term.run("echo from-agent")
                await editor.wait_for(
                    lambda: "from-agent" in editor.terminal_state(term.uri).text()
                )
                # The editor types into the same terminal; the agent sees it.
                await editor.send_input(term.uri, "echo from-editor\r")
                await editor.wait_for(
                    lambda: "from-editor\r\n" in term.state.text().replace("echo from-editor", "")
                )
        assert result.exit_code == 0
        assert [t.resource for t in host.list_terminals()] == ["ahp-terminal:/agent"]
        nursery.cancel_scope.cancel()


async def test_public_api_surface() -> None:
    for name in ahp.__all__:
        assert hasattr(ahp, name), name
    async with ahp.open_host() as host:
        term = await host.create_terminal(argv=["cat"])
        await term.send_input("abc\r")
        await term.resize(100, 40)
        await term.interrupt()
        with trio.fail_after(TIMEOUT):  # (a wait that can end: an ignored SIGINT hung here)
            assert await term.wait_exited() is None
        state = term.snapshot().state
        assert isinstance(state, TerminalState) and state.cols == 100
        await host.dispose(term.uri)
        assert host.list_terminals() == ()


def test_strip_escapes() -> None:
    assert strip_escapes("\x1b]0;t\x07a\x1b[1;31mb\x1b[0m\r\nc\x1b(B\x07") == "ab\nc"
