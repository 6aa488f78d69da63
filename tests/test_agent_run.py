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
    CommandLineError,
    TerminalExitedError,
    as_completed,
    wait_any,
)
from ahp.agent.budget import omission_marker
from ahp.client import connect
from ahp.server import ServeOptions
from tests.helpers import TIMEOUT, stat_fields, wait_for_text
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


SHELLS = [s for s in ("/bin/bash", "/usr/bin/zsh", "/usr/bin/fish") if shutil.which(s)]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("shell", SHELLS)
async def test_a_command_of_several_lines_is_one_command(mode: str, shell: str) -> None:
    """Typed as it is, each line would be a command of its own: the run would end at
    the first one's end and the rest would land in the next run's output."""
    if shell.endswith("fish"):
        several = "echo one\necho two; echo three\nfalse\n"
        first = ("one\ntwo\nthree\n", 1)
    else:
        several = "cat <<'EOF' > lines.txt\na\nb\nEOF\nwc -l < lines.txt\necho last; (exit 3)\n"
        first = ("2\nlast\n", 3)
    async with AsyncExitStack() as stack:
        if mode == "local":
            host = await stack.enter_async_context(ahp.open_host())
            term: Any = await host.create_terminal(shell=shell, cwd="/tmp")
        else:
            server = await stack.enter_async_context(running_server(shell=shell))
            client = await stack.enter_async_context(connect(server.url))
            await client.create_terminal("ahp-terminal:/lines", cwd="/tmp")
            term = client.terminal("ahp-terminal:/lines")
            with trio.move_on_after(TIMEOUT):
                await client.wait_for(lambda: term.state.supportsCommandDetection is not None)
        with trio.fail_after(TIMEOUT):
            result = await term.run(several)
            after = await term.run("echo next")
    assert (result.status, result.output, result.exit_code) == ("finished", *first)
    assert (after.status, after.output, after.exit_code) == ("finished", "next\n", 0)


PASTE_SHELLS = [s for s in SHELLS if not s.endswith("bash")]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("shell", PASTE_SHELLS)
async def test_a_syntax_error_in_a_command_of_several_lines_runs_none(
    mode: str, shell: str, tmp_path: Path
) -> None:
    """Probe N: typed line by line in ``{ … }``, a first line zsh cannot parse dropped
    the group and the later lines ran as commands of their own (``touch`` ran, the
    run was ``finished`` with exit code 0, the next run refused busy); in fish the
    refused first line kept the later keys (``echo price $echo HOME``). Pasted as one,
    the shell parses every line first: a syntax error on any line, nothing runs."""
    marker = tmp_path / "ran"
    lines = ["echo one )\necho two\ntouch {m}", "echo one\necho two )\ntouch {m}"]
    if shell.endswith("fish"):
        lines.append("echo price $\necho HOME\ntouch {m}")
    async with terminal(mode, shell, cwd="/tmp") as term:
        with trio.fail_after(3 * TIMEOUT):
            results = [await term.run(line.format(m=marker)) for line in lines]
            after = await term.run("echo next")
            heredoc = await term.run(
                "echo a\nfalse"
                if shell.endswith("fish")
                else "cat <<EOF | wc -c\nhel\tlo\nEOF\n(exit 4)"
            )
            quote = await term.run("echo 'abc\necho def")
            assert quote.status == "waiting_for_input", quote
            assert quote.handle is not None and quote.handle.input_evidence is not None
            assert quote.handle.input_evidence.continuation
            assert quote.handle.input_evidence.group_end == ""
            await quote.handle.send_input("ghi'\r")
            done = await quote.handle.wait()
    for result in results:
        assert (result.status, result.exit_code) == ("finished", None), result
        assert "not run" in result.note, result
        assert "two" not in result.output.replace("echo two", ""), result
    assert not marker.exists()
    assert (after.status, after.output, after.exit_code) == ("finished", "next\n", 0), after
    if shell.endswith("fish"):
        assert (heredoc.output, heredoc.exit_code) == ("a\n", 1), heredoc
    else:
        assert (heredoc.output, heredoc.exit_code) == ("7\n", 4), (
            heredoc
        )  # (the TAB is one character)
    assert (done.status, done.exit_code) == ("finished", 0), done
    assert done.output == "abc\necho def\nghi\n", done


