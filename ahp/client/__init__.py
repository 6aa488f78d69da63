"""A Trio AHP client with per-channel state mirrors and automatic reconnect."""

from ahp.client.connection import Client, ClientError, ConnectionLost, RpcError, connect
from ahp.client.mirror import Mirror

__all__ = ["Client", "ClientError", "ConnectionLost", "Mirror", "RpcError", "connect"]
