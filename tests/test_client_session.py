"""The client's protocol state machine without a socket (``ahp.client.session``),
and the typed results both ends share (``ahp.protocol.dialect.result_json``).

Frames in, frames out: requests and the answers that match them, the handshake's
parameters and results (all three reconnect answers), write-ahead dispatch, the
refusal decisions, and properties over arbitrary frames and orders. The same
session drives the real client (``tests/test_client.py`` and the rest run it
over real sockets).
"""

from __future__ import annotations

from typing import Any

import attrs
import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ahp.client.session import (
    LEGACY_VERSIONS,
    PROTOCOL_VERSIONS,
    RECONNECT_DELAYS,
    Answer,
    Applied,
    ClientSession,
    Ignored,
    answer_too_large,
    reconnect_delay,
)
from ahp.protocol.actions import (
    ActionEnvelope,
    ActionOrigin,
    TerminalData,
    TerminalResized,
    TerminalTitleChanged,
)
from ahp.protocol.codec import ProtocolError, structure, unstructure
from ahp.protocol.commands import (
    ChannelMissing,
    ChannelSnapshot,
    InitializeResult,
    ListSessionsResult,
    ReconnectChannels,
    ReconnectSnapshot,
    SubscribeResult,
)
from ahp.protocol.dialect import Dialect, result_json, snapshot_json
from ahp.protocol.jsonrpc import JsonRpcErrorObject
from ahp.protocol.state import (
    ROOT_URI,
    ClientClaim,
    RootState,
    Snapshot,
    TerminalState,
)

T1 = "ahp-terminal:/t1"
T2 = "ahp-terminal:/t2"


def terminal(title: str = "t") -> TerminalState:
    return TerminalState(title=title, claim=ClientClaim(clientId="c"), content=())


def snapshot(channel: str, seq: int, dialect: Dialect = Dialect.V05) -> dict[str, Any]:
    state = RootState(agents=(), terminals=()) if channel == ROOT_URI else terminal()
    return snapshot_json(Snapshot(resource=channel, state=state, fromSeq=seq), dialect)


def envelope(channel: str, seq: int, action: Any, origin: ActionOrigin | None = None) -> Any:
    return unstructure(
        ActionEnvelope(channel=channel, action=action, serverSeq=seq, origin=origin),
        ActionEnvelope,
    )


def action_frame(channel: str, seq: int, action: Any, **kw: Any) -> str:
    params = envelope(channel, seq, action, **kw)
    return orjson.dumps({"jsonrpc": "2.0", "method": "action", "params": params}).decode()


def answer(msg_id: Any, result: Any) -> str:
    return orjson.dumps({"jsonrpc": "2.0", "id": msg_id, "result": result}).decode()


def error(msg_id: Any, code: int, message: str = "no") -> str:
    body = {"jsonrpc": "2.0", "id": msg_id, "error": {"code": code, "message": message}}
    return orjson.dumps(body).decode()


def initialized(session: ClientSession, version: str = "1.0.0", *channels: str) -> None:
    msg_id, _ = session.initialize_request(channels)
    dialect = Dialect.V1 if version.startswith("1") else Dialect.V05
    result = {
        "protocolVersion": version,
        "serverSeq": 10,
        "snapshots": [snapshot(c, 10, dialect) for c in (ROOT_URI, *channels)],
        "defaultDirectory": "file:///home/u",
    }
    event = session.receive(answer(msg_id, result))
    assert isinstance(event, Answer) and event.id == msg_id
    session.initialized(event.result)


def test_requests_get_fresh_ids_and_their_answers_match_once() -> None:
    session = ClientSession("me")
    first, frame = session.request("ping", {"channel": ROOT_URI})
    second, _ = session.request("subscribe", {"channel": T1})
    assert first < second and session.awaiting == {first, second}
    assert orjson.loads(frame) == {
        "jsonrpc": "2.0",
        "id": first,
        "method": "ping",
        "params": {"channel": ROOT_URI},
    }
    assert session.receive(answer(second, {"x": 1})) == Answer(second, result={"x": 1})
    got = session.receive(error(first, -32008, "gone"))
    assert got == Answer(first, error=JsonRpcErrorObject(code=-32008, message="gone"))
    # Answered already, or never asked: ignored, not raised.
    assert isinstance(session.receive(answer(first, None)), Ignored)
    assert isinstance(session.receive(answer("x", None)), Ignored)
    assert session.awaiting == set()


