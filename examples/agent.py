"""A minimal Trio agent: runs a few commands in a terminal it hosts, and lets a person watch.

The host is embedded (no separate server): the agent runs commands with
``term.run()`` in-process while the same host is served over WebSocket, so a
person can ``attach`` to the agent's terminal, see what it did and type into it.

From the checkout, with the venv of the README's set-up:

    .venv/bin/python examples/agent.py          # prints its URL; then, in another terminal:
    .venv/bin/ahp-terminals attach 'ws://127.0.0.1:PORT/?tkn=...' agent
    .venv/bin/python examples/agent.py --exit   # run the commands and exit (used by the tests)

While a command runs the terminal carries a session claim naming the tool call
(``ahp-terminals ls URL`` shows it); the previous claim is restored afterwards.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

import trio

import ahp

COMMANDS = [
    "echo hello from the agent",
    "uname -s",
    "ls / | head -3",
    "(exit 3)",
]


def ahp_terminals() -> str:
    """The ``ahp-terminals`` command that works here, as a shell word: the console script
    beside this Python (a venv that is not activated is not on ``PATH``), else this
    Python with ``-m ahp``."""
    script = Path(sys.executable).with_name("ahp-terminals")
    if script.is_file():
        return shlex.quote(str(script))
    return f"{shlex.quote(sys.executable)} -m ahp"


async def main(port: int, exit_after: bool) -> None:
    async with ahp.open_host() as host, trio.open_nursery() as nursery:
        sidecar = await nursery.start(ahp.serve_host, host, ahp.ServeOptions(port=port))
        print(f"serving {sidecar.url}", flush=True)
        print(f"attach with: {ahp_terminals()} attach '{sidecar.url}' agent", flush=True)
        term = await host.create_terminal("ahp-terminal:/agent", name="agent")
        found = term.state.claim
        for i, command in enumerate(COMMANDS, 1):
            claim = ahp.SessionClaim(session="agent:/demo", toolCallId=f"call-{i}")
            result = await term.run(command, timeout=30, claim=claim)
            print(f"$ {command}", flush=True)
            print(result.output, end="", flush=True)
            print(f"-> exit {result.exit_code} in {result.duration_ms} ms", flush=True)
        given_back = "given back" if term.state.claim == found else "NOT given back"
        print(f"claim {given_back}: {term.state.claim!r}", flush=True)
        if exit_after:
            nursery.cancel_scope.cancel()
            return
        print("done; still serving (Ctrl-C to stop)", flush=True)
        await trio.sleep_forever()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument(
        "--port", type=int, default=0, help="TCP port (default 0: any free port, printed)"
    )
    parser.add_argument("--exit", action="store_true", help="exit after the commands")
    args = parser.parse_args()
    try:
        trio.run(main, args.port, args.exit)
    except* KeyboardInterrupt:
        # (Trio raises it inside an exception group when it stops a nursery, which
        # ``contextlib.suppress(KeyboardInterrupt)`` would not catch.)
        print("stopped", flush=True)
        sys.exit(130)
    except* OSError as group:
        # A start-up failure (the port is taken, no such address): one line, not a trace.
        failure: BaseException = group
        while isinstance(failure, BaseExceptionGroup):
            failure = failure.exceptions[0]
        why = failure.strerror if isinstance(failure, OSError) and failure.strerror else failure
        print(f"agent.py: cannot serve on port {args.port}: {why}", file=sys.stderr)
        sys.exit(1)
