"""Versions and dialects (pure): negotiation, projection of one state onto both wire
shapes, and reading either shape back (ahp.protocol.dialect, the codec's hooks)."""

from __future__ import annotations

from typing import Any

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ahp.protocol import (
    ActionEnvelope,
    ClientClaim,
    ProtocolError,
    RootState,
    RootTerminalsChanged,
    SessionClaim,
    Snapshot,
    TerminalClaimed,
    TerminalData,
    TerminalExited,
    TerminalInfo,
    TerminalState,
    UnclassifiedPart,
    structure,
    unstructure,
)
from ahp.protocol.dialect import (
    MAX_VERSION_LENGTH,
    SUPPORTED_VERSIONS,
    Dialect,
    claim_json,
    dialect_of,
    envelope_json,
    negotiate,
    parse_version,
    projects,
    snapshot_json,
    state_json,
    terminal_info_json,
)
from ahp.reducers import reduce_terminal

V05, V1 = Dialect.V05, Dialect.V1

# -- negotiation --------------------------------------------------------------------------------


def _accepted(v: tuple[int, int, int]) -> bool:
    return (v[0] == 0 and 3 <= v[1] <= 10) or v[0] == 1


versions = st.builds(
    lambda a, b, c: f"{a}.{b}.{c}",
    st.integers(0, 3),
    st.integers(0, 12),
    st.integers(0, 3),
)
junk = st.one_of(st.none(), st.integers(), st.text(max_size=12), st.just("1.0"), st.just("01.x.0"))


@given(st.lists(st.one_of(versions, junk), max_size=8))
def test_negotiation_picks_the_highest_acceptable_offer(offered: list[Any]) -> None:
    chosen = negotiate(offered)
    acceptable = [(v, e) for e in offered if (v := parse_version(e)) is not None and _accepted(v)]
    if not acceptable:
        assert chosen is None
        return
    assert chosen in offered
    version = parse_version(chosen)
    assert version is not None and version == max(v for v, _ in acceptable)


@pytest.mark.parametrize(
    ("version", "dialect"),
    [
        ("0.3.0", V05),
        ("0.5.2", V05),
        ("0.8.0", V05),  # still exitCode (lifecycle came with 0.9)
        ("0.9.0", V1),
        ("0.10.1", V1),
        ("1.0.0", V1),
        ("1.1.0", V1),
        ("garbage", V05),
    ],
)
def test_dialect_of(version: str, dialect: Dialect) -> None:
    assert dialect_of(version) is dialect


def test_version_parsing_edges() -> None:
    # Malformed as the 1.x reference reads them: pre-release, build, leading zeros.
    for malformed in ("1.0.0-rc.1", "1.0.0+build", "01.0.0", "1.00.0", "0.9.01", "1.0.0 "):
        assert parse_version(malformed) is None, malformed
        assert negotiate([malformed]) is None, malformed
    assert negotiate(["1.0.0-beta", "0.9.0"]) == "0.9.0"
    assert parse_version("0.10.0") == (0, 10, 0) and parse_version("10.0.0") == (10, 0, 0)
    assert parse_version("1.0") is None
    assert parse_version("\uff11.0.0") is None  # a non-ASCII digit
    assert parse_version("1." + "0" * MAX_VERSION_LENGTH + ".0") is None  # bounded
    assert negotiate(5) is None and negotiate("1.0.0") is None
    # What -32005 lists covers everything negotiate accepts (and both dialects).
    assert "^1.0.0" in SUPPORTED_VERSIONS and "^0.9.0" in SUPPORTED_VERSIONS
    assert "^0.5.0" in SUPPORTED_VERSIONS


# -- projection ---------------------------------------------------------------------------------

ids = st.text(st.characters(codec="utf-8"), min_size=1, max_size=8)
claims = st.one_of(
    st.builds(ClientClaim, clientId=ids),
    st.builds(
        SessionClaim,
        session=ids,
        turnId=st.none() | ids,
        toolCallId=st.none() | ids,
        chat=st.none() | ids,
    ),
)
exits = st.sampled_from([(False, None), (True, None), (True, 0), (True, 3), (True, -1)])


