"""Non-interactive execution beside the pty: :func:`exec_command` (``ahp.exec_command``).

Why: an agent's build, test or ``git`` command does not need a terminal, and a
terminal is what lets it hang (a prompt, a pager, an editor) and mixes its two
streams. VS Code's agent host runs such commands as non-interactive child
processes and shows them as ``isPty: false`` output terminals; this offers the
same: the command runs with stdin at ``/dev/null`` (a read ends at once: it cannot
wait on a prompt), its stdout and stderr kept apart, and the result is the same
:class:`~ahp.agent.command.CommandResult` as a terminal command's, with the same budgets
(:class:`~ahp.agent.budget.OutputBudget`: head, tail, exact counts), plus ``stderr`` and
the exact exit code or ``signal``. A client runs it on a server with
:func:`ahp.client.exec.exec_remote`.

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
shielded, bounded by :data:`KILL_WAIT`, then the terminal is disposed), and what
is left of its session is killed too. After a normal exit, processes the command
left running in its session (``server &``) are listed in ``background`` and left
alone. A finished terminal stays in the catalogue, showing how it ended, until
:data:`EXEC_TERMINALS_KEPT` later runs of the same host have finished (it is then
disposed), or the host closes.
"""

from __future__ import annotations

import codecs
import functools
import itertools
import math
import shlex
import signal
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Final, TypedDict, Unpack

import trio

from ahp.agent.budget import DEFAULT_HEAD_BYTES, DEFAULT_TAIL_BYTES, BudgetedText, OutputBudget
from ahp.agent.command import CommandResult
from ahp.agent.occupants import BackgroundProcess
from ahp.agent.render import LineRenderer
from ahp.protocol.state import TerminalClaim
from ahp.pty import kill_session, procfs, session_members
from ahp.reducers.core import MAX_TITLE

if TYPE_CHECKING:
    from ahp.engine.host import Host
    from ahp.engine.terminal import Terminal

__all__ = [
    "EXEC_TERMINALS_KEPT",
    "KILL_WAIT",
    "MAX_BACKGROUND_REPORTED",
    "Exec",
    "ExecOptions",
    "exec_command",
    "find_exec",
    "release_kept",
    "start_exec",
]

#: Finished exec terminals a host keeps in its catalogue (the oldest is disposed beyond).
EXEC_TERMINALS_KEPT: Final = 8
#: Longest wait (seconds) for a process to be reaped after its group got ``SIGKILL``.
KILL_WAIT: Final = 10.0
#: Most leftover processes listed in ``background`` (the lowest pids).
MAX_BACKGROUND_REPORTED: Final = 64
#: The renderer's window: wide, so that long lines of a log are not wrapped and joined.
_COLS: Final = 500

_counter = itertools.count(1)


class _ExecBook:
    """One host's execs by terminal URI, held by the host (:attr:`Host.exec_book`) so
    that it is freed with it. (Three module-level maps keyed weakly by the host kept
    every host alive, with every kept output, after its ``open_host()`` ended: their
    values, the execs, hold the host.)"""

    __slots__ = ("finished", "running", "stale")

    def __init__(self) -> None:
        #: Execs whose process runs.
        self.running: dict[str, Exec] = {}
        #: Finished execs still listed, oldest first (at most EXEC_TERMINALS_KEPT).
        self.finished: dict[str, Exec] = {}
        #: Finished exec terminals pushed out of the kept ones, not yet disposed.
        self.stale: list[str] = []


def _fresh_uri(host: Host) -> str:
    """An ``ahp-terminal:/exec-<n>`` no terminal of ``host`` has (a client may have
    created the next one by that name: its exec would fail "already exists")."""
    while (uri := f"ahp-terminal:/exec-{next(_counter)}") in host:
        pass
    return uri


def _book(host: Host) -> _ExecBook:
    book = host.exec_book
    if not isinstance(book, _ExecBook):
        book = host.exec_book = _ExecBook()
    return book


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


def _kill_group(term: Terminal) -> None:
    term.signal_process(signal.SIGKILL)


async def _sweep_session(term: Terminal) -> None:
    """Kill what is left of the process's session (only once it is reaped: its sid is
    then still reserved and cannot name another session). A procfs scan and paced
    kills: in a worker thread, shielded (a thousand leftovers cost the loop nothing)."""
    if term.pid is not None and term.returncode is not None:
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(kill_session, term.pid)


