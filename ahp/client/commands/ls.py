"""``ahp-terminals ls URL``: the server's terminal catalogue, as a table or JSON.

With ``--host URL`` (repeatable) or ``$AHP_HOSTS``, the catalogues of several
servers at once (:func:`ahp.client.connect_many`), with a HOST column (the
host's ``host:port``): a server that cannot be reached is one line on stderr,
the others are listed all the same, and the exit status is then 1.

The catalogue is the root channel's ``terminals`` list (what every AHP client
sees): URI, title, claim, and the exit code once the process has exited. A
client claim whose holder is gone for good is released by the server (see
``ahp.server.identity.release_forgotten_claims``), so it shows as ``-``.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

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
)
from ahp.protocol.state import ClientClaim, TerminalClaim, TerminalInfo

__all__ = ["add_parser", "claim_text", "format_table", "run", "to_json"]


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser], help: str) -> None:
    p = sub.add_parser(
        "ls",
        help=help,
        description=(
            "List the server's terminals: URI, title, claim (client:ID, session:ID, or - "
            "when unclaimed) and status (running, or exited N). A client's claim is "
            "released once the server has forgotten that client (5 minutes after it "
            "disconnected, when it can no longer reconnect). Exit status 0, or 1 with one "
            "line on stderr when the server cannot be reached or refuses the token."
        ),
    )
    add_connection_arguments(p, optional=True)
    add_hosts_argument(p)
    p.add_argument(
        "--json",
        action="store_true",
        help="print a JSON array of {uri, title, claim, running, exitCode} objects "
        "(with hosts: and host)",
    )
    p.set_defaults(handler=run)


def claim_text(claim: TerminalClaim) -> str:
    if isinstance(claim, ClientClaim):
        return f"client:{claim.clientId}" if claim.clientId else "-"
    text = f"session:{claim.session}"
    for part in (claim.turnId, claim.toolCallId):
        if part:
            text += f"/{part}"
    return text


def _status(info: TerminalInfo) -> str:
    if not info.exited:
        return "running"
    return "exited" if info.exitCode is None else f"exited {info.exitCode}"


def format_table(terminals: tuple[TerminalInfo, ...], hosts: tuple[str, ...] | None = None) -> str:
    """The catalogue as aligned columns, with a header line; with ``hosts`` (one per
    terminal), a HOST column first. Every cell goes through :func:`printable` (a
    clientId, a title or a URI is whatever a client sent)."""
    rows: list[tuple[str, ...]] = [("URI", "TITLE", "CLAIM", "STATUS")]
    rows += [(t.resource, t.title, claim_text(t.claim), _status(t)) for t in terminals]
    if hosts is not None:
        rows = [(host, *row) for host, row in zip(("HOST", *hosts), rows, strict=True)]
    rows = [tuple(printable(cell) for cell in row) for row in rows]  # the server's strings
    last = len(rows[0]) - 1
    widths = [max(len(row[i]) for row in rows) for i in range(last)]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row[:last], widths, strict=True))
        + "  "
        + row[last]
        for row in rows
    )


def to_json(terminals: tuple[TerminalInfo, ...]) -> list[dict[str, Any]]:
    from ahp.protocol.codec import unstructure

    return [
        {
            "uri": t.resource,
            "title": t.title,
            "claim": unstructure(t.claim, TerminalClaim),
            "running": not t.exited,
            "exitCode": t.exitCode,
        }
        for t in terminals
    ]


def _hosts_problem(urls: list[str]) -> str | None:
    """Why ``urls`` cannot be listed together (the fleet's own rules, said in one line)."""
    from ahp.client.fleet import MAX_HOSTS, host_label

    if len(urls) > MAX_HOSTS:
        return f"{len(urls)} hosts: ls lists at most {MAX_HOSTS} at once"
    seen: set[str] = set()
    for url in urls:
        label = host_label(url)
        if label in seen:
            return f"two URLs name the host {printable(label)}: give each host once"
        seen.add(label)
    return None


def _list_hosts(urls: list[str], token: str | None, as_json: bool) -> int:
    """Several servers at once (see the module docstring)."""
    import sys

    from ahp.client.fleet import connect_many

    async def body() -> int:
        async with connect_many(urls, token=token, retry=False, auto_reconnect=False) as fleet:
            found = fleet.terminals()
            down = fleet.down()
        if as_json:
            rows = to_json(tuple(t.info for t in found))
            print(
                json.dumps(
                    [{"host": t.host, **row} for t, row in zip(found, rows, strict=True)], indent=2
                )
            )
        else:
            print(format_table(tuple(t.info for t in found), tuple(t.host for t in found)))
        for host, why in down.items():
            print(f"ahp-terminals ls: {printable(host)}: {printable(why)}", file=sys.stderr)
        return 1 if down else 0

    return main("ahp-terminals ls", body)


def run(args: argparse.Namespace) -> int:
    if args.url is None or args.hosts:
        try:
            urls = ([args.url] if args.url else []) + hosts_from(args)
        except CommandFailed as exc:
            return main("ahp-terminals ls", _fail(exc))
        if not urls:
            return main(
                "ahp-terminals ls", _fail(CommandFailed("give a URL, --host URL or $AHP_HOSTS"))
            )
        urls = list(dict.fromkeys(urls))  # (the same URL twice: listed once)
        problem = _hosts_problem(urls)
        if problem is not None:
            return main("ahp-terminals ls", _fail(CommandFailed(problem)))
        # (A URL's own tkn is used for it; the others get --token, else the token
        # file's, else $AHP_TOKEN.)
        try:
            token = args.token or environment_token()
        except CommandFailed as exc:
            return main("ahp-terminals ls", _fail(exc))
        return _list_hosts(urls, token, args.json)

    async def body() -> int:
        url, token = resolve_target(args.url, args.token)
        async with open_client(url, token) as client:
            terminals = client.root.terminals or ()
        if args.json:
            print(json.dumps(to_json(terminals), indent=2))
        else:
            print(format_table(terminals))
        return 0

    return main("ahp-terminals ls", body)


def _fail(exc: CommandFailed) -> Any:
    async def body() -> int:
        raise exc

    return body
