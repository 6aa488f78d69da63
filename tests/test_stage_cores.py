"""The engine's sans-I/O stage cores, without a pty or Trio.

``ahp.vt.OutputParser`` (the parse stage: bytes in, actions out, clocks passed
in) and ``ahp.reducers.TerminalCore`` (the reducer stage: state, rules,
healing, scrollback, catalogue changes; actions in, verdicts out).

Test rules: plain numbers for clocks; hypothesis for split invariance (h11's
way: whole input, byte by byte, random splits) and for folds of random client
actions against the plain reducer.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ahp.protocol import ClientClaim, SessionClaim, TerminalState
from ahp.protocol.actions import (
    ActionOrigin,
    RootActiveSessionsChanged,
    RootAgentsChanged,
    RootConfigChanged,
    RootTerminalsChanged,
    StateAction,
    TerminalClaimed,
    TerminalCleared,
    TerminalCommandDetectionAvailable,
    TerminalCommandExecuted,
    TerminalCommandFinished,
    TerminalCwdChanged,
    TerminalData,
    TerminalExited,
    TerminalInput,
    TerminalResized,
    TerminalTitleChanged,
)
from ahp.protocol.state import RootState, TerminalInfo
from ahp.reducers import Accepted, Rejected, TerminalCore, heal_root, reduce_root, reduce_terminal
from ahp.reducers.core import MAX_DIMENSION, MAX_PENDING_INPUT, MAX_TITLE, STDIN_CLOSED
from ahp.vt import OutputParser

NONCE = "n0nce"
URI = "ahp-terminal:/t"


def _merged(actions: Sequence[StateAction]) -> list[StateAction]:
    """Consecutive ``terminal/data`` joined (how a split changes the actions, and all)."""
    out: list[StateAction] = []
    for action in actions:
        if isinstance(action, TerminalData) and out and isinstance(out[-1], TerminalData):
            out[-1] = TerminalData(data=out[-1].data + action.data)
        elif not (isinstance(action, TerminalData) and not action.data):
            out.append(action)
    return out


def _parse(chunks: Sequence[bytes], *, use_pty: bool = True) -> list[StateAction]:
    parser = OutputParser(use_pty=use_pty, nonce=NONCE)
    out: list[StateAction] = []
    for chunk in chunks:
        out += parser.feed(chunk, wall_ms=1000, mono_ms=5.0)
    out += parser.close(wall_ms=1000, mono_ms=5.0)
    assert parser.closed
    return _merged(out)


# -- the parser ------------------------------------------------------------------------------

PIECES = st.sampled_from(
    [
        b"plain text ",
        "gr\u00f6\u00dfe \u2192 \U0001f600 ".encode(),
        b"\x1b[1;31mred\x1b[0m",
        b"\x1b]0;a title\x07",
        b"\x1b]2;other\x1b\\",
        b"\x1b]633;A\x07$ \x1b]633;B\x07",
        f"\x1b]633;E;ls -l;{NONCE}\x07".encode(),
        b"\x1b]633;C\x07",
        b"\x1b]633;D;0\x07",
        b"\x1b]633;P;Cwd=/tmp\x07",
        b"\r\n",
        b"\xff\xfe",  # not UTF-8
    ]
)


@given(st.lists(PIECES, max_size=30), st.data())
def test_parser_output_does_not_depend_on_the_split(
    pieces: list[bytes], data: st.DataObject
) -> None:
    stream = b"".join(pieces)
    whole = _parse([stream])
    assert _parse([stream[i : i + 1] for i in range(len(stream))]) == whole
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=10)))
    bounds = [0, *cuts, len(stream)]
    assert _parse([stream[a:b] for a, b in itertools.pairwise(bounds)]) == whole


@given(st.lists(PIECES, max_size=30), st.data())
def test_parser_last_titles_keeps_the_text_and_the_state(
    pieces: list[bytes], data: st.DataObject
) -> None:
    """``last_titles`` (the engine's parse task) drops titles, never text or any other
    action, and the state a reducer reaches is the same."""
    stream = b"".join(pieces)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=10)))
    bounds = [0, *cuts, len(stream)]
    chunks = [stream[a:b] for a, b in itertools.pairwise(bounds)]
    every, last = (OutputParser(use_pty=True, nonce=NONCE, last_titles=x) for x in (False, True))
    full: list[StateAction] = []
    few: list[StateAction] = []
    for chunk in chunks:
        full += every.feed(chunk, wall_ms=1000, mono_ms=5.0)
        few += last.feed(chunk, wall_ms=1000, mono_ms=5.0)
    full += every.close(wall_ms=1000, mono_ms=5.0)
    few += last.close(wall_ms=1000, mono_ms=5.0)

    def titles(actions: list[StateAction]) -> list[str]:
        return [a.title for a in actions if isinstance(a, TerminalTitleChanged)]

    def others(actions: list[StateAction]) -> list[StateAction]:
        return _merged([a for a in actions if not isinstance(a, TerminalTitleChanged)])

    assert others(few) == others(full)
    assert titles(few)[-1:] == titles(full)[-1:]
    assert set(titles(few)) <= set(titles(full))


@given(st.text(max_size=200), st.data())
def test_pipes_parser_only_decodes_utf8(text: str, data: st.DataObject) -> None:
    raw = text.encode()
    cut = data.draw(st.integers(0, len(raw)))
    actions = _parse([raw[:cut], raw[cut:]], use_pty=False)
    assert actions == ([TerminalData(data=text)] if text else [])
    # Escape sequences are nobody's business on pipes: kept as text.
    assert _parse([b"\x1b]0;t\x07"], use_pty=False) == [TerminalData(data="\x1b]0;t\x07")]


def test_parser_strips_integration_and_uses_the_clocks_passed_in() -> None:
    parser = OutputParser(use_pty=True, nonce=NONCE)
    started = parser.feed(
        f"\x1b]633;A\x07$ \x1b]633;B\x07\x1b]633;E;make;{NONCE}\x07"
        f"\x1b]633;C;{NONCE}\x07out".encode(),
        wall_ms=1_700_000_000_000,
        mono_ms=100.0,
    )
    finished = parser.feed(f"\x1b]633;D;2;{NONCE}\x07".encode(), wall_ms=0, mono_ms=142.0)
    assert started == [
        TerminalData(data="$ "),
        TerminalCommandDetectionAvailable(),
        TerminalCommandExecuted(commandId="cmd-1", commandLine="make", timestamp=1_700_000_000_000),
        TerminalData(data="out"),
    ]
    assert finished == [TerminalCommandFinished(commandId="cmd-1", exitCode=2, durationMs=42)]


def test_parser_without_a_nonce_trusts_no_command_line_but_honours_osc133() -> None:
    forged = OutputParser(use_pty=True, nonce=None).feed(
        f"\x1b]633;E;rm -rf /;{NONCE}\x07\x1b]633;C\x07".encode(), wall_ms=1, mono_ms=1.0
    )
    assert [a.commandLine for a in forged if isinstance(a, TerminalCommandExecuted)] == [""]
    osc133 = OutputParser(use_pty=True, nonce=None).feed(b"\x1b]133;C\x07", wall_ms=1, mono_ms=1)
    assert [a for a in osc133 if isinstance(a, TerminalCommandExecuted)] != []
    # With our hooks injected (a nonce), a shell's own OSC 133 marks are ignored.
    ours = OutputParser(use_pty=True, nonce=NONCE).feed(b"\x1b]133;C\x07", wall_ms=1, mono_ms=1)
    assert [a for a in ours if isinstance(a, TerminalCommandExecuted)] == []


def test_parser_reports_titles_and_cwd() -> None:
    actions = _parse([b"\x1b]0;build\x07\x1b]633;P;Cwd=/srv/a b;" + NONCE.encode() + b"\x07"])
    assert TerminalTitleChanged(title="build") in actions
    assert TerminalCwdChanged(cwd="file:///srv/a%20b") in actions


# -- the terminal core ------------------------------------------------------------------------


def _core(**state: object) -> TerminalCore:
    fields: dict[str, object] = {
        "title": "t",
        "claim": ClientClaim("owner"),
        "content": (),
        "cols": 80,
        "rows": 24,
        "isPty": True,
    }
    fields.update(state)
    return TerminalCore(
        TerminalState(**fields),  # type: ignore[arg-type]
        uri=URI,
        scrollback=1000,
        use_pty=True,
    )


def origin(client: str, seq: int = 1) -> ActionOrigin:
    return ActionOrigin(clientId=client, clientSeq=seq)


def test_input_is_accepted_with_bytes_for_the_pty() -> None:
    core = _core()
    verdict = core.decide(TerminalInput(data="ls\r"), origin("anyone"))
    assert verdict == Accepted(TerminalInput(data="ls\r"), write=b"ls\r")
    # Bytes that are not UTF-8 go to the pty as they are; the echo is valid Unicode.
    raw = b"A\xff".decode("utf-8", "surrogateescape")
    verdict = core.decide(TerminalInput(data=raw), None)
    assert verdict == Accepted(TerminalInput(data="A\ufffd"), write=b"A\xff")
    assert core.decide(TerminalInput(data=""), None) == Accepted(TerminalInput(data=""))


def test_input_rejections() -> None:
    core = _core()
    full = core.decide(TerminalInput(data="x"), origin("c"), pending_input=MAX_PENDING_INPUT)
    assert isinstance(full, Rejected) and "buffer full" in full.reason and full.heal is None
    core.apply(TerminalExited(exitCode=0))
    gone = core.decide(TerminalInput(data="x"), origin("c"))
    assert isinstance(gone, Rejected) and "exited" in gone.reason


@pytest.mark.parametrize(
    ("cols", "rows", "ok"),
    [
        (1, 1, True),
        (MAX_DIMENSION, MAX_DIMENSION, True),
        (0, 10, False),
        (10, MAX_DIMENSION + 1, False),
    ],
)
def test_resize_bounds_and_healing(cols: int, rows: int, ok: bool) -> None:
    core = _core()
    verdict = core.decide(TerminalResized(cols=cols, rows=rows), origin("owner"))
    if ok:
        assert verdict == Accepted(TerminalResized(cols=cols, rows=rows), resize=(cols, rows))
    else:
        assert verdict == Rejected(
            f"cols and rows must be between 1 and {MAX_DIMENSION}",
            TerminalResized(cols=80, rows=24),
        )
    assert core.state.cols == 80  # deciding changes nothing


def test_resize_after_exit_sets_the_state_but_not_the_pty() -> None:
    core = _core()
    core.apply(TerminalExited())
    assert core.decide(TerminalResized(cols=10, rows=5), None) == Accepted(
        TerminalResized(cols=10, rows=5)
    )


def test_pipes_cannot_be_resized() -> None:
    core = TerminalCore(
        TerminalState(title="t", claim=ClientClaim(""), content=(), isPty=False),
        uri=URI,
        scrollback=100,
        use_pty=False,
    )
    verdict = core.decide(TerminalResized(cols=10, rows=5), origin("c"))
    assert isinstance(verdict, Rejected) and "not a pty" in verdict.reason
    assert verdict.heal is None  # no size to heal with


def test_claim_rules() -> None:
    core = _core()
    take = TerminalClaimed(claim=ClientClaim("intruder"))
    rejected = core.decide(take, origin("intruder"))
    assert rejected == Rejected(
        "claim: the terminal is claimed by client 'owner'; only it may "
        "(a client that has gone loses its claims when the server forgets it)",
        TerminalClaimed(claim=ClientClaim("owner")),
    )
    assert isinstance(core.decide(take, origin("owner")), Accepted)  # its own claim
    assert isinstance(core.decide(take, None), Accepted)  # the library may
    session = _core(claim=SessionClaim(session="s"))
    assert isinstance(session.decide(take, origin("anyone")), Accepted)  # a person takes over
    released = _core(claim=ClientClaim(""))
    assert isinstance(released.decide(take, origin("anyone")), Accepted)  # held by nobody


def test_titles_are_bounded_and_healed() -> None:
    core = _core()
    assert isinstance(
        core.decide(TerminalTitleChanged(title="x" * MAX_TITLE), origin("owner")), Accepted
    )
    verdict = core.decide(TerminalTitleChanged(title="x" * (MAX_TITLE + 1)), origin("owner"))
    assert verdict == Rejected(
        f"a title is at most {MAX_TITLE} characters", TerminalTitleChanged(title="t")
    )


@pytest.mark.parametrize(
    "action",
    [
        TerminalData(data="forged output"),
        TerminalExited(exitCode=0),
        TerminalCommandExecuted(commandId="x", commandLine="y", timestamp=1),
        TerminalCwdChanged(cwd="file:///"),
    ],
)
def test_server_actions_are_not_for_clients(action: StateAction) -> None:
    verdict = _core().decide(action, origin("c"))
    assert isinstance(verdict, Rejected) and "cannot be dispatched by a client" in verdict.reason


def test_catalogue_changes_are_detected_once() -> None:
    core = _core()
    info = core.info()
    assert core.info() is info  # cached
    core.apply(TerminalData(data="output"))
    core.apply(TerminalTitleChanged(title="t"))  # the same title: no change
    assert not core.take_info_changed()
    core.apply(TerminalTitleChanged(title="new"))
    core.apply(TerminalClaimed(claim=ClientClaim("other")))
    assert core.take_info_changed() and not core.take_info_changed()
    assert core.info().title == "new" and core.info().claim == ClientClaim("other")
    core.apply(TerminalExited())
    assert core.exited and core.take_info_changed() and core.info().exited


def test_scrollback_is_applied() -> None:
    core = _core()
    for _ in range(50):
        core.apply(TerminalData(data="x" * 100))
    assert core.scrollback.length <= 1000
    assert len(core.state.text()) <= 1000
    core.apply(TerminalCleared())
    assert core.state.text() == "" and core.scrollback.length == 0


CLIENT_ACTIONS = st.one_of(
    st.builds(TerminalInput, data=st.text(max_size=5)),
    st.builds(TerminalResized, cols=st.integers(-1, 5000), rows=st.integers(-1, 5000)),
    st.builds(TerminalTitleChanged, title=st.sampled_from(["", "a", "b" * (MAX_TITLE + 1)])),
    st.builds(
        TerminalClaimed,
        claim=st.one_of(
            st.builds(ClientClaim, clientId=st.sampled_from(["a", "b"])),
            st.builds(SessionClaim, session=st.just("s")),
        ),
    ),
    st.just(TerminalCleared()),
    st.builds(TerminalData, data=st.text(max_size=5)),
)


@given(
    st.lists(
        st.tuples(CLIENT_ACTIONS, st.sampled_from(["a", "b", None])),
        max_size=40,
    )
)
def test_the_core_folds_exactly_the_accepted_actions(
    steps: list[tuple[StateAction, str | None]],
) -> None:
    """Whatever clients send, the state is the plain reducer's fold of what was
    accepted; a rejection never changes anything and always names a reason."""
    core = _core(claim=ClientClaim("a"))
    expected = core.state
    for n, (action, client) in enumerate(steps):
        before = core.state
        verdict = core.decide(action, origin(client, n) if client else None)
        assert core.state is before
        if isinstance(verdict, Accepted):
            core.apply(verdict.action)
            expected = reduce_terminal(expected, verdict.action)
        else:
            assert verdict.reason
        assert core.state == expected


def test_a_forged_cwd_is_healed_with_the_true_one() -> None:
    verdict = _core(cwd="file:///home/u").decide(TerminalCwdChanged(cwd="file:///"), origin("c"))
    assert isinstance(verdict, Rejected)
    assert verdict.heal == TerminalCwdChanged(cwd="file:///home/u")
    # with no cwd known there is no value to send back
    unknown = _core().decide(TerminalCwdChanged(cwd="file:///"), origin("c"))
    assert isinstance(unknown, Rejected) and unknown.heal is None


# -- the root channel's healing values ---------------------------------------------------------

INFO = TerminalInfo(resource=URI, title="t", claim=ClientClaim(clientId="a"))
FORGED_ROOT: list[StateAction] = [
    RootTerminalsChanged(terminals=()),
    RootTerminalsChanged(terminals=(INFO, INFO)),
    RootAgentsChanged(agents=({"provider": "x"},)),
    RootActiveSessionsChanged(activeSessions=7),
]


@pytest.mark.parametrize("forged", FORGED_ROOT)
@pytest.mark.parametrize(
    "state",
    [
        RootState(agents=(), terminals=()),
        RootState(agents=(), terminals=(INFO,)),
        RootState(agents=(), terminals=None),
        RootState(agents=({"provider": "p"},), terminals=(INFO,), activeSessions=2),
    ],
)
def test_a_rejected_root_action_and_its_heal_leave_a_naive_mirror_where_it_was(
    forged: StateAction, state: RootState
) -> None:
    """What the upstream TS mirror does with a rejection (applies it), then the heal."""
    heal = heal_root(state, forged)
    mirror = reduce_root(state, forged)
    if heal is None:
        # only a session count the host never had cannot be set back
        assert isinstance(forged, RootActiveSessionsChanged) and state.activeSessions is None
        return
    healed = reduce_root(mirror, heal)
    assert healed.agents == state.agents and healed.activeSessions == state.activeSessions
    assert (healed.terminals or ()) == (state.terminals or ())


def test_configs_and_unknown_root_actions_need_no_heal() -> None:
    state = RootState(agents=(), terminals=(INFO,))
    assert heal_root(state, RootConfigChanged(config={"a": 1}, replace=True)) is None
    assert heal_root(state, TerminalTitleChanged(title="not a root action")) is None


def test_holder_only_input_takes_input_from_the_claim_holder_only() -> None:
    core = _core()
    type_ls = TerminalInput(data="ls\r")
    assert isinstance(core.decide(type_ls, origin("anyone")), Accepted)  # open by default
    core.holder_only_input = True
    assert core.decide(type_ls, origin("anyone")) == Rejected(
        "input: the terminal is claimed by client 'owner'; only it may "
        "(a client that has gone loses its claims when the server forgets it)",
        None,
    )
    assert isinstance(core.decide(type_ls, origin("owner")), Accepted)
    assert isinstance(core.decide(type_ls, None), Accepted)  # the library's own input
    session = _core(claim=SessionClaim(session="s"))
    session.holder_only_input = True
    assert isinstance(session.decide(type_ls, origin("anyone")), Rejected)


def test_a_terminal_whose_stdin_is_closed_takes_no_input() -> None:
    # (An exec's terminal: its program reads /dev/null; input would go nowhere.)
    core = TerminalCore(
        TerminalState(title="t", claim=ClientClaim("owner"), content=(), isPty=False),
        uri=URI,
        scrollback=1000,
        use_pty=False,
        takes_input=False,
    )
    for who in (origin("owner"), None):
        verdict = core.decide(TerminalInput(data="x"), who)
        assert isinstance(verdict, Rejected) and verdict.reason == STDIN_CLOSED