@pytest.mark.parametrize("mode", MODES)
async def test_a_group_bash_drops_is_not_reported_as_run(mode: str, tmp_path: Path) -> None:
    """Probe N, bash: typed in ``{ … }`` line by line (bash parses a paste line by line
    too), a line bash cannot parse drops the group and it runs the later lines as
    commands of their own. That was reported ``finished``, exit code 0, the output of
    the first later line alone, and the next run was refused busy. Now the command is
    not run as one, with no exit code, bash's message and the later lines it ran as its
    output, and it ends once bash is back at its prompt (the next command runs)."""
    marker = tmp_path / "ran"
    async with terminal(mode, cwd="/tmp") as term:
        with trio.fail_after(3 * TIMEOUT):
            first = await term.run(f"echo one )\necho two\ntouch {marker}")
            after = await term.run("echo next")
            later = await term.run("echo a\necho b )\necho c")
            good = await term.run("echo a\n(exit 3)")
    for result, ran in ((first, "echo two\ntwo\n"), (later, "echo c\nc\n")):
        assert (result.status, result.exit_code) == ("finished", None), result
        assert result.note.startswith("not run as one command"), result
        assert "syntax error" in result.output and ran in result.output, result
    assert "one\n" not in first.output and "a\n" not in later.output
    assert marker.exists()  # (the limit: bash ran the later lines)
    assert (after.status, after.output, after.exit_code) == ("finished", "next\n", 0), after
    assert (good.status, good.output, good.exit_code) == ("finished", "a\n", 3), good


async def test_zsh_takes_a_paste_without_its_bracketed_paste_mode(tmp_path: Path) -> None:
    """zsh with ``unset zle_bracketed_paste`` does not switch the terminal's mode on, but
    its key maps still bind the paste's keys: the lines are still pasted, parsed as a
    whole (a syntax error: nothing runs)."""
    zsh = shutil.which("zsh")
    if zsh is None:
        pytest.skip("zsh is not installed")
    marker = tmp_path / "ran"
    async with terminal("local", zsh, cwd="/tmp") as term:
        with trio.fail_after(TIMEOUT):
            await term.run("unset zle_bracketed_paste")
            refused = await term.run(f"echo one\necho two )\ntouch {marker}")
            several = await term.run("echo one\n(exit 3)")
    assert (refused.status, refused.exit_code) == ("finished", None), refused
    assert "not run" in refused.note and not marker.exists(), refused
    assert (several.status, several.output, several.exit_code) == ("finished", "one\n", 3)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("shell", [*SHELLS, "/bin/sh"])
async def test_a_command_is_text_for_the_shell(mode: str, shell: str) -> None:
    """A lone CR is a line end (the rest ran after the command's end, untracked, and
    ``exit`` in it killed the shell unseen); a TAB is a TAB (completion ate it: ``a b``
    came out ``ab``), refused in fish, which has no key to insert one; another control
    character is refused, nothing typed (``echo a^Cecho b`` ran ``cho b``)."""
    fish = shell.endswith("fish")
    async with terminal(mode, shell) as term:
        with trio.fail_after(TIMEOUT):
            split = await term.run("echo first\rsleep 0.2; echo second; false")
            with pytest.raises(CommandLineError, match=r"U\+0003 \(Ctrl-C\) at index 6"):
                await term.run("echo a\x03echo b")
            if fish:
                with pytest.raises(CommandLineError, match="TAB"):
                    await term.run("echo a\tb")
            else:
                tab = await term.run("x='a\tb'; set -- x\ty; echo ${#x} $#")
                assert (tab.status, tab.output) == ("finished", "3 2\n"), tab
            after = await term.run("echo next")
    assert (split.status, split.output, split.exit_code) == ("finished", "first\nsecond\n", 1)
    assert (after.status, after.output, after.exit_code) == ("finished", "next\n", 0)
    assert "cho b" not in term.state.text()