def test_initialize_offers_both_families_and_reads_its_typed_result() -> None:
    session = ClientSession("me")
    _, frame = session.initialize_request([T1, ROOT_URI, T1])
    params = orjson.loads(frame)["params"]
    assert params["protocolVersions"] == list(PROTOCOL_VERSIONS)
    assert params["initialSubscriptions"] == [ROOT_URI, T1]  # root first, no duplicates
    assert params["clientId"] == "me" and params["clientInfo"]["name"] == "ahp-terminals"
    initialized(session, "1.0.0", T1)
    assert session.dialect is Dialect.V1 and session.protocol_version == "1.0.0"
    assert session.default_directory == "file:///home/u"
    assert set(session.mirrors) == {ROOT_URI, T1} and session.last_seen_seq == 10
    with pytest.raises(ProtocolError):
        session.initialized({"protocolVersion": 1})


def test_envelopes_fold_into_the_mirrors_and_dispatch_is_write_ahead() -> None:
    session = ClientSession("me")
    initialized(session, "0.5.0", T1)
    event = session.receive(action_frame(T1, 11, TerminalData(data="hello ")))
    assert isinstance(event, Applied) and event.envelope.serverSeq == 11
    session.receive(action_frame(T1, 12, TerminalData(data="world")))
    state = session.mirrors[T1].state
    assert isinstance(state, TerminalState) and state.text() == "hello world"
    assert session.last_seen_seq == 12
    client_seq, frame = session.dispatch(T1, TerminalTitleChanged(title="mine"))
    sent = orjson.loads(frame)["params"]
    assert sent["clientSeq"] == client_seq and sent["action"]["type"] == "terminal/titleChanged"
    assert session.mirrors[T1].state.title == "mine"  # type: ignore[union-attr]
    assert session.mirrors[T1].confirmed.title == "t"  # type: ignore[union-attr]
    echo = TerminalTitleChanged(title="mine")
    session.receive(action_frame(T1, 13, echo, origin=ActionOrigin("me", client_seq)))
    assert not session.mirrors[T1].pending and session.mirrors[T1].confirmed.title == "mine"  # type: ignore[union-attr]
    # Envelopes of channels we do not mirror still move the cursor.
    session.receive(action_frame(T2, 14, TerminalData(data="x")))
    assert session.last_seen_seq == 14 and T2 not in session.mirrors
    # Unsubscribing forgets the mirror and writes the notification.
    assert orjson.loads(session.unsubscribe(T1))["method"] == "unsubscribe"
    assert T1 not in session.mirrors


def test_the_three_reconnect_answers() -> None:
    session = ClientSession("me")
    initialized(session, "1.0.0", T1, T2)
    _, frame = session.reconnect_request()
    params = orjson.loads(frame)["params"]
    assert params["lastSeenServerSeq"] == 10 and params["subscriptions"] == [ROOT_URI, T1, T2]
    session.dispatch(T1, TerminalResized(cols=100, rows=30))
    replay = {
        "type": "replay",
        "actions": [envelope(T1, 11, TerminalData(data="again"))],
        "missing": [T2],
    }
    replayed = session.reconnected(replay)
    assert [e.serverSeq for e in replayed] == [11]
    assert set(session.mirrors) == {ROOT_URI, T1}  # T2 is gone
    assert not session.mirrors[T1].pending  # pending actions are dropped on reconnect
    assert session.mirrors[T1].state.text() == "again"  # type: ignore[union-attr]
    # Snapshots: channels not in the answer are dropped.
    assert session.reconnected({"type": "snapshot", "snapshots": [snapshot(T1, 20)]}) == []
    assert set(session.mirrors) == {T1} and session.mirrors[T1].from_seq == 20
    # Form B: per channel.
    session.reconnect_form = "cursors"
    _, frame = session.reconnect_request()
    cursors = orjson.loads(frame)["params"]["subscriptions"]
    assert cursors == [{"channel": T1, "lastSeenServerSeq": 20}]
    channels = {
        "channels": [
            {
                "kind": "replay",
                "channel": T1,
                "actions": [envelope(T1, 21, TerminalData(data="!"))],
            },
            {"kind": "snapshot", "channel": ROOT_URI, "snapshot": snapshot(ROOT_URI, 21)},
            {"kind": "missing", "channel": T2},
        ]
    }
    assert [e.serverSeq for e in session.reconnected(channels)] == [21]
    assert set(session.mirrors) == {T1, ROOT_URI}


def test_refusals_become_decisions() -> None:
    session = ClientSession("me")
    refused = JsonRpcErrorObject(code=-32005, message="unsupported")
    assert session.retry_initialize(refused) is True
    assert session.protocol_versions == LEGACY_VERSIONS
    assert session.retry_initialize(refused) is False  # asked with 0.5 already
    assert session.retry_initialize(JsonRpcErrorObject(code=-32600, message="x")) is False
    modern = ClientSession("me")
    initialized(modern, "1.0.0", T1)
    bad_form = JsonRpcErrorObject(code=-32602, message="invalid params")
    assert modern.retry_reconnect(bad_form) == "cursors" and modern.reconnect_form == "cursors"
    assert modern.retry_reconnect(bad_form) == "fail"  # form B refused too
    forgotten = JsonRpcErrorObject(code=-32008, message="Reconnect client not found")
    assert modern.retry_reconnect(forgotten) == "initialize"
    assert modern.resubscriptions() == [ROOT_URI, T1] and modern.mirrors == {}
    legacy = ClientSession("me")
    initialized(legacy, "0.5.0")
    assert legacy.retry_reconnect(bad_form) == "fail"  # a 0.5 host has no form B


