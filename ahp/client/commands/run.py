"""``python -m ahp run URL -- COMMAND…``: one command in a remote terminal, like ``ssh host cmd``.

The command runs in a new terminal (created for it and disposed afterwards) or,
with ``--terminal NAME``, in an existing one (left running). It is typed into
the terminal's shell through :meth:`ahp.client.RemoteTerminal.run`, so a single
argument is a shell command line (``run URL -- 'make && ./a.out'``) and several
arguments are quoted into one (``run URL -- sh -c 'echo hi; exit 3'``).

Exit status: the command's exit code; :data:`TIMED_OUT` (124, as ``timeout(1)``)
when ``--timeout`` expired and the command was interrupted; :data:`FAILED`
(125) when ``run`` itself failed (bad URL, refused token, unknown terminal, lost
connection, exit code unknown) — with one line on stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shlex
import sys
from typing import Final

import attrs
import trio

from ahp.client.commands.common import (
    CommandFailed,
    main,
    open_client,
    resolve_target,
    terminal_uri,
)
from ahp.run import DEFAULT_MAX_OUTPUT, CommandResult, run_command

__all__ = ["FAILED", "TIMED_OUT", "add_parser", "command_line", "exit_status", "run"]

TIMED_OUT: Final = 124
FAILED: Final = 125
#: Bound on disposing the terminal created for the command.
DISPOSE_TIMEOUT: Final = 10.0


def _add_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--token",
        help="access token (default: the URL's tkn parameter, else $AHP_TOKEN)",
    )
    p.add_argument(
        "--terminal",
        metavar="NAME",
        help="run in this existing terminal (a name or ahp-terminal: URI) instead of a new one",
    )
    p.add_argument("--timeout", type=float, metavar="S", help="interrupt the command after S s")
    p.add_argument(
        "--cwd",
        metavar="PATH",
        help="working directory of the new terminal (made absolute here)",
    )
    p.add_argument(
        "--max-output-bytes",
        type=int,
        default=DEFAULT_MAX_OUTPUT,
        metavar="N",
        help=f"keep at most the last N bytes of output (default {DEFAULT_MAX_OUTPUT})",
    )
    p.add_argument(
        "--json",
        action="store_true",
        help="print the whole CommandResult as JSON (command_line, output, raw_output, "
        "exit_code, duration_ms, truncated, timed_out)",
    )


#: Options of ``run`` and whether each takes a value (see :func:`split_options`).
_OPTIONS: Final = {
    "--token": True,
    "--terminal": True,
    "--timeout": True,
    "--cwd": True,
    "--max-output-bytes": True,
    "--json": False,
}


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "run",
        help="run one command in a remote terminal and print its output",
        usage="%(prog)s [options] URL [options] -- COMMAND...",
        description=(
            "Run one command in a new terminal (disposed afterwards) or in an existing one "
            "(--terminal), print its output (escape sequences removed) and exit with its exit "
            "code. One COMMAND argument is a shell command line; several are shell-quoted "
            f"into one. Exit status: the command's; {TIMED_OUT} when --timeout expired (the "
            f"command is interrupted with Ctrl-C); {FAILED} when run itself failed, with one "
            "line on stderr."
        ),
    )
    p.add_argument("url", metavar="URL", help="the server's URL, as printed by `ahp serve`")
    _add_options(p)
    p.add_argument(
        "command",
        nargs=argparse.REMAINDER,
        metavar="COMMAND",
        help="the command, after `--` (one argument: a shell command line)",
    )
    p.set_defaults(handler=run)


def split_options(words: list[str]) -> tuple[list[str], list[str]]:
    """``run`` options given after URL, and the command words (after ``--`` if present).

    Why: argparse hands everything after URL to the command (``REMAINDER``); leading
    words that are ``run``'s own options are taken back, up to ``--`` or the first word
    that is not one of them.
    """
    i = 0
    while i < len(words):
        word = words[i]
        if word == "--":
            return words[:i], words[i + 1 :]
        name, eq, _ = word.partition("=")
        if name not in _OPTIONS:
            break
        i += 2 if _OPTIONS[name] and not eq else 1
    return words[:i], words[i:]


def _parse_late_options(args: argparse.Namespace) -> list[str]:
    late, words = split_options(list(args.command))
    if late:
        parser = argparse.ArgumentParser(prog="python -m ahp run", add_help=False)
        _add_options(parser)
        parser.parse_args(late, namespace=args)
    return words


def command_line(words: list[str]) -> str:
    """One argument is a shell command line as is; several are shell-quoted and joined."""
    if not words:
        raise CommandFailed("no command given (usage: ahp run URL -- COMMAND...)")
    return words[0] if len(words) == 1 else shlex.join(words)


def exit_status(result: CommandResult) -> int:
    if result.timed_out:
        return TIMED_OUT
    if result.exit_code is None:
        return FAILED
    return result.exit_code % 256


def run(args: argparse.Namespace) -> int:
    words = _parse_late_options(args)
    cwd = os.path.abspath(args.cwd) if args.cwd is not None else None

    async def body() -> int:
        line = command_line(words)
        if args.timeout is not None and args.timeout <= 0:
            raise CommandFailed("--timeout must be positive")
        if args.max_output_bytes < 1:
            raise CommandFailed("--max-output-bytes must be positive")
        url, token = resolve_target(args.url, args.token)
        async with open_client(url, token) as client:
            from ahp.client.connection import RpcError
            from ahp.protocol.jsonrpc import ErrorCode

            if args.terminal is not None:
                uri = terminal_uri(args.terminal)
                try:
                    await client.subscribe(uri)
                except RpcError as exc:
                    if exc.code == ErrorCode.NOT_FOUND:
                        raise CommandFailed(f"no terminal {uri} (see `ahp ls`)") from None
                    raise
                if client.terminal_state(uri).exited:
                    raise CommandFailed(f"the process of {uri} has exited")
                created = False
            else:
                uri = f"ahp-terminal:/run-{secrets.token_hex(4)}"
                await client.create_terminal(uri, name=f"ahp run: {line}"[:80], cwd=cwd)
                created = True
            result: CommandResult | None = None
            try:
                async with trio.open_nursery() as nursery:

                    async def watch() -> None:
                        await client.wait_for(lambda: not client.connected)
                        raise CommandFailed("connection lost while the command ran")

                    nursery.start_soon(watch)
                    result = await run_command(
                        client.terminal(uri),
                        line,
                        timeout=args.timeout,
                        max_output_bytes=args.max_output_bytes,
                    )
                    nursery.cancel_scope.cancel()
            finally:
                if created and client.connected:
                    with trio.CancelScope(shield=True), trio.move_on_after(DISPOSE_TIMEOUT):
                        await client.dispose_terminal(uri)
        assert result is not None
        if args.json:
            print(json.dumps(attrs.asdict(result), indent=2))
        else:
            sys.stdout.write(result.output)
            sys.stdout.flush()
        if result.timed_out:
            print(f"ahp run: timed out after {args.timeout:g} s", file=sys.stderr)
        elif result.exit_code is None:
            print("ahp run: the command's exit code is unknown", file=sys.stderr)
        return exit_status(result)

    return main("ahp run", body, failure=FAILED)