@st.composite
def terminal_states(draw: st.DrawFn) -> TerminalState:
    exited, code = draw(exits)
    return TerminalState(
        title=draw(ids),
        claim=draw(claims),
        content=(UnclassifiedPart(value=draw(st.text(max_size=10))),),
        cols=draw(st.none() | st.integers(1, 500)),
        exitCode=code,
        exited=exited,
        isPty=draw(st.none() | st.booleans()),
    )


def _without_chat(claim: Any) -> Any:
    return attrs.evolve(claim, chat=None) if isinstance(claim, SessionClaim) else claim


@given(terminal_states())
def test_terminal_state_in_both_dialects(state: TerminalState) -> None:
    v1 = state_json(state, V1)
    v05 = state_json(state, V05)
    # 1.x: lifecycle, never exitCode; a session claim always names a chat.
    assert "exitCode" not in v1 and "exited" not in v1
    expected_lifecycle: dict[str, Any] = (
        {"status": "exited"} if state.exited else {"status": "running"}
    )
    if state.exitCode is not None:
        expected_lifecycle["exitCode"] = state.exitCode
    assert v1["lifecycle"] == expected_lifecycle
    if isinstance(state.claim, SessionClaim):
        assert v1["claim"]["chat"] == (state.claim.chat or state.claim.session)
    # 0.5: exitCode only when there is one; no 1.x key at all.
    assert not {"lifecycle", "exited"} & set(v05) and "chat" not in v05["claim"]
    assert v05.get("exitCode") == state.exitCode
    assert v05 == unstructure(state)
    # Both read back: 1.x loses nothing but a defaulted chat; 0.5 also loses a codeless exit.
    back = structure(v1, TerminalState)
    if isinstance(state.claim, SessionClaim) and state.claim.chat is None:
        state_v1 = attrs.evolve(state, claim=attrs.evolve(state.claim, chat=state.claim.session))
    else:
        state_v1 = state
    assert back == state_v1
    back05 = structure(v05, TerminalState)
    exited05 = state.exitCode is not None
    assert back05 == attrs.evolve(state, claim=_without_chat(state.claim), exited=exited05)


def test_catalogue_and_actions_per_dialect() -> None:
    chat_claim = SessionClaim(session="copilot:/s1", chat="ahp-chat:/s1/c1", turnId="t1")
    old_claim = SessionClaim(session="copilot:/s1")
    infos = (
        TerminalInfo(resource="ahp-terminal:/a", title="a", claim=ClientClaim("c1")),
        TerminalInfo(
            resource="ahp-terminal:/b", title="b", claim=chat_claim, exitCode=2, exited=True
        ),
        TerminalInfo(resource="ahp-terminal:/c", title="c", claim=old_claim, exited=True),
    )
    assert [terminal_info_json(i, V1)["lifecycle"] for i in infos] == [
        {"status": "running"},
        {"status": "exited", "exitCode": 2},
        {"status": "exited"},
    ]
    assert [terminal_info_json(i, V05).get("exitCode") for i in infos] == [None, 2, None]
    assert claim_json(old_claim, V1)["chat"] == "copilot:/s1"
    assert claim_json(chat_claim, V05) == {
        "kind": "session",
        "session": "copilot:/s1",
        "turnId": "t1",
    }
    change = ActionEnvelope(channel="ahp-root://", action=RootTerminalsChanged(infos), serverSeq=9)
    assert projects(change.action)
    terminals = envelope_json(change, V1)["action"]["terminals"]
    assert terminals == [terminal_info_json(i, V1) for i in infos]
    assert envelope_json(change, V05) == unstructure(change)
    claimed = ActionEnvelope(
        channel="ahp-terminal:/b", action=TerminalClaimed(chat_claim), serverSeq=10
    )
    assert envelope_json(claimed, V1)["action"]["claim"]["chat"] == "ahp-chat:/s1/c1"
    assert "chat" not in envelope_json(claimed, V05)["action"]["claim"]
    # Everything else is the same in both (the shared frame is sent as it is).
    for action in (TerminalData("x"), TerminalExited(), TerminalClaimed(ClientClaim("c"))):
        envelope = ActionEnvelope(channel="ahp-terminal:/b", action=action, serverSeq=11)
        assert not projects(action)
        assert envelope_json(envelope, V1) == envelope_json(envelope, V05)
    root = Snapshot(resource="ahp-root://", state=RootState(agents=(), terminals=infos), fromSeq=9)
    assert snapshot_json(root, V1)["state"]["terminals"] == terminals
    back = structure(snapshot_json(root, V1), Snapshot).state
    assert isinstance(back, RootState) and back.terminals is not None
    assert back.terminals[:2] == infos[:2]  # the third's chat was filled in from its session
    assert back.terminals[2] == attrs.evolve(
        infos[2], claim=attrs.evolve(old_claim, chat="copilot:/s1")
    )
    back05 = structure(snapshot_json(root, V05), Snapshot).state
    assert isinstance(back05, RootState) and back05.terminals is not None
    assert back05.terminals[2].exited is False