def test_snapshots_too_large_for_one_answer_are_set_aside_until_subscribed() -> None:
    """A handshake refused as more than one answer carries: the terminals are left out
    of every ``reconnect`` (their mirrors are kept, behind the connection's cursor)
    until each one's ``subscribe`` is answered; a -32000 without ``data.limit`` is
    not that refusal."""
    session = ClientSession("me")
    initialized(session, "1.0.0", T1, T2)
    plain = JsonRpcErrorObject(code=-32000, message="server error")
    assert not answer_too_large(plain) and session.retry_reconnect(plain) == "fail"
    too_large = JsonRpcErrorObject(code=-32000, message="too large", data={"limit": 1024})
    assert answer_too_large(too_large)
    assert session.retry_reconnect(too_large) == "one by one"
    assert session.aside() == [T1, T2]
    assert session.retry_reconnect(too_large) == "fail"  # (nothing more to set aside)
    _, frame = session.reconnect_request()
    assert orjson.loads(frame)["params"]["subscriptions"] == [ROOT_URI]
    session.reconnected({"type": "snapshot", "snapshots": [snapshot(ROOT_URI, 30)]})
    assert set(session.mirrors) == {ROOT_URI, T1, T2}  # (set aside, not dropped)
    assert session.last_seen_seq == 30
    msg_id, _ = session.request("subscribe", {"channel": T1})
    event = session.receive(answer(msg_id, {"snapshot": snapshot(T1, 31)}))
    assert isinstance(event, Answer)
    session.subscribed(event.result)
    assert session.aside() == [T2] and session.mirrors[T1].from_seq == 31
    assert session.last_seen_seq == 31
    _, frame = session.reconnect_request()  # (a drop before T2's answer: T2 stays aside)
    assert orjson.loads(frame)["params"]["subscriptions"] == [ROOT_URI, T1]
    session.disposed(T2)  # (gone while away: -32008 to its subscribe)
    assert session.aside() == [] and set(session.mirrors) == {ROOT_URI, T1}


def test_a_fresh_initialize_takes_the_new_hosts_cursor() -> None:
    """A client whose server restarted on the same address (its sequence starting again)
    initializes afresh: its cursor is the new server's, not the old one's higher number
    (a later reconnect asked for a replay from far ahead and the mirror silently missed
    what came between: probe Q)."""
    session = ClientSession("me")
    initialized(session, "1.0.0", T1)
    session.receive(action_frame(T1, 1488, TerminalData(data="old")))
    assert session.last_seen_seq == 1488
    forgotten = JsonRpcErrorObject(code=-32008, message="Reconnect client not found")
    assert session.retry_reconnect(forgotten) == "initialize"
    initialized(session, "1.0.0", *session.resubscriptions())  # (the new server: serverSeq 10)
    assert session.last_seen_seq == 10
    _, frame = session.reconnect_request()
    assert orjson.loads(frame)["params"]["lastSeenServerSeq"] == 10


def test_a_lost_connection_returns_every_unanswered_id() -> None:
    session = ClientSession("me")
    ids = [session.request("ping")[0] for _ in range(3)]
    session.receive(answer(ids[1], None))
    assert session.lost() == [ids[0], ids[2]] and session.awaiting == set()


def test_reconnect_delays_are_bounded() -> None:
    assert reconnect_delay(0) == RECONNECT_DELAYS[0]
    assert reconnect_delay(10_000) == RECONNECT_DELAYS[-1] == max(RECONNECT_DELAYS)


@given(st.one_of(st.binary(max_size=200), st.text(max_size=200)))
def test_no_frame_raises(frame: bytes | str) -> None:
    session = ClientSession("me")
    initialized(session, "1.0.0", T1)
    assert isinstance(session.receive(frame), Answer | Applied | Ignored)


@given(
    st.lists(st.text(max_size=8), max_size=20),
    st.randoms(use_true_random=False),
)
def test_every_request_is_answered_once_in_any_order(results: list[str], rnd: Any) -> None:
    session = ClientSession("me")
    ids = [session.request("ping")[0] for _ in results]
    order = list(zip(ids, results, strict=True))
    rnd.shuffle(order)
    seen = {}
    for msg_id, result in order:
        event = session.receive(answer(msg_id, result))
        assert isinstance(event, Answer)
        seen[event.id] = event.result
        assert isinstance(session.receive(answer(msg_id, result)), Ignored)
    assert seen == dict(zip(ids, results, strict=True)) and session.awaiting == set()


