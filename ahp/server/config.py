"""The WebSocket transport's settings: :class:`ServerConfig` and its defaults.

Why a module of its own: the settings are read by each part of the transport — the
gate that admits an upgrade (:mod:`ahp.server.gate`), the plain answers on the same
port (:mod:`ahp.server.plain`), the connections themselves
(:mod:`ahp.server.websocket`) — and built by the server (:mod:`ahp.server.app`);
none of them owns them. Data only: no I/O.
"""

from __future__ import annotations

from typing import Final

import attrs

from ahp.server.http import Routes
from ahp.server.upgrade import HANDSHAKE_TIMEOUT
from ahp.server.wsconn import MESSAGE_DEADLINE

__all__ = ["MAX_MESSAGE_SIZE", "OUTBOX_BYTES", "STALL_GRACE", "ServerConfig"]

#: Largest inbound message accepted; larger ones close the connection with 1009. It
#: bounds how long one frame holds the event loop (reading, UTF-8 and JSON decoding cost
#: ~5 ms per MiB here): at 16 MiB, frames at the bounds delayed another client's echo by
#: up to ~60 ms; at 8 MiB, half that (benchmarks/bench_edges.py, docs/threat-model.md).
MAX_MESSAGE_SIZE: Final = 8 * 1024 * 1024
#: Outbound bytes queued per connection before it is closed with 1013.
OUTBOX_BYTES: Final = 16 * 1024 * 1024
#: Seconds an overflowed connection gets to finish the write in flight and the close
#: handshake (1013); a client that reads nothing at all is then dropped without one.
STALL_GRACE: Final = 1.0


@attrs.frozen
class ServerConfig:
    token: str | None
    allow_origins: frozenset[str] = frozenset()
    #: Names accepted in ``Host`` when bound to loopback (empty: no check, e.g. Unix socket).
    allowed_hosts: frozenset[str] = frozenset()
    max_message_size: int = MAX_MESSAGE_SIZE
    #: Seconds one inbound message may take (:data:`ahp.server.wsconn.MESSAGE_DEADLINE`).
    message_deadline: float = MESSAGE_DEADLINE
    outbox_bytes: int = OUTBOX_BYTES
    stall_grace: float = STALL_GRACE
    #: Seconds a peer gets, from its connect, to be authenticated and answered (the
    #: upgrade request, the checks, the 101 or the refusal) before it is dropped.
    handshake_timeout: float = HANDSHAKE_TIMEOUT
    #: Unauthenticated connections held at most (None: from ``RLIMIT_NOFILE``, see
    #: :func:`ahp.server.admission.pending_limit`); the oldest is dropped for a new one.
    max_pending: int | None = None
    #: Authenticated connections held at most (None: from ``RLIMIT_NOFILE``, see
    #: :func:`ahp.server.admission.connection_limit`), and from one peer address (None:
    #: half of those); past either, the longest-idle one is closed (BUDGET_CLOSE).
    max_connections: int | None = None
    max_connections_per_peer: int | None = None
    #: Plain answers (the page, its files) sent at once after the unauthenticated phase
    #: (None: from ``RLIMIT_NOFILE``, see :func:`ahp.server.admission.plain_send_limit`),
    #: and from one peer address (None: half of those); past either, an answer is sent
    #: within the phase, under its deadline.
    max_plain_sends: int | None = None
    max_plain_sends_per_peer: int | None = None
    #: Plain HTTP requests (no upgrade) on the same port: health probes, pages
    #: (:mod:`ahp.server.http`); None answers every one 404.
    routes: Routes | None = None
    #: A second token that admits read-only connections (watch only: every dispatch,
    #: create, dispose and process request is refused; see :class:`Session`).
    read_token: str | None = None
    #: The server's own page origins (``http://127.0.0.1:PORT`` …), accepted in
    #: ``Origin`` besides ``allow_origins``: the viewer page's WebSocket. Only exact
    #: loopback origins of this port are put here, and the Host check still applies, so
    #: a rebound name (``http://evil.example:PORT``) is refused as before.
    own_origins: frozenset[str] = frozenset()
