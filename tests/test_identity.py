"""A client's identity belongs to its connection (issue 26, item 1).

One live connection per ``clientId``, decided at ``initialize`` / ``reconnect``:
a second connection claiming a live id is refused unless the live one is dead
(it does not answer a ping) or the newcomer presents the id's resume token. Real
server, real clients: raw peers (as upstream clients, without a token), raw
sockets that stop reading (a connection dead but not yet noticed), ``ahp.client``.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest
import trio

from ahp.client import connect
from ahp.protocol.commands import MAX_RESUME_TOKEN, RESUME_META
from ahp.protocol.processes import EXEC, EXEC_RESULT, SIGNAL
from ahp.protocol.state import ClientClaim
from ahp.server import ServeOptions, Sidecar
from ahp.server.clients import ClientRegistry, RegistryFull
from ahp.server.session import PROBE_TIMEOUT, REPLACED_CLOSE
from ahp.ws import ConnectionClosed
from tests.helpers import TIMEOUT
from tests.test_faults import eventually
from tests.wire import TOKEN, masked_text_frame, peer, running_server

ROOT = "ahp-root://"
T1 = "ahp-terminal:/t1"


def _port(sidecar: Sidecar) -> int:
    return int(sidecar.url.split(":")[2].split("/")[0])


class RawPeer:
    """A WebSocket client on a bare socket, that answers nothing it is not asked to
    read: once it stops reading, it does not answer pings (a dead connection the
    server has not noticed: a dropped network, a frozen process)."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.buf = b""

    async def _more(self) -> bytes:
        chunk = await self.stream.receive_some(65536)
        if not chunk:
            raise EOFError("the server closed the connection")
        return chunk

    async def upgrade(self, port: int, token: str = TOKEN) -> None:
        await self.stream.send_all(
            (
                f"GET /?tkn={token} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                "Upgrade: websocket\r\nConnection: Upgrade\r\n"
                "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
            ).encode()
        )
        while b"\r\n\r\n" not in self.buf:
            self.buf += await self._more()
        head, self.buf = self.buf.split(b"\r\n\r\n", 1)
        assert head.startswith(b"HTTP/1.1 101"), head

    def _header(self) -> tuple[int, int] | None:
        """(payload start, payload length) of the buffered frame, if its header is in."""
        buf = self.buf
        if len(buf) < 2:
            return None
        n = buf[1] & 0x7F
        if n < 126:
            return 2, n
        size = 2 if n == 126 else 8
        if len(buf) < 2 + size:
            return None
        return 2 + size, int.from_bytes(buf[2 : 2 + size], "big")

    async def frame(self) -> tuple[int, bytes]:
        """The next server frame: (opcode, payload)."""
        while True:
            header = self._header()
            if header is not None:
                start, n = header
                if len(self.buf) >= start + n:
                    opcode = self.buf[0] & 0x0F
                    payload, self.buf = self.buf[start : start + n], self.buf[start + n :]
                    return opcode, payload
            self.buf += await self._more()

    async def call(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        with trio.fail_after(TIMEOUT):
            return await self._call(method, params)

    async def _call(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        await self.stream.send_all(
            masked_text_frame(
                orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
            )
        )
        while True:
            opcode, payload = await self.frame()
            if opcode == 1 and b'"id":1' in payload:
                answer: dict[str, Any] = orjson.loads(payload)
                return answer

    async def closed(self) -> None:
        """Read until the server closes the connection (a close frame or EOF)."""
        with contextlib.suppress(EOFError, trio.BrokenResourceError):
            while True:
                opcode, _ = await self.frame()
                if opcode == 8:
                    return


@contextlib.asynccontextmanager
async def raw_peer(sidecar: Sidecar) -> AsyncIterator[RawPeer]:
    stream = await trio.open_tcp_stream("127.0.0.1", _port(sidecar))
    try:
        raw = RawPeer(stream)
        with trio.fail_after(TIMEOUT):
            await raw.upgrade(_port(sidecar))
        yield raw
    finally:
        await stream.aclose()


def _init(client_id: str, meta: dict[str, Any] | None = None) -> dict[str, Any]:
    params: dict[str, Any] = {
        "channel": ROOT,
        "protocolVersions": ["0.5.0"],
        "clientId": client_id,
        "initialSubscriptions": [ROOT],
    }
    if meta is not None:
        params["_meta"] = meta
    return params


def _reconnect(client_id: str, meta: dict[str, Any] | None = None) -> dict[str, Any]:
    params: dict[str, Any] = {
        "channel": ROOT,
        "clientId": client_id,
        "lastSeenServerSeq": 0,
        "subscriptions": [ROOT],
    }
    if meta is not None:
        params["_meta"] = meta
    return params


def _live(sidecar: Sidecar, client_id: str) -> bool:
    record = sidecar.state.clients.get(client_id)
    return record is not None and record.connections == 1


@pytest.mark.parametrize("holder_only", [False, True], ids=["default", "holder-only"])
async def test_a_second_connection_cannot_act_as_a_live_client(holder_only: bool) -> None:
    """The attack of issue 26: mallory sends ``initialize`` (or ``reconnect``) with
    alice's ``clientId`` (it is in every envelope's origin) while alice is connected.
    Alice's connection answers the server's ping, so mallory is refused both ways, and
    nothing mallory sends afterwards acts as alice: with ``--holder-only-input``, its
    input and signals, under its own id, are refused."""
    options = ServeOptions(port=0, token=TOKEN, holder_only_input=holder_only)
    async with (
        running_server(options, shell="/bin/sh") as sidecar,
        peer(sidecar.url) as alice,
        peer(sidecar.url) as mallory,
    ):
        await alice.initialize("alice")
        await alice.result(
            "createTerminal", {"channel": T1, "claim": {"kind": "client", "clientId": "alice"}}
        )
        await alice.result("subscribe", {"channel": T1})
        # The shell is up (a SIGINT while it starts would end it, not the test's point).
        await alice.dispatch(T1, {"type": "terminal/input", "data": "echo up-$((6*7))\r"})
        with trio.fail_after(TIMEOUT):
            await alice.text_until(T1, "up-42")
        for method, params in (("initialize", _init("alice")), ("reconnect", _reconnect("alice"))):
            answer = await mallory.call(method, params)
            assert answer["error"]["code"] == -32009, answer
            assert "in use by a live connection" in answer["error"]["message"]
        # Not initialized: nothing else is taken from it.
        refused = await mallory.call(SIGNAL, {"channel": T1, "signal": "SIGKILL"})
        assert refused["error"]["code"] == -32601
        await mallory.initialize("mallory", [T1])
        seq = await mallory.dispatch(T1, {"type": "terminal/input", "data": "echo M-$((6*7))\r"})
        echo = await mallory.action(lambda p: p.get("origin", {}).get("clientSeq") == seq)
        assert echo["origin"]["clientId"] == "mallory"
        signalled = await mallory.call(SIGNAL, {"channel": T1, "signal": "SIGINT"})
        if holder_only:
            assert "claimed by client 'alice'" in echo["rejectionReason"]
            assert signalled["error"]["code"] == -32009
        else:
            assert "rejectionReason" not in echo and "result" in signalled
            # The shell was at its prompt, so the signal was a typed Ctrl-C: let the shell
            # handle it (it echoes ^C, then draws a fresh prompt) before alice types, or
            # her line can be thrown away with the interrupted one (seen under load).
            # Bounded: a shell can also hold the Ctrl-C, drawing nothing until the next
            # key (bash and dash do, under load); the retry below covers that.
            with trio.move_on_after(TIMEOUT / 4):
                after = (await alice.text_until(T1, "^C")).rsplit("^C", 1)[1]
                while not after.rstrip(" ").endswith(("$", "#")):
                    after += await alice.text_until(T1, " ")
        # Alice keeps her id and her terminal. (Typed again if a late Ctrl-C -- dash can
        # defer its handling past the next prompt -- threw the line away: only alice's
        # line prints "A-42", so a retry cannot make this pass wrongly.)
        with trio.fail_after(TIMEOUT * 2):
            while True:
                await alice.dispatch(T1, {"type": "terminal/input", "data": "echo A-$((6*7))\r"})
                with trio.move_on_after(TIMEOUT / 4):
                    await alice.text_until(T1, "A-42")
                    break
        assert sidecar.state.clients.get("alice") is not None
        if holder_only:
            assert "M-42" not in sidecar.state.host.get(T1).state.text()


@pytest.mark.parametrize("method", ["reconnect", "initialize"])
async def test_a_dead_but_unnoticed_connection_is_replaced(method: str) -> None:
    """An upstream client reconnects with the same ``clientId`` after its network
    dropped, while this side still counts the old connection live: the old one does
    not answer the ping, so within PROBE_TIMEOUT the newcomer gets the id and the old
    connection is closed. No lock-out."""
    async with running_server() as sidecar, raw_peer(sidecar) as old:
        answer = await old.call("initialize", _init("ts-client"))
        assert "result" in answer, answer
        # From here on ``old`` reads nothing: it cannot answer a ping.
        assert _live(sidecar, "ts-client")
        async with peer(sidecar.url) as new:
            started = trio.current_time()
            with trio.fail_after(PROBE_TIMEOUT + TIMEOUT):
                params = _reconnect("ts-client") if method == "reconnect" else _init("ts-client")
                taken = await new.call(method, params)
            assert "result" in taken, taken
            assert trio.current_time() - started >= PROBE_TIMEOUT * 0.9  # it was probed
            record = sidecar.state.clients.get("ts-client")
            assert record is not None and record.connections == 1
            with trio.fail_after(TIMEOUT):
                await old.closed()
            # The new connection acts as the client.
            assert (await new.call("ping", {"channel": ROOT}))["result"] is None
            assert _live(sidecar, "ts-client")


async def test_a_live_client_whose_requests_keep_its_reader_busy_is_not_replaced() -> None:
    """The pong is read by the connection's reader, which runs the client's requests: a
    client whose pipelined requests each wait (an exec's result, up to 2 s each) did
    not answer the probe in time and was replaced as dead. What it sent meanwhile (the
    pong, waiting in the socket) shows it is there."""
    async with running_server() as sidecar, peer(sidecar.url) as live:
        await live.initialize("busy")
        started = await live.result(EXEC, {"argv": ["sleep", "30"]})
        for n in range(2):  # (pipelined: each waits EXEC_RESULT_WAIT for a result)
            await live.send(
                {
                    "jsonrpc": "2.0",
                    "id": 900 + n,
                    "method": EXEC_RESULT,
                    "params": {"channel": started["channel"]},
                }
            )
        await trio.sleep(0.2)  # (the reader is in the first one)
        async with peer(sidecar.url) as newcomer:
            with trio.fail_after(PROBE_TIMEOUT + TIMEOUT):
                answer = await newcomer.call("initialize", _init("busy"))
        assert answer["error"]["code"] == -32009, answer
        assert "in use by a live connection" in answer["error"]["message"]
        with trio.fail_after(3 * TIMEOUT):
            for n in range(2):  # the live one goes on: every request answered
                assert (await live.response(900 + n))["error"]["code"] != -32009


async def test_the_resume_token_proves_the_client() -> None:
    """A client that asks for a token (``_meta`` key, value ``""``) gets one; then only
    a connection presenting it takes the id: at once (no probe), closing the live one
    with REPLACED_CLOSE; a wrong or missing token is refused, also while the client is
    away after a dropped connection. After the client closes on purpose, its id is free
    again without the token."""
    async with running_server() as sidecar:
        async with peer(sidecar.url) as first:
            result = await first.result("initialize", _init("agent", {RESUME_META: ""}))
            token = result["_meta"][RESUME_META]
            assert isinstance(token, str) and len(token) >= 32
            async with peer(sidecar.url) as impostor:
                for method, params in (
                    ("initialize", _init("agent")),
                    ("initialize", _init("agent", {RESUME_META: ""})),
                    ("reconnect", _reconnect("agent")),
                    ("reconnect", _reconnect("agent", {RESUME_META: "x" * 32})),
                ):
                    answer = await impostor.call(method, params)
                    assert answer["error"]["code"] == -32009, (method, params, answer)
                    assert "resume token" in answer["error"]["message"]
            async with peer(sidecar.url) as second:
                with trio.fail_after(PROBE_TIMEOUT / 2):  # no probe: the token is proof
                    replay = await second.result(
                        "reconnect", _reconnect("agent", {RESUME_META: token})
                    )
                assert replay["type"] in ("replay", "snapshot")
                with trio.fail_after(TIMEOUT), pytest.raises(ConnectionClosed) as closed:
                    while True:
                        await first.ws.get_message()
                assert closed.value.reason is not None
                assert closed.value.reason.code == REPLACED_CLOSE[0]
                assert "replaced" in (closed.value.reason.reason or "")
                # Dropped without a close: the record stays bound while the client is away.
                await second.ws._stream.aclose()
                await eventually(lambda: not _live(sidecar, "agent"))
        async with peer(sidecar.url) as impostor:
            answer = await impostor.call("initialize", _init("agent"))
            assert answer["error"]["code"] == -32009, answer
        async with peer(sidecar.url) as back:
            assert "result" in await back.call(
                "reconnect", _reconnect("agent", {RESUME_META: token})
            )
            await back.ws.aclose()  # a close frame: the client leaves on purpose
        # ``back`` closed with a close frame (it left): the id is free without the token.
        await eventually(lambda: not _live(sidecar, "agent"))
        async with peer(sidecar.url) as restarted:
            assert "result" in await restarted.call("initialize", _init("agent"))


async def test_a_malformed_resume_token_is_invalid_params() -> None:
    async with running_server() as sidecar, peer(sidecar.url) as p:
        for bad in (5, None, "x" * (MAX_RESUME_TOKEN + 1)):
            answer = await p.call("initialize", _init("c", {RESUME_META: bad}))
            assert answer["error"]["code"] == -32602, answer
            assert RESUME_META in answer["error"]["data"]["path"]
        assert "result" in await p.call(
            "initialize", _init("c", {RESUME_META: "x" * MAX_RESUME_TOKEN})
        )


async def test_ahp_client_reconnects_with_its_token_and_keeps_its_id() -> None:
    """``ahp.client`` asks for a token and presents it at every reconnect; meanwhile
    nobody else can take its id, not even while its connection is down."""
    async with (
        running_server(shell="/bin/sh") as sidecar,
        connect(sidecar.url, token=TOKEN, client_id="py") as client,
    ):
        assert client.resume_token is not None
        await client.create_terminal(T1, claim={"kind": "client", "clientId": "py"})
        async with peer(sidecar.url) as impostor:
            answer = await impostor.call("initialize", _init("py"))
            assert answer["error"]["code"] == -32009
        await client.drop_connection()
        await eventually(lambda: client.reconnects > 0 and client.connected)
        assert sidecar.state.host.get(T1).state.claim.clientId == "py"  # type: ignore[union-attr]
        async with peer(sidecar.url) as impostor:
            answer = await impostor.call("reconnect", _reconnect("py"))
            assert answer["error"]["code"] == -32009


async def test_an_old_connection_replaced_acts_no_more() -> None:
    """Frames a replaced connection still sends are not acted on."""
    async with running_server(shell="/bin/sh") as sidecar, raw_peer(sidecar) as old:
        answer = await old.call("initialize", _init("c", {RESUME_META: ""}))
        token = answer["result"]["_meta"][RESUME_META]
        async with peer(sidecar.url) as new:
            await new.result("reconnect", _reconnect("c", {RESUME_META: token}))
            frame = {
                "jsonrpc": "2.0",
                "id": 9,
                "method": "createTerminal",
                "params": {"channel": "ahp-terminal:/late"},
            }
            with contextlib.suppress(trio.BrokenResourceError):
                await old.stream.send_all(masked_text_frame(orjson.dumps(frame)))
            with trio.fail_after(TIMEOUT):
                await old.closed()
            assert (await new.call("ping", {"channel": ROOT}))["result"] is None
            assert "ahp-terminal:/late" not in sidecar.state.host


def test_a_read_only_newcomer_displaces_only_read_only_records() -> None:
    """The table's bound makes room from idle records, read-only ones first, then those
    without a resume token, then bound ones; a read-only newcomer may take only a
    read-only record's place, and is refused when none is idle."""
    registry = ClientRegistry(max_records=3)
    registry.disconnect(registry.connect("bound", "0.5.0", bound=True))
    registry.disconnect(registry.connect("plain", "0.5.0"))
    registry.disconnect(registry.connect("ro-1", "0.5.0", read_only=True))
    registry.connect("ro-2", "0.5.0", read_only=True)  # room: the idle read-only record
    assert registry.get("ro-1") is None
    with pytest.raises(RegistryFull, match="none of the read-only ones"):
        registry.connect("ro-3", "0.5.0", read_only=True)  # ro-2 is live: nothing to take
    assert registry.get("bound") is not None and registry.get("plain") is not None
    registry.connect("full", "0.5.0")  # a full newcomer: the unbound record before the bound
    assert registry.get("plain") is None and registry.get("bound") is not None
    assert registry.take_forgotten() == ["ro-1", "plain"]
    registry.connect("full", "0.5.0")  # (its own record is replaced: nothing forgotten)
    assert registry.take_forgotten() == [] and len(registry) == 3


async def test_read_only_churn_cannot_forget_a_full_clients_record() -> None:
    """The probe's attack: read-only connections initialize and leave with fresh ids
    past the table's bound while a full client with a resume token is away. Its record
    (claim, token) stays; its id stays its own; read-only newcomers are refused once
    only full clients' records are left to forget. (Before: the victim's claim was
    released, its token refused, and a read-only connection took its id.)"""
    read = "read-only-secret"
    options = ServeOptions(port=0, token=TOKEN, read_token=read)
    async with running_server(options) as sidecar:
        sidecar.state.clients.max_records = 6
        read_url = sidecar.url.replace(TOKEN, read)
        async with peer(sidecar.url) as victim:
            result = await victim.result("initialize", _init("victim", {RESUME_META: ""}))
            token = result["_meta"][RESUME_META]
            claim = {"kind": "client", "clientId": "victim"}
            await victim.result("createTerminal", {"channel": T1, "claim": claim})
            await victim.ws._stream.aclose()  # dropped, not left: the record stays bound
        await eventually(lambda: not _live(sidecar, "victim"))
        for n in range(20):  # (each leaves before the next: their own records make room)
            async with peer(read_url) as churn:
                assert "result" in await churn.call("initialize", _init(f"churn-{n}"))
        async with peer(read_url) as squatter:
            answer = await squatter.call("initialize", _init("victim"))
            assert answer["error"]["code"] == -32009, answer
        assert sidecar.state.host.get(T1).state.claim == ClientClaim(clientId="victim")
        async with peer(sidecar.url) as back:
            assert "result" in await back.call(
                "reconnect", _reconnect("victim", {RESUME_META: token})
            )
            # The table full of live records (read-only ones could only replace idle
            # read-only ones): a read-only newcomer is refused, not let in past the bound.
            async with contextlib.AsyncExitStack() as stack:
                for n in range(5):
                    live = await stack.enter_async_context(peer(read_url))
                    await live.result("initialize", _init(f"live-{n}"))
                async with peer(read_url) as late:
                    answer = await late.call("initialize", _init("late"))
                    assert answer["error"]["code"] == -32009, answer
                    assert "try again later" in answer["error"]["message"]


@pytest.mark.parametrize("bound", [False, True], ids=["plain", "bound"])
async def test_a_full_client_takes_its_id_from_a_read_only_squatter(bound: bool) -> None:
    """Probe K, finding 2: a read-only connection initializes as the id a full-access
    client uses (plainly, or asking for a resume token) and stays connected, answering
    pings. The full client's ``reconnect`` finds no record of its own (-32008, as
    without the squatter) and its ``initialize`` is granted; the squatter is closed
    (1008) and, read-only, cannot take the id back. (Before: both were refused -32009,
    "in use by a live connection" / "bound to its resume token".)"""
    read = "read-only-secret"
    options = ServeOptions(port=0, token=TOKEN, read_token=read)
    meta = {RESUME_META: ""} if bound else None
    async with running_server(options) as sidecar:
        read_url = sidecar.url.replace(TOKEN, read)
        async with peer(read_url) as squatter:
            assert "result" in await squatter.call("initialize", _init("agent-main", meta))
            async with peer(sidecar.url) as full:
                answer = await full.call("reconnect", _reconnect("agent-main"))
                assert answer["error"]["code"] == -32008, answer
                with trio.fail_after(TIMEOUT), pytest.raises(ConnectionClosed) as closed:
                    while True:
                        await squatter.ws.get_message()
                assert closed.value.reason is not None
                assert closed.value.reason.code == REPLACED_CLOSE[0]
                assert "full access" in (closed.value.reason.reason or "")
                assert "result" in await full.call("initialize", _init("agent-main", meta))
                record = sidecar.state.clients.get("agent-main")
                assert record is not None and not record.read_only and _live(sidecar, "agent-main")
                async with peer(read_url) as again:
                    answer = await again.call("initialize", _init("agent-main"))
                    assert answer["error"]["code"] == -32009, answer
                    assert "full access" in answer["error"]["message"]
        # Full against full keeps the rules: a live full client that answers pings keeps
        # its id against another full-access newcomer.
        async with peer(sidecar.url) as holder, peer(sidecar.url) as other:
            await holder.result("initialize", _init("shared"))
            answer = await other.call("initialize", _init("shared"))
            assert answer["error"]["code"] == -32009, answer
            assert "in use" in answer["error"]["message"]


@pytest.mark.parametrize("ahead", [10_000, 2**40, 2**63 - 1])  # (not 1: the prompt moves it)
async def test_a_cursor_past_the_servers_sequence_gets_snapshots(ahead: int) -> None:
    """A ``lastSeenServerSeq`` this server never gave (a cursor kept across a restart of
    the server, a client's bug) cannot be replayed from: snapshots, in both reconnect
    forms. (It was answered "replay, nothing missing": the client believed itself up to
    date.)"""
    async with running_server() as sidecar:
        async with peer(sidecar.url) as first:
            await first.initialize("cursor")
            claim = {"kind": "client", "clientId": "cursor"}
            await first.result("createTerminal", {"channel": T1, "claim": claim})
            await first.ws.aclose()
        seq = sidecar.state.host.hub.seq
        async with peer(sidecar.url) as back:
            params = _reconnect("cursor")
            params["lastSeenServerSeq"] = seq + ahead
            params["subscriptions"] = [ROOT, T1]
            answer = await back.result("reconnect", params)
            assert answer["type"] == "snapshot", answer
            assert {s["resource"] for s in answer["snapshots"]} == {ROOT, T1}
        async with peer(sidecar.url) as form_b:
            cursors = [{"channel": T1, "lastSeenServerSeq": seq + ahead}]
            params = {"channel": ROOT, "clientId": "cursor", "subscriptions": cursors}
            (entry,) = (await form_b.result("reconnect", params))["channels"]
            assert entry["kind"] == "snapshot", entry
