"""Authenticated connections have a budget (issue 26, item 3).

At most ``connection_limit()`` (a quarter of the fds) authenticated connections,
at most half of those from one peer address; past either, the one idle the
longest is closed with a reason. The fds left stay for terminals and new clients.
"""

from __future__ import annotations

import contextlib
from typing import Final

import pytest
import trio

from ahp.server import ServeOptions
from ahp.server.admission import (
    CONNECTION_FD_SHARE,
    MAX_CONNECTIONS,
    MIN_CONNECTIONS,
    BudgetTicket,
    ConnectionBudget,
    connection_limit,
)
from ahp.server.websocket import CLOSE_TIMEOUT, EVICTED_CLOSE_TIMEOUT
from ahp.ws import ConnectionClosed
from tests.helpers import TIMEOUT
from tests.test_edges import _port, _serve
from tests.test_identity import RawPeer, _init
from tests.wire import TOKEN, peer, running_server

#: The server's fd limit in the subprocess test, and connections opened against it.
_NOFILE: Final = 256
_IDLE_CONNECTIONS: Final = _NOFILE - 6
ROOT: Final = "ahp-root://"


def test_the_connection_limit_is_a_quarter_of_the_fds_within_bounds() -> None:
    assert connection_limit(1024) == 1024 // CONNECTION_FD_SHARE
    assert connection_limit(16) == MIN_CONNECTIONS
    assert connection_limit(10**7) == MAX_CONNECTIONS


async def test_the_budget_closes_the_longest_idle_past_each_bound() -> None:
    closed: list[tuple[str, str]] = []

    def ticket(peer: str, name: str) -> BudgetTicket:
        return BudgetTicket(peer, lambda reason: closed.append((name, reason)))

    budget = ConnectionBudget(limit=4, per_peer=2)
    a1, a2 = ticket("a", "a1"), ticket("a", "a2")
    budget.admit(a1)
    budget.admit(a2)
    await trio.sleep(0.01)
    a1.active()  # a2 is now the idlest of "a"
    budget.admit(ticket("a", "a3"))  # past the per-peer bound
    assert closed == [("a2", closed[0][1])] and "from this address" in closed[0][1]
    budget.admit(ticket("b", "b1"))
    budget.admit(ticket("c", "c1"))
    assert len(budget) == 4 and budget.peer_count("a") == 2
    budget.admit(ticket("d", "d1"))  # past the total: the idlest of all (a1's touch is old)
    assert closed[-1][0] == "a1" and "in total" in closed[-1][1]
    assert len(budget) == 4 and budget.evicted == 2


async def test_idle_authenticated_connections_up_to_the_fd_limit_leave_room_for_terminals() -> None:
    """The issue's finding: idle authenticated connections until the server's fds run
    out (``ulimit -n 256``); a legitimate client then connects and creates a terminal.
    The oldest idle connections were closed with the budget's reason."""
    async with _serve(nofile=_NOFILE) as (url, err):
        port = _port(url)
        token = url.split("tkn=", 1)[1]
        held: list[RawPeer] = []
        try:
            for i in range(_IDLE_CONNECTIONS):
                stream = await trio.open_tcp_stream("127.0.0.1", port)
                raw = RawPeer(stream)
                held.append(raw)
                with trio.fail_after(TIMEOUT):
                    await raw.upgrade(port, token)
                    answer = await raw.call("initialize", _init(f"idle-{i}"))
                assert "result" in answer, answer
            async with peer(url) as p:
                await p.initialize("legit")
                params = {
                    "channel": "ahp-terminal:/ok",
                    "claim": {"kind": "client", "clientId": "legit"},
                }
                # The evicted connections give their fds back as their closes end (each
                # waits EVICTED_CLOSE_TIMEOUT for its peer's close frame, which these
                # idle peers never send): until then the server may answer "try again
                # later", and a client that does so gets its terminal.
                with trio.fail_after(TIMEOUT):
                    while True:
                        created = await p.call("createTerminal", params)
                        error = created.get("error", {})
                        if error.get("data", {}).get("errno") != "EMFILE":
                            break
                        await trio.sleep(0.2)
                assert "result" in created, created
                await p.result("subscribe", {"channel": "ahp-terminal:/ok"})
                await p.dispatch(
                    "ahp-terminal:/ok", {"type": "terminal/input", "data": "echo ok-$((6*7))\r"}
                )
                with trio.fail_after(TIMEOUT):
                    await p.text_until("ahp-terminal:/ok", "ok-42")
            # The first idle connection was closed for the budget, with its reason.
            first = held[0]
            with trio.fail_after(TIMEOUT):
                while True:
                    opcode, payload = await first.frame()
                    if opcode == 8:
                        break
            assert int.from_bytes(payload[:2], "big") == 1013
            assert b"connection limit reached" in payload[2:]
        finally:
            for raw in held:
                with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                    await raw.stream.aclose()
    logs = b"".join(err).decode(errors="replace")
    assert "Traceback" not in logs, logs[-3000:]


async def _idle(port: int, token: str, source: str, client_id: str) -> RawPeer:
    stream = await trio.open_tcp_stream("127.0.0.1", port, local_address=source)
    raw = RawPeer(stream)
    with trio.fail_after(TIMEOUT):
        await raw.upgrade(port, token)
        answer = await raw.call("initialize", _init(client_id))
    assert "result" in answer, answer
    return raw


