"""A command result as a model reads it: one text, each fact stated once.

Why a module of its own: the text a tool returns is what a model acts on, so
every outcome that changes what it should do next — the exit code, a cut in
the middle of the output, a prompt waiting for an answer, a timeout, a command
still running, processes left behind — is stated in words on a line of its own,
with the next useful call, never only implied by a missing exit code.

What an answer costs is what the model reads, so each answer carries the output
once and only what the model has not seen: the command's first line instead of
the whole command it typed (a heredoc's body is not sent back), only the output
new since the last answer about the command (:class:`Shown`; the whole on
request), the terminal's echo of multi-line typed text left out
(:func:`elide_echo`), and the long hints of the first answer shortened in the
follow-ups. The structured form (:func:`result_data`, schema
:data:`ahp.mcp.tools.COMMAND_RESULT_SCHEMA`) carries the same facts for
``--structured`` clients; ``docs/mcp.md`` says why it is not sent by default.

Pure: no I/O, no Trio.
"""

from __future__ import annotations

import os
import re
from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING, Any, Final

import attrs

from ahp.agent.budget import OutputBudget
from ahp.mcp.contract import Background, Evidence, Result
from ahp.mcp.output import ToolError, ToolOutput
from ahp.mcp.tools import NAME_PATTERN_TEXT
from ahp.protocol.state import TERMINAL_SCHEME
from ahp.protocol.uri import file_uri_to_path

if TYPE_CHECKING:
    from ahp.agent.command import CommandResult

__all__ = [
    "ECHO_KEEP_LINES",
    "HEADER_CHARS",
    "Shown",
    "background_lines",
    "budget_text",
    "command_header",
    "cwd_text",
    "display_name",
    "elide_echo",
    "exec_output",
    "format_result",
    "result_data",
    "terminal_uri",
    "waiting_reason",
]

#: A footer line starts with this, so output and our remarks cannot be confused.
MARK: Final = "──"
#: The ``$ command`` line of an answer shows at most this many characters of the
#: command's first line (the rest, and further lines, are counted, not repeated).
HEADER_CHARS: Final = 160
#: Typed text of more lines than this has its echo left out of the answer (the first
#: echoed line stays, to show where it went).
ECHO_KEEP_LINES: Final = 2
#: The echo of typed text is looked for from the start of the new output up to this line.
ECHO_SEARCH_LINES: Final = 3


#: A terminal's short name (``ahp-terminal:/<name>``); other URIs are shown whole.
NAME: Final = re.compile(r"[A-Za-z0-9._-]{1,64}")


def display_name(uri: str) -> str:
    """``ahp-terminal:/main`` -> ``main``; a URI without such a short name is shown whole,
    so that what a model is shown is always a name it can pass back."""
    prefix = TERMINAL_SCHEME + "/"
    rest = uri[len(prefix) :]
    return rest if uri.startswith(prefix) and NAME.fullmatch(rest) else uri


def terminal_uri(name: str) -> str:
    """The terminal URI for a name the model gave (a bare name or an ``ahp-terminal:`` URI)."""
    if name.startswith(TERMINAL_SCHEME):
        # A URI as listed (terminals made by other clients may use other characters).
        rest = name[len(TERMINAL_SCHEME) :]
        if rest.strip("/") and rest.isprintable() and not any(c.isspace() for c in rest):
            return name
    elif NAME.fullmatch(name):
        return f"{TERMINAL_SCHEME}/{name}"
    raise ToolError(f"bad terminal name {name!r}: use {NAME_PATTERN_TEXT}")


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


@attrs.frozen
class Shown:
    """What one answer shows of a command's output.

    Attributes:
        text: the output shown (lines ending in ``\\n``), within the call's budget.
        truncated: the budget cut ``omitted_bytes`` in ``omitted_lines`` from its middle.
        new_only: only what is new since the last answer about the command.
        echo_lines: lines of typed text, echoed by the terminal, left out of ``text``.
    """

    text: str
    truncated: bool = False
    omitted_bytes: int = 0
    omitted_lines: int = 0
    new_only: bool = False
    echo_lines: int = 0

    @classmethod
    def whole(cls, result: Result) -> Shown:
        """The result's own (budgeted) output."""
        return cls(result.output, result.truncated, result.omitted_bytes, result.omitted_lines)


