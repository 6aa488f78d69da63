"""``ahp-terminals exec URL -- ARGV…``: one command on the server, without a terminal.

The server runs it through ``x-ahp-terminals/exec`` (:func:`ahp.client.exec.exec_remote`):
stdin is ``/dev/null`` (it cannot wait on a prompt), stdout and stderr are kept apart
and printed to this process's stdout and stderr, and editors watching the server see
it as an ``isPty: false`` terminal. One ARGV word is a command line for ``/bin/sh -c``;
several are the program and its arguments, run as they are (no shell).

Exit status: the command's exit code; :data:`TIMED_OUT` (124) when ``--timeout``
passed (the server killed the process group); 128 + N when signal N ended the
command, or stopped ``exec`` itself (SIGINT, SIGTERM, SIGHUP: the command is killed
first); :data:`FAILED` (125) when ``exec`` failed (bad URL, refused, a server
without the extension), with one line on stderr.

Output: each stream within its budget (``--head-bytes``, ``--tail-bytes``: the start
and the end, with one marker line saying how many bytes and lines were left out
between them).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import sys
from typing import TYPE_CHECKING, Final

import trio

from ahp.client.commands.common import (
    CommandFailed,
    add_connection_arguments,
    main,
    open_client,
    printable,
    resolve_target,
)

if TYPE_CHECKING:
    from ahp.agent.command import CommandResult

__all__ = ["FAILED", "TIMED_OUT", "add_parser", "exec_status", "run"]

TIMED_OUT: Final = 124
FAILED: Final = 125
#: Signals that stop ``exec`` the way Ctrl-C does (the command is killed first).
STOP_SIGNALS: Final = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser], help: str) -> None:
    p = sub.add_parser(
        "exec",
        help=help,
        usage="%(prog)s URL [options] -- ARGV...",
        description=(
            "Run one command on the server without a terminal: stdin is /dev/null, its "
            "stdout and stderr are printed to ours, each within its budget. One ARGV word "
            "is a command line for /bin/sh -c; several are run as they are. Exit status: "
            f"the command's; {TIMED_OUT} when --timeout passed; 128+N when signal N ended "
            f"it; {FAILED} when exec itself failed, with one line on stderr."
        ),
    )
    add_connection_arguments(p)
    p.add_argument("--timeout", type=float, metavar="S", help="kill the command after S s")
    p.add_argument("--cwd", metavar="PATH", help="working directory (made absolute here)")
    p.add_argument("--head-bytes", type=int, metavar="N", help="bytes kept from the start")
    p.add_argument("--tail-bytes", type=int, metavar="N", help="bytes kept from the end")
    p.add_argument("--json", action="store_true", help="print the CommandResult as JSON")
    p.add_argument("argv", nargs="+", metavar="ARGV", help="the command, after `--`")
    p.set_defaults(handler=run)


def exec_status(exit_code: int | None, signal_name: str | None, timed_out: bool) -> int:
    """The exit status ``exec`` gives for a result."""
    if timed_out:
        return TIMED_OUT
    if exit_code is not None:
        return exit_code % 256
    if signal_name is not None and signal_name in signal.Signals.__members__:
        return 128 + signal.Signals[signal_name].value
    return FAILED


def run(args: argparse.Namespace) -> int:
    words: list[str] = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
    cwd = os.path.abspath(args.cwd) if args.cwd is not None else None

    async def body() -> int:
        from ahp.client.exec import exec_remote

        if not words:
            raise CommandFailed("no command given (usage: ahp-terminals exec URL -- ARGV...)")
        if args.timeout is not None and not 0 < args.timeout < math.inf:  # (nan, inf)
            raise CommandFailed("--timeout must be a positive, finite number of seconds")
        url, token = resolve_target(args.url, args.token)
        command: str | list[str] = words[0] if len(words) == 1 else words
        stopped_by: int | None = None
        result: CommandResult | None = None
        async with open_client(url, token) as client, trio.open_nursery() as nursery:
            with trio.open_signal_receiver(*STOP_SIGNALS) as signals:

                async def stop_on_signal() -> None:
                    nonlocal stopped_by
                    async for signum in signals:
                        stopped_by = signum
                        nursery.cancel_scope.cancel()  # exec_remote kills the command
                        return

                nursery.start_soon(stop_on_signal)
                result = await exec_remote(
                    client,
                    command,
                    cwd=cwd,
                    timeout=args.timeout,
                    head_bytes=args.head_bytes,
                    tail_bytes=args.tail_bytes,
                )
                nursery.cancel_scope.cancel()
        if stopped_by is not None or result is None:
            signum = stopped_by or signal.SIGINT
            name = signal.Signals(signum).name
            print(f"ahp-terminals exec: {name}: the command was killed", file=sys.stderr)
            return 128 + signum
        if args.json:
            print(json.dumps(result.to_json(), indent=2))
        else:
            sys.stdout.write(result.output)
            sys.stdout.flush()
            sys.stderr.write(result.stderr)
        if result.timed_out:
            print(f"ahp-terminals exec: timed out after {args.timeout:g} s", file=sys.stderr)
        elif result.signal is not None:
            print(f"ahp-terminals exec: killed by {printable(result.signal)}", file=sys.stderr)
        return exec_status(result.exit_code, result.signal, result.timed_out)

    return main("ahp-terminals exec", body, failure=FAILED)
