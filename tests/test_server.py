"""The sidecar over real WebSocket connections: ahp-wire.md §10, security, slow clients.

Every test runs a real server on 127.0.0.1 port 0 and real WebSocket peers.
"""

from __future__ import annotations

import json
import os
import socket
import stat
import time
from pathlib import Path
from typing import Any

import pytest
import trio

from ahp.server import ServeOptions
from ahp.server.session import negotiate_version
from ahp.ws import ConnectionClosed
from tests.helpers import TIMEOUT
from tests.wire import TOKEN, Peer, peer, running_server, upgrade_status_line

ROOT = "ahp-root://"
T1 = "ahp-terminal:/t1"


def claim(client_id: str) -> dict[str, str]:
    return {"kind": "client", "clientId": client_id}


async def create(p: Peer, uri: str = T1, client_id: str = "c1", **extra: Any) -> None:
    params = {"channel": uri, "claim": claim(client_id), **extra}
    assert await p.result("createTerminal", params) is None


# -- handshake ------------------------------------------------------------------------------


async def test_ping_before_initialize_and_errors_keep_the_connection() -> None:
    async with running_server() as server, peer(server.url) as p:
        assert (await p.call("ping", {"channel": ROOT}))["result"] is None
        await p.send("{not json")
        answer = await p.recv()
        assert answer["id"] is None and answer["error"]["code"] == -32700
        answer = await p.call("subscribe", {"channel": ROOT})
        assert answer["error"]["code"] == -32601  # before initialize
        await p.send("[]")
        assert (await p.recv())["error"]["code"] == -32600
        assert (await p.call("ping", {"channel": ROOT}))["result"] is None


async def test_initialize_result_shape() -> None:
    async with running_server() as server, peer(server.url) as p:
        result = await p.initialize("c1")
        assert result["protocolVersion"] == "0.5.0"
        assert isinstance(result["serverSeq"], int)
        assert result["snapshots"] == [
            {
                "resource": ROOT,
                "state": {"agents": [], "terminals": []},
                "fromSeq": result["serverSeq"],
            }
        ]
        assert result["defaultDirectory"].startswith("file:///")
        second = await p.call(
            "initialize", {"channel": ROOT, "clientId": "c1", "protocolVersions": ["0.5.0"]}
        )
        assert second["error"]["code"] == -32601


@pytest.mark.parametrize(
    ("offered", "chosen"),
    [
        (["0.5.0"], "0.5.0"),
        (["0.2.0", "0.4.0", "0.5.2"], "0.5.2"),
        (["0.3.0"], "0.3.0"),
        (["1.0.0", "0.9.0"], "1.0.0"),  # the highest, whatever the order
        (["0.9.0", "1.1.0", "0.5.0"], "1.1.0"),
        (["2.0.0", "0.2.0", "0.11.0"], None),
        (["0.9.0", "0.8.0", "0.7.0", "0.6.0", "0.5.2", "0.5.1"], "0.9.0"),  # VS Code's list
        (5, None),
        (["x", 1, None], None),
    ],
)
def test_version_negotiation(offered: Any, chosen: str | None) -> None:
    assert negotiate_version(offered) == chosen


async def test_unsupported_version_is_refused_and_closed() -> None:
    async with running_server() as server, peer(server.url) as p:
        answer = await p.call(
            "initialize", {"channel": ROOT, "clientId": "c", "protocolVersions": ["2.0.0"]}
        )
        assert answer["error"]["code"] == -32005
        assert answer["error"]["data"]["supportedVersions"]
        with pytest.raises(ConnectionClosed), trio.fail_after(TIMEOUT):
            await p.ws.get_message()


async def test_ids_echoed_exactly_and_list_sessions() -> None:
    async with running_server() as server, peer(server.url) as p:
        await p.initialize("c1")
        for msg_id in ["abc", 7, 2.5, 2**40, 0]:
            assert (await p.call("listSessions", {"channel": ROOT}, msg_id=msg_id)) == {
                "jsonrpc": "2.0",
                "id": msg_id,
                "result": {"items": []},
            }
        answer = await p.call("createSession", {"channel": ROOT})
        assert answer["error"]["code"] == -32601


