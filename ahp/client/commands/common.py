"""What ``attach``, ``ls`` and ``run`` share: URL, token, connecting, one-line errors.

Token precedence: ``--token``, else the URL's ``tkn`` query parameter, else the
content of the file ``$AHP_TOKEN_FILE`` names, else ``$AHP_TOKEN`` (as ``serve``
takes its token: a file and ``$AHP_TOKEN`` both set is refused, and the file is read
by the same rules, :func:`ahp.tokenfile.read_token_file`). Connecting is bounded by
:data:`CONNECT_TIMEOUT` (an unreachable address that drops packets would otherwise
hang), and the client is opened without automatic reconnect: a person's command
reports a lost connection instead of waiting for a server that may never come back. ``run`` is
the exception (``open_client(..., reconnect=True)``): a command it started runs
on in the remote terminal whatever happens to the connection, so ``run``
reconnects for a bounded time to follow it, and to dispose a terminal it created.

Errors: :func:`main` runs a command under ``trio.run`` and turns every failure a
person can cause — a malformed URL, an unreachable or refusing server, an
unknown terminal, a lost connection, a server that shut down (1001: its terminals
are ended, so no reconnect is waited for) — into one line on stderr and the
command's failure status. Trio nurseries raise exception groups (strict mode), so the
leaves of a group are examined, never its repr. Anything else is a bug and keeps
its traceback.

Printing what a server sent: every name, id, title, URI or message from a server
that a command prints for a person (tables, status and error lines, not the
terminal output it exists to show, nor ``--json``, whose escaping is safe) goes
through :func:`printable`, which makes its control characters visible: a client
can set a ``clientId`` or a terminal name holding ``ESC ] 52`` (write the
clipboard), a title change or colours, and the operator's terminal would obey.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Final
from urllib.parse import parse_qs, urlsplit

import trio

from ahp.printable import printable
from ahp.protocol.state import TERMINAL_SCHEME

if TYPE_CHECKING:
    from ahp.client.connection import Client

__all__ = [
    "CONNECT_TIMEOUT",
    "CONNECT_URL_HINT",
    "MAX_ERROR_LINE",
    "REQUEST_TIMEOUT",
    "SERVER_SHUT_DOWN",
    "CommandFailed",
    "add_connection_arguments",
    "environment_token",
    "add_hosts_argument",
    "hosts_from",
    "malformed_url",
    "main",
    "open_client",
    "printable",
    "resolve_target",
    "terminal_uri",
]

#: Seconds allowed for TCP connect + WebSocket upgrade + ``initialize``.
CONNECT_TIMEOUT: Final = 15.0
#: Characters of an error line printed (a server's error message is its own choice:
#: a 10 MB one was printed whole); the rest is counted.
MAX_ERROR_LINE: Final = 2000
#: Seconds a command's request (create, subscribe, dispose, exec...) may wait for its
#: answer: a server that answers ``initialize`` and then nothing ends the command with
#: an error instead of holding it forever. Waiting for a command to finish is not a
#: request and is not bounded by this.
REQUEST_TIMEOUT: Final = 30.0
#: What a command's URL is, said after a URL it cannot use.
CONNECT_URL_HINT: Final = (
    "give the connect URL, the first line `ahp-terminals serve` prints: "
    "ws://HOST:PORT/?tkn=TOKEN (wss:// with --tls-cert, ws+unix://PATH:/?tkn=TOKEN with --unix)"
)


#: The line for a server that closed the connection with 1001 ``going away``: ``serve``
#: shutting down (SIGTERM after its drain, SIGINT) ends its terminals and their commands.
SERVER_SHUT_DOWN: Final = (
    "the server shut down (1001 going away): it ended its terminals, and the command in them"
)


class CommandFailed(Exception):
    """A failure to report to the person as one line (the exception's message)."""


def add_connection_arguments(p: argparse.ArgumentParser, *, optional: bool = False) -> None:
    """``URL`` and ``--token``; ``optional``: the URL may be left out (``--host`` given)."""
    p.add_argument(
        "url",
        metavar="URL",
        nargs="?" if optional else None,
        help="the server's URL, as printed by `ahp-terminals serve`",
    )
    p.add_argument(
        "--token",
        help="access token (default: the URL's tkn parameter, else the content of the file "
        "$AHP_TOKEN_FILE names, else $AHP_TOKEN)",
    )


def add_hosts_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--host",
        action="append",
        default=[],
        metavar="URL",
        dest="hosts",
        help="a server's URL; repeat it for several servers at once (default: $AHP_HOSTS, "
        "URLs separated by commas or spaces)",
    )


def hosts_from(args: argparse.Namespace) -> list[str]:
    """The ``--host`` URLs, else ``$AHP_HOSTS``'s; each checked (:class:`CommandFailed`)."""
    from ahp.client.fleet import split_hosts

    urls = list(args.hosts) or split_hosts(os.environ.get("AHP_HOSTS", ""))
    for url in urls:
        if _url_problem(url) is not None:
            raise malformed_url(url)
    return urls


def _url_problem(url: str) -> str | None:
    """Why ``url`` cannot be an AHP server URL, or None."""
    try:
        parts = urlsplit(url)
        port_ok = parts.port is None or parts.port >= 0  # raises ValueError when malformed
    except ValueError:
        return "bad port"
    if parts.scheme in ("ws", "wss"):
        return None if parts.hostname and port_ok else "no host"
    if parts.scheme == "ws+unix":
        return None if parts.netloc.partition(":")[0] or parts.path else "no socket path"
    return "not a ws:// URL"


def resolve_target(url: str, token: str | None) -> tuple[str, str | None]:
    """Check ``url`` and pick the token: ``(url, token)``; :class:`CommandFailed` if malformed."""
    if _url_problem(url) is not None:
        raise malformed_url(url)
    in_url = parse_qs(urlsplit(url).query).get("tkn", [""])[0]
    return url, token or in_url or environment_token()