@pytest.mark.parametrize("mode", MODES)
async def test_a_line_the_shell_does_not_run_ends(mode: str) -> None:
    """A syntax error: the shell never reports a start. The run ends with what the
    shell said, and the terminal is not left busy."""
    async with terminal(mode) as term:
        with trio.fail_after(TIMEOUT):
            result = await term.run("echo (")
            after = await term.run("echo next")
    assert (result.status, result.exit_code) == ("finished", None), result
    assert "syntax error" in result.output and "not run" in result.note, result
    assert (after.status, after.output) == ("finished", "next\n")


@pytest.mark.parametrize("mode", MODES)
async def test_a_tiny_timeout_never_leaves_the_terminal_busy(mode: str) -> None:
    """The Ctrl-C of a 1 µs timeout may reach the shell after it read the line and
    before it ran it: the command never starts, and must end all the same."""
    async with terminal(mode) as term:
        for _ in range(3):
            with trio.fail_after(TIMEOUT):
                result = await term.run("sleep 3; echo slept", timeout=1e-6)
                after = await term.run("echo next")
            # (Its Ctrl-C can also reach bash between the start and the fork and be
            # lost: then the command runs to its end, still reported timed out.)
            assert result.status == "timed_out", result
            assert (after.status, after.output) == ("finished", "next\n"), after


@pytest.mark.parametrize("mode", MODES)
async def test_a_shell_that_stops_reporting_ends_ends_the_command(mode: str) -> None:
    """``unset PROMPT_COMMAND`` removes the hook that reports a command's end: bash
    came back to its prompt, and the command was reported running until its timeout,
    ``running`` for good after it, every later command refused as busy with it. It is
    now over once bash is seen back at that prompt in its line editor; the next command
    is delimited with markers (its exit code known), after which bash reports ends
    again (its DEBUG trap put the hook back). A builtin ``read`` also has the shell
    read the terminal: it still waits for input, plain or silent."""
    async with terminal(mode) as term:
        with trio.fail_after(TIMEOUT):
            lost = await term.run("unset PROMPT_COMMAND", timeout=4 * TIMEOUT)
            failing = await term.run("(exit 3)")
            after = await term.run("echo next")
            asked = await term.run("read -p 'name? ' n; echo got $n")
            assert asked.status == "waiting_for_input" and asked.handle is not None
            await asked.handle.send_input("ann\r")
            answered = await asked.handle.wait()
            silent = await term.run("read -s n; echo got $n")
            assert silent.status == "waiting_for_input" and silent.handle is not None
            await silent.handle.send_input("bob\r")
            told = await silent.handle.wait()
    assert (lost.status, lost.exit_code) == ("finished", None), lost
    assert lost.note.startswith("command detection was lost: the shell is back at its prompt")
    assert (failing.status, failing.exit_code) == ("finished", 3)
    assert (after.status, after.output, after.exit_code) == ("finished", "next\n", 0)
    assert (answered.status, answered.exit_code) == ("finished", 0)
    assert answered.output.endswith("got ann\n")
    assert (told.status, told.output, told.exit_code) == ("finished", "got bob\n", 0)


@pytest.mark.parametrize("mode", MODES)
async def test_a_shell_whose_prompt_goes_nowhere_ends_a_command_it_stopped_reporting(
    mode: str,
) -> None:
    """After ``exec 2>/dev/null`` bash draws its prompt nowhere; after ``unset
    PROMPT_COMMAND`` it reports no command's end: the command was ``running`` for good
    (past its timeout: "neither Ctrl-C nor SIGKILL ended it"), every later run refused.
    After its timeout's Ctrl-C, bash's line editor reading in quiet with nothing
    printed (its stderr off the terminal: ``ttyStatus`` ``shellStderrTty``) ends it
    ``timed_out``; later commands use markers. Reads in that shell still wait for input
    (a ``read -e``, not told from the prompt, is never ended without a Ctrl-C)."""
    async with terminal(mode) as term:
        with trio.fail_after(3 * TIMEOUT):
            assert (await term.run("exec 2>/dev/null")).status == "finished"
            silent = await term.run("read -s n; echo got $n")
            assert silent.status == "waiting_for_input" and silent.handle is not None
            await silent.handle.send_input("bob\r")
            told = await silent.handle.wait()
            edited = await term.start("read -e n; echo got $n")
            await trio.sleep(2.0)
            assert not edited.done, edited.result()
            await edited.send_input("ed\r")
            typed = await edited.wait()
            lost = await term.run("unset PROMPT_COMMAND", timeout=1.0)
            failing = await term.run("(exit 3)")
            after = await term.run("echo next")
    assert (told.status, told.output, told.exit_code) == ("finished", "got bob\n", 0), told
    assert (typed.status, typed.output, typed.exit_code) == ("finished", "got ed\n", 0), typed
    assert (lost.status, lost.exit_code) == ("timed_out", None), lost
    assert lost.note.startswith("command detection was lost: the shell is back at its prompt")
    assert "stderr is not the terminal" in lost.note
    assert (failing.status, failing.exit_code) == ("finished", 3), failing
    assert (after.status, after.output, after.exit_code) == ("finished", "next\n", 0), after


