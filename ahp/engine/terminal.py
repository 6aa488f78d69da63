"""One terminal: a Trio nursery from a child process on a pty to published envelopes.

Why this shape (fixed by the design): each stage is a task, the stages are
joined by bounded memory channels, and exactly one task — the reducer — writes
the terminal's state::

    pty-read ──bytes──▶ parse ──actions──▶ reduce ──▶ hub (serverSeq, log, fan-out)
    input-write ◀──bytes── reduce (client ``terminal/input``)
    wait (exit code) ──▶ parse (publishes ``terminal/exited`` after the last byte)

Batching without timers: the reader reads until the pty says EAGAIN (or a batch
is full) and only then hands the batch on, so under sustained output several
kernel reads (≈4 KiB each) become one ``terminal/data``, while an isolated
keystroke echo is forwarded at once.

Backpressure: when parse/reduce fall behind, the bounded ``bytes`` channel stops
the reader, the kernel's pty buffer fills and the child blocks in ``write`` —
ordinary terminal flow control. Subscribers never exert backpressure (see
:mod:`ahp.engine.outbox`).

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
import os
import secrets
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Final

import attrs
import trio

from ahp.engine.hub import Hub
from ahp.engine.outbox import Outbox
from ahp.engine.reap import kill_session
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
from ahp.pty import Child, ChildGone, SpawnError, SpawnSpec, spawn
from ahp.reducers import DEFAULT_SCROLLBACK, low_water_for, reduce_terminal, trim
from ahp.run import DEFAULT_MAX_OUTPUT, CommandResult, run_command
from ahp.shell import ShellLaunch, prepare_shell, remove_launch_files
from ahp.vt import CommandTracker, Scanner, events_to_actions
from ahp.vt.uri import file_uri_to_path, path_to_file_uri

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
READ_BATCH: Final = 64 * 1024
#: Read batches waiting for the parser (bounds memory; then the pty applies backpressure).
RAW_CHANNEL: Final = 4
#: Action batches / client actions waiting for the reducer.
REDUCER_CHANNEL: Final = 64
#: Input bytes accepted but not yet written to the pty; beyond it input is rejected.
MAX_PENDING_INPUT: Final = 16 * 1024 * 1024
#: After the process exits, a pty still held open is read until quiet this long.
EXIT_LINGER: Final = 0.1
#: Window size bounds accepted from clients.
MAX_DIMENSION: Final = 4096
#: Default grace period between hang-up and kill on dispose.
DISPOSE_GRACE: Final = 2.0


def _cwd_path(cwd: str | None) -> str:
    if cwd is None:
        return os.path.expanduser("~")
    if cwd.startswith("file:"):
        return file_uri_to_path(cwd)
    if not os.path.isabs(cwd):
        raise SpawnError(f"cwd must be an absolute path or a file:// URI, got {cwd!r}")
    return cwd


def default_shell(env: Mapping[str, str]) -> str:
    """The user's shell: ``$SHELL``, else ``/bin/sh``."""
    return env.get("SHELL") or "/bin/sh"


@attrs.frozen
class TerminalSpec:
    """How to create a terminal.

    ``argv`` runs a program; without it the user's shell runs (``shell``, else
    ``$SHELL``, else ``/bin/sh``) with command detection injected when the shell
    is bash, zsh or fish. ``cwd`` is an absolute path or a ``file://`` URI
    (default: the home directory). The child's environment is this process's
    environment plus ``TERM=xterm-256color`` plus ``env``.
    """

    uri: str
    claim: TerminalClaim
    name: str | None = None
    argv: tuple[str, ...] | None = None
    shell: str | None = None
    login: bool = False
    cwd: str | None = None
    env: Mapping[str, str] = attrs.field(factory=dict)
    cols: int = 80
    rows: int = 24
    use_pty: bool = True
    shell_integration: bool = True
    scrollback: int = DEFAULT_SCROLLBACK
    grace: float = DISPOSE_GRACE


