"""The command line: ``python -m ahp <subcommand>`` (also ``ahp-terminals``).

Why a thin module: each subcommand lives next to the layer it drives; this file
parses arguments and hands over, importing the heavy parts lazily so that
``--help`` stays fast. Errors a person can cause (an unreachable URL, a wrong
token, a busy port) are reported as one line on stderr with a non-zero exit,
never as a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Callable, Sequence

from ahp import __version__

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def _add_serve(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from ahp.server.app import DEFAULT_PORT

    p = sub.add_parser(
        "serve",
        help="run the sidecar: host terminals for AHP clients over WebSocket",
        description=(
            "Host terminals over the Agent Host Protocol. Prints one line with the connect "
            "URL (including the token) on stdout when ready; logs go to stderr."
        ),
    )
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument(
        "--port",
        type=int,
        default=DEFAULT_PORT,
        help=f"TCP port (default {DEFAULT_PORT}; 0 = any free port)",
    )
    p.add_argument(
        "--unix", metavar="PATH", help="listen on a Unix socket (mode 0600) instead of TCP"
    )
    p.add_argument("--token", help="access token (default: $AHP_TOKEN, else a random token)")
    p.add_argument(
        "--tls-cert",
        metavar="PEM",
        help="serve wss:// with this certificate chain (TCP only; the key may be in the file)",
    )
    p.add_argument("--tls-key", metavar="PEM", help="the certificate's private key")
    p.add_argument(
        "--allow-origin",
        action="append",
        default=[],
        metavar="ORIGIN",
        help="allow browser pages from this Origin (repeatable; default: refuse every Origin)",
    )
    p.add_argument("--shell", help="shell for new terminals (default: $SHELL, else /bin/sh)")
    p.add_argument("--scrollback", type=int, help="characters retained per terminal")
    p.add_argument(
        "--log-level",
        default="info",
        choices=["debug", "info", "warning", "error"],
        help="stderr log level",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m ahp",
        description="Host terminals for AI agents over the Agent Host Protocol (AHP).",
    )
    parser.add_argument("--version", action="version", version=f"ahp-terminals {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    _add_serve(sub)
    for module in _COMMAND_MODULES:
        importlib.import_module(module).add_parser(sub)
    return parser


#: Modules that contribute subcommands: each has ``add_parser(sub)`` which registers
#: its parser with ``set_defaults(handler=run)``, and ``run(args) -> int``.
_COMMAND_MODULES: tuple[str, ...] = (
    "ahp.bench.command",
    "ahp.client.commands.attach",
    "ahp.client.commands.ls",
    "ahp.client.commands.run",
    "ahp.mcp.command",
)


def _serve(args: argparse.Namespace) -> int:
    import trio

    from ahp.server.app import ServeOptions, Sidecar, run_sidecar, tls_context

    logging.basicConfig(level=args.log_level.upper(), format=LOG_FORMAT, stream=sys.stderr)
    if args.tls_key and not args.tls_cert:
        print("ahp serve: --tls-key needs --tls-cert", file=sys.stderr)
        return 2
    if args.tls_cert and args.unix:
        print(
            "ahp serve: --tls-cert is for TCP; a Unix socket is protected by its mode",
            file=sys.stderr,
        )
        return 2
    try:
        tls = tls_context(args.tls_cert, args.tls_key) if args.tls_cert else None
    except (OSError, ValueError) as exc:  # ssl.SSLError is an OSError
        print(f"ahp serve: cannot load the TLS certificate: {exc}", file=sys.stderr)
        return 2
    options = ServeOptions(
        host=args.host,
        port=args.port,
        unix=args.unix,
        token=args.token,
        allow_origins=frozenset(args.allow_origin),
        tls=tls,
    )

    def ready(sidecar: Sidecar) -> None:
        print(sidecar.url, flush=True)
        where = args.unix or f"{args.host}:{sidecar.port}"
        logging.getLogger("ahp.server").info("listening on %s", where)

    try:
        return trio.run(
            lambda: run_sidecar(
                options, shell=args.shell, scrollback=args.scrollback, on_ready=ready
            )
        )
    except OSError as exc:
        print(f"ahp serve: {exc.strerror or exc}", file=sys.stderr)
        return 1


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    if args.command == "serve":
        return _serve(args)
    handler: Callable[[argparse.Namespace], int] = args.handler
    return handler(args)