async def test_a_read_that_outlives_a_ctrl_c_is_not_taken_for_the_prompt() -> None:
    """The same shell's ``read -s -n 1`` looks like its line editor (raw, no echo); a
    trap on SIGINT keeps it reading after a Ctrl-C, saying so: it is not ended as
    "back at its prompt" (something was printed after the Ctrl-C)."""
    async with ahp.open_host() as host:
        term = await host.create_terminal(shell="/bin/bash")
        with trio.fail_after(3 * TIMEOUT):
            await term.run("exec 2>/dev/null")
            await term.run("trap 'echo trapped' INT")
            asked = await term.run("read -s -n 1 k; echo got $k")
            assert asked.status == "waiting_for_input" and asked.handle is not None
            await asked.handle.interrupt()
            await trio.sleep(3.0)
            assert not asked.handle.done, asked.handle.result()
            await asked.handle.send_input("z")
            answered = await asked.handle.wait()
    assert answered.status == "interrupted", answered
    assert answered.output == "trapped\ngot z\n", answered


FISH = shutil.which("fish")


@pytest.mark.skipif(FISH is None, reason="fish is not installed")
@pytest.mark.parametrize("mode", MODES)
async def test_markers_in_fish_are_in_fish_syntax(mode: str) -> None:
    """Once fish's hooks are erased, commands are delimited with markers: they were
    POSIX's, ``"$?"``, which fish refuses (the command ran never, past its timeout,
    every later one refused). They are fish's now: exit codes, a line of several
    commands, a command of several lines, quotes and backslashes."""
    assert FISH is not None
    async with terminal(mode, shell=FISH) as term:
        with trio.fail_after(3 * TIMEOUT):
            lost = await term.run("functions -e __ahp_postexec __ahp_on_prompt __ahp_preexec")
            failing = await term.run("echo a; false")
            seven = await term.run("sh -c 'exit 7'")
            lines = await term.run("echo \"it's\"\necho 'b\\\\c'")
            ok = await term.run("echo done")
    assert lost.note.startswith("command detection was lost"), lost
    assert (failing.status, failing.output, failing.exit_code) == ("finished", "a\n", 1), failing
    assert (seven.status, seven.exit_code) == ("finished", 7), seven
    assert (lines.status, lines.output, lines.exit_code) == ("finished", "it's\nb\\c\n", 0)
    assert (ok.status, ok.output, ok.exit_code) == ("finished", "done\n", 0), ok


@pytest.mark.skipif(FISH is None, reason="fish is not installed")
@pytest.mark.parametrize("mode", MODES)
async def test_a_line_fish_refuses_is_not_run_and_not_kept(mode: str) -> None:
    """Probe L: fish keeps a line it refuses (a syntax error) in its editor, after its
    prompt drawn again. It was reported ``waiting_for_input`` ("echo off"), its output
    empty, every later run refused as busy (and the next keys would have been appended
    to the line). Now it is finished, with no exit code, fish's message and a note, and
    the next command runs. A block left open (bash's ``for … do … done`` is one in
    fish) still waits for the rest of the line, and the note says so."""
    assert FISH is not None
    async with terminal(mode, shell=FISH) as term:
        with trio.fail_after(3 * TIMEOUT):
            refused = await term.run("echo $((1+2))")
            after = await term.run("echo next")
            subshell = await term.run("(exit 42)")
            block = await term.run("for i in 1 2; do echo $i; done")
            assert block.status == "waiting_for_input" and block.handle is not None, block
            await block.handle.interrupt()
            dropped = await block.handle.wait()
            last = await term.run("echo last")
    assert (refused.status, refused.exit_code) == ("finished", None), refused
    assert "command substitutions not allowed" in refused.output, refused
    assert refused.note.startswith("not run: fish refused the line"), refused
    assert "cleared with Ctrl-C" in refused.note, refused
    assert (after.status, after.output, after.exit_code) == ("finished", "next\n", 0), after
    assert (subshell.status, subshell.exit_code) == ("finished", None), subshell
    assert subshell.note.startswith("not run: fish refused the line"), subshell
    assert "echo off" not in block.note and "`end`" in block.note, block
    assert dropped.status == "interrupted", dropped
    assert (last.status, last.output, last.exit_code) == ("finished", "last\n", 0), last


