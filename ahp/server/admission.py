"""Who gets a file descriptor before authenticating: the accept loop and its bounds.

Why: anyone who can reach the port can open connections and send their upgrade
one byte a second. Each such connection holds a file descriptor until its
handshake deadline; left unbounded, a thousand of them exhaust the process's
fds (``RLIMIT_NOFILE``), legitimate clients wait seconds to connect, opening a
terminal's pty fails with ``EMFILE``, and the accept loop logs a traceback every
100 ms. So, per server:

- **At most** :func:`pending_limit` **unauthenticated connections** (an eighth
  of the soft fd limit, between :data:`MIN_PENDING` and :data:`MAX_PENDING`:
  128 under the usual 1024). The rest of the fds stay in reserve for
  authenticated work: terminals (about 3 fds each, see ``--max-terminals``) and
  authenticated connections. When the limit is reached, a new connection evicts
  the *oldest* pending one: a slow peer cannot hold its place against a client
  that sends its upgrade at once, and an attacker cannot make the server refuse
  everyone (it would have to open the whole limit's worth of connections in the
  time a legitimate upgrade takes, about a millisecond on loopback).
- **A deadline for the whole unauthenticated phase** (upgrade request, checks,
  the answer): ``ServerConfig.handshake_timeout``.
- **An accept loop that backs off** when ``accept`` fails for lack of fds or
  memory (from :data:`ACCEPT_BACKOFF` doubling to :data:`ACCEPT_BACKOFF_MAX`
  seconds) instead of Trio's retry with a traceback every 100 ms.
- **Rate-limited log lines** (:class:`RateLimitedLog`) for everything a peer can
  cause before authenticating: at most one line a second per kind of event, with
  the count of lines left out.

A plain request (the viewer page, its files, a probe) leaves the pending ones once
it is read and answered: its answer is then sent after the phase, under a progress
rule (the client must take a piece of it every so often,
:mod:`ahp.server.plain`), so a page loads over a slow link, and under a flood of
half-sent requests, whatever the phase's deadline. Those sends hold fds past the
phase, so they have a bound of their own (:class:`PlainSends`): at most
:func:`plain_send_limit` at once (a sixteenth of the fds, 8 to 64: 64 under 1024),
half of them from one peer address; past it, an answer is sent as before, within the
unauthenticated phase (its deadline, and evictable as the oldest pending).

Authenticated connections have a budget too (issue 26: 1,012 idle authenticated
connections took every fd under ``ulimit -n 1024`` and a legitimate client's
``createTerminal`` failed): at most :func:`connection_limit` of them (a quarter
of the fds), and at most half of those from one peer address
(:class:`ConnectionBudget`). Past either bound, a connection of that group is
closed, with a reason, for the new one: a read-only one first (the read-only token
watches, it never displaces what acts), the one idle the longest (no frame received
for the longest time) among them; a read-only newcomer is itself refused when only
full-access connections fill the group (an agent waiting on a long command sends
nothing and would always be the idlest). The fds left (5/8, after the pending and
authenticated shares) stay for terminals, and a new full-access client always gets in.

Ownership and cancellation: :func:`serve_listener` runs until cancelled and starts
each connection's handler in the nursery it is given; a :class:`PendingConnections`
only holds the cancel scopes of pending handlers (cancelling one makes that handler
close its connection), never a connection itself.
"""

from __future__ import annotations

import errno
import logging
import os
import resource
from collections.abc import Awaitable, Callable
from typing import Any, Final

import trio

__all__ = [
    "CONNECTION_FD_SHARE",
    "MAX_CONNECTIONS",
    "MIN_CONNECTIONS",
    "PEER_SHARE",
    "BudgetTicket",
    "ConnectionBudget",
    "connection_limit",
    "ACCEPT_BACKOFF",
    "ACCEPT_BACKOFF_MAX",
    "MAX_PENDING",
    "MIN_PENDING",
    "MAX_PLAIN_SENDS",
    "MIN_PLAIN_SENDS",
    "PendingConnections",
    "PlainSends",
    "RateLimitedLog",
    "pending_limit",
    "plain_send_limit",
    "serve_listener",
]

