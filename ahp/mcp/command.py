"""``ahp-terminals mcp``: the MCP server's command line.

Why a module of its own: the subcommand registers itself like the client's
commands (``add_parser`` + ``run``, listed in ``ahp.cli``), and the MCP SDK is
imported only when the command runs, so ``--help`` and the other commands stay
fast and work without it. Errors a person can cause (an unreachable
``--connect`` URL, a busy ``--port``, the SDK not installed) are one line on
stderr and exit status 1 or 2.

``--serve`` listens on a free port unless ``--port`` names one (two agent
sessions each start their own server from the same configuration), and the
URL it took goes to stderr with the ``attach`` command to watch, spelled the way
this process was started (the console script's full path, or this Python's
``-m ahp``), so that the hint works in a venv that is not on ``PATH``.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from typing import Final

from ahp.printable import configure_logging

__all__ = ["add_parser", "run"]


#: How to install the SDK from this checkout (the package is not on a package index).
INSTALL_HINT: Final = "pip install '.[mcp]' in the ahp-terminals checkout (or pip install mcp)"


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser], help: str) -> None:
    p = sub.add_parser(
        "mcp",
        help=help,
        description=(
            "An MCP server on stdin/stdout whose tools run commands in terminals: run, read "
            "new output, wait, send input and keys, interrupt, kill, list, screen, create, "
            "close. By default it hosts its own terminals; --serve also serves them over AHP "
            "so a person can `ahp-terminals attach` and watch; --connect drives the terminals "
            "of a running `ahp-terminals serve` instead. Logs go to stderr."
        ),
    )
    source = p.add_mutually_exclusive_group()
    source.add_argument(
        "--connect",
        metavar="URL",
        action="append",
        help="use the terminals of this sidecar (ws://HOST:PORT/?tkn=…, as `serve` prints); "
        "repeat it to use several sidecars at once (their terminals are named "
        "ahp-terminal:/HOST:PORT/NAME but for the first one's)",
    )
    source.add_argument(
        "--serve",
        action="store_true",
        help="also serve the terminals over AHP (the URL is printed on stderr)",
    )
    p.add_argument(
        "--token",
        help="AHP token: for --connect (default: the URL's tkn, else the content of the file "
        "$AHP_TOKEN_FILE names, else $AHP_TOKEN) or for "
        "--serve (default: $AHP_TOKEN, else random)",
    )
    p.add_argument("--host", default="127.0.0.1", help="--serve: address to bind (127.0.0.1)")
    p.add_argument(
        "--port",
        type=int,
        default=0,
        help="--serve: TCP port (default: a free one, printed on stderr)",
    )
    p.add_argument("--unix", metavar="PATH", help="--serve: listen on a Unix socket (mode 0600)")
    p.add_argument(
        "--cwd",
        metavar="PATH",
        help="where new terminals start (default: the current directory; with --connect: "
        "the sidecar's default)",
    )
    p.add_argument("--shell", help="shell for new terminals (default: $SHELL, else /bin/sh)")
    p.add_argument("--scrollback", type=int, help="characters retained per terminal")
    p.add_argument(
        "--structured",
        action="store_true",
        help="answer with structuredContent and output schemas (for programs), with only "
        "a one-line text; default: the answer as text alone (what every client gives a model)",
    )
    p.add_argument(
        "--log-level",
        default="warning",
        choices=["debug", "info", "warning", "error"],
        help="stderr log level (default warning)",
    )
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    if importlib.util.find_spec("mcp") is None:
        print(f"ahp-terminals mcp: the MCP SDK is not installed: {INSTALL_HINT}", file=sys.stderr)
        return 2
    configure_logging(args.log_level, "%(asctime)s %(levelname)s %(name)s: %(message)s")
    from ahp.client.commands.common import environment_token, main, resolve_target
    from ahp.mcp.server import McpOptions, run_mcp
    from ahp.server.app import ServeOptions, Sidecar

    def serving(sidecar: Sidecar) -> None:
        print(
            f"ahp-terminals mcp: terminals served at {sidecar.url}\n"
            f"ahp-terminals mcp: watch with: {invocation()} attach '{sidecar.url}' main",
            file=sys.stderr,
            flush=True,
        )

    cwd = os.path.abspath(args.cwd) if args.cwd is not None else None

    async def body() -> int:
        if args.connect is not None and len(args.connect) > 1:
            urls = tuple(resolve_target(u, None)[0] for u in args.connect)
            options = McpOptions(
                connect_many=urls,
                token=args.token or environment_token(),
                cwd=cwd,
                structured=args.structured,
            )
        elif args.connect is not None:
            url, token = resolve_target(args.connect[0], args.token)
            options = McpOptions(connect=url, token=token, cwd=cwd, structured=args.structured)
        else:
            serve = None
            if args.serve:
                serve = ServeOptions(
                    host=args.host, port=args.port, unix=args.unix, token=args.token
                )
            options = McpOptions(
                serve=serve,
                shell=args.shell,
                scrollback=args.scrollback,
                cwd=cwd or os.getcwd(),
                on_serving=serving,
                structured=args.structured,
            )
        return await run_mcp(options)

    return main("ahp-terminals mcp", body)


def invocation() -> str:
    """How to start this program again, as a shell word or two that work here: the
    console script's absolute path, else this Python with ``-m ahp``."""
    import shlex

    script = sys.argv[0] if sys.argv else ""
    name = os.path.basename(script)
    if name and name != "__main__.py" and not name.endswith(".py") and os.path.exists(script):
        return shlex.quote(os.path.abspath(script))
    return f"{shlex.quote(sys.executable)} -m ahp"
