"""The server side of the ``x-ahp-terminals/*`` process extension.

Why here and thin: the evidence a remote client lacks (is the foreground job
blocked reading the tty, which jobs did a command leave, signalling the
command's process groups) is what a terminal's pty session already computes
for in-process callers (:class:`ahp.pty.jobs.Jobs`, handed out by
:attr:`ahp.engine.Terminal.jobs`, and :meth:`~ahp.engine.Terminal.signal_command`).
These handlers only validate the
params, check the caller may act, call those methods and shape the answer
(:mod:`ahp.protocol.processes` names the methods, types and bounds).

Authorisation: reading a terminal's process status or jobs is allowed to every
authenticated client, like subscribing to its output. Signalling is the
``signal`` row of the one policy table (:mod:`ahp.reducers.policy`), decided for
the connection's own ``clientId``: open to every client by default, only the
holder's with ``serve --holder-only-input``
(:attr:`ServerState.holder_only_input <ahp.server.state.ServerState.holder_only_input>`).

Cost and buffering: each request is one scan of ``/proc`` (synchronous, a few
milliseconds), answered on the connection's outbox like any other request. A
``jobs`` request may wait up to :data:`ahp.pty.jobs.JOB_SETTLE` seconds for
a just-forked job to start its program (cancelled with the connection). Answers
are bounded by :data:`~ahp.protocol.processes.MAX_JOBS_REPORTED` entries.
"""

from __future__ import annotations

import shlex
import signal
from collections.abc import Awaitable, Callable
from typing import Any, Final

import trio

from ahp.engine import Terminal, TerminalExists, TerminalNotFound
from ahp.engine.exec import find_exec, start_exec
from ahp.protocol.codec import structure, unstructure
from ahp.protocol.jsonrpc import ErrorCode
from ahp.protocol.processes import (
    EXEC,
    EXEC_RESULT,
    EXEC_RESULT_WAIT,
    EXEC_RUNNING,
    JOB_MARK,
    JOBS,
    MAX_JOBS_REPORTED,
    MAX_MARK_PIDS,
    MAX_PROGRAM_CHARS,
    MAX_PROGRAMS_REPORTED,
    SIGNAL,
    SIGNALS,
    TTY_STATUS,
    ChannelParams,
    ExecParams,
    ExecResult,
    JobMarkResult,
    JobMarkWire,
    JobsParams,
    JobsResult,
    JobWire,
    SignalParams,
    SignalResult,
    TtyStatusResult,
    TtyStatusWire,
    exec_problem,
    mark_problem,
)
from ahp.protocol.state import ROOT_URI, ClientClaim
from ahp.pty import SpawnError, procfs
from ahp.pty.spec import DisposedWhileStarting
from ahp.record.audit import ACTOR, MAX_AUDIT_TEXT
from ahp.reducers.policy import Change
from ahp.server.connection import Connection
from ahp.server.errors import QUOTE_LIMIT, Fail, out_of_resources, short
from ahp.server.terminals import check_room

__all__ = ["PROCESS_REQUESTS"]


def _terminal(session: Connection, channel: str) -> Terminal:
    if channel == ROOT_URI:
        raise Fail(
            ErrorCode.NOT_FOUND, "not a terminal: the root channel", {"path": "$.params.channel"}
        )
    try:
        return session.host.get(channel)
    except TerminalNotFound:
        raise Fail(
            ErrorCode.NOT_FOUND, f"no terminal {short(channel)!r}", {"path": "$.params.channel"}
        ) from None


def _mark(wire: JobMarkWire | None) -> procfs.JobMark | None:
    if wire is None:
        return None
    problem = mark_problem(wire)
    if problem is not None:
        where, why = problem
        path = f"$.params.since.{where}"
        raise Fail(ErrorCode.INVALID_PARAMS, f"invalid params: {why} at {path}", {"path": path})
    return procfs.JobMark(known=frozenset(wire.known), tick=wire.tick)