_TOKEN_IN_URL: Final = re.compile(r"(?i)\b(tkn|ro)=[^&#\s]*")


def malformed_url(url: str) -> CommandFailed:
    """The one line for a URL a command cannot use: the URL it takes (the connect URL
    ``serve`` prints first) and, for the viewer page's address (``http://HOST:PORT/``,
    with ``#tkn=`` or ``#ro=``, as ``serve`` prints it or the address bar shows it), how
    to make that URL from it. A token in ``url`` is shown as ``…``: an error line goes
    to logs and screens."""
    shown = _TOKEN_IN_URL.sub(r"\1=…", url)
    try:
        parts = urlsplit(url)
        viewer = parts.scheme.lower() in ("http", "https") and bool(parts.hostname)
    except ValueError:
        viewer = False
    if not viewer:
        return CommandFailed(f"malformed URL {shown!r}: {CONNECT_URL_HINT}")
    host = parts.netloc.rpartition("@")[2]
    ws = "wss" if parts.scheme.lower() == "https" else "ws"
    fragment = parse_qs(parts.fragment)
    token, how = "TOKEN", " and ?tkn=TOKEN added"
    if "tkn" in fragment:
        how = ", ?tkn= for #tkn="
    elif "ro" in fragment:  # (the read-only token: such a client only watches)
        token, how = "READ-ONLY-TOKEN", ", ?tkn= for #ro=; it only watches"
    return CommandFailed(
        f"{shown!r} is the viewer page's address; this command takes the connect URL, the "
        f"first line `ahp-terminals serve` prints: {ws}://{host}/?tkn={token} (the page's "
        f"address with {ws}:// for {parts.scheme}://{how})"
    )


def environment_token() -> str | None:
    """The token in the file ``$AHP_TOKEN_FILE`` names, else ``$AHP_TOKEN``, else None
    (``serve``'s order). Raises :class:`CommandFailed` when both are set or the file
    cannot serve (one line, never the file's content)."""
    from ahp.tokenfile import TokenFileError
    from ahp.tokenfile import environment_token as read_environment

    try:
        return read_environment(os.environ)
    except TokenFileError as exc:
        raise CommandFailed(str(exc)) from None


def terminal_uri(name: str) -> str:
    """``ahp-terminal:/name`` for a bare name; a terminal URI is returned as is."""
    uri = name if name.startswith(TERMINAL_SCHEME) else f"{TERMINAL_SCHEME}/{name.lstrip('/')}"
    if len(uri) <= len(TERMINAL_SCHEME) + 1 or any(ord(c) < 32 or c == "\x7f" for c in uri):
        raise CommandFailed(f"not a terminal name or URI: {name!r}")
    return uri


@asynccontextmanager
async def open_client(
    url: str, token: str | None, *, timeout: float = CONNECT_TIMEOUT, reconnect: bool = False
) -> AsyncIterator[Client]:
    """:func:`ahp.client.connect`, without auto-reconnect unless ``reconnect`` (the
    caller then bounds how long it waits for one); connecting and its handshake are
    each bounded by ``timeout``, every request by :data:`REQUEST_TIMEOUT` (a
    :class:`ClientError` past either)."""
    from ahp.client.connection import connect

    async with connect(
        url,
        token=token,
        auto_reconnect=reconnect,
        connect_timeout=timeout,
        request_timeout=REQUEST_TIMEOUT,
    ) as client:
        yield client


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in _leaves(inner)]
    return [exc]


def _describe(exc: BaseException) -> str | None:
    """The one line for an exception a person can cause, or None (a bug: re-raise)."""
    from ahp.client.connection import ClientError, ConnectionLost, RpcError, ServerShutDown
    from ahp.protocol.codec import ProtocolError
    from ahp.ws import ConnectionClosed

    if isinstance(exc, CommandFailed):
        return str(exc)
    if isinstance(exc, ServerShutDown):
        return SERVER_SHUT_DOWN
    if isinstance(exc, ConnectionLost):
        return f"connection lost: {exc}"
    if isinstance(exc, RpcError):
        return f"the server refused: {exc.message} ({exc.code})"
    if isinstance(exc, ClientError):
        text = str(exc)
        if "HTTP 403" in text:
            text += " (check --token, the URL's tkn, $AHP_TOKEN_FILE or $AHP_TOKEN)"
        return text
    if isinstance(exc, ConnectionClosed):
        return "the server closed the connection"
    if isinstance(exc, ProtocolError):
        return f"the server does not speak AHP: {exc.message}"
    if isinstance(exc, trio.TooSlowError):
        return "timed out"
    if isinstance(exc, OSError):
        return exc.strerror or str(exc)
    return None


def main(prog: str, body: Callable[[], Awaitable[int]], *, failure: int = 1) -> int:
    """``trio.run(body)``; a person's error becomes one stderr line and ``failure``."""
    try:
        return trio.run(body)
    except BaseException as exc:
        leaves = _leaves(exc)
        if any(isinstance(leaf, KeyboardInterrupt) for leaf in leaves):
            return 130
        if any(isinstance(leaf, BrokenPipeError) for leaf in leaves):
            raise BrokenPipeError from exc  # standard output's reader left: ahp.cli ends quietly
        for leaf in leaves:
            line = _describe(leaf)
            if line is not None:
                if len(line) > MAX_ERROR_LINE:  # (a server's message: it chose its length)
                    line = f"{line[:MAX_ERROR_LINE]}… ({len(line)} characters)"
                print(f"{prog}: {printable(line)}", file=sys.stderr, flush=True)
                return failure
        raise
