"""Where the MCP tools' terminals live: this process's own host, or a sidecar over AHP.

Why: ``python -m ahp mcp`` hosts its own engine by default, and with
``--connect URL`` drives terminals of an existing sidecar instead. The tools
need the same five things from either — list, create, close, get a terminal,
read its state — so each source is one small adapter with that surface, and
the tool code never asks which one it has.

Ownership: a backend does not own its host or client; whoever opened them
closes them (leaving ``open_host()`` disposes every terminal). Remote
terminals are subscribed on first use and stay subscribed while the client
lives.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from ahp.protocol.state import TerminalInfo, TerminalState

if TYPE_CHECKING:
    from ahp.client.connection import Client
    from ahp.engine import Host
    from ahp.mcp.contract import AgentTerminal

__all__ = [
    "Backend",
    "ClientBackend",
    "HostBackend",
    "NoSuchTerminal",
    "connection_down",
    "not_answering",
]


class NoSuchTerminal(LookupError):
    """The terminal is not (or no longer) there."""


class Backend(Protocol):
    """The terminals the tools act on."""

    @property
    def local(self) -> bool:
        """Terminals run on this machine (paths can be checked here)."""
        ...

    def list(self) -> tuple[TerminalInfo, ...]: ...
    def exists(self, uri: str) -> bool: ...
    def state(self, uri: str) -> TerminalState | None:
        """The terminal's state, or None when it is unknown here (not subscribed)."""
        ...

    async def create(self, uri: str, *, cwd: str | None, cols: int, rows: int) -> None: ...
    async def close(self, uri: str) -> None: ...
    async def terminal(self, uri: str) -> AgentTerminal:
        """The terminal, ready for commands (``NoSuchTerminal`` when absent)."""
        ...

    def connection(self) -> str | None:
        """What is wrong with the way to the terminals, to say before a listing (how
        long the connection to a sidecar has been down, or that it answers nothing),
        or None."""
        ...

    def silent(self, uri: str) -> str | None:
        """Whether the sidecar of ``uri`` is answering nothing (a request went
        unanswered and nothing arrived since): says which sidecar and for how long
        ("the sidecar at URL has answered nothing for N s"), or None."""
        ...


class HostBackend:
    """Terminals of a :class:`ahp.engine.Host` in this process."""

    local = True

    def __init__(self, host: Host) -> None:
        self.host = host

    def list(self) -> tuple[TerminalInfo, ...]:
        return self.host.list_terminals()

    def exists(self, uri: str) -> bool:
        return uri in self.host

    def state(self, uri: str) -> TerminalState | None:
        terminal = self.host.terminals.get(uri)
        return None if terminal is None else terminal.state

    async def create(self, uri: str, *, cwd: str | None, cols: int, rows: int) -> None:
        await self.host.create_terminal(uri, name=_name(uri), cwd=cwd, cols=cols, rows=rows)

    async def close(self, uri: str) -> None:
        from ahp.engine import TerminalNotFound

        try:
            await self.host.dispose(uri)
        except TerminalNotFound:
            raise NoSuchTerminal(uri) from None

    async def terminal(self, uri: str) -> AgentTerminal:
        terminal = self.host.terminals.get(uri)
        if terminal is None:
            raise NoSuchTerminal(uri)
        return terminal

    def connection(self) -> str | None:
        return None

    def silent(self, uri: str) -> str | None:
        return None


class ClientBackend:
    """Terminals of a sidecar, through a connected :class:`ahp.client.Client`."""

    local = False

    def __init__(self, client: Client) -> None:
        self.client = client

    def list(self) -> tuple[TerminalInfo, ...]:
        return self.client.root.terminals or ()

    def exists(self, uri: str) -> bool:
        # The catalogue, or our own subscription: a terminal we just created may be
        # subscribed before the catalogue's update arrives.
        return uri in self.client.mirrors or any(info.resource == uri for info in self.list())

    def state(self, uri: str) -> TerminalState | None:
        if uri not in self.client.mirrors:
            return None
        return self.client.terminal_state(uri)

    async def create(self, uri: str, *, cwd: str | None, cols: int, rows: int) -> None:
        await self.client.create_terminal(uri, name=_name(uri), cwd=cwd, cols=cols, rows=rows)

    async def close(self, uri: str) -> None:
        if not self.exists(uri):
            raise NoSuchTerminal(uri)
        await self.client.dispose_terminal(uri)

    async def terminal(self, uri: str) -> AgentTerminal:
        if uri not in self.client.mirrors:
            if not self.exists(uri):
                raise NoSuchTerminal(uri)
            await self.client.subscribe(uri)
        return self.client.terminal(uri)

    def connection(self) -> str | None:
        down = connection_down(self.client, "the sidecar")
        if down is None and (silent := not_answering(self.client)) is not None:
            return (
                f"{silent} (stopped or overloaded?): the terminals listed are as they were "
                "then, and calls on it fail after their time"
            )
        return down

    def silent(self, uri: str) -> str | None:
        return not_answering(self.client)


def connection_down(client: Client, what: str) -> str | None:
    """How long ``client``'s connection to ``what`` has been down (None while it is up)."""
    import trio

    from ahp.client.remote import LOST_AFTER

    if client.lost is not None:
        return (
            f"the connection to {what} is gone ({client.lost}): the terminals listed are as "
            "they were then, and every call on them fails"
        )
    if client.connected:
        return None
    dropped = client.dropped_at
    down = 0.0 if dropped is None else trio.current_time() - dropped
    return (
        f"the connection to {what} has been down for {down:.0f} s (reconnecting): the "
        f"terminals listed are as they were when it dropped; calls on them wait for it "
        f"until it has been down {LOST_AFTER:g} s, then fail"
    )


def not_answering(client: Client) -> str | None:
    """The sentence "the sidecar at URL has answered nothing for N s" while
    ``client``'s server is silent (:meth:`~ahp.client.connection.Client.unanswered_for`),
    else None."""
    from ahp.client.connection import without_token

    silent = client.unanswered_for()
    if silent is None:
        return None
    return f"the sidecar at {without_token(client.url)} has answered nothing for {silent:.0f} s"


def _name(uri: str) -> str:
    from ahp.mcp.render import display_name

    return display_name(uri)