async def test_ids_beyond_64_bits_are_echoed_as_written() -> None:
    # orjson reads these integers as floats; the answer must carry the integer sent.
    async with running_server() as server, peer(server.url) as p:
        await p.initialize("c1")
        for written in ["18446744073709551616", "-9223372036854775809", "1" + "0" * 40]:
            await p.send('{"jsonrpc":"2.0","id":' + written + ',"method":"ping","params":{}}')
            with trio.fail_after(TIMEOUT):
                frame = await p.ws.get_message()
            assert json.loads(frame) == {"jsonrpc": "2.0", "id": int(written), "result": None}
            # ...also when the request is answered with an error.
            await p.send('{"jsonrpc":"2.0","id":' + written + ',"method":"nope"}')
            with trio.fail_after(TIMEOUT):
                frame = await p.ws.get_message()
            assert json.loads(frame)["id"] == int(written)
            assert json.loads(frame)["error"]["code"] == -32601
        # A float id stays the float sent.
        await p.send('{"jsonrpc":"2.0","id":1.5e300,"method":"ping"}')
        assert (await p.recv())["id"] == 1.5e300


async def test_binary_frames_are_utf8_json() -> None:
    async with running_server() as server, peer(server.url) as p:
        await p.send(b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"channel":"ahp-root://"}}')
        assert (await p.recv()) == {"jsonrpc": "2.0", "id": 1, "result": None}
        await p.send(b"\xff\xfe")
        assert (await p.recv())["error"]["code"] == -32700


# -- terminals ------------------------------------------------------------------------------


async def test_create_subscribe_input_echo_and_output() -> None:
    async with running_server() as server, peer(server.url) as p:
        await p.initialize("c1")
        await create(p, cwd="/tmp", cols=100, rows=30, name="build")
        change = await p.action(lambda a: a["action"]["type"] == "root/terminalsChanged")
        assert "origin" not in change
        assert change["action"]["terminals"] == [
            {"resource": T1, "title": "build", "claim": claim("c1")}
        ]
        snap = (await p.result("subscribe", {"channel": T1}))["snapshot"]
        assert snap["resource"] == T1
        state = snap["state"]
        assert (state["title"], state["cols"], state["rows"], state["isPty"]) == (
            "build",
            100,
            30,
            True,
        )
        assert state["cwd"] == "file:///tmp"
        assert state["claim"] == claim("c1")
        seq = await p.dispatch(T1, {"type": "terminal/input", "data": "echo hi-there\r"})
        echo = await p.action(lambda a: a["action"]["type"] == "terminal/input")
        assert echo["origin"] == {"clientId": "c1", "clientSeq": seq}
        assert echo["serverSeq"] > snap["fromSeq"]
        assert "rejectionReason" not in echo
        await p.text_until(T1, "hi-there\r\n")


async def test_create_errors() -> None:
    async with running_server() as server, peer(server.url) as p:
        await p.initialize("c1")
        await create(p)
        dup = await p.call("createTerminal", {"channel": T1, "claim": claim("c1")})
        assert dup["error"]["code"] == -32010
        no_claim = await p.call("createTerminal", {"channel": "ahp-terminal:/x"})
        assert no_claim["error"]["code"] == -32602
        assert no_claim["error"]["data"]["path"] == "$.params.claim"
        bad_cols = await p.call(
            "createTerminal", {"channel": "ahp-terminal:/x", "claim": claim("c"), "cols": "80"}
        )
        assert bad_cols["error"]["data"]["path"] == "$.params.cols"
        zero = await p.call(
            "createTerminal", {"channel": "ahp-terminal:/x", "claim": claim("c"), "rows": 0}
        )
        assert zero["error"]["code"] == -32602
        scheme = await p.call("createTerminal", {"channel": "file:///x", "claim": claim("c")})
        assert scheme["error"]["data"]["path"] == "$.params.channel"
        cwd = await p.call(
            "createTerminal", {"channel": "ahp-terminal:/x", "claim": claim("c"), "cwd": "/nope/x"}
        )
        assert cwd["error"]["code"] == -32602
        assert "ahp-terminal:/x" not in str(await p.result("subscribe", {"channel": ROOT}))