def test_an_exit_without_a_code_is_kept() -> None:
    state = TerminalState(title="t", claim=ClientClaim("c"), content=())
    assert state.lifecycle.status == "running"
    exited = reduce_terminal(state, TerminalExited())
    assert exited.exited and exited.exitCode is None
    assert exited.lifecycle.status == "exited" and exited.lifecycle.exitCode is None
    assert state_json(exited, V1)["lifecycle"] == {"status": "exited"}
    coded = reduce_terminal(state, TerminalExited(exitCode=4))
    assert state_json(coded, V1)["lifecycle"] == {"status": "exited", "exitCode": 4}
    assert state_json(coded, V05)["exitCode"] == 4


@pytest.mark.parametrize(
    "lifecycle",
    [
        "exited",
        {"status": "done"},
        {"status": "exited", "exitCode": "3"},
        {"status": "exited", "exitCode": True},
        {},
    ],
)
def test_a_malformed_lifecycle_is_a_clear_error(lifecycle: Any) -> None:
    data = {"title": "t", "content": [], "claim": {"kind": "client", "clientId": "c"}}
    with pytest.raises(ProtocolError):
        structure({**data, "lifecycle": lifecycle}, TerminalState)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)


lifecycles = st.one_of(
    json_values,
    st.fixed_dictionaries(
        {"status": st.sampled_from(["running", "exited", "Exited", ""])},
        optional={"exitCode": st.one_of(st.integers(-300, 300), json_values), "x": json_values},
    ),
)


@given(lifecycle=lifecycles, exit_code=json_values)
def test_any_lifecycle_is_read_or_refused_clearly(lifecycle: Any, exit_code: Any) -> None:
    data = {
        "title": "t",
        "content": [],
        "claim": {"kind": "client", "clientId": "c"},
        "lifecycle": lifecycle,
        "exitCode": exit_code,
    }
    classes: tuple[type[TerminalState] | type[TerminalInfo], ...] = (TerminalState, TerminalInfo)
    for cl in classes:
        value = {**data, "resource": "ahp-terminal:/x"} if cl is TerminalInfo else data
        try:
            state: TerminalState | TerminalInfo = structure(value, cl)
        except ProtocolError:
            continue
        # Read: lifecycle decides (the exitCode beside it is ignored), and says exited.
        assert isinstance(lifecycle, dict)
        assert state.exited == (lifecycle["status"] == "exited")
        assert state.lifecycle.status == lifecycle["status"]
        wire = (
            terminal_info_json(state, V1)
            if isinstance(state, TerminalInfo)
            else state_json(state, V1)
        )
        assert wire["lifecycle"] == lifecycle_expected(lifecycle)


def lifecycle_expected(lifecycle: dict[str, Any]) -> dict[str, Any]:
    out = {"status": lifecycle["status"]}
    if lifecycle["status"] == "exited" and lifecycle.get("exitCode") is not None:
        out["exitCode"] = int(lifecycle["exitCode"])
    return out
