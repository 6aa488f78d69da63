"""The client's exceptions.

Why a module of their own: the connection raises them and a
:class:`~ahp.client.RemoteTerminal` catches them (a failed extension request),
and the connection imports the remote terminal; kept here, neither imports the
other in a circle. :mod:`ahp.client` and :mod:`ahp.client.connection` re-export them.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "GOING_AWAY",
    "ClientError",
    "ConnectionLost",
    "NoAnswer",
    "RpcError",
    "ServerShutDown",
]

#: The close code of a server that shuts down (``serve`` on SIGTERM or SIGINT, after its
#: drain): it ends its terminals, and the commands in them.
GOING_AWAY = 1001


class ClientError(Exception):
    """The client could not connect or was refused (one clear message)."""


class ConnectionLost(ClientError):
    """The connection dropped before a request was answered."""


class ServerShutDown(ConnectionLost):
    """A :class:`ConnectionLost` whose connection the server closed because it shuts
    down (close code :data:`GOING_AWAY`, 1001), not a network drop: ``serve`` disposes
    every terminal then, so a command that ran there was ended."""


class NoAnswer(ClientError):
    """A request was sent and no answer came within the client's ``request_timeout``
    (the server is stopped, overloaded, or lost it). Whether the server applied it is
    not known; the connection is as it was (a later request may be answered)."""

    def __init__(self, method: str, seconds: float, where: str) -> None:
        super().__init__(f"no answer to {method!r} within {seconds:g} s from {where}")
        self.method = method
        #: The bound that passed (the client's ``request_timeout``).
        self.seconds = seconds
        #: The server's URL, without its token (safe to show).
        self.where = where


class RpcError(ClientError):
    """The server answered a request with a JSON-RPC error."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(f"{message} ({code})")
        self.code = code
        self.message = message
        self.data = data
