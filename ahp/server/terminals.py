"""The catalogue requests: ``createTerminal``, ``disposeTerminal`` and ``listSessions``.

Why a module of its own: creating a terminal is where a client's input reaches
the machine (a URI, a working directory, a size, a claim) and where the
server's limits are met (``serve --max-terminals``, file descriptors, the
drain), so the checks of that input and the mapping of those limits onto
JSON-RPC errors are kept together, with their audit lines.

Cancellation: ``createTerminal`` waits for the spawn (cancelled with the
connection, the host reaps what it started); :attr:`ServerState.creating
<ahp.server.state.ServerState.creating>` counts it until then, in a ``finally``.
"""

from __future__ import annotations

import socket
from typing import Any, NoReturn

from ahp.engine import TerminalExists, TerminalNotFound
from ahp.engine.exec import release_kept
from ahp.protocol.codec import ProtocolError, structure, unstructure
from ahp.protocol.commands import (
    ChannelParams,
    CreateTerminalParams,
    ListSessionsParams,
    ListSessionsResult,
)
from ahp.protocol.dialect import result_json
from ahp.protocol.jsonrpc import ErrorCode
from ahp.protocol.state import TERMINAL_SCHEME, URI_CONTROLS, TerminalClaim
from ahp.protocol.uri import local_file_uri_to_path
from ahp.pty import SpawnError
from ahp.pty.spec import DisposedWhileStarting
from ahp.record.audit import ACTOR
from ahp.reducers.core import MAX_DIMENSION, MAX_URI, claim_problem
from ahp.reducers.policy import Change
from ahp.server.connection import Connection
from ahp.server.errors import SERVER_LIMIT, Fail, out_of_resources, short

__all__ = ["check_room", "create_terminal", "dispose_terminal", "list_sessions"]


def _check_claim(claim: TerminalClaim, path: str) -> None:
    problem = claim_problem(claim)
    if problem is not None:
        field, message = problem
        raise Fail(ErrorCode.INVALID_PARAMS, message, {"path": f"{path}.{field}"})


def _check_cwd(cwd: str) -> None:
    """``createTerminal.cwd``: an absolute path, or a ``file:`` URI of this machine."""

    def fail(why: str) -> NoReturn:
        raise Fail(ErrorCode.INVALID_PARAMS, f"cwd {why}", {"path": "$.params.cwd"})

    if cwd.startswith("/"):
        return
    if not cwd.startswith("file:"):
        fail("must be a file:// URI or an absolute path")
    try:
        local_file_uri_to_path(cwd, socket.gethostname())
    except ValueError as exc:
        fail(f"is not a usable file:// URI: {short(str(exc))}")


async def check_room(conn: Connection) -> None:
    """:data:`~ahp.server.errors.SERVER_LIMIT` unless the server takes one more terminal
    now: it is not draining, and the terminals it hosts and those being created are
    fewer than ``serve --max-terminals`` (the caller counts its own in
    :attr:`ServerState.creating <ahp.server.state.ServerState.creating>` next). At the
    limit, finished exec terminals still kept for their results are disposed first,
    oldest first (:func:`ahp.engine.exec.release_kept`): they are no work, and with a
    small limit they would refuse every later request."""
    server = conn.server
    if server.draining:
        raise Fail(SERVER_LIMIT, "draining", {"reason": "the server is shutting down"})
    while len(conn.host.terminals) + server.creating >= server.max_terminals:
        if await release_kept(conn.host):
            continue
        raise Fail(
            SERVER_LIMIT,
            f"terminal limit reached: this server hosts at most {server.max_terminals} "
            "terminals (serve --max-terminals); dispose one first",
            {"limit": server.max_terminals},
        )


async def create_terminal(conn: Connection, params: Any) -> None:
    audit = conn.server.audit
    if audit is None:
        await _create(conn, structure(params, CreateTerminalParams))
        return
    try:
        p = structure(params, CreateTerminalParams)
    except ProtocolError as exc:
        # Malformed (a claim missing, a field of the wrong type): refused, audited from
        # the params as sent.
        raw = params if isinstance(params, dict) else {}
        audit.event(
            "terminal.created",
            terminal=raw.get("channel"),
            by=conn.client_id,
            name=raw.get("name"),
            cwd=raw.get("cwd"),
            claim=raw.get("claim"),
            error=f"invalid params: {exc.message}",
        )
        raise
    fields = {
        "terminal": p.channel,
        "by": conn.client_id,
        "name": p.name,
        "cwd": p.cwd,
        "claim": unstructure(p.claim, TerminalClaim) if p.claim is not None else None,
    }
    actor = ACTOR.set(conn.client_id)
    try:
        await _create(conn, p)
    except Fail as fail:
        audit.event("terminal.created", **fields, error=fail.message)
        raise
    finally:
        ACTOR.reset(actor)
    audit.event("terminal.created", **fields)


