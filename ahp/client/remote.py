"""A terminal seen through a :class:`~ahp.client.Client`: the same surface as in-process.

Why: an agent that talks to a sidecar over the wire wants ``run``,
``send_input``, ``resize`` and ``state`` exactly like an embedded one. A
:class:`RemoteTerminal` adapts the client's mirror of one terminal channel to
:class:`ahp.agent.port.TerminalPort`, so :mod:`ahp.agent` serves both.

Buffering: :meth:`RemoteTerminal.follow` queues at most ``FOLLOW_QUEUE``
envelopes for its consumer; if the consumer falls further behind it receives
a fresh snapshot of the mirror instead of the missed envelopes (no silent gap).

A lost connection: the follower hands out a fresh snapshot once the client has
reconnected (what the reconnect replayed or re-sent is in it), and ends — the
command ends ``lost`` — when the connection is gone for good (no automatic
reconnect, the client closing) or has been down for :data:`LOST_AFTER` seconds.

Processes: a client cannot see the server's processes, so it asks. Against a
server with the ``x-ahp-terminals/*`` extension (:mod:`ahp.protocol.processes`;
this project's server), *waiting for input*, ``background`` and ``kill`` use the
server's ``/proc`` evidence exactly as in-process: the same functions answer.
The client learns whether the server has the extension from its first request
(``-32601``: it has not; remembered in :attr:`Client.process_extension
<ahp.client.connection.Client.process_extension>` until a reconnect). Against
a server without it:

* *waiting for input* is a heuristic: the output has been quiet for
  ``input_quiet`` seconds and its last line looks like a prompt
  (:func:`ahp.agent.evidence.looks_like_prompt`: ends in ``:``, ``?``, ``>``…). A prompt that
  ends otherwise, or a silent read (``read`` with no prompt), is not detected: the
  command stays ``running`` until ``yield_after`` or ``timeout``;
* ``background`` is always empty;
* :meth:`CommandHandle.kill <ahp.agent.CommandHandle.kill>` sends Ctrl-C and, if the
  command is still running after :data:`KILL_GRACE`, Ctrl-\\ (SIGQUIT) — not SIGKILL.

An extension request that fails otherwise (the connection dropped, no answer
within :data:`EXTENSION_TIMEOUT`) counts as "nothing seen" for evidence and jobs,
and makes ``kill`` fall back to the keys.

Command collectors (handles) run in the client connection's nursery: they end
with the command or when the client closes.
"""

from __future__ import annotations

import enum
import logging
import math
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final, Protocol

import trio

from ahp.agent.registry import CommandRegistry
from ahp.agent.screen import Screen, ScreenModel
from ahp.agent.surface import CommandSurface
from ahp.client.errors import ClientError, RpcError
from ahp.client.mirror import Mirror
from ahp.protocol import processes as xp
from ahp.protocol.actions import (
    ActionEnvelope,
    StateAction,
    TerminalClaimed,
    TerminalInput,
    TerminalResized,
)
from ahp.protocol.codec import ProtocolError, structure, unstructure
from ahp.protocol.jsonrpc import ErrorCode
from ahp.protocol.state import CommandPart, Snapshot, TerminalClaim, TerminalState
from ahp.pty.procfs import TtyStatus

log = logging.getLogger("ahp.client")

__all__ = ["FOLLOW_QUEUE", "RemoteTerminal", "TerminalClient"]

FOLLOW_QUEUE: Final = 10_000
#: A remote shell may announce command detection a little after creation.
DETECTION_WAIT: Final = 3.0
#: ``kill`` without the extension: Ctrl-C, then Ctrl-\\ if the command still runs after this long.
KILL_GRACE: Final = 2.0
#: Longest wait for the answer to one ``x-ahp-terminals/*`` request (a ``jobs``
#: request may take the server up to half a second on its own).
EXTENSION_TIMEOUT: Final = 10.0
#: A follower whose client has been disconnected this long (reconnecting) ends: its
#: command is reported ``lost`` rather than ``running`` for ever.
LOST_AFTER: Final = 30.0


