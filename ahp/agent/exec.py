"""Non-interactive execution beside the pty: :func:`exec_command` (``host.exec``).

Why: an agent's build, test or ``git`` command does not need a terminal, and a
terminal is what lets it hang (a prompt, a pager, an editor) and mixes its two
streams. VS Code's agent host runs such commands as non-interactive child
processes and shows them as ``isPty: false`` output terminals; this offers the
same: the command runs with stdin at ``/dev/null`` (a read ends at once: it cannot
wait on a prompt), its stdout and stderr kept apart, and the result is the same
:class:`~ahp.agent.CommandResult` as a terminal command's, with the same budgets
(:class:`~ahp.agent.budget.OutputBudget`: head, tail, exact counts), plus ``stderr`` and
the exact exit code or ``signal``.

How: the command is the process of a terminal of its own, spawned on pipes
(``use_pty=False``, ``stdin_closed``, ``stderr_apart``: see :mod:`ahp.pty.launch`).
The terminal's read tasks read stdout and stderr and publish both, in the order
they arrive, as any terminal's output, so an AHP client sees an ``isPty: false``
terminal in the catalogue, its ``terminal/data``, and ``terminal/exited`` with the
exit code once the process ended and every byte was published. The read tasks also
hand each batch to this module (the terminal's ``on_output``), which renders each
stream (:class:`~ahp.agent.render.LineRenderer`, so ``\\r`` progress lines show as
their last state) into its own budget.

Buffering: per stream one incremental UTF-8 decoder, one renderer window (one
screen of lines) and one budget (its head and a retained tail of at most
:data:`~ahp.agent.budget.RETAINED_OUTPUT_BYTES`), plus the most recent
``head_bytes + tail_bytes`` raw bytes of stdout for ``raw_output``. The callback
runs inside the read tasks and never blocks.

Cancellation and ownership: the terminal belongs to the host. When ``timeout``
passes, or the caller is cancelled, the process group gets ``SIGKILL`` and the
process is reaped before :func:`exec_command` returns or raises (the wait is
shielded, bounded by :data:`KILL_WAIT`, then the terminal is disposed). A finished
terminal stays in the catalogue, showing how it ended, until
:data:`EXEC_TERMINALS_KEPT` later runs of the same host have finished (it is then
disposed), or the host closes.
"""

from __future__ import annotations

import codecs
import itertools
import shlex
import signal
import time
import weakref
from collections import deque
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Final

import trio

from ahp.agent.budget import DEFAULT_HEAD_BYTES, DEFAULT_TAIL_BYTES, BudgetedText, OutputBudget
from ahp.agent.render import LineRenderer
from ahp.agent.result import CommandResult
from ahp.reducers.core import MAX_TITLE

if TYPE_CHECKING:
    from ahp.engine import Host, Terminal

__all__ = ["EXEC_TERMINALS_KEPT", "KILL_WAIT", "exec_command"]

#: Finished exec terminals a host keeps in its catalogue (the oldest is disposed beyond).
EXEC_TERMINALS_KEPT: Final = 8
#: Longest wait (seconds) for a process to be reaped after its group got ``SIGKILL``.
KILL_WAIT: Final = 10.0
#: The renderer's window: wide, so that long lines of a log are not wrapped and joined.
_COLS: Final = 500

_counter = itertools.count(1)
#: Per host, the URIs of its finished exec terminals, oldest first.
_finished: weakref.WeakKeyDictionary[Host, deque[str]] = weakref.WeakKeyDictionary()


class _Stream:
    """One stream's decoder, renderer and budget (see the module doc)."""

    def __init__(self, head_bytes: int, tail_bytes: int) -> None:
        self.budget = OutputBudget(head_bytes, tail_bytes)
        self._renderer = LineRenderer(self.budget.add, cols=_COLS)
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")

    def feed(self, data: bytes) -> None:
        # A pipe has no line discipline: a newline is a line feed *and* a return.
        self._renderer.feed(self._decoder.decode(data).replace("\n", "\r\n"))

    def finish(self) -> BudgetedText:
        """The stream within its budget (what is still in the renderer's window included)."""
        tail = self._decoder.decode(b"", final=True)
        if tail:
            self._renderer.feed(tail.replace("\n", "\r\n"))
        live = self._renderer.lines()
        while live and not live[-1]:
            live.pop()
        return self.budget.render(live)


class _Collector:
    """The terminal's ``on_output``: both streams into their budgets, stdout's raw tail."""

    def __init__(self, head_bytes: int, tail_bytes: int) -> None:
        self.stdout = _Stream(head_bytes, tail_bytes)
        self.stderr = _Stream(head_bytes, tail_bytes)
        self._raw_limit = max(1, head_bytes + tail_bytes)
        self._raw = bytearray()

    def __call__(self, is_stderr: bool, data: bytes) -> None:
        if is_stderr:
            self.stderr.feed(data)
            return
        self.stdout.feed(data)
        self._raw += data
        if len(self._raw) > 2 * self._raw_limit:
            del self._raw[: len(self._raw) - self._raw_limit]

    def raw_output(self) -> str:
        return bytes(self._raw[-self._raw_limit :]).decode("utf-8", "replace")