async def test_rejections_go_to_the_sender_only_and_heal() -> None:
    async with running_server() as server, peer(server.url) as a, peer(server.url) as b:
        await a.initialize("alice")
        await b.initialize("bob")
        await create(a, client_id="alice")
        for p in (a, b):
            await p.result("subscribe", {"channel": T1})
        # bob may not take alice's claim; bob may not dispatch server-only actions.
        seq = await b.dispatch(T1, {"type": "terminal/claimed", "claim": claim("bob")})
        rejected = await b.action(lambda x: x["action"]["type"] == "terminal/claimed")
        assert rejected["origin"] == {"clientId": "bob", "clientSeq": seq}
        assert rejected["rejectionReason"]
        heal = await b.action(lambda x: x["action"]["type"] == "terminal/claimed")
        assert heal["action"]["claim"] == claim("alice") and "origin" not in heal
        for bad in (
            {"type": "terminal/data", "data": "forged"},
            {"type": "terminal/exited", "exitCode": 0},
            {
                "type": "terminal/commandExecuted",
                "commandId": "x",
                "commandLine": "",
                "timestamp": 0,
            },
            {"type": "terminal/resized", "cols": 0, "rows": 5},
            {"type": "terminal/resized", "cols": "wide"},
            {"type": "future/unknown", "x": 1},
        ):
            await b.dispatch(T1, bad)
            got = await b.action(
                lambda x, t=bad["type"]: x["action"]["type"] == t and "origin" in x
            )
            assert got["rejectionReason"], bad
            # Forged output is echoed without its text: a mirror that applies rejected
            # echoes (the upstream ones do) keeps none of it (issue 25).
            assert got["action"] == (
                {"type": "terminal/data", "data": ""} if bad["type"] == "terminal/data" else bad
            )
            if bad["type"] == "terminal/resized" and isinstance(bad.get("cols"), int):
                heal = await b.action(lambda x: x["action"]["type"] == "terminal/resized")
                assert heal["action"] == {"type": "terminal/resized", "cols": 80, "rows": 24}
        # An unknown channel: rejected to bob only (issue 25: never dropped). Then a marker
        # to prove alice saw nothing of it (input: open to every client by default, unlike
        # the title of alice's terminal).
        nope = await b.dispatch("ahp-terminal:/nope", {"type": "terminal/input", "data": "x"})
        got = await b.action(lambda x: x["channel"] == "ahp-terminal:/nope")
        assert got["origin"] == {"clientId": "bob", "clientSeq": nope}
        assert "no terminal" in got["rejectionReason"]
        marker = {"type": "terminal/input", "data": " "}
        await b.dispatch(T1, marker)
        echo = await b.action(
            lambda x: x["channel"] == T1 and x["action"]["type"] == "terminal/input"
        )
        assert echo["origin"]["clientId"] == "bob" and "rejectionReason" not in echo
        # alice saw none of bob's rejected actions before the accepted input.
        seen = []
        while True:
            got = await a.action(lambda x: x["channel"] == T1)
            if got["action"] == marker:
                break
            seen.append(got)
        assert all("rejectionReason" not in e and "origin" not in e for e in seen), seen
        assert not [
            e
            for e in seen
            if e["action"]["type"]
            not in ("terminal/data", "terminal/commandDetectionAvailable", "terminal/cwdChanged")
        ]
        snap = (await a.result("subscribe", {"channel": T1}))["snapshot"]["state"]
        assert snap["claim"] == claim("alice") and snap["cols"] == 80


async def test_claim_resize_title_clear_are_applied() -> None:
    async with running_server() as server, peer(server.url) as p:
        await p.initialize("c1")
        await create(p)
        await p.result("subscribe", {"channel": T1})
        await p.dispatch(T1, {"type": "terminal/resized", "cols": 120, "rows": 40})
        await p.dispatch(T1, {"type": "terminal/titleChanged", "title": "renamed"})
        await p.dispatch(
            T1, {"type": "terminal/claimed", "claim": {"kind": "session", "session": "s:/1"}}
        )
        root_change = await p.action(
            lambda x: (
                x["action"]["type"] == "root/terminalsChanged"
                and x["action"]["terminals"][0]["claim"]["kind"] == "session"
            )
        )
        assert root_change["action"]["terminals"][0]["title"] == "renamed"
        await p.dispatch(T1, {"type": "terminal/input", "data": "stty size\r"})
        await p.text_until(T1, "40 120")
        await p.dispatch(T1, {"type": "terminal/cleared"})
        await p.action(lambda x: x["action"]["type"] == "terminal/cleared")
        state = (await p.result("subscribe", {"channel": T1}))["snapshot"]["state"]
        assert state["content"] == [] or all(part["type"] for part in state["content"])
        assert (state["cols"], state["rows"], state["title"]) == (120, 40, "renamed")


