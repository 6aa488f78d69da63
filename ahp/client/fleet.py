"""Many hosts from one client: one connection per host, terminals addressed by (host, URI).

Why: agents run in many sandboxes, each with its own sidecar, and a person or an
orchestrator wants the terminals of all of them at once. URIs collide across
hosts (every sidecar's first terminal may be ``ahp-terminal:/t1``), so a terminal
is named by its host's label and its URI together (:class:`HostTerminal`), and
each host keeps a connection of its own, with its own reconnect: one host going
down, or coming back, changes nothing for the others.

A host's label is its URL's ``host:port`` (``[::1]:8765``), or the socket path of
a ``ws+unix://`` URL; :func:`host_label`. Two URLs with the same label are refused
(:class:`ValueError`): a label must name one host.

Tasks and ownership: :func:`connect_many` owns a nursery with one task per host
for the ``async with`` block. The task connects (:func:`ahp.client.connect`; the
client reconnects by itself after a drop), and when connecting fails — the host
is down at start, or the client gave up — it records why
(:attr:`HostLink.error`) and tries again after :func:`retry_delay` seconds
(unless ``retry=False``, for a one-shot listing). A host that is down is
reported, never raised. :func:`connect_many` yields once every host has been
tried once, so a caller sees each host either connected or with its error.

Buffering: none of its own; every client bounds its mirrors.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any, Final
from urllib.parse import parse_qs, urlsplit

import attrs
import trio

from ahp.client.connection import CONNECT_TIMEOUT, Client, connect, without_token
from ahp.client.errors import ClientError, ConnectionLost
from ahp.client.remote import RemoteTerminal
from ahp.protocol.state import TerminalInfo

__all__ = [
    "HOST_RETRY_DELAYS",
    "MAX_HOSTS",
    "Fleet",
    "HostDown",
    "HostLink",
    "HostTerminal",
    "connect_many",
    "host_label",
    "retry_delay",
    "select_host",
    "split_hosts",
]

log = logging.getLogger("ahp.client")

#: Hosts one fleet connects to at most: each holds a connection, a task and its mirrors.
MAX_HOSTS: Final = 256
#: Seconds between attempts to reach a host that is down (the last one repeats).
HOST_RETRY_DELAYS: Final = (0.1, 0.25, 0.5, 1.0, 2.0, 5.0)


def retry_delay(attempt: int) -> float:
    """Seconds before attempt ``attempt`` (1-based: the first retry) to reach a host."""
    return HOST_RETRY_DELAYS[min(max(attempt - 1, 0), len(HOST_RETRY_DELAYS) - 1)]


def host_label(url: str) -> str:
    """The label of the host ``url`` names: ``host:port``, or a Unix socket's path."""
    parts = urlsplit(url)
    if parts.scheme == "ws+unix":
        return (parts.netloc or parts.path).partition(":")[0]
    return parts.netloc.rpartition("@")[2].lower()


def split_hosts(text: str) -> list[str]:
    """The URLs of ``$AHP_HOSTS``: separated by commas or whitespace."""
    return [item for item in text.replace(",", " ").split() if item]


def select_host(urls: Sequence[str], label: str) -> str:
    """The URL among ``urls`` whose host is ``label``: its exact label (``host:port``),
    or its host name alone when only one URL has it. Raises :class:`LookupError`
    with the labels there are."""
    labels = {host_label(url): url for url in urls}
    if label.lower() in labels:
        return labels[label.lower()]
    by_name = [url for url in urls if (urlsplit(url).hostname or "") == label.lower()]
    if len(by_name) == 1:
        return by_name[0]
    known = ", ".join(labels) or "none (give --host URL or $AHP_HOSTS)"
    why = "names several hosts" if by_name else "is not one of the hosts"
    raise LookupError(f"{label!r} {why}: hosts are {known}")


class HostDown(ClientError):
    """The host is not connected now (its :attr:`HostLink.error` says why)."""


@attrs.frozen
class HostTerminal:
    """A terminal of one host: the host's label, the terminal's URI there, its entry."""

    host: str
    uri: str
    info: TerminalInfo


@attrs.define(eq=False)
class HostLink:
    """One host of a fleet and what is known of it now."""

    label: str
    #: The URL without its token (safe to show).
    url: str
    #: The connected client, None while the host is down.
    client: Client | None = None
    #: Why the host is down (the last failure), None while connected.
    error: str | None = None
    #: Connection attempts made (failed ones included).
    attempts: int = 0

    @property
    def up(self) -> bool:
        """Connected now (False while down, and while its client reconnects)."""
        return self.client is not None and self.client.connected


