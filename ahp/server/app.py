"""The sidecar: a host, its WebSocket listeners, and orderly shutdown.

Why: ``python -m ahp serve`` and embedding (``nursery.start(ahp.serve_host, host)``) need
the same thing — listen, authenticate, speak AHP for the host's terminals —
and the command line additionally needs signals: the first SIGINT/SIGTERM
closes every connection with 1001, disposes every terminal (no orphans) and
exits 0; a second one exits at once.
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import os
import secrets
import signal
import ssl
from collections.abc import AsyncIterator, Callable
from typing import Any, Final

import attrs
import trio

from ahp.engine import Host, open_host
from ahp.engine.memory import configure_allocator
from ahp.pty.reap import kill_session
from ahp.server.session import DEFAULT_MAX_TERMINALS, ServerState
from ahp.server.websocket import ServerConfig, open_listeners, serve_connections

__all__ = [
    "DEFAULT_PORT",
    "ServeOptions",
    "Sidecar",
    "is_loopback",
    "run_sidecar",
    "serve_host",
    "tls_context",
]

log = logging.getLogger("ahp.server")

#: The sidecar's default TCP port (``--port``; ``0`` picks a free one).
DEFAULT_PORT: Final = 8765


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@attrs.frozen
class ServeOptions:
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    unix: str | None = None
    token: str | None = None
    allow_origins: frozenset[str] = frozenset()
    require_token: bool = True
    #: Serve ``wss://`` with this context (server side, certificate loaded); TCP only.
    tls: ssl.SSLContext | None = None
    #: Terminals hosted at most (``createTerminal`` past it is refused, -32000).
    max_terminals: int = DEFAULT_MAX_TERMINALS
    #: Take clients' input and signals only from the holder of a terminal's client claim
    #: (sets :attr:`ahp.engine.Host.holder_only_input`).
    holder_only_input: bool = False
    #: Niceness of the terminals' processes (:attr:`ahp.engine.Host.child_nice`).
    child_nice: int = 0


def tls_context(cert: str, key: str | None = None) -> ssl.SSLContext:
    """A server TLS context from a PEM certificate chain and its key (``--tls-cert``)."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    return context


@attrs.frozen
class Sidecar:
    """A running server: where to connect and with which token."""

    url: str
    token: str | None
    port: int | None
    state: ServerState


def _allowed_hosts(options: ServeOptions, port: int) -> frozenset[str]:
    if options.unix is not None or not is_loopback(options.host):
        return frozenset()
    names = {"localhost", "127.0.0.1", "[::1]", options.host.lower()}
    return frozenset(names | {f"{n}:{port}" for n in names})


async def serve_host(
    host: Host,
    options: ServeOptions | None = None,
    *,
    task_status: trio.TaskStatus[Sidecar] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``host`` over WebSocket until cancelled; ``started`` gives the URL.

    The front door for embedding (also ``ahp.serve_host``): use
    ``sidecar = await nursery.start(ahp.serve_host, host, ahp.ServeOptions(port=0))``;
    ``sidecar.url`` carries the token. It lives here, not on the engine's
    :class:`~ahp.engine.Host`, so that the engine never imports the server.

    The token is ``options.token``, else ``$AHP_TOKEN``, else a random one
    (unless ``require_token`` is false).
    """
    if options is None:
        options = ServeOptions()
    token = options.token or os.environ.get("AHP_TOKEN") or None
    if token is None and options.require_token:
        token = secrets.token_urlsafe(24)
    if options.unix is None and not is_loopback(options.host):
        log.warning(
            "listening on %s, which is not loopback: anyone who can reach it and knows "
            "the token can run commands as this user",
            options.host,
        )
    if options.tls is not None and options.unix is not None:
        raise ValueError("TLS is for TCP listeners; a Unix socket is protected by its mode")
    sockets = await open_listeners(host=options.host, port=options.port, unix=options.unix)
    listeners: list[trio.abc.Listener[Any]] = list(sockets)
    port: int | None = None
    if options.unix is None:
        port = sockets[0].socket.getsockname()[1]
        shown = f"[{options.host}]" if ":" in options.host else options.host
        scheme = "ws" if options.tls is None else "wss"
        url = f"{scheme}://{shown}:{port}/"
        if options.tls is not None:
            # https_compatible: no close_notify exchange, so closing never waits on a peer.
            listeners = [trio.SSLListener(s, options.tls, https_compatible=True) for s in sockets]
    else:
        url = f"ws+unix://{options.unix}:/"
    if token is not None:
        url += f"?tkn={token}"
    config = ServerConfig(
        token=token,
        allow_origins=options.allow_origins,
        allowed_hosts=_allowed_hosts(options, port or 0),
    )
    state = ServerState(host=host, max_terminals=options.max_terminals)
    if options.holder_only_input:
        host.holder_only_input = True
    host.child_nice = options.child_nice
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(serve_connections, state, config, listeners)
            task_status.started(Sidecar(url=url, token=token, port=port, state=state))
    finally:
        if options.unix is not None:
            with contextlib.suppress(OSError):
                os.unlink(options.unix)


async def run_sidecar(
    options: ServeOptions,
    *,
    shell: str | None = None,
    scrollback: int | None = None,
    on_ready: Callable[[Sidecar], None] | None = None,
) -> int:
    """The ``serve`` command: run until SIGINT/SIGTERM, then shut down cleanly.

    ``$AHP_TOKEN`` is taken out of this process's environment, so that the
    terminals' processes (which inherit it) do not see the token.
    """
    env_token = os.environ.pop("AHP_TOKEN", None) or None
    options = attrs.evolve(options, token=options.token or env_token)
    # Large blocks (frames, snapshots, catalogues) are returned to the system when freed
    # (ahp.engine.memory): a long-running server returns close to its baseline.
    configure_allocator()
    kwargs = {} if scrollback is None else {"scrollback": scrollback}
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with open_host(shell=shell, **kwargs) as host:
            async with trio.open_nursery() as nursery:
                sidecar = await nursery.start(serve_host, host, options)
                if on_ready is not None:
                    on_ready(sidecar)

                async def watch_signals() -> None:
                    async for signum in signals:
                        log.info("%s: shutting down", signal.Signals(signum).name)
                        nursery.cancel_scope.cancel()
                        return

                nursery.start_soon(watch_signals)
            log.info("disposing %d terminal(s)", len(host.terminals))
            pids = [t.pid for t in host.terminals.values() if t.pid is not None]
            # Keep listening for a second signal while terminals are disposed.
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_exit_on_second_signal, signals, pids)
                await host.aclose()
                nursery.cancel_scope.cancel()
    return 0


async def _exit_on_second_signal(signals: AsyncIterator[int], pids: list[int]) -> None:
    async for _ in signals:
        log.warning("second signal: killing %d terminal(s) and exiting at once", len(pids))
        for pid in pids:  # no grace any more, but no orphans either
            kill_session(pid)
        os._exit(1)
