"""``ahp-terminals attach URL TERMINAL``: use a remote terminal from this one, like ``tmux attach``.

Without a URL, the hosts are ``--host URL`` (repeated) or ``$AHP_HOSTS``:
``attach NAME`` is NAME on the only host, or on the one host of several whose
catalogue lists it (several or none: one line naming the hosts and what to type);
``attach HOST/NAME`` is NAME on that host, as ``ls --host ...`` lists them (a
TERMINAL holding a ``/`` is always HOST/NAME: a typo in a host's name never makes
a terminal elsewhere).

What happens: the terminal is subscribed (with ``--create``, created first if it does
not exist, sized like the local window, ``--cwd`` applied; without it, a name that
does not exist is an error listing the names that do, so a typo never starts a
stray shell), a one-line banner names it and the detach key, and its history —
the snapshot's VT text — is written to a cleared screen, without the terminal queries in it
(:mod:`ahp.vt.queries`: replayed, they would make the local terminal answer, and
the answers would arrive as keystrokes). Whatever the local terminal sends
before live input starts is discarded (:meth:`LocalTerminal.settle`). If the
remote process has exited, attach ends there. Then the local terminal goes into raw mode:
every keystroke (Ctrl-C and Ctrl-Z included) is sent as ``terminal/input``,
every ``terminal/data`` is written to stdout as it arrives, and local window
size changes (``SIGWINCH``) are sent as ``terminal/resized``. Any number of
people can attach to one terminal; they all see the same output.

Standard input must be a terminal to create one (``attach < /dev/null`` is refused
before anything exists on the server); an existing terminal may be fed from a pipe
(its end of input detaches).

Ending: **Ctrl-]** detaches and leaves the remote terminal running. Attach also
ends when the remote process exits (exit status: its exit code), when the
terminal is disposed or the connection is lost (status 1; a server that shuts down,
closing with 1001, is said to have), at end of input, and
on SIGTERM/SIGHUP (status 128 + signal). On every path the local terminal is
restored (termios mode, blocking mode, cursor/paste/mouse modes the remote
program may have switched on) before the one-line reason is printed on stderr.

Shell: AHP's ``createTerminal`` carries no shell, so a terminal created over the
wire runs the *server's* shell (``ahp-terminals serve --shell PATH``).
``--shell`` exists to say exactly that instead of silently ignoring it.

Buffering: output reaches stdout through :meth:`RemoteTerminal.follow`, which
queues a bounded number of envelopes; if stdout is slower than the terminal for
that long, the skipped output is announced with one line rather than buffered
without bound.
"""

from __future__ import annotations

import argparse
import codecs
import contextlib
import os
import re
import signal
import sys
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Final

import attrs
import trio

from ahp.client.commands.common import (
    CommandFailed,
    add_connection_arguments,
    add_hosts_argument,
    environment_token,
    hosts_from,
    main,
    open_client,
    printable,
    resolve_target,
    terminal_uri,
)
from ahp.client.errors import ClientError
from ahp.protocol.actions import ActionEnvelope, TerminalData, TerminalExited
from ahp.protocol.state import TERMINAL_SCHEME, ClientClaim, Snapshot, TerminalState
from ahp.vt.queries import strip_queries

if TYPE_CHECKING:
    from ahp.client.connection import Client
    from ahp.client.remote import RemoteTerminal
    from ahp.pty.localtty import LocalTerminal

__all__ = ["DETACH_KEY", "add_parser", "run"]

