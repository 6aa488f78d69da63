"""Unit and property tests for the wire model, the codec, the rope and the reducers."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ahp.protocol import (
    ActionEnvelope,
    ActionOrigin,
    ClientClaim,
    CommandPart,
    ProtocolError,
    Rope,
    SessionClaim,
    StateAction,
    TerminalCleared,
    TerminalCommandExecuted,
    TerminalCommandFinished,
    TerminalData,
    TerminalExited,
    TerminalResized,
    TerminalState,
    UnclassifiedPart,
    UnknownAction,
    decode_message,
    structure,
    unstructure,
)
from ahp.protocol.codec import encode_message, structure_action
from ahp.protocol.jsonrpc import JsonRpcSuccess
from ahp.reducers import content_length, reduce_terminal, trim

EMPTY = TerminalState(title="t", claim=ClientClaim("c"), content=())


# -- rope -------------------------------------------------------------------------------------


@given(st.lists(st.text(max_size=20), max_size=60), st.data())
def test_rope_views_never_change(chunks: list[str], data: st.DataObject) -> None:
    ropes = [Rope()]
    texts = [""]
    for chunk in chunks:
        # Branch from a random older view now and then: old views must keep their text.
        base = data.draw(st.integers(0, len(ropes) - 1)) if data.draw(st.booleans()) else -1
        ropes.append(ropes[base].append(chunk))
        texts.append(texts[base] + chunk)
    for rope, text in zip(ropes, texts, strict=True):
        assert str(rope) == text
        assert len(rope) == len(text)
        assert rope == text


@given(st.lists(st.text(max_size=20), max_size=40), st.integers(0, 900))
def test_rope_drop_prefix(chunks: list[str], count: int) -> None:
    rope = Rope()
    for chunk in chunks:
        rope = rope.append(chunk)
    text = "".join(chunks)
    assert str(rope.drop_prefix(count)) == text[count:]
    assert rope.tail(count) == (text[-count:] if count else "")
    assert str(rope.drop_prefix(count).append("z")) == text[count:] + "z"
    assert str(rope) == text


def test_rope_compacts_tiny_appends() -> None:
    rope = Rope()
    for _ in range(10_000):
        rope = rope.append("x")
    assert str(rope) == "x" * 10_000
    assert rope._end - rope._start < 200


# -- codec ------------------------------------------------------------------------------------


def test_absent_optionals_are_omitted_and_tags_written() -> None:
    env = ActionEnvelope(channel="ahp-terminal:/1", action=TerminalExited(), serverSeq=4)
    assert unstructure(env) == {
        "channel": "ahp-terminal:/1",
        "action": {"type": "terminal/exited"},
        "serverSeq": 4,
    }
    claim = unstructure(SessionClaim(session="s:/1"), ClientClaim | SessionClaim)
    assert claim == {"kind": "session", "session": "s:/1"}


def test_origin_and_rejection_round_trip() -> None:
    env = ActionEnvelope(
        channel="c",
        action=TerminalResized(cols=10, rows=5),
        serverSeq=1,
        origin=ActionOrigin(clientId="me", clientSeq=2),
        rejectionReason="no",
    )
    assert structure(unstructure(env), ActionEnvelope) == env


def test_unknown_action_is_verbatim() -> None:
    raw: dict[str, Any] = {"type": "future/thing", "nested": {"a": [1, None]}, "b": None}
    action = structure_action(raw)
    assert isinstance(action, UnknownAction)
    assert unstructure(action, StateAction) == raw


def test_extra_keys_ignored() -> None:
    action = structure_action({"type": "terminal/data", "data": "x", "_meta": {}})
    assert action == TerminalData(data="x")


@pytest.mark.parametrize(
    ("value", "path"),
    [
        ({"type": "terminal/resized", "cols": "80", "rows": 24}, "$.cols"),
        ({"type": "terminal/resized", "cols": True, "rows": 24}, "$.cols"),
        ({"type": "terminal/resized", "cols": 80}, "$.rows"),
        ({"type": "terminal/data", "data": 5}, "$.data"),
        ({"type": "terminal/claimed", "claim": {"kind": "robot"}}, "$.claim"),
    ],
)
def test_malformed_actions_carry_a_path(value: dict[str, Any], path: str) -> None:
    with pytest.raises(ProtocolError) as info:
        structure_action(value)
    assert info.value.path == path
    assert info.value.code == -32602


@pytest.mark.parametrize(
    ("claim", "message"),
    [
        ({"kind": "robot"}, "unknown 'kind' 'robot' (expected 'client' or 'session') at $.claim"),
        ({}, "'kind' missing (expected 'client' or 'session') at $.claim"),
        ({"kind": "client"}, "required field missing at $.claim.clientId"),
    ],
)
def test_a_bad_tag_is_named_in_the_error(claim: dict[str, Any], message: str) -> None:
    # (cattrs said "required field missing" for an unknown tag as for a missing one.)
    with pytest.raises(ProtocolError) as info:
        structure_action({"type": "terminal/claimed", "claim": claim})
    assert info.value.message == message


@pytest.mark.parametrize(
    ("frame", "code"),
    [
        ("{", -32700),
        ("[1]", -32600),
        ("[]", -32600),
        ('"x"', -32600),
        ('{"jsonrpc":"1.0","id":1,"method":"ping"}', -32600),
        ('{"jsonrpc":"2.0","id":{},"method":"ping"}', -32600),
        ('{"jsonrpc":"2.0","id":true,"method":"ping"}', -32600),
        ('{"jsonrpc":"2.0","id":1,"method":5}', -32600),
        ('{"jsonrpc":"2.0","id":1}', -32600),
        ('{"jsonrpc":"2.0","id":1,"method":"x","params":3}', -32600),
        (b"\xff\xfe", -32700),
        ("NaN", -32700),
    ],
)
def test_bad_frames(frame: str | bytes, code: int) -> None:
    with pytest.raises(ProtocolError) as info:
        decode_message(frame)
    assert info.value.code == code


def test_success_with_null_result_keeps_result_key() -> None:
    assert encode_message(JsonRpcSuccess(id="a", result=None)) == (
        '{"jsonrpc":"2.0","id":"a","result":null}'
    )


# -- reducers ---------------------------------------------------------------------------------

actions_strategy = st.one_of(
    st.builds(TerminalData, data=st.text(max_size=8)),
    st.builds(TerminalCleared),
    st.builds(
        TerminalCommandExecuted,
        commandId=st.sampled_from(["cmd-1", "cmd-2"]),
        commandLine=st.text(max_size=5),
        timestamp=st.integers(0, 10),
    ),
    st.builds(
        TerminalCommandFinished,
        commandId=st.sampled_from(["cmd-1", "cmd-2", "nope"]),
        exitCode=st.none() | st.integers(0, 255),
    ),
)


@given(st.lists(actions_strategy, max_size=40))
def test_cleared_anywhere_empties_content(actions: list[Any]) -> None:
    state = EMPTY
    for action in actions:
        state = reduce_terminal(state, action)
    assert reduce_terminal(state, TerminalCleared()).content == ()


@given(st.lists(actions_strategy, max_size=40))
def test_text_is_concatenation_of_data(actions: list[Any]) -> None:
    state = EMPTY
    expected = ""
    for action in actions:
        state = reduce_terminal(state, action)
        if isinstance(action, TerminalCleared):
            expected = ""
        elif isinstance(action, TerminalData):
            expected += action.data
    assert state.text() == expected


def test_data_goes_to_running_command_then_new_unclassified() -> None:
    state = reduce_terminal(EMPTY, TerminalData("$ "))
    state = reduce_terminal(state, TerminalCommandExecuted("cmd-1", "ls", 5))
    state = reduce_terminal(state, TerminalData("a\r\n"))
    state = reduce_terminal(state, TerminalCommandFinished("cmd-1", exitCode=0, durationMs=3))
    state = reduce_terminal(state, TerminalData("$ "))
    assert state.content == (
        UnclassifiedPart(value="$ "),
        CommandPart("cmd-1", "ls", "a\r\n", 5, True, 0, 3),
        UnclassifiedPart(value="$ "),
    )


def test_old_states_keep_their_text() -> None:
    states = [EMPTY]
    for i in range(100):
        states.append(reduce_terminal(states[-1], TerminalData(str(i % 10))))
    for i, state in enumerate(states):
        assert state.text() == "".join(str(k % 10) for k in range(i))


@given(st.lists(st.text(min_size=1, max_size=30), min_size=1, max_size=30), st.integers(0, 200))
def test_trim_keeps_the_newest_text(chunks: list[str], low: int) -> None:
    state = EMPTY
    for n, chunk in enumerate(chunks):
        if n % 3 == 1:
            state = reduce_terminal(state, TerminalCommandExecuted(f"cmd-{n}", "x", 0))
        state = reduce_terminal(state, TerminalData(chunk))
    full = state.text()
    trimmed, length = trim(state, low_water=low)
    # Command lines count too (``content_length``); a command's line is never sliced, so
    # a trimmed head command may hold its (one-character) line beyond ``low``.
    assert length == content_length(trimmed)
    assert min(content_length(state), low) <= length <= low + 1
    assert full.endswith(trimmed.text())
