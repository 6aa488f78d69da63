"""The client's exceptions.

Why a module of their own: the connection raises them and a
:class:`~ahp.client.RemoteTerminal` catches them (a failed extension request),
and the connection imports the remote terminal; kept here, neither imports the
other in a circle. :mod:`ahp.client` and :mod:`ahp.client.connection` re-export them.
"""

from __future__ import annotations

from typing import Any

__all__ = ["ClientError", "ConnectionLost", "RpcError"]


class ClientError(Exception):
    """The client could not connect or was refused (one clear message)."""


class ConnectionLost(ClientError):
    """The connection dropped before a request was answered."""


class RpcError(ClientError):
    """The server answered a request with a JSON-RPC error."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(f"{message} ({code})")
        self.code = code
        self.message = message
        self.data = data
