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
    "ACCEPT_BACKOFF",
    "ACCEPT_BACKOFF_MAX",
    "MAX_PENDING",
    "MIN_PENDING",
    "PendingConnections",
    "RateLimitedLog",
    "pending_limit",
    "serve_listener",
]

#: Unauthenticated connections held at most, whatever the fd limit.
MAX_PENDING: Final = 128
#: ... and at least (a tiny fd limit still lets a few clients in).
MIN_PENDING: Final = 8
#: Share of the soft fd limit pending connections may hold (1/8).
PENDING_FD_SHARE: Final = 8
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