def _check_may_signal(session: Connection, terminal: Terminal) -> None:
    """The policy table's ``signal`` row (:mod:`ahp.reducers.policy`), for the
    connection's own identity."""
    why = terminal.refusal(Change.SIGNAL, session.client_id)
    if why is not None:
        raise Fail(ErrorCode.PERMISSION_DENIED, why)


def _bounded(pids: tuple[int, ...]) -> tuple[int, ...]:
    return pids[:MAX_JOBS_REPORTED]


async def _tty_status(session: Connection, params: Any) -> Any:
    p = structure(params, ChannelParams)
    terminal = _terminal(session, p.channel)
    jobs = terminal.jobs
    status = await jobs.scan_tty_status() if jobs is not None else None
    wire = None
    if status is not None:
        wire = TtyStatusWire(
            foregroundPgrp=status.foreground_pgrp,
            shellForeground=status.foreground_pgrp == terminal.pid,
            echo=status.echo,
            readers=_bounded(status.readers),
            pollers=_bounded(status.pollers),
            unread=status.unread,
            ttyPollers=_bounded(status.tty_pollers),
            programs=tuple(
                line[:MAX_PROGRAM_CHARS] for line in status.programs[:MAX_PROGRAMS_REPORTED]
            ),
            shellReplaced=status.shell_replaced,
            canonical=status.canonical,
            integrated=terminal.integrated,
            shellStderrTty=status.shell_stderr_tty,
        )
    return unstructure(TtyStatusResult(status=wire))


async def _job_mark(session: Connection, params: Any) -> Any:
    p = structure(params, ChannelParams)
    jobs = _terminal(session, p.channel).jobs
    mark = jobs.mark() if jobs is not None else None
    wire = None
    if mark is not None:
        # Past the bound some children are left out of ``known``: the mark's tick
        # still keeps them out of "started since" (they started before it).
        known = tuple(sorted(mark.known))[:MAX_MARK_PIDS]
        wire = JobMarkWire(known=known, tick=mark.tick)
    return unstructure(JobMarkResult(mark=wire))


async def _jobs(session: Connection, params: Any) -> Any:
    p = structure(params, JobsParams)
    terminal = _terminal(session, p.channel)
    found = terminal.jobs
    jobs = await found.settled_since(_mark(p.since)) if found is not None else {}
    listed = sorted(jobs.items())
    return unstructure(
        JobsResult(
            jobs=tuple(
                JobWire(pid=pid, commandLine=line) for pid, line in listed[:MAX_JOBS_REPORTED]
            ),
            truncated=len(listed) > MAX_JOBS_REPORTED,
        )
    )


async def _signal(session: Connection, params: Any) -> Any:
    p = structure(params, SignalParams)
    if p.signal not in SIGNALS:
        raise Fail(
            ErrorCode.INVALID_PARAMS,
            f"signal must be one of {', '.join(SIGNALS)}",
            {"path": "$.params.signal"},
        )
    terminal = _terminal(session, p.channel)
    audit = session.server.audit
    try:
        _check_may_signal(session, terminal)
    except Fail as refused:
        if audit is not None:
            audit.event(
                "signal",
                terminal=terminal.uri,
                by=session.client_id,
                signal=p.signal,
                error=refused.message,
            )
        raise
    mark = _mark(p.since)
    groups, shell_foreground = await terminal.signal_command(signal.Signals[p.signal], mark)
    if audit is not None:
        audit.event(
            "signal",
            terminal=terminal.uri,
            by=session.client_id,
            signal=p.signal,
            groups=sorted(groups),
            shellForeground=shell_foreground,
        )
    return unstructure(
        SignalResult(
            groups=tuple(sorted(groups))[:MAX_JOBS_REPORTED], shellForeground=shell_foreground
        )
    )


