"""Running commands in a terminal for an agent: results, handles, waiting for input.

Why a module of its own: an agent's most common wish is "run this, give me the
output and the exit code" — in-process (:meth:`ahp.engine.Terminal.run`) or over
the wire (:meth:`ahp.client.RemoteTerminal.run`). Both drive the same algorithm
through the small :class:`TerminalDriver` interface, and both return the same
:class:`~ahp.result.CommandResult` and :class:`CommandHandle`.

How a command is delimited:

* **With command detection** (bash, zsh, fish started by this host): the
  command line is typed, the next ``terminal/commandExecuted`` names its
  ``commandId``, and its ``terminal/commandFinished`` gives the exit code.
  The output is what the terminal printed between the two.
* **Fallback** (any other shell, e.g. ``sh``): the command is wrapped as
  ``printf <begin>; eval 'COMMAND'; printf <end with $?>`` (one line) where the
  markers are built by ``printf`` from a random token, so the typed (echoed) text
  never contains the markers themselves; the output is what lies between them
  and the exit code is parsed from the end marker.

What an agent gets beyond that (see ``README.md``, "Commands for agents"):

* **Rendered output** (:class:`~ahp.vt.render.LineRenderer`): a progress bar as
  its last state, cursor moves applied, no escapes; the alternate screen's
  contents are left out and flagged. ``raw_output`` keeps the VT text.
* **Budgets** (:class:`~ahp.budget.OutputBudget`): head and tail with exact
  omitted bytes and lines; the whole output stays readable through the handle.
* **Handles**: :func:`start_command` returns a :class:`CommandHandle` at once; a
  *collector task* (in the terminal owner's nursery: the terminal's own, or the
  client connection's) follows the command until it ends, so ``wait``,
  ``read_new``, ``interrupt`` and ``kill`` work at any time, and several commands
  in several terminals run at once (:func:`wait_any`, :func:`as_completed`).
* **Waiting for input**: after ``input_quiet`` seconds without output the driver
  is asked for evidence (the foreground process group blocked in a tty read,
  from ``/proc``: in-process directly, remotely through the server's
  ``x-ahp-terminals/ttyStatus``; against a server without it, or a terminal
  without a pty, the screen heuristic, see :func:`looks_like_prompt`); the
  command's status becomes
  ``waiting_for_input`` and ``run`` returns early.
* **Honest completion**: ``finished`` / ``shell_exited`` / ``timed_out`` /
  ``interrupted`` / ``killed`` / ``lost`` (the handle stopped following: its client
  closed), and the jobs the command left behind (processes of the terminal's
  session, outside the shell's process group, started meanwhile; remotely as
  the server reports them).
* **Lookup**: each terminal keeps its last :data:`MAX_COMMANDS_KEPT` handles
  (:class:`CommandRegistry`), so ``result.command_id`` is enough to come back.

Timeout and cancellation: the hard ``timeout`` interrupts the command
(``\\x03``) and waits up to :data:`INTERRUPT_GRACE` for it to end (status
``timed_out``); cancelling a ``run`` call interrupts the command too (the
``\\x03`` is sent shielded) and re-raises. ``yield_after`` never interrupts: it
returns status ``running`` with the handle.
"""

from __future__ import annotations

import abc
import logging
import math
import re
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from typing import Final, Protocol

import attrs
import trio

from ahp.budget import DEFAULT_HEAD_BYTES, DEFAULT_TAIL_BYTES, RETAINED_OUTPUT_BYTES, OutputBudget
from ahp.protocol.actions import (
    ActionEnvelope,
    TerminalCommandDetectionAvailable,
    TerminalCommandExecuted,
    TerminalCommandFinished,
    TerminalData,
    TerminalExited,
)
from ahp.protocol.state import CommandPart, Snapshot, TerminalClaim, TerminalState
from ahp.pty.procfs import TtyStatus
from ahp.result import FINAL_STATUSES, BackgroundProcess, CommandResult
from ahp.vt.render import LineRenderer

__all__ = [
    "DEFAULT_INPUT_QUIET",
    "DEFAULT_MAX_OUTPUT",
    "INTERRUPT_GRACE",
    "MAX_RAW_OUTPUT",
    "BackgroundProcess",
    "CommandHandle",
    "CommandRegistry",
    "CommandResult",
    "CommandSurface",
    "InputEvidence",
    "TerminalDriver",
    "evidence_of",
    "as_completed",
    "looks_like_prompt",
    "run_command",
    "start_command",
    "strip_escapes",
    "wait_any",
]

