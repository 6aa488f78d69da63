"""The one module that imports trio-websocket.

Why: trio-websocket is in maintenance mode. Everything the server and the
client use from it is re-exported here, so replacing it (for example by a
wsproto-based transport of our own) touches this file and the two transport
modules, nothing else.
"""

from trio_websocket import (
    ConnectionClosed,
    ConnectionRejected,
    HandshakeError,
    WebSocketConnection,
    WebSocketRequest,
    WebSocketServer,
    connect_websocket_url,
    open_websocket_url,
    wrap_client_stream,
)


def request_host(request: WebSocketRequest) -> str | None:
    """The upgrade request's ``Host`` header.

    trio-websocket exposes only the *extra* headers; wsproto keeps ``Host`` on
    the request event, which trio-websocket does not make public.
    """
    event = getattr(request, "_event", None)
    host = getattr(event, "host", None)
    return host if isinstance(host, str) else None


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
    "request_host",
    "ConnectionClosed",
    "ConnectionRejected",
    "HandshakeError",
    "WebSocketConnection",
    "WebSocketRequest",
    "WebSocketServer",
    "connect_websocket_url",
    "open_websocket_url",
    "wrap_client_stream",
]
