"""One terminal: a Trio nursery of stage tasks joined by bounded memory channels.

Why this shape (``docs/engine.md``, "How data flows"): each stage of a terminal is a task
that owns one job, and the state has exactly one writer, the reducer task::

    child process ⇄ pty master
      pty-read ──bytes──▶ parse ──actions──▶ reducer ──▶ hub: serverSeq, replay log,
                                 ▲            │  │      subscriber outboxes (their
      dispatch (clients, library)┘            │  │      writer tasks drain them)
      exit watcher ──exit code────────────────┘  └──input──▶ input-write ──▶ pty

* **pty-read** reads the master until EAGAIN (or a batch of
  :data:`~ahp.engine.pty_read.READ_BATCH` bytes), hands the batch to the parse task
  and waits for readability again; under sustained output a thread of its own reads
  while the stages work; when every subscriber is behind, the fastest live one paces
  it (see :meth:`~ahp.engine.hub.Hub.pacer`). At EOF (EIO), or once the process has
  exited and the pty stayed quiet for :data:`~ahp.engine.pty_read.EXIT_LINGER` (or
  :data:`~ahp.engine.pty_read.EXIT_READ_LIMIT` passed), it closes its channel. Its
  rules are :mod:`ahp.engine.pty_read`'s.
* **parse** drives an :class:`~ahp.vt.OutputParser` (bytes in, actions out, the
  clocks passed in): UTF-8, escape scanning, shell-integration marks, titles and
  cwd reports, in turns that never hold the loop for long; when the reader's
  channel ends it flushes the parser and tells the reducer that the output ended.
  Its rules are :mod:`ahp.engine.parse`'s.
* **reducer** is the only writer of the state: it applies parsed output, client and
  library actions (:meth:`Terminal.dispatch`) and the exit, publishes every applied
  action through the hub, sends accepted input on to the input-write task and
  resizes the pty; ``terminal/exited`` comes after every byte of output. After each
  batch it tells the host when the catalogue entry changed (at most once per batch).
  Its rules are :mod:`ahp.engine.reduce`'s.
* **input-write** writes input to the pty in order, without blocking the loop
  (:meth:`ahp.pty.Child.write`, in slices); it, the input pending and its pace are
  :mod:`ahp.engine.input_write`'s.
* **exit watcher** waits for the process, then tells the reader (stop lingering)
  and the reducer (the exit code).

Every channel is bounded (:data:`PARSE_QUEUE`, :data:`~ahp.engine.reduce.REDUCER_QUEUE`,
:data:`~ahp.engine.input_write.INPUT_QUEUE`). A full channel is the backpressure:
when the parse or reducer task cannot keep up, the reader waits, the kernel's pty
buffer fills and the child blocks in ``write``; a caller of :meth:`Terminal.dispatch`
waits for room too, and a caller dispatching input waits while more than
:data:`~ahp.engine.input_write.INPUT_PACE` bytes of input are pending for the pty (a
client only until the pty has taken nothing for
:data:`~ahp.engine.input_write.INPUT_STALL`; its input past the pace is rejected while
that lasts). The reducer never waits on anyone (outboxes decide for themselves,
input past its bounds is rejected: :mod:`ahp.engine.reduce`).

Batching: each hop between tasks costs a pass of the scheduler, so every task
first drains what is already waiting in its channel (``receive_nowait``, which
also takes the items of producers waiting for room) and works on the whole
batch, and hands its result on with ``send_nowait`` (waiting only when the
channel is full). Under sustained output a hop is paid once per batch, not per
read; an isolated keystroke echo goes through at once. Because consumers drain
everything, a channel fills only when its consumer cannot run for a while (a
parse task waiting for room at the reducer, many callers in one pass); the
bounds then hold memory and stop the producers.

One path: every action, every byte of input and every read goes through the stage
tasks above, whatever its size; no task does another stage's work (the design card:
a stage that costs speed is made cheaper, not folded away). A keystroke's in-process
round trip, from :meth:`Terminal.send_input` until a subscriber holds the echo, is
eight task steps in six scheduler batches: the caller (it queues the input, then
checkpoints), the reducer, input-write, pty-read, parse, the reducer again, and the
subscriber (``benchmarks/ab_echo.py`` counts them). No keystroke trick acts in the
engine any more (:mod:`ahp.keystroke`: ``small_read``, pty-read handing a short read on
without the read that finds the pty empty, was removed when it no longer paid).

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

import logging
import os
import signal
import weakref
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Final

import trio

from ahp.agent.registry import CommandRegistry
from ahp.agent.screen import Screen, ScreenModel
from ahp.agent.surface import CommandSurface
from ahp.engine.channels import hand_on
from ahp.engine.hub import Hub
from ahp.engine.input_write import INPUT_PACE, InputWrite
from ahp.engine.launch import Launch, TerminalSpec
from ahp.engine.launch import discard as discard_launch
from ahp.engine.outbox import Outbox
from ahp.engine.parse import PARSE_PLAIN, Parse
from ahp.engine.port import LocalPort
from ahp.engine.pty_read import EXIT_LINGER, READ_BATCH, PtyRead
from ahp.engine.reduce import OUTPUT_ENDED, REDUCER_QUEUE, ClientAction, ProcessExited, Reduce
from ahp.engine.subscription import Subscription
from ahp.protocol.actions import (
    ActionOrigin,
    StateAction,
    TerminalExited,
    TerminalInput,
    TerminalResized,
)
from ahp.protocol.state import Snapshot, TerminalInfo, TerminalState
from ahp.pty import Child, kill_session, procfs, spawn
from ahp.pty.child import AUTOGROUP_POLL, AUTOGROUP_WAIT
from ahp.pty.jobs import Jobs
from ahp.pty.spec import DisposedWhileStarting
from ahp.reducers import TerminalCore
from ahp.reducers.core import MAX_DIMENSION, MAX_PENDING_INPUT
from ahp.reducers.policy import Change

__all__ = [
    "EXIT_LINGER",
    "MAX_DIMENSION",
    "MAX_PENDING_INPUT",
    "PARSE_PLAIN",
    "PARSE_QUEUE",
    "READ_BATCH",
    "REDUCER_QUEUE",
    "Terminal",
    "TerminalSpec",
]

log = logging.getLogger("ahp.engine")

#: Batches queued from pty-read to parse (at most READ_BATCH bytes each).
PARSE_QUEUE: Final = 4


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
        on_input: Callable[[Terminal], None] | None = None,
        on_output: Callable[[bool, bytes], None] | None = None,
    ) -> None:
        self.spec = spec
        self.uri = spec.uri
        self._hub = hub
        self._on_info_changed = on_info_changed
        #: Called with the terminal after each input it accepted for the pty (the
        #: host's flood watch); must not block nor raise.
        self._on_input = on_input
        #: The pty-read stage (``on_output`` is called by the read tasks with each batch
        #: read, ``True``: from stderr when it has a pipe of its own; it must not block
        #: nor raise, see :mod:`ahp.engine.exec`).
        self._read = PtyRead(spec.uri, hub, on_output)
        #: The parse stage.
        self._parse = Parse(use_pty=spec.use_pty, nonce=nonce if launch.integrated else None)
        self._child: Child | None = None
        self._launch = launch
        self.nonce = nonce
        #: The state: written by the reducer stage alone (and by :meth:`lifetime` once
        #: the stage is gone), read here.
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
            takes_input=not spec.stdin_closed,
        )
        #: Whether dispatched actions are taken: from the start of the tasks until the
        #: reducer ends.
        self._accepting = False
        #: The input side: pending bytes, their pace, the input-write task.
        self._input = InputWrite(spec.uri)
        self.exited = trio.Event()
        #: The reducer stage (it sets :attr:`exited`), and its inbox's sending end.
        self._reducer = Reduce(
            spec.uri, self._core, hub, self._input, self.exited, parse=self._parse
        )
        self._to_reducer = self._reducer.to_reducer
        # (A stream of short reads is one with no input typed in between: pty_read.)
        self._read.typed = partial(getattr, self._reducer, "inputs")
        self._cancel_scope = trio.CancelScope()
        self._tasks: trio.Nursery | None = None  # command collectors (ahp.agent)
        self._jobs: Jobs | None = None
        self._screen: ScreenModel | None = None
        #: Recent commands by id (:attr:`commands`, :meth:`command`).
        self._commands = CommandRegistry()
        self.closed = trio.Event()
        self.failure: BaseException | None = None
        #: Which terminal of its host this is (set at creation, counted from 1): a URI
        #: disposed and created again is another generation.
        self.generation = 0
        #: Nice value of the terminal's autogroup while it floods (``None``: not
        #: lowered), above ``spec.nice``; and the value last set (a new group's is 0).
        self._flood_nice: int | None = None
        self._group_nice_set = 0

    # -- public view -------------------------------------------------------------------------

    @property
    def inputs(self) -> int:
        """Inputs accepted for the pty (each a write): :mod:`ahp.engine.priority` tells
        interactive terminals by it."""
        return self._reducer.inputs

    @property
    def reducer_batches(self) -> int:
        """Steps of the reducer task, each a batch of what was waiting (a figure for tests)."""
        return self._reducer.batches

    @property
    def read_batches(self) -> int:
        """Batches the pty-read stage handed on (a figure for tests and benchmarks)."""
        return self._read.batches

    @property
    def bytes_read(self) -> int:
        """Bytes of output read so far (the priority watch and benchmarks count them)."""
        return self._read.bytes

    @property
    def parse_waits(self) -> int:
        """Times the pty-read stage found the parse channel full and waited."""
        return self._read.parse_waits

    @property
    def largest_feed(self) -> int:
        """The most bytes the parse stage fed its parser in one step."""
        return self._parse.largest_feed

    @property
    def flooding(self) -> bool:
        """The output floods the host (:meth:`set_flooding`, by :mod:`ahp.engine.priority`)."""
        return self._read.flooding

    @property
    def output_waker(self) -> Callable[[], None] | None:
        """Called (and dropped) with the next batch read, while the host's watchers sleep
        (:class:`~ahp.engine.alarm.OutputAlarm`); must not block nor raise."""
        return self._read.waker

    @output_waker.setter
    def output_waker(self, waker: Callable[[], None] | None) -> None:
        self._read.waker = waker

    @property
    def state(self) -> TerminalState:
        """The current state (immutable; later changes produce new values)."""
        return self._core.state

    @property
    def output_chars(self) -> int:
        """Characters of output applied so far (only grows). Read as a resync snapshot
        arrives (no checkpoint between), it tells a consumer that counted the output
        it saw how much of the snapshot's tail it missed."""
        return self._core.output_chars

    @property
    def scrollback_chars(self) -> int:
        """Characters the content retains now (O(1))."""
        return self._core.scrollback.length

    @property
    def scrollback_bytes(self) -> int:
        """Bytes the content's text takes as unpacked strings, estimated (O(1);
        :attr:`ahp.reducers.scrollback.Scrollback.weight`): what
        :mod:`ahp.engine.packing` budgets by (packed text still counts unpacked)."""
        return self._core.scrollback.weight

    @property
    def pid(self) -> int | None:
        return self._child.pid if self._child is not None else None

    @property
    def running(self) -> bool:
        return self._child is not None and not self.exited.is_set()

    def _alive_check(self) -> Callable[[], bool]:
        """:meth:`_child_running` through a weak reference: the terminal's jobs must not
        keep it alive (a cycle kept each disposed terminal's scrollback until the
        garbage collector's next full pass: 20 MB for 8 terminals; issue 25)."""
        ref = weakref.ref(self)

        def alive() -> bool:
            terminal = ref()
            return terminal is not None and terminal._child_running()

        return alive

    def _child_running(self) -> bool:
        child = self._child
        return child is not None and child.output_fd >= 0 and not self.exited.is_set()

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

    @property
    def line_pending(self) -> bool:
        """A line end was typed and no prompt has started since: the shell has a
        command line it has not run yet (or is running it before its
        ``commandExecuted`` mark is parsed). Meaningful with :attr:`integrated` only (the
        prompts are its marks); a drain waits for such a terminal
        (:func:`ahp.server.drain.busy_terminals`)."""
        typed_at = self._reducer.line_typed_at
        return typed_at is not None and typed_at == self._parse.prompts

    @property
    def program_name(self) -> str:
        """The name of the program the terminal runs (its shell's, e.g. ``"bash"``)."""
        return os.path.basename(self._launch.spawn.argv[0])

    def info(self) -> TerminalInfo:
        """The terminal's catalogue entry."""
        return self._core.info()

    def snapshot(self) -> Snapshot:
        """The state with the global ``serverSeq`` it reflects."""
        return Snapshot(resource=self.uri, state=self._core.snapshot_state(), fromSeq=self._hub.seq)

    def subscribe(self, *, max_bytes: int | None = None, paces: bool = True) -> Subscription:
        """Follow this terminal: a :class:`Snapshot`, then every later envelope.

        Buffering: up to ``max_bytes`` queued (default 4 MiB); a consumer that falls
        further behind gets a fresh snapshot instead of the missed envelopes.
        ``paces=False``: this consumer never paces the pty (see
        :meth:`ahp.engine.hub.Hub.pacer`), it only falls behind.
        """

        def attach(outbox: Outbox) -> Snapshot | None:
            if self.closed.is_set():
                return None
            self._hub.subscribe(self.uri, outbox, exclusive=True)
            return self.snapshot()

        def detach(outbox: Outbox) -> None:
            self._hub.unsubscribe(self.uri, outbox)

        if max_bytes is None:
            return Subscription(attach, detach, paces=paces)
        return Subscription(attach, detach, max_bytes=max_bytes, paces=paces)

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
        told the catalogue (or the terminal closed). A client's action (``origin``)
        that reaches a terminal not running (starting, closing) is rejected to
        ``sender``; the library's is ignored then.

        ``checkpoint=False`` is for a caller whose own loop checkpoints (a
        connection's reader, which waits for the next frame next): queued at once,
        the call then returns without a second pass of the scheduler for its task.
        """
        if self._accepting:
            decided = trio.Event() if wait else None
            try:
                await hand_on(self._to_reducer, ClientAction(action, origin, sender, decided))
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                # The reducer ended meanwhile: the terminal is closing.
                self._reducer.refuse_closing(action, origin, sender)
            else:
                if action.__class__ is TerminalInput and self._input.pending > INPUT_PACE:
                    await self._input.wait_room(stall=origin is not None)
                    if decided is None:
                        return
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
        self._reducer.refuse_closing(action, origin, sender)
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

    def _command_port(self) -> LocalPort:
        return LocalPort(self)

    @property
    def commands(self) -> CommandRegistry:
        """Recent commands run or started in this terminal."""
        return self._commands

    def screen(self) -> Screen:
        """The visible screen now (rendered on demand: see :mod:`ahp.agent.screen`)."""
        if self._screen is None:
            self._screen = ScreenModel(self.spec.cols, self.spec.rows)
        return self._screen.update(self.state)

    @property
    def jobs(self) -> Jobs | None:
        """The pty session's jobs (:class:`ahp.pty.jobs.Jobs`: what they do, what a
        command left, signals); ``None`` without a pty or before the spawn."""
        return self._jobs

    def tty_status(self) -> procfs.TtyStatus | None:
        """The pty's foreground process group, echo flag and the processes blocked
        reading it (``None`` without a pty or once exited)."""
        return self._jobs.tty_status() if self._jobs is not None else None

    async def signal_command(
        self, signum: int, mark: procfs.JobMark | None = None
    ) -> tuple[frozenset[int], bool]:
        """Send ``signum`` to the foreground job and to every job started in the
        session since ``mark``, each by its whole process group; never to the
        shell's own group (:meth:`ahp.pty.jobs.Jobs.signal`). If the shell itself is
        in the foreground (a builtin such as ``read`` or ``wait``), it gets Ctrl-C
        instead.

        Without a pty (an exec's terminal: its process is the command, no shell) the
        process's own group gets ``signum``. Returns the process groups signalled and
        whether the shell was in the foreground (once exited: nothing signalled,
        Ctrl-C typed — dropped by an exited terminal — and ``True``).
        """
        if not self.spec.use_pty:
            child = self._child
            if child is None or child.returncode is not None:
                await trio.lowlevel.checkpoint()
                return frozenset(), False
            self.signal_process(signum)  # (its group: the exec started it in its own)
            await trio.lowlevel.checkpoint()
            return frozenset({child.pid}), False
        groups, shell_foreground = (
            await self._jobs.send_signal(signum, mark)
            if self._jobs is not None
            else (frozenset(), True)
        )
        if shell_foreground:
            await self.send_input("\x03")
        await trio.lowlevel.checkpoint()
        return groups, shell_foreground

    async def kill_command(self, mark: procfs.JobMark | None = None) -> None:
        """SIGKILL the running command's jobs (see :meth:`signal_command`)."""
        await self.signal_command(signal.SIGKILL, mark)

    def spawn_task(self, fn: Callable[[], Awaitable[None]]) -> None:
        """Run ``fn`` in this terminal's nursery (cancelled on dispose); ``fn`` must not raise."""
        if self._tasks is None:
            raise RuntimeError("the terminal is not running")
        self._tasks.start_soon(fn)

    async def interrupt(self) -> None:
        """Send Ctrl-C: the pty delivers SIGINT to the foreground job."""
        await self.send_input("\x03")

    def signal_process(self, signum: int) -> None:
        """Send ``signum`` to the terminal's process group (its process and whatever
        stayed in its group); nothing before the spawn or once the process is reaped."""
        if self._child is not None:
            self._child.signal_group(signum)

    @property
    def returncode(self) -> int | None:
        """The process's raw status once reaped: ``>= 0`` its exit code, ``-N`` killed by
        signal N; ``None`` while it runs."""
        return self._child.returncode if self._child is not None else None

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
                if spec.use_pty:
                    self._jobs = Jobs(
                        child.pid,
                        child.output_fd,
                        self._alive_check(),
                        launch_line=" ".join(launch.spawn.argv),
                    )
                if spec.nice:  # (the autogroup's share is settled by a task: _settle_nice)
                    child.renice_processes(spec.nice)
                try:
                    await self._run_stages(child, task_status)
                except Exception as exc:  # one terminal's failure ends that terminal only
                    self.failure = exc
                    log.exception("terminal %s failed", self.uri)
            if child is None:
                raise DisposedWhileStarting("the terminal was disposed while it was starting")
        finally:
            self._accepting = False
            self._tasks = None
            self._jobs = None  # (it refers back to this terminal: no cycle outlives it)
            self._reducer.forget_queued()  # (callers may wait for a verdict)
            if child is not None:
                with trio.CancelScope(shield=True):
                    await child.terminate(spec.grace)
                if spec.use_pty:  # background jobs left in the terminal's session (no orphans)
                    # A scan of /proc per round (and a signal per process): in a worker
                    # thread, so a thousand leftovers cost the loop nothing (issue 25).
                    with trio.CancelScope(shield=True):
                        await trio.to_thread.run_sync(kill_session, child.pid)
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
        writer_inbox = self._input.open(child)
        async with trio.open_nursery() as nursery:
            self._tasks = nursery
            on_input = self._on_input  # (the stage holds these only while its task runs)
            nursery.start_soon(
                self._reducer.task,
                child,
                partial(self._on_info_changed, self),
                None if on_input is None else partial(on_input, self),
            )
            nursery.start_soon(self._parse_task, parse_inbox)
            if child.error_fd >= 0:  # stderr apart: its own read task, into the same parse
                nursery.start_soon(self._read.read_task, child, to_parse.clone(), True)
            nursery.start_soon(self._read.read_task, child, to_parse)
            nursery.start_soon(self._input.write_task, writer_inbox)
            nursery.start_soon(self._exit_task, child)
            if self.spec.nice and child.is_pty:
                nursery.start_soon(self._settle_nice)
            self._accepting = True
            task_status.started(self)

    # -- scheduling priority ------------------------------------------------------------------

    @property
    def group_nice(self) -> int:
        """The nice value the terminal's autogroup should have now: ``spec.nice``, or
        more while it floods (:meth:`set_flooding`)."""
        return max(self.spec.nice, self._flood_nice or 0)

    def set_flooding(self, flooding: bool, nice: int = 0) -> bool:
        """Mark the terminal's output as flooding the host or not (:mod:`ahp.engine.priority`):
        while it floods, its output is read by a pump's thread even in small batches,
        and its autogroup gets ``nice`` (0: left as it is); once not, its own
        ``spec.nice`` back. Whether the priority took effect (False: try again later,
        see :meth:`ahp.pty.Child.set_group_nice`). No wait."""
        self._read.flooding = flooding
        self._flood_nice = nice if flooding and nice else None
        return self._apply_group_nice()

    def _apply_group_nice(self) -> bool:
        """Give the autogroup :attr:`group_nice` unless it has it; whether it took
        effect (see :meth:`ahp.pty.Child.set_group_nice`). One ``/proc`` read and write."""
        child, wanted = self._child, self.group_nice
        if child is None or self.closing or wanted == self._group_nice_set:
            return True
        if not child.set_group_nice(wanted):
            return False
        self._group_nice_set = wanted
        return True

    async def _settle_nice(self) -> None:
        """Give the autogroup ``spec.nice`` once the child's ``setsid`` made it one of
        its own, retrying while the kernel's rate limit refuses; gives up after
        :data:`~ahp.pty.child.AUTOGROUP_WAIT` seconds. A task, so that a burst of
        creations is not held by the rate limit."""
        with trio.move_on_after(AUTOGROUP_WAIT):
            while not self._apply_group_nice():  # noqa: ASYNC110 (no event says when setsid ran)
                await trio.sleep(AUTOGROUP_POLL)

    @property
    def closing(self) -> bool:
        """Disposal has started (or the terminal's tasks have ended)."""
        return self._cancel_scope.cancel_called or self.closed.is_set()

    def close(self) -> None:
        """Start disposal: cancel the tasks; :meth:`lifetime` then terminates and reaps."""
        self._cancel_scope.cancel()

    # -- parse ---------------------------------------------------------------------------------

    async def _parse_task(self, inbox: trio.MemoryReceiveChannel[bytes]) -> None:
        """The parse stage (:meth:`ahp.engine.parse.Parse.task`) until the readers'
        channel ends, then the end of the output for the reducer."""
        await self._parse.task(inbox, partial(hand_on, self._to_reducer))
        await hand_on(self._to_reducer, OUTPUT_ENDED)

    # -- exit watcher ------------------------------------------------------------------------

    async def _exit_task(self, child: Child) -> None:
        code = await child.wait()
        self._read.process_exited()  # each reader lingers for what is left, then ends
        await hand_on(self._to_reducer, ProcessExited(code))
