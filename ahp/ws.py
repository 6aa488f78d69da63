"""The one module that imports trio-websocket (the client side).

Why: trio-websocket is in maintenance mode. Everything the client, the CLI and
the benchmark use from it is re-exported here, so replacing it touches this
file and the client's transport (:mod:`ahp.client.transport`, which opens and closes the
stream under a connection itself), nothing else. The server does not use it: its
connections are wsproto state machines driven by :mod:`ahp.server.wsconn`
(one task hop and one re-encode fewer per frame, measured there).
"""

from trio_websocket import (
    ConnectionClosed,
    ConnectionRejected,
    HandshakeError,
    WebSocketConnection,
    open_websocket_url,
    wrap_client_stream,
)

__all__ = [
    "ConnectionClosed",
    "ConnectionRejected",
    "HandshakeError",
    "WebSocketConnection",
    "open_websocket_url",
    "wrap_client_stream",
]