class Fleet:
    """The hosts of :func:`connect_many`, by label (in the order given)."""

    def __init__(self, links: Sequence[HostLink]) -> None:
        self.hosts: dict[str, HostLink] = {link.label: link for link in links}
        self._changed = trio.lowlevel.ParkingLot()
        self._tried: set[str] = set()

    def _notify(self) -> None:
        self._changed.unpark_all()

    def client(self, host: str) -> Client:
        """The connected client of ``host``; :class:`HostDown` while it is down."""
        link = self.hosts.get(host)
        if link is None:
            raise KeyError(f"no host {host!r} in this fleet")
        if link.client is None:
            raise HostDown(f"{host} is down: {link.error or 'not connected yet'}")
        return link.client

    def down(self) -> dict[str, str]:
        """The hosts that are not connected now, with why."""
        return {
            label: link.error or "reconnecting" for label, link in self.hosts.items() if not link.up
        }

    def terminals(self) -> list[HostTerminal]:
        """Every terminal of every connected host (host order, then each catalogue's)."""
        out: list[HostTerminal] = []
        for label, link in self.hosts.items():
            client = link.client
            if client is None or not link.up:
                continue
            for info in client.root.terminals or ():
                out.append(HostTerminal(label, info.resource, info))
        return out

    async def terminal(self, host: str, uri: str) -> RemoteTerminal:
        """The terminal ``uri`` of ``host``, subscribed first if need be."""
        client = self.client(host)
        if uri not in client.mirrors:
            await client.subscribe(uri)
        return client.terminal(uri)

    async def wait_for(
        self, predicate: Callable[[], bool], *, timeout: float | None = None
    ) -> None:
        """Wait until ``predicate()`` holds; re-checked whenever any host changes
        (an envelope, a snapshot, a connection lost or made)."""
        with trio.fail_after(timeout) if timeout is not None else trio.CancelScope():
            while not predicate():
                await self._changed.park()

    async def _hold(
        self,
        link: HostLink,
        url: str,
        options: Mapping[str, Any],
        retry: bool,
    ) -> None:
        """Keep ``link`` connected (see the module docstring)."""
        while True:
            link.attempts += 1
            try:
                async with connect(url, **options) as client:
                    link.client, link.error = client, None
                    unregister = client.on_change(self._notify)
                    self._tried.add(link.label)
                    self._notify()
                    try:
                        # Returns only when the client gives up (no reconnect, or closing).
                        await client.wait_for(lambda: False)
                    finally:
                        unregister()
            except ConnectionLost as exc:
                link.error = f"connection lost: {exc}"
            except ClientError as exc:
                link.error = str(exc)
            finally:
                link.client = None
                self._tried.add(link.label)
                self._notify()
            log.info("host %s is down: %s", link.label, link.error)
            if not retry:
                return
            await trio.sleep(retry_delay(link.attempts))


@asynccontextmanager
async def connect_many(
    urls: Sequence[str],
    *,
    token: str | None = None,
    retry: bool = True,
    auto_reconnect: bool = True,
    connect_timeout: float = CONNECT_TIMEOUT,
    **options: Any,
) -> AsyncIterator[Fleet]:
    """Connect to every host of ``urls`` (each with its own reconnect) and yield the
    :class:`Fleet` once each has been tried once; a host that is down is reported in
    :meth:`Fleet.down`, not raised.

    ``token`` is for the URLs without a ``tkn`` of their own; other keyword
    arguments go to :func:`ahp.client.connect` for every host. ``retry=False`` and
    ``auto_reconnect=False`` make a one-shot look (the ``ls`` command).
    """
    if len(urls) > MAX_HOSTS:
        raise ValueError(f"{len(urls)} hosts: one fleet connects to at most {MAX_HOSTS}")
    links: list[HostLink] = []
    for url in urls:
        label = host_label(url)
        if any(link.label == label for link in links):
            raise ValueError(f"two URLs name the host {label!r}")
        links.append(HostLink(label=label, url=without_token(url)))
    fleet = Fleet(links)
    kwargs = {
        "auto_reconnect": auto_reconnect,
        "connect_timeout": connect_timeout,
        **options,
    }
    async with trio.open_nursery() as nursery:
        for link, url in zip(links, urls, strict=True):
            own = parse_qs(urlsplit(url).query).get("tkn", [None])[0]
            nursery.start_soon(fleet._hold, link, url, {**kwargs, "token": own or token}, retry)
        await fleet.wait_for(lambda: len(fleet._tried) == len(links))
        try:
            yield fleet
        finally:
            nursery.cancel_scope.cancel()
