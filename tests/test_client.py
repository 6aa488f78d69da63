"""The Trio client against a real server: mirrors, write-ahead, reconnect, remote run."""

from __future__ import annotations

import functools
import logging
import socket
import struct
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio

from ahp.client import (
    Client,
    ClientError,
    ConnectionLost,
    RemoteTerminal,
    RpcError,
    ServerShutDown,
    connect,
)
from ahp.protocol import (
    ActionEnvelope,
    ClientClaim,
    Snapshot,
    TerminalClaimed,
    TerminalData,
    TerminalState,
    TerminalTitleChanged,
)
from ahp.server import ServeOptions, handshake
from ahp.server.app import Sidecar
from tests.helpers import TIMEOUT
from tests.wire import TOKEN, running_server

T1 = "ahp-terminal:/t1"
T2 = "ahp-terminal:/t2"


async def test_connect_mirror_and_catalogue() -> None:
    async with running_server() as server, connect(server.url, client_id="me") as client:
        assert client.protocol_version == "1.0.0"  # 1.x offered first
        assert client.root.agents == () and client.root.terminals == ()
        await client.create_terminal(T1, name="work")
        with trio.fail_after(TIMEOUT):
            await client.wait_for(lambda: bool(client.root.terminals))
        root = client.root
        assert root.terminals is not None
        info = root.terminals[0]
        assert (info.resource, info.title, info.claim) == (T1, "work", ClientClaim("me"))
        assert client.terminal_state(T1).claim == ClientClaim("me")


async def test_wrong_token_and_unreachable_are_clear_errors() -> None:
    async with running_server() as server:
        with pytest.raises(ClientError, match="403"):
            async with connect(server.url.split("?")[0] + "?tkn=nope"):
                pass
        with pytest.raises(ClientError, match="cannot connect"):
            async with connect(f"ws://127.0.0.1:{server.port + 1 if server.port else 1}/"):
                pass


async def test_write_ahead_pending_then_confirmed_or_dropped() -> None:
    async with (
        running_server() as server,
        connect(server.url, client_id="alice") as alice,
        connect(server.url, client_id="bob") as bob,
    ):
        await alice.create_terminal(T1)
        await bob.subscribe(T1)
        await alice.dispatch(T1, TerminalTitleChanged(title="optimistic"))
        # Applied locally at once (write-ahead), confirmed by the echo later.
        assert alice.terminal_state(T1).title == "optimistic"
        with trio.fail_after(TIMEOUT):
            await alice.wait_for(lambda: not alice.mirrors[T1].pending)
            assert alice.mirrors[T1].confirmed.title == "optimistic"  # type: ignore[union-attr]
            await bob.wait_for(lambda: bob.terminal_state(T1).title == "optimistic")
            # bob's claim is refused (alice holds it): his pending entry is dropped.
            await bob.dispatch(T1, TerminalClaimed(claim=ClientClaim("bob")))
            assert bob.terminal_state(T1).claim == ClientClaim("bob")
            await bob.wait_for(lambda: not bob.mirrors[T1].pending)
            await bob.wait_for(lambda: bob.terminal_state(T1).claim == ClientClaim("alice"))


async def test_rpc_errors_raise() -> None:
    async with running_server() as server, connect(server.url) as client:
        await client.create_terminal(T1)
        with pytest.raises(RpcError) as info:
            await client.create_terminal(T1)
        assert info.value.code == -32010
        with pytest.raises(RpcError) as info:
            await client.subscribe("ahp-terminal:/missing")
        assert info.value.code == -32008


