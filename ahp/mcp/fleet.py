"""The MCP tools over several sidecars at once (``mcp --connect URL --connect URL``).

Why: the tools address a terminal by one name; across hosts, URIs collide, so
the backend gives every terminal of a host other than the first a name that
carries its host: ``ahp-terminal:/HOST/NAME`` (``HOST`` is the host's label,
``host:port``; :func:`ahp.client.fleet.host_label`). The first host's
terminals keep their own URIs (``main`` is the first host's ``main``), and a
terminal the model creates by a bare name is created there;
``ahp-terminal:/HOST/NAME`` creates it on that host. Listing shows every
connected host's terminals under these names; a host that is down lists
nothing until it is back.

Ownership: the backend does not own the fleet (``open_backend`` closes it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs
import trio

from ahp.client.fleet import Fleet, HostDown
from ahp.mcp.backend import NoSuchTerminal, not_answering
from ahp.protocol.state import TERMINAL_SCHEME, TerminalInfo, TerminalState

if TYPE_CHECKING:
    from ahp.mcp.contract import AgentTerminal

__all__ = ["FleetBackend"]


class FleetBackend:
    """Terminals of several sidecars (see the module docstring)."""

    local = False

    def __init__(self, fleet: Fleet) -> None:
        self.fleet = fleet

    @property
    def _first(self) -> str:
        return next(iter(self.fleet.hosts))

    def _name(self, host: str, uri: str) -> str:
        """The tools' URI for ``uri`` of ``host``."""
        if host == self._first:
            return uri
        return f"{TERMINAL_SCHEME}/{host}/{uri.removeprefix(TERMINAL_SCHEME + '/')}"

    def _split(self, name: str) -> tuple[str, str]:
        """``(host, uri)`` for one of the tools' URIs."""
        rest = name.removeprefix(TERMINAL_SCHEME + "/")
        host, slash, inner = rest.partition("/")
        if slash and inner and host in self.fleet.hosts and host != self._first:
            return host, f"{TERMINAL_SCHEME}/{inner}"
        return self._first, name

    def list(self) -> tuple[TerminalInfo, ...]:
        return tuple(
            attrs.evolve(t.info, resource=self._name(t.host, t.uri)) for t in self.fleet.terminals()
        )

    def exists(self, uri: str) -> bool:
        host, inner = self._split(uri)
        try:
            client = self.fleet.client(host)
        except HostDown:
            return False
        return inner in client.mirrors or any(
            info.resource == inner for info in client.root.terminals or ()
        )

    def state(self, uri: str) -> TerminalState | None:
        host, inner = self._split(uri)
        try:
            client = self.fleet.client(host)
        except HostDown:
            return None
        return client.terminal_state(inner) if inner in client.mirrors else None

    async def create(self, uri: str, *, cwd: str | None, cols: int, rows: int) -> None:
        host, inner = self._split(uri)
        name = inner.removeprefix(TERMINAL_SCHEME + "/")
        await self.fleet.client(host).create_terminal(
            inner, name=name, cwd=cwd, cols=cols, rows=rows
        )

    async def close(self, uri: str) -> None:
        if not self.exists(uri):
            raise NoSuchTerminal(uri)
        host, inner = self._split(uri)
        await self.fleet.client(host).dispose_terminal(inner)

    async def terminal(self, uri: str) -> AgentTerminal:
        if not self.exists(uri):
            raise NoSuchTerminal(uri)
        host, inner = self._split(uri)
        return await self.fleet.terminal(host, inner)

    def connection(self) -> str | None:
        notes = []
        for label, why in self.fleet.down().items():
            client = self.fleet.hosts[label].client
            dropped = client.dropped_at if client is not None else None
            how = (
                why
                if dropped is None
                else f"for {trio.current_time() - dropped:.0f} s, reconnecting"
            )
            notes.append(f"host {label} is down ({how}): its terminals are not listed")
        down = self.fleet.down()
        for label, link in self.fleet.hosts.items():
            client = link.client
            if label in down or client is None:
                continue
            if (silent := client.unanswered_for()) is not None:
                notes.append(
                    f"host {label} is not answering (nothing for {silent:.0f} s; stopped or "
                    "overloaded?): its terminals are listed as they were"
                )
        return "; ".join(notes) or None

    def silent(self, uri: str) -> str | None:
        host, _ = self._split(uri)
        try:
            return not_answering(self.fleet.client(host))
        except HostDown:
            return None
