"""AHP 1.x and 0.5 clients against one server, over real WebSockets and real shells.

- A client offering only ``["1.0.0", "0.9.0"]`` goes through everything against
  ``python -m ahp serve`` (a subprocess): initialize, create, subscribe, input,
  output with a finished command, resize, claims, both reconnect forms, exit
  (``lifecycle``) and dispose.
- A mixed room: a 0.5 client and a 1.x client on the same terminals each see the
  same state in their own dialect, through create, output, a detected command,
  claims, exits without and with a code, reconnects of each form, and dispose.
- ``ahp.client`` offers 1.x first, falls back to 0.5, and reads both.
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Callable
from typing import Any

import orjson
import pytest
import trio
import trio_websocket

from ahp.client import Client, connect
from ahp.client.session import ReconnectForm
from ahp.protocol import SessionClaim, TerminalState
from ahp.protocol.dialect import LEGACY_VERSIONS, Dialect
from tests.helpers import TIMEOUT
from tests.test_faults import serve_process
from tests.wire import TOKEN, Peer, peer, running_server

ROOT = "ahp-root://"
T1 = "ahp-terminal:/t1"
T2 = "ahp-terminal:/t2"
MODERN = ["1.0.0", "0.9.0"]
RUNNING = {"status": "running"}
FLOW = {
    "receive": {"windowBytes": 65536, "maximumFrameBytes": 16384, "maximumMessageBytes": 1 << 20}
}


async def init(p: Peer, client_id: str, versions: list[str], **extra: Any) -> Any:
    return await p.result(
        "initialize",
        {
            "channel": ROOT,
            "protocolVersions": versions,
            "clientId": client_id,
            "initialSubscriptions": [ROOT],
            **extra,
        },
    )


async def collect(
    p: Peer, channel: str, stop: Callable[[dict[str, Any]], bool]
) -> list[dict[str, Any]]:
    """Every envelope on ``channel`` up to and including the first that satisfies ``stop``."""
    seen: list[dict[str, Any]] = []
    while True:
        params = await p.action(lambda a: a["channel"] == channel)
        seen.append(params)
        if stop(params):
            return seen


def of_type(kind: str) -> Callable[[dict[str, Any]], bool]:
    return lambda params: params["action"]["type"] == kind


def text_of(envelopes: list[dict[str, Any]]) -> str:
    return "".join(e["action"]["data"] for e in envelopes if e["action"]["type"] == "terminal/data")


def until_text(needle: str) -> Callable[[dict[str, Any]], bool]:
    text: list[str] = []

    def stop(params: dict[str, Any]) -> bool:
        if params["action"]["type"] == "terminal/data":
            text.append(params["action"]["data"])
        return needle in "".join(text)

    return stop


def host_state(server: Any, uri: str) -> TerminalState:
    return server.state.host.get(uri).state  # type: ignore[no-any-return]


def reconnect_form(client: Client) -> ReconnectForm:
    """``client.reconnect_form``, read through a call: mypy would keep the property
    narrowed across the reconnect that changes it."""
    return client.reconnect_form


def catalogue(envelope: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {t["resource"]: t for t in envelope["action"]["terminals"]}


# -- a 1.x-only client against `python -m ahp serve` --------------------------------------------


async def test_a_1x_only_client_does_everything_against_serve() -> None:
    session_claim = {
        "kind": "session",
        "session": "copilot:/s1",
        "chat": "ahp-chat:/s1/c1",
        "turnId": "turn-1",
        "toolCallId": "tool-1",
    }
    async with serve_process("--token", TOKEN) as (proc, url, err):
        async with peer(url) as p:
            result = await init(
                p,
                "modern",
                MODERN,
                clientInfo={"name": "acme-ide", "version": "2.5.0"},
                capabilities={"mcpApps": {}},
                locale="en-US",
                _meta={"acme/trace": "abc"},
                **{"x-acme": {"anything": 1}},
            )
            assert result["protocolVersion"] == "1.0.0"
            assert result["serverInfo"]["name"] == "ahp-terminals"
            assert result["snapshots"][0]["state"] == {"agents": [], "terminals": []}
            assert await p.result("listSessions", {"channel": ROOT, "limit": 10}) == {"items": []}

            # create, with a 1.x session claim (chat kept as sent)
            params = {"channel": T1, "claim": session_claim, "name": "build", "_meta": {}}
            assert await p.result("createTerminal", {**params, "cols": 100, "rows": 30}) is None
            change = await p.action(of_type("root/terminalsChanged"))
            assert change["action"]["terminals"] == [
                {"resource": T1, "title": "build", "claim": session_claim, "lifecycle": RUNNING}
            ]

            # subscribe with every 1.x option: windowed delivery is declined by omission
            answer = await p.result(
                "subscribe",
                {
                    "channel": T1,
                    "delivery": {"maxLatencyMs": 0},
                    "view": {"turns": 2},
                    "flowControl": FLOW,
                    "_meta": {"acme/x": 1},
                },
            )
            assert set(answer) == {"snapshot"}
            state = answer["snapshot"]["state"]
            assert state["lifecycle"] == RUNNING and "exitCode" not in state
            assert state["claim"] == session_claim and state["isPty"] is True
            assert (state["cols"], state["rows"]) == (100, 30)

            # the client takes the terminal over; then input -> output with a finished command
            mine = {"kind": "client", "clientId": "modern"}
            seq = await p.dispatch(T1, {"type": "terminal/claimed", "claim": mine})
            echo = await p.action(of_type("terminal/claimed"))
            assert echo["origin"] == {"clientId": "modern", "clientSeq": seq}
            assert echo["action"]["claim"] == mine and "rejectionReason" not in echo
            await p.dispatch(T1, {"type": "terminal/input", "data": "echo one-$((40+2))\r"})
            seen = await collect(p, T1, of_type("terminal/commandFinished"))
            assert "one-42" in text_of(seen)
            started = [e for e in seen if e["action"]["type"] == "terminal/commandExecuted"]
            assert started and started[-1]["action"]["commandLine"] == "echo one-$((40+2))"
            assert seen[-1]["action"]["exitCode"] == 0

            # resize
            await p.dispatch(T1, {"type": "terminal/resized", "cols": 120, "rows": 40})
            resized = await p.action(of_type("terminal/resized"))
            assert resized["action"] == {"type": "terminal/resized", "cols": 120, "rows": 40}
            assert "rejectionReason" not in resized

            # claim for a chat again: the catalogue shows it in the 1.x shape
            await p.dispatch(T1, {"type": "terminal/claimed", "claim": session_claim})
            claimed = await p.action(of_type("terminal/claimed"))
            assert claimed["action"]["claim"] == session_claim
            listed = await p.action(of_type("root/terminalsChanged"))
            assert catalogue(listed)[T1]["claim"] == session_claim
            last_seen = listed["serverSeq"]

            # something to replay: output produced while nobody is connected
            await p.dispatch(
                T1, {"type": "terminal/input", "data": "sleep 0.3; echo later-$((1+1))\r"}
            )

        # reconnect, form A (a connection-wide cursor), with windows: replayed
        async with peer(url) as q:
            replay = await q.result(
                "reconnect",
                {
                    "channel": ROOT,
                    "clientId": "modern",
                    "lastSeenServerSeq": last_seen,
                    "subscriptions": [ROOT, T1],
                    "windows": {"items": [{"channel": T1, "lastAppliedServerSeq": last_seen}]},
                },
            )
            assert replay["type"] == "replay" and replay["missing"] == []
            assert replay["windows"] == {"items": []}  # no windowed subscription to resume
            seqs = [e["serverSeq"] for e in replay["actions"]]
            assert seqs == sorted(seqs) and all(s > last_seen for s in seqs)
            text = text_of(replay["actions"])
            if "later-2" not in text:
                text += text_of(await collect(q, T1, until_text("later-2")))
            assert "later-2" in text
            await q.dispatch(T1, {"type": "terminal/input", "data": "echo mark-$((2+3))\r"})
            marked = await collect(q, T1, until_text("mark-5"))
            cursor_root, cursor_t1 = last_seen, marked[-1]["serverSeq"]

        # reconnect, form B (a cursor per channel): replay, snapshot, missing
        async with peer(url) as r:
            recovered = await r.result(
                "reconnect",
                {
                    "channel": ROOT,
                    "clientId": "modern",
                    "subscriptions": [
                        {"channel": ROOT, "lastSeenServerSeq": cursor_root},
                        {"channel": T1, "lastSeenServerSeq": 0},  # no baseline: a snapshot
                        {"channel": T2, "lastSeenServerSeq": cursor_t1},
                    ],
                },
            )
            by_channel = {c["channel"]: c for c in recovered["channels"]}
            assert [c["kind"] for c in recovered["channels"]] == ["replay", "snapshot", "missing"]
            assert by_channel[ROOT]["actions"] == []  # nothing changed in the catalogue
            snap = by_channel[T1]["snapshot"]
            assert snap["resource"] == T1 and "mark-5" in str(snap["state"]["content"])
            assert snap["state"]["lifecycle"] == RUNNING and snap["state"]["cols"] == 120

            # exit: lifecycle with the code, on the terminal and in the catalogue
            await r.dispatch(T1, {"type": "terminal/input", "data": "exit 3\r"})
            exited = await collect(r, T1, of_type("terminal/exited"))
            assert exited[-1]["action"] == {"type": "terminal/exited", "exitCode": 3}
            listed = await r.action(of_type("root/terminalsChanged"))
            assert catalogue(listed)[T1]["lifecycle"] == {"status": "exited", "exitCode": 3}
            state = (await r.result("subscribe", {"channel": T1}))["snapshot"]["state"]
            assert state["lifecycle"] == {"status": "exited", "exitCode": 3}
            assert "exitCode" not in state

            # dispose
            assert await r.result("disposeTerminal", {"channel": T1, "_meta": {}}) is None
            gone = await r.action(of_type("root/terminalsChanged"))
            assert gone["action"]["terminals"] == []
        proc.send_signal(signal.SIGTERM)
        with trio.fail_after(TIMEOUT):
            assert await proc.wait() == 0
    logs = b"".join(err).decode(errors="replace")
    assert "Traceback" not in logs, logs


# -- a mixed room -------------------------------------------------------------------------------


async def test_a_05_and_a_1x_client_see_the_same_terminals_in_their_own_dialects() -> None:
    old_claim = {"kind": "session", "session": "copilot:/s1"}
    chat_claim = {**old_claim, "chat": "ahp-chat:/s1/c1", "turnId": "t1"}
    async with running_server() as server, peer(server.url) as old, peer(server.url) as new:
        assert (await init(old, "old", ["0.5.0"]))["protocolVersion"] == "0.5.0"
        assert (await init(new, "new", MODERN))["protocolVersion"] == "1.0.0"

        # create (by the 0.5 client, a 0.5 session claim): each catalogue in its shape
        assert await old.result("createTerminal", {"channel": T1, "claim": old_claim}) is None
        old_list = catalogue(await old.action(of_type("root/terminalsChanged")))
        new_list = catalogue(await new.action(of_type("root/terminalsChanged")))
        assert old_list[T1]["claim"] == old_claim and "lifecycle" not in old_list[T1]
        assert new_list[T1]["claim"] == {**old_claim, "chat": "copilot:/s1"}  # see dialect.py
        assert new_list[T1]["lifecycle"] == RUNNING
        # (The shell's integration loads while it starts: on a loaded machine it could
        # announce itself between the two subscribes below, and print more output.)
        terminal = server.state.host.get(T1)
        with trio.fail_after(TIMEOUT):
            while not terminal.state.supportsCommandDetection:  # noqa: ASYNC110
                await trio.sleep(0.02)
        old_state = (await old.result("subscribe", {"channel": T1}))["snapshot"]["state"]
        new_state = (await new.result("subscribe", {"channel": T1}))["snapshot"]["state"]
        assert "lifecycle" not in old_state and "exitCode" not in old_state
        assert new_state["lifecycle"] == RUNNING
        skip = ("claim", "lifecycle", "content")
        assert {k: v for k, v in old_state.items() if k not in skip} == {
            k: v for k, v in new_state.items() if k not in skip
        }
        old_text = "".join(p.get("value", p.get("output", "")) for p in old_state["content"])
        new_text = "".join(p.get("value", p.get("output", "")) for p in new_state["content"])
        assert new_text.startswith(old_text)  # (the later snapshot may hold more output)

        # output with a detected command: the same envelopes reach both
        await new.dispatch(T1, {"type": "terminal/input", "data": "echo mixed-$((6*7))\r"})
        old_seen = await collect(old, T1, of_type("terminal/commandFinished"))
        new_seen = await collect(new, T1, of_type("terminal/commandFinished"))
        assert "mixed-42" in text_of(old_seen) and "mixed-42" in text_of(new_seen)
        assert old_seen[-1] == new_seen[-1]  # one envelope, one frame, shared
        assert old_seen[-1]["action"]["exitCode"] == 0

        # claims: a 1.x chat claims it; the 0.5 client sees the claim without the chat
        await new.dispatch(T1, {"type": "terminal/claimed", "claim": chat_claim})
        seen_new = await new.action(of_type("terminal/claimed"))
        seen_old = await old.action(of_type("terminal/claimed"))
        assert seen_new["action"]["claim"] == chat_claim
        assert seen_old["action"]["claim"] == {
            "kind": "session",
            "session": "copilot:/s1",
            "turnId": "t1",
        }
        assert seen_new["serverSeq"] == seen_old["serverSeq"]
        # the 0.5 client narrows it (drops the turn): the chat survives for 1.x viewers
        await old.dispatch(T1, {"type": "terminal/claimed", "claim": old_claim})
        narrowed_old = await old.action(of_type("terminal/claimed"))
        narrowed_new = await new.action(of_type("terminal/claimed"))
        assert narrowed_old["action"]["claim"] == old_claim
        assert narrowed_new["action"]["claim"] == {**old_claim, "chat": "ahp-chat:/s1/c1"}
        assert host_state(server, T1).claim == SessionClaim(
            session="copilot:/s1", chat="ahp-chat:/s1/c1"
        )

        # exit without a code (a signal) on a second terminal
        assert await new.result("createTerminal", {"channel": T2, "claim": chat_claim}) is None
        for p in (old, new):
            await p.result("subscribe", {"channel": T2})
        await new.dispatch(T2, {"type": "terminal/input", "data": "kill -9 $$\r"})
        lists = {}
        for name, p in (("old", old), ("new", new)):
            exited = await collect(p, T2, of_type("terminal/exited"))
            assert exited[-1]["action"] == {"type": "terminal/exited"}
            after = exited[-1]["serverSeq"]
            listed = await p.action(
                lambda a, after=after: (
                    of_type("root/terminalsChanged")(a) and a["serverSeq"] > after
                )
            )
            lists[name] = catalogue(listed)
        assert "exitCode" not in lists["old"][T2] and "lifecycle" not in lists["old"][T2]
        assert lists["new"][T2]["lifecycle"] == {"status": "exited"}
        assert host_state(server, T2).exited and host_state(server, T2).exitCode is None
        old_t2 = (await old.result("subscribe", {"channel": T2}))["snapshot"]["state"]
        new_t2 = (await new.result("subscribe", {"channel": T2}))["snapshot"]["state"]
        assert "exitCode" not in old_t2 and new_t2["lifecycle"] == {"status": "exited"}

    # (reconnects of each form and an exit with a code: below, on one server)


async def test_mixed_room_reconnects_and_an_exit_with_a_code() -> None:
    async with running_server() as server:
        host = server.state.host
        async with peer(server.url) as old, peer(server.url) as new:
            await init(old, "old", ["0.5.0"])
            await init(new, "new", MODERN)
            assert (
                await new.result(
                    "createTerminal",
                    {"channel": T1, "claim": {"kind": "client", "clientId": "new"}},
                )
                is None
            )
            for p in (old, new):
                await p.action(of_type("root/terminalsChanged"))
                await p.result("subscribe", {"channel": T1})
            await new.dispatch(T1, {"type": "terminal/input", "data": "echo ready-$((3*3))\r"})
            cursors = {}
            for name, p in (("old", old), ("new", new)):
                seen = await collect(p, T1, of_type("terminal/commandFinished"))
                cursors[name] = seen[-1]["serverSeq"]
        # while both are away, the shell exits with a code
        await host.get(T1).send_input("exit 7\r")
        with trio.fail_after(TIMEOUT):
            await host.get(T1).exited.wait()
            while host.catalogue_pending:  # noqa: ASYNC110 (published within CATALOGUE_INTERVAL)
                await trio.sleep(0.01)
        async with peer(server.url) as old, peer(server.url) as new:
            replay = await old.reconnect("old", cursors["old"], [ROOT, T1])
            assert replay["type"] == "replay"
            kinds = [e["action"]["type"] for e in replay["actions"]]
            assert "terminal/exited" in kinds and "root/terminalsChanged" in kinds
            old_list = [
                e for e in replay["actions"] if e["action"]["type"] == "root/terminalsChanged"
            ]
            assert catalogue(old_list[-1])[T1]["exitCode"] == 7
            assert "lifecycle" not in catalogue(old_list[-1])[T1]

            recovered = await new.result(
                "reconnect",
                {
                    "channel": ROOT,
                    "clientId": "new",
                    "subscriptions": [
                        {"channel": ROOT, "lastSeenServerSeq": cursors["new"]},
                        {"channel": T1, "lastSeenServerSeq": cursors["new"]},
                    ],
                },
            )
            root_replay, t1_replay = recovered["channels"]
            assert root_replay["kind"] == t1_replay["kind"] == "replay"
            assert all(e["channel"] == ROOT for e in root_replay["actions"])
            assert all(e["channel"] == T1 for e in t1_replay["actions"])
            new_list = root_replay["actions"][-1]
            assert catalogue(new_list)[T1]["lifecycle"] == {"status": "exited", "exitCode": 7}
            assert "exitCode" not in catalogue(new_list)[T1]
            t1_types = [e["action"]["type"] for e in t1_replay["actions"]]
            exited = t1_replay["actions"][t1_types.index("terminal/exited")]["action"]
            assert exited == {"type": "terminal/exited", "exitCode": 7}
            # After it, only the end of the command the shell exited in (``exit 7``).
            after = t1_replay["actions"][t1_types.index("terminal/exited") + 1 :]
            assert [e["action"]["type"] for e in after] in ([], ["terminal/commandFinished"])
            # the same envelopes, each in its dialect
            assert [e["serverSeq"] for e in replay["actions"]] == sorted(
                e["serverSeq"] for e in root_replay["actions"] + t1_replay["actions"]
            )

            # dispose: both catalogues empty, in either shape
            assert await new.result("disposeTerminal", {"channel": T1}) is None
            for p in (old, new):
                gone = await p.action(of_type("root/terminalsChanged"))
                assert gone["action"]["terminals"] == []
            for p in (old, new):
                answer = await p.call("subscribe", {"channel": T1})
                assert answer["error"]["code"] == -32008


# -- ahp.client ---------------------------------------------------------------------------------


async def test_the_client_speaks_1x_and_0_5_and_both_reconnect_forms() -> None:
    async with (
        running_server() as server,
        connect(server.url, reconnect_form="cursors") as modern,
        connect(server.url, protocol_versions=LEGACY_VERSIONS) as legacy,
    ):
        assert (modern.protocol_version, modern.dialect) == ("1.0.0", Dialect.V1)
        assert (legacy.protocol_version, legacy.dialect) == ("0.5.0", Dialect.V05)
        chat = {"kind": "session", "session": "copilot:/s", "chat": "ahp-chat:/s/c"}
        await modern.create_terminal(T1, claim=chat)
        await legacy.subscribe(T1)
        await modern.wait_for(
            lambda: modern.terminal_state(T1).claim.KIND == "session", timeout=TIMEOUT
        )
        assert modern.terminal_state(T1).claim == SessionClaim(
            session="copilot:/s", chat="ahp-chat:/s/c"
        )
        assert legacy.terminal_state(T1).claim == SessionClaim(session="copilot:/s")
        result = await modern.terminal(T1).run("echo both-$((5+5))", timeout=TIMEOUT)
        assert result.exit_code == 0 and "both-10" in result.output
        # each reconnects its own way; the mirrors carry on
        await modern.drop_connection()
        await legacy.drop_connection()
        await modern.wait_for(lambda: modern.reconnects == 1, timeout=TIMEOUT)
        await legacy.wait_for(lambda: legacy.reconnects == 1, timeout=TIMEOUT)
        await legacy.send_input(T1, "exit 5\r")
        for client in (modern, legacy):

            def done(c: Any = client) -> bool:
                infos = c.root.terminals or ()
                return bool(c.terminal_state(T1).exited and infos and infos[0].exited)

            await client.wait_for(done, timeout=TIMEOUT)
            assert client.terminal_state(T1).lifecycle.exitCode == 5
            terminals = client.root.terminals
            assert terminals is not None
            assert terminals[0].lifecycle.exitCode == 5


async def test_the_client_falls_back_to_0_5_when_1x_is_refused() -> None:
    """Against a strict host that refuses any offer naming a version it does not know
    (a real WebSocket server: -32005 as AHP says, then close)."""
    offers: list[list[str]] = []

    async def strict_host(request: trio_websocket.WebSocketRequest) -> None:
        ws = await request.accept()
        message = orjson.loads(await ws.get_message())
        versions = message["params"]["protocolVersions"]
        offers.append(versions)
        if versions != ["0.5.0"]:
            error = {"code": -32005, "message": "no", "data": {"supportedVersions": ["0.5.0"]}}
            await ws.send_message(
                orjson.dumps({"jsonrpc": "2.0", "id": message["id"], "error": error}).decode()
            )
            await ws.aclose(1002)
            return
        result = {
            "protocolVersion": "0.5.0",
            "serverSeq": 0,
            "snapshots": [
                {"resource": ROOT, "state": {"agents": [], "terminals": []}, "fromSeq": 0}
            ],
        }
        await ws.send_message(
            orjson.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result}).decode()
        )
        with trio.move_on_after(TIMEOUT), contextlib.suppress(trio_websocket.ConnectionClosed):
            while True:
                await ws.get_message()

    async with trio.open_nursery() as nursery:
        listener = await nursery.start(
            trio_websocket.serve_websocket, strict_host, "127.0.0.1", 0, None
        )
        port = listener.port
        async with connect(f"ws://127.0.0.1:{port}/") as client:
            assert client.protocol_version == "0.5.0" and client.dialect is Dialect.V05
            assert client.root.terminals == ()
        nursery.cancel_scope.cancel()
    assert offers == [["1.0.0", "0.9.0", "0.5.0"], ["0.5.0"]]


# -- tolerance and bad input in the 1.x vocabulary ------------------------------------------------


async def test_1x_tolerance_and_clear_errors_keep_the_connection() -> None:
    async with running_server() as server, peer(server.url) as p:
        bad_info = await p.call(
            "initialize",
            {"channel": ROOT, "protocolVersions": MODERN, "clientId": "c", "clientInfo": {}},
        )
        assert bad_info["error"]["code"] == -32602
        assert bad_info["error"]["data"]["path"] == "$.params.clientInfo.name"
        await init(p, "c", MODERN, clientInfo={"name": "n", "x-extra": True})
        # unknown x- methods and notifications: an error, or nothing; the connection goes on
        assert (await p.call("x-acme/do", {"channel": ROOT}))["error"]["code"] == -32601
        await p.send({"jsonrpc": "2.0", "method": "x-acme/note", "params": {"channel": ROOT}})
        await p.send(
            {
                "jsonrpc": "2.0",
                "method": "channel/credit",
                "params": {"channel": T1, "consumedBytes": 5},
            }
        )
        # listSessions paging: types checked; no cursor was ever handed out
        assert await p.result("listSessions", {"channel": ROOT, "limit": 1, "_meta": {}}) == {
            "items": []
        }
        for params, path in (
            ({"limit": "10"}, "$.params.limit"),
            ({"cursor": "abc"}, "$.params.cursor"),
            ({"cursor": 5}, "$.params.cursor"),
        ):
            answer = await p.call("listSessions", {"channel": ROOT, **params})
            assert answer["error"]["code"] == -32602 and answer["error"]["data"]["path"] == path
        # subscribe options this host does not use are ignored, whatever their shape
        await p.result(
            "createTerminal", {"channel": T1, "claim": {"kind": "client", "clientId": "c"}}
        )
        answer = await p.result("subscribe", {"channel": T1, "flowControl": 5, "delivery": "soon"})
        assert set(answer) == {"snapshot"}
        assert (await p.call("ping", {"channel": ROOT, "_meta": {"a": 1}}))["result"] is None

    async with running_server() as server:
        async with peer(server.url) as p:  # (then gone: one live connection per clientId)
            await init(p, "c", MODERN)
        await _reconnect_errors(server.url)


async def _reconnect_errors(url: str) -> None:
    async with peer(url) as q:
        for params, path in (
            (
                {"subscriptions": [{"channel": ROOT, "lastSeenServerSeq": "1"}]},
                "$.params.subscriptions[0].lastSeenServerSeq",
            ),
            ({"subscriptions": [{"lastSeenServerSeq": 1}]}, "$.params.subscriptions[0].channel"),
            (
                {"lastSeenServerSeq": 0, "subscriptions": [ROOT, {"channel": ROOT}]},
                "$.params.subscriptions[1]",
            ),
            (
                {"lastSeenServerSeq": 0, "subscriptions": [ROOT], "windows": {"items": 3}},
                "$.params.windows.items",
            ),
        ):
            answer = await q.call("reconnect", {"channel": ROOT, "clientId": "c", **params})
            assert answer["error"]["code"] == -32602, answer
            assert answer["error"]["data"]["path"] == path, answer
        # a channel named twice gets one entry; an unknown client is -32008, as before
        recovered = await q.result(
            "reconnect",
            {
                "channel": ROOT,
                "clientId": "c",
                "subscriptions": [
                    {"channel": ROOT, "lastSeenServerSeq": 0},
                    {"channel": ROOT, "lastSeenServerSeq": 7},
                ],
            },
        )
        assert [(c["kind"], c["channel"]) for c in recovered["channels"]] == [("snapshot", ROOT)]
        async with peer(url) as r:
            answer = await r.call(
                "reconnect", {"channel": ROOT, "clientId": "nobody", "subscriptions": []}
            )
            assert answer["error"]["code"] == -32008


async def test_reconnect_beyond_the_replay_log_gives_snapshots_in_each_dialect() -> None:
    async with running_server(log_envelopes=4) as server:
        host = server.state.host
        async with peer(server.url) as old, peer(server.url) as new:
            await init(old, "old", ["0.5.0"])
            await init(new, "new", MODERN)
        term = await host.create_terminal(T1, name="t")
        await term.send_input("echo a; echo b; echo c; exit 2\r")
        with trio.fail_after(TIMEOUT):
            await term.exited.wait()
        async with peer(server.url) as old, peer(server.url) as new:
            a = await old.reconnect("old", 0, [ROOT, T1, T2])
            assert a["type"] == "snapshot" and "missing" not in a  # the 0.5 shape
            b = await new.result(
                "reconnect",
                {
                    "channel": ROOT,
                    "clientId": "new",
                    "lastSeenServerSeq": 0,
                    "subscriptions": [ROOT, T1, T2],
                },
            )
            assert b["type"] == "snapshot" and b["missing"] == [T2]
            old_t1 = {s["resource"]: s["state"] for s in a["snapshots"]}[T1]
            new_t1 = {s["resource"]: s["state"] for s in b["snapshots"]}[T1]
            assert old_t1["exitCode"] == 2 and "lifecycle" not in old_t1
            assert new_t1["lifecycle"] == {"status": "exited", "exitCode": 2}
        async with peer(server.url) as new:
            # form B: a cursor older than the log also gets a snapshot
            recovered = await new.result(
                "reconnect",
                {
                    "channel": ROOT,
                    "clientId": "new",
                    "subscriptions": [{"channel": T1, "lastSeenServerSeq": 1}],
                },
            )
            (entry,) = recovered["channels"]
            assert entry["kind"] == "snapshot"
            assert entry["snapshot"]["state"]["lifecycle"] == {"status": "exited", "exitCode": 2}


async def test_the_client_switches_to_cursors_when_a_1x_host_refuses_form_a() -> None:
    """Against a 1.x host that knows only per-channel cursors (a real WebSocket server)."""
    requests: list[dict[str, Any]] = []
    root = {"resource": ROOT, "state": {"agents": [], "terminals": []}, "fromSeq": 3}

    async def cursor_host(request: trio_websocket.WebSocketRequest) -> None:
        ws = await request.accept()
        with trio.move_on_after(TIMEOUT), contextlib.suppress(trio_websocket.ConnectionClosed):
            while True:
                message = orjson.loads(await ws.get_message())
                requests.append(message)
                params = message["params"]
                answer: dict[str, Any] = {"jsonrpc": "2.0", "id": message["id"]}
                if message["method"] == "initialize":
                    answer["result"] = {
                        "protocolVersion": "1.0.0",
                        "serverSeq": 3,
                        "snapshots": [root],
                    }
                elif "lastSeenServerSeq" in params:
                    answer["error"] = {"code": -32602, "message": "subscriptions must be cursors"}
                else:
                    assert params["subscriptions"] == [{"channel": ROOT, "lastSeenServerSeq": 3}]
                    renamed = {
                        **root,
                        "state": {
                            "agents": [],
                            "terminals": [
                                {
                                    "resource": T1,
                                    "title": "t",
                                    "claim": {"kind": "client", "clientId": "x"},
                                    "lifecycle": {"status": "exited"},
                                }
                            ],
                        },
                        "fromSeq": 9,
                    }
                    answer["result"] = {
                        "channels": [{"kind": "snapshot", "channel": ROOT, "snapshot": renamed}]
                    }
                await ws.send_message(orjson.dumps(answer).decode())

    async with trio.open_nursery() as nursery:
        listener = await nursery.start(
            trio_websocket.serve_websocket, cursor_host, "127.0.0.1", 0, None
        )
        async with connect(f"ws://127.0.0.1:{listener.port}/") as client:
            assert client.dialect is Dialect.V1 and reconnect_form(client) == "watermark"
            await client.drop_connection()
            await client.wait_for(lambda: client.reconnects == 1, timeout=TIMEOUT)
            assert reconnect_form(client) == "cursors"
            (info,) = client.root.terminals or ()
            assert info.exited and info.exitCode is None and info.lifecycle.status == "exited"
        nursery.cancel_scope.cancel()
    methods = [(m["method"], "lastSeenServerSeq" in m["params"]) for m in requests]
    assert methods == [("initialize", False), ("reconnect", True), ("reconnect", False)]


async def test_rejections_and_heals_reach_a_1x_client_in_its_dialect() -> None:
    async with running_server() as server, peer(server.url) as owner, peer(server.url) as other:
        await init(owner, "owner", ["0.5.0"])
        await init(other, "other", MODERN)
        owned = {"kind": "client", "clientId": "owner"}
        assert await owner.result("createTerminal", {"channel": T1, "claim": owned}) is None
        await other.result("subscribe", {"channel": T1})
        # a 1.x client claims a terminal another client holds, for a session without a chat
        seq = await other.dispatch(
            T1, {"type": "terminal/claimed", "claim": {"kind": "session", "session": "s:/1"}}
        )
        echo = await other.action(of_type("terminal/claimed"))
        assert echo["origin"]["clientSeq"] == seq and echo["rejectionReason"]
        assert echo["action"]["claim"] == {"kind": "session", "session": "s:/1", "chat": "s:/1"}
        heal = await other.action(of_type("terminal/claimed"))
        assert "origin" not in heal and heal["action"]["claim"] == owned
        assert host_state(server, T1).claim.KIND == "client"


def _naive_root(state: dict[str, Any], envelope: dict[str, Any]) -> dict[str, Any]:
    """The upstream TS ``AhpStateMirror``'s root fold: every envelope, rejected or not."""
    action = envelope["action"]
    field = {
        "root/terminalsChanged": "terminals",
        "root/agentsChanged": "agents",
        "root/activeSessionsChanged": "activeSessions",
    }.get(action["type"])
    return {**state, field: action[field]} if field else state


