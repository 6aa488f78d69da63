"""The server side of the ``x-ahp-terminals/*`` process extension.

Why here and thin: the evidence a remote client lacks (is the foreground job
blocked reading the tty, which jobs did a command leave, signalling the
command's process groups) is what :class:`ahp.engine.Terminal` already
computes for in-process callers (:meth:`~ahp.engine.Terminal.tty_status`,
:meth:`~ahp.engine.Terminal.job_mark`, :meth:`~ahp.engine.Terminal.background_jobs`,
:meth:`~ahp.engine.Terminal.signal_command`). These handlers only validate the
params, check the caller may act, call those methods and shape the answer
(:mod:`ahp.protocol.processes` names the methods, types and bounds).

Authorisation: reading a terminal's process status or jobs is allowed to every
authenticated client, like subscribing to its output. Signalling is the
``signal`` row of the one policy table (:mod:`ahp.reducers.policy`), decided for
the connection's own ``clientId``: open to every client by default, only the
holder's with ``serve --holder-only-input``
(:attr:`ServerState.holder_only_input <ahp.server.session.ServerState.holder_only_input>`).

Cost and buffering: each request is one scan of ``/proc`` (synchronous, a few
milliseconds), answered on the connection's outbox like any other request. A
``jobs`` request may wait up to :data:`ahp.engine.terminal.JOB_SETTLE` seconds for
a just-forked job to start its program (cancelled with the connection). Answers
are bounded by :data:`~ahp.protocol.processes.MAX_JOBS_REPORTED` entries.
"""

from __future__ import annotations

import signal
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Final

from ahp.engine import Terminal, TerminalNotFound
from ahp.protocol.codec import structure, unstructure
from ahp.protocol.jsonrpc import ErrorCode
from ahp.protocol.processes import (
    JOB_MARK,
    JOBS,
    MAX_JOBS_REPORTED,
    MAX_MARK_PIDS,
    SIGNAL,
    SIGNALS,
    TTY_STATUS,
    ChannelParams,
    JobMarkResult,
    JobMarkWire,
    JobsParams,
    JobsResult,
    JobWire,
    SignalParams,
    SignalResult,
    TtyStatusResult,
    TtyStatusWire,
    mark_problem,
)
from ahp.protocol.state import ROOT_URI
from ahp.pty import procfs
from ahp.reducers.policy import Change

if TYPE_CHECKING:
    from ahp.server.session import Session

__all__ = ["PROCESS_REQUESTS", "Refused"]

#: Longest piece of a client's channel quoted back in an error message.
_QUOTE_LIMIT: Final = 200


class Refused(Exception):
    """A request answered with a JSON-RPC error (code, message, data)."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data


def _terminal(session: Session, channel: str) -> Terminal:
    quoted = channel if len(channel) <= _QUOTE_LIMIT else channel[:_QUOTE_LIMIT] + "…"
    if channel == ROOT_URI:
        raise Refused(
            ErrorCode.NOT_FOUND, "not a terminal: the root channel", {"path": "$.params.channel"}
        )
    try:
        return session.host.get(channel)
    except TerminalNotFound:
        raise Refused(
            ErrorCode.NOT_FOUND, f"no terminal {quoted!r}", {"path": "$.params.channel"}
        ) from None


def _mark(wire: JobMarkWire | None) -> procfs.JobMark | None:
    if wire is None:
        return None
    problem = mark_problem(wire)
    if problem is not None:
        where, why = problem
        path = f"$.params.since.{where}"
        raise Refused(ErrorCode.INVALID_PARAMS, f"invalid params: {why} at {path}", {"path": path})
    return procfs.JobMark(known=frozenset(wire.known), tick=wire.tick)


def _check_may_signal(session: Session, terminal: Terminal) -> None:
    """The policy table's ``signal`` row (:mod:`ahp.reducers.policy`), for the
    connection's own identity."""
    why = terminal.refusal(Change.SIGNAL, session.client_id)
    if why is not None:
        raise Refused(ErrorCode.PERMISSION_DENIED, why)


def _bounded(pids: tuple[int, ...]) -> tuple[int, ...]:
    return pids[:MAX_JOBS_REPORTED]


async def _tty_status(session: Session, params: Any) -> Any:
    p = structure(params, ChannelParams)
    terminal = _terminal(session, p.channel)
    status = terminal.tty_status()
    wire = None
    if status is not None:
        wire = TtyStatusWire(
            foregroundPgrp=status.foreground_pgrp,
            shellForeground=status.foreground_pgrp == terminal.pid,
            echo=status.echo,
            readers=_bounded(status.readers),
            pollers=_bounded(status.pollers),
            unread=status.unread,
        )
    return unstructure(TtyStatusResult(status=wire))


async def _job_mark(session: Session, params: Any) -> Any:
    p = structure(params, ChannelParams)
    mark = _terminal(session, p.channel).job_mark()
    wire = None
    if mark is not None:
        # Past the bound some children are left out of ``known``: the mark's tick
        # still keeps them out of "started since" (they started before it).
        known = tuple(sorted(mark.known))[:MAX_MARK_PIDS]
        wire = JobMarkWire(known=known, tick=mark.tick)
    return unstructure(JobMarkResult(mark=wire))


async def _jobs(session: Session, params: Any) -> Any:
    p = structure(params, JobsParams)
    terminal = _terminal(session, p.channel)
    jobs = await terminal.background_jobs(_mark(p.since))
    listed = sorted(jobs.items())
    return unstructure(
        JobsResult(
            jobs=tuple(
                JobWire(pid=pid, commandLine=line) for pid, line in listed[:MAX_JOBS_REPORTED]
            ),
            truncated=len(listed) > MAX_JOBS_REPORTED,
        )
    )


async def _signal(session: Session, params: Any) -> Any:
    p = structure(params, SignalParams)
    if p.signal not in SIGNALS:
        raise Refused(
            ErrorCode.INVALID_PARAMS,
            f"signal must be one of {', '.join(SIGNALS)}",
            {"path": "$.params.signal"},
        )
    terminal = _terminal(session, p.channel)
    _check_may_signal(session, terminal)
    mark = _mark(p.since)
    groups, shell_foreground = await terminal.signal_command(signal.Signals[p.signal], mark)
    return unstructure(
        SignalResult(
            groups=tuple(sorted(groups))[:MAX_JOBS_REPORTED], shellForeground=shell_foreground
        )
    )


#: The extension's handlers, merged into the session's request table.
PROCESS_REQUESTS: Final[dict[str, Callable[[Session, Any], Awaitable[Any]]]] = {
    TTY_STATUS: _tty_status,
    JOB_MARK: _job_mark,
    JOBS: _jobs,
    SIGNAL: _signal,
}