class TerminalClient(Protocol):
    """What a :class:`RemoteTerminal` takes of its :class:`~ahp.client.Client` (named
    here so that this module does not import the client, which builds terminals)."""

    #: Whether the host answers ``x-ahp-terminals/*`` (None: not asked yet).
    process_extension: bool | None

    @property
    def mirrors(self) -> dict[str, Mirror]: ...
    @property
    def lost(self) -> str | None: ...
    @property
    def screen_models(self) -> dict[str, ScreenModel]: ...
    @property
    def command_registries(self) -> dict[str, CommandRegistry]: ...
    def terminal_state(self, channel: str) -> TerminalState: ...
    async def dispatch(self, channel: str, action: StateAction) -> int: ...
    async def request(self, method: str, params: Mapping[str, Any] | None = None) -> Any: ...
    async def wait_connected(self, patience: float) -> None: ...
    async def wait_for(
        self, predicate: Callable[[], bool], *, timeout: float | None = None
    ) -> None: ...
    def spawn_task(self, fn: Callable[[], Awaitable[None]]) -> None: ...
    def on_envelope(self, callback: Callable[[ActionEnvelope], None]) -> Callable[[], None]: ...
    def on_connection(self, callback: Callable[[str], None]) -> Callable[[], None]: ...


class RemoteTerminal(CommandSurface):
    """One terminal channel of a connected client (the client must be subscribed)."""

    def __init__(self, client: TerminalClient, uri: str) -> None:
        self.client = client
        self.uri = uri
        #: The server reported no tty status for a live terminal (no pty): nothing to
        #: see there, so the heuristics apply, as in-process.
        self._no_tty = False
        #: Whether the server injected its integration into the shell (its marks are
        #: signed), from its ``ttyStatus`` answers; ``None`` until one says.
        self._integrated: bool | None = None

    @property
    def state(self) -> TerminalState:
        return self.client.terminal_state(self.uri)

    @property
    def shell_name(self) -> str | None:
        return None  # (not in the protocol: the process extension's answers may tell)

    @property
    def detection_wait(self) -> float:
        if self._integrated is False:
            return 0.0  # no integration of the server's: none to wait for
        return DETECTION_WAIT if self.state.supportsCommandDetection is None else 0.0

    @property
    def signed_marks(self) -> bool | None:
        """Learned from the server's ``ttyStatus`` answers (``integrated``)."""
        return self._integrated

    def follow(self) -> _Follower:
        """The mirror's current state, then every envelope the client applies for it.

        An iterator object, not a generator: a consumer may cancel one ``__anext__``
        (a timeout) and keep iterating.
        """
        return _Follower(self)

    async def send_input(self, data: str) -> None:
        """Type ``data``; during a reconnect, wait for it at most :data:`LOST_AFTER`
        past the drop (:class:`~ahp.client.ConnectionLost` then: nothing was sent)."""
        await self.client.wait_connected(LOST_AFTER)
        await self.client.dispatch(self.uri, TerminalInput(data=data))

    async def interrupt(self) -> None:
        await self.send_input("\x03")

    async def resize(self, cols: int, rows: int) -> None:
        await self.client.dispatch(self.uri, TerminalResized(cols=cols, rows=rows))

    async def set_claim(self, claim: TerminalClaim) -> None:
        """Claim the terminal; returns once the server confirmed or refused it."""
        mirror = self.client.mirrors[self.uri]
        await self.client.wait_connected(LOST_AFTER)
        await self.client.dispatch(self.uri, TerminalClaimed(claim=claim))
        await self.client.wait_for(lambda: not mirror.pending, timeout=30)

    def _command_port(self) -> RemoteTerminal:
        return self  # what a client can and cannot see: see the module doc

    def screen(self) -> Screen:
        """The visible screen, rendered from the client's mirror (see :mod:`ahp.agent.screen`)."""
        models = self.client.screen_models
        model = models.get(self.uri)
        if model is None:
            _forget_unsubscribed(models, self.client.mirrors)
            model = models[self.uri] = ScreenModel(self.state.cols or 80, self.state.rows or 24)
        return model.update(self.state)

    # -- TerminalPort: what a client can and cannot do ---------------------------------------

    def spawn_task(self, fn: Callable[[], Awaitable[None]]) -> None:
        self.client.spawn_task(fn)

    @property
    def commands(self) -> CommandRegistry:
        """Recent commands started through this client in this terminal."""
        registries = self.client.command_registries
        registry = registries.get(self.uri)
        if registry is None:
            _forget_unsubscribed(registries, self.client.mirrors)
            registry = registries[self.uri] = CommandRegistry()
        return registry

    @property
    def processes(self) -> RemoteTerminal | None:
        """This terminal (it asks the server), unless the server is known to lack the
        process extension or the terminal has no pty."""
        if self.client.process_extension is False or self._no_tty:
            return None
        return self

    async def _ask(self, method: str, **params: Any) -> Any:
        """One extension request; ``None`` when it failed (and, on ``-32601``, the
        client remembers the server lacks the extension)."""
        client = self.client
        if client.process_extension is False or self._gone():
            await trio.lowlevel.checkpoint()
            return None
        try:
            with trio.move_on_after(EXTENSION_TIMEOUT):
                await client.wait_connected(LOST_AFTER)  # (down longer: ConnectionLost)
                result = await client.request(method, {"channel": self.uri, **params})
                client.process_extension = True
                return result
            log.info("%s: no answer to %s within %g s", self.uri, method, EXTENSION_TIMEOUT)
        except RpcError as exc:
            if exc.code == ErrorCode.METHOD_NOT_FOUND:
                log.info("the server has no process extension: using the remote heuristics")
                client.process_extension = False
            else:
                log.info("%s: %s failed: %s", self.uri, method, exc)
        except ClientError as exc:
            log.info("%s: %s failed: %s", self.uri, method, exc)
        return None

    async def tty_status(self) -> TtyStatus | None:
        """The server's ``/proc`` status of the pty (judged by
        :func:`ahp.agent.evidence.evidence_of`, as in-process)."""
        answer = await self._ask(xp.TTY_STATUS)
        try:
            result = structure(answer, xp.TtyStatusResult) if answer is not None else None
        except ProtocolError as exc:
            log.info("%s: a malformed %s answer: %s", self.uri, xp.TTY_STATUS, exc)
            return None
        if result is None:
            return None
        if result.status is None:
            self._no_tty = not self.ended
            return None
        wire = result.status
        if wire.integrated is not None:
            self._integrated = wire.integrated
        return TtyStatus(
            foreground_pgrp=wire.foregroundPgrp,
            echo=wire.echo,
            readers=wire.readers,
            unread=wire.unread,
            pollers=wire.pollers,
            tty_pollers=wire.ttyPollers,
            programs=wire.programs,
            shell_foreground=wire.shellForeground,
            shell_replaced=wire.shellReplaced,
            canonical=wire.canonical,
            shell_stderr_tty=wire.shellStderrTty,
        )

    async def job_mark(self) -> object:
        """The server's mark of the terminal's jobs (the wire form, handed back later)."""
        answer = await self._ask(xp.JOB_MARK)
        try:
            result = structure(answer, xp.JobMarkResult) if answer is not None else None
        except ProtocolError as exc:
            log.info("%s: a malformed %s answer: %s", self.uri, xp.JOB_MARK, exc)
            return None
        return None if result is None else result.mark

    @property
    def ended(self) -> bool:
        return self._gone() or self.state.exited

    async def background_jobs(self, mark: object) -> dict[int, str]:
        """The jobs started since ``mark`` still running on the server (empty without
        the extension)."""
        answer = await self._ask(xp.JOBS, **_since(mark))
        try:
            result = structure(answer, xp.JobsResult) if answer is not None else None
        except ProtocolError as exc:
            log.info("%s: a malformed %s answer: %s", self.uri, xp.JOBS, exc)
            return {}
        return {} if result is None else {job.pid: job.commandLine for job in result.jobs}

    async def kill_command(self, mark: object = None) -> None:
        """SIGKILL the command's process groups on the server (as in-process); without
        the extension, Ctrl-C, then Ctrl-\\ if a command is still running after
        :data:`KILL_GRACE`."""
        if await self.signal_command("SIGKILL", mark) is not None:
            return
        await self.send_input("\x03")
        with trio.move_on_after(KILL_GRACE):
            await self.client.wait_for(lambda: not _running(self.state) or self._gone())
            return
        await self.send_input("\x1c")

    async def signal_command(self, signal: str, mark: object = None) -> xp.SignalResult | None:
        """``signal`` (``SIGINT``, ``SIGTERM`` or ``SIGKILL``) to the foreground job and
        the jobs started since ``mark`` (see :meth:`ahp.engine.Terminal.signal_command`);
        ``None`` when the server did not do it (no extension, or the request failed).

        Raises:
            ValueError: an unknown signal name.
        """
        if signal not in xp.SIGNALS:
            raise ValueError(f"signal must be one of {', '.join(xp.SIGNALS)}")
        answer = await self._ask(xp.SIGNAL, signal=signal, **_since(mark))
        try:
            return structure(answer, xp.SignalResult) if answer is not None else None
        except ProtocolError as exc:
            log.info("%s: a malformed %s answer: %s", self.uri, xp.SIGNAL, exc)
            return None

    async def wait_exited(self, timeout: float = math.inf) -> int | None:
        with trio.fail_after(timeout):
            await self.client.wait_for(lambda: self.state.exited or self._gone())
        return self.state.exitCode

    def _gone(self) -> bool:
        return self.uri not in self.client.mirrors


