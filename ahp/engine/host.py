"""The host: every terminal of one process, the root catalogue, one sequencer.

Why: AHP numbers every envelope of a server with one global ``serverSeq`` and
keeps a catalogue of terminals on ``ahp-root://``. The :class:`Host` owns both,
plus the nursery in which each terminal's own nursery runs. Library users get
it from :func:`open_host`; the WebSocket server wraps the same object
(:func:`ahp.server.serve_host`; the engine never imports the server), so an
agent can run commands in-process while an editor watches over the wire.

The catalogue (``root/terminalsChanged``, the whole list each time) changes
when a terminal is created or disposed, and when a terminal's reducer task
reports that its entry (title, claim, exit) changed (at most once per batch of
work, however many titles the batch held). A change only marks the catalogue
stale (O(1)); :attr:`Host.root_state` is rebuilt when read, and one task
publishes the catalogue at most once per :data:`CATALOGUE_INTERVAL`: the first
change after a quiet interval goes out at the next scheduler pass, later ones
are merged into one envelope at the end of the interval (issue 25: a title
storm over 200 terminals with 4096-character titles published a 1 MB catalogue
per change, 2000 times, and stalled every client for seconds). Each
subscriber's outbox keeps only the newest catalogue still queued (latest wins).
Entries are cached per terminal, so a catalogue costs one attribute read per
terminal to build, plus its encoding.

Ownership and cancellation: leaving ``async with open_host()`` disposes every
terminal (hang-up, grace period, kill, reap, fds closed) before returning, also
when the body raised or was cancelled.
"""

from __future__ import annotations

import logging
import math
import secrets
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Any, Final

import trio

from ahp.engine.alarm import OutputAlarm
from ahp.engine.envelopes import ReplayLog
from ahp.engine.hub import Hub
from ahp.engine.launch import TerminalSpec, discard, prepare_launch
from ahp.engine.memory import Trimmer
from ahp.engine.outbox import Outbox
from ahp.engine.packing import pack_scrollback
from ahp.engine.priority import FLOOD_NICE, FloodKeeper
from ahp.engine.subscription import Subscription
from ahp.engine.terminal import Terminal
from ahp.protocol.actions import RootTerminalsChanged
from ahp.protocol.state import (
    ROOT_URI,
    TERMINAL_SCHEME,
    ClientClaim,
    RootState,
    Snapshot,
    TerminalClaim,
    TerminalInfo,
)
from ahp.reducers import DEFAULT_SCROLLBACK, reduce_root
from ahp.unwrap import BlockError

__all__ = ["Host", "TerminalExists", "TerminalNotFound", "open_host"]

log = logging.getLogger("ahp.engine")

#: Seconds between two catalogues published (changes meanwhile are merged into the next).
#: At most 20 a second: with 256 terminals of 4096-character titles (1 MB each, ~2 ms
#: to encode) a storm costs the loop under 5 % of a core.
CATALOGUE_INTERVAL: Final = 0.05


class TerminalExists(Exception):
    """A terminal with that URI already exists."""


class TerminalNotFound(LookupError):
    """No terminal with that URI."""