#: The detach key: Ctrl-] (0x1d), as telnet.
DETACH_KEY: Final = b"\x1d"
READ_SIZE: Final = 64 * 1024
#: Written before the history: home the cursor and clear the screen.
CLEAR_SCREEN: Final = "\x1b[H\x1b[2J"
#: Written when leaving: normal attributes, cursor shown, and the modes a remote
#: program may have switched on (bracketed paste, application cursor keys and keypad,
#: mouse reporting) switched off.
RESET_MODES: Final = (
    "\x1b[0m\x1b[?25h\x1b[?2004l\x1b[?1l\x1b>\x1b[?1000l\x1b[?1002l\x1b[?1003l\x1b[?1006l"
)
LEAVE_ALT_SCREEN: Final = "\x1b[?1049l"
SHELL_UNSUPPORTED: Final = (
    "--shell cannot be sent over AHP (createTerminal has no shell parameter): new terminals "
    "run the server's shell; start the server with `ahp-terminals serve --shell PATH`"
)
_ALT_SCREEN: Final = re.compile(r"\x1b\[\?(?:1049|1047|47)([hl])")


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser], help: str) -> None:
    p = sub.add_parser(
        "attach",
        help=help,
        description=(
            "Attach this terminal to a remote terminal (with --create, creating it if it does "
            "not exist): shows its history, then forwards keystrokes and output and follows "
            "window size changes. Detach with Ctrl-] (the remote terminal keeps running). Exit "
            "status: 0 after detaching; the remote process's exit code when it exits; 1 when "
            "the terminal is disposed, the connection is lost or attaching failed (one line on "
            "stderr); 128+N on signal N."
        ),
    )
    add_connection_arguments(p, optional=True)
    p.add_argument(
        "terminal",
        metavar="TERMINAL",
        help="terminal URI (ahp-terminal:/name) or bare name (meaning ahp-terminal:/name); "
        "without a URL, among the hosts of --host URL / $AHP_HOSTS: NAME on the only host, "
        "or on the one that has it; HOST/NAME on that host (host:port, or a host name only "
        "one of them has)",
    )
    add_hosts_argument(p)
    p.add_argument(
        "--create",
        action="store_true",
        help="create the terminal if it does not exist (without it, a name that does not "
        "exist is an error: a typo never starts a stray shell)",
    )
    p.add_argument(
        "--cwd",
        metavar="PATH",
        help="working directory when the terminal is created with --create (made absolute)",
    )
    p.add_argument(
        "--shell",
        metavar="PATH",
        help="not available over the wire: AHP's createTerminal has no shell parameter, so "
        "new terminals run the server's shell (`ahp-terminals serve --shell PATH`); "
        "giving --shell stops with this explanation",
    )
    p.set_defaults(handler=run)


@attrs.define
class _Outcome:
    status: int
    message: str


class _AltScreen:
    """Whether the remote program left the alternate screen on (so we switch it off)."""

    def __init__(self) -> None:
        self.active = False
        self._tail = ""

    def feed(self, data: str) -> None:
        text = self._tail + data
        for match in _ALT_SCREEN.finditer(text):
            self.active = match.group(1) == "h"
        self._tail = text[-8:]


#: Names listed at most when the terminal asked for does not exist.
MAX_NAMES_SHOWN: Final = 10


def _missing(uri: str, known: list[str], *, create: bool) -> str:
    """The one line for a terminal that does not exist (and will not be created)."""
    names = [k.removeprefix("ahp-terminal:/") for k in known]
    listed = ", ".join(names[:MAX_NAMES_SHOWN]) + (", ..." if len(names) > MAX_NAMES_SHOWN else "")
    there = f"terminals here: {listed}" if names else "the server has no terminals"
    if create:  # (but standard input is not a terminal)
        return f"no terminal {uri} ({there}); standard input is not a terminal, so none is created"
    return f"no terminal {uri} ({there}); add --create to create it"