async def test_two_clients_converge_after_1000_actions() -> None:
    async with (
        running_server() as server,
        connect(server.url, client_id="typist") as typist,
        connect(server.url, client_id="viewer") as viewer,
    ):
        await typist.create_terminal(T1)
        await viewer.subscribe(T1)
        for i in range(1000):
            if i % 100 == 99:
                await typist.dispatch(T1, TerminalTitleChanged(title=f"title-{i}"))
            else:
                await typist.send_input(T1, "x" if i % 10 else "\r")
        host = server.state.host
        with trio.fail_after(60):
            await typist.send_input(T1, "\recho DONE-$((6*7))\r")
            for client in (typist, viewer):

                def done(c: Client = client) -> bool:
                    return "DONE-42\r\n" in c.terminal_state(T1).text()

                await client.wait_for(done)
            # Quiesce: both mirrors reach the server's current state.
            server_state = host.get(T1).state
            for client in (typist, viewer):

                def caught_up(c: Client = client) -> bool:
                    return c.terminal_state(T1) == host.get(T1).state

                await client.wait_for(caught_up)
        assert typist.mirrors[T1].confirmed == viewer.mirrors[T1].confirmed == host.get(T1).state
        assert server_state.title == "title-999"


async def test_reconnect_during_a_100mb_output(tmp_path: Path) -> None:
    big = tmp_path / "big.txt"
    line = "0123456789" * 9 + "abcdefghi\n"
    big.write_text(line * 1_000_000)  # 100 MB
    scrollback = 128 * 1024 * 1024  # keep it all: the mirror must equal the server's snapshot
    async with running_server(scrollback=scrollback) as server:
        # (The reconnect's answer holds up to 100 MB of scrollback. Under load it failed
        # twice: the host refused every reconnect as more than one answer carries, and the
        # client asked the same again for ever (now it subscribes one by one). The server
        # runs in this process: its time building the answer is silence to the client's
        # handshake, hence a generous connect timeout.)
        async with connect(server.url, scrollback=scrollback, connect_timeout=120) as client:
            await client.create_terminal(T1)
            term = client.terminal(T1)
            with trio.fail_after(TIMEOUT):
                await client.wait_for(lambda: "$ " in term.state.text())
            host_term = server.state.host.get(T1)
            await term.send_input(f"cat {big}; echo END-$((40+2))\r")
            host = server.state.host
            with trio.fail_after(180):
                await client.wait_for(lambda: host_term.bytes_read > 50_000_000)
                await client.drop_connection()
                await client.wait_for(lambda: client.reconnects >= 1)
                await client.wait_for(lambda: "END-42\r\n" in term.state.tail(64))
                await client.wait_for(lambda: client.last_seen_seq >= host.hub.seq)
            assert client.connected
            assert "END-42\r\n" in host_term.state.tail(64)
            # Compared with no checkpoint since the last wait: the shell's next prompt
            # may reach the host (not this closed mirror) any time after.
            assert term.state == host_term.state
        assert term.state.text().count(line.replace("\n", "\r\n")) == 1_000_000


async def test_remote_run_and_unix_socket(tmp_path: Path) -> None:
    sock = str(tmp_path / "s.sock")
    async with (
        running_server(ServeOptions(unix=sock, token=TOKEN)) as server,
        connect(server.url) as client,
    ):
        await client.create_terminal(T1)
        with trio.fail_after(TIMEOUT):
            result = await client.run(T1, "echo remote; (exit 3)")
        assert result.output == "remote\n"
        assert result.exit_code == 3


async def test_remote_run_without_command_detection() -> None:
    """A shell with no integration: the marker fallback works over the wire too."""
    async with running_server(shell="/bin/sh") as server, connect(server.url) as client:
        await client.create_terminal(T1)
        with trio.fail_after(TIMEOUT):
            result = await client.run(T1, "echo plain; (exit 4)")
        assert result.output == "plain\n"
        assert result.exit_code == 4