@pytest.mark.skipif(FISH is None, reason="fish is not installed")
@pytest.mark.parametrize("mode", MODES)
async def test_markers_after_exec_fish_are_in_fish_syntax(mode: str) -> None:
    """``exec fish`` in a bash terminal: detection lost (the shell replaced), then
    markers, in the syntax of the shell now there (POSIX's killed that fish)."""
    assert FISH is not None
    async with terminal(mode) as term:
        with trio.fail_after(3 * TIMEOUT):
            replaced = await term.run(f"exec {FISH}")
            failing = await term.run("echo a; false")
            seven = await term.run("sh -c 'exit 7'")
            lines = await term.run("echo x\necho y")
    assert replaced.note.startswith("command detection was lost"), replaced
    assert (failing.status, failing.output, failing.exit_code) == ("finished", "a\n", 1), failing
    assert (seven.status, seven.exit_code) == ("finished", 7), seven
    assert (lines.status, lines.output, lines.exit_code) == ("finished", "x\ny\n", 0), lines


@pytest.mark.skipif(FISH is None, reason="fish is not installed")
async def test_an_end_reported_without_its_exit_code_says_so() -> None:
    """fish without its postexec hook reports ends (at its prompt) with no exit code:
    the result's note was empty; it says the exit code is unknown, and why."""
    assert FISH is not None
    async with ahp.open_host() as host:
        term = await host.create_terminal(shell=FISH)
        with trio.fail_after(TIMEOUT):
            await term.run("functions -e __ahp_postexec")
            result = await term.run("echo a; false")
    assert (result.status, result.output, result.exit_code) == ("finished", "a\n", None)
    assert result.note.startswith("exit code unknown: the shell reported the command's end")


@pytest.mark.parametrize(
    ("shell", "redirect"),
    [("/bin/bash", "exec 2>/dev/null"), ("zsh", "exec >/dev/null"), ("zsh", "exec 2>/dev/null")],
)
async def test_marks_reach_the_terminal_when_the_shell_redirects_its_output(
    shell: str, redirect: str
) -> None:
    """The integration printed its marks on bash's stderr and zsh's stdout: after
    ``exec 2>/dev/null`` bash's command was reported running for good (every later one
    refused), after ``exec >/dev/null`` zsh's every later command ``not run`` with no
    exit code. The marks go to the terminal itself while those are redirected."""
    if shutil.which(shell) is None:
        pytest.skip(f"{shell} is not installed")
    async with ahp.open_host() as host:
        term = await host.create_terminal(shell=shell)
        with trio.fail_after(TIMEOUT):
            redirected = await term.run(redirect, timeout=4 * TIMEOUT)
            failing = await term.run("(exit 3)")
            after = await term.run("echo next")
    assert (redirected.status, redirected.exit_code) == ("finished", 0), redirected
    assert (failing.status, failing.exit_code) == ("finished", 3), failing
    assert after.exit_code == 0, after
    if "2>" in redirect:
        assert after.output == "next\n"


