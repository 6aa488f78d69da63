"""``run()`` in bash, zsh and fish set up as users set them up (probe L).

Why a file of its own: these are the agent layer's answers (exit code, "not run",
``state.cwd`` when ``run`` returns) under shell settings the other agent tests do
not use (Debian's ``HISTCONTROL=ignoreboth``, directories named with a newline),
each on a real shell in a real pty, in-process.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio

import ahp
from tests.helpers import TIMEOUT
from tests.test_shell_integration import shell_path, write_home

SHELLS = ("bash", "zsh", "fish")


@asynccontextmanager
async def terminal(name: str, home: Path, rc: str | None = None) -> AsyncIterator[Any]:
    env = write_home(name, home, rc)
    async with ahp.open_host() as host:
        yield await host.create_terminal(shell=shell_path(name), cwd=str(home), env=env)


async def test_a_subshell_line_left_out_of_history_has_its_exit_code(tmp_path: Path) -> None:
    """Debian's ~/.bashrc (HISTCONTROL=ignoreboth): a repeated line is not saved, and a
    line run wholly in a subshell was then reported "not run" with no exit code. A
    syntax error is still "not run"."""
    rc = "PS1='tbash$ '\nHISTCONTROL=ignoreboth\n"
    async with terminal("bash", tmp_path / "home", rc) as term:
        with trio.fail_after(TIMEOUT):
            results = [await term.run("(echo building; exit 3)") for _ in range(2)]
            results.append(await term.run(" (exit 9)"))
            error = await term.run("echo (")
            after = await term.run("echo next")
    for r in results[:2]:
        assert (r.status, r.exit_code, r.output, r.note) == ("finished", 3, "building\n", ""), r
    assert (results[2].exit_code, results[2].note) == (9, ""), results[2]
    assert error.exit_code is None and "not run" in error.note, error
    assert (after.output, after.exit_code) == ("next\n", 0)


@pytest.mark.parametrize("name", SHELLS)
async def test_the_cwd_is_current_when_run_returns(name: str, tmp_path: Path) -> None:
    """The cwd a command left is in the state once ``run`` returns (it came after the
    command's end, and was sometimes still the previous one: a race, hence the loop)."""
    home = tmp_path / "home"
    (home / "sub").mkdir(parents=True)
    async with terminal(name, home) as term:
        with trio.fail_after(TIMEOUT * 2):
            for _ in range(15):
                await term.run("cd sub")
                assert term.state.cwd == (home / "sub").as_uri()
                await term.run("cd ..")
                assert term.state.cwd == home.as_uri()


@pytest.mark.parametrize(
    ("directory", "pattern", "quoted"),
    [("new\nline", "new*line", "/new%0Aline"), ("trail\n\n", "trail*", "/trail%0A%0A")],
    ids=["newline inside", "trailing newlines"],
)
@pytest.mark.parametrize("name", SHELLS)
async def test_a_directory_named_with_newlines_is_the_cwd(
    name: str, directory: str, pattern: str, quoted: str, tmp_path: Path
) -> None:
    """A directory whose name holds a newline is the cwd as it is (%0A); fish reported
    one named ``trail\\n`` as ``trail`` (its escape trimmed trailing newlines: probe N
    finding 7); bash and zsh had it right."""
    home = tmp_path / "home"
    (home / directory).mkdir(parents=True)
    async with terminal(name, home) as term:
        with trio.fail_after(TIMEOUT):
            result = await term.run(f"cd {pattern}")
    assert result.exit_code == 0, result
    assert term.state.cwd == (home / directory).as_uri()
    assert term.state.cwd.endswith(quoted)


NOTHING = {
    "bash": ["", "   ", " \t ", "\r", "# a comment"],
    "zsh": ["", "   ", " \t ", "\r"],  # (``#`` is a command without interactive_comments)
    "fish": ["", "\r"],  # (fish refuses a TAB, and reports a blank or comment line run: 0)
}


@pytest.mark.parametrize("name", SHELLS)
async def test_a_line_that_runs_nothing_is_not_called_a_syntax_error(
    name: str, tmp_path: Path
) -> None:
    """An empty, blank or comment line the shell does not run is "not run" with no
    exit code, and its note says why, not "a syntax error?" (probe N finding 10); a
    syntax error keeps its note."""
    async with terminal(name, tmp_path / "home") as term:
        with trio.fail_after(TIMEOUT * 3):
            nothing = [await term.run(line) for line in NOTHING[name]]
            error = await term.run("echo $((1+2))" if name == "fish" else "fi")
            after = await term.run("echo next")
    for result in nothing:
        assert result.exit_code is None, result
        assert result.note.startswith("not run: the line runs nothing"), result
    assert error.exit_code is None and "not run" in error.note, error
    assert "syntax error" in error.note, error
    assert (after.output, after.exit_code) == ("next\n", 0)


@pytest.mark.parametrize("name", SHELLS)
async def test_a_directory_named_with_a_byte_not_utf8_is_the_cwd(name: str, tmp_path: Path) -> None:
    """A directory whose name holds a byte that is not UTF-8 is the cwd as it is:
    ``%FF`` in the URI, not U+FFFD's ``%EF%BF%BD``, which names a directory that does
    not exist (probe N finding 8)."""
    home = tmp_path / "home"
    home.mkdir()
    os.mkdir(os.fsencode(home) + b"/bad\xffx")
    async with terminal(name, home) as term:
        with trio.fail_after(TIMEOUT):
            result = await term.run("cd bad*x")
    assert result.exit_code == 0, result
    assert term.state.cwd == (home / os.fsdecode(b"bad\xffx")).as_uri()
    assert term.state.cwd.endswith("/bad%FFx")
