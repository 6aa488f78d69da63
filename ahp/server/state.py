"""What every connection of one server shares, and the server-wide bounds.

Why a module of its own: the transport, the drain, the CLI and every request
handler read the same :class:`ServerState` (the host, the client records, the
response pool, the audit log); keeping it apart from the connection's protocol
logic lets each of them import it without importing that logic.
"""

from __future__ import annotations

import os
from typing import Any, Final, Protocol

import attrs
import trio

from ahp.engine import Host, Outbox
from ahp.engine.outbox import ResponsePool
from ahp.protocol.uri import path_to_file_uri
from ahp.record.audit import AuditLog
from ahp.record.recorder import Recorder
from ahp.record.wirelog import WireLog
from ahp.server.clients import ClientRegistry
from ahp.server.inbound import InboundBudget

__all__ = [
    "DEFAULT_MAX_TERMINALS",
    "INBOUND_BUDGET",
    "RESPONSE_POOL",
    "Closable",
    "ServerState",
]

#: Terminals one server hosts at most by default (``serve --max-terminals``): each holds
#: a process, about 3 of the server's fds (pty or pipes) and up to its scrollback.
DEFAULT_MAX_TERMINALS: Final = 256
#: Bytes of answers every connection together may have queued or in writing before the
#: next request of anyone waits (issue 25: 8 silent clients each asking for a 9 MB
#: snapshot held 284 MB). Twice the largest snapshot (4 Mi characters of escape-dense
#: output, ~9-15 MB of JSON), so two big answers are built at a time at most beyond it.
RESPONSE_POOL: Final = 32 * 1024 * 1024
#: Memory all connections together may hold in inbound messages still being assembled
#: (fragments, a large frame arriving): four messages at the size bound (issue 25: 30
#: connections each holding an unfinished 8 MiB frame held 302 MB). Who is closed when
#: it is short: :class:`~ahp.server.inbound.InboundBudget`.
INBOUND_BUDGET: Final = 32 * 1024 * 1024


class Closable(Protocol):
    """An open connection, as the drain's goodbye sees it (a
    :class:`~ahp.server.session.Session`)."""

    #: Set to close the connection after its queued frames (code, reason).
    close_request: tuple[int, str] | None
    #: Its answers and envelopes; closed, the writer sends what is queued, then closes.
    outbox: Outbox


@attrs.define
class ServerState:
    """What every connection of one server shares."""

    host: Host
    clients: ClientRegistry = attrs.field(factory=ClientRegistry)
    #: Where new terminals start when not told (the host's default, else the home directory).
    default_directory: str = attrs.field(
        default=attrs.Factory(
            lambda self: path_to_file_uri(self.host.cwd or os.path.expanduser("~")),
            takes_self=True,
        )
    )
    #: Terminals hosted at most; ``createTerminal`` past it fails with
    #: :data:`~ahp.server.errors.SERVER_LIMIT`.
    max_terminals: int = DEFAULT_MAX_TERMINALS
    #: ``createTerminal`` requests between the limit check and the terminal's registration.
    creating: int = 0
    #: The authenticated connections' budget, once the transport runs (figures, tests).
    connections: Any = None
    #: The places of plain answers sent after the unauthenticated phase
    #: (:class:`ahp.server.admission.PlainSends`), once the transport runs (tests).
    plain_sends: Any = None
    #: Counters: protocol errors answered (figures for tests).
    errors: int = 0
    #: Responses (snapshots above all) queued or being written by every connection
    #: together (:data:`RESPONSE_POOL`): past it, requests wait and silent holders go
    #: (and, while someone waits, slow ones: :data:`ahp.server.writer.POOL_DRAIN_TIME`).
    responses: ResponsePool = attrs.field(factory=lambda: ResponsePool(RESPONSE_POOL))
    #: Inbound messages still being assembled, every connection together
    #: (:data:`INBOUND_BUDGET`): past it, connections that rank above the sender give
    #: way (read-only ones, then the largest), else the sender; closed with 1013.
    inbound: InboundBudget = attrs.field(factory=lambda: InboundBudget(INBOUND_BUDGET))
    #: Where privileged events are logged (``serve --audit-log``), if anywhere.
    audit: AuditLog | None = None
    #: Where every message is logged (``serve --wire-log``), if anywhere.
    wire_log: WireLog | None = None
    #: The live recorders by terminal URI (``serve --record``; finished ones leave).
    recorders: dict[str, Recorder] = attrs.field(factory=dict)
    #: True once the server stops taking terminals (shutting down): ``/readyz``
    #: answers 503 and ``createTerminal`` is refused (:mod:`ahp.server.drain`).
    draining: bool = False
    #: The connections open now (registered by the transport, for the drain's goodbye);
    #: ``sessions_changed`` is woken when one leaves.
    sessions: set[Closable] = attrs.field(factory=set)
    sessions_changed: trio.lowlevel.ParkingLot = attrs.field(factory=trio.lowlevel.ParkingLot)
    #: Set by the drain's goodbye: every connection, and every new one, is closed with
    #: this (code, reason).
    going_away: tuple[int, str] | None = None
    #: URIs of the ``x-ahp-terminals/exec`` commands whose result no client has fetched
    #: yet (a drain gives those that finish a moment to be fetched; pruned of execs no
    #: longer kept at every start, so at most the kept and the running ones).
    unfetched_execs: set[str] = attrs.field(factory=set)

    @property
    def holder_only_input(self) -> bool:
        """Input and signals only from the claim's holder: the host's setting."""
        return self.host.holder_only_input

    @holder_only_input.setter
    def holder_only_input(self, value: bool) -> None:
        self.host.holder_only_input = value