#: Kept for compatibility: ``max_output_bytes`` maps onto the budget (a quarter
#: head, the rest tail).
DEFAULT_MAX_OUTPUT: Final = 1_000_000
#: How long to wait for the shell to report the interrupted command's end.
INTERRUPT_GRACE: Final = 5.0
#: Default quiet time before the driver is asked whether the command waits for input.
DEFAULT_INPUT_QUIET: Final = 0.5
#: While quiet and not waiting, evidence is looked for again after this long at
#: first, then twice as long each time up to ``MAX_INPUT_POLL``.
INPUT_POLL: Final = 0.25
MAX_INPUT_POLL: Final = 2.0
#: Upper bound of ``raw_output`` (the most recent bytes are kept).
MAX_RAW_OUTPUT: Final = RETAINED_OUTPUT_BYTES
#: Handles kept per terminal for :meth:`ahp.engine.Terminal.command` (see
#: :class:`CommandRegistry`).
MAX_COMMANDS_KEPT: Final = 8
#: Buffer of the subscription a command follows (beyond it: a resynchronisation).
FOLLOW_BYTES: Final = 64 * 1024 * 1024
#: After a resynchronisation, the end of the terminal's text searched for the end marker.
MARKER_LOOKBACK: Final = 64 * 1024
#: Before concluding "waiting for input", the end of the terminal's text searched for it.
MARKER_TAIL: Final = 1024
#: The last characters of a prompt line that :func:`looks_like_prompt` accepts.
PROMPT_ENDINGS: Final = (":", "?", ">", "]", ")", "$", "#", "%")

log = logging.getLogger("ahp.run")

_ESCAPES: Final = re.compile(
    r"\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)"  # OSC ... BEL/ST
    r"|\x1b[P_^X][^\x1b]*\x1b\\"  # DCS/APC/PM/SOS strings
    r"|\x1b\[[0-?]*[ -/]*[@-~]"  # CSI
    r"|\x1b[ -/]*[0-~]"  # other ESC sequences
    r"|[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]"  # other controls (keep \t \n \r)
)


def strip_escapes(text: str) -> str:
    """Text without escape sequences or control characters; ``\\r\\n`` becomes ``\\n``."""
    return _ESCAPES.sub("", text).replace("\r\n", "\n")


@attrs.frozen
class InputEvidence:
    """Why a command is believed to wait for input.

    Attributes:
        readers: pids of the terminal's foreground process group blocked in a read
            of the terminal (empty for the screen heuristic).
        echo: the terminal echoes input (``False``: a password prompt).
        source: ``"procfs"`` (a read of the terminal, seen in ``/proc``),
            ``"poll"`` (in-process: the job sleeps in poll/select/epoll, as Node's
            readline or vim do, *and* the screen shows a prompt-like last line or a
            full-screen program), or ``"heuristic"`` (nothing to see: a remote
            server without the process extension, or no pty; quiet output ending in
            a prompt-like line, or a full-screen program).
    """

    readers: tuple[int, ...]
    echo: bool
    source: str


class TerminalDriver(Protocol):
    """What :func:`start_command` needs from a terminal (in-process or remote)."""

    @property
    def uri(self) -> str: ...

    @property
    def state(self) -> TerminalState: ...

    def follow(self) -> AsyncIterator[Snapshot | ActionEnvelope]:
        """Yields the current snapshot first, then every later envelope."""
        ...

    async def send_input(self, data: str) -> None: ...

    async def set_claim(self, claim: TerminalClaim) -> None:
        """Claim the terminal; returns once the state shows the new claim."""
        ...

    @property
    def detection_wait(self) -> float:
        """How long to wait for command detection to be announced before falling back."""
        ...

    def spawn_task(self, fn: Callable[[], Awaitable[None]]) -> None:
        """Run ``fn`` in the nursery of whatever owns the terminal (it must not raise)."""
        ...

    @property
    def commands(self) -> CommandRegistry:
        """Where the terminal's recent command handles are kept."""
        ...

    async def input_evidence(self) -> InputEvidence | None:
        """Evidence that the terminal's foreground job is blocked reading input, or
        ``None`` when there is none (or nothing can be seen from here)."""
        ...

    @property
    def sees_processes(self) -> bool:
        """Whether :meth:`input_evidence` and :meth:`jobs_since` see processes."""
        ...

    async def job_mark(self) -> object:
        """An opaque mark of the terminal's jobs now (before a command is typed)."""
        ...

    async def background_jobs(self, mark: object) -> dict[int, str]:
        """Jobs of the terminal's session started since ``mark`` and still running:
        pid → command line."""
        ...

    @property
    def ended(self) -> bool:
        """The terminal's process has exited or the terminal is being disposed."""
        ...

    async def kill_command(self, mark: object) -> None:
        """Kill the running command's process groups: the foreground job and every
        job started since ``mark``."""
        ...


def evidence_of(status: TtyStatus | None) -> InputEvidence | None:
    """What a pty's status says about its foreground job waiting for input: a read
    of the tty (``procfs``), or a poll (``poll``, to be weighed with the screen);
    nothing while output is still unread (the job may just have written a prompt
    and gone on). One rule for the in-process driver and for a remote one whose
    server reports the status (:mod:`ahp.protocol.processes`)."""
    if status is None or status.unread:
        return None
    if status.readers:
        return InputEvidence(readers=status.readers, echo=status.echo, source="procfs")
    if status.pollers:
        return InputEvidence(readers=status.pollers, echo=status.echo, source="poll")
    return None