async def test_dispose_then_subscribe_fails_and_nothing_more_arrives() -> None:
    async with running_server() as server, peer(server.url) as p:
        await p.initialize("c1")
        await create(p)
        await p.result("subscribe", {"channel": T1})
        assert await p.result("disposeTerminal", {"channel": T1}) is None
        change = await p.action(
            lambda x: (
                x["action"]["type"] == "root/terminalsChanged" and x["action"]["terminals"] == []
            )
        )
        assert change
        assert (await p.call("subscribe", {"channel": T1}))["error"]["code"] == -32008
        assert (await p.call("disposeTerminal", {"channel": T1}))["error"]["code"] == -32008
        # Drain: a ping answer proves nothing for T1 was queued after the dispose answer.
        await p.result("ping", {"channel": ROOT})
        assert not [
            n
            for n in p.notes
            if n["params"]["channel"] == T1 and n["params"]["serverSeq"] > change["serverSeq"]
        ]


async def test_unsubscribe_stops_messages() -> None:
    async with running_server() as server, peer(server.url) as p:
        await p.initialize("c1")
        await create(p)
        await p.result("subscribe", {"channel": T1})
        await p.send({"jsonrpc": "2.0", "method": "unsubscribe", "params": {"channel": T1}})
        await p.send(
            {"jsonrpc": "2.0", "method": "unsubscribe", "params": {"channel": "ahp-terminal:/zz"}}
        )
        await p.result("ping", {"channel": ROOT})
        p.notes.clear()
        await p.dispatch(T1, {"type": "terminal/input", "data": "echo gone\r"})
        await p.dispatch(ROOT, {"type": "root/configChanged", "config": {"a": 1}})
        got = await p.action()
        assert got["channel"] == ROOT  # the root echo, and nothing for T1 before it


async def test_exit_is_published_with_code() -> None:
    async with running_server() as server, peer(server.url) as p:
        await p.initialize("c1")
        await create(p)
        await p.result("subscribe", {"channel": T1})
        await p.dispatch(T1, {"type": "terminal/input", "data": "exit 5\r"})
        exited = await p.action(lambda x: x["action"]["type"] == "terminal/exited")
        assert exited["action"] == {"type": "terminal/exited", "exitCode": 5}
        info = await p.action(lambda x: x["action"]["type"] == "root/terminalsChanged")
        assert info["action"]["terminals"][0]["exitCode"] == 5


async def test_a_shell_exiting_inside_a_command_ends_that_command() -> None:
    # The command part stayed open (isComplete false, no exit code) in every view for good.
    async with running_server(shell="/bin/bash") as server, peer(server.url) as p:
        await p.initialize("c1")
        await create(p)
        await p.result("subscribe", {"channel": T1})
        await p.action(lambda x: x["action"]["type"] == "terminal/commandDetectionAvailable")
        await p.dispatch(T1, {"type": "terminal/input", "data": "echo bye; exit 7\r"})
        await p.action(lambda x: x["action"]["type"] == "terminal/commandExecuted")
        await p.action(lambda x: x["action"]["type"] == "terminal/exited")
        finished = await p.action(lambda x: x["action"]["type"] == "terminal/commandFinished")
        assert finished["action"]["exitCode"] == 7, finished
        async with peer(server.url) as q:
            await q.initialize("c2")
            state = (await q.result("subscribe", {"channel": T1}))["snapshot"]["state"]
        [command] = [part for part in state["content"] if part["type"] == "command"]
        assert command["isComplete"] is True and command["exitCode"] == 7, command


async def test_server_seq_strictly_increases_across_channels() -> None:
    async with running_server() as server, peer(server.url) as p:
        await p.initialize("c1")
        for i in range(3):
            await create(p, f"ahp-terminal:/m{i}")
            await p.result("subscribe", {"channel": f"ahp-terminal:/m{i}"})
        for n in range(10):
            for i in range(3):
                await p.dispatch(
                    f"ahp-terminal:/m{i}", {"type": "terminal/titleChanged", "title": f"{n}"}
                )
        seqs = []
        for _ in range(30):
            seqs.append((await p.action())["serverSeq"])
        assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)


# -- reconnect --------------------------------------------------------------------------------