@attrs.frozen
class _ClientAction:
    action: StateAction
    origin: ActionOrigin | None
    sender: Outbox | None


@attrs.frozen
class _Exited:
    code: int | None


class Terminal:
    """A live terminal; create it with :meth:`ahp.engine.Host.create_terminal`.

    Read its state with :attr:`state` / :meth:`snapshot`; follow it with
    :meth:`subscribe`; drive it with :meth:`send_input`, :meth:`resize`,
    :meth:`dispatch`. All methods must be called from the host's Trio run.
    """

    def __init__(
        self,
        spec: TerminalSpec,
        hub: Hub,
        *,
        on_info_changed: Callable[[Terminal], None],
    ) -> None:
        self.spec = spec
        self.uri = spec.uri
        self._hub = hub
        self._on_info_changed = on_info_changed
        self._child: Child | None = None
        self._launch: ShellLaunch | None = None
        self.nonce = secrets.token_hex(16)
        self._state = TerminalState(title="", claim=spec.claim, content=())
        self._length = 0
        self._low_water = low_water_for(spec.scrollback)
        self._input: deque[bytes] = deque()
        self._input_bytes = 0
        self._input_lot = trio.lowlevel.ParkingLot()
        self._reduce_send, self._reduce_recv = trio.open_memory_channel[
            Sequence[StateAction] | _ClientAction | _Exited
        ](REDUCER_CHANNEL)
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
        return self._launch is not None and self._launch.integrated

    def info(self) -> TerminalInfo:
        s = self._state
        return TerminalInfo(resource=self.uri, title=s.title, claim=s.claim, exitCode=s.exitCode)

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
        """Queue a client action for the reducer (accepted, or rejected to ``sender``).

        Waits only while the reducer's bounded queue is full.
        """
        if self.closed.is_set():
            await trio.lowlevel.checkpoint()
            return
        await self._reduce_send.send(_ClientAction(action, origin, sender))

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
        process cannot be started; nothing is left behind then. A crash of one of
        the terminal's own tasks is logged and ends this terminal only.
        """
        spec = self.spec
        base_env = dict(os.environ)
        base_env["TERM"] = "xterm-256color"
        base_env.update(spec.env)
        cwd = _cwd_path(spec.cwd)
        if spec.argv is not None:
            if not spec.argv:
                raise SpawnError("argv must not be empty")
            argv: Sequence[str] = spec.argv
            launch = ShellLaunch(argv=tuple(argv), env=base_env, integrated=False, cleanup_paths=())
        else:
            shell = spec.shell or default_shell(base_env)
            argv = (shell, "-l") if spec.login else (shell,)
            if spec.shell_integration and spec.use_pty:
                launch = prepare_shell(argv, base_env, nonce=self.nonce, login=spec.login)
            else:
                launch = ShellLaunch(
                    argv=tuple(argv), env=base_env, integrated=False, cleanup_paths=()
                )
        self._launch = launch
        try:
            child = await spawn(
                SpawnSpec(
                    argv=launch.argv,
                    cwd=cwd,
                    env=launch.env,
                    cols=spec.cols,
                    rows=spec.rows,
                    use_pty=spec.use_pty,
                )
            )
        except BaseException:
            remove_launch_files(launch)
            raise
        self._child = child
        self._state = TerminalState(
            title=spec.name or os.path.basename(spec.argv[0] if spec.argv else launch.argv[0]),
            claim=spec.claim,
            content=(),
            cwd=path_to_file_uri(cwd),
            cols=spec.cols if spec.use_pty else None,
            rows=spec.rows if spec.use_pty else None,
            isPty=spec.use_pty,
        )
        try:
            with self._cancel_scope:
                try:
                    async with trio.open_nursery() as nursery:
                        raw_send, raw_recv = trio.open_memory_channel[bytes](RAW_CHANNEL)
                        nursery.start_soon(self._read_loop, raw_send)
                        nursery.start_soon(self._parse_loop, raw_recv, self._reduce_send.clone())
                        nursery.start_soon(self._reduce_loop)
                        nursery.start_soon(self._write_loop)
                        nursery.start_soon(self._wait_loop)
                        task_status.started(self)
                except Exception as exc:  # one terminal's failure ends that terminal only
                    self.failure = exc
                    log.exception("terminal %s failed", self.uri)
        finally:
            with trio.CancelScope(shield=True):
                await child.terminate(spec.grace)
            if spec.use_pty:  # background jobs left in the terminal's session (no orphans)
                kill_session(child.pid)
            remove_launch_files(launch)
            if not self.exited.is_set():
                # Failed or disposed while running: the state still records an exit.
                self._state = reduce_terminal(self._state, TerminalExited())
                self.exited.set()
            self.closed.set()

    def close(self) -> None:
        """Start disposal: cancel the tasks; :meth:`run` then terminates and reaps."""
        self._cancel_scope.cancel()

    # -- tasks -------------------------------------------------------------------------------

    async def _read_loop(self, send: trio.MemorySendChannel[bytes]) -> None:
        child = self._child
        assert child is not None
        async with send:
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
                    await send.send(chunks[0] if len(chunks) == 1 else b"".join(chunks))
                if eof:
                    return
                if chunks:
                    continue
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

    async def _parse_loop(
        self,
        recv: trio.MemoryReceiveChannel[bytes],
        send: trio.MemorySendChannel[Sequence[StateAction] | _ClientAction | _Exited],
    ) -> None:
        async with recv, send:
            if self.spec.use_pty:
                scanner = Scanner()
                # Our own OSC 633 hooks are authoritative: a shell's OSC 133 (fish 4) must
                # not report every command a second time.
                tracker = CommandTracker(
                    nonce=self.nonce if self.integrated else None, osc133=not self.integrated
                )
                async for chunk in recv:
                    actions = events_to_actions(
                        tracker,
                        scanner.feed(chunk),
                        wall_ms=int(time.time() * 1000),
                        mono_ms=time.monotonic() * 1000,
                    )
                    if actions:
                        await send.send(actions)
                tail = events_to_actions(
                    tracker,
                    scanner.close(),
                    wall_ms=int(time.time() * 1000),
                    mono_ms=time.monotonic() * 1000,
                )
            else:
                decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
                async for chunk in recv:
                    text = decoder.decode(chunk)
                    if text:
                        await send.send([TerminalData(data=text)])
                text = decoder.decode(b"", final=True)
                tail = [TerminalData(data=text)] if text else []
            if tail:
                await send.send(tail)
            await self._process_exited.wait()
            await send.send(_Exited(self._exit_code))

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
            try:
                await child.write(data)
            except (ChildGone, trio.ClosedResourceError):
                self._input.clear()
                self._input_bytes = 0
                return
            finally:
                self._input_bytes -= len(data)

    async def _reduce_loop(self) -> None:
        async for item in self._reduce_recv:
            if isinstance(item, _ClientAction):
                self._client_action(item)
            elif isinstance(item, _Exited):
                self._apply(TerminalExited(exitCode=item.code))
                self.exited.set()
            else:
                for action in item:
                    self._apply(action)

    # -- reducing (the only writer of self._state) -------------------------------------------

    def _apply(self, action: StateAction, origin: ActionOrigin | None = None) -> None:
        before = self._state
        state = reduce_terminal(before, action)
        if isinstance(action, TerminalData):
            self._length += len(action.data)
            if self._length > self.spec.scrollback:
                state, self._length = trim(state, low_water=self._low_water)
        elif isinstance(action, TerminalCleared):
            self._length = 0
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
                    self._input.append(data)
                    self._input_bytes += len(data)
                    self._input_lot.unpark_all()
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
