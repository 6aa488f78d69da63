"""One terminal: a Trio nursery of stage tasks joined by bounded memory channels.

Why this shape (``design.md``, "The shape"): each stage of a terminal is a task
that owns one job, and the state has exactly one writer, the reducer task::

    child process ⇄ pty master
      pty-read ──bytes──▶ parse ──actions──▶ reducer ──▶ hub: serverSeq, replay log,
                                 ▲            │  │      subscriber outboxes (their
      dispatch (clients, library)┘            │  │      writer tasks drain them)
      exit watcher ──exit code────────────────┘  └──input──▶ input-write ──▶ pty

* **pty-read** reads the master until EAGAIN (or a batch of :data:`READ_BATCH`
  bytes), hands the batch to the parse task and waits for readability again;
  when every subscriber is behind, the fastest live one paces it (see
  :meth:`~ahp.engine.hub.Hub.pacer`). At EOF (EIO), or once the process has
  exited and the pty stayed quiet for :data:`EXIT_LINGER`, it closes its channel.
* **parse** drives an :class:`~ahp.vt.OutputParser` (bytes in, actions out, the
  clocks passed in): UTF-8, escape scanning, shell-integration marks, titles and
  cwd reports. When the reader's channel ends it flushes the parser and tells
  the reducer that the output ended.
* **reducer** drives a :class:`~ahp.reducers.TerminalCore` (state, claim and
  rejection rules, healing values, scrollback, catalogue changes): it applies
  parsed output, client and library actions (:meth:`Terminal.dispatch`) and the
  exit, publishes every applied action through the hub, sends accepted input on
  to the input-write task and resizes the pty. ``terminal/exited`` is applied
  once both the output ended and the exit watcher reported the exit code, so
  every byte the process wrote is published before it. After each batch it tells
  the host when the catalogue entry changed (at most once per batch).
* **input-write** writes input to the pty in order, without blocking the loop
  (:meth:`ahp.pty.Child.write`, in slices).
* **exit watcher** waits for the process, then tells the reader (stop lingering)
  and the reducer (the exit code).

Every channel is bounded (:data:`PARSE_QUEUE`, :data:`REDUCER_QUEUE`,
:data:`INPUT_QUEUE`). A full channel is the backpressure: when the parse or
reducer task cannot keep up, the reader waits, the kernel's pty buffer fills
and the child blocks in ``write``; a caller of :meth:`Terminal.dispatch` waits
for room too. The reducer never waits on anyone: it publishes into bounded
outboxes that decide for themselves (merge, resynchronise, overflow; see
:mod:`ahp.engine.outbox`), and input beyond the input channel's bound (or
:data:`~ahp.reducers.core.MAX_PENDING_INPUT` bytes) is rejected, not queued.

Batching: each hop between tasks costs a pass of the scheduler, so every task
first drains what is already waiting in its channel (``receive_nowait``, which
also takes the items of producers waiting for room) and works on the whole
batch, and hands its result on with ``send_nowait`` (waiting only when the
channel is full). Under sustained output a hop is paid once per batch, not per
read; an isolated keystroke echo goes through at once. Because consumers drain
everything, a channel fills only when its consumer cannot run for a while (a
parse task waiting for room at the reducer, many callers in one pass); the
bounds then hold memory and stop the producers.

Callers: :meth:`Terminal.dispatch` returns once the action is queued; with
``wait=True``, once the reducer decided on it and told the catalogue (the
server uses that where a client must read the result at once).

Ownership and cancellation: the terminal owns its :class:`~ahp.pty.Child`
(process and fds), its channels and its launch's files. :meth:`Terminal.close`
(dispose, or the host's shutdown) cancels the nursery, also while the process
is still being spawned; then the process group is hung up, given ``grace``
seconds, killed, reaped and every fd closed — always, shielded from
cancellation — and :attr:`Terminal.closed` is set on every path. A crash of one
of the tasks ends this terminal only (:attr:`Terminal.failure`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Final, TypeVar

import trio

from ahp.engine.hub import PACE_WINDOW, Hub
from ahp.engine.launch import Launch, TerminalSpec
from ahp.engine.launch import discard as discard_launch
from ahp.engine.outbox import Outbox
from ahp.engine.subscription import Subscription
from ahp.protocol.actions import (
    ActionOrigin,
    StateAction,
    TerminalClaimed,
    TerminalExited,
    TerminalInput,
    TerminalResized,
    action_type,
)
from ahp.protocol.state import Snapshot, TerminalClaim, TerminalInfo, TerminalState
from ahp.pty import Child, ChildGone, SpawnError, kill_session, procfs, spawn
from ahp.reducers import Rejected, TerminalCore
from ahp.reducers.core import MAX_DIMENSION, MAX_PENDING_INPUT
from ahp.reducers.policy import Change
from ahp.run import (
    FOLLOW_BYTES,
    CommandRegistry,
    CommandSurface,
    InputEvidence,
    evidence_of,
)
from ahp.vt import OutputParser
from ahp.vt.screen import Screen, ScreenModel

__all__ = [
    "EXIT_LINGER",
    "INPUT_QUEUE",
    "MAX_DIMENSION",
    "MAX_PENDING_INPUT",
    "PARSE_QUEUE",
    "READ_BATCH",
    "REDUCER_QUEUE",
    "Terminal",
    "TerminalSpec",
]

log = logging.getLogger("ahp.engine")

_T = TypeVar("_T")

#: One kernel read (the pty hands out ~4 KiB at a time whatever we ask for).
READ_SIZE: Final = 64 * 1024
#: Reads are gathered until EAGAIN or until this many bytes: one batch for the parser.
#: About what the pty buffers (Linux: ~17 KB from the child to the master).
READ_BATCH: Final = 16 * 1024
#: A first read shorter than this ends its batch at once (see the pty-read task).
SMALL_READ: Final = 256
#: Batches queued from pty-read to parse (at most READ_BATCH bytes each).
PARSE_QUEUE: Final = 4
#: Items queued for the reducer: parsed batches, client and library actions, the exit.
REDUCER_QUEUE: Final = 64
#: Input chunks queued for the input-write task (bytes bounded by MAX_PENDING_INPUT).
INPUT_QUEUE: Final = 1024
#: Input of at most this many bytes (a keystroke) is followed by a short spin (see
#: Terminal._spin_for_echo), at most ECHO_SPIN seconds.
ECHO_SPIN_INPUT: Final = 8
ECHO_SPIN: Final = 0.0002
#: After the process exits, a pty still held open is read until quiet this long.
EXIT_LINGER: Final = 0.1
#: How long a command's jobs may take to ``exec`` before they are reported as they are.
JOB_SETTLE: Final = 0.5
JOB_SETTLE_POLL: Final = 0.02


class _ClientAction:
    """A client's or the library's action on its way to the reducer; ``decided`` (if
    any) is set once the reducer has accepted or rejected it, or the terminal closed."""

    __slots__ = ("action", "decided", "origin", "sender")

    def __init__(
        self,
        action: StateAction,
        origin: ActionOrigin | None,
        sender: Outbox | None,
        decided: trio.Event | None = None,
    ) -> None:
        self.action = action
        self.origin = origin
        self.sender = sender
        #: Set once the action was applied or rejected and the catalogue told.
        self.decided = decided


class _OutputEnded:
    """The parse task's last item: every byte of output has been parsed."""