@pytest.mark.parametrize("mode", MODES)
async def test_marks_printed_in_a_shell_without_integration_are_not_command_ends(
    mode: str,
) -> None:
    """``/bin/sh`` gets no integration: any ``OSC 133`` mark is some program's output.
    One ``133;A`` turned command detection on and every later command was reported
    ``not run`` with no exit code; one ``133;C`` opened a command nothing ends, and
    every later run was refused as busy with it. Commands there are delimited with
    markers whatever the marks say."""
    async with AsyncExitStack() as stack:
        if mode == "local":
            host = await stack.enter_async_context(ahp.open_host())
            term: Any = await host.create_terminal(shell="/bin/sh")
        else:
            server = await stack.enter_async_context(running_server(shell="/bin/sh"))
            client = await stack.enter_async_context(connect(server.url))
            uri = "ahp-terminal:/agent"
            await client.create_terminal(uri)
            term = client.terminal(uri)
        with trio.fail_after(TIMEOUT):
            await term.run(r"printf 'a\033]133;A\007b\n'")
            failing = await term.run("false")
            await term.run(r"printf 'x\033]133;C\007y\n'")
            after = await term.run('sh -c "exit 7"')
            last = await term.run("echo next")
    assert (failing.status, failing.exit_code) == ("finished", 1), failing
    assert (after.status, after.exit_code) == ("finished", 7), after
    assert (last.status, last.output, last.exit_code) == ("finished", "next\n", 0), last


HELD_SHELL = Path(__file__).resolve().parent / "fixtures" / "held_interrupt_shell.py"


@pytest.mark.parametrize(("mode", "plain"), [("local", False), ("remote", False), ("local", True)])
async def test_an_interrupt_the_shell_holds_is_taken_before_the_next_command(
    mode: str, plain: bool
) -> None:
    """bash at its first prompt can hold a Ctrl-C until the next key and then drop
    that key (``echo next`` ran as ``cho next``: a CI failure). The shell here holds
    every first Ctrl-C so: the interrupted run is not over until the shell showed it
    took it (one more Ctrl-C makes it), and the next command arrives whole."""
    argv = [sys.executable, str(HELD_SHELL), *(["--plain"] if plain else [])]
    async with AsyncExitStack() as stack:
        host = await stack.enter_async_context(ahp.open_host())
        local = await host.create_terminal(argv=argv, cwd="/tmp")
        await wait_for_text(local, "held$ ")  # its handler is installed
        term: Any = local
        if mode == "remote":
            server = await stack.enter_async_context(running_server(host=host))
            client = await stack.enter_async_context(connect(server.url))
            await client.subscribe(local.uri)
            term = client.terminal(local.uri)
        with trio.fail_after(TIMEOUT):
            result = await term.run("echo slept", timeout=1e-6)
            after = await term.run("echo next")
    assert result.status == "timed_out" and "not run" in result.note, result
    assert (after.status, after.output, after.exit_code) == ("finished", "next\n", 0), after


@pytest.mark.parametrize("mode", MODES)
async def test_an_unfinished_line_waits_for_its_rest(mode: str) -> None:
    """An unclosed quote: the shell reads the rest of the line at its continuation
    prompt. That is waiting for input; the rest is answered with send_input."""
    async with terminal(mode) as term:
        with trio.fail_after(TIMEOUT):
            result = await term.run("echo 'abc")
            assert result.status == "waiting_for_input", result
            assert result.handle is not None
            await result.handle.send_input("def'\r")
            done = await result.handle.wait()
    assert (done.status, done.exit_code, done.output) == ("finished", 0, "abc\ndef\n"), done


async def test_an_unfinished_command_of_several_lines_says_its_group_is_open() -> None:
    """A heredoc without its end line, in a command of several lines: typed inside
    ``{ … }``, whose ``}`` went into the heredoc's body. The note says so, and to send
    the ``}`` after the rest (the model sent ``EOF`` and the command kept waiting)."""
    async with terminal("local") as term:
        with trio.fail_after(TIMEOUT):
            result = await term.run("cat <<EOF\nhello")
            assert result.status == "waiting_for_input", result
            assert result.handle is not None and result.handle.input_evidence is not None
            assert result.handle.input_evidence.continuation
            assert result.handle.input_evidence.group_end == "}"
            assert "send a line `}` after the rest" in result.note, result.note
            await result.handle.send_input("EOF\r}\r")
            done = await result.handle.wait()
    assert (done.status, done.exit_code, done.output) == ("finished", 0, "hello\n}\n"), done