def _left_running(term: Terminal) -> tuple[BackgroundProcess, ...]:
    """Processes of the command's session still running after it exited (``cmd &``)."""
    if term.pid is None:
        return ()
    pids = sorted(session_members(term.pid))[:MAX_BACKGROUND_REPORTED]
    return tuple(BackgroundProcess(pid, procfs.command_line(pid)) for pid in pids)


class Exec:
    """One started exec: its terminal, its collector, and its result once it ended.

    Made by :func:`start_exec`; the wait runs in the terminal's own nursery (so it ends
    when the terminal is disposed), and :attr:`done` is set once :attr:`result` is.
    """

    def __init__(
        self, host: Host, term: Terminal, line: str, collector: _Collector, started: float
    ) -> None:
        self.host = host
        self.term = term
        self.uri = term.uri
        self.line = line
        self._collector = collector
        self._started = started
        self.timed_out = False
        self.result: CommandResult | None = None
        self.done = trio.Event()
        #: Processes left running after a normal exit (scanned in a worker thread).
        self._background: tuple[BackgroundProcess, ...] = ()

    async def watch(self, timeout: float | None) -> None:
        """Wait for the exit (killing the group at ``timeout``), then finish; the
        terminal's task (see :meth:`ahp.engine.Terminal.spawn_task`): never raises."""
        term = self.term
        try:
            with trio.move_on_after(timeout if timeout is not None else math.inf) as scope:
                await term.exited.wait()
            if scope.cancelled_caught:
                self.timed_out = True
                _kill_group(term)
                with trio.move_on_after(KILL_WAIT):  # (never dispose from inside it)
                    await term.exited.wait()
                await _sweep_session(term)
            else:  # a procfs scan: off the loop (shielded: the result lists them)
                with trio.CancelScope(shield=True):
                    self._background = await trio.to_thread.run_sync(_left_running, term)
        finally:  # also when the terminal is disposed meanwhile (this task is cancelled)
            self.finish()
            _retire(self.host, self.uri)
        with trio.CancelScope(shield=True):
            await _dispose_stale(self.host)

    def finish(self) -> CommandResult:
        """The result from what was collected (once; synchronous: also on disposal)."""
        if self.result is not None:
            return self.result
        term = self.term
        returncode = term.returncode
        rendered = self._collector.stdout.finish()
        if self.timed_out:
            status = "timed_out"
        elif returncode is not None and returncode >= 0:
            status = "finished"
        else:
            status = "killed"  # a signal, or the terminal was disposed first
        signum = -returncode if returncode is not None and returncode < 0 else None
        self.result = CommandResult(
            command_line=self.line,
            status=status,
            output=rendered.text,
            raw_output=self._collector.raw_output(),
            exit_code=returncode if returncode is not None and returncode >= 0 else None,
            duration_ms=int((time.monotonic() - self._started) * 1000),
            truncated=rendered.truncated,
            omitted_bytes=rendered.omitted_bytes,
            omitted_lines=rendered.omitted_lines,
            total_bytes=rendered.total_bytes,
            total_lines=rendered.total_lines,
            timed_out=self.timed_out,
            waiting_for_input=False,
            alternate_screen=False,
            shell_exited=False,
            background=() if status != "finished" else self._background,
            command_id=self.uri,
            stderr=self._collector.stderr.finish().text,
            signal=_signal_name(signum) if signum is not None else None,
        )
        self.done.set()
        return self.result

    async def kill(self) -> None:
        """Kill the process group and wait (shielded, bounded by :data:`KILL_WAIT`) until
        it is reaped; dispose the terminal if it is not by then."""
        with trio.CancelScope(shield=True):
            _kill_group(self.term)
            with trio.move_on_after(KILL_WAIT):
                await self.term.exited.wait()
            if not self.term.exited.is_set() and self.uri in self.host:
                await self.host.dispose(self.uri)  # terminate(): escalates, reaps, closes
            await _sweep_session(self.term)
            self.finish()


def _retire(host: Host, uri: str) -> None:
    """The exec is over: keep it listed, mark the oldest beyond the bound for disposal."""
    book = _book(host)
    kept = book.finished
    done = book.running.pop(uri, None)
    if done is not None:
        kept[uri] = done
    while len(kept) > EXEC_TERMINALS_KEPT:
        old = next(iter(kept))
        del kept[old]
        book.stale.append(old)


async def _dispose_stale(host: Host) -> None:
    book = _book(host)
    stale, book.stale = book.stale, []
    for uri in stale:
        if uri in host:
            await host.dispose(uri)


