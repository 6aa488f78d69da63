"""The README and docs/ say what works: every code block marked runnable is run.

A fenced block preceded by the line ``<!-- runnable -->`` is run as it stands:
``python`` blocks by this interpreter (in a fresh temporary directory, the checkout
on ``PYTHONPATH``), ``sh`` blocks by ``bash -e``. ``<!-- runnable: server -->``
first starts ``python -m ahp serve --port 0`` and passes the URL it printed as the
block's first argument (``sys.argv[1]`` in Python, ``$1`` in sh). Each block must
exit 0 within :data:`BLOCK_TIMEOUT` seconds. Blocks without the marker (set-up
commands, fragments, transcripts) are not run; a test checks that there are some
runnable ones, so that the marker cannot silently disappear.
"""

from __future__ import annotations

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