async def _ensure_terminal(
    client: Client,
    uri: str,
    cwd: str | None,
    size: tuple[int, int] | None,
    *,
    create: bool = True,
    interactive: bool = True,
) -> bool:
    """Subscribe to ``uri``, creating it first if missing and ``create`` (and
    ``interactive``: stdin is a terminal); whether it was created.

    Raises:
        CommandFailed: it does not exist and is not to be created.
    """
    from ahp.client.connection import RpcError
    from ahp.protocol.jsonrpc import ErrorCode

    known = [t.resource for t in client.root.terminals or ()]
    if uri not in known:
        if not (create and interactive):
            raise CommandFailed(_missing(uri, known, create=create))
        cols, rows = size if size is not None else (None, None)
        try:
            await client.create_terminal(
                uri, name=uri.removeprefix("ahp-terminal:/"), cwd=cwd, cols=cols, rows=rows
            )
        except RpcError as exc:
            if exc.code != ErrorCode.ALREADY_EXISTS:  # else: someone created it just now
                raise CommandFailed(f"cannot create {uri}: {exc.message}") from None
        else:
            return True
    try:
        await client.subscribe(uri)
    except RpcError as exc:
        if exc.code == ErrorCode.NOT_FOUND:
            raise CommandFailed(f"{uri} disappeared while attaching") from None
        raise
    return False


def banner(uri: str, *, created: bool, read_only: bool = False) -> str:
    """The line shown before the history: which terminal, and how to leave it (and,
    admitted read-only, that keystrokes are not sent)."""
    if read_only:
        return (
            f"[ahp attach: watching {printable(uri)} (read-only token: keystrokes are not "
            "sent); Ctrl-] detaches]"
        )
    how = "created and attached" if created else "attached"
    return f"[ahp attach: {how} {printable(uri)}; Ctrl-] detaches, it keeps running]"


async def _show_history(
    remote: RemoteTerminal,
    local: LocalTerminal,
    stream: AsyncIterator[Snapshot | ActionEnvelope],
    *,
    created: bool = False,
    read_only: bool = False,
) -> tuple[str, bytes]:
    """Draw the banner and the history (queries removed); settle the terminal.
    ``(history, typed ahead)``."""
    first = await stream.__anext__()
    assert isinstance(first, Snapshot)
    state = first.state
    history = strip_queries(state.text()) if isinstance(state, TerminalState) else ""
    is_tty = os.isatty(local.output_fd)
    live = isinstance(state, TerminalState) and not state.exited
    shown = banner(remote.uri, created=created, read_only=read_only)
    head = CLEAR_SCREEN + (shown + "\r\n" if live else "")
    await local.stdout.send_all(((head if is_tty else "") + history).encode("utf-8", "replace"))
    typed = b""
    if is_tty and local.is_terminal:
        # Anything the terminal says before live input starts is not a keystroke.
        typed = await local.settle()
    return history, typed


#: Seconds a detach waits for the server to take back the claim of a terminal it created.
GIVE_BACK_WAIT: Final = 2.0


async def _give_back(client: Client, remote: RemoteTerminal) -> None:
    """A terminal this attach created is claimed by its connection, whose clientId goes
    with it: detached, the claim is given back (unheld), so that its owner, or anyone,
    can ``rm`` it or take it (it was refused for the 5 minutes the server keeps a gone
    client's claim). Within :data:`GIVE_BACK_WAIT`; nothing when the terminal is gone or
    held by someone else now."""
    with trio.move_on_after(GIVE_BACK_WAIT), contextlib.suppress(ClientError, trio.TooSlowError):
        if not client.connected or remote.uri not in client.mirrors:
            return
        claim = remote.state.claim
        if isinstance(claim, ClientClaim) and claim.clientId == client.client_id:
            await remote.set_claim(ClientClaim(clientId=""))


