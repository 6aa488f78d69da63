"""``ahp-terminals rm URL TERMINAL…``: close terminals (``disposeTerminal``), like ``docker rm``.

Why a command: without it, a terminal left by an agent or by ``attach`` could
only be closed from a program or by stopping the server. Disposing ends the
terminal's process (hang-up, then a kill after a grace period, on the server)
and removes it from the catalogue for every client.

Each TERMINAL is a name or ``ahp-terminal:`` URI; they are disposed one after
the other and each is reported: one line on stdout per terminal closed, one on
stderr per terminal that could not be (unknown, or refused by the server).
Exit status: 0 when every one was closed, 1 otherwise (or when the server
cannot be reached).
"""

from __future__ import annotations

import argparse
import sys

from ahp.client.commands.common import (
    add_connection_arguments,
    main,
    open_client,
    printable,
    resolve_target,
    terminal_uri,
)

__all__ = ["add_parser", "run"]


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser], help: str) -> None:
    p = sub.add_parser(
        "rm",
        help=help,
        description=(
            "Close terminals: each one's process is ended (hang-up, then killed after a "
            "grace period) and it leaves the catalogue. Prints one line per terminal "
            "closed; an unknown terminal is reported on stderr. Exit status 0 when every "
            "terminal was closed, else 1."
        ),
    )
    add_connection_arguments(p)
    p.add_argument(
        "terminals",
        nargs="+",
        metavar="TERMINAL",
        help="terminal URI (ahp-terminal:/name) or bare name",
    )
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    async def body() -> int:
        from ahp.client.connection import RpcError
        from ahp.protocol.jsonrpc import ErrorCode

        uris = [terminal_uri(name) for name in args.terminals]
        url, token = resolve_target(args.url, args.token)
        status = 0
        async with open_client(url, token) as client:
            for uri in dict.fromkeys(uris):
                try:
                    await client.dispose_terminal(uri)
                except RpcError as exc:
                    status = 1
                    why = "no such terminal" if exc.code == ErrorCode.NOT_FOUND else exc.message
                    print(
                        f"ahp-terminals rm: {printable(uri)}: {printable(why)}",
                        file=sys.stderr,
                        flush=True,
                    )
                else:
                    print(f"closed {printable(uri)}", flush=True)
        return status

    return main("ahp-terminals rm", body)