async def test_a_client_the_server_forgot_initializes_again_with_its_subscriptions() -> None:
    """A disconnection longer than the server's grace: ``reconnect`` answers -32008,
    the client initializes afresh and gets every channel it followed back (the
    10-minute stress flood found this: the stalled viewer lost its terminal)."""
    async with running_server() as server, connect(server.url) as client:
        await client.create_terminal(T1)
        term = client.terminal(T1)
        with trio.fail_after(TIMEOUT):
            await client.wait_for(lambda: "$ " in term.state.text())
        server.state.clients.grace = 0.0  # every disconnected record expires at once
        await client.drop_connection()
        host_term = server.state.host.get(T1)
        with trio.fail_after(TIMEOUT):
            await client.wait_for(lambda: client.reconnects >= 1)
            assert T1 in client.mirrors
            await term.send_input("echo back-$((40+2))\r")
            await client.wait_for(lambda: "back-42\r\n" in term.state.tail(64))
            await client.wait_for(lambda: client.last_seen_seq >= server.state.host.hub.seq)
        assert term.state == host_term.state


async def test_without_auto_reconnect_requests_after_a_drop_fail_at_once() -> None:
    async with running_server() as server, connect(server.url, auto_reconnect=False) as client:
        await client.ping()
        await client.drop_connection()
        with trio.fail_after(TIMEOUT):
            while client.connected:  # noqa: ASYNC110 (the reader notices the drop)
                await trio.sleep(0.01)
            with pytest.raises(ConnectionLost):
                await client.ping()


async def test_a_connection_lost_for_good_wakes_every_waiter_with_an_error() -> None:
    async with running_server() as server, connect(server.url, auto_reconnect=False) as client:
        errors: list[BaseException] = []
        parked = 0

        async def waiter() -> None:
            nonlocal parked
            parked += 1
            try:
                await client.wait_for(lambda: False)  # nothing will make this hold
            except ConnectionLost as exc:
                errors.append(exc)

        with trio.fail_after(TIMEOUT):
            async with trio.open_nursery() as nursery:
                for _ in range(3):
                    nursery.start_soon(waiter)
                while parked < 3:  # noqa: ASYNC110
                    await trio.sleep(0.01)
                await client.drop_connection()
            # A predicate that holds still returns; one that cannot raises at once.
            await client.wait_for(lambda: not client.connected)
            with pytest.raises(ConnectionLost, match="connection was lost"):
                await client.wait_for(lambda: client.connected)
        assert len(errors) == 3
        assert all("connection was lost" in str(e) for e in errors)


@pytest.mark.parametrize("auto_reconnect", [False, True])
async def test_a_server_that_shuts_down_is_told_from_a_network_drop(auto_reconnect: bool) -> None:
    """Probe M (finding 5): a server's 1001 ``going away`` (its drain's goodbye) was a
    plain ``ConnectionLost``, "the connection was lost", as for a network drop; ``run``
    waited for a reconnect, then named a terminal the server had disposed. It is now
    :class:`ServerShutDown` (a ``ConnectionLost``), and ``Client.server_shut_down``."""
    from ahp.server.drain import GOING_AWAY, goodbye

    async with (
        running_server() as server,
        connect(server.url, auto_reconnect=auto_reconnect) as client,
    ):
        await client.ping()
        assert (client.server_shut_down, client.server_close) == (False, None)
        with trio.fail_after(TIMEOUT):
            await goodbye(server.state)
            await client.wait_for(lambda: not client.connected)
            assert (client.server_shut_down, client.server_close) == (True, GOING_AWAY)
            if not auto_reconnect:
                with pytest.raises(ServerShutDown, match="server shut down"):
                    await client.wait_for(lambda: client.connected)
                with pytest.raises(ServerShutDown):
                    await client.ping()
    # A network drop is not one.
    async with running_server() as server, connect(server.url, auto_reconnect=False) as client:
        await client.ping()
        await client.drop_connection()
        with trio.fail_after(TIMEOUT):
            await client.wait_for(lambda: not client.connected)
            with pytest.raises(ConnectionLost, match="connection was lost") as caught:
                await client.wait_for(lambda: client.connected)
        assert not isinstance(caught.value, ServerShutDown)
        assert not client.server_shut_down


