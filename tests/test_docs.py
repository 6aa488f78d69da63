"""The README and docs/ say what works: every code block marked runnable is run.

A fenced block preceded by the line ``<!-- runnable -->`` is run as it stands:
``python`` blocks by this interpreter (in a fresh temporary directory, the checkout
on ``PYTHONPATH``), ``sh`` blocks by ``bash -e``. ``<!-- runnable: server -->``
first starts ``python -m ahp serve --port 0`` and passes the URL it printed as the
block's first argument (``sys.argv[1]`` in Python, ``$1`` in sh). Each block must
exit 0 within :data:`BLOCK_TIMEOUT` seconds. Blocks without the marker (set-up
commands, fragments, transcripts) are not run; a test checks that there are some
runnable ones, so that the marker cannot silently disappear.

Claims that can be checked without running anything are checked against the code:
the command's name in the docs, the examples and every ``--help``, the paths the docs
quote and link, the MCP tools' parameters and a recorded answer, quoted bounds.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import trio

from tests.helpers import kill_and_reap

REPO = Path(__file__).resolve().parents[1]
#: Seconds one block may take.
BLOCK_TIMEOUT = 120
_BLOCK = re.compile(
    r"^<!-- runnable(?P<server>: server)? -->\n```(?P<lang>\w+)\n(?P<code>.*?)^```",
    re.MULTILINE | re.DOTALL,
)


def _documents() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def _blocks() -> list[tuple[str, str, str, bool]]:
    found = []
    for path in _documents():
        text = path.read_text()
        for match in _BLOCK.finditer(text):
            line = text[: match.start()].count("\n") + 2
            found.append(
                (
                    f"{path.relative_to(REPO)}:{line}",
                    match["lang"],
                    match["code"],
                    bool(match["server"]),
                )
            )
    return found


BLOCKS = _blocks()


def test_the_readme_has_runnable_blocks() -> None:
    assert any(where.startswith("README.md") for where, *_ in BLOCKS), BLOCKS


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("AHP_TOKEN", None)
    return env


async def _serve() -> tuple[trio.Process, str]:
    process = await trio.lowlevel.open_process(
        [sys.executable, "-m", "ahp", "serve", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=_env(),
    )
    assert process.stdout is not None
    printed = b""
    with trio.fail_after(30):
        while (found := re.search(rb"ws://[^\s'\"]+", printed)) is None:
            chunk = await process.stdout.receive_some(4096)
            assert chunk, f"serve exited before printing its URL: {printed!r}"
            printed += chunk
    return process, found[0].decode()


@pytest.mark.parametrize(("where", "lang", "code", "server"), BLOCKS, ids=[b[0] for b in BLOCKS])
async def test_a_runnable_block_runs(
    where: str, lang: str, code: str, server: bool, tmp_path: Path
) -> None:
    if lang == "python":
        argv = [sys.executable, "-c", code]
    elif lang in ("sh", "bash", "shell"):
        argv = ["bash", "-e", "-c", code, "block"]
    else:
        raise AssertionError(f"{where}: a runnable block must be python or sh, not {lang}")
    process: trio.Process | None = None
    try:
        if server:
            process, url = await _serve()
            argv.append(url)
        with trio.fail_after(BLOCK_TIMEOUT):
            done = await trio.run_process(
                argv,
                cwd=str(tmp_path),
                env=_env(),
                capture_stdout=True,
                capture_stderr=True,
                check=False,
                stdin=subprocess.DEVNULL,
            )
    finally:
        if process is not None:
            await kill_and_reap(process)
    assert done.returncode == 0, (where, done.stdout.decode(), done.stderr.decode())


# -- claims checked without running anything ---------------------------------------------------

#: A subcommand written as a command: ``python -m ahp run``, or a bare ``ahp run`` (no such
#: command is installed). ``ahp run:`` is a message's prefix, and ``/python -m ahp`` names
#: a venv's Python (``.venv/bin/python -m ahp``): both are left alone.
_SYSTEM_PYTHON_M_AHP = re.compile(r"(?<![\w/.-])python3? -m ahp\b(?!\.)")
_BARE_AHP_COMMAND = re.compile(
    r"(?<![\w/.-])ahp (?:serve|run|ls|exec|attach|rm|play|mcp|bench)\b(?!:)"
)
#: The image's entry point runs its own Python, which has the package (deploy/Dockerfile).
_IMAGE_ENTRY = "exec python -m ahp serve"


def _texts() -> list[tuple[str, str]]:
    paths = [*_documents(), *sorted((REPO / "examples").glob("*.py"))]
    return [(str(path.relative_to(REPO)), path.read_text()) for path in paths]


def test_docs_and_examples_write_commands_that_work_after_the_set_up() -> None:
    """Probe P: the docs said ``python -m ahp ...`` (the system's Python has no ``ahp``
    after the README's set-up, a venv not activated) and ``ahp run`` (not installed)."""
    found = []
    for where, written in _texts():
        text = written.replace(_IMAGE_ENTRY, "")
        for pattern in (_SYSTEM_PYTHON_M_AHP, _BARE_AHP_COMMAND):
            found += [
                (where, m[0], text[max(0, m.start() - 40) : m.end()])
                for m in pattern.finditer(text)
            ]
    assert not found, found


def test_every_help_text_names_the_installed_command() -> None:
    """Every ``--help`` (usage lines, the URL's "as printed by") says ``ahp-terminals``."""
    from ahp.cli import build_parser

    parser = build_parser()
    helps = {"": parser.format_help()}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps.update({name: sub.format_help() for name, sub in action.choices.items()})
    assert len(helps) > 8, sorted(helps)
    for name, text in helps.items():
        assert text.startswith(f"usage: ahp-terminals {name}".rstrip()), (name, text[:80])
        assert not _SYSTEM_PYTHON_M_AHP.search(text), (name, text)
        assert not _BARE_AHP_COMMAND.search(text), (name, text)


def test_the_readme_runs_nox_from_the_venv() -> None:
    """Probe P: ``nox -s tests`` as written failed (the set-up installs nox only in the venv)."""
    readme = (REPO / "README.md").read_text()
    assert not re.search(r"^[ \t]*nox -s", readme, re.MULTILINE)
    assert "    .venv/bin/pip install nox\n" in readme


def test_paths_and_links_in_the_docs_exist() -> None:
    """A repository path the docs quote (`` `docs/x.md` ``) or link exists (probe P:
    docs/protocol.md cited ``docs/ahp-1x.md``, which is in no clone)."""
    quoted = re.compile(r"`((?:docs|ahp|tests|benchmarks|deploy|examples)/[\w./-]*\w)`")
    link = re.compile(r"\]\(([^)\s#]+)(?:#[^)]*)?\)")
    missing = []
    for path in _documents():
        text = path.read_text()
        missing += [(path.name, m[1]) for m in quoted.finditer(text) if not (REPO / m[1]).exists()]
        missing += [
            (path.name, m[1])
            for m in link.finditer(text)
            if "://" not in m[1] and not (path.parent / m[1]).exists()
        ]
    assert not missing, missing


def test_the_mcp_tools_table_names_every_parameter() -> None:
    """Each tool's row in docs/mcp.md names each of its parameters (probe P: a guess of
    ``create_terminal {"name": …}`` for its ``terminal``)."""
    from ahp.mcp.tools import TOOLS

    rows = [
        line
        for line in (REPO / "docs" / "mcp.md").read_text().splitlines()
        if line.startswith("| `")
    ]
    for tool in TOOLS:
        row = next(r for r in rows if f"`{tool.name}`" in r.split("|")[1])
        for name in tool.input_schema["properties"]:
            assert re.search(rf"`{name}[`:]", row), (tool.name, name, row)


def test_the_mcp_session_shows_the_waiting_line_the_server_writes() -> None:
    """docs/mcp.md's recorded session, first answer: the remark is the one the server
    renders for a REPL blocked reading its terminal (probe P: an older wording)."""
    from ahp.agent import CommandResult, InputEvidence
    from ahp.mcp import render

    doc = (REPO / "docs" / "mcp.md").read_text()
    answer = doc.split('→ run_command {"command": "python3 -q"}\n', 1)[1].split("\n→ ", 1)[0]
    lines: list[str] = []
    for line in answer.splitlines():  # (long remark lines are wrapped in the doc)
        if line.startswith("     ") and lines:
            lines[-1] += " " + line.strip()
        else:
            lines.append(line.strip())
    shown = next(line for line in lines if line.startswith("── WAITING"))
    seconds = float(re.search(r"after ([\d.]+) s", shown)[1])  # type: ignore[index]
    command_id = re.search(r"cmd-[0-9a-f]+", shown)[0]  # type: ignore[index]
    result = CommandResult(
        command_line="python3 -q",
        status="waiting_for_input",
        output=">>> ",
        raw_output=">>> ",
        exit_code=None,
        duration_ms=round(seconds * 1000),
        truncated=False,
        omitted_bytes=0,
        omitted_lines=0,
        total_bytes=4,
        total_lines=1,
        timed_out=False,
        waiting_for_input=True,
        alternate_screen=False,
        shell_exited=False,
        background=(),
        command_id=command_id,
    )
    evidence = InputEvidence(readers=(1,), echo=True, source="procfs", programs=("python3 -q",))
    text = render.format_result(result, "main", evidence=evidence)
    assert shown in text.splitlines(), (shown, text)


def test_bounds_the_docs_quote_are_the_code_s() -> None:
    """The numbers the README and docs give for the exec entries and ``run``'s tail."""
    from ahp.client.commands.run import TAIL_BYTES
    from ahp.engine.exec import EXEC_TERMINALS_KEPT
    from ahp.server.clients import CLIENT_GRACE

    exec_doc = (REPO / "docs" / "exec.md").read_text()
    assert f"`EXEC_TERMINALS_KEPT` ({EXEC_TERMINALS_KEPT}) per server" in exec_doc
    assert f"forgotten {CLIENT_GRACE / 60:g} minutes later (`CLIENT_GRACE`)" in exec_doc
    readme = " ".join((REPO / "README.md").read_text().split())
    assert f"the last {EXEC_TERMINALS_KEPT} finished ones on a server are kept" in readme
    cli_doc = " ".join((REPO / "docs" / "cli.md").read_text().split())
    assert f"at most N/2 bytes and {TAIL_BYTES // 1024} KiB (`TAIL_BYTES`)" in cli_doc