async def _create(conn: Connection, p: CreateTerminalParams) -> None:
    if not p.channel.startswith(TERMINAL_SCHEME) or len(p.channel) <= len(TERMINAL_SCHEME):
        raise Fail(
            ErrorCode.INVALID_PARAMS,
            f"terminal channels use the {TERMINAL_SCHEME} scheme",
            {"path": "$.params.channel"},
        )
    if len(p.channel) > MAX_URI:
        raise Fail(
            ErrorCode.INVALID_PARAMS,
            f"a terminal URI is at most {MAX_URI} characters",
            {"path": "$.params.channel", "limit": MAX_URI},
        )
    _check_claim(p.claim, "$.params.claim")
    if URI_CONTROLS.search(p.channel):
        raise Fail(
            ErrorCode.INVALID_PARAMS,
            "a terminal URI must not contain control characters",
            {"path": "$.params.channel"},
        )
    for name, value in (("cols", p.cols), ("rows", p.rows)):
        if value is not None and not 1 <= value <= MAX_DIMENSION:
            raise Fail(
                ErrorCode.INVALID_PARAMS,
                f"{name} must be between 1 and {MAX_DIMENSION}",
                {"path": f"$.params.{name}"},
            )
    if p.cwd is not None:
        _check_cwd(p.cwd)
    await check_room(conn)
    server = conn.server
    server.creating += 1
    try:
        await conn.host.create_terminal(
            p.channel,
            claim=p.claim,
            name=p.name,
            cwd=p.cwd,
            cols=p.cols or 80,
            rows=p.rows or 24,
        )
    except TerminalExists as exc:
        raise Fail(ErrorCode.ALREADY_EXISTS, short(str(exc))) from None
    except DisposedWhileStarting as exc:  # (a dispose raced the creation: nothing was wrong)
        raise Fail(ErrorCode.NOT_FOUND, str(exc)) from None
    except (SpawnError, OSError) as exc:
        if (fail := out_of_resources(exc)) is not None:
            raise fail from None
        if isinstance(exc, OSError):
            raise
        raise Fail(ErrorCode.INVALID_PARAMS, short(str(exc)), {"path": "$.params"}) from None
    finally:
        server.creating -= 1


async def dispose_terminal(conn: Connection, params: Any) -> None:
    p = structure(params, ChannelParams)
    audit = conn.server.audit
    if p.channel in conn.host:
        # The policy table's dispose row, for this connection's own identity.
        why = conn.host.get(p.channel).refusal(Change.DISPOSE, conn.client_id)
        if why is not None:
            if audit is not None:
                audit.event("terminal.disposed", terminal=p.channel, by=conn.client_id, error=why)
            raise Fail(ErrorCode.PERMISSION_DENIED, why)
    actor = ACTOR.set(conn.client_id) if audit is not None else None
    try:
        await conn.host.dispose(p.channel)
    except TerminalNotFound:
        message = f"no terminal {short(p.channel)!r}"
        if audit is not None:
            audit.event("terminal.disposed", terminal=p.channel, by=conn.client_id, error=message)
        raise Fail(ErrorCode.NOT_FOUND, message) from None
    finally:
        if actor is not None:
            ACTOR.reset(actor)
    conn.subscriptions.discard(p.channel)
    if audit is not None:
        audit.event("terminal.disposed", terminal=p.channel, by=conn.client_id)


async def list_sessions(conn: Connection, params: Any) -> Any:
    p = structure(params, ListSessionsParams)
    if p.cursor is not None:
        # This host has no sessions, so it never hands out a cursor to come back with.
        raise Fail(ErrorCode.INVALID_PARAMS, "unknown cursor", {"path": "$.params.cursor"})
    return result_json(ListSessionsResult(items=()), conn.dialect)