class Host:
    """Terminals, the root channel and the global sequence; see :func:`open_host`."""

    def __init__(
        self,
        nursery: trio.Nursery,
        *,
        shell: str | None = None,
        scrollback: int = DEFAULT_SCROLLBACK,
        log_envelopes: int | None = None,
        log_bytes: int | None = None,
        user_rc: bool = True,
        cwd: str | None = None,
    ) -> None:
        self._nursery = nursery
        kwargs: dict[str, int] = {}
        if log_envelopes is not None:
            kwargs["max_envelopes"] = log_envelopes
        if log_bytes is not None:
            kwargs["max_bytes"] = log_bytes
        self.hub = Hub(ReplayLog(**kwargs))
        #: The book of :mod:`ahp.engine.exec`'s execs on this host, kept by that layer
        #: (the host holds it so that it is freed with the host; None once closed).
        self.exec_book: object = None
        #: Returns freed memory to the system after large frees (see ahp.engine.memory).
        self.trimmer = Trimmer(nursery)
        self.shell = shell
        #: Where new terminals start when not told (``serve --cwd``; None: the home
        #: directory).
        self.cwd = cwd
        self.scrollback = scrollback
        #: Whether new terminals' shells load the user's startup files (``~/.bashrc``...)
        #: before command detection (``serve --no-rc``: False); per terminal, ``user_rc=``.
        self.user_rc = user_rc
        self._terminals: dict[str, Terminal] = {}
        self._root = RootState(agents=(), terminals=())
        #: The catalogue changed since ``_root`` was built / since it was published.
        self._root_stale = False
        self._unpublished = False
        self._catalogue_task = False  # a publishing task is scheduled
        self._packing = False  # the scrollback packer runs (ahp.engine.packing)
        #: The flood watch (ahp.engine.priority), while it runs.
        self._floods: FloodKeeper | None = None
        #: Wakes the flood watch and the packer at the first output after they found
        #: nothing to do (an idle host makes no wake-ups).
        self._alarm = OutputAlarm(self._terminals.values)
        self._published_at = -math.inf
        self._counter = 0
        #: Terminals created so far: each one's ``generation`` (a URI disposed and
        #: created again names another terminal, whose envelopes cannot be replayed onto
        #: a snapshot of the first).
        self._generations = 0
        self._holder_only_input = False
        #: Niceness of every new terminal's process (``serve --child-nice``): on a
        #: machine with few cores, busy children then leave the server its CPU.
        self.child_nice = 0
        #: Nice value of a terminal's autogroup while its output floods the host
        #: (``serve --flood-nice``; :mod:`ahp.engine.priority`); 0 turns it off.
        self.flood_nice = FLOOD_NICE
        #: Called with each new terminal, synchronously, before its process starts (so
        #: a subscriber registered here misses none of its output); a hook must not
        #: raise. Recording (:mod:`ahp.record`) registers one.
        self.on_terminal_created: list[Callable[[Terminal], None]] = []
        #: Called with each terminal whose disposal starts (synchronously); must not raise.
        self.on_terminal_disposed: list[Callable[[Terminal], None]] = []

    # -- root channel ------------------------------------------------------------------------

    @property
    def root_state(self) -> RootState:
        """The root state now (rebuilt when the catalogue changed since the last read)."""
        if self._root_stale:
            self._root_stale = False
            action = RootTerminalsChanged(
                terminals=tuple(t.info() for t in self._terminals.values())
            )
            self._root = reduce_root(self._root, action)
        return self._root

    def root_snapshot(self) -> Snapshot:
        return Snapshot(resource=ROOT_URI, state=self.root_state, fromSeq=self.hub.seq)

    def list_terminals(self) -> tuple[TerminalInfo, ...]:
        return self.root_state.terminals or ()

    @property
    def catalogue_pending(self) -> bool:
        """Whether a catalogue change is still to be published (it will be, within
        :data:`CATALOGUE_INTERVAL`)."""
        return self._unpublished

    def _catalogue_changed(self) -> None:
        """The catalogue changed: mark it stale and make sure it is published (O(1))."""
        self._root_stale = self._unpublished = True
        if not self._catalogue_task:
            self._catalogue_task = True
            self._nursery.start_soon(self._publish_catalogue)

    async def _publish_catalogue(self) -> None:
        """Publish the catalogue once, at most :data:`CATALOGUE_INTERVAL` after the last."""
        try:
            delay = self._published_at + CATALOGUE_INTERVAL - trio.current_time()
            if delay > 0:
                await trio.sleep(delay)
        finally:
            self._catalogue_task = False
        if self._unpublished:
            self._unpublished = False
            self._published_at = trio.current_time()
            root = self.root_state
            self.hub.publish(ROOT_URI, RootTerminalsChanged(terminals=root.terminals or ()))

    def _on_info_changed(self, _: Terminal) -> None:
        """A terminal's reducer task: its catalogue entry changed (once per batch)."""
        self._catalogue_changed()

    def subscribe_root(self) -> Subscription:
        def attach(outbox: Outbox) -> Snapshot:
            self.hub.subscribe(ROOT_URI, outbox, exclusive=True)
            return self.root_snapshot()

        return Subscription(attach, lambda outbox: self.hub.unsubscribe(ROOT_URI, outbox))

    # -- terminals ---------------------------------------------------------------------------

    def get(self, uri: str) -> Terminal:
        try:
            return self._terminals[uri]
        except KeyError:
            raise TerminalNotFound(f"no terminal {uri!r}") from None

    def __contains__(self, uri: object) -> bool:
        return uri in self._terminals

    @property
    def terminals(self) -> Mapping[str, Terminal]:
        return self._terminals

    @property
    def holder_only_input(self) -> bool:
        """Whether every terminal takes clients' input (and signals, see
        :mod:`ahp.server.processes`) only from the holder of its client claim
        (``serve --holder-only-input``; design decision 3). In-process input is always
        taken. Off by default: input is open to every authenticated client."""
        return self._holder_only_input

    @holder_only_input.setter
    def holder_only_input(self, value: bool) -> None:
        self._holder_only_input = value
        for terminal in self._terminals.values():
            terminal.holder_only_input = value

    def new_uri(self) -> str:
        """A fresh terminal URI (``ahp-terminal:/t<n>``) not in use."""
        while True:
            self._counter += 1
            uri = f"{TERMINAL_SCHEME}/t{self._counter}"
            if uri not in self._terminals:
                return uri

    async def create_terminal(
        self,
        uri: str | None = None,
        *,
        claim: TerminalClaim | None = None,
        name: str | None = None,
        argv: tuple[str, ...] | list[str] | None = None,
        shell: str | None = None,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        cols: int = 80,
        rows: int = 24,
        use_pty: bool = True,
        login: bool = False,
        shell_integration: bool = True,
        on_output: Callable[[bool, bytes], None] | None = None,
        **options: Any,
    ) -> Terminal:
        """Spawn a terminal and return it once its process runs.

        The launch is validated before the URI is reserved (a bad cwd or a missing
        program never registers anything); once reserved, the terminal's lifetime
        always ends in ``closed``, so a concurrent :meth:`dispose` or host shutdown
        never waits for good.

        ``on_output`` (with ``use_pty=False``): called with each batch the terminal reads,
        ``True`` for stderr when it has a pipe of its own (``stderr_apart=True``); it
        must not block nor raise.

        Raises:
            TerminalExists: ``uri`` is in use.
            ahp.pty.SpawnError: the process could not be started (bad cwd, missing
                executable, name too long, disposed while starting); nothing is
                registered then.
        """
        uri = uri or self.new_uri()
        if uri in self._terminals:
            raise TerminalExists(f"terminal {uri!r} already exists")
        spec = TerminalSpec(
            uri=uri,
            claim=claim or ClientClaim(clientId=""),
            name=name,
            argv=tuple(argv) if argv is not None else None,
            shell=shell or self.shell,
            cwd=cwd if cwd is not None else self.cwd,
            env=dict(env or {}),
            cols=cols,
            rows=rows,
            use_pty=use_pty,
            login=login,
            shell_integration=shell_integration,
            scrollback=options.pop("scrollback", self.scrollback),
            nice=options.pop("nice", self.child_nice),
            user_rc=options.pop("user_rc", self.user_rc),
            **options,
        )
        nonce = secrets.token_hex(16)
        launch = prepare_launch(spec, nonce=nonce)  # raises SpawnError; nothing reserved yet
        if uri in self._terminals:  # (no checkpoint since the check above; stays true)
            discard(launch)
            raise TerminalExists(f"terminal {uri!r} already exists")
        terminal = Terminal(
            spec,
            launch,
            self.hub,
            nonce=nonce,
            on_info_changed=self._on_info_changed,
            on_input=self._on_input,
            on_output=on_output,
        )
        terminal.holder_only_input = self._holder_only_input
        self._generations += 1
        terminal.generation = self._generations
        # Reserve the URI while spawning so a concurrent create cannot take it.
        self._terminals[uri] = terminal
        self._alarm.arm(terminal)
        for hook in self.on_terminal_created:
            hook(terminal)
        try:
            await self._nursery.start(self._run_terminal, terminal)
        except BaseException:
            if self._terminals.get(uri) is terminal:  # (a dispose may have dropped it)
                del self._terminals[uri]
                self.hub.drop_channel(uri)  # subscribers the hooks registered end
                self._ring_if_empty()
            raise
        self._catalogue_changed()
        if not self._packing:
            self._packing = True
            self._nursery.start_soon(self._pack_scrollback)
        if self._floods is None:
            self._floods = FloodKeeper(
                self._terminals.values, lambda: self.flood_nice, alarm=self._alarm
            )
            self._nursery.start_soon(self._watch_floods, self._floods)
        return terminal

    async def _pack_scrollback(self) -> None:
        """Old scrollback packed while the terminals hold much (:mod:`ahp.engine.packing`);
        ends when no terminal is left (the next creation starts it again)."""
        try:
            await pack_scrollback(
                self._terminals.values, released=self.trimmer.request, quiet=self._alarm.wait
            )
        finally:
            self._packing = False

    async def _watch_floods(self, keeper: FloodKeeper) -> None:
        """Flooding terminals read by threads and run below the host
        (:mod:`ahp.engine.priority`); ends when no terminal is left (the next creation
        starts it again)."""
        try:
            await keeper.run()
        finally:
            self._floods = None

    def _ring_if_empty(self) -> None:
        """The last terminal went: the sleeping watchers wake, see it, and end."""
        if not self._terminals:
            self._alarm.ring(gone=True)

    def _on_input(self, terminal: Terminal) -> None:
        """A terminal took an input (its reducer task, synchronous)."""
        if self._floods is not None:
            self._floods.typed(terminal)

    async def _run_terminal(
        self, terminal: Terminal, *, task_status: trio.TaskStatus[Terminal]
    ) -> None:
        try:
            await terminal.lifetime(task_status=task_status)
        finally:
            if self._terminals.get(terminal.uri) is terminal and terminal.failure is not None:
                log.warning("terminal %s ended after a failure", terminal.uri)

    async def dispose(self, uri: str) -> None:
        """Kill the terminal's process (hang-up, grace, kill), reap it, drop the terminal.

        After this returns no envelope for ``uri`` is published any more, the
        catalogue no longer lists it and the replay log holds none of its envelopes;
        the memory it held is returned to the system soon after (:class:`Trimmer`).
        Raises :class:`TerminalNotFound`.
        """
        terminal = self.get(uri)
        del self._terminals[uri]
        self._ring_if_empty()
        for hook in self.on_terminal_disposed:
            hook(terminal)
        terminal.close()
        with trio.CancelScope(shield=True):
            await terminal.closed.wait()
        self.hub.drop_channel(uri)
        # What the terminal held goes back to the system: its scrollback, and its
        # envelopes in the replay log (up to the log's bound, of a channel nobody can
        # replay any more).
        self.hub.log.forget(uri)
        self.trimmer.request()
        self._catalogue_changed()

    async def aclose(self) -> None:
        """Dispose every terminal (concurrently); forget the execs' kept outputs."""
        async with trio.open_nursery() as nursery:
            for uri in list(self._terminals):
                nursery.start_soon(self.dispose, uri)
        self.exec_book = None


