"""A command result as a model reads it: plain text plus the same facts as structured data.

Why a module of its own: the text a tool returns is what a model acts on, so
every outcome that changes what it should do next — the exit code, a cut in
the middle of the output, a prompt waiting for an answer, a timeout, a command
still running, processes left behind — is stated in words on a line of its own,
with the next useful call, never only implied by a missing exit code. The
structured form carries the same facts for clients that read
``structuredContent`` (its schema is :data:`ahp.mcp.tools.COMMAND_RESULT_SCHEMA`).

Pure: no I/O, no Trio.
"""

from __future__ import annotations

import re
from typing import Any, Final

from ahp.mcp.contract import Result
from ahp.protocol.state import TERMINAL_SCHEME
from ahp.protocol.uri import file_uri_to_path

__all__ = ["cwd_text", "display_name", "format_result", "result_data", "tail_text"]

#: A footer line starts with this, so output and our remarks cannot be confused.
MARK: Final = "──"


#: A terminal's short name (``ahp-terminal:/<name>``); other URIs are shown whole.
NAME: Final = re.compile(r"[A-Za-z0-9._-]{1,64}")


def display_name(uri: str) -> str:
    """``ahp-terminal:/main`` -> ``main``; a URI without such a short name is shown whole,
    so that what a model is shown is always a name it can pass back."""
    prefix = TERMINAL_SCHEME + "/"
    rest = uri[len(prefix) :]
    return rest if uri.startswith(prefix) and NAME.fullmatch(rest) else uri


def cwd_text(cwd: str | None) -> str | None:
    """A terminal's reported cwd (a ``file://`` URI) as a path, when it reads as one."""
    if cwd is None or not cwd.startswith("file:"):
        return cwd
    try:
        return file_uri_to_path(cwd)
    except ValueError:
        return cwd


def _seconds(ms: int) -> str:
    return f"{ms / 1000:.1f} s"


def tail_text(text: str, limit: int) -> tuple[str, int]:
    """The last ``limit`` UTF-8 bytes of ``text`` (cut at a line start when one is near),
    and how many bytes were dropped."""
    data = text.encode("utf-8", "surrogatepass")
    if len(data) <= limit:
        return text, 0
    kept = data[len(data) - limit :]
    newline = kept.find(b"\n")
    if 0 <= newline < min(200, len(kept) - 1):
        kept = kept[newline + 1 :]
    return kept.decode("utf-8", "ignore"), len(data) - len(kept)


def status_lines(result: Result, terminal: str) -> list[str]:
    """The remarks about ``result`` that follow its output, one fact per line."""
    cid = result.command_id
    lines: list[str] = []
    if result.truncated:
        lines.append(
            f"output truncated: {result.omitted_bytes} bytes ({result.omitted_lines} lines) "
            "left out of the middle; the start and the end are shown"
        )
    status = result.status
    took = _seconds(result.duration_ms)
    if status == "finished":
        lines.append(f"exit code {result.exit_code} · {took}")
    elif status == "running":
        lines.append(
            f"STILL RUNNING after {took} (command_id {cid}); it keeps running. Next: "
            f'read_output/wait_command(command_id="{cid}"), send_input, interrupt or '
            "kill_command"
        )
    elif status == "waiting_for_input":
        lines.append(
            f"WAITING FOR INPUT after {took}: the command is blocked reading the terminal "
            f'(the prompt is above). Answer with send_input(command_id="{cid}", text="…", '
            'keys=["enter"], wait=30), or interrupt it'
        )
    elif status == "timed_out":
        code = "" if result.exit_code is None else f"; exit code {result.exit_code}"
        lines.append(f"TIMED OUT after {took}: interrupted with Ctrl-C{code}")
    elif status == "interrupted":
        code = "" if result.exit_code is None else f"; exit code {result.exit_code}"
        lines.append(f"INTERRUPTED after {took}{code}")
    elif status == "killed":
        lines.append(f"KILLED after {took} (its process group got SIGKILL)")
    elif status == "shell_exited":
        code = "" if result.exit_code is None else f" with code {result.exit_code}"
        lines.append(
            f"the terminal's shell EXITED{code} after {took}; run_command in terminal "
            f"{terminal!r} starts a new one"
        )
    else:
        lines.append(f"status {status}, exit code {result.exit_code} · {took}")
    if result.alternate_screen:
        if status in ("running", "waiting_for_input"):
            lines.append(
                "the command uses the full-screen (alternate) display, which the output above "
                f'leaves out: read_screen(terminal="{terminal}") shows it'
            )
        else:
            lines.append(
                "the command used the full-screen (alternate) display; what it showed there "
                "is not in the output above"
            )
    for process in result.background:
        lines.append(f"left running in the background: pid {process.pid} `{process.command_line}`")
    return lines


def format_result(result: Result, terminal: str, command: str | None = None) -> str:
    """The text of a command tool's answer: header, output, remarks."""
    header = f"$ {command if command is not None else result.command_line}"
    where = f"{MARK} terminal {terminal!r}, command_id {result.command_id}"
    output = result.output.rstrip("\n")
    parts = [header, where]
    if output:
        parts.append(output)
    else:
        parts.append("(no output)")
    parts.extend(f"{MARK} {line}" for line in status_lines(result, terminal))
    return "\n".join(parts)


def result_data(result: Result, terminal: str, command: str | None = None) -> dict[str, Any]:
    """The structured form of a result (fits ``COMMAND_RESULT_SCHEMA``)."""
    return {
        "terminal": terminal,
        "command_id": result.command_id,
        "command": command if command is not None else result.command_line,
        "status": result.status,
        "exit_code": result.exit_code,
        "duration_ms": result.duration_ms,
        "output": result.output,
        "truncated": result.truncated,
        "omitted_bytes": result.omitted_bytes,
        "omitted_lines": result.omitted_lines,
        "timed_out": result.timed_out,
        "waiting_for_input": result.waiting_for_input,
        "alternate_screen": result.alternate_screen,
        "shell_exited": result.shell_exited,
        "background": [{"pid": p.pid, "command_line": p.command_line} for p in result.background],
    }