async def test_a_server_that_never_answers_initialize_is_a_clear_error() -> None:
    """The upgrade succeeds, ``initialize`` gets no answer: bounded by connect_timeout."""
    from ahp.server.upgrade import read_upgrade
    from ahp.server.wsconn import accept

    async def silent(stream: trio.SocketStream) -> None:
        upgrade = await read_upgrade(stream)
        assert upgrade is not None
        assert isinstance(upgrade, tuple)  # a WebSocket upgrade, not a plain request
        ws = await accept(stream, upgrade[0], max_message_size=1 << 20)
        try:
            while True:
                await ws.receive()  # and never answer
        except Exception:
            pass
        finally:
            await ws.aclose()

    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(
            functools.partial(trio.serve_tcp, silent, 0, host="127.0.0.1")
        )
        port = listeners[0].socket.getsockname()[1]
        with trio.fail_after(TIMEOUT), pytest.raises(ClientError, match="initialize"):
            async with connect(f"ws://127.0.0.1:{port}/", connect_timeout=0.5):
                pass
        nursery.cancel_scope.cancel()


async def test_a_follower_never_hands_out_an_envelope_its_snapshot_holds() -> None:
    """Output applied between ``follow()`` and its first item is in that snapshot, and
    was queued as an envelope too: it must not be handed out again (``ahp attach``
    drew the prompt twice, ``$ $``, when the shell printed it in that window)."""
    async with running_server(shell="/bin/sh") as server, connect(server.url) as client:
        await client.create_terminal(T1)
        term = client.terminal(T1)
        follower = term.follow()
        await term.send_input("echo once-$((6*7))\r")
        with trio.fail_after(TIMEOUT):
            await client.wait_for(lambda: "once-42\r\n" in term.state.text())
            snapshot = await follower.__anext__()
            assert isinstance(snapshot, Snapshot) and isinstance(snapshot.state, TerminalState)
            assert "once-42" in snapshot.state.text()
            await term.send_input("echo after-$((6*7))\r")
            later = ""
            while "after-42\r\n" not in later:
                item = await follower.__anext__()
                if isinstance(item, ActionEnvelope) and isinstance(item.action, TerminalData):
                    assert item.serverSeq > snapshot.fromSeq
                    later += item.action.data
        assert "once-42" not in later, later
        await follower.aclose()


@pytest.mark.parametrize("how", ["eof", "reset"])
async def test_a_peer_that_closes_during_the_upgrade_fails_the_connect_at_once(how: str) -> None:
    """Regression: trio-websocket waited for the upgrade's answer until the connect
    timeout when the peer had closed the stream (a server going down, a
    port-forward to nothing): every reconnect attempt of ``run`` cost the whole
    CONNECT_TIMEOUT. It fails at once now, saying why."""

    async def accept_and_close(stream: trio.SocketStream) -> None:
        if how == "reset":
            linger = struct.pack("ii", 1, 0)  # close with a reset, not a FIN
            stream.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, linger)
        await stream.aclose()

    async with trio.open_nursery() as nursery:
        serve = functools.partial(trio.serve_tcp, host="127.0.0.1")
        listeners = await nursery.start(serve, accept_and_close, 0)
        port = listeners[0].socket.getsockname()[1]
        with trio.fail_after(5), pytest.raises(ClientError) as caught:
            async with connect(f"ws://127.0.0.1:{port}/?tkn=x", connect_timeout=30):
                pass
        nursery.cancel_scope.cancel()
    assert "closed the connection during the WebSocket upgrade" in str(caught.value)


async def test_an_error_of_the_block_leaves_connect_as_it_was_raised() -> None:
    # It left wrapped in the client's nursery's ExceptionGroup.
    async with running_server() as server:
        with pytest.raises(LookupError, match="in the block"):
            async with connect(server.url):
                raise LookupError("in the block")


