"""Content parts as a persistent sequence, and scrollback bounds on parts and command lines.

Pure: no pty, no Trio. ``Parts`` is checked against a plain tuple model under
random operation sequences, with every intermediate value kept alive (old
values must never change, which is the point of the structure).
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from ahp.protocol import ClientClaim, CommandPart, TerminalState, unstructure
from ahp.protocol.actions import (
    TerminalCleared,
    TerminalCommandExecuted,
    TerminalCommandFinished,
    TerminalData,
)
from ahp.protocol.parts import COMPACT_MIN, Parts
from ahp.reducers import (
    MAX_PARTS,
    Scrollback,
    content_length,
    low_water_for,
    reduce_terminal,
)
from ahp.reducers.scrollback import text_weight

EMPTY = TerminalState(title="t", claim=ClientClaim("c"), content=())

# (op, argument): append x, replace_last x, replace index x, drop_first n, branch k
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(0, 1000)),
        st.tuples(st.just("last"), st.integers(0, 1000)),
        st.tuples(st.just("replace"), st.integers(-50, 50)),
        st.tuples(st.just("drop"), st.integers(0, 80)),
        st.tuples(st.just("branch"), st.integers(0, 200)),
    ),
    max_size=200,
)


@given(OPS)
def test_parts_behave_like_tuples_and_never_change(ops: list[tuple[str, int]]) -> None:
    history: list[tuple[Parts[int], tuple[int, ...]]] = [(Parts(), ())]
    value, model = history[0]
    for op, arg in ops:
        if op == "append":
            value, model = value.append(arg), (*model, arg)
        elif op == "last" and model:
            value, model = value.replace_last(arg), (*model[:-1], arg)
        elif op == "replace" and model:
            index = arg % len(model)
            value, model = value.replace(index, -arg), (*model[:index], -arg, *model[index + 1 :])
        elif op == "drop":
            value, model = value.drop_first(arg), model[arg:]
        elif op == "branch":
            value, model = history[arg % len(history)]  # continue from an older value
        history.append((value, model))
    for old, expected in history:
        assert old == expected
        assert tuple(old) == expected
        assert list(reversed(old)) == list(reversed(expected))
        assert len(old) == len(expected)
        assert bool(old) == bool(expected)
        assert hash(old) == hash(expected)
        assert old.last == (expected[-1] if expected else None)
        if expected:
            assert old[0] == expected[0] and old[-1] == expected[-1]
            assert old[1:] == expected[1:]


def test_dropping_many_parts_compacts_the_shared_list() -> None:
    value: Parts[int] = Parts()
    for i in range(COMPACT_MIN * 8):
        value = value.append(i).drop_first(1 if i % 2 else 0)
    # The view holds half of what was appended; the list behind it is bounded by twice that.
    assert len(value._items) <= 2 * len(value) + COMPACT_MIN


def test_content_survives_the_wire_as_a_list() -> None:
    state = reduce_terminal(EMPTY, TerminalData("$ "))
    state = reduce_terminal(state, TerminalCommandExecuted("c1", "ls", 5))
    wire = unstructure(state)
    assert wire["content"] == [
        {"type": "unclassified", "value": "$ "},
        {
            "type": "command",
            "commandId": "c1",
            "commandLine": "ls",
            "output": "",
            "timestamp": 5,
            "isComplete": False,
        },
    ]


def test_finish_finds_an_older_command() -> None:
    state = reduce_terminal(EMPTY, TerminalCommandExecuted("c1", "sleep 1 &", 1))
    state = reduce_terminal(state, TerminalCommandExecuted("c2", "ls", 2))
    state = reduce_terminal(state, TerminalCommandFinished("c1", exitCode=0, durationMs=7))
    first = state.content[0]
    assert isinstance(first, CommandPart) and first.isComplete and first.durationMs == 7
    last = state.content[-1]
    assert isinstance(last, CommandPart) and not last.isComplete


def test_scrollback_bounds_parts_of_empty_commands() -> None:
    """Regression: 20 000 commands with an empty prompt kept 20 000 parts."""
    scrollback = Scrollback(4 * 1024 * 1024)
    state = EMPTY
    for n in range(3 * MAX_PARTS):
        for action in (
            TerminalCommandExecuted(f"c{n}", "true", n),
            TerminalCommandFinished(f"c{n}", exitCode=0, durationMs=1),
        ):
            state = scrollback.account(reduce_terminal(state, action), action)
        assert len(state.content) <= MAX_PARTS
    assert scrollback.length == content_length(state)
    newest = state.content[-1]
    assert isinstance(newest, CommandPart) and newest.commandId == f"c{3 * MAX_PARTS - 1}"


def test_scrollback_counts_command_lines() -> None:
    """Regression: 200 command lines of 100 000 characters kept 20 M characters uncounted."""
    limit = 1_000_000
    scrollback = Scrollback(limit)
    state = EMPTY
    for n in range(200):
        action = TerminalCommandExecuted(f"c{n}", "x" * 100_000, n)
        state = scrollback.account(reduce_terminal(state, action), action)
        assert scrollback.length == content_length(state) <= limit + 100_000
    assert content_length(state) <= limit
    assert content_length(state) >= low_water_for(limit) - 100_000


def test_text_weight_is_what_cpython_holds_the_characters_in() -> None:
    """ASCII and Latin-1 a byte a character, up to U+FFFF two, beyond (emoji) four: one
    such character makes the whole string that wide (CPython's ``str``)."""
    assert text_weight("") == 0 and text_weight("abc") == 3
    assert text_weight("\xe9" * 10) == 11
    assert text_weight("\u20ac" * 10) == 22
    assert text_weight("a" * 9 + "\U0001f389") == 44
    assert text_weight("a" * 100_000 + "\U0001f389") == 4 * 100_002


def test_scrollback_weighs_wide_text_and_trims_its_weight_with_it() -> None:
    """The weight (what the host's packer budgets by) counts each append's width; a trim
    keeps its bytes a character; a clear empties it."""
    limit = 100_000
    scrollback = Scrollback(limit)
    state = EMPTY
    wide = "x" * 999 + "\U0001f389"  # (a thousand characters at four bytes each)
    for _ in range(50):
        action = TerminalData(wide)
        state = scrollback.account(reduce_terminal(state, action), action)
    assert scrollback.length == 50_000 and scrollback.weight == 50 * 4 * 1001
    for _ in range(100):  # past the limit: trimmed to the low water mark
        action = TerminalData("y" * 1000)
        state = scrollback.account(reduce_terminal(state, action), action)
    assert scrollback.length == content_length(state) <= limit
    assert scrollback.length <= scrollback.weight < 4 * scrollback.length
    cleared = TerminalCleared()
    state = scrollback.account(reduce_terminal(state, cleared), cleared)
    assert scrollback.length == scrollback.weight == 0


@given(
    st.lists(
        st.one_of(
            st.text(min_size=1, max_size=40).map(TerminalData),
            st.integers(0, 10**6).map(lambda n: TerminalCommandExecuted(f"c{n}", "cmd" * 5, n)),
        ),
        max_size=120,
    ),
    st.integers(10, 200),
    st.integers(2, 12),
)
def test_scrollback_keeps_the_newest_within_both_bounds(
    actions: list[TerminalData | TerminalCommandExecuted], limit: int, max_parts: int
) -> None:
    scrollback = Scrollback(limit, max_parts=max_parts)
    full = EMPTY
    state = EMPTY
    for action in actions:
        full = reduce_terminal(full, action)
        state = scrollback.account(reduce_terminal(state, action), action)
        assert scrollback.length == content_length(state)
        assert len(state.content) <= max_parts
        assert scrollback.length <= limit + 15  # a head command's line is never sliced
        assert full.text().endswith(state.text())
    if state.content:  # the newest part survives (possibly with its text's head sliced)
        tail, whole = state.content[-1], full.content[-1]
        assert type(tail) is type(whole)
        if isinstance(tail, CommandPart):
            assert isinstance(whole, CommandPart) and tail.commandId == whole.commandId


def test_an_append_does_not_copy_the_parts() -> None:
    """Regression: every append rebuilt the content tuple (O(parts) per append)."""
    state = EMPTY
    for n in range(2000):
        state = reduce_terminal(state, TerminalCommandExecuted(f"c{n}", "ls", n))
    shared = state.content._items
    for _ in range(100):
        older = state
        state = reduce_terminal(state, TerminalData("x" * 64))
        assert state.content._items is shared  # the same list: nothing was copied
        assert len(older.content) == len(state.content) == 2000