@pytest.mark.parametrize("versions", [MODERN, ["0.8.0", "0.7.0", "0.6.0", "0.5.2", "0.5.1"]])
async def test_a_naive_mirror_recovers_from_a_rejected_root_action(versions: list[str]) -> None:
    """Found with the upstream TS client (0.5.1 and 0.8): its mirror applied a refused
    ``root/terminalsChanged`` and lost the catalogue; the heal that follows restores it."""
    async with running_server() as server, peer(server.url) as owner, peer(server.url) as naive:
        await init(owner, "owner", MODERN)
        owned = {"kind": "client", "clientId": "owner"}
        assert await owner.result("createTerminal", {"channel": T1, "claim": owned}) is None
        # the upstream client's initialize: channel, clientId, versions, initialSubscriptions
        (snapshot,) = (await init(naive, "naive", versions))["snapshots"]
        mirror = snapshot["state"]
        assert [t["resource"] for t in mirror["terminals"]] == [T1]
        forged: list[dict[str, Any]] = [
            {"type": "root/terminalsChanged", "terminals": []},
            {"type": "root/agentsChanged", "agents": [{"provider": "x", "models": []}]},
        ]
        for action in forged:
            seq = await naive.dispatch(ROOT, action)
            echo = await naive.action(of_type(action["type"]))
            assert echo["origin"]["clientSeq"] == seq and echo["rejectionReason"]
            mirror = _naive_root(mirror, echo)
            heal = await naive.action(of_type(action["type"]))
            assert "origin" not in heal and "rejectionReason" not in heal
            mirror = _naive_root(mirror, heal)
        truth = (await naive.result("subscribe", {"channel": ROOT}))["snapshot"]["state"]
        assert mirror == truth
        if versions == MODERN:
            assert truth["terminals"][0]["lifecycle"] == RUNNING
        else:
            assert "lifecycle" not in truth["terminals"][0]
        # the owner saw neither the forgeries nor the heals
        await owner.dispatch(T1, {"type": "terminal/titleChanged", "title": "marker"})
        seen = await collect(
            owner, ROOT, lambda e: [t["title"] for t in e["action"]["terminals"]] == ["marker"]
        )
        assert all("rejectionReason" not in e and "origin" not in e for e in seen), seen
        assert all([t["resource"] for t in e["action"]["terminals"]] == [T1] for e in seen)


async def test_a_forged_cwd_is_healed_for_its_sender() -> None:
    async with running_server() as server, peer(server.url) as p:
        await init(p, "c", MODERN)
        assert (
            await p.result(
                "createTerminal",
                {"channel": T1, "claim": {"kind": "client", "clientId": "c"}, "cwd": "/tmp"},
            )
            is None
        )
        await p.result("subscribe", {"channel": T1})
        await p.dispatch(T1, {"type": "terminal/cwdChanged", "cwd": "file:///nowhere"})
        echo = await p.action(lambda a: "rejectionReason" in a)
        assert echo["action"] == {"type": "terminal/cwdChanged", "cwd": "file:///nowhere"}
        heal = await p.action(of_type("terminal/cwdChanged"))
        assert heal["action"]["cwd"] == "file:///tmp" and "origin" not in heal
