"""Client records: what a reconnecting client may resume.

Why: AHP's ``reconnect`` lets a client that lost its socket resume its
subscriptions from a global cursor. The server must remember, per ``clientId``,
which channels it followed and the ``fromSeq`` of the snapshot it was given for
each one (envelopes at or below it are already in that client's state and must
never be replayed). Records outlive their connection for a grace period and
are bounded in number; the oldest disconnected ones are forgotten first.

A forgotten client is gone for good (it can only ``initialize`` afresh), so
what it held must be let go: the ids of forgotten records are kept until the
server takes them (:meth:`ClientRegistry.take_forgotten`) and releases their
terminal claims.
"""

from __future__ import annotations

import time
from typing import Final

import attrs

__all__ = ["CLIENT_GRACE", "MAX_CLIENT_RECORDS", "ClientRecord", "ClientRegistry"]

#: How long a disconnected client can still ``reconnect`` (seconds).
CLIENT_GRACE: Final = 300.0
#: Client records kept at most (connected ones are never evicted).
MAX_CLIENT_RECORDS: Final = 4096


@attrs.define
class ClientRecord:
    client_id: str
    protocol_version: str
    #: channel -> fromSeq of the last snapshot this client was given for it.
    snapshot_seq: dict[str, int] = attrs.field(factory=dict)
    connections: int = 0
    disconnected_at: float | None = None
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

    def __len__(self) -> int:
        return len(self._records)

    def connect(
        self, client_id: str, protocol_version: str, *, read_only: bool = False
    ) -> ClientRecord:
        """A client initialised: a fresh record (any older one is replaced)."""
        self._expire()
        record = ClientRecord(
            client_id=client_id, protocol_version=protocol_version, read_only=read_only
        )
        record.connections = 1
        self._records[client_id] = record
        return record

    def get(self, client_id: str) -> ClientRecord | None:
        """The record of ``client_id`` if it is still known (connected or in its grace)."""
        self._expire_stale()
        return self._records.get(client_id)

    def resume(self, client_id: str) -> ClientRecord | None:
        """A client reconnected: its record, or None if unknown or expired."""
        self._expire()
        record = self._records.get(client_id)
        if record is not None:
            record.connections += 1
            record.disconnected_at = None
        return record

    def disconnect(self, record: ClientRecord) -> None:
        record.connections -= 1
        if record.connections <= 0:
            record.connections = 0
            record.disconnected_at = time.monotonic()

    def take_forgotten(self) -> list[str]:
        """Ids of clients forgotten since the last call that are still unknown now."""
        self._expire_stale()
        gone = [cid for cid in dict.fromkeys(self._forgotten) if cid not in self._records]
        self._forgotten.clear()
        return gone

    def _expire(self) -> None:
        """Forget records past their grace, then the oldest idle ones to make room for one."""
        self._expire_stale()
        if len(self._records) >= self.max_records:
            idle = sorted(
                (r.disconnected_at, cid)
                for cid, r in self._records.items()
                if r.disconnected_at is not None
            )
            for _, cid in idle[: len(self._records) - self.max_records + 1]:
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
