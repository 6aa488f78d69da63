"""Print every finished command of every terminal of a server: exit code and duration.

    .venv/bin/python examples/watcher.py 'ws://127.0.0.1:8765/?tkn=...'
    .venv/bin/python examples/watcher.py URL --count 2    # exit after two commands (the tests)

(from the checkout, with the venv of the README's set-up).

It exits (status 1, one line on stderr) when the server goes away. It connects
with the Trio client, subscribes to every terminal in the catalogue
(and to each new one as it appears), and listens to the applied envelopes: a
``terminal/commandFinished`` envelope names a command whose part in the
mirrored terminal state (a :class:`ahp.CommandPart`) carries its command line,
exit code and duration. Commands are only detected in shells with shell
integration (bash, zsh, fish started by the host).
"""

from __future__ import annotations

import argparse
import sys

import trio

from ahp.client import Client, ClientError, RpcError, connect
from ahp.protocol import ActionEnvelope, CommandPart, TerminalCommandFinished


def finished_line(client: Client, envelope: ActionEnvelope) -> str | None:
    """The line for a ``terminal/commandFinished`` envelope, else None."""
    action = envelope.action
    if not isinstance(action, TerminalCommandFinished):
        return None
    command_line = "?"
    for part in client.terminal_state(envelope.channel).content:
        if isinstance(part, CommandPart) and part.commandId == action.commandId:
            command_line = part.commandLine
    code = "?" if action.exitCode is None else action.exitCode
    duration = "?" if action.durationMs is None else action.durationMs
    return f"{envelope.channel}  exit {code}  {duration} ms  {command_line}"


async def watch(url: str, count: int | None) -> None:
    async with connect(url, auto_reconnect=False) as client:
        seen = 0
        enough = trio.Event()

        def on_envelope(envelope: ActionEnvelope) -> None:
            nonlocal seen
            line = finished_line(client, envelope)
            if line is None:
                return
            print(line, flush=True)
            seen += 1
            if count is not None and seen >= count:
                enough.set()

        client.on_envelope(on_envelope)

        async def follow_catalogue() -> None:
            watched: set[str] = set()
            while True:
                for info in client.root.terminals or ():
                    if info.resource in watched:
                        continue
                    watched.add(info.resource)
                    try:
                        await client.subscribe(info.resource)
                    except RpcError:
                        continue  # disposed in the meantime
                    print(f"watching {info.resource}", flush=True)
                await client.wait_for(
                    lambda: any(t.resource not in watched for t in client.root.terminals or ())
                )

        async with trio.open_nursery() as nursery:
            nursery.start_soon(follow_catalogue)
            await enough.wait()
            nursery.cancel_scope.cancel()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("url", help="the server's URL (with its tkn)")
    parser.add_argument("--count", type=int, help="exit after this many finished commands")
    args = parser.parse_args()
    try:
        trio.run(watch, args.url, args.count)
    except* KeyboardInterrupt:
        pass
    except* ClientError as group:
        # (A lost connection, an unreachable server, a refused token.)
        error: BaseException = group
        while isinstance(error, BaseExceptionGroup):
            error = error.exceptions[0]
        print(f"watcher: {error}", file=sys.stderr)
        sys.exit(1)