def budget_text(text: str, head_bytes: int, tail_bytes: int) -> Shown:
    """``text`` (lines ending in ``\\n``) within a head + tail budget, with exact counts
    of what the cut leaves out (see :class:`ahp.agent.budget.OutputBudget`)."""
    if len(text.encode("utf-8", "surrogatepass")) <= head_bytes + tail_bytes:
        return Shown(text, new_only=True)
    budget = OutputBudget(head_bytes, tail_bytes, retain_bytes=max(1, head_bytes + tail_bytes))
    lines = text.split("\n")
    last = lines.pop()  # "" after a final newline, else an unfinished line
    for line in lines:
        budget.add(line)
    cut = budget.render([last] if last else [])
    return Shown(cut.text, cut.truncated, cut.omitted_bytes, cut.omitted_lines, new_only=True)


def _typed_lines(typed: str) -> list[str]:
    lines = re.split(r"\r\n|\r|\n", typed)
    while lines and not lines[-1].strip():
        lines.pop()
    return [line.rstrip() for line in lines]


def elide_echo(output: str, typed: str) -> tuple[str, int]:
    """``output`` without the terminal's echo of ``typed`` when it spans more than
    :data:`ECHO_KEEP_LINES` lines, and how many echoed lines were left out.

    The echo is the run of output lines, starting within the first
    :data:`ECHO_SEARCH_LINES`, that end with the typed lines in order (a prompt such
    as ``> `` or ``... `` may precede each). Its first line stays; the rest become
    one remark line. Output that does not echo the text is returned as it is."""
    wanted = _typed_lines(typed)
    if len(wanted) <= ECHO_KEEP_LINES:
        return output, 0
    lines = output.split("\n")
    for start in range(min(ECHO_SEARCH_LINES, len(lines))):
        count = 0
        while (
            count < len(wanted)
            and start + count < len(lines)
            and lines[start + count].rstrip().endswith(wanted[count])
        ):
            count += 1
        if count > ECHO_KEEP_LINES:
            left_out = count - 1
            remark = f"{MARK} [{left_out} more lines you typed, echoed by the terminal]"
            kept = [*lines[: start + 1], remark, *lines[start + count :]]
            return "\n".join(kept), left_out
    return output, 0


def command_header(command: str) -> str:
    """``$ `` and the command's first line, cut at :data:`HEADER_CHARS`; what is left
    out (further lines, as a heredoc's body, or the rest of a long line) is counted.
    ``\r\n`` and a lone ``\r`` end lines, as in the command typed."""
    command = command.replace("\r\n", "\n").replace("\r", "\n")
    first, _, rest = command.partition("\n")
    more: list[str] = []
    if len(first) > HEADER_CHARS:
        more.append(f"{len(first) - HEADER_CHARS} more characters")
        first = first[:HEADER_CHARS]
    if rest.strip("\n"):
        lines = rest.rstrip("\n").count("\n") + 1
        more.append(f"{lines} more line{'s' if lines != 1 else ''} ({len(rest)} characters)")
    suffix = f" {MARK} [{', '.join(more)} not repeated]" if more else ""
    return f"$ {first}{suffix}"


def _secret(evidence: Evidence | None) -> bool:
    """A blocking read with echo off: a password prompt (a line editor such as
    readline also turns echo off, but polls and echoes what is typed itself; the
    shell's own, reading the rest of an incomplete line, reads so too: not one)."""
    return (
        evidence is not None
        and not evidence.echo
        and evidence.source == "procfs"
        and not evidence.continuation
    )


def _closing(evidence: Evidence | None) -> str:
    """`` and the `}` that closes its group`` for a grouped command of several lines."""
    end = evidence.group_end if evidence is not None else ""
    return f" and then a line `{end}` that closes its group" if end else ""


def _incomplete(evidence: Evidence | None) -> bool:
    """The shell reads the rest of the command line: nothing has run yet."""
    return evidence is not None and evidence.continuation


def waiting_reason(evidence: Evidence | None) -> str:
    """Who waits for input and for what, from the evidence (the prompt otherwise)."""
    if evidence is None:
        return "the command is blocked reading the terminal (the prompt is above)"
    if _incomplete(evidence):
        return (
            "the command line is incomplete, nothing of it has run: the shell reads its rest "
            "(an unclosed quote or bracket, a trailing backslash or operator such as && or |, "
            "a heredoc without its end line, an unclosed block)"
            + (
                f"; its lines were typed inside a group, to run as one command, and the "
                f"group's closing `{evidence.group_end}` line went into the unfinished part (a "
                f"heredoc's body, a string): send a line `{evidence.group_end}` after the rest"
                if evidence.group_end
                else ""
            )
        )
    who = "the command"
    if evidence.programs and evidence.programs[0].split():
        who = os.path.basename(evidence.programs[0].split()[0])[:HEADER_CHARS] or who
    if evidence.full_screen:
        return f"{who} waits for keys on a full-screen display (read_screen shows it)"
    if _secret(evidence):
        return f"{who} reads the terminal with echo off (a password? what is typed is not shown)"
    return f"{who} reads from the terminal (the prompt, if any, is above)"


