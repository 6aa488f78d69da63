"""Agent-grade commands on real programs and real ptys, in-process and remote.

Each scenario runs twice: against an in-process :class:`ahp.engine.Terminal` and
against a :class:`ahp.client.RemoteTerminal` of a real server on port 0. The
server answers the client's ``x-ahp-terminals/*`` requests with its ``/proc``
evidence, so both see the same (waiting for input without a prompt, background
processes, SIGKILL); ``tests/test_remote_processes.py`` covers the extension
itself and the heuristics against a server without it.
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio

import ahp
from ahp.agent import (
    MAX_COMMANDS_KEPT,
    CommandHandle,
    TerminalExitedError,
    as_completed,
    wait_any,
)
from ahp.agent.budget import omission_marker
from ahp.client import connect
from ahp.server import ServeOptions
from tests.helpers import TIMEOUT, stat_fields
from tests.wire import TOKEN, running_server

MODES = ("local", "remote")


@asynccontextmanager
async def terminal(mode: str, shell: str = "/bin/bash", **kwargs: Any) -> AsyncIterator[Any]:
    """A bash (or ``shell``) terminal, in-process or through a real server and client."""
    if mode == "local":
        async with ahp.open_host() as host:
            yield await host.create_terminal(shell=shell, **kwargs)
        return
    async with running_server(shell=shell) as server, connect(server.url) as client:
        uri = "ahp-terminal:/agent"
        await client.create_terminal(uri, cwd=kwargs.get("cwd"))
        term = client.terminal(uri)
        # Let the shell announce command detection (without it, run falls back to markers).
        with trio.move_on_after(TIMEOUT):
            await client.wait_for(lambda: term.state.supportsCommandDetection is not None)
        yield term


@pytest.mark.parametrize("mode", MODES)
async def test_progress_bar_renders_as_its_last_state(mode: str) -> None:
    cmd = (
        "for i in 10 50 100; do printf '\\r[%-10s] %3d%%' $(printf '#%.0s' $(seq $((i/10)))) $i;"
        " done; echo; echo done"
    )
    async with terminal(mode) as term:
        with trio.fail_after(TIMEOUT):
            result = await term.run(cmd)
    assert result.status == "finished" and result.exit_code == 0
    assert result.output == "[##########] 100%\ndone\n"
    assert "\r" in result.raw_output and "10%" in result.raw_output


@pytest.mark.parametrize("mode", MODES)
async def test_cursor_moves_are_applied(mode: str) -> None:
    # Three lines, then up two lines, right three columns, overwrite; colours dropped.
    cmd = "printf 'aaaaaa\\nbbbbbb\\ncccccc\\n\\033[2A\\033[3C\\033[31mXY\\033[0m\\n\\n'"
    async with terminal(mode) as term:
        with trio.fail_after(TIMEOUT):
            result = await term.run(cmd)
    assert result.output == "aaaaaa\nbbbXYb\ncccccc\n"
    assert "\x1b[2A" in result.raw_output


@pytest.mark.parametrize("mode", MODES)
async def test_alternate_screen_is_flagged_and_left_out(mode: str) -> None:
    cmd = "echo before; tput smcup; echo full-$((6*7))-screen; tput rmcup; echo after"
    async with terminal(mode) as term:
        with trio.fail_after(TIMEOUT):
            result = await term.run(cmd)
            plain = await term.run("echo plain")
            screen = term.screen()
    assert result.alternate_screen and not plain.alternate_screen
    assert result.output == "before\nafter\n"
    assert "full-42-screen" in result.raw_output
    assert not screen.alternate_screen
    assert "plain" in screen.text() and "full-42-screen" not in screen.text()


@pytest.mark.parametrize("mode", MODES)
async def test_screen_shows_a_full_screen_program(mode: str) -> None:
    async with terminal(mode) as term:
        with trio.fail_after(TIMEOUT):
            handle = await term.start("printf 'line one\\nline two\\n' | less")
            # less reads keys from the terminal: waiting for input (remotely: its ':' prompt).
            result = await handle.wait()
            assert result.status == "waiting_for_input"
            screen = term.screen()
            assert screen.alternate_screen
            assert "line one\nline two\n" in screen.text()
            await handle.send_input("q")
            final = await handle.wait()
    assert final.status == "finished" and final.alternate_screen
    assert term.screen().alternate_screen is False


@pytest.mark.parametrize("mode", MODES)
async def test_input_prompt_is_detected_and_answered(mode: str) -> None:
    async with terminal(mode) as term:
        with trio.fail_after(TIMEOUT):
            result = await term.run('python3 -c \'print("hello", input("name? "))\'')
            assert result.status == "waiting_for_input" and result.waiting_for_input
            assert result.output == "name?\n" and result.exit_code is None
            handle = result.handle
            assert isinstance(handle, CommandHandle) and not handle.done
            evidence = handle.input_evidence
            assert evidence is not None and evidence.source == "procfs" and evidence.echo
            assert evidence.readers
            await handle.send_input("agent\r")
            final = await handle.wait()
    assert final.status == "finished" and final.exit_code == 0
    assert final.output.endswith("hello agent\n")
    assert final.handle is None and handle.done


@pytest.mark.parametrize("mode", MODES)
async def test_silent_password_read(mode: str) -> None:
    async with terminal(mode) as term:
        with trio.fail_after(TIMEOUT):
            result = await term.run("read -s -p 'Password: ' pw; echo; echo got ${#pw} chars")
            assert result.status == "waiting_for_input"
            assert result.handle is not None
            evidence = result.handle.input_evidence
            assert evidence is not None and evidence.echo is False
            assert evidence.source == "procfs"
            await result.handle.send_input("s3cret\r")
            final = await result.handle.wait()
    assert final.status == "finished"
    assert "got 6 chars" in final.output and "s3cret" not in final.output


@pytest.mark.parametrize("mode", MODES)
async def test_silent_read_without_prompt(mode: str) -> None:
    """No prompt at all: /proc still shows the blocked read (remotely: the server's)."""
    async with terminal(mode) as term:
        with trio.fail_after(TIMEOUT):
            result = await term.run("python3 -c 'input()'")
            assert result.status == "waiting_for_input" and result.output == ""
            assert result.handle is not None
            evidence = result.handle.input_evidence
            assert evidence is not None and evidence.source == "procfs" and evidence.echo
            await result.handle.send_input("\r")
            assert (await result.handle.wait()).status == "finished"


@pytest.mark.parametrize("mode", MODES)
async def test_silent_password_read_without_prompt(mode: str) -> None:
    async with terminal(mode) as term:
        with trio.fail_after(TIMEOUT):
            result = await term.run("read -s pw; echo got ${#pw}")
            assert result.status == "waiting_for_input" and result.handle is not None
            evidence = result.handle.input_evidence
            assert evidence is not None and evidence.echo is False
            await result.handle.send_input("abc\r")
            final = await result.handle.wait()
    assert final.status == "finished" and final.output.endswith("got 3\n")


@pytest.mark.parametrize("mode", MODES)
async def test_command_outliving_yield_after(mode: str) -> None:
    cmd = "for i in 1 2 3 4 5 6; do echo tick $i; sleep 0.3; done; exit 3"
    async with terminal(mode) as term:
        with trio.fail_after(TIMEOUT):
            result = await term.run(f"({cmd})", yield_after=0.2)
            assert result.status == "running" and result.handle is not None
            handle = result.handle
            seen = handle.read_new()
            while "tick 6" not in seen and not handle.done:
                await handle.wait_output()
                seen += handle.read_new()
            final = await handle.wait()
    assert final.status == "finished" and final.exit_code == 3
    assert seen.count("tick 1\n") == 1 and "tick 6\n" in seen
    assert final.output == "".join(f"tick {i}\n" for i in range(1, 7))
    assert handle.output() == final.output


@pytest.mark.parametrize("mode", MODES)
async def test_wait_timeout_interrupt_and_kill(mode: str) -> None:
    async with terminal(mode) as term:
        with trio.fail_after(TIMEOUT):
            handle = await term.start("echo started; sleep 100")
            partial = await handle.wait(timeout=0.5)
            assert partial.status == "running" and partial.handle is handle
            await handle.interrupt()
            interrupted = await handle.wait()
            assert interrupted.status == "interrupted" and interrupted.exit_code == 130
            # A job that ignores Ctrl-C; kill takes its whole process group (remotely:
            # the server does, asked through the x-ahp-terminals/signal request).
            handle = await term.start(
                "bash -c \"trap '' INT; (sleep 100; echo never) & sleep 100; wait\""
            )
            await handle.wait(timeout=0.5)
            await handle.kill()
            killed = await handle.wait()
    assert killed.status == "killed"
    assert killed.exit_code == 137
    assert "never" not in killed.output and killed.background == ()


@pytest.mark.parametrize("mode", MODES)
async def test_hard_timeout(mode: str) -> None:
    async with terminal(mode) as term:
        with trio.fail_after(TIMEOUT):
            result = await term.run("echo slow; sleep 30", timeout=3)
            after = await term.run("echo next")
    assert result.status == "timed_out" and result.timed_out
    assert result.output in ("slow\n", "slow\n^C\n")  # the terminal echoes ^C
    assert after.output == "next\n"


@pytest.mark.parametrize("mode", MODES)
async def test_hard_timeout_kills_a_command_that_ignores_ctrl_c(mode: str) -> None:
    """``timeout`` is a hard limit: a command that ignores the Ctrl-C is killed
    ``INTERRUPT_GRACE`` later and reported ``timed_out`` (it was returned ``running``,
    with no note, and went on holding the terminal)."""
    async with terminal(mode) as term:
        with trio.fail_after(TIMEOUT):
            result = await term.run("trap '' INT; sleep 60", timeout=1)
            after = await term.run("echo next")
    assert result.status == "timed_out" and result.timed_out and result.done
    assert result.exit_code == 137 and result.handle is None
    assert result.note == "it ignored Ctrl-C for 5 s: killed (SIGKILL)"
    assert after.status == "finished" and after.output == "next\n"


@pytest.mark.parametrize("mode", MODES)
async def test_exec_of_a_shell_ends_the_command_and_markers_take_over(mode: str) -> None:
    """``exec bash --norc`` replaces the terminal's shell by one without command
    detection: its end never comes. It ran until its timeout, was returned
    ``running`` for good (Ctrl-C and kill reach no job: its process is the shell's)
    and every later command was refused as busy with it. It is now over once that
    shell is seen at its own prompt, and later commands are delimited with markers."""
    async with terminal(mode) as term:
        with trio.fail_after(TIMEOUT):
            replaced = await term.run("exec bash --norc", timeout=4 * TIMEOUT)
            after = await term.run("echo next")
            failing = await term.run("(exit 3)")
    assert replaced.status == "finished" and replaced.exit_code is None
    assert replaced.note.startswith("command detection was lost: the terminal's shell was ")
    assert "'bash' (exec)" in replaced.note
    assert (after.status, after.output, after.exit_code) == ("finished", "next\n", 0)
    assert failing.exit_code == 3


async def test_another_client_is_not_refused_by_the_replaced_shell() -> None:
    """A client that did not see the ``exec`` finds the shell's command part left
    open in the state; it was refused as busy with ``exec bash --norc`` for ever."""
    async with running_server(shell="/bin/bash") as server:
        uri = "ahp-terminal:/agent"
        async with connect(server.url) as first:
            await first.create_terminal(uri)
            term = first.terminal(uri)
            with trio.fail_after(TIMEOUT):
                await first.wait_for(lambda: term.state.supportsCommandDetection is not None)
                replaced = await term.run("exec bash --norc")
        assert replaced.status == "finished"
        async with connect(server.url) as second:
            await second.subscribe(uri)
            with trio.fail_after(TIMEOUT):
                other = await second.terminal(uri).run("echo other")
    assert (other.status, other.output, other.exit_code) == ("finished", "other\n", 0)


@pytest.mark.parametrize("mode", MODES)
async def test_kill_ends_a_program_exec_put_in_the_shells_place(mode: str) -> None:
    """``exec python3`` puts the REPL in the shell's process: it waits for input, and
    ``kill()`` ends it, the terminal's process with it (it sent Ctrl-C only, which the
    REPL takes as KeyboardInterrupt: nothing could end the command)."""
    async with terminal(mode) as term:
        with trio.fail_after(TIMEOUT):
            repl = await term.run(f"exec {sys.executable} -q")
            assert repl.status == "waiting_for_input" and repl.handle is not None
            evidence = repl.handle.input_evidence
            assert evidence is not None and evidence.replaced_shell
            await repl.handle.kill()
            killed = await repl.handle.wait()
    assert "in the place of the terminal's shell (exec)" in repl.note
    assert killed.status == "killed" and killed.shell_exited
    assert killed.note.endswith(
        "had replaced the terminal's shell (exec): killing it ended the terminal's process"
    )


@pytest.mark.parametrize("mode", MODES)
async def test_a_nested_shell_waits_at_its_prompt_and_kill_leaves_it(mode: str) -> None:
    """A nested interactive shell waits for input at its own prompt: the note says it
    is a shell, that Ctrl-C does not leave it and what does."""
    async with terminal(mode) as term:
        with trio.fail_after(TIMEOUT):
            nested = await term.run("bash --norc")
            assert nested.status == "waiting_for_input" and nested.handle is not None
            evidence = nested.handle.input_evidence
            assert evidence is not None and evidence.nested_shell
            await nested.handle.kill()
            killed = await nested.handle.wait()
            after = await term.run("echo next")
    assert nested.note.startswith("bash waits at its own prompt (a nested shell: Ctrl-C")
    assert 'send_input("exit\\r")' in nested.note and "kill()" in nested.note
    assert killed.status == "killed" and killed.exit_code == 137
    assert after.output == "next\n"


@pytest.mark.parametrize("mode", MODES)
async def test_background_process_left_behind(mode: str) -> None:
    async with terminal(mode) as term:
        with trio.fail_after(TIMEOUT):
            result = await term.run("sleep 1000 & echo started")
            later = await term.run("echo unrelated")
    assert result.status == "finished" and result.output.endswith("started\n")
    assert later.background == ()  # only what a command itself started
    assert len(result.background) == 1
    leftover = result.background[0]
    assert leftover.command_line == "sleep 1000"
    # The process was real and is gone with the terminal (or a zombie awaiting init):
    # killed (SIGSTOP, then SIGKILL) as the terminal was disposed; on a loaded machine it
    # may still show stopped for a moment before the kill lands.
    with trio.move_on_after(TIMEOUT):
        while (fields := stat_fields(leftover.pid)) is not None and fields[0] not in "ZX":  # noqa: ASYNC110 (/proc can only be polled)
            await trio.sleep(0.05)
    assert fields is None or fields[0] in "ZX", fields


@pytest.mark.parametrize("mode", MODES)
async def test_shell_exit_is_not_a_finished_command(mode: str) -> None:
    """Defect 5 of issue 20: the shell's own exit code is the result's (it was lost)."""
    async with terminal(mode) as term:
        with trio.fail_after(TIMEOUT):
            result = await term.run("echo bye; exit 5")
    assert result.status == "shell_exited" and result.shell_exited and result.done
    assert result.exit_code == 5 and result.handle is None


@pytest.mark.parametrize("mode", MODES)
async def test_a_run_in_a_terminal_whose_shell_exited_raises(mode: str) -> None:
    """Probe L: an undocumented ``RuntimeError``; now a class of its own (still one)."""
    async with terminal(mode) as term:
        with trio.fail_after(TIMEOUT):
            result = await term.run("exit 5")
            assert result.status == "shell_exited"
            with pytest.raises(TerminalExitedError, match="process has exited") as raised:
                await term.run("echo next")
    assert isinstance(raised.value, RuntimeError)


#: Shells that exit at start-up, at once or after a while (a script: no command
#: detection, so a remote run waits for its announcement, and the exit came then).
_DYING_SHELLS = {
    "false": "exit 1",
    "after-0.3s": "sleep 0.3; exit 3",
    "after-1s": "sleep 1; exit 3",
}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dies", list(_DYING_SHELLS))
async def test_a_run_into_a_shell_that_exits_at_start_up_ends_with_its_exit(
    mode: str, dies: str, tmp_path: Path
) -> None:
    """Probe M (finding 2): a remote run hung for good when the terminal's shell exited
    while the command was being started (the exit, seen during the wait for command
    detection, was consumed there, and the collector waited for it); in-process the
    shell's exit code was reported as the command's. Now: ``TerminalExitedError``
    before the typing, or ``shell_exited`` without an exit code after it, saying the
    command did not run. Several tries: the exit lands in different waits."""
    shell = tmp_path / "dying-shell"
    shell.write_text(f"#!/bin/sh\n{_DYING_SHELLS[dies]}\n")
    shell.chmod(0o755)
    async with AsyncExitStack() as stack:
        if mode == "local":
            host = await stack.enter_async_context(ahp.open_host(shell=str(shell)))
        else:
            server = await stack.enter_async_context(running_server(shell=str(shell)))
            client = await stack.enter_async_context(connect(server.url))
        for attempt in range(3):
            if mode == "local":
                term: Any = await host.create_terminal()
            else:
                uri = f"ahp-terminal:/dying-{attempt}"
                await client.create_terminal(uri)
                term = client.terminal(uri)
            with trio.fail_after(TIMEOUT):
                try:
                    result = await term.run("echo hi")
                except TerminalExitedError:
                    continue
            assert result.status == "shell_exited", result
            assert result.exit_code is None and result.note.startswith("not run"), result
            assert "hi" not in result.output


@pytest.mark.parametrize("mode", MODES)
async def test_duration_is_wall_time_from_the_typing_to_the_result(mode: str) -> None:
    """Probe L: ``duration_ms`` was the shell's own measure (its start mark to its end
    mark), 0 ms for ``( sleep 0.5; … ) &`` whose run took over 0.5 s (the job it left
    keeps the shell's command line while it runs, and is waited for to ``exec``)."""
    async with terminal(mode) as term:
        with trio.fail_after(TIMEOUT):
            await term.run("true")
            started = trio.current_time()
            result = await term.run("(sleep 0.5; echo late) &")
            took = trio.current_time() - started
    assert result.status == "finished", result
    assert 500 <= result.duration_ms <= took * 1000 + 1, (result.duration_ms, took)


@pytest.mark.parametrize("mode", MODES)
async def test_shell_exit_while_its_background_job_keeps_printing(mode: str) -> None:
    """The shell exits while a job it started prints every 50 ms: the pty was never
    quiet for EXIT_LINGER, so the exit was never reported and the command never ended
    (or, with a timeout, was 'killed' for ignoring a Ctrl-C nobody could get)."""
    async with terminal(mode) as term:
        with trio.fail_after(TIMEOUT):
            result = await term.run("(while echo tick; do sleep 0.05; done &); sleep 0.3; exit 4")
    assert result.status == "shell_exited" and result.exit_code == 4, result
    assert "tick" in result.output


@pytest.mark.parametrize("mode", MODES)
async def test_commands_started_at_once_in_one_terminal_run_one_at_a_time(mode: str) -> None:
    """Three ``run`` calls at once on one terminal were all typed (each passed the busy
    check before any was registered) and all came back ``finished`` with one output:
    the first to start runs, the others are refused as a busy terminal's are."""
    results: list[ahp.CommandResult] = []
    async with terminal(mode) as term:
        with trio.fail_after(TIMEOUT):
            await term.run("true")

            async def run(n: int) -> None:
                results.append(await term.run(f"sleep 0.5; echo ran-{n}"))

            async with trio.open_nursery() as nursery:
                for n in range(3):
                    nursery.start_soon(run, n)
            text = term.state.text()
    statuses = sorted(r.status for r in results)
    assert statuses == ["finished", "refused", "refused"], results
    ran = next(r for r in results if r.status == "finished")
    assert ran.output.startswith("ran-") and ran.output.count("ran-") == 1, ran
    assert text.count("echo ran-") <= 1, text


@pytest.mark.parametrize("mode", MODES)
async def test_output_over_the_budget(mode: str) -> None:
    async with terminal(mode) as term:
        with trio.fail_after(TIMEOUT):
            result = await term.run("seq 1 20000", head_bytes=30, tail_bytes=40)
            handle = await term.start("seq 1 20000")
            await handle.wait()
    lines = [f"{i}\n" for i in range(1, 20001)]
    head = "".join(lines[:13])  # 1..9: 18 bytes, 10..13: 12 bytes
    # 6 bytes each: 36 <= 40, and the end of the line before, as much as fits (shown in
    # part: not counted omitted).
    tail = "994\n" + "".join(lines[-6:])
    total = sum(len(x) for x in lines)
    omitted = total - len(head) - len(tail)
    assert result.truncated
    assert (result.omitted_bytes, result.omitted_lines) == (omitted, 20000 - 13 - 7)
    assert result.output == head + omission_marker(omitted, 20000 - 20) + "\n" + tail
    # The whole output stays readable through the handle.
    assert handle.output() == "".join(lines)


@pytest.mark.parametrize("mode", MODES)
async def test_pagers_and_prompts_never_hang(mode: str, tmp_path: Any) -> None:
    repo = tmp_path / "repo"
    async with terminal(mode, cwd=str(tmp_path)) as term:
        with trio.fail_after(TIMEOUT):
            setup = await term.run(
                f"git init -q {repo} && cd {repo} && for i in $(seq 60); do "
                "git -c user.name=a -c user.email=a@b commit -q --allow-empty -m msg$i; done"
            )
            assert setup.exit_code == 0, setup.output
            log = await term.run("git log --oneline")
            clone = await term.run("git clone -q https://127.0.0.1:1/none.git x")
    assert log.status == "finished" and log.output.count("msg") == 60
    assert not log.alternate_screen
    assert clone.status == "finished" and clone.exit_code != 0


async def test_interactive_terminals_keep_the_environment() -> None:
    async with ahp.open_host() as host:
        agent = await host.create_terminal(shell="/bin/bash")
        person = await host.create_terminal(shell="/bin/bash", interactive=True)
        with trio.fail_after(TIMEOUT):
            a = await agent.run("echo ${PAGER-unset} $GIT_TERMINAL_PROMPT $DEBIAN_FRONTEND")
            p = await person.run("echo ${GIT_TERMINAL_PROMPT-unset}")
    assert a.output == "cat 0 noninteractive\n"
    assert p.output == "unset\n"


async def test_several_commands_at_once() -> None:
    async with ahp.open_host() as host:
        terms = [await host.create_terminal(shell="/bin/bash") for _ in range(3)]
        with trio.fail_after(TIMEOUT):
            handles = [
                await t.start(f"sleep {d}; echo done {d}")
                for t, d in zip(terms, ("4", "0.1", "2"), strict=True)
            ]
            first = await wait_any(handles)
            order = [r.output async for r in as_completed(handles)]
    assert first is handles[1]
    assert order == ["done 0.1\n", "done 2\n", "done 4\n"]


async def test_each_wait_for_input_is_reported_once() -> None:
    async with ahp.open_host() as host:
        asker = await host.create_terminal(shell="/bin/bash")
        other = await host.create_terminal(shell="/bin/bash")
        with trio.fail_after(TIMEOUT):
            handle = await asker.start('python3 -c \'input("a? "); input("b? ")\'')
            assert (await handle.wait()).status == "waiting_for_input"
            # The same prompt again: wait() does not return at once; its timeout ends it.
            again = await handle.wait(timeout=0.5)
            assert again.status == "waiting_for_input" and again.output == "a?\n"
            sleeper = await other.start("sleep 0.3; echo slept")
            assert await wait_any([handle, sleeper]) is sleeper
            await handle.send_input("1\r")
            second = await handle.wait()
            assert second.status == "waiting_for_input" and second.output.endswith("b?\n")
            assert await wait_any([handle, sleeper]) is sleeper  # over: settled for good
            await handle.send_input("2\r")
            final = await handle.wait()
    assert final.status == "finished" and final.exit_code == 0


@pytest.mark.parametrize("mode", MODES)
async def test_every_wait_in_flight_returns_for_one_wait_for_input(mode: str) -> None:
    """Two ``wait`` calls at once on one command (parallel tool calls): both return when
    it waits for input. The first to wake acknowledged the episode, and the other went
    back to waiting until its timeout."""
    program = 'python3 -c \'input("a? "); import time; time.sleep(1); input("b? ")\''
    async with terminal(mode) as term:
        with trio.fail_after(TIMEOUT):
            handle = await term.start(program)
            assert (await handle.wait()).status == "waiting_for_input"
            await handle.send_input("1\r")
            results: list[str] = []

            async def wait() -> None:
                results.append((await handle.wait()).status)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(wait)
                nursery.start_soon(wait)
            assert results == ["waiting_for_input", "waiting_for_input"]
            assert handle.output().endswith("b?\n")
            await handle.send_input("2\r")
            final = await handle.wait()
    assert final.status == "finished" and final.exit_code == 0


async def test_handles_end_when_their_terminal_or_client_goes() -> None:
    async with ahp.open_host() as host:
        term = await host.create_terminal(shell="/bin/bash")
        with trio.fail_after(TIMEOUT):
            handle = await term.start("echo working; sleep 100")
            await handle.wait(timeout=0.3)
            await host.dispose(term.uri)
            gone = await handle.wait()
    assert gone.status == "shell_exited" and gone.handle is None
    async with running_server(shell="/bin/bash") as server:
        async with connect(server.url) as client:
            await client.create_terminal("ahp-terminal:/r")
            with trio.fail_after(TIMEOUT):
                remote = await client.terminal("ahp-terminal:/r").start("sleep 100")
                await remote.wait(timeout=0.3)
        # The client closed: the handle no longer follows the command.
        with trio.fail_after(TIMEOUT):
            lost = await remote.wait()
    assert lost.status == "lost" and remote.done


@pytest.mark.parametrize("mode", MODES)
async def test_recent_commands_are_found_by_id(mode: str) -> None:
    async with terminal(mode) as term:
        with trio.fail_after(TIMEOUT):
            results = [await term.run(f"echo n{i}") for i in range(MAX_COMMANDS_KEPT + 2)]
            running = await term.run("sleep 0.5; echo late", yield_after=0)
            assert running.status == "running"
            handle = term.command(running.command_id)
            assert handle is running.handle
            assert (await handle.wait()).output == "late\n"
    # The registry keeps the most recent MAX_COMMANDS_KEPT; the oldest are forgotten.
    kept = [h.id for h in term.commands.all()]
    assert kept[-1] == running.command_id and len(kept) == MAX_COMMANDS_KEPT
    assert term.command(results[-1].command_id).output() == f"n{MAX_COMMANDS_KEPT + 1}\n"
    with pytest.raises(KeyError, match="forgotten"):
        term.command(results[0].command_id)


@pytest.mark.parametrize("shell", ["/bin/bash", "/bin/sh"])
async def test_a_collector_that_falls_behind_still_sees_the_end(
    shell: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Beyond FOLLOW_BYTES the collector gets a snapshot instead of the missed
    envelopes: the output has a gap, but the end (exit code) is found in the state."""
    monkeypatch.setattr("ahp.engine.port.FOLLOW_BYTES", 1024)
    async with ahp.open_host() as host:
        term = await host.create_terminal(shell=shell)
        with trio.fail_after(TIMEOUT):
            result = await term.run("seq 1 200000; (exit 3)")
    assert result.status == "finished" and result.exit_code == 3
    assert result.total_lines < 200000  # the gap


async def test_a_pager_in_an_interactive_terminal_is_caught_waiting() -> None:
    """Without the defaults (interactive=True) a pager waits for keys: the run still
    returns, waiting for input on the alternate screen, and q ends it."""
    async with ahp.open_host() as host:
        term = await host.create_terminal(
            shell="/bin/bash", interactive=True, env={"LESS": "", "PAGER": "less"}
        )
        with trio.fail_after(TIMEOUT):
            shown = await term.run("seq 1 500 | less")
            assert shown.status == "waiting_for_input" and shown.handle is not None
            screen = term.screen()
            assert screen.alternate_screen and screen.lines[0] == "1"
            await shown.handle.send_input("q")
            done = await shown.handle.wait()
    assert done.status == "finished" and done.alternate_screen and done.output == ""


async def test_a_prompt_read_through_select_is_caught_in_process() -> None:
    """Node's readline and friends wait in poll/select, not in read: /proc shows the
    sleep (not on what), and a prompt-like last line completes the evidence."""
    program = (
        "import select, sys; print('Ok to proceed? (y) ', end='', flush=True); "
        "select.select([sys.stdin], [], []); print('got', sys.stdin.readline().strip())"
    )
    async with ahp.open_host() as host:
        term = await host.create_terminal(shell="/bin/bash")
        with trio.fail_after(TIMEOUT):
            result = await term.run(f'python3 -c "{program}"')
            assert result.status == "waiting_for_input" and result.handle is not None
            evidence = result.handle.input_evidence
            assert evidence is not None and evidence.source == "poll"
            await result.handle.send_input("y\r")
            final = await result.handle.wait()
            # Sleeping in select without a prompt is not enough.
            quiet = await term.run("python3 -c 'import select; select.select([], [], [], 2)'")
    assert final.status == "finished" and final.output.endswith("got y\n")
    assert quiet.status == "finished"


@pytest.mark.parametrize("mode", MODES)
async def test_commands_typed_back_to_back_are_echoed_once(mode: str) -> None:
    # Typed before the shell's line editor reads (right after start, or right after
    # the previous command's end), a command is echoed by the kernel and then drawn
    # again by the editor: the terminal's history showed every command twice.
    async with terminal(mode) as term:
        with trio.fail_after(4 * TIMEOUT):
            for i in range(4):
                result = await term.run(f"echo step-$((40+{i}))")
                assert result.exit_code == 0 and result.output == f"step-{40 + i}\n"
        text = term.state.text()
    assert [text.count(f"echo step-$((40+{i}))") for i in range(4)] == [1, 1, 1, 1], text


# -- issue 20: regression tests, in-process and remote -----------------------------------------


@pytest.mark.parametrize("mode", MODES)
async def test_a_password_read_from_dev_tty_is_waiting_for_input(mode: str) -> None:
    """Defect 2: getpass (and so sudo, ssh, gpg) reads /dev/tty, not its stdin; it
    was never seen waiting (``timed_out`` after the whole timeout)."""
    cmd = "python3 -c 'import getpass; print(len(getpass.getpass(\"Passphrase: \")))'"
    async with terminal(mode) as term:
        with trio.fail_after(TIMEOUT):
            result = await term.run(cmd, timeout=4 * TIMEOUT)
            assert result.status == "waiting_for_input", result
            assert result.handle is not None
            evidence = result.handle.input_evidence
            assert evidence is not None and evidence.source == "procfs"
            assert evidence.echo is False and "getpass" in evidence.programs[0]
            assert "echo off" in result.note and "send_input" in result.note
            await result.handle.send_input("s3cret\r")
            final = await result.handle.wait()
    assert final.status == "finished" and final.output.endswith("6\n")
    assert "s3cret" not in final.output


@pytest.mark.parametrize("mode", MODES)
async def test_reads_without_a_prompt_are_waiting_for_input(mode: str) -> None:
    async with terminal(mode) as term:
        with trio.fail_after(TIMEOUT):
            result = await term.run("cat")
            assert result.status == "waiting_for_input" and result.output == ""
            assert result.handle is not None
            evidence = result.handle.input_evidence
            assert evidence is not None and evidence.source == "procfs"
            assert evidence.programs == ("cat",)
            await result.handle.send_input("hello\r\x04")
            final = await result.handle.wait()
    assert final.status == "finished" and final.output == "hello\nhello\n"


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
@pytest.mark.parametrize("mode", MODES)
async def test_node_readline_is_waiting_for_input(mode: str) -> None:
    """Defect 2: Node's readline waits in epoll on the terminal (seen through the epoll
    instance's fd set, not guessed from the screen)."""
    program = (
        'const rl = require("readline").createInterface({input: process.stdin, '
        'output: process.stdout}); rl.question("Your name: ", a => { console.log("hi " + a); '
        "rl.close(); })"
    )
    async with terminal(mode) as term:
        with trio.fail_after(2 * TIMEOUT):
            result = await term.run(f"node -e '{program}'")
            assert result.status == "waiting_for_input", result
            assert result.handle is not None
            evidence = result.handle.input_evidence
            assert evidence is not None and evidence.source == "poll"
            assert evidence.programs[0].startswith("node ")
            await result.handle.send_input("agent\r")
            final = await result.handle.wait()
    assert final.status == "finished" and final.output.endswith("hi agent\n")


@pytest.mark.parametrize("mode", MODES)
async def test_a_pause_after_a_prompt_like_line_is_not_waiting(mode: str) -> None:
    """Defect 2: a command that only pauses after ``name? `` is not waiting for input."""
    async with terminal(mode) as term:
        with trio.fail_after(TIMEOUT):
            handle = await term.start("printf 'name? '; sleep 2; echo done", input_quiet=0.2)
            result = await handle.wait()
    assert result.status == "finished" and result.output == "name? done\n"
    assert handle.record.machine.episode == 0  # never reported waiting, not even briefly


@pytest.mark.parametrize("mode", MODES)
async def test_an_editor_opened_by_a_command_is_waiting_for_input(mode: str, tmp_path: Any) -> None:
    """``git commit`` without ``-m`` opens an editor: full screen, polling the terminal."""
    repo = tmp_path / "repo"
    async with terminal(mode, cwd=str(tmp_path)) as term:
        with trio.fail_after(2 * TIMEOUT):
            setup = await term.run(
                f"git init -q {repo} && cd {repo} && git config user.name a && "
                "git config user.email a@b && touch f && git add f"
            )
            assert setup.exit_code == 0, setup.output
            result = await term.run("GIT_EDITOR='vim -u NONE -N' git commit")
            assert result.status == "waiting_for_input", result
            assert result.handle is not None
            evidence = result.handle.input_evidence
            assert evidence is not None and evidence.full_screen
            assert evidence.source in ("procfs", "poll")
            assert "COMMIT_EDITMSG" in evidence.programs[0]
            await result.handle.send_input("\x1b:q!\r")
            final = await result.handle.wait()
    assert final.status == "finished" and final.exit_code == 1
    assert "Aborting commit" in final.output


@pytest.mark.parametrize("mode", MODES)
async def test_a_busy_terminal_refuses_a_new_command(mode: str) -> None:
    """Defect 3: ``run("echo second")`` while ``read -p`` waits typed into the prompt
    (the first command read it as its answer). Now it is refused at once, naming the
    command that holds the terminal and how to answer it."""
    async with terminal(mode) as term:
        with trio.fail_after(TIMEOUT):
            first = await term.run('read -p "name? " n; echo "got $n"')
            assert first.status == "waiting_for_input" and first.handle is not None
            second = await term.run("echo second")
            assert second.status == "refused" and second.done and second.handle is None
            assert second.holder is not None
            assert second.holder.command_id == first.command_id
            assert second.holder.status == "waiting_for_input"
            assert "read -p" in second.note and "send_input" in second.note
            started = await term.start("echo third")
            assert started.done and started.status == "refused"
            assert first.handle.status == "waiting_for_input"  # untouched
            await first.handle.send_input("agent\r")
            answered = await first.handle.wait()
            after = await term.run("echo second")
    assert answered.status == "finished" and answered.output.endswith("got agent\n")
    assert after.status == "finished" and after.output == "second\n"
    assert "echo second" not in answered.raw_output


#: Prints "started" once it runs (the typed line shows ``sta""rted``), then sleeps.
HELD = """sh -c 'echo sta""rted; exec sleep 30'"""


async def test_a_command_typed_by_someone_else_holds_the_terminal() -> None:
    """Another client's command (seen through command detection) holds it too."""
    async with (
        running_server(shell="/bin/bash") as server,
        connect(server.url) as person,
        connect(server.url) as agent,
    ):
        uri = "ahp-terminal:/shared"
        await person.create_terminal(uri)
        await agent.subscribe(uri)
        term = agent.terminal(uri)
        with trio.fail_after(TIMEOUT):
            await agent.wait_for(lambda: term.state.supportsCommandDetection is not None)
            # The command says when it runs: a Ctrl-C that reached bash before it forked
            # (inside its DEBUG trap, on a loaded machine) would leave a plain
            # ``sleep 30`` running past the timeout.
            await person.send_input(uri, f"{HELD}\r")
            await agent.wait_for(lambda: "started" in term.state.text())
            await agent.wait_for(
                lambda: (
                    bool(term.state.content) and isinstance(term.state.content[-1], ahp.CommandPart)
                )
            )
            refused = await term.run("echo mine")
            await term.interrupt()
            await agent.wait_for(
                lambda: all(
                    p.isComplete for p in term.state.content if isinstance(p, ahp.CommandPart)
                )
            )
            after = await term.run("echo mine")
    assert refused.status == "refused" and refused.holder is not None
    assert refused.holder.command_line == HELD and refused.holder.command_id is None
    assert "interrupt" in refused.note
    assert after.status == "finished" and after.output == "mine\n"


async def test_a_remote_command_whose_connection_is_lost_ends_lost() -> None:
    """Defect 4: it stayed ``running`` with ``done == False`` for ever."""
    async with (
        running_server(shell="/bin/bash") as server,
        connect(server.url, auto_reconnect=False) as client,
    ):
        await client.create_terminal("ahp-terminal:/r")
        term = client.terminal("ahp-terminal:/r")
        with trio.fail_after(TIMEOUT):
            handle = await term.start("echo started; sleep 100")
            await handle.wait(timeout=0.3)
            await client.drop_connection()
            lost = await handle.wait()
    assert lost.status == "lost" and lost.done and handle.done and lost.handle is None
    assert lost.status in ahp.agent.FINAL_STATUSES and "connection" in lost.note


async def test_a_remote_command_survives_a_reconnect() -> None:
    """A drop the client recovers from is not a loss: the command is followed to its end."""
    async with running_server(shell="/bin/bash") as server, connect(server.url) as client:
        await client.create_terminal("ahp-terminal:/r")
        term = client.terminal("ahp-terminal:/r")
        with trio.fail_after(TIMEOUT):
            handle = await term.start("sleep 1; echo end; (exit 4)")
            await handle.wait(timeout=0.2)
            await client.drop_connection()
            final = await handle.wait()
    assert final.status == "finished" and final.exit_code == 4
    assert client.reconnects == 1


@asynccontextmanager
async def vanishing_server() -> AsyncIterator[
    tuple[ahp.Host, ahp.Sidecar, trio.CancelScope, trio.Nursery]
]:
    """A host served over AHP, and the cancel scope that makes its server go away
    (every reconnect then fails); the nursery it runs in, for the test's tasks."""
    async with ahp.open_host() as host, trio.open_nursery() as nursery:
        serving = trio.CancelScope()

        async def serve(task_status: trio.TaskStatus[ahp.Sidecar]) -> None:
            with serving:
                await ahp.serve_host(
                    host, ServeOptions(port=0, token=TOKEN), task_status=task_status
                )

        sidecar: ahp.Sidecar = await nursery.start(serve)
        yield host, sidecar, serving, nursery


async def test_a_remote_command_is_lost_when_reconnecting_takes_too_long(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The server went away: reconnects fail; after LOST_AFTER the command is lost."""
    monkeypatch.setattr("ahp.client.remote.LOST_AFTER", 0.5)
    async with vanishing_server() as (_, sidecar, serving, _), connect(sidecar.url) as client:
        await client.create_terminal("ahp-terminal:/r")
        term = client.terminal("ahp-terminal:/r")
        with trio.fail_after(TIMEOUT):
            handle = await term.start("sleep 100")
            await handle.wait(timeout=0.2)
            serving.cancel()  # the server is gone: every reconnect fails
            lost = await handle.wait()
    assert lost.status == "lost" and lost.done and client.reconnects == 0


@pytest.mark.parametrize("what", ["run", "exec"])
async def test_remote_work_gives_up_when_the_server_stays_away(
    monkeypatch: pytest.MonkeyPatch, what: str
) -> None:
    """A remote ``run`` started while the connection was down, and an ``exec_remote``
    whose server went away mid-command, waited for a reconnect for ever (neither
    the run's timeout nor LOST_AFTER applied): both raise ConnectionLost after
    LOST_AFTER, and nothing is typed."""
    monkeypatch.setattr("ahp.client.remote.LOST_AFTER", 0.5)
    async with vanishing_server() as (host, sidecar, serving, nursery):
        async with connect(sidecar.url) as client:
            await client.create_terminal("ahp-terminal:/r")
            term = client.terminal("ahp-terminal:/r")
            with trio.fail_after(TIMEOUT), pytest.raises(ahp.client.ConnectionLost):
                if what == "run":
                    serving.cancel()  # the server is gone: every reconnect fails
                    await client.wait_for(lambda: not client.connected)
                    await term.run("echo never", timeout=5)
                else:

                    async def stop_soon() -> None:
                        await trio.sleep(0.5)
                        serving.cancel()

                    nursery.start_soon(stop_soon)
                    await ahp.client.exec_remote(client, ["sleep", "100"])
        assert "never" not in host.get("ahp-terminal:/r").state.text()


@pytest.mark.parametrize("mode", MODES)
async def test_a_run_with_a_claim_gives_back_the_claim_it_found(mode: str) -> None:
    """Defect 5: the claim was given back after the result, so the next run found the
    previous run's claim and gave back that one: the terminal stayed claimed."""
    async with terminal(mode) as term:
        with trio.fail_after(TIMEOUT):
            found = term.state.claim
            for i in range(3):
                claim = ahp.SessionClaim(session="agent:/t", toolCallId=f"call-{i}")
                result = await term.run(f"echo {i}", claim=claim)
                assert result.status == "finished"
                assert term.state.claim == found, i
