"""The server's listening sockets: TCP on a host and port, or one Unix socket.

Why a module of its own: a Unix socket path outlives the process that bound it, so
taking one needs care that TCP does not — a stale socket an earlier server left is
removed, a live one (another server still listening) or a path that is not a socket is
refused, and on exit the server removes the path only while it still names its own
socket (:func:`socket_identity`). The calls here are immediate (a bind, a
non-blocking connect to a local socket); the listeners are owned by the caller, who
closes them.
"""

from __future__ import annotations

import contextlib
import errno
import os
import socket
import stat

import trio

__all__ = ["Listener", "clear_stale_socket", "open_listeners", "socket_identity"]


Listener = trio.SocketListener


def clear_stale_socket(path: str) -> None:
    """Remove a Unix socket that an earlier server left at ``path``; refuse anything else.

    Raises :class:`OSError` (``EEXIST``) when ``path`` is not a socket (a file, a
    directory: never removed), and (``EADDRINUSE``) when a server still listens on it
    (removing its path made it unreachable, with its terminals running on). A socket
    nobody listens on (``ECONNREFUSED``) is stale and removed. Blocking calls, each
    immediate (a non-blocking connect to a local socket).
    """
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(mode):
        raise OSError(errno.EEXIST, "it exists and is not a socket (left as it is)")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.setblocking(False)
        try:
            probe.connect(path)
        except ConnectionRefusedError:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)  # stale: its server is gone
            return
        except FileNotFoundError:
            return
        except BlockingIOError:
            pass  # a listener whose backlog is full: in use all the same
    raise OSError(errno.EADDRINUSE, "another server is listening on it")


def socket_identity(path: str) -> tuple[int, int] | None:
    """``(st_dev, st_ino)`` of the file at ``path`` (None if there is none): what a
    server that bound a Unix socket there removes on exit only if it is still its own."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


async def open_listeners(*, host: str | None, port: int | None, unix: str | None) -> list[Listener]:
    """TCP listeners on ``host:port``, or one Unix-socket listener (mode 0600)."""
    if unix is not None:
        clear_stale_socket(unix)
        sock = trio.socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)
        try:
            await sock.bind(unix)
        finally:
            os.umask(old)
        os.chmod(unix, 0o600)
        sock.listen(128)
        return [trio.SocketListener(sock)]
    return list(await trio.open_tcp_listeners(port or 0, host=host))