async def test_reconnect_replay_snapshot_and_unknown() -> None:
    async with running_server(log_envelopes=64) as server:
        async with peer(server.url) as p:
            init = await p.initialize("c1")
            # Unclaimed: another client may retitle and dispose them (the policy table).
            await create(p, client_id="")
            await create(p, "ahp-terminal:/t2", client_id="")
            snap = (await p.result("subscribe", {"channel": T1}))["snapshot"]
            last = snap["fromSeq"]
        async with peer(server.url) as q:
            # A few actions happen while c1 is away.
            await q.initialize("other")
            await q.dispatch(T1, {"type": "terminal/titleChanged", "title": "while-away"})
            await q.result("disposeTerminal", {"channel": "ahp-terminal:/t2"})
        async with peer(server.url) as p:
            result = await p.reconnect("c1", last, [ROOT, T1, "ahp-terminal:/t2"])
            assert result["type"] == "replay"
            assert result["missing"] == ["ahp-terminal:/t2"]
            seqs = [a["serverSeq"] for a in result["actions"]]
            assert seqs == sorted(seqs) and all(s > last for s in seqs)
            assert any(a["action"].get("title") == "while-away" for a in result["actions"])
            assert init["serverSeq"] < last
        async with peer(server.url) as q:
            await q.initialize("flood")
            await q.result("subscribe", {"channel": T1})
            for i in range(100):  # overflow the 64-envelope log
                await q.dispatch(T1, {"type": "terminal/titleChanged", "title": f"t{i}"})
            await q.action(lambda x: x["action"].get("title") == "t99")
        async with peer(server.url) as p:
            result = await p.reconnect("c1", last, [ROOT, T1])
            assert result["type"] == "snapshot"
            assert {s["resource"] for s in result["snapshots"]} == {ROOT, T1}
            assert [s["state"]["title"] for s in result["snapshots"] if s["resource"] == T1] == [
                "t99"
            ]
        async with peer(server.url) as p:
            answer = await p.call(
                "reconnect",
                {
                    "channel": ROOT,
                    "clientId": "stranger",
                    "lastSeenServerSeq": 0,
                    "subscriptions": [],
                },
            )
            assert answer["error"]["code"] == -32008


async def test_reconnect_with_cursor_0_gets_snapshots_while_the_log_holds_everything() -> None:
    # Cursor 0 is no baseline: a replay (the log still held every envelope) missed what
    # the terminal held before the client's subscription.
    async with running_server() as server:
        async with peer(server.url) as p:
            await p.initialize("c1")
            await create(p)
            await p.dispatch(T1, {"type": "terminal/titleChanged", "title": "before"})
            await p.result("subscribe", {"channel": T1})
        async with peer(server.url) as p:
            result = await p.reconnect("c1", 0, [ROOT, T1])
            assert result["type"] == "snapshot", result
            assert {s["resource"] for s in result["snapshots"]} == {ROOT, T1}


@pytest.mark.parametrize("form", ["A", "B"])
async def test_a_terminal_created_again_while_away_is_resumed_by_a_snapshot(form: str) -> None:
    # Its envelopes were replayed onto the snapshot of the terminal disposed before it:
    # the mirror mixed the two (old title, size and claim, both outputs).
    async with running_server() as server:
        async with peer(server.url) as b:
            await b.initialize("b")
            await create(b, client_id="")
            async with peer(server.url) as a:
                result = await a.initialize("a", [ROOT, T1])
                last = result["serverSeq"]
                await b.dispatch(T1, {"type": "terminal/titleChanged", "title": "old"})
                seen = await a.action(lambda x: x["action"].get("title") == "old")
                last = seen["serverSeq"]
            assert await b.result("disposeTerminal", {"channel": T1}) is None
            await create(b, client_id="", cols=100)
            await b.dispatch(T1, {"type": "terminal/titleChanged", "title": "new"})
            # Also a terminal the client never subscribed to: no baseline either.
            await create(b, "ahp-terminal:/t2", client_id="")
        async with peer(server.url) as a:
            channels = [ROOT, T1, "ahp-terminal:/t2"]
            if form == "A":
                result = await a.reconnect("a", last, channels)
                assert result["type"] == "snapshot", result
                snapshots = {s["resource"]: s for s in result["snapshots"]}
            else:
                cursors = [{"channel": c, "lastSeenServerSeq": last} for c in channels]
                params = {"channel": ROOT, "clientId": "a", "subscriptions": cursors}
                entries = (await a.result("reconnect", params))["channels"]
                kinds = {e["channel"]: e["kind"] for e in entries}
                assert kinds[T1] == "snapshot" and kinds["ahp-terminal:/t2"] == "snapshot", kinds
                snapshots = {
                    e["channel"]: e["snapshot"] for e in entries if e["kind"] == "snapshot"
                }
            state = snapshots[T1]["state"]
            assert state["cols"] == 100 and state["title"] != "old", state


