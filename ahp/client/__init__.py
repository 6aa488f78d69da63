"""A Trio AHP client with per-channel state mirrors and automatic reconnect."""

from ahp.client.connection import Client, ClientError, ConnectionLost, RpcError, connect
from ahp.client.mirror import Mirror
from ahp.client.remote import RemoteTerminal

__all__ = [
    "Client",
    "ClientError",
    "ConnectionLost",
    "Mirror",
    "RemoteTerminal",
    "RpcError",
    "connect",
]
