"""Client records: what a reconnecting client may resume.

Why: AHP's ``reconnect`` lets a client that lost its socket resume its
subscriptions from a global cursor. The server must remember, per ``clientId``,
which channels it followed and the ``fromSeq`` of the snapshot it was given for
each one (envelopes at or below it are already in that client's state and must
never be replayed). Records outlive their connection for a grace period and
are bounded in number; when the table is full, disconnected records are forgotten
to make room, read-only clients' first, then those without a resume token, then
bound ones, the oldest first within each. A read-only newcomer may displace only
read-only records: when none is left to forget it is refused
(:class:`RegistryFull`), so read-only connections cannot churn a full client's
record (its claims, its resume token) out of its grace.

A forgotten client is gone for good (it can only ``initialize`` afresh), so
what it held must be let go: the ids of forgotten records are kept until the
server takes them (:meth:`ClientRegistry.take_forgotten`) and releases their
terminal claims.

Identity: a record has at most one live connection, its :class:`Link` (the
session decides at ``initialize`` / ``reconnect`` who may take a live or a
bound id: :func:`ahp.server.identity.take_identity`). A record also has
a *resume token* (:attr:`ClientRecord.secret`), handed to a client that asks
for one at ``initialize`` and proof, later, that a connection is that client;
a record whose client asked is *bound*: only the token resumes it.
"""

from __future__ import annotations

import secrets
import time
from typing import Final, Protocol

import attrs

__all__ = [
    "CLIENT_GRACE",
    "MAX_CLIENT_RECORDS",
    "ClientRecord",
    "ClientRegistry",
    "Link",
    "RegistryFull",
]

#: How long a disconnected client can still ``reconnect`` (seconds).
CLIENT_GRACE: Final = 300.0
#: Client records kept at most (connected ones are never evicted).
MAX_CLIENT_RECORDS: Final = 4096
#: Random bytes in a resume token (sent as URL-safe base64: 32 characters).
RESUME_TOKEN_BYTES: Final = 24


class RegistryFull(Exception):
    """No record can be made: every record the newcomer may displace is live (a
    read-only newcomer may displace only disconnected read-only records)."""


class Link(Protocol):
    """A record's live connection, as the session sees it (the transport implements it)."""

    async def alive(self, timeout: float) -> bool:
        """Whether the peer proves it is there (answers a ping) within ``timeout`` s."""
        ...

    def evict(self, reason: str) -> None:
        """Stop acting for this connection at once and close it with ``reason``."""
        ...


@attrs.define
class ClientRecord:
    client_id: str
    protocol_version: str
    #: channel -> fromSeq of the last snapshot this client was given for it.
    snapshot_seq: dict[str, int] = attrs.field(factory=dict)
    #: channel -> the generation of the terminal that snapshot was of (0: the root).
    snapshot_of: dict[str, int] = attrs.field(factory=dict)
    #: Live connections: 0 or 1 (one live connection per clientId).
    connections: int = 0
    disconnected_at: float | None = None
    #: The live connection (None while disconnected, or for a transport without one).
    link: Link | None = None
    #: The resume token: a connection presenting it is this client.
    secret: str = attrs.field(factory=lambda: secrets.token_urlsafe(RESUME_TOKEN_BYTES))
    #: The client asked for a token: only a connection presenting it takes this id.
    bound: bool = False
    #: Admitted with the read-only token (such a client may not take a full one's id).
    read_only: bool = False


