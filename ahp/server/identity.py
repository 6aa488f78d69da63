"""Which ``clientId`` a connection may act as: the identity rules of the handshake.

Why a module of its own: every claim and input rule is decided on the id a
connection was granted here, so the rules that grant it (one live connection per
id, resume tokens, the liveness probe, read-only ids) are kept together and
apart from the handshake's answers (:mod:`ahp.server.handshake`).

Cancellation: :func:`take_identity` may wait up to :data:`PROBE_TIMEOUT` for
another connection's ping; cancelled, it ends the probe (the id is no longer
marked as probing) and grants nothing.
"""

from __future__ import annotations

import hmac
import logging
from typing import Any, Final

from ahp.protocol.actions import TerminalClaimed
from ahp.protocol.codec import unstructure
from ahp.protocol.commands import RESUME_META, ResumeTokenError, resume_token
from ahp.protocol.jsonrpc import ErrorCode
from ahp.protocol.state import ClientClaim, TerminalClaim
from ahp.reducers.core import MAX_CLIENT_ID
from ahp.server.connection import REPLACED_CLOSE, Connection
from ahp.server.errors import Fail, short

__all__ = [
    "PROBE_TIMEOUT",
    "READ_ONLY_DISPLACED",
    "check_client_id",
    "check_read_only_id",
    "release_forgotten_claims",
    "take_identity",
    "token_of",
]

log = logging.getLogger("ahp.server")

#: Seconds a live connection gets to answer a ping when another connection claims its
#: ``clientId`` without its resume token: one that answers keeps the id (the newcomer is
#: refused); one that does not is taken for dead (a dropped network, a client that
#: reconnects before this side noticed) and replaced by the newcomer.
PROBE_TIMEOUT: Final = 3.0
#: Why a read-only connection is closed when a full-access client takes its id.
READ_ONLY_DISPLACED: Final = "clientId taken by a client with full access"


def token_of(params: Any) -> str | None:
    """The resume token of an initialize / reconnect request (``-32602`` if malformed)."""
    try:
        return resume_token(params)
    except ResumeTokenError as exc:
        path = f"$.params._meta[{RESUME_META!r}]"
        message = f"invalid params: {exc} at {path}"
        raise Fail(ErrorCode.INVALID_PARAMS, message, {"path": path}) from None


def check_client_id(client_id: str) -> None:
    """``-32602`` past :data:`~ahp.reducers.core.MAX_CLIENT_ID` (issue 25: the id is
    repeated in every echo of the client's actions and in its claims)."""
    if len(client_id) > MAX_CLIENT_ID:
        raise Fail(
            ErrorCode.INVALID_PARAMS,
            f"clientId is longer than {MAX_CLIENT_ID} characters",
            {"path": "$.params.clientId", "limit": MAX_CLIENT_ID},
        )


def check_read_only_id(conn: Connection, client_id: str) -> None:
    """A read-only connection may not take the id (and so the record, the replay
    cursor and the broadcasts) of a client admitted with the full token. (The other
    way round, a full-access client takes an id a read-only one holds:
    :func:`take_identity`.)"""
    if not conn.read_only:
        return
    known = conn.server.clients.get(client_id)
    if known is not None and not known.read_only:
        raise Fail(
            ErrorCode.PERMISSION_DENIED,
            f"client id {short(client_id)!r} belongs to a client with full access",
        )


async def take_identity(conn: Connection, client_id: str, token: str | None) -> None:
    """Decide whether ``conn`` may act as ``client_id``; raise :class:`Fail` if not.

    One live connection per ``clientId``:

    * the record is a read-only client's and ``conn`` has full access: granted
      whatever the record's state (live, bound); the read-only connection, if live,
      is closed (1008, :data:`READ_ONLY_DISPLACED`) and the record forgotten, so the
      newcomer starts afresh (an ``initialize`` gets a new record; a ``reconnect``
      finds none, ``-32008``, as it would have without the read-only holder: a full
      client's own record is never read-only). A read-only token cannot keep a full
      client from its id;
    * the record's resume token presented: granted; a live connection of the id is
      replaced (closed with :data:`~ahp.server.connection.REPLACED_CLOSE`);
    * a wrong token, or none for a *bound* record (its client asked for a token):
      refused, ``-32009``;
    * no token, the id unknown or its record disconnected: granted (the protocol's
      ``reconnect`` carries no other proof);
    * no token, the id live: its connection is pinged; if it answers within
      :data:`PROBE_TIMEOUT` it keeps the id and this one is refused (``-32009``),
      else it is taken for dead and replaced. While one claim probes, another for
      the same id is refused.
    """
    clients = conn.server.clients
    record = clients.get(client_id)
    if record is None:
        return
    shown = short(client_id)
    if record.read_only and not conn.read_only:
        if record.link is not None and record.connections:
            record.link.evict(READ_ONLY_DISPLACED)
        clients.forget(client_id)
        log.info("client %s: a full-access client took the id from a read-only one", shown)
        return
    if token is not None and hmac.compare_digest(token.encode(), record.secret.encode()):
        if record.link is not None and record.connections:
            record.link.evict(REPLACED_CLOSE[1])
        return
    if token or record.bound:
        raise Fail(
            ErrorCode.PERMISSION_DENIED,
            f"clientId {shown!r} is bound to its resume token: present the token its "
            f"initialize returned (params._meta[{RESUME_META!r}]) or use another clientId",
        )
    if not record.connections:
        return
    if client_id in clients.probing:
        raise Fail(
            ErrorCode.PERMISSION_DENIED,
            f"another connection is claiming clientId {shown!r} now; try again later",
        )
    live = record.link
    clients.probing.add(client_id)
    try:
        answered = live is None or await live.alive(PROBE_TIMEOUT)
    finally:
        clients.probing.discard(client_id)
    if answered or clients.get(client_id) is not record or record.link is not live:
        raise Fail(
            ErrorCode.PERMISSION_DENIED,
            f"clientId {shown!r} is in use by a live connection (it answered a ping): "
            "one connection per clientId; use another clientId",
        )
    assert live is not None
    log.info("client %s: its connection did not answer a ping; replaced", shown)
    live.evict(REPLACED_CLOSE[1])


async def release_forgotten_claims(conn: Connection) -> None:
    """Unclaim terminals held by clients the server has forgotten (gone for good).

    Why: a client claim is held by a connected client; one whose holder left
    long ago would be listed forever and refuse every other client's claim.
    Run when a client connects (before its snapshots), so a catalogue is never
    older than the records it is read with.
    """
    gone = set(conn.server.clients.take_forgotten())
    if not gone:
        return
    for terminal in list(conn.host.terminals.values()):
        claim = terminal.state.claim
        if isinstance(claim, ClientClaim) and claim.clientId in gone:
            log.info("%s: released the claim of gone client %r", terminal.uri, claim.clientId)
            await terminal.dispatch(TerminalClaimed(claim=ClientClaim(clientId="")), wait=True)
            if (audit := conn.server.audit) is not None:
                audit.event(
                    "claim",
                    terminal=terminal.uri,
                    by=None,
                    claim=unstructure(terminal.state.claim, TerminalClaim),
                    previous=unstructure(claim, TerminalClaim),
                    accepted=True,
                    reason="the holder is gone",
                )