def looks_like_prompt(line: str) -> bool:
    """The remote heuristic: a non-empty last line ending like a question or a prompt."""
    stripped = line.rstrip()
    return bool(stripped) and stripped.endswith(PROMPT_ENDINGS)


class _RawTail:
    """The raw output, bounded to the most recent ``limit`` characters' worth of UTF-8."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.chunks: list[str] = []
        self.size = 0

    def add(self, text: str) -> None:
        if not text:
            return
        self.chunks.append(text)
        self.size += len(text.encode("utf-8", "surrogatepass"))
        if self.size > 2 * self.limit:
            self._trim()

    def _trim(self) -> None:
        joined = "".join(self.chunks).encode("utf-8", "surrogatepass")
        kept = joined[max(0, len(joined) - self.limit) :].decode("utf-8", "ignore")
        self.chunks = [kept]
        self.size = len(kept.encode("utf-8", "surrogatepass"))

    def text(self) -> str:
        if self.size > self.limit:
            self._trim()
        return "".join(self.chunks)


class _Markers:
    """Streaming filter for the fallback: passes on what lies between the markers."""

    def __init__(self, token: str) -> None:
        self.begin = f"__AHP_BEGIN_{token}__\r\n"
        self._end_prefix = f"\r\n__AHP_END_{token}_"
        self._end = re.compile(rf"\r?\n?__AHP_END_{token}_(\d+)__")
        self._buffer = ""
        self.started = False
        self.exit_code: int | None = None
        self.done = False

    def feed(self, data: str) -> str:
        """The output in ``data`` (some may be held back until the next call)."""
        if self.done:
            return ""
        buffer = self._buffer + data
        if not self.started:
            at = buffer.find(self.begin)
            if at < 0:
                self._buffer = buffer[-len(self.begin) :]
                return ""
            self.started = True
            buffer = buffer[at + len(self.begin) :]
        match = self._end.search(buffer)
        if match is not None:
            self.done = True
            self.exit_code = int(match.group(1))
            self._buffer = ""
            return buffer[: match.start()]
        hold = self._held(buffer)
        self._buffer = buffer[len(buffer) - hold :] if hold else ""
        return buffer[: len(buffer) - hold]

    def resynchronised(self, tail: str) -> None:
        """Output was lost; ``tail`` is the end of the terminal's text now."""
        self._buffer = ""
        if not self.started and self.begin in tail:
            self.started = True

    def find_end(self, text: str) -> int | None:
        """The exit code from an end marker in ``text`` (a state after a resync)."""
        match = self._end.search(text)
        return int(match.group(1)) if match is not None else None

    def _held(self, buffer: str) -> int:
        """Length of the longest end of ``buffer`` that may begin the end marker."""
        at = buffer.rfind("__AHP_END_")
        if at >= 0 and re.fullmatch(r"__AHP_END_[0-9a-f]*_?\d*_?", buffer[at:]):
            while at > 0 and buffer[at - 1] in "\r\n" and len(buffer) - at < 64:
                at -= 1
            return len(buffer) - at
        prefix = self._end_prefix
        for k in range(min(len(prefix), len(buffer)), 0, -1):
            tail = buffer[-k:]
            if (
                prefix.startswith(tail)
                or prefix[1:].startswith(tail)
                or prefix[2:].startswith(tail)
            ):
                return k
        return 0


class CommandRegistry:
    """The recent commands of one terminal, by id, so that an agent can come back
    to a command (its output, its end) with only ``result.command_id``.

    Buffering: at most :data:`MAX_COMMANDS_KEPT` handles (each retains at most
    :data:`~ahp.budget.RETAINED_OUTPUT_BYTES` of output); beyond it the oldest
    finished one is forgotten (else the oldest). Forgetting a running command's
    handle does not stop its collector.
    """

    def __init__(self, limit: int = 0) -> None:
        self.limit = limit or MAX_COMMANDS_KEPT
        self._handles: dict[str, CommandHandle] = {}

    def add(self, handle: CommandHandle) -> None:
        self._handles[handle.id] = handle
        while len(self._handles) > self.limit:
            victim = next((h for h in self._handles.values() if h.done), None)
            if victim is None:
                victim = next(iter(self._handles.values()))
            del self._handles[victim.id]

    def get(self, command_id: str) -> CommandHandle:
        """The handle of ``command_id``; KeyError when unknown or forgotten."""
        try:
            return self._handles[command_id]
        except KeyError:
            raise KeyError(f"no command {command_id!r} (unknown, or forgotten)") from None

    def all(self) -> tuple[CommandHandle, ...]:
        """Oldest first."""
        return tuple(self._handles.values())


def _busy(state: TerminalState) -> bool:
    return (
        bool(state.content)
        and isinstance(state.content[-1], CommandPart)
        and not state.content[-1].isComplete
    )