def status_lines(
    result: Result,
    terminal: str,
    *,
    brief: bool = False,
    evidence: Evidence | None = None,
    stopped: Collection[int] = (),
) -> list[str]:
    """The remarks about ``result`` that follow its output, one fact per line.

    ``brief``: a follow-up answer, whose reader was given the next steps already.
    ``evidence``: why the command is believed to wait for input (its handle's).
    ``stopped``: pids of ``result.background`` that are stopped (Ctrl-Z), not running."""
    cid = result.command_id
    lines: list[str] = []
    if result.truncated:
        lines.append(
            f"output truncated: {result.omitted_bytes} bytes ({result.omitted_lines} lines) "
            "left out of the middle; the start and the end are shown"
        )
    status = result.status
    took = _seconds(result.duration_ms)
    if status == "finished" and result.exit_code is None:
        # Over without an exit code (not run, command detection lost): the note says why.
        lines.append(f"FINISHED after {took}, no exit code: {result.note or 'unknown'}")
    elif status == "finished":
        lines.append(f"exit code {result.exit_code} · {took}")
    elif status == "running" and result.timed_out:
        lines.append(f"STILL RUNNING after {took} (command_id {cid}): {result.note}")
    elif status == "running" and brief:
        lines.append(f"STILL RUNNING after {took}")
    elif status == "running":
        lines.append(
            f"STILL RUNNING after {took} (command_id {cid}); it keeps running. Next: "
            f'read_output/wait_command(command_id="{cid}"), send_input, interrupt or '
            "kill_command"
        )
    elif status == "waiting_for_input" and brief and _incomplete(evidence):
        lines.append(
            f"WAITING FOR INPUT after {took}: the command line is incomplete, the shell reads "
            f"its rest{_closing(evidence)}: send it with send_input, or drop the line with "
            "interrupt"
        )
    elif status == "waiting_for_input" and _incomplete(evidence):
        lines.append(
            f"WAITING FOR INPUT after {took}: {waiting_reason(evidence)}. Send the rest with "
            f'send_input(command_id="{cid}", text="…", keys=["enter"], wait=30), or drop the '
            "line with interrupt"
        )
    elif status == "waiting_for_input" and brief:
        echo = " (echo off)" if _secret(evidence) else ""
        lines.append(f"WAITING FOR INPUT{echo} after {took}: answer with send_input, or interrupt")
    elif status == "waiting_for_input":
        lines.append(
            f"WAITING FOR INPUT after {took}: {waiting_reason(evidence)}. Answer with "
            f'send_input(command_id="{cid}", text="…", keys=["enter"], wait=30), or interrupt it'
        )
    elif status == "timed_out":
        code = "" if result.exit_code is None else f"; exit code {result.exit_code}"
        how = result.note or "interrupted with Ctrl-C"
        lines.append(f"TIMED OUT after {took}: {how}{code}")
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
    elif status == "lost":
        why = result.note or "the command can no longer be followed"
        lines.append(
            f"LOST after {took}: {why}; it may still run in terminal {terminal!r} "
            "(list_terminals, read_screen)"
        )
    elif status == "refused":
        holder = result.holder
        what = f" by `{holder.command_line}`" if holder is not None else ""
        lines.append(f"REFUSED: not typed, the terminal was busy{what}")
    else:
        lines.append(f"status {status}, exit code {result.exit_code} · {took}")
    if result.alternate_screen:
        if status in ("running", "waiting_for_input"):
            lines.append(
                f'full-screen (alternate) display: read_screen(terminal="{terminal}") shows it'
                if brief
                else "the command uses the full-screen (alternate) display, which the output "
                f'above leaves out: read_screen(terminal="{terminal}") shows it'
            )
        else:
            lines.append(
                "the command used the full-screen (alternate) display"
                + (
                    " (not in the output)"
                    if brief
                    else "; what it showed there is not in the output above"
                )
            )
    lines += background_lines(result.background, stopped, terminal)
    return lines