async def test_an_error_of_the_block_leaves_connect_bare_while_it_is_cancelled() -> None:
    # Cancelled from outside, the client's own task ends with a Cancelled of its own:
    # the block's error (or its Cancelled) still leaves bare, not in a group of both.
    async with running_server() as server:
        with trio.move_on_after(0.2), pytest.raises(OSError, match="cleanup"):
            async with connect(server.url):
                try:
                    await trio.sleep_forever()
                finally:
                    raise OSError("cleanup failed")
        seen: list[BaseException] = []
        with trio.move_on_after(0.2) as outer:
            try:
                async with connect(server.url):
                    await trio.sleep_forever()
            except BaseException as exc:
                seen.append(exc)
                raise
        assert outer.cancelled_caught
        assert [type(e) for e in seen] == [trio.Cancelled], seen


class PacedProxy:
    """A TCP proxy to a server on 127.0.0.1: client-to-server bytes go as they come;
    server-to-client bytes go :data:`PACE_CHUNK` at most every :data:`PACE` seconds
    while ``paced`` (a slow link). While ``closed``, a connection is closed at once (a
    server that is down). ``silent_after``: a new connection's server-to-client bytes
    stop after that many (a server that froze mid-answer), for that connection only."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.paced = False
        self.closed = False
        self.silent_after: int | None = None
        #: Connections accepted while open.
        self.connections = 0

    async def handle(self, downstream: trio.SocketStream) -> None:
        if self.closed:
            await downstream.aclose()
            return
        self.connections += 1
        silent_after, self.silent_after = self.silent_after, None
        upstream = await trio.open_tcp_stream("127.0.0.1", self.port)
        async with downstream, upstream, trio.open_nursery() as nursery:

            async def forward(
                source: trio.SocketStream, sink: trio.SocketStream, down: bool
            ) -> None:
                sent = 0
                try:
                    while data := await source.receive_some(PACE_CHUNK):
                        if down and silent_after is not None:
                            data = data[: max(silent_after - sent, 0)]
                            if not data:
                                await trio.sleep_forever()  # (silent, the socket open)
                        await sink.send_all(data)
                        sent += len(data)
                        if down and self.paced:
                            await trio.sleep(PACE)
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    pass
                nursery.cancel_scope.cancel()

            nursery.start_soon(forward, upstream, downstream, True)
            nursery.start_soon(forward, downstream, upstream, False)


#: The slow link of :class:`PacedProxy`: 16 KiB every 20 ms at most (800 KiB/s).
PACE_CHUNK = 16 * 1024
PACE = 0.02


@asynccontextmanager
async def paced_proxy(port: int | None) -> AsyncIterator[tuple[PacedProxy, int]]:
    """A :class:`PacedProxy` to ``port`` and the port it listens on."""
    assert port is not None
    proxy = PacedProxy(port)
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(
            functools.partial(trio.serve_tcp, proxy.handle, 0, host="127.0.0.1")
        )
        yield proxy, listeners[0].socket.getsockname()[1]
        nursery.cancel_scope.cancel()


async def _missed_output(
    server: Sidecar, client: Client, proxy: PacedProxy, size: int
) -> TerminalState:
    """Drop ``client`` (kept away by ``proxy``), print ``size`` bytes or so in its T1
    meanwhile, and let it reconnect; the host's terminal state once the output ended."""
    host_term = server.state.host.get(T1)
    proxy.closed = True  # (each reconnect attempt fails at once meanwhile)
    await client.drop_connection()
    with trio.fail_after(TIMEOUT):
        await client.wait_for(lambda: not client.connected)
    lines = size // 8
    await host_term.send_input(f"seq 1000000 {1000000 + lines}; echo END-$((40+2))\r")
    with trio.fail_after(TIMEOUT):
        while "END-42\r\n" not in host_term.state.tail(64):  # noqa: ASYNC110
            await trio.sleep(0.05)
    assert host_term.scrollback_bytes > size * 9 // 10
    proxy.closed = False
    return host_term.state


