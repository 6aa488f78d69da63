"""The AHP sidecar: JSON-RPC over WebSocket for a :class:`~ahp.engine.Host`."""

from ahp.server.app import DEFAULT_PORT, ServeOptions, Sidecar, run_sidecar, serve_host
from ahp.server.session import Session
from ahp.server.state import ServerState

__all__ = [
    "DEFAULT_PORT",
    "ServeOptions",
    "ServerState",
    "Session",
    "Sidecar",
    "run_sidecar",
    "serve_host",
]
