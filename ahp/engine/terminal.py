"""One terminal: a Trio nursery from a child process on a pty to published envelopes.

Why this shape: the terminal's state has exactly one writer, the *reduce step*:
synchronous functions that apply one item — a batch of parsed output actions or
the exit (:meth:`Terminal._reduce`), or a client action
(:meth:`Terminal._client_action`) — to the state and publish the result through
the hub. Because they never await, two reduce steps can never interleave, and
items are applied whole, one at a time, in the order they are handed over. The
reduce step is called by whichever task produced the item::

    pty-read: read ──bytes──▶ parse (UTF-8, OSC scan) ──actions──▶ reduce ──▶ hub
    dispatch (a client's or the library's task): rules ──▶ reduce ──▶ hub
                                                     └──▶ pty write (input)
    input-write: what a direct write could not hand to the kernel at once
    wait (exit code) ──▶ pty-read (applies ``terminal/exited`` after the last byte)

(An earlier design ran read, parse and reduce as three tasks joined by memory
channels, and client actions went through the reducer's channel. Each hop cost
a pass of the scheduler: instrumented, a keystroke took 53 µs from its frame to
the pty write and its echo 109 µs from the pty read to being applied; inline,
15 µs and 10 µs. The stages are kept as functions; the state still changes only
in the reduce step.)

Batching without timers: the reader reads until the pty says EAGAIN (or a batch
is full) and only then parses and applies the batch, so under sustained output
several kernel reads (≈4 KiB each) become one ``terminal/data``, while an
isolated keystroke echo is forwarded at once. Every batch is followed by a
checkpoint (a wait for readability when the pty was drained, a plain checkpoint
when the batch was full), so one busy terminal never starves the others.

Backpressure: while the reader parses and applies a batch it does not read, the
kernel's pty buffer fills and the child blocks in ``write`` — ordinary terminal
flow control. The fastest live subscriber paces the reader when every
subscriber is behind (:meth:`~ahp.engine.hub.Hub.pacer`); a stalled or slower
subscriber never does (see :mod:`ahp.engine.hub` and :mod:`ahp.engine.outbox`).

Input: a client's ``terminal/input`` is written to the pty by the reduce step
with one non-blocking write when nothing is queued ahead of it (a keystroke
reaches the kernel without waking another task); what the kernel does not take
at once is queued for the input-write task, which keeps the order.

Exit: the reader drains the pty until EOF (EIO). If the process exits while
something else still holds the pty (a background job), the reader keeps going
until the pty has been quiet for ``EXIT_LINGER`` seconds. Every byte read is
published before ``terminal/exited``. The terminal keeps its state until
disposed.

Ownership: the terminal owns its :class:`~ahp.pty.Child` (process and fds) and
its shell-integration files; :meth:`Terminal.dispose` (or cancellation of the
host) hangs up the process group, waits ``grace`` seconds, kills, reaps and
closes every fd — always, shielded from cancellation.
"""

from __future__ import annotations

import codecs
import logging
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Final

import attrs
import trio

from ahp.engine.hub import PACE_WINDOW, Hub
from ahp.engine.launch import Launch, TerminalSpec, discard
from ahp.engine.outbox import Outbox
from ahp.engine.subscription import Subscription
from ahp.protocol.actions import (
    ActionOrigin,
    StateAction,
    TerminalClaimed,
    TerminalCleared,
    TerminalData,
    TerminalExited,
    TerminalInput,
    TerminalResized,
    TerminalTitleChanged,
    action_type,
)
from ahp.protocol.state import (
    ClientClaim,
    SessionClaim,
    Snapshot,
    TerminalClaim,
    TerminalInfo,
    TerminalState,
)
from ahp.pty import Child, ChildGone, SpawnError, kill_session, spawn
from ahp.reducers import Scrollback, reduce_terminal
from ahp.run import DEFAULT_MAX_OUTPUT, CommandResult, run_command
from ahp.vt import CommandTracker, Scanner, events_to_actions

__all__ = [
    "EXIT_LINGER",
    "MAX_PENDING_INPUT",
    "READ_BATCH",
    "Terminal",
    "TerminalSpec",
]

log = logging.getLogger("ahp.engine")

