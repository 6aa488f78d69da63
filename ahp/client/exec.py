"""Non-interactive execution on a server: :func:`exec_remote` (``x-ahp-terminals/exec``).

Why on the client's side: an agent connected to a sidecar runs its build and test
commands there, without a terminal, and gets the same
:class:`~ahp.agent.command.CommandResult` as an in-process
:func:`~ahp.engine.exec.exec_command` (the server runs that one for it; the
extension is described in ``docs/exec.md`` and :mod:`ahp.protocol.processes`).

Buffering: none beyond the channel's mirror (:class:`~ahp.client.Client`); the
result comes in one answer.

Cancellation and ownership: the exec terminal is the server's. Cancelling
:func:`exec_remote` disposes it (the server kills the process group and reaps it),
shielded and bounded by :data:`DISPOSE_WAIT`, before the cancellation propagates.
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

import attrs
import trio

from ahp.agent.command import CommandResult
from ahp.agent.occupants import BackgroundProcess
from ahp.client import remote
from ahp.client.errors import ClientError, RpcError
from ahp.protocol import processes as xp

if TYPE_CHECKING:
    from ahp.client.connection import Client

__all__ = ["DISPOSE_WAIT", "EXIT_POLL_MAX", "EXIT_POLL_MIN", "exec_remote", "result_from_json"]

#: Longest wait (seconds) for the server to dispose an abandoned exec terminal.
DISPOSE_WAIT: Final = 10.0
#: Seconds :func:`exec_remote` waits for ``terminal/exited`` before it asks for a fresh
#: snapshot, doubling up to the second bound.
EXIT_POLL_MIN: Final = 0.5
EXIT_POLL_MAX: Final = 5.0


async def exec_remote(
    client: Client,
    command: str | Sequence[str],
    *,
    cwd: str | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float | None = None,
    head_bytes: int | None = None,
    tail_bytes: int | None = None,
    channel: str | None = None,
) -> CommandResult:
    """:func:`~ahp.engine.exec.exec_command` on the server ``client`` is connected to
    (``x-ahp-terminals/exec``).

    The server starts the command as an ``isPty: false`` terminal; this follows the
    channel until ``terminal/exited`` (or its disposal), asks for the result, then
    unsubscribes. Cancellation disposes the exec terminal (the server kills the process
    group and reaps it) before it propagates, within :data:`DISPOSE_WAIT` seconds.

    Raises:
        ahp.client.RpcError: the server refused (bad command or cwd, the terminal
            limit, draining, or a server without the extension: ``-32601``).
        ahp.client.ConnectionLost: the connection was down longer than
            :data:`~ahp.client.remote.LOST_AFTER` (the client reconnects meanwhile;
            the server may still run the command: the exec terminal is disposed
            when a connection is back within :data:`DISPOSE_WAIT`).
        ahp.client.ClientError: its answer was malformed.
    """
    # Named here, so that a cancellation while the server answers can still dispose it
    # (the server handles a connection's requests in order: the dispose comes after).
    uri = channel or f"ahp-terminal:/exec-{secrets.token_hex(6)}"
    params: dict[str, Any] = {"argv": list(command)} if not isinstance(command, str) else {}
    if isinstance(command, str):
        params["command"] = command
    for key, value in (
        ("channel", uri),
        ("cwd", cwd),
        ("env", dict(env) if env is not None else None),
        ("timeout", timeout),
        ("headBytes", head_bytes),
        ("tailBytes", tail_bytes),
    ):
        if value is not None:
            params[key] = value
    try:
        await client.wait_connected(remote.LOST_AFTER)
        answer = await client.request(xp.EXEC, params)
    except RpcError:
        raise  # refused: nothing was started
    except BaseException:
        await _dispose_quietly(client, uri)
        raise
    try:
        if not isinstance(answer, dict) or answer.get("channel") != uri:
            raise ClientError(f"malformed {xp.EXEC} answer: {answer!r:.200}")  # noqa: TRY301
        await client.subscribe(uri)
        await _wait_exited(client, uri)
        await client.wait_connected(remote.LOST_AFTER)
        data = await client.request(xp.EXEC_RESULT, {"channel": uri})
    except BaseException:
        await _dispose_quietly(client, uri)
        raise
    with contextlib.suppress(Exception):
        await client.unsubscribe(uri)
    return result_from_json(data)


async def _wait_exited(client: Client, uri: str) -> None:
    """Until the mirror shows ``terminal/exited`` (or the channel is gone).

    The envelope is the fast way; a fresh snapshot is asked for after
    :data:`EXIT_POLL_MIN` seconds without it, then at doubling intervals up to
    :data:`EXIT_POLL_MAX`, because an ``exited`` that raced the subscription was seen
    to be missed (a server delivering the envelope before the subscribe answer)."""

    def ended() -> bool:
        return uri not in client.mirrors or client.terminal_state(uri).exited

    delay = EXIT_POLL_MIN
    while True:
        with trio.move_on_after(delay):
            await client.wait_for(ended)
            return
        await client.wait_connected(remote.LOST_AFTER)  # (down longer: ConnectionLost)
        state = await client.subscribe(uri)
        if getattr(state, "exited", False):
            return
        delay = min(2 * delay, EXIT_POLL_MAX)


async def _dispose_quietly(client: Client, uri: str) -> None:
    """Dispose the exec terminal (the server kills the group and reaps), shielded, bounded."""
    with (
        trio.CancelScope(shield=True),
        trio.move_on_after(DISPOSE_WAIT),
        contextlib.suppress(Exception),
    ):
        await client.dispose_terminal(uri)


def result_from_json(data: Any) -> CommandResult:
    """A :class:`~ahp.agent.command.CommandResult` from its ``to_json()``.

    Raises:
        ahp.client.ClientError: ``data`` is not such a dict.
    """
    names = [f.name for f in attrs.fields(CommandResult) if f.name != "handle"]
    try:
        values = {name: data[name] for name in names if name in data}
        values["background"] = tuple(
            BackgroundProcess(pid=int(b["pid"]), command_line=str(b["command_line"]))
            for b in values.get("background", ())
        )
        return CommandResult(**values)
    except (TypeError, KeyError, ValueError) as exc:
        raise ClientError(f"malformed command result: {exc}") from None