async def test_a_reconnect_whose_answer_outlasts_connect_timeout_still_succeeds() -> None:
    """The reconnect answer carries what the client missed (here ~4 MB of output): on
    a slow link (800 KiB/s) it takes ~5 s to arrive. The handshake was cut at
    ``connect_timeout`` (2 s here) in all, every attempt, and the client started over
    for ever (a clean-clone CI run saw the 100 MB test never reconnect); now only
    ``connect_timeout`` seconds with nothing arriving end it."""
    scrollback = 16 * 1024 * 1024
    async with (
        running_server(scrollback=scrollback) as server,
        paced_proxy(server.port) as (proxy, port),
    ):
        url = f"ws://127.0.0.1:{port}/?tkn={TOKEN}"
        async with connect(url, scrollback=scrollback, connect_timeout=2.0) as client:
            await client.create_terminal(T1)
            term = client.terminal(T1)
            with trio.fail_after(TIMEOUT):
                await client.wait_for(lambda: "$ " in term.state.text())
            await _missed_output(server, client, proxy, 4_000_000)
            proxy.paced = True
            host_term = server.state.host.get(T1)
            with trio.fail_after(3 * TIMEOUT):
                await client.wait_for(lambda: client.reconnects >= 1)
                await client.wait_for(lambda: "END-42\r\n" in term.state.tail(64))
                await client.wait_for(lambda: client.last_seen_seq >= server.state.host.hub.seq)
            assert term.state == host_term.state  # (no checkpoint since the last wait)
        assert term.state.text().count("\r\n1000001\r\n") == 1