async def test_replay_never_repeats_what_the_snapshot_held() -> None:
    async with running_server() as server:
        async with peer(server.url) as p:
            await p.initialize("c1", [ROOT])
            await create(p)
            first = (await p.action(lambda x: x["action"]["type"] == "root/terminalsChanged"))[
                "serverSeq"
            ]
            await p.dispatch(T1, {"type": "terminal/titleChanged", "title": "before-subscribe"})
            await p.action(lambda x: x["action"]["type"] == "root/terminalsChanged")
            snap = (await p.result("subscribe", {"channel": T1}))["snapshot"]
        async with peer(server.url) as p:
            # The client reports the last envelope it saw (older than its T1 snapshot): it
            # may hold the snapshot or not (next test), so it gets a new one, never a
            # replay of envelopes the snapshot held.
            result = await p.reconnect("c1", first, [T1])
            assert result["type"] == "snapshot", result
            assert result["snapshots"][0]["fromSeq"] >= snap["fromSeq"]


@pytest.mark.parametrize("form", ["A", "B"])
async def test_a_subscribe_answer_lost_with_the_connection_does_not_shorten_the_replay(
    form: str,
) -> None:
    # A client re-subscribed (as a mirror does to recover) and the connection broke
    # before the answer reached it; the reconnect from its real cursor was answered
    # "replay" without the input, data and commands after that cursor (the server
    # measured from the snapshot it had sent, not from the cursor the client gave).
    async with running_server() as server:
        async with peer(server.url) as b:
            await b.initialize("b")
            await create(b, client_id="")
            async with peer(server.url) as a:
                await a.initialize("a", [ROOT, T1])
                await b.dispatch(T1, {"type": "terminal/titleChanged", "title": "between"})
                last = (await a.action(lambda x: x["action"].get("title") == "between"))[
                    "serverSeq"
                ]
                # What "a" reads from here on is lost with its connection: a change by
                # another client, and the answer to its subscribe.
                await b.dispatch(T1, {"type": "terminal/titleChanged", "title": "missed"})
                await a.action(lambda x: x["action"].get("title") == "missed")
                subscribe = {"channel": T1}
                await a.send(
                    {"jsonrpc": "2.0", "id": 99, "method": "subscribe", "params": subscribe}
                )
                await a.response(99)  # (read here only to know it was handled)
        async with peer(server.url) as a:
            if form == "A":
                result = await a.reconnect("a", last, [ROOT, T1])
                if result["type"] == "replay":
                    titles = [x["action"].get("title") for x in result["actions"]]
                    assert "missed" in titles, result
                else:
                    states = {s["resource"]: s["state"] for s in result["snapshots"]}
                    assert states[T1]["title"] == "missed", result
            else:
                cursors = [{"channel": c, "lastSeenServerSeq": last} for c in (ROOT, T1)]
                params = {"channel": ROOT, "clientId": "a", "subscriptions": cursors}
                entries = {
                    e["channel"]: e for e in (await a.result("reconnect", params))["channels"]
                }
                entry = entries[T1]
                if entry["kind"] == "replay":
                    titles = [x["action"].get("title") for x in entry["actions"]]
                    assert "missed" in titles, entry
                else:
                    assert entry["snapshot"]["state"]["title"] == "missed", entry


async def test_disconnect_keeps_terminals_and_claims() -> None:
    async with running_server() as server:
        async with peer(server.url) as p:
            await p.initialize("c1")
            await create(p)
        async with peer(server.url) as q:
            await q.initialize("c2")
            state = (await q.result("subscribe", {"channel": T1}))["snapshot"]["state"]
            assert state["claim"] == claim("c1") and "exitCode" not in state


# -- security ---------------------------------------------------------------------------------


async def test_token_required() -> None:
    async with running_server() as server:
        base = server.url.split("?")[0]
        assert server.port is not None
        assert await upgrade_status_line(server.port, "/", {}) == b"HTTP/1.1 403 "
        assert await upgrade_status_line(server.port, "/?tkn=wrong", {}) == b"HTTP/1.1 403 "
        wrong_bearer = {"Authorization": "Bearer wrong"}
        assert await upgrade_status_line(server.port, "/", wrong_bearer) == b"HTTP/1.1 403 "
        assert (
            await upgrade_status_line(server.port, f"/?tkn={TOKEN}", {})
            == b"HTTP/1.1 101 Switching Protocols"
        )
        async with peer(base, extra_headers=[(b"Authorization", f"Bearer {TOKEN}".encode())]) as p:
            await p.result("ping", {"channel": ROOT})
        async with peer(server.url) as p:
            await p.result("ping", {"channel": ROOT})