def _argv(command: str | Sequence[str]) -> tuple[tuple[str, ...], str]:
    """The argv to run and the command line to report."""
    if isinstance(command, str):
        if not command.strip():
            raise ValueError("command must not be empty")
        return ("/bin/sh", "-c", command), command
    argv = tuple(command)
    if not argv:
        raise ValueError("argv must not be empty")
    return argv, shlex.join(argv)


async def _kill_and_reap(host: Host, term: Terminal) -> None:
    """SIGKILL the process group, wait (shielded, bounded) for the published exit."""
    with trio.CancelScope(shield=True):
        term.signal_process(signal.SIGKILL)
        with trio.move_on_after(KILL_WAIT):
            await term.exited.wait()
        if not term.exited.is_set() and term.uri in host:
            await host.dispose(term.uri)  # terminate(): escalates, reaps, closes every fd


async def _retire(host: Host, uri: str) -> None:
    """Keep the finished terminal listed; dispose the oldest beyond the bound."""
    kept = _finished.setdefault(host, deque())
    kept.append(uri)
    while len(kept) > EXEC_TERMINALS_KEPT:
        old = kept.popleft()
        if old in host:
            await host.dispose(old)


async def exec_command(
    host: Host,
    command: str | Sequence[str],
    *,
    cwd: str | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float | None = None,
    head_bytes: int = DEFAULT_HEAD_BYTES,
    tail_bytes: int = DEFAULT_TAIL_BYTES,
    name: str | None = None,
    uri: str | None = None,
) -> CommandResult:
    """Run ``command`` without a terminal and return its :class:`~ahp.agent.CommandResult`.

    Args:
        command: an argv (run as is, looked up on ``PATH``) or a command line (run by
            ``/bin/sh -c``).
        cwd: working directory (absolute path or ``file://`` URI; default: home).
        env: variables added to the environment (this process's, plus
            ``ahp.pty.environment.NONINTERACTIVE_ENV``: no pagers, no credential prompts).
        timeout: seconds until the process group is killed (status ``"timed_out"``).
        head_bytes, tail_bytes: the budget of ``output`` and of ``stderr`` each.
        name: the terminal's title (default: the command line, cut to fit).
        uri: the terminal's URI (default: a fresh ``ahp-terminal:/exec-<n>``).

    Returns:
        ``status`` is ``"finished"`` (``exit_code`` set), ``"killed"`` (a signal ended
        it: ``signal`` names it, ``exit_code`` is ``None``) or ``"timed_out"``;
        ``output`` is stdout and ``stderr`` stderr, each rendered within the budget;
        ``raw_output`` is stdout's most recent ``head_bytes + tail_bytes`` bytes.

    Raises:
        ahp.pty.SpawnError: the process could not be started (bad ``cwd``, a program
            not on ``PATH``); nothing is left behind.
        ValueError: an empty command, or a negative budget.

    Cancellation: the process group is killed and the process reaped before the
    cancellation propagates.
    """
    argv, line = _argv(command)
    if head_bytes < 0 or tail_bytes < 0:
        raise ValueError("head_bytes and tail_bytes must not be negative")
    collector = _Collector(head_bytes, tail_bytes)
    started = time.monotonic()
    term = await host.create_terminal(
        uri or f"ahp-terminal:/exec-{next(_counter)}",
        name=name if name is not None else line[:MAX_TITLE],
        argv=argv,
        cwd=cwd,
        env=env,
        use_pty=False,
        stdin_closed=True,
        stderr_apart=True,
        on_output=collector,
    )
    timed_out = False
    try:
        with trio.move_on_after(timeout if timeout is not None else float("inf")) as scope:
            await term.exited.wait()
        if scope.cancelled_caught:
            timed_out = True
            await _kill_and_reap(host, term)
    except BaseException:
        await _kill_and_reap(host, term)
        raise
    returncode = term.returncode
    await _retire(host, term.uri)
    rendered = collector.stdout.finish()
    if timed_out:
        status = "timed_out"
    elif returncode is not None and returncode < 0:
        status = "killed"
    else:
        status = "finished"
    signum = -returncode if returncode is not None and returncode < 0 else None
    return CommandResult(
        command_line=line,
        status=status,
        output=rendered.text,
        raw_output=collector.raw_output(),
        exit_code=returncode if returncode is not None and returncode >= 0 else None,
        duration_ms=int((time.monotonic() - started) * 1000),
        truncated=rendered.truncated,
        omitted_bytes=rendered.omitted_bytes,
        omitted_lines=rendered.omitted_lines,
        total_bytes=rendered.total_bytes,
        total_lines=rendered.total_lines,
        timed_out=timed_out,
        waiting_for_input=False,
        alternate_screen=False,
        shell_exited=False,
        background=(),
        command_id=term.uri,
        stderr=collector.stderr.finish().text,
        signal=_signal_name(signum) if signum is not None else None,
    )


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:  # a real-time signal has no name of its own
        return f"SIG{signum}"