async def release_kept(host: Host) -> bool:
    """Dispose the oldest finished exec terminal ``host`` still keeps (a limit on
    terminals is reached: kept results give way to new work); whether there was one."""
    book = _book(host)
    while book.finished:
        uri = next(iter(book.finished))
        del book.finished[uri]
        if uri in host:
            await host.dispose(uri)
            return True
    return False


def find_exec(host: Host, uri: str) -> Exec | None:
    """The exec of ``uri`` while it runs or is still kept (see :data:`EXEC_TERMINALS_KEPT`)."""
    book = _book(host)
    return book.running.get(uri) or book.finished.get(uri)


class ExecOptions(TypedDict, total=False):
    """The keyword options of :func:`exec_command` and :func:`start_exec` (each is
    described there)."""

    cwd: str | None
    env: Mapping[str, str] | None
    timeout: float | None
    head_bytes: int
    tail_bytes: int
    name: str | None
    uri: str | None
    claim: TerminalClaim | None


async def start_exec(
    host: Host, command: str | Sequence[str], **options: Unpack[ExecOptions]
) -> Exec:
    """Start ``command`` (see :func:`exec_command`) and return once its process runs.

    Raises what :func:`exec_command` raises, before anything is started.
    """
    head_bytes = options.get("head_bytes", DEFAULT_HEAD_BYTES)
    tail_bytes = options.get("tail_bytes", DEFAULT_TAIL_BYTES)
    timeout = options.get("timeout")
    name = options.get("name")
    uri = options.get("uri")
    argv, line = _argv(command)
    if head_bytes < 0 or tail_bytes < 0:
        raise ValueError("head_bytes and tail_bytes must not be negative")
    if timeout is not None and not timeout > 0:
        raise ValueError("timeout must be positive")
    collector = _Collector(head_bytes, tail_bytes)
    started = time.monotonic()
    term = await host.create_terminal(
        uri or _fresh_uri(host),
        name=name if name is not None else line[:MAX_TITLE],
        argv=argv,
        cwd=options.get("cwd"),
        env=options.get("env"),
        use_pty=False,
        stdin_closed=True,
        stderr_apart=True,
        on_output=collector,
        claim=options.get("claim"),
    )
    started_exec = Exec(host, term, line, collector, started)
    _book(host).running[term.uri] = started_exec
    term.spawn_task(functools.partial(started_exec.watch, timeout))
    return started_exec


async def exec_command(
    host: Host, command: str | Sequence[str], **options: Unpack[ExecOptions]
) -> CommandResult:
    """Run ``command`` without a terminal and return its :class:`~ahp.agent.command.CommandResult`.

    Args:
        host: the host that runs it (its terminal is the host's).
        command: an argv (run as is, looked up on ``PATH``) or a command line (run by
            ``/bin/sh -c``).
        cwd: working directory (absolute path or ``file://`` URI; default: home).
        env: variables added to the environment (this process's, plus
            ``ahp.pty.environment.NONINTERACTIVE_ENV``: no pagers, no credential prompts).
        timeout: seconds until the process group is killed (status ``"timed_out"``).
        head_bytes, tail_bytes: the budget of ``output`` and of ``stderr`` each.
        name: the terminal's title (default: the command line, cut to fit).
        uri: the terminal's URI (default: a fresh ``ahp-terminal:/exec-<n>``).
        claim: who holds the terminal (a remote client's exec: that client, so that no
            other client can claim it and keep its starter from disposing it).

    The options are :class:`ExecOptions` (all keywords, all optional).

    Returns:
        ``status`` is ``"finished"`` (``exit_code`` set), ``"killed"`` (a signal ended
        it: ``signal`` names it, ``exit_code`` is ``None``; also when the terminal was
        disposed first) or ``"timed_out"``; ``output`` is stdout and ``stderr`` stderr,
        each rendered within the budget; ``raw_output`` is stdout's most recent
        ``head_bytes + tail_bytes`` bytes.

    Raises:
        ahp.pty.SpawnError: the process could not be started (bad ``cwd``, a program
            not on ``PATH``); nothing is left behind.
        ValueError: an empty command, a negative budget, a timeout not above 0.

    Cancellation: the process group is killed and the process reaped before the
    cancellation propagates.
    """
    started = await start_exec(host, command, **options)
    try:
        await started.done.wait()
    except BaseException:
        await started.kill()
        raise
    assert started.result is not None
    return started.result


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:  # a real-time signal has no name of its own
        return f"SIG{signum}"