#: One kernel read (the pty hands out ~4 KiB at a time whatever we ask for).
READ_SIZE: Final = 64 * 1024
#: Reads are gathered until EAGAIN or until this many bytes: one action per batch.
#: About what the pty buffers (Linux: ~17 KB from the child to the master): while a
#: batch is parsed and applied nobody reads, and once the buffer is full the child
#: blocks. Batches of 16 KiB keep those pauses short enough that the child rarely
#: does (64 KiB batches: ~10% less throughput in-process, measured).
READ_BATCH: Final = 16 * 1024
#: Input bytes accepted but not yet written to the pty; beyond it input is rejected.
MAX_PENDING_INPUT: Final = 16 * 1024 * 1024
#: After the process exits, a pty still held open is read until quiet this long.
EXIT_LINGER: Final = 0.1
#: Window size bounds accepted from clients.
MAX_DIMENSION: Final = 4096


def _has_surrogates(text: str) -> bool:
    """Whether ``text`` holds lone surrogates (it cannot be encoded as UTF-8)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


@attrs.frozen
class _ClientAction:
    action: StateAction
    origin: ActionOrigin | None
    sender: Outbox | None


class Terminal:
    """A live terminal; create it with :meth:`ahp.engine.Host.create_terminal`.

    Read its state with :attr:`state` / :meth:`snapshot`; follow it with
    :meth:`subscribe`; drive it with :meth:`send_input`, :meth:`resize`,
    :meth:`dispatch`. All methods must be called from the host's Trio run.
    """

    def __init__(
        self,
        spec: TerminalSpec,
        launch: Launch,
        hub: Hub,
        *,
        nonce: str,
        on_info_changed: Callable[[Terminal], None],
    ) -> None:
        self.spec = spec
        self.uri = spec.uri
        self._hub = hub
        self._on_info_changed = on_info_changed
        self._child: Child | None = None
        self._launch = launch
        self.nonce = nonce
        self._state = TerminalState(title="", claim=spec.claim, content=())
        self._scrollback = Scrollback(spec.scrollback)
        self._input: deque[bytes] = deque()
        self._input_bytes = 0
        self._input_lot = trio.lowlevel.ParkingLot()
        self._input_busy = False  # the write task is in Child.write
        self._input_gone = False  # the child's input side is gone: input is dropped
        #: Whether the reduce step may run: from the start of the tasks until they end
        #: (or the reduce step failed).
        self._reducing = False
        self._cancel_scope = trio.CancelScope()
        self._wait_scope: trio.CancelScope | None = None
        self._process_exited = trio.Event()
        self._exit_code: int | None = None
        self.exited = trio.Event()
        self.closed = trio.Event()
        self.failure: BaseException | None = None
        #: Figures for tests and benchmarks.
        self.read_batches = 0
        self.bytes_read = 0

    # -- public view -------------------------------------------------------------------------

    @property
    def state(self) -> TerminalState:
        """The current state (immutable; later changes produce new values)."""
        return self._state

    @property
    def pid(self) -> int | None:
        return self._child.pid if self._child is not None else None

    @property
    def running(self) -> bool:
        return self._child is not None and not self.exited.is_set()

    @property
    def integrated(self) -> bool:
        """Whether command detection was injected into the shell."""
        return self._launch.integrated

    def info(self) -> TerminalInfo:
        s = self._state
        return TerminalInfo(
            resource=self.uri, title=s.title, claim=s.claim, exitCode=s.exitCode, exited=s.exited
        )

    def snapshot(self) -> Snapshot:
        """The state with the global ``serverSeq`` it reflects."""
        return Snapshot(resource=self.uri, state=self._state, fromSeq=self._hub.seq)

    def subscribe(self, *, max_bytes: int | None = None) -> Subscription:
        """Follow this terminal: a :class:`Snapshot`, then every later envelope.

        Buffering: up to ``max_bytes`` queued (default 4 MiB); a consumer that falls
        further behind gets a fresh snapshot instead of the missed envelopes.
        """

        def attach(outbox: Outbox) -> Snapshot | None:
            if self.closed.is_set():
                return None
            self._hub.subscribe(self.uri, outbox, exclusive=True)
            return self.snapshot()

        def detach(outbox: Outbox) -> None:
            self._hub.unsubscribe(self.uri, outbox)

        if max_bytes is None:
            return Subscription(attach, detach)
        return Subscription(attach, detach, max_bytes=max_bytes)

    async def dispatch(
        self,
        action: StateAction,
        *,
        origin: ActionOrigin | None = None,
        sender: Outbox | None = None,
    ) -> None:
        """Apply a client action now (accepted, or rejected to ``sender``).

        Runs the reduce step in the caller's task (a checkpoint follows). A failure
        of the reduce step ends this terminal, as a crash of one of its tasks
        would; the caller does not see it. Ignored once the terminal is closing.
        """
        if self._reducing:
            try:
                self._client_action(_ClientAction(action, origin, sender))
            except Exception as exc:
                self._reduce_failed(exc)
        await trio.lowlevel.checkpoint()

    async def send_input(self, data: str | bytes) -> None:
        """Write keystrokes/text to the terminal (as a ``terminal/input`` action)."""
        text = data.decode("utf-8", "surrogateescape") if isinstance(data, bytes) else data
        await self.dispatch(TerminalInput(data=text))

    async def resize(self, cols: int, rows: int) -> None:
        await self.dispatch(TerminalResized(cols=cols, rows=rows))

    async def wait_exited(self) -> int | None:
        """Wait until the process has exited and every byte is published; its exit code."""
        await self.exited.wait()
        return self._state.exitCode

    # -- lifecycle ---------------------------------------------------------------------------

    async def run(
        self,
        command_line: str,
        *,
        timeout: float | None = None,
        max_output_bytes: int = DEFAULT_MAX_OUTPUT,
        claim: TerminalClaim | None = None,
    ) -> CommandResult:
        """Type ``command_line`` into this terminal and return its :class:`CommandResult`.

        Uses command detection when the shell reports it, else a marker-based
        fallback (see :mod:`ahp.run`). On ``timeout`` the command is interrupted
        (``\\x03``) and what arrived is returned with ``timed_out=True``;
        cancelling the call interrupts the command too. Output beyond
        ``max_output_bytes`` keeps the most recent bytes (``truncated=True``).
        With ``claim`` (e.g. a :class:`SessionClaim` naming a tool call) the
        terminal is claimed for the duration and the previous claim restored.
        """
        return await run_command(
            _LocalDriver(self),
            command_line,
            timeout=timeout,
            max_output_bytes=max_output_bytes,
            claim=claim,
        )

    async def interrupt(self) -> None:
        """Send Ctrl-C: the pty delivers SIGINT to the foreground job."""
        await self.send_input("\x03")

    async def lifetime(
        self, *, task_status: trio.TaskStatus[Terminal] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Spawn the process and run the terminal's tasks until disposed.

        Raises :class:`~ahp.pty.SpawnError` (before ``task_status.started``) when the
        process cannot be started or :meth:`close` was called meanwhile; nothing is
        left behind then. A crash of one of the terminal's own tasks is logged and
        ends this terminal only. Every path out of here sets :attr:`closed`.
        """
        spec, launch = self.spec, self._launch
        child: Child | None = None
        try:
            with self._cancel_scope:  # close() during the spawn cancels it too
                child = await spawn(launch.spawn)  # SpawnError: nothing started
                self._child = child
                self._state = TerminalState(
                    title=launch.title,
                    claim=spec.claim,
                    content=(),
                    cwd=launch.cwd_uri,
                    cols=spec.cols if spec.use_pty else None,
                    rows=spec.rows if spec.use_pty else None,
                    isPty=spec.use_pty,
                )
                try:
                    async with trio.open_nursery() as nursery:
                        self._reducing = True
                        nursery.start_soon(self._read_loop)
                        nursery.start_soon(self._write_loop)
                        nursery.start_soon(self._wait_loop)
                        task_status.started(self)
                except Exception as exc:  # one terminal's failure ends that terminal only
                    self.failure = exc
                    log.exception("terminal %s failed", self.uri)
                finally:
                    self._reducing = False
            if child is None:
                raise SpawnError("the terminal was disposed while it was starting")
        finally:
            if child is not None:
                with trio.CancelScope(shield=True):
                    await child.terminate(spec.grace)
                if spec.use_pty:  # background jobs left in the terminal's session (no orphans)
                    kill_session(child.pid)
            discard(launch)
            if not self.exited.is_set():
                if child is not None:
                    # Failed or disposed while running: the state still records an exit.
                    self._state = reduce_terminal(self._state, TerminalExited())
                self.exited.set()
            self.closed.set()  # invariant: every path out of here ends in "closed"

    def close(self) -> None:
        """Start disposal: cancel the tasks; :meth:`run` then terminates and reaps."""
        self._cancel_scope.cancel()

    # -- tasks -------------------------------------------------------------------------------

    async def _read_loop(self) -> None:
        child = self._child
        assert child is not None
        feed, close = self._parser()
        while True:
            chunks: list[bytes] = []
            size = 0
            eof = False
            while size < READ_BATCH:
                data = child.read_nowait(READ_SIZE)
                if data is None:
                    break
                if not data:
                    eof = True
                    break
                chunks.append(data)
                size += len(data)
            if chunks:
                self.read_batches += 1
                self.bytes_read += size
                actions = feed(chunks[0] if len(chunks) == 1 else b"".join(chunks))
                if actions:
                    self._reduce(actions)
            if eof:
                break
            if chunks:
                pacer = self._hub.pacer(self.uri)
                if pacer is not None:
                    with trio.move_on_after(PACE_WINDOW):
                        await pacer.wait_taken()
                    continue
                if size >= READ_BATCH:
                    await trio.lowlevel.checkpoint()  # fairness: one batch at a time
                    continue
                # Drained (EAGAIN): wait below, which is also a checkpoint. Reading
                # again after a checkpoint would cost a read (EAGAIN, mostly) per
                # batch, and delay whoever sends what this batch published.
            if self._process_exited.is_set():
                # The process is gone but something still holds the pty open.
                with trio.move_on_after(EXIT_LINGER) as linger:
                    await child.wait_readable()
                if linger.cancelled_caught:
                    break
                continue
            with trio.CancelScope() as self._wait_scope:
                await child.wait_readable()
            self._wait_scope = None
        tail = close()
        if tail:
            self._reduce(tail)
        await self._process_exited.wait()
        self._reduce([TerminalExited(exitCode=self._exit_code)])
        self.exited.set()

    def _parser(
        self,
    ) -> tuple[Callable[[bytes], Sequence[StateAction]], Callable[[], Sequence[StateAction]]]:
        """``feed(chunk)`` and ``close()`` turning output bytes into actions."""
        if self.spec.use_pty:
            scanner = Scanner()
            # Our own OSC 633 hooks are authoritative: a shell's OSC 133 (fish 4) must
            # not report every command a second time.
            tracker = CommandTracker(
                nonce=self.nonce if self.integrated else None, osc133=not self.integrated
            )

            def feed(chunk: bytes) -> Sequence[StateAction]:
                return events_to_actions(
                    tracker,
                    scanner.feed(chunk),
                    wall_ms=int(time.time() * 1000),
                    mono_ms=time.monotonic() * 1000,
                )

            def close() -> Sequence[StateAction]:
                return events_to_actions(
                    tracker,
                    scanner.close(),
                    wall_ms=int(time.time() * 1000),
                    mono_ms=time.monotonic() * 1000,
                )

            return feed, close

        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

        def decode(chunk: bytes) -> Sequence[StateAction]:
            text = decoder.decode(chunk)
            return [TerminalData(data=text)] if text else []

        def flush() -> Sequence[StateAction]:
            text = decoder.decode(b"", final=True)
            return [TerminalData(data=text)] if text else []

        return decode, flush

    async def _wait_loop(self) -> None:
        child = self._child
        assert child is not None
        self._exit_code = await child.wait()
        self._process_exited.set()
        if self._wait_scope is not None:
            self._wait_scope.cancel()

    async def _write_loop(self) -> None:
        child = self._child
        assert child is not None
        while True:
            while not self._input:
                await self._input_lot.park()
            data = self._input.popleft()
            self._input_busy = True
            try:
                await child.write(data)
            except (ChildGone, trio.ClosedResourceError):
                self._input_gone = True
                self._input.clear()
                self._input_bytes = len(data)  # zero after the finally clause
                return
            finally:
                self._input_busy = False
                self._input_bytes -= len(data)

    def _write_input(self, data: bytes) -> None:
        """Input for the pty, in order: written at once when nothing is queued (a
        keystroke reaches the kernel without waking the write task), else — and
        for whatever the kernel did not take — queued for the write task."""
        if self._input_gone:
            return
        child = self._child
        if not self._input and not self._input_busy and child is not None:
            try:
                written = child.write_nowait(data)
            except (ChildGone, trio.ClosedResourceError):
                self._input_gone = True
                return
            if written == len(data):
                return
            data = data[written:]
        self._input.append(data)
        self._input_bytes += len(data)
        self._input_lot.unpark_all()

    # -- the reduce step -----------------------------------------------------------------------

    def _reduce(self, actions: Sequence[StateAction]) -> None:
        """Apply a batch of parsed output, or the exit (called by the read task; a
        failure propagates and ends the terminal)."""
        if not self._reducing:
            return
        try:
            for action in actions:
                self._apply(action)
        except BaseException:
            self._reducing = False
            raise

    def _reduce_failed(self, exc: Exception) -> None:
        """The reduce step failed in a dispatching task: end this terminal, as a
        crash of one of its own tasks would."""
        self._reducing = False
        if self.failure is None:
            self.failure = exc
        log.error("terminal %s failed", self.uri, exc_info=exc)
        self.close()

    # -- reducing (the only writer of self._state; synchronous) ----------------------------------

    def _apply(self, action: StateAction, origin: ActionOrigin | None = None) -> None:
        before = self._state
        state = self._scrollback.account(reduce_terminal(before, action), action)
        self._state = state
        self._hub.publish(self.uri, action, origin)
        if (
            state.title != before.title
            or state.claim != before.claim
            or state.exitCode != before.exitCode
            or isinstance(action, TerminalExited)
        ):
            self._on_info_changed(self)

    def _client_action(self, item: _ClientAction) -> None:
        action, origin, sender = item.action, item.origin, item.sender
        reason = self._rejection(action, origin)
        if reason is None:
            if isinstance(action, TerminalInput):
                data = action.data.encode("utf-8", "surrogateescape")
                if data:
                    self._write_input(data)
                if not action.data.isascii() and _has_surrogates(action.data):
                    # Bytes that are not UTF-8 (``send_input(b"\xff")``) went to the pty
                    # as they are; the echo must be valid Unicode to be sent anywhere.
                    action = TerminalInput(data=data.decode("utf-8", "replace"))
            elif (
                isinstance(action, TerminalResized)
                and self._child is not None
                and not self.exited.is_set()
            ):
                self._child.resize(action.cols, action.rows)
            self._apply(action, origin)
            return
        if origin is None:  # an in-process caller: nobody to echo to
            log.info("terminal %s: %s rejected: %s", self.uri, action_type(action), reason)
            return
        self._hub.reject(sender, self.uri, action, origin, reason)
        # Some clients' mirrors apply even rejected echoes: send them the true value.
        state = self._state
        heal: StateAction | None = None
        if (
            isinstance(action, TerminalResized)
            and state.cols is not None
            and state.rows is not None
        ):
            heal = TerminalResized(cols=state.cols, rows=state.rows)
        elif isinstance(action, TerminalClaimed):
            heal = TerminalClaimed(claim=state.claim)
        elif isinstance(action, TerminalTitleChanged):
            heal = TerminalTitleChanged(title=state.title)
        if heal is not None:
            self._hub.send_to(sender, self.uri, heal)

    def _rejection(self, action: StateAction, origin: ActionOrigin | None) -> str | None:
        match action:
            case TerminalInput(data=data):
                if self.exited.is_set():
                    return "the terminal's process has exited"
                if self._input_bytes + len(data) > MAX_PENDING_INPUT:
                    return f"input buffer full ({MAX_PENDING_INPUT} bytes pending)"
                return None
            case TerminalResized(cols=cols, rows=rows):
                if not self.spec.use_pty:
                    return "not a pty: it cannot be resized"
                if not (1 <= cols <= MAX_DIMENSION and 1 <= rows <= MAX_DIMENSION):
                    return f"cols and rows must be between 1 and {MAX_DIMENSION}"
                return None
            case TerminalClaimed():
                current = self._state.claim
                if origin is None or isinstance(current, SessionClaim):
                    return None
                if isinstance(current, ClientClaim) and current.clientId == origin.clientId:
                    return None
                return f"the terminal is claimed by client {current.clientId!r}"
            case TerminalTitleChanged() | TerminalCleared():
                return None
            case _:
                return f"{action_type(action)!r} cannot be dispatched by a client"


class _LocalDriver:
    """Adapts a :class:`Terminal` to :class:`ahp.run.TerminalDriver`."""

    def __init__(self, terminal: Terminal) -> None:
        self._terminal = terminal

    @property
    def state(self) -> TerminalState:
        return self._terminal.state

    def follow(self) -> Subscription:
        return self._terminal.subscribe(max_bytes=64 * 1024 * 1024)

    async def send_input(self, data: str) -> None:
        await self._terminal.send_input(data)

    @property
    def detection_wait(self) -> float:
        # Only shells we injected can announce detection; give them time to start.
        return 10.0 if self._terminal.integrated else 0.0

    async def set_claim(self, claim: TerminalClaim) -> None:
        terminal = self._terminal
        async with terminal.subscribe() as updates:
            await terminal.dispatch(TerminalClaimed(claim=claim))
            async for _ in updates:
                if terminal.state.claim == claim or terminal.closed.is_set():
                    break