def _before_prompt(state: TerminalState) -> bool:
    """The last command finished and nothing was printed after it: the shell has not
    drawn its prompt yet, so its line editor is not reading (a command typed now
    would be echoed twice: by the kernel, then by the editor)."""
    return (
        bool(state.content)
        and isinstance(state.content[-1], CommandPart)
        and state.content[-1].isComplete
    )


def _budget_sizes(
    head_bytes: int | None, tail_bytes: int | None, max_output_bytes: int | None
) -> tuple[int, int]:
    if max_output_bytes is not None:
        if max_output_bytes < 1:
            raise ValueError("max_output_bytes must be positive")
        head = max_output_bytes // 4
        default_head, default_tail = head, max_output_bytes - head
    else:
        default_head, default_tail = DEFAULT_HEAD_BYTES, DEFAULT_TAIL_BYTES
    head = default_head if head_bytes is None else head_bytes
    tail = default_tail if tail_bytes is None else tail_bytes
    if head < 0 or tail < 0:
        raise ValueError("head_bytes and tail_bytes must not be negative")
    if tail > RETAINED_OUTPUT_BYTES or head > RETAINED_OUTPUT_BYTES:
        raise ValueError(f"head_bytes and tail_bytes must not exceed {RETAINED_OUTPUT_BYTES}")
    return head, tail