async def _session(
    client: Client,
    uri: str,
    local: LocalTerminal,
    signals: AsyncIterator[int] | None,
    *,
    created: bool = False,
) -> _Outcome:
    """Forward both ways until detach, exit, disposal, lost connection or a signal."""
    remote = client.terminal(uri)
    is_tty = os.isatty(local.output_fd)
    outcome: _Outcome | None = None
    alt = _AltScreen()

    async def write(text: str) -> None:
        await local.stdout.send_all(text.encode("utf-8", "replace"))

    stream = remote.follow()
    try:
        history, typed = await _show_history(
            remote, local, stream, created=created, read_only=client.read_only
        )
        alt.feed(history)
        if remote.state.exited:
            # No live input: the process is gone (keys would go nowhere).
            code = remote.state.exitCode
            outcome = _Outcome(
                0 if code is None else code % 256,
                f"{uri} has exited" + ("" if code is None else f" (code {code})"),
            )
        else:
            async with trio.open_nursery() as nursery:

                def finish(status: int, message: str) -> None:
                    nonlocal outcome
                    if outcome is None:
                        outcome = _Outcome(status, message)
                    nursery.cancel_scope.cancel()

                async def output() -> None:
                    async for item in stream:
                        if isinstance(item, Snapshot):
                            await write("\r\n[ahp attach: output skipped while catching up]\r\n")
                            if remote.state.exited:
                                code = remote.state.exitCode
                                finish(
                                    0 if code is None else code % 256,
                                    f"{uri} has exited"
                                    + ("" if code is None else f" (code {code})"),
                                )
                            continue
                        action = item.action
                        if isinstance(action, TerminalData):
                            alt.feed(action.data)
                            await write(action.data)
                        elif isinstance(action, TerminalExited):
                            code = action.exitCode
                            finish(
                                0 if code is None else code % 256,
                                f"{uri} exited" + ("" if code is None else f" with code {code}"),
                            )

                async def keystrokes() -> None:
                    decoder = codecs.getincrementaldecoder("utf-8")("replace")
                    chunk = typed
                    while True:
                        if not chunk:
                            chunk = await local.stdin.receive_some(READ_SIZE)
                        if not chunk:
                            text = decoder.decode(b"", final=True)
                            if text:
                                await remote.send_input(text)
                            finish(0, f"end of input: detached from {uri}; it keeps running")
                            return
                        cut = chunk.find(DETACH_KEY)
                        text = decoder.decode(chunk if cut < 0 else chunk[:cut], final=cut >= 0)
                        if text and not client.read_only:  # (read-only: refused anyway)
                            await remote.send_input(text)
                        if cut >= 0:
                            finish(0, f"detached from {uri}; it keeps running")
                            return
                        chunk = b""

                async def window() -> None:
                    state = remote.state
                    await local.follow_window_size(remote.resize, known=(state.cols, state.rows))

                async def gone() -> None:
                    def listed() -> bool:
                        return any(t.resource == uri for t in client.root.terminals or ())

                    await client.wait_for(lambda: listed() or not client.connected)
                    await client.wait_for(lambda: not listed() or not client.connected)
                    if not client.connected and client.server_shut_down:
                        finish(1, "the server shut down (1001 going away)")
                    elif not client.connected:
                        finish(1, "connection lost")
                    else:
                        finish(1, f"{uri} was disposed")

                async def exit_signals() -> None:
                    if signals is None:
                        return
                    async for signum in signals:
                        name = signal.Signals(signum).name
                        finish(128 + signum, f"{name}: detached from {uri}; it keeps running")
                        return

                nursery.start_soon(output)
                nursery.start_soon(keystrokes)
                if local.size() is not None:
                    nursery.start_soon(window)
                nursery.start_soon(gone)
                nursery.start_soon(exit_signals)
            if created:
                await _give_back(client, remote)
    finally:
        with trio.CancelScope(shield=True):
            await stream.aclose()

    if is_tty:
        # (The local terminal may be gone already: SIGHUP, EIO.)
        with (
            trio.CancelScope(shield=True),
            trio.move_on_after(2),
            contextlib.suppress(OSError, trio.BrokenResourceError),
        ):
            await write(RESET_MODES + (LEAVE_ALT_SCREEN if alt.active else "") + "\r\n")
    assert outcome is not None
    return outcome