def _forget_unsubscribed(per_channel: dict[str, Any], mirrors: Mapping[str, object]) -> None:
    """Drop what is kept for channels the client no longer mirrors (bounds the dicts
    by the subscribed channels, plus the one about to be added)."""
    for uri in [uri for uri in per_channel if uri not in mirrors]:
        del per_channel[uri]


def _since(mark: object) -> dict[str, Any]:
    """A mark from :meth:`RemoteTerminal.job_mark` as the ``since`` param."""
    return {"since": unstructure(mark)} if isinstance(mark, xp.JobMarkWire) else {}


def _running(state: TerminalState) -> bool:
    """A detected command is running (without detection: assumed running)."""
    if not state.supportsCommandDetection:
        return not state.exited
    content = state.content
    return bool(content) and isinstance(content[-1], CommandPart) and not content[-1].isComplete


class _Connection(enum.Enum):
    """What the client told a follower about its connection (queued among envelopes)."""

    DROPPED = "dropped"
    RECONNECTED = "reconnected"
    GONE = "gone"


class _Follower:
    """Envelopes of one channel, queued from the client's envelope callback, with
    the connection's drops and reconnects among them (see the module doc)."""

    def __init__(self, terminal: RemoteTerminal) -> None:
        self._terminal = terminal
        self._send, self._receive = trio.open_memory_channel[ActionEnvelope | _Connection](
            FOLLOW_QUEUE
        )
        self._lagged = False
        self._first = True
        #: The last server sequence number handed out (a snapshot's, or an envelope's):
        #: a queued envelope at or below it is in what was handed out already (it
        #: arrived between the callback's registration and a snapshot).
        self._handed = -1
        #: When the connection dropped (a reconnect is being tried), else None.
        self._dropped_at: float | None = None
        client = terminal.client
        self._unregister = client.on_envelope(self._on_envelope)
        self._unregister_connection = client.on_connection(self._on_connection)

    def _on_envelope(self, envelope: ActionEnvelope) -> None:
        if envelope.channel != self._terminal.uri or self._lagged:
            return
        self._queue(envelope)

    def _on_connection(self, what: str) -> None:
        self._queue(_Connection(what))

    def _queue(self, item: ActionEnvelope | _Connection) -> None:
        try:
            self._send.send_nowait(item)
        except trio.WouldBlock:
            self._lagged = True

    def _snapshot(self) -> Snapshot:
        terminal = self._terminal
        mirror = terminal.client.mirrors[terminal.uri]
        self._handed = mirror.last_seq
        return Snapshot(resource=terminal.uri, state=terminal.state, fromSeq=mirror.last_seq)

    def __aiter__(self) -> _Follower:
        return self

    async def __anext__(self) -> Snapshot | ActionEnvelope:
        client = self._terminal.client
        if self._first:
            self._first = False
            await trio.lowlevel.checkpoint()
            return self._snapshot()
        if self._lagged:
            gone = False
            while True:
                try:
                    gone = self._receive.receive_nowait() is _Connection.GONE or gone
                except trio.WouldBlock:
                    break
            self._lagged = False
            if gone or client.lost is not None or self._terminal.uri not in client.mirrors:
                raise StopAsyncIteration
            await trio.lowlevel.checkpoint()
            return self._snapshot()
        while True:
            # While reconnecting, wait at most until LOST_AFTER past the drop (a
            # reconnect's replay arrives as envelopes before "reconnected").
            deadline = math.inf if self._dropped_at is None else self._dropped_at + LOST_AFTER
            with trio.move_on_at(deadline):
                item = await self._receive.receive()
                if isinstance(item, ActionEnvelope):
                    if item.rejectionReason is None:
                        if item.serverSeq <= self._handed:
                            continue  # already in the snapshot handed out
                        self._handed = item.serverSeq
                    return item
                if item is _Connection.DROPPED:
                    self._dropped_at = trio.current_time()
                    continue
                if item is _Connection.RECONNECTED and self._terminal.uri in client.mirrors:
                    self._dropped_at = None
                    return self._snapshot()  # what the reconnect re-sent is in it
            raise StopAsyncIteration  # gone for good, unsubscribed, or down too long

    async def aclose(self) -> None:
        self._unregister()
        self._unregister_connection()
        await trio.lowlevel.checkpoint()