@given(st.lists(st.tuples(st.integers(1, 40), st.text(max_size=5)), max_size=30))
def test_the_mirror_holds_exactly_the_newer_envelopes(chunks: list[tuple[int, str]]) -> None:
    session = ClientSession("me")
    initialized(session, "0.5.0", T1)  # fromSeq 10
    expected = ""
    for seq, text in chunks:
        session.receive(action_frame(T1, seq, TerminalData(data=text)))
        if seq > 10:
            expected += text
    assert session.mirrors[T1].state.text() == expected  # type: ignore[union-attr]
    assert session.last_seen_seq == max([10, *(seq for seq, _ in chunks)])


def _terminal_states(encoded: Any) -> Any:
    """Every encoded terminal state (an object with ``content``) inside ``encoded``."""
    if isinstance(encoded, dict):
        if "content" in encoded:
            yield encoded
        for value in encoded.values():
            yield from _terminal_states(value)
    elif isinstance(encoded, list):
        for value in encoded:
            yield from _terminal_states(value)


def _results(snap: Snapshot) -> list[Any]:
    return [
        InitializeResult(protocolVersion="1.0.0", serverSeq=5, snapshots=(snap,)),
        SubscribeResult(snapshot=snap),
        ReconnectSnapshot(type="snapshot", snapshots=(snap,), missing=("x",)),
        ReconnectChannels(
            channels=(
                ChannelSnapshot(channel=snap.resource, snapshot=snap),
                ChannelMissing(channel="ahp-terminal:/gone"),
            )
        ),
        ListSessionsResult(items=()),
    ]


@pytest.mark.parametrize("dialect", list(Dialect))
def test_typed_results_are_encoded_per_dialect_and_read_back(dialect: Dialect) -> None:
    exited = attrs.evolve(terminal(), exitCode=3, exited=True)
    snap = Snapshot(resource=T1, state=exited, fromSeq=4)
    for result in _results(snap):
        encoded = result_json(result, dialect)
        if isinstance(result, ListSessionsResult):
            assert encoded == {"items": []}
            continue
        # 1.x: a lifecycle wherever a terminal state is, inside any result; 0.5: exitCode.
        states = list(_terminal_states(encoded))
        assert len(states) == 1
        if dialect is Dialect.V1:
            assert "exitCode" not in states[0]
            assert states[0]["lifecycle"] == {"status": "exited", "exitCode": 3}
        else:
            assert "lifecycle" not in states[0] and states[0]["exitCode"] == 3
        # Read back through the same converter: the same typed value.
        assert structure(encoded, type(result)) == result


def test_envelopes_read_before_the_subscribe_answer_is_installed_are_kept() -> None:
    """The host answers ``subscribe`` and publishes at once; the transport reads the
    envelope before the caller installs the answer: it reaches the mirror anyway (a
    command's ``terminal/exited`` was lost that way)."""
    session = ClientSession("me")
    initialized(session, "0.5.0")
    session.subscribing(T1)
    msg_id, _ = session.request("subscribe", {"channel": T1})
    got = session.receive(answer(msg_id, {"snapshot": snapshot(T1, 20)}))
    assert isinstance(got, Answer)
    session.receive(action_frame(T1, 19, TerminalData(data="old ")))  # in the snapshot
    session.receive(action_frame(T1, 21, TerminalData(data="after")))
    assert T1 not in session.mirrors
    state = session.subscribed(got.result)
    assert isinstance(state, TerminalState) and state.text() == "after"
    assert not session.needs_resubscribe(T1)
    # A re-subscribe of a mirrored channel keeps what came between answer and install too.
    session.subscribing(T1)
    msg_id, _ = session.request("subscribe", {"channel": T1})
    got = session.receive(answer(msg_id, {"snapshot": snapshot(T1, 30)}))
    assert isinstance(got, Answer)
    session.receive(action_frame(T1, 31, TerminalData(data="later")))
    state = session.subscribed(got.result)
    assert isinstance(state, TerminalState) and state.text() == "later"


def test_too_many_early_envelopes_ask_for_the_subscribe_again() -> None:
    from ahp.client.session import MAX_EARLY_ENVELOPES

    session = ClientSession("me")
    initialized(session, "0.5.0")
    session.subscribing(T1)
    for seq in range(11, 12 + MAX_EARLY_ENVELOPES):
        session.apply(structure(envelope(T1, seq, TerminalData(data="x")), ActionEnvelope))
    assert session.needs_resubscribe(T1)
    session.subscribe_failed(T1)
    assert not session.needs_resubscribe(T1)