async def _target(args: argparse.Namespace) -> tuple[str, str]:
    """``(URL, terminal)``: as given; else among the hosts (``--host``, ``$AHP_HOSTS``):
    ``HOST/NAME`` on that host, a bare name (or URI) on the only host, or on the one
    host of several that has it (:func:`_find_host`)."""
    if args.url is not None:
        return args.url, args.terminal
    from ahp.client.fleet import select_host

    urls = list(dict.fromkeys(hosts_from(args)))  # (the same URL twice: one host)
    name = args.terminal
    if not urls:
        raise CommandFailed(
            f"no URL given: attach URL {name} (the URL `ahp-terminals serve` prints first), "
            "or give the hosts with --host URL or $AHP_HOSTS"
        )
    if not name.startswith(TERMINAL_SCHEME) and "/" in name:
        host, _, rest = name.partition("/")
        if not host or not rest:
            raise CommandFailed(f"{name!r} is neither a terminal name nor HOST/NAME")
        try:
            return select_host(urls, host), rest
        except LookupError as exc:
            raise CommandFailed(
                f"{exc.args[0]} (a TERMINAL with a / is HOST/NAME; a name alone is looked "
                "for on every host)"
            ) from None
    if len(urls) == 1:
        return urls[0], name
    return await _find_host(urls, name, args.token, create=args.create)


async def _find_host(
    urls: list[str], name: str, token: str | None, *, create: bool
) -> tuple[str, str]:
    """The URL of the one host among ``urls`` whose catalogue has ``name``, and the
    name. Every host is connected to once, at the same time, and the connections are
    closed before this returns (attach then opens its own). :class:`CommandFailed`
    when no host has it, or several do (saying which, and what to type), or the hosts
    cannot be listed together."""
    from ahp.client.fleet import connect_many, host_label

    uri = terminal_uri(name)
    labels = {host_label(url): url for url in urls}
    try:
        async with connect_many(
            urls, token=token or environment_token(), retry=False, auto_reconnect=False
        ) as fleet:
            found = [t.host for t in fleet.terminals() if t.uri == uri]
            down = fleet.down()
    except ValueError as exc:  # (two URLs of one host; too many hosts)
        raise CommandFailed(str(exc)) from None
    short = uri.removeprefix(TERMINAL_SCHEME + "/")
    if len(found) == 1:
        return labels[found[0]], name
    if found:
        where = ", ".join(found)
        raise CommandFailed(
            f"{uri} is on several hosts ({where}): say which, as HOST/NAME: {found[0]}/{short}"
        )
    unreachable = f"; not reached: {', '.join(down)}" if down else ""
    to_create = (
        f"; --create needs the host: HOST/{short} (hosts: {', '.join(labels)})" if create else ""
    )
    searched = ", ".join(label for label in labels if label not in down) or "none"
    raise CommandFailed(f"no terminal {uri} on the hosts ({searched}){unreachable}{to_create}")


def run(args: argparse.Namespace) -> int:
    cwd = os.path.abspath(args.cwd) if args.cwd is not None else None

    async def body() -> int:
        from ahp.pty.localtty import exit_signal_receiver, open_local_terminal, window_size

        if args.shell is not None:
            raise CommandFailed(SHELL_UNSUPPORTED)
        url_given, name = await _target(args)
        uri = terminal_uri(name)
        url, token = resolve_target(url_given, args.token)
        with exit_signal_receiver() as signals:
            async with open_client(url, token) as client:
                created = await _ensure_terminal(
                    client,
                    uri,
                    cwd,
                    window_size(1) or window_size(0),
                    create=args.create,
                    interactive=os.isatty(0),
                )
                async with open_local_terminal() as local:
                    outcome = await _session(client, uri, local, signals, created=created)
        print(f"ahp-terminals attach: {printable(outcome.message)}", file=sys.stderr, flush=True)
        return outcome.status

    return main("ahp-terminals attach", body)
