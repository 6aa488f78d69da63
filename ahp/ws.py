"""The one module that imports trio-websocket (the client side).

Why: trio-websocket is in maintenance mode. Everything the client, the CLI and
the benchmark use from it is re-exported here, so replacing it touches this
file and the client's transport, nothing else. The server does not use it: its
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


async def close_transport(ws: WebSocketConnection) -> None:
    """Close the stream under a client connection.

    After a close handshake trio-websocket's client waits for the server to
    close TCP; if its reader task is cancelled first the socket would be left
    to the garbage collector. Idempotent.
    """
    stream = getattr(ws, "_stream", None)
    if stream is not None:
        await stream.aclose()


__all__ = [
    "close_transport",
    "ConnectionClosed",
    "ConnectionRejected",
    "HandshakeError",
    "WebSocketConnection",
    "open_websocket_url",
    "wrap_client_stream",
]