class CommandHandle:
    """A command that was started in a terminal; follow it, read it, stop it.

    Made by :func:`start_command` (``term.start``) or returned in
    ``CommandResult.handle`` by ``term.run`` while the command still runs. A
    collector task owned by the terminal's owner keeps it up to date; all methods
    can be called from any task of the same Trio run.

    Buffering: rendered output up to :data:`~ahp.budget.RETAINED_OUTPUT_BYTES`
    (:meth:`output`), the renderer's window (one screen), and ``raw_output`` up to
    the budget's size.
    """

    def __init__(
        self,
        driver: TerminalDriver,
        command_line: str,
        *,
        head_bytes: int,
        tail_bytes: int,
        input_quiet: float,
    ) -> None:
        self.id = f"cmd-{secrets.token_hex(6)}"
        self.terminal_uri = driver.uri
        self.command_line = command_line
        self._driver = driver
        self._input_quiet = input_quiet
        cols = driver.state.cols or 80
        rows = driver.state.rows or 24
        self._budget = OutputBudget(head_bytes, tail_bytes)
        self._renderer = LineRenderer(self._budget.add, cols=cols, rows=rows)
        self._raw = _RawTail(min(MAX_RAW_OUTPUT, max(1, head_bytes + tail_bytes)))
        self._started = time.monotonic()
        self._ended: float | None = None
        self._status = "running"
        self._exit_code: int | None = None
        self._duration_ms: int | None = None
        self._timed_out = False
        self._interrupted = False
        self._killed = False
        self._waiting: InputEvidence | None = None
        self._episode = 0  # waiting-for-input episodes so far
        self._reported = 0  # the last episode a wait() returned
        self._executing = False  # the command itself runs (detected, or past the marker)
        self._last_output = trio.current_time()
        self._background: tuple[BackgroundProcess, ...] = ()
        self._changed = trio.Event()  # set (and replaced) when done or waiting changes
        self._output_event = trio.Event()  # set (and replaced) when output arrives
        self._done = trio.Event()
        self._read_lines = 0  # finished lines returned by read_new
        self._read_live: list[str] = []  # window lines returned by read_new as they were
        self._job_mark: object = None
        self._command_id: str | None = None  # detected mode: the shell's id for it
        self._markers: _Markers | None = None  # fallback mode

    # -- reading -------------------------------------------------------------------------------

    @property
    def done(self) -> bool:
        """The command is over (any final status)."""
        return self._done.is_set()

    @property
    def status(self) -> str:
        if self._status == "running" and self._waiting is not None:
            return "waiting_for_input"
        return self._status

    @property
    def input_evidence(self) -> InputEvidence | None:
        """Why the command is believed to wait for input (``None`` when it is not)."""
        return self._waiting

    def result(self) -> CommandResult:
        """The result so far, without waiting."""
        budgeted = self._budget.render(self._live())
        end = self._ended if self._ended is not None else time.monotonic()
        elapsed = int((end - self._started) * 1000)
        status = self.status
        return CommandResult(
            command_line=self.command_line,
            status=status,
            output=budgeted.text,
            raw_output=self._raw.text(),
            exit_code=self._exit_code,
            duration_ms=self._duration_ms if self._duration_ms is not None else elapsed,
            truncated=budgeted.truncated,
            omitted_bytes=budgeted.omitted_bytes,
            omitted_lines=budgeted.omitted_lines,
            total_bytes=budgeted.total_bytes,
            total_lines=budgeted.total_lines,
            timed_out=self._timed_out,
            waiting_for_input=status == "waiting_for_input",
            alternate_screen=self._renderer.used_alternate,
            shell_exited=self._status == "shell_exited",
            background=self._background,
            command_id=self.id,
            handle=None if status in FINAL_STATUSES else self,
        )

    def output(self) -> str:
        """All rendered output retained so far (the oldest lines beyond
        :data:`~ahp.budget.RETAINED_OUTPUT_BYTES` are dropped; see :attr:`dropped_bytes`)."""
        return self._budget.retained_text(self._live())

    @property
    def dropped_bytes(self) -> int:
        """Rendered bytes no longer retained by :meth:`output`."""
        return self._budget.dropped_bytes

    def read_new(self) -> str:
        """Rendered output since the last call, as lines ending in ``\\n``.

        A line still on the screen (the cursor can reach it: a progress bar) is
        returned as it is now and again whenever it changes.
        """
        finished = self._budget.finished_lines(self._read_lines)
        self._read_lines = self._budget.lines
        live = self._live()
        out: list[str] = []
        seen = self._read_live
        for line in finished:
            if seen and seen[0] == line:
                seen = seen[1:]
                continue
            seen = []
            out.append(line)
        start = 0
        while start < len(live) and start < len(seen) and live[start] == seen[start]:
            start += 1
        out.extend(live[start:])
        self._read_live = live
        return "".join(line + "\n" for line in out)

    def _live(self) -> list[str]:
        return self._renderer.lines()

    async def wait(self, timeout: float | None = None) -> CommandResult:
        """Wait until the command is over or waits for input, or ``timeout`` passes
        (then its status is ``running``). Never interrupts the command.

        A wait for input that an earlier ``wait`` (or ``run``) already returned does
        not end the next ``wait`` at once: that one returns when the command ends,
        when it waits for input anew (after more output or input), or on timeout.
        """
        with trio.move_on_after(math.inf if timeout is None else timeout):
            await self._settled()
        if self._waiting is not None:
            self._reported = self._episode
        return self.result()

    def _is_settled(self) -> bool:
        return self.done or (self._waiting is not None and self._episode != self._reported)

    async def _settled(self) -> None:
        """Until the command is over or waits for input in an unreported episode."""
        while not self._is_settled():
            await self._changed.wait()

    async def wait_output(self, timeout: float | None = None) -> None:
        """Wait until new output arrives, the command ends, or ``timeout`` passes."""
        with trio.move_on_after(math.inf if timeout is None else timeout):
            if not self.done:
                await self._output_event.wait()

    # -- acting --------------------------------------------------------------------------------

    async def send_input(self, data: str) -> None:
        """Type ``data`` into the terminal (e.g. the answer to a prompt, with ``\\r``)."""
        self._waiting = None
        self._last_output = trio.current_time()
        await self._driver.send_input(data)

    async def interrupt(self) -> None:
        """Ctrl-C to the foreground job; the final status becomes ``interrupted``."""
        if self.done:
            return
        self._interrupted = True
        await self._driver.send_input("\x03")

    async def kill(self) -> None:
        """Kill the command's whole process group: SIGKILL (remotely sent by the
        server; against a server without the process extension, Ctrl-C then Ctrl-\\)."""
        if self.done:
            return
        self._killed = True
        await self._driver.kill_command(self._job_mark)

    async def _time_out(self) -> None:
        """The hard timeout: interrupt and wait (bounded) for the end."""
        self._timed_out = True
        await self._driver.send_input("\x03")
        with trio.move_on_after(INTERRUPT_GRACE):
            await self._done.wait()

    # -- the collector -------------------------------------------------------------------------

    def _notify(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    def _output(self, text: str) -> None:
        if not text:
            return
        self._raw.add(text)
        self._renderer.feed(text)
        self._last_output = trio.current_time()
        if self._waiting is not None:
            self._waiting = None
            self._notify()
        self._output_event.set()
        self._output_event = trio.Event()

    async def _end(
        self, status: str, exit_code: int | None = None, duration: int | None = None
    ) -> None:
        """The command ended: look for the jobs it left (in-process), then finish."""
        background: tuple[BackgroundProcess, ...] = ()
        if status == "finished" and self._driver.sees_processes:
            jobs = await self._driver.background_jobs(self._job_mark)
            background = tuple(BackgroundProcess(pid, line) for pid, line in sorted(jobs.items()))
        self._finish(status, exit_code, duration, background)

    def _finish(
        self,
        status: str,
        exit_code: int | None = None,
        duration: int | None = None,
        background: tuple[BackgroundProcess, ...] = (),
    ) -> None:
        if self.done:
            return
        if status == "finished":
            if self._killed:
                status = "killed"
            elif self._timed_out:
                status = "timed_out"
            elif self._interrupted:
                status = "interrupted"
        elif status == "shell_exited" and self._killed:
            status = "killed"
        self._status = status
        self._exit_code = exit_code
        self._duration_ms = duration
        self._ended = time.monotonic()
        self._waiting = None
        self._background = background
        self._done.set()
        self._output_event.set()
        self._notify()

    async def _collect(
        self,
        stream: AsyncIterator[Snapshot | ActionEnvelope],
        detected: bool,
        token: str,
        restore_claim: TerminalClaim | None,
        known: frozenset[str],
    ) -> None:
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._watch_input)
                if detected:
                    await self._follow_detected(stream, known)
                else:
                    self._markers = _Markers(token)
                    await self._follow_markers(stream, self._markers)
                nursery.cancel_scope.cancel()
        except Exception:  # never let a collector take down the terminal or client
            log.exception("command %s in %s: collector failed", self.id, self.terminal_uri)
        finally:
            if not self.done:
                self._finish("shell_exited" if self._driver.ended else "lost")
            self._renderer.flush()
            with trio.CancelScope(shield=True):
                aclose = getattr(stream, "aclose", None)
                if aclose is not None:
                    with trio.move_on_after(1):
                        await aclose()
                if restore_claim is not None:
                    with trio.move_on_after(5):
                        await self._driver.set_claim(restore_claim)

    async def _follow_detected(
        self, stream: AsyncIterator[Snapshot | ActionEnvelope], known: frozenset[str]
    ) -> None:
        """``known``: the ids of the commands in the state before this one was typed."""
        command_id: str | None = None
        async for item in stream:
            if isinstance(item, Snapshot):
                # A resynchronisation: output in the gap is lost, the end is not (nor
                # the start: a command that is not one of ``known`` is this one).
                state = item.state
                assert isinstance(state, TerminalState)
                for part in state.content:
                    if not isinstance(part, CommandPart):
                        continue
                    if command_id is None and part.commandId not in known:
                        command_id = self._command_id = part.commandId
                        self._executing = True
                    if part.commandId == command_id and part.isComplete:
                        await self._end("finished", part.exitCode, part.durationMs)
                        return
                if state.exited:
                    await self._end("shell_exited")
                    return
                continue
            action = item.action
            if isinstance(action, TerminalCommandExecuted) and command_id is None:
                command_id = self._command_id = action.commandId
                self._executing = True
                self._last_output = trio.current_time()
            elif isinstance(action, TerminalData) and command_id is not None:
                self._output(action.data)
            elif isinstance(action, TerminalCommandFinished) and action.commandId == command_id:
                await self._end("finished", action.exitCode, action.durationMs)
                return
            elif isinstance(action, TerminalExited):
                await self._end("shell_exited")
                return

    async def _follow_markers(
        self, stream: AsyncIterator[Snapshot | ActionEnvelope], markers: _Markers
    ) -> None:
        async for item in stream:
            if isinstance(item, Snapshot):
                # A resynchronisation: output in the gap is lost; the end marker may
                # be in it, and then it is in the state.
                state = item.state
                assert isinstance(state, TerminalState)
                tail = state.tail(MARKER_LOOKBACK)
                end = markers.find_end(tail)
                if end is not None:
                    await self._end("finished", end)
                    return
                markers.resynchronised(tail)
                if markers.started:
                    self._executing = True
                continue
            action = item.action
            if isinstance(action, TerminalExited):
                await self._end("shell_exited")
                return
            if not isinstance(action, TerminalData):
                continue
            text = markers.feed(action.data)
            if markers.started and not self._executing:
                self._executing = True
                self._last_output = trio.current_time()
            self._output(text)
            if markers.done:
                await self._end("finished", markers.exit_code)
                return

    async def _watch_input(self) -> None:
        """Conclude ``waiting_for_input`` from quiet output plus the driver's evidence.

        While quiet without evidence it looks again after :data:`INPUT_POLL`
        seconds, doubling up to :data:`MAX_INPUT_POLL` (a long silent build costs
        a ``/proc`` scan every two seconds, not four a second).
        """
        quiet = self._input_quiet
        poll = INPUT_POLL
        while True:
            due = self._last_output + quiet
            now = trio.current_time()
            if self._waiting is not None or not self._executing or now < due:
                poll = INPUT_POLL
                with trio.move_on_at(due if now < due else now + INPUT_POLL):
                    await self._output_event.wait()
                continue
            evidence = await self._evidence()
            if evidence is not None and not self.done:
                self._waiting = evidence
                self._episode += 1
                self._notify()
                continue
            with trio.move_on_after(poll):
                await self._output_event.wait()
            poll = min(poll * 2, MAX_INPUT_POLL)

    def _ended_in_state(self) -> bool:
        """The terminal's state already shows the command's end (the collector has
        not caught up yet): the shell, back at its prompt, reads the terminal."""
        state = self._driver.state
        if state.exited:
            return True
        if self._command_id is not None:
            return any(
                isinstance(p, CommandPart) and p.commandId == self._command_id and p.isComplete
                for p in reversed(state.content)
            )
        markers = self._markers
        return markers is not None and markers.find_end(state.tail(MARKER_TAIL)) is not None

    async def _evidence(self) -> InputEvidence | None:
        if self._ended_in_state():
            return None
        if self._driver.sees_processes:
            evidence = await self._driver.input_evidence()
            if evidence is None or evidence.source != "poll":
                return evidence
            # Sleeping in poll/select/epoll (Node's readline, vim): on the terminal,
            # or on anything else. Taken only with the screen's word for it.
            if self._renderer.alternate or self._prompt_shown():
                return evidence
            return None
        # Nothing to see (a remote server without the extension, no pty): quiet, and
        # either a full-screen program (it reads keys) or a prompt-like last line.
        if self._renderer.alternate or self._prompt_shown():
            return InputEvidence(readers=(), echo=True, source="heuristic")
        return None

    def _prompt_shown(self) -> bool:
        live = self._live()
        return bool(live) and looks_like_prompt(live[-1])