class _ProcessExited:
    """The exit watcher's item: the process's exit code (None: killed by a signal)."""

    __slots__ = ("code",)

    def __init__(self, code: int | None) -> None:
        self.code = code


_OUTPUT_ENDED: Final = _OutputEnded()

#: What the reducer receives: a parsed batch, an action to decide on, or an end.
_ReducerItem = Sequence[StateAction] | _ClientAction | _OutputEnded | _ProcessExited


async def _send(channel: trio.MemorySendChannel[_T], item: _T) -> None:
    """Hand ``item`` on without a scheduler pass when there is room (the receiver is
    woken either way); wait for room otherwise (backpressure)."""
    try:
        channel.send_nowait(item)
    except trio.WouldBlock:
        await channel.send(item)


class Terminal(CommandSurface):
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
        self._core = TerminalCore(
            TerminalState(
                title=launch.title,
                claim=spec.claim,
                content=(),
                cwd=launch.cwd_uri,
                cols=spec.cols if spec.use_pty else None,
                rows=spec.rows if spec.use_pty else None,
                isPty=spec.use_pty,
            ),
            uri=spec.uri,
            scrollback=spec.scrollback,
            use_pty=spec.use_pty,
        )
        self._to_reducer, self._reducer_inbox = trio.open_memory_channel[_ReducerItem](
            REDUCER_QUEUE
        )
        #: Whether dispatched actions are taken: from the start of the tasks until the
        #: reducer ends.
        self._accepting = False
        self._to_writer: trio.MemorySendChannel[bytes] | None = None
        self._pending_input = 0  # bytes accepted for the pty and not yet written
        self._input_gone = False  # the child's input side is gone: input is dropped
        self._output_ended = False
        self._exit_code: _ProcessExited | None = None
        self._cancel_scope = trio.CancelScope()
        self._wait_scope: trio.CancelScope | None = None
        self._tasks: trio.Nursery | None = None  # command collectors (ahp.run)
        self._screen: ScreenModel | None = None
        #: Recent commands by id (:attr:`commands`, :meth:`command`).
        self._commands = CommandRegistry()
        self._process_exited = trio.Event()
        self.exited = trio.Event()
        self.closed = trio.Event()
        self.failure: BaseException | None = None
        #: Figures for tests and benchmarks.
        self.read_batches = 0
        self.bytes_read = 0
        self.reducer_batches = 0
        #: Times the pty-read task found the parse channel full and waited.
        self.parse_waits = 0

    # -- public view -------------------------------------------------------------------------

    @property
    def state(self) -> TerminalState:
        """The current state (immutable; later changes produce new values)."""
        return self._core.state

    @property
    def pid(self) -> int | None:
        return self._child.pid if self._child is not None else None

    @property
    def running(self) -> bool:
        return self._child is not None and not self.exited.is_set()

    @property
    def holder_only_input(self) -> bool:
        """Whether clients' input is refused unless they hold the terminal's client
        claim (set by the host; in-process input is always taken)."""
        return self._core.holder_only_input

    @holder_only_input.setter
    def holder_only_input(self, value: bool) -> None:
        self._core.holder_only_input = value

    def input_refused(self, client_id: str | None) -> str | None:
        """Why this client's input is refused now by the claim rules (None: taken)."""
        return self._core.input_refused(client_id)

    def refusal(self, change: Change, client_id: str | None) -> str | None:
        """Why ``client_id`` may not make ``change`` now (None: it may); the one table
        of :mod:`ahp.reducers.policy`, see :meth:`ahp.reducers.TerminalCore.refusal`."""
        return self._core.refusal(change, client_id)

    @property
    def integrated(self) -> bool:
        """Whether command detection was injected into the shell."""
        return self._launch.integrated

    def info(self) -> TerminalInfo:
        """The terminal's catalogue entry."""
        return self._core.info()

    def snapshot(self) -> Snapshot:
        """The state with the global ``serverSeq`` it reflects."""
        return Snapshot(resource=self.uri, state=self._core.state, fromSeq=self._hub.seq)

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
        wait: bool = False,
        checkpoint: bool = True,
    ) -> None:
        """Hand a client (``origin``) or library action to the reducer task.

        It is applied in order with everything else the reducer takes (output
        included): accepted and published, or rejected to ``sender`` only. Returns
        once the action is queued (waiting while the reducer's channel is full:
        backpressure); with ``wait`` only once the reducer has decided on it and
        told the catalogue (or the terminal closed). Ignored once the terminal
        is closing.

        ``checkpoint=False`` is for a caller whose own loop checkpoints (a
        connection's reader, which waits for the next frame next): queued at once,
        the call then returns without a second pass of the scheduler for its task.
        """
        if self._accepting:
            decided = trio.Event() if wait else None
            try:
                await _send(self._to_reducer, _ClientAction(action, origin, sender, decided))
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass  # the reducer ended meanwhile: the terminal is closing
            else:
                if decided is None:
                    if checkpoint:
                        await trio.lowlevel.checkpoint()
                    return
                async with trio.open_nursery() as nursery:

                    async def closed() -> None:
                        await self.closed.wait()
                        nursery.cancel_scope.cancel()

                    nursery.start_soon(closed)
                    await decided.wait()
                    nursery.cancel_scope.cancel()
                return
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
        return self._core.state.exitCode

    # -- lifecycle ---------------------------------------------------------------------------

    def _command_driver(self) -> _LocalDriver:
        return _LocalDriver(self)

    @property
    def commands(self) -> CommandRegistry:
        """Recent commands run or started in this terminal."""
        return self._commands

    def screen(self) -> Screen:
        """The visible screen now (rendered on demand: see :mod:`ahp.vt.screen`)."""
        if self._screen is None:
            self._screen = ScreenModel(self.spec.cols, self.spec.rows)
        return self._screen.update(self.state)

    def tty_status(self) -> procfs.TtyStatus | None:
        """The pty's foreground process group, echo flag and the processes blocked
        reading it (``None`` without a pty or once closed)."""
        child = self._child
        if child is None or not self.spec.use_pty or child.output_fd < 0 or self.exited.is_set():
            return None
        return procfs.tty_status(child.output_fd)

    def job_mark(self) -> procfs.JobMark | None:
        """A cheap mark of the session's jobs now, for :meth:`jobs_since`."""
        child = self._child
        if child is None or not self.spec.use_pty or self.exited.is_set():
            return None
        return procfs.job_mark(child.pid)

    def jobs_since(self, mark: procfs.JobMark | None = None) -> dict[int, str]:
        """The jobs running in this terminal's session (started since ``mark``): pid →
        command line (processes outside the shell's own process group, see
        :func:`ahp.pty.procfs.jobs_since`)."""
        child = self._child
        if child is None or not self.spec.use_pty or self.exited.is_set():
            return {}
        return {pid: line for pid, (_, line) in procfs.jobs_since(child.pid, mark).items()}

    async def background_jobs(self, mark: procfs.JobMark | None = None) -> dict[int, str]:
        """:meth:`jobs_since`, once the jobs have started their programs: a job that
        still shows the shell's own command line (forked, not yet ``exec``-ed) or no
        arguments at all (in the middle of ``exec``: ``[sleep]``) is looked at again
        every :data:`JOB_SETTLE_POLL` s, for at most :data:`JOB_SETTLE` s (a
        subshell job ``( … ) &`` keeps the shell's line for good)."""
        child = self._child
        if child is None:
            return {}
        deadline = trio.current_time() + JOB_SETTLE
        while True:
            jobs = self.jobs_since(mark)
            shell_line = procfs.command_line(child.pid)
            settled = not any(line == shell_line or line.startswith("[") for line in jobs.values())
            if settled or trio.current_time() >= deadline:
                return jobs
            await trio.sleep(JOB_SETTLE_POLL)

    async def kill_command(self, mark: procfs.JobMark | None = None) -> None:
        """SIGKILL the foreground job and every job started in the session since
        ``mark``, each by its whole process group. If the shell itself is in the
        foreground (a builtin such as ``read`` or ``wait``), it gets Ctrl-C too."""
        await self.signal_command(signal.SIGKILL, mark)

    async def signal_command(
        self, signum: int, mark: procfs.JobMark | None = None
    ) -> tuple[frozenset[int], bool]:
        """Send ``signum`` to the foreground job and to every job started in the
        session since ``mark``, each by its whole process group; never to the
        shell's own group. If the shell itself is in the foreground (a builtin such
        as ``read`` or ``wait``), it gets Ctrl-C instead.

        Returns the process groups signalled and whether the shell was in the
        foreground (without a pty, or once exited: nothing signalled, Ctrl-C typed —
        dropped by an exited terminal — and ``True``).
        """
        child = self._child
        status = self.tty_status()
        if child is None or status is None:
            await self.send_input("\x03")
            return frozenset(), True
        groups = {pgrp for pgrp, _ in procfs.jobs_since(child.pid, mark).values()}
        if status.foreground_pgrp not in (0, child.pid):
            groups.add(status.foreground_pgrp)
        groups.discard(child.pid)
        for pgrp in groups:
            with contextlib.suppress(OSError):
                os.killpg(pgrp, signum)
        shell_foreground = status.foreground_pgrp == child.pid
        if shell_foreground:
            await self.send_input("\x03")
        await trio.lowlevel.checkpoint()
        return frozenset(groups), shell_foreground

    def spawn_task(self, fn: Callable[[], Awaitable[None]]) -> None:
        """Run ``fn`` in this terminal's nursery (cancelled on dispose); ``fn`` must not raise."""
        if self._tasks is None:
            raise RuntimeError("the terminal is not running")
        self._tasks.start_soon(fn)

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
                try:
                    await self._run_stages(child, task_status)
                except Exception as exc:  # one terminal's failure ends that terminal only
                    self.failure = exc
                    log.exception("terminal %s failed", self.uri)
            if child is None:
                raise SpawnError("the terminal was disposed while it was starting")
        finally:
            self._accepting = False
            self._tasks = None
            self._forget_queued()
            if child is not None:
                with trio.CancelScope(shield=True):
                    await child.terminate(spec.grace)
                if spec.use_pty:  # background jobs left in the terminal's session (no orphans)
                    kill_session(child.pid)
            discard_launch(launch)
            if not self.exited.is_set():
                if child is not None:
                    # Failed or disposed while running: the state still records an exit.
                    self._core.apply(TerminalExited())
                self.exited.set()
            self.closed.set()  # invariant: every path out of here ends in "closed"

    async def _run_stages(self, child: Child, task_status: trio.TaskStatus[Terminal]) -> None:
        """The terminal's nursery: one task per stage, joined by bounded channels."""
        to_parse, parse_inbox = trio.open_memory_channel[bytes](PARSE_QUEUE)
        to_writer, writer_inbox = trio.open_memory_channel[bytes](INPUT_QUEUE)
        self._to_writer = to_writer
        async with trio.open_nursery() as nursery:
            self._tasks = nursery
            nursery.start_soon(self._reducer_task, self._reducer_inbox)
            nursery.start_soon(self._parse_task, parse_inbox)
            nursery.start_soon(self._read_task, child, to_parse)
            nursery.start_soon(self._write_task, child, writer_inbox)
            nursery.start_soon(self._exit_task, child)
            self._accepting = True
            task_status.started(self)

    @property
    def closing(self) -> bool:
        """Disposal has started (or the terminal's tasks have ended)."""
        return self._cancel_scope.cancel_called or self.closed.is_set()

    def _forget_queued(self) -> None:
        """The reducer is gone: release whoever waits for a verdict on a queued action,
        and close the channel (callers waiting for room give up)."""
        inbox = self._reducer_inbox
        while True:
            try:
                item = inbox.receive_nowait()
            except (trio.WouldBlock, trio.EndOfChannel, trio.ClosedResourceError):
                break
            if isinstance(item, _ClientAction) and item.decided is not None:
                item.decided.set()
        inbox.close()

    def close(self) -> None:
        """Start disposal: cancel the tasks; :meth:`lifetime` then terminates and reaps."""
        self._cancel_scope.cancel()

    # -- pty-read ------------------------------------------------------------------------------

    async def _read_task(self, child: Child, to_parse: trio.MemorySendChannel[bytes]) -> None:
        """Read until EAGAIN or a full batch, hand the batch on, wait; close at the end."""
        async with to_parse:
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
                    if size < SMALL_READ:
                        # A keystroke's echo, a prompt: hand it on now. Reading again
                        # would almost always find the pty empty (one more system call
                        # on the echo's path); if more came, the wait below says so.
                        break
                if chunks:
                    self.read_batches += 1
                    self.bytes_read += size
                    batch = chunks[0] if len(chunks) == 1 else b"".join(chunks)
                    try:
                        to_parse.send_nowait(batch)
                    except trio.WouldBlock:
                        self.parse_waits += 1  # the parser is behind: wait (backpressure)
                        await to_parse.send(batch)
                if eof:
                    return
                if chunks:
                    pacer = self._hub.pacer(self.uri)
                    if pacer is not None:
                        with trio.move_on_after(PACE_WINDOW):
                            await pacer.wait_taken()
                        continue
                    if size >= READ_BATCH:
                        await trio.lowlevel.checkpoint()  # fairness: one batch at a time
                        continue
                    # Drained (EAGAIN): the wait below is the checkpoint (reading again
                    # first would cost a read, EAGAIN mostly, per batch).
                if self._process_exited.is_set():
                    # The process is gone but something still holds the pty open.
                    with trio.move_on_after(EXIT_LINGER) as linger:
                        await child.wait_readable()
                    if linger.cancelled_caught:
                        return
                    continue
                with trio.CancelScope() as self._wait_scope:
                    await child.wait_readable()
                self._wait_scope = None

    # -- parse -------------------------------------------------------------------------------

    async def _parse_task(self, inbox: trio.MemoryReceiveChannel[bytes]) -> None:
        """Bytes in, actions out: feed every batch waiting to the parser at once."""
        parser = OutputParser(
            use_pty=self.spec.use_pty, nonce=self.nonce if self.integrated else None
        )
        to_reducer = self._to_reducer
        async with inbox:
            while True:
                try:
                    data = inbox.receive_nowait()
                except trio.WouldBlock:
                    try:
                        data = await inbox.receive()
                    except trio.EndOfChannel:
                        break
                except trio.EndOfChannel:
                    break
                more: list[bytes] | None = None
                while True:  # drain: one parse and one hop for everything waiting
                    try:
                        extra = inbox.receive_nowait()
                    except (trio.WouldBlock, trio.EndOfChannel):
                        break
                    if more is None:
                        more = [data]
                    more.append(extra)
                if more is not None:
                    data = b"".join(more)
                actions = parser.feed(
                    data, wall_ms=int(time.time() * 1000), mono_ms=time.monotonic() * 1000
                )
                if actions:
                    await _send(to_reducer, actions)
        tail = parser.close(wall_ms=int(time.time() * 1000), mono_ms=time.monotonic() * 1000)
        if tail:
            await _send(to_reducer, tail)
        await _send(to_reducer, _OUTPUT_ENDED)

    # -- exit watcher ------------------------------------------------------------------------

    async def _exit_task(self, child: Child) -> None:
        code = await child.wait()
        self._process_exited.set()
        if self._wait_scope is not None:
            self._wait_scope.cancel()  # the reader lingers for what is left, then ends
        await _send(self._to_reducer, _ProcessExited(code))

    # -- input-write -------------------------------------------------------------------------

    async def _write_task(self, child: Child, inbox: trio.MemoryReceiveChannel[bytes]) -> None:
        """Write input to the pty in order: everything waiting, in one write."""
        async with inbox:
            while True:
                try:
                    data = inbox.receive_nowait()
                except trio.WouldBlock:
                    data = await inbox.receive()
                more: list[bytes] | None = None
                while True:
                    try:
                        extra = inbox.receive_nowait()
                    except trio.WouldBlock:
                        break
                    if more is None:
                        more = [data]
                    more.append(extra)
                if more is not None:
                    data = b"".join(more)
                try:
                    # One write(2) first: a keystroke is in the kernel without the
                    # checkpoint that write() takes after each slice (a scheduler pass
                    # per keystroke); what the kernel did not take goes through write().
                    written = child.write_nowait(data)
                    if written < len(data):
                        await child.write(data[written:] if written else data)
                    elif len(data) <= ECHO_SPIN_INPUT:
                        await self._spin_for_echo()
                except (ChildGone, trio.ClosedResourceError):
                    self._input_gone = True  # later input is published but not written
                    return
                finally:
                    # Nothing is pending once the input side is gone (what is still
                    # queued is dropped with the channel).
                    self._pending_input = 0 if self._input_gone else self._pending_input - len(data)

    async def _spin_for_echo(self) -> None:
        """After a keystroke reached the pty, keep the scheduler polling (checkpoints)
        until the pty-read task has read its echo, for at most :data:`ECHO_SPIN`
        seconds: the process does not go to sleep in ``epoll_wait`` only to be woken
        by the kernel's echo tens of microseconds later (a sleep and a wake-up cost
        more than the wait on a virtual machine)."""
        before = self.read_batches
        deadline = trio.current_time() + ECHO_SPIN
        while self.read_batches == before and trio.current_time() < deadline:
            await trio.lowlevel.checkpoint()

    # -- reducer -------------------------------------------------------------------------------

    async def _reducer_task(self, inbox: trio.MemoryReceiveChannel[_ReducerItem]) -> None:
        """The only writer of the state: apply everything waiting, then tell the host
        once if the catalogue entry changed."""
        core = self._core
        # (The inbox is closed by lifetime's finally, after what is still queued has been
        # released: callers may be waiting for a verdict.)
        while True:
            try:
                item = inbox.receive_nowait()
            except trio.WouldBlock:
                item = await inbox.receive()
            self.reducer_batches += 1
            decided: list[trio.Event] | None = None
            try:
                while True:
                    self._reduce(item)
                    if item.__class__ is _ClientAction:
                        assert isinstance(item, _ClientAction)
                        if item.decided is not None:
                            decided = [*(decided or ()), item.decided]
                    try:
                        item = inbox.receive_nowait()
                    except trio.WouldBlock:
                        break
                if core.info_changed:
                    core.info_changed = False
                    self._on_info_changed(self)
            finally:
                # Verdicts are given once the batch is applied and the catalogue told.
                for event in decided or ():
                    event.set()

    def _reduce(self, item: _ReducerItem) -> None:
        cls = item.__class__
        if cls is _ClientAction:
            assert isinstance(item, _ClientAction)
            self._client_action(item.action, item.origin, item.sender)
        elif cls is _ProcessExited:
            assert isinstance(item, _ProcessExited)
            self._exit_code = item
            self._maybe_exited()
        elif cls is _OutputEnded:
            self._output_ended = True
            self._maybe_exited()
        else:
            assert not isinstance(item, _ClientAction | _ProcessExited | _OutputEnded)
            for action in item:
                self._apply(action)

    def _apply(self, action: StateAction, origin: ActionOrigin | None = None) -> None:
        """Apply an action to the state and publish it (the reducer task only)."""
        self._core.apply(action)
        self._hub.publish(self.uri, action, origin)

    def _maybe_exited(self) -> None:
        """Apply ``terminal/exited`` once the output ended and the exit code is known."""
        if self._output_ended and self._exit_code is not None and not self.exited.is_set():
            self._apply(TerminalExited(exitCode=self._exit_code.code))
            self.exited.set()

    def _client_action(
        self, action: StateAction, origin: ActionOrigin | None, sender: Outbox | None
    ) -> None:
        verdict = self._core.decide(action, origin, pending_input=self._pending_input)
        if verdict.__class__ is Rejected:
            assert isinstance(verdict, Rejected)
            if origin is None:  # an in-process caller: nobody to echo to
                log.info(
                    "terminal %s: %s rejected: %s", self.uri, action_type(action), verdict.reason
                )
                return
            self._hub.reject(sender, self.uri, action, origin, verdict.reason)
            if verdict.heal is not None:
                # Some clients' mirrors apply even rejected echoes: send them the true value.
                self._hub.send_to(sender, self.uri, verdict.heal)
            return
        assert not isinstance(verdict, Rejected)
        if verdict.write is not None and not self._input_gone:
            writer = self._to_writer
            assert writer is not None
            try:
                writer.send_nowait(verdict.write)
            except (trio.WouldBlock, trio.BrokenResourceError, trio.ClosedResourceError):
                if origin is not None:
                    reason = f"input queue full ({INPUT_QUEUE} writes pending)"
                    self._hub.reject(sender, self.uri, action, origin, reason)
                return
            self._pending_input += len(verdict.write)
        if verdict.resize is not None and self._child is not None:
            self._child.resize(*verdict.resize)
        self._apply(verdict.action, origin)


