"""Drain: stop taking terminals, let running commands finish, say goodbye.

Why: the engines that run sidecars (Kubernetes, Nomad, Compose) stop one with
SIGTERM and a grace period before SIGKILL. Killing every terminal at once would
cut an agent's build or test run short for no reason; waiting forever would get
the sidecar killed with its children orphaned. So a drain:

1. sets :attr:`ServerState.draining <ahp.server.state.ServerState.draining>`:
   ``/readyz`` answers 503 (the engine stops routing new work here) and
   ``createTerminal`` is refused (``-32000``, message ``draining``);
2. waits until no terminal has a command in progress, for ``timeout`` seconds at
   most (:func:`busy_terminals`: a detected command in a shell the host injected
   its integration into (elsewhere the marks may be any program's output: a stray
   ``OSC 133;C`` opens a command no shell will end) or a line typed into such a shell
   that no prompt followed yet (a command typed just before the drain, not started
   yet), a foreground job, or a running
   ``x-ahp-terminals/exec`` command; an idle shell does not hold it), then up to
   :data:`EXEC_FETCH_GRACE` more while an exec that ended has a result no client fetched;
3. says goodbye: every connection sends what is queued for it (so a
   ``commandFinished`` reaches its client before the close), then closes with
   1001 ``going away``; new upgrades from then on are closed the same way at once.
   The goodbye takes :data:`GOODBYE_TIMEOUT` seconds at most.

The caller then disposes every terminal (:meth:`ahp.engine.Host.aclose`). What
is running after the timeout is disposed with the rest (hang-up, grace, kill).

Waiting: the engine has no "a command finished" event to wait on, so the drain
looks every :data:`DRAIN_POLL` seconds (a drain ends at most that much after the
last command); the goodbye waits for the connections to leave
(:attr:`ServerState.sessions_changed <ahp.server.state.ServerState.sessions_changed>`);
both waits end at their deadline. Cancellation: cancelling
:func:`drain` stops it wherever it is (the goodbye may be half done; the
connections close with 1001 when their tasks are cancelled).

The pure part, :func:`command_in_progress`, reads a terminal's state only.
"""

from __future__ import annotations

import logging
from typing import Final

import trio

from ahp.engine import Terminal
from ahp.engine.exec import find_exec
from ahp.protocol.state import CommandPart, TerminalState
from ahp.server.state import ServerState

__all__ = [
    "DEFAULT_DRAIN_TIMEOUT",
    "DRAIN_POLL",
    "EXEC_FETCH_GRACE",
    "GOING_AWAY",
    "GOODBYE_TIMEOUT",
    "busy_terminals",
    "command_in_progress",
    "drain",
    "unfetched_exec_results",
]

log = logging.getLogger("ahp.server")

#: Seconds running commands get to finish after SIGTERM (``serve --drain-timeout``).
DEFAULT_DRAIN_TIMEOUT: Final = 10.0
#: Seconds between two looks at the terminals while draining.
DRAIN_POLL: Final = 0.05
#: Seconds a drain waits, once no command runs, for the results of execs that ended to
#: be fetched by their clients (within the drain's timeout).
EXEC_FETCH_GRACE: Final = 2.0
#: Seconds the goodbye may take: every connection's queued frames, then its close.
GOODBYE_TIMEOUT: Final = 2.0
#: The close every client gets at the end of a drain.
GOING_AWAY: Final = (1001, "going away")


def command_in_progress(state: TerminalState) -> bool:
    """Whether the state shows a detected command that has not finished (the last
    command part is incomplete) in a terminal whose process still runs."""
    if state.exited or state.exitCode is not None:
        return False
    for part in reversed(state.content):
        if isinstance(part, CommandPart):
            return not part.isComplete
    return False


def _foreground_job(terminal: Terminal) -> bool:
    """A pty whose foreground process group is not the shell's: a job runs (also
    in a shell without command detection)."""
    status = terminal.tty_status()
    pid = terminal.pid
    return status is not None and pid is not None and status.foreground_pgrp not in (0, pid)


def busy_terminals(state: ServerState) -> list[str]:
    """URIs of the terminals that hold a drain: their process runs, and it is a
    command itself (a terminal without a pty: an ``x-ahp-terminals/exec`` command),
    or a detected command is in progress or typed and not started yet
    (:attr:`Terminal.line_pending <ahp.engine.Terminal.line_pending>`), or a job
    other than the shell is in the foreground."""
    return [
        uri
        for uri, terminal in state.host.terminals.items()
        if terminal.running
        and (
            not terminal.spec.use_pty
            or (
                terminal.integrated
                and (command_in_progress(terminal.state) or terminal.line_pending)
            )
            or _foreground_job(terminal)
        )
    ]


async def drain(state: ServerState, timeout: float = DEFAULT_DRAIN_TIMEOUT) -> list[str]:
    """Drain ``state``'s server (see the module docstring); returns the URIs of the
    terminals still busy when the timeout ended the wait (empty: all finished).

    Returns after the goodbye; the caller stops serving and disposes the terminals.
    """
    state.draining = True
    busy = busy_terminals(state)
    log.info(
        "draining: %d terminal(s), %d with a command running; waiting up to %g s",
        len(state.host.terminals),
        len(busy),
        timeout,
    )
    deadline = trio.current_time() + timeout
    with trio.move_on_at(deadline):
        while busy:
            await trio.sleep(DRAIN_POLL)
            busy = busy_terminals(state)
    if busy:
        log.info("drain timeout: %d command(s) still running are disposed", len(busy))
    # An exec's client asks for its result once it saw terminal/exited: a moment for that.
    with trio.move_on_at(min(deadline, trio.current_time() + EXEC_FETCH_GRACE)):
        pending = unfetched_exec_results(state)
        while pending:
            await trio.sleep(DRAIN_POLL)
            pending = unfetched_exec_results(state)
    await goodbye(state)
    return busy


def unfetched_exec_results(state: ServerState) -> list[str]:
    """URIs of the ``x-ahp-terminals/exec`` commands still kept whose result no client
    has fetched yet (``x-ahp-terminals/execResult``; one that just ended may still be
    making it)."""
    return [uri for uri in state.unfetched_execs if find_exec(state.host, uri) is not None]


async def goodbye(state: ServerState, timeout: float = GOODBYE_TIMEOUT) -> None:
    """Close every connection with :data:`GOING_AWAY` after what is queued for it,
    and every later one at once; wait ``timeout`` seconds at most (for the connections
    to leave: a connection still writing then is left as it is; cancelling the wait
    leaves the closes requested)."""
    state.going_away = GOING_AWAY
    for session in list(state.sessions):
        session.close_request = GOING_AWAY
        session.outbox.close()  # the writer sends what is queued, then closes
    with trio.move_on_after(timeout):
        while state.sessions:
            await state.sessions_changed.park()
    if state.sessions:
        log.info("%d connection(s) did not finish the goodbye in time", len(state.sessions))