async def start_command(
    driver: TerminalDriver,
    command_line: str,
    *,
    head_bytes: int | None = None,
    tail_bytes: int | None = None,
    input_quiet: float = DEFAULT_INPUT_QUIET,
    claim: TerminalClaim | None = None,
    max_output_bytes: int | None = None,
) -> CommandHandle:
    """Type ``command_line`` into the terminal and return its handle at once.

    Raises:
        RuntimeError: the terminal's process has exited.
        ValueError: a budget size or ``input_quiet`` is out of range.
    """
    head, tail = _budget_sizes(head_bytes, tail_bytes, max_output_bytes)
    if not input_quiet > 0:
        raise ValueError("input_quiet must be positive")
    if driver.state.exited:
        raise RuntimeError("the terminal's process has exited")
    previous_claim = driver.state.claim
    if claim is not None:
        await driver.set_claim(claim)
    handle = CommandHandle(
        driver, command_line, head_bytes=head, tail_bytes=tail, input_quiet=input_quiet
    )
    stream = driver.follow()
    spawned = False
    try:
        first = await stream.__anext__()
        assert isinstance(first, Snapshot)
        state = first.state
        assert isinstance(state, TerminalState)
        if state.exited:
            raise RuntimeError("the terminal's process has exited")
        detected = bool(state.supportsCommandDetection)
        if detected and (_busy(state) or _before_prompt(state)):
            # A previous command is still finishing (e.g. just interrupted): let it end
            # and the shell draw its prompt.
            with trio.move_on_after(INTERRUPT_GRACE):
                async for _ in stream:
                    current = driver.state
                    if not (_busy(current) or _before_prompt(current)):
                        break
        elif not detected:
            with trio.move_on_after(driver.detection_wait):
                async for item in stream:
                    if isinstance(item, ActionEnvelope) and isinstance(
                        item.action, TerminalCommandDetectionAvailable
                    ):
                        detected = True
                        break
        token = secrets.token_hex(8)
        if detected:
            typed = command_line
        else:
            quoted = "'" + command_line.replace("'", "'\\''") + "'"
            typed = (
                f"printf '__AHP_%s_{token}__\\n' BEGIN; eval {quoted}; "
                f"printf '\\n__AHP_END_{token}_%s__\\n' \"$?\""
            )
        if driver.sees_processes:
            handle._job_mark = await driver.job_mark()
        known = frozenset(p.commandId for p in driver.state.content if isinstance(p, CommandPart))
        handle._started = time.monotonic()
        await driver.send_input(typed.replace("\n", "\r") + "\r")

        async def collect() -> None:
            await handle._collect(
                stream, detected, token, previous_claim if claim is not None else None, known
            )

        driver.spawn_task(collect)
        spawned = True
        driver.commands.add(handle)
    finally:
        if not spawned:
            with trio.CancelScope(shield=True):
                aclose = getattr(stream, "aclose", None)
                if aclose is not None:
                    await aclose()
                if claim is not None:
                    with trio.move_on_after(5):
                        await driver.set_claim(previous_claim)
    return handle