async def test_one_address_cannot_take_another_addresss_places() -> None:
    """Under ``ulimit -n 64`` (16 connections, 8 per address): 8 idle connections from
    127.0.0.2, then 12 from 127.0.0.1. The newcomers of 127.0.0.1 close that address's
    own idlest connections; 127.0.0.2's all stay and answer."""
    async with _serve(nofile=64) as (url, err):
        port, token = _port(url), url.split("tkn=", 1)[1]
        held: list[RawPeer] = []
        try:
            other = [await _idle(port, token, "127.0.0.2", f"o{i}") for i in range(8)]
            held += other
            mine = [await _idle(port, token, "127.0.0.1", f"m{i}") for i in range(12)]
            held += mine
            for raw in other:
                assert (await raw.call("ping", {"channel": "ahp-root://"}))["result"] is None
            with trio.fail_after(TIMEOUT):
                await mine[0].closed()
        finally:
            for raw in held:
                with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                    await raw.stream.aclose()
    assert "Traceback" not in b"".join(err).decode(errors="replace")


async def test_an_evicted_peer_that_never_answers_gives_its_fd_back_at_once() -> None:
    """A connection closed for the budget gets its close frame (1013, the reason), then
    the server closes the socket after EVICTED_CLOSE_TIMEOUT without the peer's answer,
    not after the whole CLOSE_TIMEOUT: the budget closes connections because fds are
    scarce (before, each evicted idle peer held its fd a second, and a legitimate
    client's ``createTerminal`` failed with EMFILE meanwhile)."""
    assert EVICTED_CLOSE_TIMEOUT < CLOSE_TIMEOUT / 4
    async with _serve(nofile=64) as (url, err):
        port, token = _port(url), url.split("tkn=", 1)[1]
        held: list[RawPeer] = []
        seen: dict[str, float] = {}
        try:
            held += [await _idle(port, token, "127.0.0.1", f"m{i}") for i in range(8)]
            first = held[0]

            async def watch() -> None:
                # Reads the first (idlest) connection as things arrive: when its close
                # frame came, and when the server's end of the socket did.
                opcode, payload = await first.frame()
                while opcode != 8:
                    opcode, payload = await first.frame()
                seen["close"] = trio.current_time()
                assert int.from_bytes(payload[:2], "big") == 1013
                assert b"connection limit reached" in payload[2:]
                # It never answers the close frame; the server's end comes anyway.
                with contextlib.suppress(EOFError, trio.BrokenResourceError):
                    while True:
                        await first.frame()
                seen["end"] = trio.current_time()

            with trio.fail_after(TIMEOUT):
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(watch)
                    held.append(await _idle(port, token, "127.0.0.1", "newcomer"))
        finally:
            for raw in held:
                with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                    await raw.stream.aclose()
    # (The whole CLOSE_TIMEOUT would put a second between them.)
    assert seen["end"] - seen["close"] < CLOSE_TIMEOUT / 2, seen
    assert "Traceback" not in b"".join(err).decode(errors="replace")


async def test_read_only_connections_go_first_and_never_displace_full_ones() -> None:
    closed: list[str] = []

    def ticket(name: str, *, read_only: bool = False) -> BudgetTicket:
        return BudgetTicket("a", lambda reason: closed.append(name), read_only=read_only)

    budget = ConnectionBudget(limit=10, per_peer=3)
    agent = ticket("agent")
    assert budget.admit(agent) is None  # the idlest of all, from now on
    await trio.sleep(0.01)
    for n in range(4):
        assert budget.admit(ticket(f"ro{n}", read_only=True)) is None
    assert closed == ["ro0", "ro1"]  # read-only ones made the room, the idle agent stays
    assert budget.admit(ticket("full")) is None  # a full newcomer: a read-only one goes
    assert closed[-1] == "ro2"
    assert budget.admit(ticket("full2")) is None
    assert closed[-1] == "ro3"
    refused = budget.admit(ticket("late", read_only=True))
    assert refused is not None and "full access" in refused  # only full ones are left
    assert len(budget) == 3 and budget.peer_count("a") == 3 and "late" not in closed


async def test_read_only_viewers_cannot_close_an_idle_agent() -> None:
    """The probe's attack: an agent waits on a long command (sends nothing), and
    read-only connections from its address fill the per-address budget: they close
    each other, never the agent; once only full-access connections are left, a
    read-only newcomer is refused (1013, with the reason) and they all stay."""
    read = "read-only-secret"
    async with running_server(ServeOptions(port=0, token=TOKEN, read_token=read)) as sidecar:
        assert sidecar.state.connections is not None
        sidecar.state.connections.per_peer = 3
        read_url = sidecar.url.replace(TOKEN, read)
        async with contextlib.AsyncExitStack() as stack:
            agent = await stack.enter_async_context(peer(sidecar.url))
            await agent.initialize("agent")
            for n in range(8):
                viewer = await stack.enter_async_context(peer(read_url))
                await viewer.initialize(f"viewer-{n}")
            assert (await agent.call("ping", {"channel": ROOT}))["result"] is None
            others = [await stack.enter_async_context(peer(sidecar.url)) for _ in range(2)]
            for n, other in enumerate(others):
                await other.initialize(f"agent-{n}")
            async with peer(read_url) as late:
                with pytest.raises(ConnectionClosed) as refused:
                    await late.initialize("late")
            assert refused.value.reason is not None and refused.value.reason.code == 1013
            assert "full access" in (refused.value.reason.reason or "")
            for full in (agent, *others):
                assert (await full.call("ping", {"channel": ROOT}))["result"] is None
