"""The sidecar: a host, its WebSocket listeners, and orderly shutdown.

Why: ``python -m ahp serve`` and embedding (``nursery.start(ahp.serve_host, host)``) need
the same thing — listen, authenticate, speak AHP for the host's terminals —
and the command line additionally needs signals:

- SIGTERM (what an engine sends to stop a container) drains
  (:mod:`ahp.server.drain`): ``/readyz`` answers 503, ``createTerminal`` is
  refused, running commands get ``drain_timeout`` seconds to finish, every
  client is told 1001 after what was queued for it, every terminal is disposed,
  exit 0. ``drain_timeout=0`` shuts down at once, as SIGINT does.
- SIGINT (Ctrl-C: a person at a terminal, who wants it gone now) and SIGHUP (the
  terminal it ran in closed) dispose every terminal at once (no orphans), then
  close every connection with 1001; exit 0.
- Other signals keep their default disposition: SIGQUIT (a core dump, for
  debugging), SIGUSR1 and SIGUSR2 end the process with no cleanup, as SIGKILL does;
  its terminals' processes then die by their death signal (``ahp.pty.launch``).
- Processes that detach from the terminals are adopted (``serve`` is a child
  subreaper, and PID 1 in a container adopts them anyway), reaped when they exit,
  and killed when the server exits (:mod:`ahp.pty.orphans`).
- Either way the terminals are disposed while the server still runs, so recorders
  (``--record``), the audit log and connected clients see each terminal end.
- Any signal after the first (during the drain or the disposal) kills every
  terminal's session, gives the open connections :data:`LAST_GOODBYE_TIMEOUT`
  seconds at most to take their 1001 close (so a client knows the server went away,
  not that the network dropped), and exits 1.

The token of ``serve`` comes from ``--token``, else ``$AHP_TOKEN_FILE`` (a file
holding it, e.g. a mounted Kubernetes Secret), else ``$AHP_TOKEN``, else a random
one; both variables are taken out of the environment the terminals inherit.
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import os
import secrets
import signal
import ssl
import threading
from collections.abc import AsyncIterator, Callable
from typing import Any, Final, NoReturn
from urllib.parse import quote, urlencode

import attrs
import trio

from ahp.engine import Host, open_host
from ahp.engine.collector import freeze_startup_objects
from ahp.engine.launch import default_launch_problem
from ahp.engine.memory import configure_allocator
from ahp.pty.orphans import adopting_orphans, kill_adopted
from ahp.pty.reap import kill_session
from ahp.record import RecordOptions, record_host
from ahp.record.audit import AuditLog
from ahp.record.wirelog import WireLog
from ahp.server.config import ServerConfig
from ahp.server.drain import DEFAULT_DRAIN_TIMEOUT, drain, goodbye
from ahp.server.http import health_routes
from ahp.server.listeners import open_listeners, socket_identity
from ahp.server.scrub import scrub_start_environment
from ahp.server.state import DEFAULT_MAX_TERMINALS, ServerState
from ahp.server.web import web_routes
from ahp.server.websocket import serve_connections
from ahp.tokenfile import MAX_TOKEN_FILE, TokenFileError, environment_token, read_token_file

__all__ = [
    "DEFAULT_PORT",
    "STOP_SIGNALS",
    "WILDCARDS",
    "RecordSetupError",
    "MAX_TOKEN_FILE",
    "ServeOptions",
    "Sidecar",
    "TLSSetupError",
    "TokenFileError",
    "is_loopback",
    "prepare_server_process",
    "read_token_file",
    "run_sidecar",
    "serve_host",
    "shown_host",
    "take_environment_token",
    "tls_context",
]

log = logging.getLogger("ahp.server")

#: The sidecar's default TCP port (``--port``; ``0`` picks a free one).
DEFAULT_PORT: Final = 8765
#: The signals ``serve`` stops on (see the module docstring). SIGHUP (the terminal
#: ``serve`` runs in closed) shuts down at once, as SIGINT does, unless it was ignored
#: when ``serve`` started (``nohup``: it stays ignored); others keep their default.
STOP_SIGNALS: Final = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
#: Seconds a second signal's exit gives the open connections to take their 1001
#: ``going away`` close (after the terminals are killed, before ``os._exit``): the
#: operator said "now", so it is short; a connection still writing then is cut.
LAST_GOODBYE_TIMEOUT: Final = 0.5
#: Bind addresses that mean every address (of a family; ``""``: of both).
WILDCARDS: Final = frozenset({"", "0.0.0.0", "::"})
#: ``serve``'s niceness for the terminals' processes (``--child-nice``): the server's
#: own. ``--child-nice 10`` keeps busy programs from taking the server's CPU (on two
#: cores, four shells printing in a loop made another terminal's echo wait 100-300 ms
#: at 0, 20-35 ms at 10: ``benchmarks/bench_edges.py``, issue 25), but as a default it
#: would cost every machine that runs other work: each terminal's autogroup then weighs
#: a tenth of another session's, so the user's programs would get a tenth of the CPU
#: they get in any other terminal whenever the machine is contended. The user's
#: programs are the point of a terminal host: lowering them is the operator's choice.
SERVE_CHILD_NICE: Final = 0
#: The environment variables that carry a token (removed, and scrubbed from the
#: start-up block: :func:`run_sidecar`).
TOKEN_VARIABLES: Final = ("AHP_TOKEN", "AHP_READ_TOKEN")


def take_environment_token() -> str | None:
    """The token from ``$AHP_TOKEN_FILE`` (see :func:`read_token_file`), else
    ``$AHP_TOKEN``, else None; both variables are removed from this process's
    environment, so the terminals' processes (which inherit it) do not see them.
    Raises :class:`TokenFileError` (the variables are removed all the same)."""
    return environment_token(os.environ, take=True)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class RecordSetupError(OSError):
    """The audit log, the wire log or the recordings directory cannot be created."""


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
    #: Serve the viewer page (``/``, ``/static/…``, ``/api/recordings``) on the same port
    #: (``serve --no-web`` turns it off); TCP only.
    web: bool = True
    #: The read-only token (watch only; ``$AHP_READ_TOKEN``, else a random one when a
    #: token is required). Never equal to the token.
    read_token: str | None = None
    #: Niceness of the terminals' processes (:attr:`ahp.engine.Host.child_nice`); None
    #: keeps the host's. ``serve`` passes :data:`SERVE_CHILD_NICE` unless told otherwise.
    child_nice: int | None = None
    #: Nice value of a flooding terminal's autogroup (:attr:`ahp.engine.Host.flood_nice`,
    #: ``serve --flood-nice``; 0: off); None keeps the host's (:data:`FLOOD_NICE`).
    flood_nice: int | None = None
    #: Record every terminal into this directory, one asciicast v3 file each
    #: (:func:`ahp.record.record_host`; ``serve --record``).
    record_dir: str | None = None
    #: How terminals are recorded (input, size bound); None: the defaults.
    record: RecordOptions | None = None
    #: Log privileged events to this file (:mod:`ahp.record.audit`; ``serve --audit-log``).
    audit_log: str | None = None
    #: Log the text of input in the audit log, not only its size (``--audit-input``).
    audit_input: bool = False
    #: Log every JSON-RPC message into this directory (:mod:`ahp.record.wirelog`).
    wire_log: str | None = None
    #: Seconds running commands get to finish after SIGTERM (:func:`run_sidecar`;
    #: 0: shut down at once).
    drain_timeout: float = DEFAULT_DRAIN_TIMEOUT


class TLSSetupError(ValueError):
    """``--tls-cert`` / ``--tls-key`` cannot be used: one line naming the file and why."""


class _EncryptedKey(Exception):
    """The private key asks for a password (OpenSSL would prompt on the terminal)."""


def _no_password() -> str:
    raise _EncryptedKey


#: Bytes of a certificate or key file read to say why loading it failed.
_PEM_SNIFF: Final = 1 << 20


def tls_context(cert: str, key: str | None = None) -> ssl.SSLContext:
    """A server TLS context from a PEM certificate chain and its key (``--tls-cert``,
    ``--tls-key``; without a key file the key is in ``cert``). Raises
    :class:`TLSSetupError` naming the file and the reason: missing or unreadable, no
    certificate or no private key in it, an encrypted key (never prompted for: a
    server's start must not wait on a terminal), a key that does not match."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        context.load_cert_chain(cert, key, password=_no_password)
    except _EncryptedKey:
        which = f"the TLS key {key!r}" if key else f"the private key in {cert!r}"
        raise TLSSetupError(
            f"{which} is encrypted: give it unencrypted (readable by this user only)"
        ) from None
    except (OSError, ValueError) as exc:  # ssl.SSLError is an OSError
        raise TLSSetupError(_tls_problem(cert, key, exc)) from None
    return context


def _tls_problem(cert: str, key: str | None, exc: Exception) -> str:
    """Why ``load_cert_chain(cert, key)`` failed with ``exc``, said of a file."""
    contents: dict[str, bytes] = {}
    for what, path in (("certificate", cert), ("key", key)):
        if path is None:
            continue
        try:
            with open(path, "rb") as f:
                contents[what] = f.read(_PEM_SNIFF)
        except OSError as error:
            return f"cannot load the TLS {what} {path!r}: {error.strerror or error}"
    if b"-----BEGIN CERTIFICATE-----" not in contents["certificate"]:
        return f"cannot load the TLS certificate {cert!r}: no PEM certificate in it"
    if b"PRIVATE KEY-----" not in contents.get("key", contents["certificate"]):
        if key is not None:
            return f"cannot load the TLS key {key!r}: no PEM private key in it"
        return (
            f"cannot load the TLS certificate {cert!r}: no PEM private key in it (add the key "
            "to the file, or give its file with --tls-key)"
        )
    if isinstance(exc, ssl.SSLError) and exc.reason == "KEY_VALUES_MISMATCH":
        return f"the TLS key {key or cert!r} is not the key of the certificate {cert!r}"
    with_key = f" with the key {key!r}" if key is not None else ""
    return f"cannot load the TLS certificate {cert!r}{with_key}: {exc}"


@attrs.frozen
class Sidecar:
    """A running server: where to connect and with which token."""

    url: str
    token: str | None
    port: int | None
    state: ServerState
    #: The viewer page, the token in its fragment (None: no page, ``web=False`` or Unix).
    page_url: str | None = None
    #: The page for watching only, with the read-only token (None: no page or no token).
    read_only_url: str | None = None
    read_token: str | None = None


def shown_host(host: str) -> str:
    """The host part of the URL ``serve`` prints for a bind address: the loopback
    address of the family for a wildcard (``127.0.0.1`` for ``0.0.0.0`` and ``""``,
    ``[::1]`` for ``::``: a URL a client on this machine can use, and a browser will
    open), an IPv6 address in brackets, else as given."""
    if host in ("", "0.0.0.0"):
        return "127.0.0.1"
    if host == "::":
        return "[::1]"
    return f"[{host}]" if ":" in host else host


def _allowed_hosts(options: ServeOptions, port: int) -> frozenset[str]:
    if options.unix is not None or not is_loopback(options.host):
        return frozenset()
    names = {"localhost", "127.0.0.1", "[::1]", options.host.lower()}
    return frozenset(names | {f"{n}:{port}" for n in names})


def _own_origins(options: ServeOptions, port: int) -> frozenset[str]:
    """The page's own origins, accepted in a WebSocket's ``Origin``: the loopback names of
    this port when bound to loopback (the Host check refuses every other name there);
    the loopback address :func:`shown_host` prints when bound to a wildcard (no other
    name: any name could reach that); else the one address bound to."""
    scheme = "http" if options.tls is None else "https"
    if is_loopback(options.host):
        names = {"localhost", "127.0.0.1", "[::1]"}
        names.add(f"[{options.host}]" if ":" in options.host else options.host)
    elif options.host in WILDCARDS:
        # Only the loopback address of the page URL serve prints: a page with that
        # origin was loaded from this port of this family on this machine, from this server.
        names = {shown_host(options.host)}
    else:
        names = {f"[{options.host}]" if ":" in options.host else options.host}
    return frozenset(f"{scheme}://{name}:{port}" for name in names)


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
    (unless ``require_token`` is false). With a token there is also a read-only
    token (``options.read_token``, else ``$AHP_READ_TOKEN``, else a random one): a
    connection admitted with it can only watch. Unless ``options.web`` is false, the
    viewer page is served on the same port (``sidecar.page_url``; the token is in its
    fragment).
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
    read_token = options.read_token or os.environ.get("AHP_READ_TOKEN") or None
    if read_token is None and token is not None:
        read_token = secrets.token_urlsafe(24)
    if read_token is not None and read_token == token:
        raise ValueError("the read-only token must differ from the token")
    sockets = await open_listeners(host=options.host, port=options.port, unix=options.unix)
    own_socket = socket_identity(options.unix) if options.unix is not None else None
    listeners: list[trio.abc.Listener[Any]] = list(sockets)
    port: int | None = None
    if options.unix is None:
        port = sockets[0].socket.getsockname()[1]
        shown = shown_host(options.host)
        scheme = "ws" if options.tls is None else "wss"
        url = f"{scheme}://{shown}:{port}/"
        if options.tls is not None:
            # https_compatible: no close_notify exchange, so closing never waits on a peer.
            listeners = [trio.SSLListener(s, options.tls, https_compatible=True) for s in sockets]
    else:
        url = f"ws+unix://{options.unix}:/"
    page_base: str | None = None
    if token is not None:
        url += "?" + urlencode({"tkn": token})  # (a token may hold '+', '/', '=')
    state = ServerState(host=host, max_terminals=options.max_terminals)
    routes = health_routes(ready=lambda: not state.draining, able=_launch_watch(host))
    own_origins: frozenset[str] = frozenset()
    if options.web and port is not None:
        shown = shown_host(options.host)
        http = "http" if options.tls is None else "https"
        page_base = f"{http}://{shown}:{port}/"
        routes.update(
            web_routes(
                token=token,
                read_token=read_token,
                record_dir=options.record_dir,
                tls=http == "https",
            )
        )
        own_origins = _own_origins(options, port)
    config = ServerConfig(
        token=token,
        allow_origins=options.allow_origins,
        allowed_hosts=_allowed_hosts(options, port or 0),
        routes=routes,
        read_token=read_token if token is not None else None,
        own_origins=own_origins,
    )
    page_url = read_only_url = None
    if page_base is not None:
        page_url = page_base + (f"#tkn={quote(token, safe='')}" if token is not None else "")
        if token is not None and read_token is not None:
            read_only_url = page_base + f"#ro={quote(read_token, safe='')}"
    if options.holder_only_input:
        host.holder_only_input = True
    if options.child_nice is not None:
        host.child_nice = options.child_nice
    if options.flood_nice is not None:
        host.flood_nice = options.flood_nice
    try:
        async with trio.open_nursery() as nursery:
            await _start_records(nursery, state, options, token, config.read_token)
            await nursery.start(serve_connections, state, config, listeners)
            task_status.started(
                Sidecar(
                    url=url,
                    token=token,
                    port=port,
                    state=state,
                    page_url=page_url,
                    read_only_url=read_only_url,
                    read_token=config.read_token,
                )
            )
    finally:
        # Only our own socket: another server may have taken the path since (after
        # this one stopped answering on it), and its path is not ours to remove.
        if options.unix is not None and socket_identity(options.unix) == own_socket:
            with contextlib.suppress(OSError):
                os.unlink(options.unix)


async def _start_records(
    nursery: trio.Nursery,
    state: ServerState,
    options: ServeOptions,
    token: str | None,
    read_token: str | None,
) -> None:
    """Start the audit log, the wire log and the recorder of every new terminal, as
    ``options`` asks (each raises ``OSError`` here if its file cannot be created). Both
    tokens are scrubbed from both logs."""
    try:
        if options.audit_log is not None:
            what = f"the audit log {options.audit_log}"
            state.audit = AuditLog(
                options.audit_log,
                token=token,
                read_token=read_token,
                record_input=options.audit_input,
            )
            await nursery.start(state.audit.run)
            audit = state.audit

            async def watch(*, task_status: trio.TaskStatus[None]) -> None:
                async with audit.watching(state.host):
                    task_status.started()
                    await trio.sleep_forever()

            await nursery.start(watch)
        if options.wire_log is not None:
            what = f"the wire log in {options.wire_log}"
            state.wire_log = WireLog(options.wire_log, token=token, read_token=read_token)
            await nursery.start(state.wire_log.run)
        if options.record_dir is not None:
            what = f"the recordings directory {options.record_dir}"
            directory, record = options.record_dir, options.record or RecordOptions()

            async def recording(*, task_status: trio.TaskStatus[None]) -> None:
                async with record_host(state.host, directory, record) as recorders:
                    state.recorders = recorders
                    task_status.started()
                    await trio.sleep_forever()

            await nursery.start(recording)
    except OSError as exc:
        raise RecordSetupError(exc.errno, f"cannot create {what}: {exc.strerror or exc}") from exc


def _launch_watch(host: Host) -> Callable[[], bool]:
    """``/readyz``'s ``able``: whether a terminal with the host's defaults can start now
    (:func:`~ahp.engine.launch.default_launch_problem`); a change is logged once."""
    seen: list[str | None] = [None]

    def able() -> bool:
        problem = default_launch_problem(host.shell, host.cwd)
        if problem != seen[0]:
            if problem is not None:
                log.warning("new terminals cannot start: %s (/readyz answers 503)", problem)
            else:
                log.info("new terminals can start again")
            seen[0] = problem
        return problem is None

    return able


async def run_sidecar(
    options: ServeOptions,
    *,
    shell: str | None = None,
    cwd: str | None = None,
    scrollback: int | None = None,
    user_rc: bool = True,
    on_ready: Callable[[Sidecar], None] | None = None,
) -> int:
    """The ``serve`` command: run until a signal, then drain or shut down (see the
    module docstring); returns the exit status (0).

    The token is ``options.token``, else the environment's
    (:func:`take_environment_token`, which also removes it from the environment;
    :class:`TokenFileError` if ``$AHP_TOKEN_FILE`` is unusable); the read-only token
    ``options.read_token``, else ``$AHP_READ_TOKEN`` (removed from the environment too).
    Both variables' values are overwritten in the start-up environment block as well
    (:func:`ahp.server.scrub.scrub_start_environment`: ``/proc/PID/environ``).
    """
    env_token = take_environment_token()
    env_read_token = os.environ.pop("AHP_READ_TOKEN", None) or None
    # ... and out of /proc/PID/environ, which shows the block the process started with.
    scrub_start_environment(TOKEN_VARIABLES)
    options = attrs.evolve(
        options,
        token=options.token or env_token,
        read_token=options.read_token or env_read_token,
    )
    prepare_server_process()
    kwargs = {} if scrollback is None else {"scrollback": scrollback}
    stop_on = [s for s in STOP_SIGNALS if s != signal.SIGHUP or not _ignored(s)]
    with trio.open_signal_receiver(*stop_on) as signals:
        # (orphans: reaped while serving, killed at exit, after the terminals: ahp.pty.orphans)
        async with (
            adopting_orphans(),
            open_host(shell=shell, cwd=cwd, user_rc=user_rc, **kwargs) as host,
        ):
            async with trio.open_nursery() as nursery:
                sidecar = await nursery.start(serve_host, host, options)
                if on_ready is not None:
                    on_ready(sidecar)

                # The pids of terminals being disposed (they leave host.terminals when
                # their disposal starts), for a second signal to kill.
                disposing: list[int] = []

                async def stop(drain_first: bool) -> None:
                    if drain_first:
                        await drain(sidecar.state, options.drain_timeout)
                    # Terminals are disposed while the server still runs, so that the
                    # recorders, the audit log and any client still connected see each
                    # terminal end (its exit or the disposal) before they stop.
                    sidecar.state.draining = True
                    log.info("disposing %d terminal(s)", len(host.terminals))
                    disposing.extend(_pids(host))
                    await host.aclose()
                    nursery.cancel_scope.cancel()

                async def watch_signals() -> None:
                    stopping = False
                    async for signum in signals:
                        name = signal.Signals(signum).name
                        if stopping:
                            pids = sorted({*disposing, *_pids(host)})
                            await _exit_now_saying_goodbye(sidecar.state, pids, name)
                        stopping = True
                        drain_first = signum == signal.SIGTERM and options.drain_timeout > 0
                        if drain_first:
                            log.info("%s: draining (up to %g s)", name, options.drain_timeout)
                        else:
                            log.info("%s: shutting down", name)
                        nursery.start_soon(stop, drain_first)

                nursery.start_soon(watch_signals)
            # What is left if the server itself failed (normally nothing: stop() ran).
            if host.terminals:
                log.info("disposing %d terminal(s)", len(host.terminals))
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(_exit_on_second_signal, signals, _pids(host))
                    await host.aclose()
                    nursery.cancel_scope.cancel()
    return 0


def prepare_server_process() -> None:
    """What ``serve`` sets for its whole process before its host starts (the bench's
    server worker calls it too, so what it measures is what ``serve`` runs)."""
    # Large blocks (frames, snapshots, catalogues) are returned to the system when freed
    # (ahp.engine.memory): a long-running server returns close to its baseline.
    configure_allocator()
    # The program's own objects leave the collector's full passes (ahp.engine.collector).
    freeze_startup_objects()


def _ignored(signum: signal.Signals) -> bool:
    return signal.getsignal(signum) is signal.SIG_IGN


def _pids(host: Host) -> list[int]:
    return [t.pid for t in host.terminals.values() if t.pid is not None]


def _kill_now(pids: list[int], why: str) -> None:
    """Kill these terminals' sessions (no grace any more, but no orphans)."""
    log.warning("%s again: killing %d terminal(s) and exiting at once", why, len(pids))
    for pid in pids:
        kill_session(pid, paced=False)
    kill_adopted(wait=0)  # (what detached from the terminals: this process is its subreaper)


def _exit_now(pids: list[int], why: str) -> NoReturn:
    """Kill these terminals' sessions and exit 1 (no connection is left to tell)."""
    _kill_now(pids, why)
    os._exit(1)


async def _exit_now_saying_goodbye(state: ServerState, pids: list[int], why: str) -> NoReturn:
    """Kill these terminals' sessions, close every open connection with 1001 after
    what is queued for it (:func:`~ahp.server.drain.goodbye`), waiting
    :data:`LAST_GOODBYE_TIMEOUT` seconds at most, and exit 1.

    The exit is certain: ``os._exit`` runs after the wait whatever happens to it (a
    cancellation, an error), and a timer thread runs it too if the loop cannot get
    back to this task in time (a long synchronous step elsewhere).
    """
    _kill_now(pids, why)
    backstop = threading.Timer(LAST_GOODBYE_TIMEOUT + 1.0, os._exit, (1,))
    backstop.daemon = True
    backstop.start()
    try:
        with trio.move_on_after(LAST_GOODBYE_TIMEOUT):
            await goodbye(state, LAST_GOODBYE_TIMEOUT)
    finally:
        os._exit(1)


async def _exit_on_second_signal(signals: AsyncIterator[int], pids: list[int]) -> None:
    async for signum in signals:
        _exit_now(pids, signal.Signals(signum).name)