@pytest.mark.parametrize("mode", MODES)
async def test_a_cancelled_run_kills_a_command_that_ignores_ctrl_c(mode: str) -> None:
    """Cancelling ``run`` sends a Ctrl-C; a command that ignores it is killed
    ``INTERRUPT_GRACE`` later, as a timeout's (it ran on, holding the terminal, and
    only closing the terminal ended it)."""
    async with terminal(mode) as term:
        with trio.fail_after(TIMEOUT):
            async with trio.open_nursery() as nursery:

                async def run() -> None:
                    await term.run("trap '' INT; echo st''arted; sleep 60")

                nursery.start_soon(run)
                if mode == "local":
                    await wait_for_text(term, "started")
                else:
                    await term.client.wait_for(lambda: "started" in term.state.text())
                nursery.cancel_scope.cancel()
            handle = term.commands.all()[-1]
            final = await handle.wait()
            after = await term.run("echo next")
    assert final.status == "killed" and final.exit_code == 137, final
    assert "cancelled" in final.note and "SIGKILL" in final.note, final.note
    assert (after.status, after.output) == ("finished", "next\n"), after


#: Cancel delays of a run cancelled as it starts: before any key is typed, while the
#: keys are on their way, and once the shell may have started the command.
START_CANCEL_DELAYS = (0.0, 0.001, 0.002, 0.005, 0.02)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("shell", SHELLS)
async def test_a_run_cancelled_as_it_starts_leaves_the_next_run_its_own_result(
    mode: str, shell: str
) -> None:
    """probe N, findings 2 and 5: a run cancelled 0-20 ms after it starts, then
    ``run("echo after")``. The next run's follower, opened before it waited for the
    cancelled command's end, took that command's start and end (exit 130, ``^C``) for
    its own, and ``echo after`` ran untracked; a cancellation while the keys were
    typed left them typed by no registered command; fish, interrupted while it draws
    its prompt, drops the line silently, and the next run was refused busy (the
    command ended just after the wait for an ending holder)."""
    rounds = 1  # (each round: five cancellations; fish drops some lines, ~5 s each)
    async with AsyncExitStack() as stack:
        if mode == "local":
            host = await stack.enter_async_context(ahp.open_host())
            term: Any = await host.create_terminal(shell=shell, cwd="/tmp")
        else:
            server = await stack.enter_async_context(running_server(shell=shell))
            client = await stack.enter_async_context(connect(server.url))
            await client.create_terminal("ahp-terminal:/cancel", cwd="/tmp")
            term = client.terminal("ahp-terminal:/cancel")
            with trio.move_on_after(TIMEOUT):
                await client.wait_for(lambda: term.state.supportsCommandDetection is not None)
        with trio.fail_after(TIMEOUT):
            warm = await term.run("echo warm")
        assert warm.output == "warm\n", warm
        for i in range(rounds):
            for delay in START_CANCEL_DELAYS:
                with trio.fail_after(TIMEOUT):
                    with trio.move_on_after(delay):
                        await term.run("sleep 1; echo slept")
                    after = await term.run(f"echo after{i}")
                assert (after.status, after.exit_code, after.output) == (
                    "finished",
                    0,
                    f"after{i}\n",
                ), (delay, after)


@pytest.mark.parametrize("mode", MODES)
async def test_the_next_run_waits_for_the_kill_of_a_cancelled_run(mode: str) -> None:
    """probe N, finding 6: ``run`` right after a cancelled run of a command that ignores
    its Ctrl-C gave that holder ``INTERRUPT_GRACE`` to end, exactly when its collector
    kills it: refused busy just as the kill landed. It gives it ``ENDING_WAIT``
    (``INTERRUPT_GRACE + KILL_WAIT``), as the MCP ``run_command`` does."""
    async with terminal(mode) as term:
        with trio.fail_after(TIMEOUT):
            async with trio.open_nursery() as nursery:

                async def run() -> None:
                    await term.run("trap '' INT; echo st''arted; sleep 60")

                nursery.start_soon(run)
                if mode == "local":
                    await wait_for_text(term, "started")
                else:
                    await term.client.wait_for(lambda: "started" in term.state.text())
                nursery.cancel_scope.cancel()
            after = await term.run("echo after")
            cancelled = term.commands.all()[-2].result()
    assert (after.status, after.output) == ("finished", "after\n"), after
    assert cancelled.status == "killed", cancelled