#: Unauthenticated connections held at most, whatever the fd limit.
MAX_PENDING: Final = 128
#: ... and at least (a tiny fd limit still lets a few clients in).
MIN_PENDING: Final = 8
#: Share of the soft fd limit pending connections may hold (1/8).
PENDING_FD_SHARE: Final = 8
#: Share of the soft fd limit authenticated connections may hold (1/4: 256 under 1024).
CONNECTION_FD_SHARE: Final = 4
#: Authenticated connections held at most, whatever the fd limit ...
MAX_CONNECTIONS: Final = 4096
#: ... and at least.
MIN_CONNECTIONS: Final = 8
#: One peer address may hold at most 1/PEER_SHARE of the authenticated connections.
PEER_SHARE: Final = 2
#: Plain answers sent at once after the unauthenticated phase, at most ...
MAX_PLAIN_SENDS: Final = 64
#: ... and at least (whatever the fd limit).
MIN_PLAIN_SENDS: Final = 8
#: Share of the soft fd limit such sends may hold (1/16).
PLAIN_SEND_FD_SHARE: Final = 16
#: Seconds ``accept`` waits after running out of fds, doubling up to the maximum.
ACCEPT_BACKOFF: Final = 0.05
ACCEPT_BACKOFF_MAX: Final = 1.0
#: Seconds between two log lines of one kind caused by unauthenticated peers.
LOG_INTERVAL: Final = 1.0
#: ``accept`` errors that mean "out of something, try later" (Trio's list).
_ACCEPT_EXHAUSTED: Final = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS})


