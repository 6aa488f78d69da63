"""Running one command in a terminal and collecting its result.

Why a module of its own: an agent's most common wish is "run this, give me
the output and the exit code", in-process (:meth:`ahp.engine.Terminal.run`)
or over the wire (:meth:`ahp.client.Client.run`). Both drive the same
algorithm through a small :class:`TerminalDriver` interface.

How a command is delimited:

* **With command detection** (bash, zsh, fish started by this host): the
  command line is typed, the next ``terminal/commandExecuted`` names its
  ``commandId``, and its ``terminal/commandFinished`` gives the exit code.
  The output is what the terminal printed between the two.
* **Fallback** (any other shell, e.g. ``sh``): the command is wrapped as
  ``printf <begin>; eval 'COMMAND'; printf <end with $?>`` (one line) where the markers are
  built by ``printf`` from a random token, so the typed (echoed) text never
  contains the markers themselves; the output is what lies between them and
  the exit code is parsed from the end marker. Neither marker is ever part of
  the returned output.

Timeout and cancellation: on timeout the command is interrupted (``\\x03``)
and whatever arrived is returned with ``timed_out=True``; cancelling the
caller also interrupts the command (the ``\\x03`` is sent shielded) and then
re-raises. Output beyond ``max_output_bytes`` keeps the most recent bytes and
sets ``truncated``.
"""

from __future__ import annotations

import re
import secrets
import time
from collections import deque
from collections.abc import AsyncIterator
from typing import Final, Protocol

import attrs
import trio

from ahp.protocol.actions import (
    ActionEnvelope,
    TerminalCommandDetectionAvailable,
    TerminalCommandExecuted,
    TerminalCommandFinished,
    TerminalData,
    TerminalExited,
)
from ahp.protocol.state import CommandPart, Snapshot, TerminalClaim, TerminalState

__all__ = ["DEFAULT_MAX_OUTPUT", "CommandResult", "TerminalDriver", "run_command", "strip_escapes"]

#: Default bound on the output kept by :func:`run_command` (most recent bytes).
DEFAULT_MAX_OUTPUT: Final = 1_000_000
#: How long to wait for the shell to report the interrupted command's end.
INTERRUPT_GRACE: Final = 5.0

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
class CommandResult:
    """What :meth:`Terminal.run` returns.

    Attributes:
        command_line: the command as submitted.
        output: the command's output with escape sequences removed.
        raw_output: the same output as the terminal printed it (VT text).
        exit_code: the exit code, ``None`` when unknown (interrupted, no report).
        duration_ms: wall time from submission to the end (server-measured
            ``durationMs`` when command detection reported it).
        truncated: output exceeded ``max_output_bytes``; the most recent bytes are kept.
        timed_out: the timeout expired and the command was interrupted.
    """

    command_line: str
    output: str
    raw_output: str
    exit_code: int | None
    duration_ms: int
    truncated: bool
    timed_out: bool


class TerminalDriver(Protocol):
    """What :func:`run_command` needs from a terminal (in-process or remote)."""

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