class ClientRegistry:
    """``clientId`` -> :class:`ClientRecord`, with grace-period expiry."""

    def __init__(
        self, *, grace: float = CLIENT_GRACE, max_records: int = MAX_CLIENT_RECORDS
    ) -> None:
        self.grace = grace
        self.max_records = max_records
        self._records: dict[str, ClientRecord] = {}
        #: Ids forgotten since the last :meth:`take_forgotten` (at most one entry per
        #: record that existed, so bounded by ``max_records`` per call in between).
        self._forgotten: list[str] = []
        #: Ids whose live connection is being pinged by a newcomer (at most one claim
        #: probes an id at a time; bounded by the connections).
        self.probing: set[str] = set()

    def __len__(self) -> int:
        return len(self._records)

    def get(self, client_id: str) -> ClientRecord | None:
        """The record of ``client_id`` (live or within its grace), if any."""
        self._expire_stale()
        return self._records.get(client_id)

    def connect(
        self,
        client_id: str,
        protocol_version: str,
        link: Link | None = None,
        *,
        bound: bool = False,
        read_only: bool = False,
    ) -> ClientRecord:
        """A client initialised: a fresh record (any older one is replaced), live on
        ``link``; ``bound``: only its token resumes it.

        Raises:
            RegistryFull: the table is full and nothing the newcomer may displace is
                disconnected (see the module docstring).
        """
        self._expire(client_id, read_only=read_only)
        record = ClientRecord(
            client_id=client_id,
            protocol_version=protocol_version,
            link=link,
            bound=bound,
            read_only=read_only,
        )
        record.connections = 1
        self._records[client_id] = record
        return record

    def resume(self, client_id: str, link: Link | None = None) -> ClientRecord | None:
        """A client reconnected on ``link``: its record, or None if unknown or expired."""
        self._expire_stale()
        record = self._records.get(client_id)
        if record is not None:
            record.connections = 1
            record.link = link
            record.disconnected_at = None
        return record

    def disconnect(
        self, record: ClientRecord, link: Link | None = None, *, left: bool = False
    ) -> None:
        """``link`` (or, given none, the record's connection) is gone; ``left``: its
        client closed it on purpose (a close frame), so no reconnect needs its token
        any more and the record is unbound (a restarted client may take its id again
        without it). A connection that was replaced by a newer one changes nothing."""
        if link is not None and record.link is not link:
            return
        record.connections = 0
        record.link = None
        record.disconnected_at = time.monotonic()
        if left:
            record.bound = False

    def forget(self, client_id: str) -> None:
        """Forget ``client_id``'s record now (a full-access client takes an id only
        read-only connections held: :func:`ahp.server.identity.take_identity`). Its live
        connection, if any, is the caller's to close."""
        if self._records.pop(client_id, None) is not None:
            self._forgotten.append(client_id)

    def take_forgotten(self) -> list[str]:
        """Ids of clients forgotten since the last call that are still unknown now."""
        self._expire_stale()
        gone = [cid for cid in dict.fromkeys(self._forgotten) if cid not in self._records]
        self._forgotten.clear()
        return gone

    def _expire(self, client_id: str, *, read_only: bool) -> None:
        """Forget records past their grace, then make room for ``client_id``'s: idle
        read-only records first, then unbound, then bound ones, the oldest first; a
        ``read_only`` newcomer only read-only ones (:class:`RegistryFull` if too few)."""
        self._expire_stale()
        excess = len(self._records) - self.max_records + (client_id not in self._records)
        if excess <= 0:
            return
        idle = sorted(
            (not r.read_only, r.bound, r.disconnected_at, cid)
            for cid, r in self._records.items()
            if r.disconnected_at is not None and (r.read_only or not read_only)
        )
        if len(idle) < excess:
            raise RegistryFull(
                f"{len(self._records)} clients are known to this server (at most "
                f"{self.max_records}), and none "
                + ("of the read-only ones " if read_only else "")
                + "is disconnected: try again later"
            )
        for *_, cid in idle[:excess]:
            del self._records[cid]
            self._forgotten.append(cid)

    def _expire_stale(self) -> None:
        now = time.monotonic()
        stale = [
            cid
            for cid, r in self._records.items()
            if r.disconnected_at is not None and now - r.disconnected_at > self.grace
        ]
        for cid in stale:
            del self._records[cid]
        self._forgotten.extend(stale)