@asynccontextmanager
async def open_host(
    *,
    shell: str | None = None,
    scrollback: int = DEFAULT_SCROLLBACK,
    log_envelopes: int | None = None,
    log_bytes: int | None = None,
    user_rc: bool = True,
    cwd: str | None = None,
) -> AsyncIterator[Host]:
    """Run a :class:`Host` for the duration of the ``async with`` block.

    Args:
        shell: default shell for new terminals (else ``$SHELL``, else ``/bin/sh``).
        scrollback: characters retained per terminal.
        user_rc: whether new terminals' shells load the user's startup files first
            (False: the host's own environment reaches commands unchanged, e.g. a
            venv's ``python`` stays first on ``PATH``; command detection still loads).
        cwd: where new terminals (and execs) start when not told (an absolute path;
            else the home directory).

    An error raised by the block leaves it as it was raised (not inside an
    ``ExceptionGroup``), unless one of the host's own tasks failed too
    (:mod:`ahp.unwrap`).
    """
    with BlockError.unwrapped() as block:
        async with trio.open_nursery() as nursery:
            host = Host(
                nursery,
                shell=shell,
                scrollback=scrollback,
                log_envelopes=log_envelopes,
                log_bytes=log_bytes,
                user_rc=user_rc,
                cwd=cwd,
            )
            try:
                with block.watching():
                    yield host
            finally:
                with trio.CancelScope(shield=True):
                    await host.aclose()
                nursery.cancel_scope.cancel()