def background_lines(
    background: Sequence[Background], stopped: Collection[int], terminal: str | None
) -> list[str]:
    """One remark per process a command left behind: running, or stopped (``stopped``:
    their pids) with how to go on (``terminal``: the shell whose job it is)."""
    lines = []
    for process in background:
        what = f"pid {process.pid} `{process.command_line}`"
        if process.pid not in stopped:
            lines.append(f"left running in the background: {what}")
        elif terminal is not None:
            lines.append(
                f"left STOPPED (suspended, e.g. by Ctrl-Z; not running): {what}; `fg` in "
                f"terminal {terminal!r} resumes it, `kill %%` ends it"
            )
        else:
            lines.append(f"left STOPPED (suspended by a signal; not running): {what}")
    return lines


def format_result(
    result: Result,
    terminal: str,
    command: str | None = None,
    shown: Shown | None = None,
    *,
    first: bool = True,
    notes: tuple[str, ...] = (),
    evidence: Evidence | None = None,
    stopped: Collection[int] = (),
) -> str:
    """The text of a command tool's answer: header, output, remarks.

    ``first``: the answer that started the command (``$ command`` and the full hints);
    a follow-up has a one-line header and brief hints. ``shown``: what of the output
    to show (default: the result's own budgeted output). ``notes``: remarks about
    the call itself (a clamped argument). ``stopped``: as for :func:`status_lines`."""
    if shown is None:
        shown = Shown.whole(result)
    cid = result.command_id
    if first:
        parts = [
            command_header(command if command is not None else result.command_line),
            f"{MARK} terminal {terminal!r}, command_id {cid}",
        ]
    else:
        what = "new output" if shown.new_only else "output"
        parts = [f"{MARK} {cid} in terminal {terminal!r}, {what}:"]
    output = shown.text.rstrip("\n")
    if output:
        parts.append(output)
    else:
        parts.append("(no new output)" if shown.new_only else "(no output)")
    remarks = status_lines(result, terminal, brief=not first, evidence=evidence, stopped=stopped)
    # The result's own truncation is about its budgeted output, not what this answer shows.
    remarks = [r for r in remarks if not r.startswith("output truncated")]
    if shown.truncated:
        remarks.insert(
            0,
            f"output truncated: {shown.omitted_bytes} bytes ({shown.omitted_lines} lines) left "
            "out of the middle; the start and the end are shown",
        )
    parts.extend(f"{MARK} {line}" for line in (*remarks, *notes))
    return "\n".join(parts)


def result_data(
    result: Result, terminal: str, command: str | None = None, shown: Shown | None = None
) -> dict[str, Any]:
    """The structured form of a result (fits ``COMMAND_RESULT_SCHEMA``)."""
    if shown is None:
        shown = Shown.whole(result)
    return {
        "terminal": terminal,
        "command_id": result.command_id,
        "command": command if command is not None else result.command_line,
        "status": result.status,
        "exit_code": result.exit_code,
        "duration_ms": result.duration_ms,
        "output": shown.text,
        "new_only": shown.new_only,
        "truncated": shown.truncated,
        "omitted_bytes": shown.omitted_bytes,
        "omitted_lines": shown.omitted_lines,
        "echo_lines": shown.echo_lines,
        "timed_out": result.timed_out,
        "waiting_for_input": result.waiting_for_input,
        "alternate_screen": result.alternate_screen,
        "shell_exited": result.shell_exited,
        "background": [{"pid": p.pid, "command_line": p.command_line} for p in result.background],
    }


def exec_output(
    result: CommandResult, command: str, *, stopped: Collection[int] = ()
) -> ToolOutput:
    """The answer of run_command with ``pty: false``: stdout, stderr, how it ended.
    ``stopped``: pids of ``result.background`` that are stopped, not running."""
    name = display_name(result.command_id)
    parts = [command_header(command), f"{MARK} no terminal (pty false), command_id {name}"]
    parts.append(result.output.rstrip("\n") or "(no output)")
    if result.stderr:
        parts += [f"{MARK} stderr:", result.stderr.rstrip("\n")]
    took = f"{result.duration_ms / 1000:.1f} s"
    if result.status == "timed_out":
        ending = f"TIMED OUT after {took}: its process group got SIGKILL"
    elif result.signal is not None:
        ending = f"KILLED by {result.signal} after {took}"
    else:
        ending = f"exit code {result.exit_code} · {took}"
    remarks = [ending]
    if result.truncated:
        remarks.append(
            f"stdout truncated: {result.omitted_bytes} bytes ({result.omitted_lines} lines) "
            "left out of the middle; the start and the end are shown"
        )
    remarks += background_lines(result.background, stopped, None)
    parts += [f"{MARK} {r}" for r in remarks]
    data = result_data(result, name, command)
    data.update(stderr=result.stderr, signal=result.signal)
    return ToolOutput("\n".join(parts), data, headline=f"{command_header(command)}: {ending}")