async def _exec(session: Connection, params: Any) -> Any:
    audit = session.server.audit
    if audit is None:
        return await _start_exec(session, params)
    p = structure(params, ExecParams)  # (malformed params are answered, not audited)
    line = shlex.join(p.argv) if p.argv is not None else p.command or ""
    fields: dict[str, Any] = {
        "by": session.client_id,
        "command": line[:MAX_AUDIT_TEXT],
        "cwd": p.cwd,
        "env": sorted(p.env) if p.env else None,  # the names, never the values
    }
    actor = ACTOR.set(session.client_id)  # (its terminal is this client's, not in-process)
    try:
        result = await _start_exec(session, params)
    except Fail as refused:
        audit.event("exec", terminal=p.channel, **fields, error=refused.message)
        raise
    finally:
        ACTOR.reset(actor)
    audit.event("exec", terminal=result["channel"], **fields)
    return result


async def _start_exec(session: Connection, params: Any) -> Any:
    p = structure(params, ExecParams)
    problem = exec_problem(p)
    if problem is not None:
        where, why = problem
        path = f"$.params.{where}"
        raise Fail(ErrorCode.INVALID_PARAMS, f"invalid params: {why} at {path}", {"path": path})
    await check_room(session)
    server = session.server
    kwargs: dict[str, Any] = {"head_bytes": p.headBytes, "tail_bytes": p.tailBytes}
    server.creating += 1
    try:
        started = await start_exec(
            session.host,
            p.argv if p.argv is not None else p.command or "",
            uri=p.channel,
            cwd=p.cwd,
            env=p.env,
            timeout=p.timeout,
            # Held by its starter: another client cannot claim it, and so cannot keep
            # the starter from disposing it (its way to stop the command).
            claim=ClientClaim(clientId=session.client_id or ""),
            **{k: v for k, v in kwargs.items() if v is not None},
        )
    except TerminalExists as exc:
        raise Fail(ErrorCode.ALREADY_EXISTS, str(exc)[:QUOTE_LIMIT]) from None
    except DisposedWhileStarting as exc:  # (a dispose raced the start: nothing was wrong)
        raise Fail(ErrorCode.NOT_FOUND, str(exc)) from None
    except (SpawnError, ValueError, OSError) as exc:
        if (fail := out_of_resources(exc)) is not None:
            raise fail from None  # (as createTerminal: out of fds, processes, memory)
        if isinstance(exc, OSError):
            raise
        raise Fail(ErrorCode.INVALID_PARAMS, str(exc)[:QUOTE_LIMIT], {"path": "$.params"}) from None
    finally:
        server.creating -= 1
    unfetched = server.unfetched_execs
    unfetched.intersection_update([uri for uri in unfetched if find_exec(session.host, uri)])
    unfetched.add(started.uri)
    return unstructure(ExecResult(channel=started.uri))


async def _exec_result(session: Connection, params: Any) -> Any:
    p = structure(params, ChannelParams)
    started = find_exec(session.host, p.channel)
    if started is None:
        quoted = p.channel[:QUOTE_LIMIT]
        raise Fail(
            ErrorCode.NOT_FOUND,
            f"no exec {quoted!r}: not started by {EXEC}, or no longer kept",
            {"path": "$.params.channel"},
        )
    with trio.move_on_after(EXEC_RESULT_WAIT):
        await started.done.wait()
    if started.result is None:
        raise Fail(EXEC_RUNNING, "the exec is still running: wait for terminal/exited")
    session.server.unfetched_execs.discard(started.uri)
    return started.result.to_json()


#: The extension's handlers, merged into the session's request table.
PROCESS_REQUESTS: Final[dict[str, Callable[[Connection, Any], Awaitable[Any]]]] = {
    TTY_STATUS: _tty_status,
    JOB_MARK: _job_mark,
    JOBS: _jobs,
    SIGNAL: _signal,
    EXEC: _exec,
    EXEC_RESULT: _exec_result,
}