def pending_limit(nofile: int | None = None) -> int:
    """Unauthenticated connections allowed under a soft fd limit of ``nofile``
    (default: this process's ``RLIMIT_NOFILE``)."""
    if nofile is None:
        nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if nofile == resource.RLIM_INFINITY or nofile < 0:
        return MAX_PENDING
    return max(MIN_PENDING, min(MAX_PENDING, nofile // PENDING_FD_SHARE))


def connection_limit(nofile: int | None = None) -> int:
    """Authenticated connections allowed under a soft fd limit of ``nofile`` (default:
    this process's ``RLIMIT_NOFILE``)."""
    if nofile is None:
        nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if nofile == resource.RLIM_INFINITY or nofile < 0:
        return MAX_CONNECTIONS
    return max(MIN_CONNECTIONS, min(MAX_CONNECTIONS, nofile // CONNECTION_FD_SHARE))


def plain_send_limit(nofile: int | None = None) -> int:
    """Plain answers sent at once after the unauthenticated phase under a soft fd limit
    of ``nofile`` (default: this process's ``RLIMIT_NOFILE``)."""
    if nofile is None:
        nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if nofile == resource.RLIM_INFINITY or nofile < 0:
        return MAX_PLAIN_SENDS
    return max(MIN_PLAIN_SENDS, min(MAX_PLAIN_SENDS, nofile // PLAIN_SEND_FD_SHARE))


class PlainSends:
    """The places of plain answers being sent after the unauthenticated phase: at most
    ``limit`` at a time, ``per_peer`` (default: half of ``limit``, at least 1) from one
    peer address. No eviction: a request that finds no place has its answer sent
    within the phase instead (see the module docstring). Not thread-safe."""

    def __init__(self, limit: int, per_peer: int | None = None) -> None:
        self.limit = max(1, limit)
        self.per_peer = max(1, per_peer if per_peer is not None else self.limit // PEER_SHARE)
        self.active = 0
        self._by_peer: dict[str, int] = {}

    def take(self, peer: str) -> bool:
        """Take a place for ``peer``; False when its share or all places are taken."""
        held = self._by_peer.get(peer, 0)
        if self.active >= self.limit or held >= self.per_peer:
            return False
        self.active += 1
        self._by_peer[peer] = held + 1
        return True

    def give_back(self, peer: str) -> None:
        self.active -= 1
        held = self._by_peer.pop(peer) - 1
        if held:
            self._by_peer[peer] = held


class BudgetTicket:
    """One authenticated connection's place in the budget: its peer address, whether
    it was admitted with the read-only token, when it last received a frame
    (:meth:`active`), and how to close it (``evict(reason)``, called at most once,
    synchronously: it must only ask the connection to close)."""

    __slots__ = ("active_at", "evict", "peer", "read_only")

    def __init__(self, peer: str, evict: Callable[[str], None], *, read_only: bool = False) -> None:
        self.peer = peer
        self.evict = evict
        self.read_only = read_only
        self.active_at = trio.current_time()

    def active(self) -> None:
        self.active_at = trio.current_time()


class ConnectionBudget:
    """The authenticated connections of a server: at most ``limit`` in total and
    ``per_peer`` from one peer address; :meth:`admit` closes one of the full group to
    make room, read-only ones first, the longest idle first (see the module
    docstring). Not thread-safe."""

    def __init__(self, limit: int, per_peer: int | None = None) -> None:
        self.limit = max(1, limit)
        self.per_peer = max(1, per_peer if per_peer is not None else self.limit // PEER_SHARE)
        self._tickets: dict[BudgetTicket, None] = {}
        self._by_peer: dict[str, dict[BudgetTicket, None]] = {}
        #: Connections closed to make room (figures for tests and logs).
        self.evicted = 0

    def __len__(self) -> int:
        return len(self._tickets)

    def peer_count(self, peer: str) -> int:
        return len(self._by_peer.get(peer, ()))

    def admit(self, ticket: BudgetTicket) -> str | None:
        """Take ``ticket`` in, closing others past a bound; or, for a read-only ticket
        that could only displace full-access connections, why it is refused (it is
        then not taken: the caller closes it)."""
        peers = self._by_peer.setdefault(ticket.peer, {})
        for group, where in ((peers, "from this address"), (self._tickets, "in total")):
            while len(group) >= (self.per_peer if group is peers else self.limit):
                victim = min(group, key=_eviction_order)
                if ticket.read_only and not victim.read_only:
                    if not peers:
                        del self._by_peer[ticket.peer]
                    return (
                        f"connection limit reached {where}, and every connection there "
                        "has full access: a read-only one may not close those"
                    )
                self._evict(victim, where)
        self._tickets[ticket] = None
        self._by_peer.setdefault(ticket.peer, {})[ticket] = None
        return None

    def release(self, ticket: BudgetTicket) -> None:
        self._tickets.pop(ticket, None)
        peers = self._by_peer.get(ticket.peer)
        if peers is not None:
            peers.pop(ticket, None)
            if not peers:
                del self._by_peer[ticket.peer]

    def _evict(self, ticket: BudgetTicket, where: str) -> None:
        self.release(ticket)
        self.evicted += 1
        kind = "read-only connection" if ticket.read_only else "connection"
        ticket.evict(f"connection limit reached {where}: closed the {kind} idle the longest")


def _eviction_order(ticket: BudgetTicket) -> tuple[bool, float]:
    """Read-only connections first, then the longest idle."""
    return not ticket.read_only, ticket.active_at


class RateLimitedLog:
    """Log lines of one kind at most once per ``interval`` seconds; the next line
    that goes out says how many were left out. Not thread-safe (one Trio run)."""

    def __init__(self, logger: logging.Logger, interval: float = LOG_INTERVAL) -> None:
        self._logger = logger
        self._interval = interval
        #: kind -> (time of the last line, lines left out since)
        self._kinds: dict[str, tuple[float, int]] = {}

    def log(self, kind: str, level: int, message: str, *args: Any) -> bool:
        """Log ``message % args`` unless a line of ``kind`` went out less than
        ``interval`` seconds ago; whether it was logged."""
        now = trio.current_time()
        last, left_out = self._kinds.get(kind, (-self._interval - 1.0, 0))
        if now - last < self._interval:
            self._kinds[kind] = (last, left_out + 1)
            return False
        if left_out:
            message += " (%d similar lines left out)"
            args = (*args, left_out)
        self._kinds[kind] = (now, 0)
        self._logger.log(level, message, *args)
        return True


class PendingConnections:
    """The cancel scopes of unauthenticated connections, oldest first, bounded.

    :meth:`admit` makes room by cancelling the oldest when ``limit`` are held
    already; the handler of a cancelled scope closes its connection.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._scopes: dict[trio.CancelScope, None] = {}  # (insertion-ordered)
        #: Connections evicted to make room (figures for tests and logs).
        self.evicted = 0

    def __len__(self) -> int:
        return len(self._scopes)

    def admit(self, scope: trio.CancelScope) -> None:
        while len(self._scopes) >= self.limit:
            oldest = next(iter(self._scopes))
            del self._scopes[oldest]
            oldest.cancel()
            self.evicted += 1
        self._scopes[scope] = None

    def release(self, scope: trio.CancelScope) -> None:
        self._scopes.pop(scope, None)


async def serve_listener(
    listener: trio.abc.Listener[Any],
    handler: Callable[[Any], Awaitable[None]],
    nursery: trio.Nursery,
    notes: RateLimitedLog,
) -> None:
    """Accept connections until cancelled, each handled in a task of ``nursery``.

    When ``accept`` fails for lack of fds or memory, wait (backing off, then until
    a client is waiting) and try again, logging at most one line a second; other
    errors end the loop (and the server). The listener is closed on the way out.
    """
    backoff = ACCEPT_BACKOFF
    transport = getattr(listener, "transport_listener", listener)  # (under TLS)
    sock = getattr(transport, "socket", None)
    async with listener:
        while True:
            try:
                stream = await listener.accept()
            except OSError as exc:
                if exc.errno not in _ACCEPT_EXHAUSTED:
                    raise
                notes.log(
                    "accept",
                    logging.WARNING,
                    "cannot accept connections: %s; retrying in %.2f s",
                    os.strerror(exc.errno or 0),
                    backoff,
                )
                await trio.sleep(backoff)
                backoff = min(backoff * 2, ACCEPT_BACKOFF_MAX)
                # Linux fails accept with EMFILE before looking at the queue: without a
                # client waiting, retrying would only fail (and log) again.
                if sock is not None:
                    await trio.lowlevel.wait_readable(sock)
                continue
            backoff = ACCEPT_BACKOFF
            nursery.start_soon(handler, stream)