async def test_a_server_silent_mid_answer_still_fails_the_reconnect_attempt(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A server that stops sending in the middle of the reconnect answer (frozen, its
    connection open) fails that attempt ``connect_timeout`` after the last byte; the
    next attempt, answered, reconnects."""
    caplog.set_level(logging.INFO, logger="ahp.client")
    async with running_server() as server, paced_proxy(server.port) as (proxy, port):
        url = f"ws://127.0.0.1:{port}/?tkn={TOKEN}"
        async with connect(url, connect_timeout=1.0) as client:
            await client.create_terminal(T1)
            term = client.terminal(T1)
            with trio.fail_after(TIMEOUT):
                await client.wait_for(lambda: "$ " in term.state.text())
            proxy.silent_after = 64 * 1024  # (the upgrade's answer, then part of the reply)
            await _missed_output(server, client, proxy, 1_000_000)
            connections = proxy.connections
            with trio.fail_after(TIMEOUT):
                await client.wait_for(lambda: client.reconnects >= 1)
                await client.wait_for(lambda: "END-42\r\n" in term.state.tail(64))
            assert proxy.connections >= connections + 2  # the silent one, then another
        failed = [r.getMessage() for r in caplog.records if "reconnect attempt" in r.getMessage()]
        assert any("nothing arrived for 1 s" in m for m in failed), failed


def _shows(term: RemoteTerminal, text: str) -> Callable[[], bool]:
    """A predicate: ``term``'s mirror holds ``text``."""
    return lambda: text in term.state.text()


@pytest.mark.parametrize("why", ["replay log outrun", "client forgotten"])
async def test_snapshots_more_than_one_answer_carries_are_subscribed_one_by_one(
    why: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reconnect (or, for a client the server forgot, the fresh ``initialize``) whose
    snapshots hold more scrollback than one answer carries is refused (-32000,
    ``data.limit``: ``MAX_ANSWER_SCROLLBACK``): the client asked the same again for ever
    and never reconnected (a clean-clone CI run's 100 MB test, refused at 56-73 MB).
    Now it resumes the root channel alone and subscribes each terminal by itself: both
    mirrors come back equal to the host's, and both keep following."""
    monkeypatch.setattr(handshake, "MAX_ANSWER_SCROLLBACK", 64 * 1024)
    scrollback = 16 * 1024 * 1024
    async with (
        running_server(scrollback=scrollback) as server,
        paced_proxy(server.port) as (proxy, port),
    ):
        url = f"ws://127.0.0.1:{port}/?tkn={TOKEN}"
        async with connect(url, scrollback=scrollback) as client:
            for channel in (T1, T2):
                await client.create_terminal(channel)
                with trio.fail_after(TIMEOUT):
                    await client.wait_for(_shows(client.terminal(channel), "$ "))
            t2 = client.terminal(T2)
            await t2.send_input("seq 100000 120000\r")  # (T2 alone is past the limit too)
            with trio.fail_after(TIMEOUT):
                await client.wait_for(lambda: "120000\r\n" in t2.state.tail(64))
            if why == "client forgotten":
                server.state.clients.grace = 0.0  # every disconnected record expires at once
                missed = 200_000
            else:
                missed = 9_000_000  # (past the replay log's 8 MiB: snapshots, not a replay)
            await _missed_output(server, client, proxy, missed)
            host = server.state.host
            with trio.fail_after(3 * TIMEOUT):
                await client.wait_for(lambda: client.reconnects >= 1)
                await client.wait_for(lambda: client.last_seen_seq >= host.hub.seq)
            assert client.terminal(T1).state == host.get(T1).state
            assert t2.state == host.get(T2).state
            with trio.fail_after(TIMEOUT):
                for channel in (T1, T2):
                    await client.terminal(channel).send_input("echo after-$((40+2))\r")
                    await client.wait_for(_shows(client.terminal(channel), "after-42\r\n"))


async def test_a_server_restarted_on_the_same_address_is_followed_without_a_gap() -> None:
    """The sidecar is stopped and started again on the same port: its sequence starts
    again. The client, forgotten, initializes afresh; it kept the old server's higher
    cursor, so its next reconnect asked the new server for a replay from far ahead and
    its mirror silently missed what came meanwhile (probe Q). Now its cursor is the new
    server's, and after a drop while the terminal prints, the mirror is the server's."""
    stop, stopped = trio.Event(), trio.Event()

    async def first_server(*, task_status: trio.TaskStatus[Sidecar]) -> None:
        async with running_server() as sidecar:
            task_status.started(sidecar)
            await stop.wait()
        stopped.set()

    async with trio.open_nursery() as nursery:
        first: Sidecar = await nursery.start(first_server)
        port = first.port
        assert port is not None
        async with connect(first.url) as client:
            await client.create_terminal(T1)
            term = client.terminal(T1)
            await term.send_input("seq 1 1500\r")
            with trio.fail_after(TIMEOUT):
                await client.wait_for(lambda: "1500\r\n" in term.state.tail(64))
            old_cursor = client.last_seen_seq
            stop.set()  # (the server goes; the client tries to come back)
            await stopped.wait()
            async with running_server(ServeOptions(port=port, token=TOKEN)) as second:
                with trio.fail_after(TIMEOUT):
                    await client.wait_for(lambda: client.connected and client.reconnects >= 1)
                assert client.last_seen_seq < old_cursor  # (the new server's sequence)
                await client.create_terminal(T2)
                t2 = client.terminal(T2)
                with trio.fail_after(TIMEOUT):
                    await client.wait_for(_shows(t2, "$ "))
                reconnects = client.reconnects
                host_t2 = second.state.host.get(T2)
                await client.drop_connection()
                await host_t2.send_input("seq 100 2600; echo END-$((40+2))\r")
                with trio.fail_after(TIMEOUT):
                    await client.wait_for(lambda: client.reconnects > reconnects)
                    await client.wait_for(_shows(t2, "END-42\r\n"))
                    await client.wait_for(lambda: client.last_seen_seq >= second.state.host.hub.seq)
                assert t2.state == host_t2.state
