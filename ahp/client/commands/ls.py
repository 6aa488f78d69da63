"""``python -m ahp ls URL``: the server's terminal catalogue, as a table or JSON.

The catalogue is the root channel's ``terminals`` list (what every AHP client
sees): URI, title, claim, and the exit code once the process has exited. A
client claim whose holder is gone for good is released by the server (see
``Session._release_forgotten_claims``), so it shows as ``-``.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from ahp.client.commands.common import add_connection_arguments, main, open_client, resolve_target
from ahp.protocol.state import ClientClaim, TerminalClaim, TerminalInfo

__all__ = ["add_parser", "claim_text", "format_table", "run", "to_json"]


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "ls",
        help="list the terminals of a server",
        description=(
            "List the server's terminals: URI, title, claim (client:ID, session:ID, or - "
            "when unclaimed) and status (running, or exited N). A client's claim is "
            "released once the server has forgotten that client (5 minutes after it "
            "disconnected, when it can no longer reconnect). Exit status 0, or 1 with one "
            "line on stderr when the server cannot be reached or refuses the token."
        ),
    )
    add_connection_arguments(p)
    p.add_argument(
        "--json",
        action="store_true",
        help="print a JSON array of {uri, title, claim, running, exitCode} objects",
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


def format_table(terminals: tuple[TerminalInfo, ...]) -> str:
    """The catalogue as aligned columns, with a header line."""
    rows = [("URI", "TITLE", "CLAIM", "STATUS")]
    rows += [(t.resource, t.title, claim_text(t.claim), _status(t)) for t in terminals]
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row[:3], widths, strict=True))
        + "  "
        + row[3]
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


def run(args: argparse.Namespace) -> int:
    async def body() -> int:
        url, token = resolve_target(args.url, args.token)
        async with open_client(url, token) as client:
            terminals = client.root.terminals or ()
        if args.json:
            print(json.dumps(to_json(terminals), indent=2))
        else:
            print(format_table(terminals))
        return 0

    return main("ahp ls", body)