async def test_origin_and_host_checks() -> None:
    options = ServeOptions(port=0, token=TOKEN, allow_origins=frozenset({"http://good.example"}))
    async with running_server(options) as server:
        assert server.port is not None
        evil = {"Origin": "http://evil.example"}
        assert await upgrade_status_line(server.port, f"/?tkn={TOKEN}", evil) == b"HTTP/1.1 403 "
        async with peer(server.url, extra_headers=[(b"Origin", b"http://good.example")]) as p:
            await p.result("ping", {"channel": ROOT})
        rebound = server.url.replace("127.0.0.1", "localhost")
        async with peer(rebound) as p:
            await p.result("ping", {"channel": ROOT})
        # DNS rebinding: a Host header naming another site.
        rebinding = {"Host": f"evil.example:{server.port}"}
        assert (
            await upgrade_status_line(server.port, f"/?tkn={TOKEN}", rebinding) == b"HTTP/1.1 403 "
        )


async def test_unix_socket_mode(tmp_path: Path) -> None:
    path = str(tmp_path / "ahp.sock")
    from ahp.client import connect

    async with running_server(ServeOptions(unix=path, token=TOKEN)) as server:
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        assert server.url.startswith("ws+unix://")
        async with connect(server.url) as client:
            assert client.root.agents == ()


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in _leaves(inner)]
    return [exc]


async def test_a_unix_socket_path_in_use_is_refused_and_a_stale_one_reused(
    tmp_path: Path,
) -> None:
    # A second server at a running one's path unlinked it and took it over (the first
    # ran on, its terminals unreachable), and removed the path on exit even when it was
    # another server's by then.
    from ahp.client import connect

    path = str(tmp_path / "ahp.sock")
    async with running_server(ServeOptions(unix=path, token=TOKEN)) as first:
        refused: list[BaseException] = []
        try:
            async with running_server(ServeOptions(unix=path, token=TOKEN)):
                pass
        except* OSError as group:
            refused.extend(_leaves(group))
        assert [str(e) for e in refused] == ["[Errno 98] another server is listening on it"]
        async with connect(first.url) as client:  # still reachable
            assert client.root.agents == ()
        # The path taken over by someone else meanwhile: not removed on exit.
        os.unlink(path)
        squatter = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        squatter.bind(path)
        squatter.listen(1)
    try:
        assert stat.S_ISSOCK(os.lstat(path).st_mode)
    finally:
        squatter.close()
    # A stale socket (nobody listens on it) is replaced.
    async with (
        running_server(ServeOptions(unix=path, token=TOKEN)) as again,
        connect(again.url) as client,
    ):
        assert client.root.agents == ()


async def test_oversized_message_closes_with_1009() -> None:
    async with running_server() as server, peer(server.url) as p:
        with pytest.raises(ConnectionClosed) as info, trio.fail_after(TIMEOUT):
            await p.send("x" * (17 * 1024 * 1024))
            await p.ws.get_message()
        assert info.value.reason is not None
        assert info.value.reason.code == 1009
    async with running_server() as server, peer(server.url) as p:
        await p.initialize("c1")  # the server is fine


# -- many clients, slow clients ----------------------------------------------------------------


async def test_stalled_client_is_closed_1013_and_others_get_everything(tmp_path: Path) -> None:
    big = tmp_path / "big.txt"
    big.write_text(("z" * 999 + "\n") * 50_000)  # 50 MB
    async with running_server() as server, peer(server.url) as active:
        await active.initialize("active")
        await create(active)
        await active.result("subscribe", {"channel": T1})
        async with peer(server.url, receive_buffer_size=4096, message_queue_size=1) as stalled:
            stalled_ws = stalled.ws
            await stalled.initialize("stalled")
            await stalled.result("subscribe", {"channel": T1})
            await active.dispatch(
                T1,
                {
                    "type": "terminal/input",
                    "data": f"stty -echo; cat {big}; echo END-OF-$((40+2))\r",
                },
            )
            received = 0
            with trio.fail_after(180):
                text_tail = ""
                while True:
                    params = await active.action(lambda x: x["channel"] == T1)
                    if params["action"]["type"] == "terminal/data":
                        data = params["action"]["data"]
                        received += data.count("z")
                        text_tail = (text_tail + data)[-64:]
                        if "END-OF-42\r\n" in text_tail:
                            break
            assert received == 50_000 * 999
            host_outboxes = [o for o in server.state.host.hub.subscribers(T1)]
            assert all(o.queued_bytes <= 16 * 1024 * 1024 for o in host_outboxes)
            # The stalled client was cut off: with 1013 ("try again later") when the close
            # frame could still be framed, else (a send cancelled half-way through a
            # frame, see ahp.server.websocket) the stream ends without one (1006). Which
            # one depends on how much the kernel buffered: either way it may resume.
            with pytest.raises(ConnectionClosed) as info, trio.fail_after(TIMEOUT):
                while True:
                    await stalled_ws.get_message()
            assert info.value.reason is not None
            assert info.value.reason.code in (1013, 1006)
        async with peer(server.url) as again:
            result = await again.reconnect("stalled", 0, [T1])
            assert result["type"] in ("replay", "snapshot")
            if result["type"] == "snapshot":
                [snapshot] = result["snapshots"]
                assert snapshot["resource"] == T1