async def run_command(
    driver: TerminalDriver,
    command_line: str,
    *,
    timeout: float | None = None,
    yield_after: float | None = None,
    head_bytes: int | None = None,
    tail_bytes: int | None = None,
    input_quiet: float = DEFAULT_INPUT_QUIET,
    claim: TerminalClaim | None = None,
    max_output_bytes: int | None = None,
) -> CommandResult:
    """Run ``command_line`` and return its result (see the module doc).

    Returns when the command is over, waits for input (status
    ``waiting_for_input``, with ``result.handle``), ``yield_after`` passed (status
    ``running``, with ``result.handle``), or ``timeout`` passed (the command is
    interrupted; status ``timed_out``).
    """
    if timeout is not None and not timeout > 0:
        raise ValueError("timeout must be positive")
    if yield_after is not None and not yield_after >= 0:
        raise ValueError("yield_after must not be negative")
    handle = await start_command(
        driver,
        command_line,
        head_bytes=head_bytes,
        tail_bytes=tail_bytes,
        input_quiet=input_quiet,
        claim=claim,
        max_output_bytes=max_output_bytes,
    )
    return await _await_result(handle, timeout=timeout, yield_after=yield_after)


async def _await_result(
    handle: CommandHandle, *, timeout: float | None, yield_after: float | None
) -> CommandResult:
    now = trio.current_time()
    hard = now + timeout if timeout is not None else math.inf
    soft = now + yield_after if yield_after is not None else math.inf
    try:
        with trio.move_on_at(min(hard, soft)):
            return await handle.wait()
        if hard <= soft and not handle.done:
            await handle._time_out()
        return handle.result()
    except trio.Cancelled:
        if not handle.done:
            with trio.CancelScope(shield=True), trio.move_on_after(1):
                await handle.interrupt()
        raise