class _LocalDriver:
    """Adapts a :class:`Terminal` to :class:`ahp.run.TerminalDriver`."""

    def __init__(self, terminal: Terminal) -> None:
        self._terminal = terminal

    @property
    def uri(self) -> str:
        return self._terminal.uri

    @property
    def state(self) -> TerminalState:
        return self._terminal.state

    def follow(self) -> Subscription:
        return self._terminal.subscribe(max_bytes=FOLLOW_BYTES)

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

    def spawn_task(self, fn: Callable[[], Awaitable[None]]) -> None:
        self._terminal.spawn_task(fn)

    @property
    def commands(self) -> CommandRegistry:
        return self._terminal.commands

    @property
    def ended(self) -> bool:
        terminal = self._terminal
        return terminal.exited.is_set() or terminal.closing

    @property
    def sees_processes(self) -> bool:
        return self._terminal.spec.use_pty

    async def input_evidence(self) -> InputEvidence | None:
        await trio.lowlevel.checkpoint()
        return evidence_of(self._terminal.tty_status())

    async def job_mark(self) -> object:
        await trio.lowlevel.checkpoint()
        return self._terminal.job_mark()

    async def background_jobs(self, mark: object) -> dict[int, str]:
        assert mark is None or isinstance(mark, procfs.JobMark)
        return await self._terminal.background_jobs(mark)

    async def kill_command(self, mark: object) -> None:
        assert mark is None or isinstance(mark, procfs.JobMark)
        await self._terminal.kill_command(mark)