async def test_library_input_that_is_not_utf8_reaches_viewers_as_valid_text() -> None:
    """An agent's ``send_input(bytes)`` goes to the pty byte for byte; the echo
    viewers get is valid Unicode (U+FFFD), and their connection keeps working."""
    async with running_server() as server, peer(server.url) as p:
        term = await server.state.host.create_terminal(argv=["sh", "-c", "head -c 5 | od -An -tx1"])
        await p.initialize("viewer", [term.uri])
        await term.send_input(b"A\xff\xfeB\n")
        echo = await p.action(lambda q: q["action"]["type"] == "terminal/input")
        assert echo["action"]["data"] == "A\ufffd\ufffdB\n" and "origin" not in echo
        with trio.fail_after(TIMEOUT):
            text = await p.text_until(term.uri, "42 0a")
        assert "41 ff fe 42 0a" in text  # the raw bytes reached the program
        assert (await p.call("ping", {"channel": "ahp-root://"}))["result"] is None


def test_client_registry_reports_each_forgotten_client_once() -> None:
    from ahp.server.clients import ClientRegistry

    registry = ClientRegistry(grace=0.0, max_records=3)
    kept = registry.connect("kept", "0.5.0")
    for cid in ("a", "b"):
        registry.disconnect(registry.connect(cid, "0.5.0"))
    assert kept.connections == 1
    time.sleep(0.001)
    assert registry.take_forgotten() == ["a", "b"]
    assert registry.take_forgotten() == []
    # Past the bound, the oldest idle record is forgotten to make room.
    registry.grace = 3600.0
    for cid in ("c", "d", "e"):
        registry.disconnect(registry.connect(cid, "0.5.0"))
    assert registry.take_forgotten() == ["c"]
    # An id that came back before the server took it is not reported.
    registry.connect("d", "0.5.0")  # evicts the oldest idle record, "d" itself, then returns
    registry.disconnect(registry.connect("e", "0.5.0"))  # evicts "e" (idle), then returns
    assert len(registry) == 3
    assert registry.take_forgotten() == []


async def test_holder_only_input_refuses_other_clients_input() -> None:
    """``serve --holder-only-input``: input from a client that does not hold the terminal's
    client claim is rejected to it only; the holder's and the library's input go through."""
    options = ServeOptions(port=0, token=TOKEN, holder_only_input=True)
    async with (
        running_server(options, shell="/bin/sh") as sidecar,
        peer(sidecar.url) as alice,
        peer(sidecar.url) as bob,
    ):
        host = sidecar.state.host
        assert host.holder_only_input
        await alice.initialize("alice")
        await alice.result("createTerminal", {"channel": T1, "claim": claim("alice")})
        await alice.result("subscribe", {"channel": T1})
        await bob.initialize("bob", [T1])
        with trio.fail_after(TIMEOUT):
            await bob.dispatch(T1, {"type": "terminal/input", "data": "echo bob-$((6*7))\r"})
            refused = await bob.action(lambda p: p["action"]["type"] == "terminal/input")
            assert "claim" in refused["rejectionReason"]
            await alice.dispatch(T1, {"type": "terminal/input", "data": "echo alice-$((6*7))\r"})
            await alice.text_until(T1, "alice-42")
            await host.get(T1).send_input("echo lib-$((6*7))\r")
            await alice.text_until(T1, "lib-42")
        assert "bob-42" not in host.get(T1).state.text()