async def wait_any(
    handles: Sequence[CommandHandle], timeout: float | None = None
) -> CommandHandle | None:
    """The first handle whose command is over or waits for input (as
    :meth:`CommandHandle.wait` counts it), or ``None`` on timeout."""
    if not handles:
        raise ValueError("no handles to wait for")
    winner: list[CommandHandle] = [h for h in handles if h._is_settled()][:1]
    if not winner:
        with trio.move_on_after(math.inf if timeout is None else timeout):
            async with trio.open_nursery() as nursery:

                async def one(handle: CommandHandle) -> None:
                    await handle._settled()
                    if not winner:
                        winner.append(handle)
                    nursery.cancel_scope.cancel()

                for handle in handles:
                    nursery.start_soon(one, handle)
    if not winner:
        return None
    if winner[0]._waiting is not None:
        winner[0]._reported = winner[0]._episode
    return winner[0]


async def _any_done(handles: Sequence[CommandHandle]) -> None:
    async with trio.open_nursery() as nursery:

        async def one(handle: CommandHandle) -> None:
            await handle._done.wait()
            nursery.cancel_scope.cancel()

        for handle in handles:
            nursery.start_soon(one, handle)


async def as_completed(handles: Iterable[CommandHandle]) -> AsyncIterator[CommandResult]:
    """Final results in the order the commands end (this waits past
    ``waiting_for_input``: answer prompts through the handles meanwhile, or use
    :func:`wait_any`). Nothing runs between iterations."""
    remaining = list(handles)
    while remaining:
        done = [h for h in remaining if h.done]
        if not done:
            await _any_done(remaining)
            continue
        for handle in done:
            remaining.remove(handle)
            yield handle.result()


class CommandSurface(abc.ABC):
    """``run``, ``start`` and ``command`` for a terminal that can hand out a
    :class:`TerminalDriver`: one surface, in-process (:class:`ahp.engine.Terminal`)
    and remote (:class:`ahp.client.RemoteTerminal`), over the same algorithm."""

    @abc.abstractmethod
    def _command_driver(self) -> TerminalDriver:
        """The driver :func:`run_command` / :func:`start_command` work through."""

    @property
    @abc.abstractmethod
    def commands(self) -> CommandRegistry:
        """Recent commands started in this terminal (see :data:`MAX_COMMANDS_KEPT`)."""

    async def run(
        self,
        command_line: str,
        *,
        timeout: float | None = None,
        yield_after: float | None = None,
        head_bytes: int | None = None,
        tail_bytes: int | None = None,
        input_quiet: float = DEFAULT_INPUT_QUIET,
        claim: TerminalClaim | None = None,
        max_output_bytes: int | None = None,
    ) -> CommandResult:
        """Type ``command_line`` into this terminal and return its :class:`CommandResult`.

        Returns when the command is over; early with status ``waiting_for_input``
        when it blocks reading the terminal (after ``input_quiet`` s of quiet; answer
        with ``result.handle.send_input``), or with status ``running`` after
        ``yield_after`` s (``result.handle`` follows it). On ``timeout`` the command
        is interrupted (``\\x03``): status ``timed_out``; cancelling the call
        interrupts it too. ``output`` is the rendered text, its first ``head_bytes``
        and last ``tail_bytes`` (``max_output_bytes``, for compatibility, sets both:
        a quarter head). With ``claim`` (e.g. a :class:`SessionClaim` naming a tool
        call) the terminal is claimed until the command ends and the previous claim
        is restored. See the module docstring.
        """
        return await run_command(
            self._command_driver(),
            command_line,
            timeout=timeout,
            yield_after=yield_after,
            head_bytes=head_bytes,
            tail_bytes=tail_bytes,
            input_quiet=input_quiet,
            claim=claim,
            max_output_bytes=max_output_bytes,
        )

    async def start(
        self,
        command_line: str,
        *,
        head_bytes: int | None = None,
        tail_bytes: int | None = None,
        input_quiet: float = DEFAULT_INPUT_QUIET,
        claim: TerminalClaim | None = None,
        max_output_bytes: int | None = None,
    ) -> CommandHandle:
        """Type ``command_line`` and return its :class:`CommandHandle` at once (see
        :meth:`run`); the handle's collector ends with the command or the terminal."""
        return await start_command(
            self._command_driver(),
            command_line,
            head_bytes=head_bytes,
            tail_bytes=tail_bytes,
            input_quiet=input_quiet,
            claim=claim,
            max_output_bytes=max_output_bytes,
        )

    def command(self, command_id: str) -> CommandHandle:
        """The handle of a recent command (``result.command_id``); KeyError when
        unknown or forgotten (see :data:`MAX_COMMANDS_KEPT`)."""
        return self.commands.get(command_id)
