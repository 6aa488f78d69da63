"""A Trio AHP client with per-channel state mirrors and automatic reconnect.

The exports are imported on first use, so that the pure parts
(:mod:`ahp.client.session`, :mod:`ahp.client.mirror`) load without Trio.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ahp.exports import lazy_exports

if TYPE_CHECKING:
    from ahp.client.connection import Client, connect
    from ahp.client.errors import ClientError, ConnectionLost, NoAnswer, RpcError, ServerShutDown
    from ahp.client.exec import exec_remote
    from ahp.client.fleet import Fleet, HostDown, HostTerminal, connect_many
    from ahp.client.mirror import Mirror
    from ahp.client.remote import RemoteTerminal
    from ahp.client.session import ClientSession

#: Public name -> module that defines it.
_EXPORTS = {
    "Client": "ahp.client.connection",
    "connect": "ahp.client.connection",
    "ClientError": "ahp.client.errors",
    "ConnectionLost": "ahp.client.errors",
    "NoAnswer": "ahp.client.errors",
    "RpcError": "ahp.client.errors",
    "ServerShutDown": "ahp.client.errors",
    "exec_remote": "ahp.client.exec",
    "Fleet": "ahp.client.fleet",
    "HostDown": "ahp.client.fleet",
    "HostTerminal": "ahp.client.fleet",
    "connect_many": "ahp.client.fleet",
    "Mirror": "ahp.client.mirror",
    "RemoteTerminal": "ahp.client.remote",
    "ClientSession": "ahp.client.session",
}


__getattr__ = lazy_exports("ahp.client", _EXPORTS, globals())


__all__ = [
    "Client",
    "ClientError",
    "ClientSession",
    "ConnectionLost",
    "Fleet",
    "HostDown",
    "HostTerminal",
    "Mirror",
    "NoAnswer",
    "RemoteTerminal",
    "RpcError",
    "ServerShutDown",
    "connect",
    "connect_many",
    "exec_remote",
]
