"""What is typed, and how its end is told, in-process and remote: commands of several
lines, control characters, lines the shell does not run, fish's refused lines, marks
printed by programs, interrupts the shell holds, and runs cancelled as they start.

Split from ``tests/test_agent_run.py`` (its ``terminal`` fixture and modes), so that
the suite's two workers, which take whole files, share the agent layer's tests.
"""

from __future__ import annotations

import shutil
import sys
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import pytest
import trio

import ahp
from ahp.agent import (
    CommandLineError,
)
from ahp.client import connect
from tests.helpers import TIMEOUT, wait_for_text
from tests.test_agent_run import MODES, terminal
from tests.wire import running_server

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


@pytest.mark.parametrize(
    ("mode", "shell"),
    # (sh has no integration: markers, in-process only; remote it waits out the detection
    # on every run, 23 s, for the same typing)
    [(mode, shell) for mode in MODES for shell in SHELLS] + [("local", "/bin/sh")],
)
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


async def _cancel_a_run_that_ignores_ctrl_c(term: Any, mode: str) -> None:
    """Start ``run`` of a command that ignores Ctrl-C and cancel it once it printed."""
    async with trio.open_nursery() as nursery:

        async def run() -> None:
            await term.run("trap '' INT; echo st''arted; sleep 60")

        nursery.start_soon(run)
        if mode == "local":
            await wait_for_text(term, "started")
        else:
            await term.client.wait_for(lambda: "started" in term.state.text())
        nursery.cancel_scope.cancel()


@pytest.mark.parametrize("mode", MODES)
async def test_a_cancelled_run_kills_a_command_that_ignores_ctrl_c(mode: str) -> None:
    """Cancelling ``run`` sends a Ctrl-C; a command that ignores it is killed
    ``INTERRUPT_GRACE`` later, as a timeout's (it ran on, holding the terminal, and
    only closing the terminal ended it)."""
    async with terminal(mode) as term:
        with trio.fail_after(TIMEOUT):
            await _cancel_a_run_that_ignores_ctrl_c(term, mode)
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
            await _cancel_a_run_that_ignores_ctrl_c(term, mode)
            after = await term.run("echo after")
            cancelled = term.commands.all()[-2].result()
    assert (after.status, after.output) == ("finished", "after\n"), after
    assert cancelled.status == "killed", cancelled