class _Output:
    """Collected output, bounded to the most recent ``limit`` UTF-8 bytes."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.chunks: deque[str] = deque()
        self.size = 0
        self.truncated = False

    def add(self, text: str) -> None:
        if not text:
            return
        self.chunks.append(text)
        self.size += len(text.encode("utf-8", "surrogatepass"))
        while self.size > self.limit and self.chunks:
            self.truncated = True
            head = self.chunks.popleft()
            head_size = len(head.encode("utf-8", "surrogatepass"))
            excess = self.size - self.limit
            if head_size > excess:
                kept = head.encode("utf-8", "surrogatepass")[excess:].decode("utf-8", "ignore")
                self.chunks.appendleft(kept)
                self.size = self.size - head_size + len(kept.encode("utf-8", "surrogatepass"))
                break
            self.size -= head_size

    def text(self) -> str:
        return "".join(self.chunks)


def _busy(state: TerminalState) -> bool:
    return (
        bool(state.content)
        and isinstance(state.content[-1], CommandPart)
        and not state.content[-1].isComplete
    )


async def run_command(
    driver: TerminalDriver,
    command_line: str,
    *,
    timeout: float | None = None,
    max_output_bytes: int = DEFAULT_MAX_OUTPUT,
    claim: TerminalClaim | None = None,
) -> CommandResult:
    """Type ``command_line`` into the terminal and collect its result (see module doc)."""
    previous_claim = driver.state.claim
    if claim is not None:
        await driver.set_claim(claim)
    try:
        return await _run(driver, command_line, timeout, max_output_bytes)
    finally:
        if claim is not None:
            with trio.CancelScope(shield=True):
                await driver.set_claim(previous_claim)


async def _run(
    driver: TerminalDriver, command_line: str, timeout: float | None, max_output_bytes: int
) -> CommandResult:
    output = _Output(max_output_bytes)
    started = time.monotonic()
    deadline = trio.current_time() + timeout if timeout is not None else float("inf")
    exit_code: int | None = None
    duration: int | None = None
    timed_out = False
    stream = driver.follow()
    first = await stream.__anext__()
    assert isinstance(first, Snapshot)
    state = first.state
    assert isinstance(state, TerminalState)
    if state.exited or _terminal_exited(driver):
        raise RuntimeError("the terminal's process has exited")

    # Wait (bounded) for the shell to announce command detection at a prompt.
    detected = bool(state.supportsCommandDetection)
    if detected and _busy(state):
        # A previous command is still finishing (e.g. just interrupted): let it end.
        with trio.move_on_at(min(deadline, trio.current_time() + INTERRUPT_GRACE)):
            async for _ in stream:
                if not _busy(driver.state):
                    break
    elif not detected:
        with trio.move_on_at(min(deadline, trio.current_time() + driver.detection_wait)):
            async for item in stream:
                if isinstance(item, ActionEnvelope) and isinstance(
                    item.action, TerminalCommandDetectionAvailable
                ):
                    detected = True
                    break
    token = secrets.token_hex(8)
    begin = f"__AHP_BEGIN_{token}__"
    end_re = re.compile(rf"\r?\n?__AHP_END_{token}_(\d+)__\r?\n?")
    if detected:
        typed = command_line
    else:
        quoted = "'" + command_line.replace("'", "'\\''") + "'"
        typed = (
            f"printf '__AHP_%s_{token}__\\n' BEGIN; eval {quoted}; "
            f"printf '\\n__AHP_END_{token}_%s__\\n' \"$?\""
        )
    interrupted = False
    follower = _Detected()
    try:
        await driver.send_input(typed.replace("\n", "\r") + "\r")
        with trio.move_on_at(deadline) as scope:
            if detected:
                exit_code, duration = await follower.follow(stream, output)
            else:
                exit_code = await _follow_markers(stream, output, begin, end_re)
        if scope.cancelled_caught:
            timed_out = True
            interrupted = True
            await driver.send_input("\x03")
            with trio.move_on_after(INTERRUPT_GRACE):
                if detected:
                    exit_code, duration = await follower.follow(stream, output)
            if not detected:
                exit_code = None
    except trio.Cancelled:
        if not interrupted:
            with trio.CancelScope(shield=True), trio.move_on_after(1):
                await driver.send_input("\x03")
        raise
    finally:
        aclose = getattr(stream, "aclose", None)
        if aclose is not None:
            with trio.CancelScope(shield=True):
                await aclose()
    raw = output.text()
    if not detected:
        raw = raw.split(begin + "\r\n", 1)[-1] if (begin + "\r\n") in raw else raw
        raw = end_re.split(raw, maxsplit=1)[0]
    elapsed = int((time.monotonic() - started) * 1000)
    return CommandResult(
        command_line=command_line,
        output=strip_escapes(raw),
        raw_output=raw,
        exit_code=exit_code,
        duration_ms=duration if duration is not None else elapsed,
        truncated=output.truncated,
        timed_out=timed_out,
    )


def _terminal_exited(driver: TerminalDriver) -> bool:
    return driver.state.exited


class _Detected:
    """Follows the next detected command; may be resumed after an interruption."""

    def __init__(self) -> None:
        self.command_id: str | None = None

    async def follow(
        self, stream: AsyncIterator[Snapshot | ActionEnvelope], output: _Output
    ) -> tuple[int | None, int | None]:
        """Collect the command's output until it finishes: (exit code, duration)."""
        async for item in stream:
            if isinstance(item, Snapshot):
                continue  # a resynchronisation: output in the gap is lost, the end is not
            action = item.action
            if isinstance(action, TerminalCommandExecuted) and self.command_id is None:
                self.command_id = action.commandId
            elif isinstance(action, TerminalData) and self.command_id is not None:
                output.add(action.data)
            elif (
                isinstance(action, TerminalCommandFinished) and action.commandId == self.command_id
            ):
                return action.exitCode, action.durationMs
            elif isinstance(action, TerminalExited):
                break
        return None, None


async def _follow_markers(
    stream: AsyncIterator[Snapshot | ActionEnvelope],
    output: _Output,
    begin: str,
    end_re: re.Pattern[str],
) -> int | None:
    """Collect output until the end marker printed by the fallback wrapper."""
    tail = ""
    seen_begin = False
    async for item in stream:
        if not isinstance(item, ActionEnvelope):
            continue
        action = item.action
        if isinstance(action, TerminalExited):
            return None
        if not isinstance(action, TerminalData):
            continue
        data = action.data
        if not seen_begin:
            tail += data
            marker = tail.find(begin + "\r\n")
            if marker < 0:
                tail = tail[-(len(begin) + 2) :]
                continue
            seen_begin = True
            data = tail[marker:]
            tail = ""
        output.add(data)
        window = (tail + data)[-(len(begin) + 64) :]
        tail = window
        match = end_re.search(window)
        if match:
            return int(match.group(1))
    return None
