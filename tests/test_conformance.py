"""The upstream AHP test vectors (vendored in ``tests/fixtures/ahp``), every one of them.

Reducer fixtures are folded through our reducers and compared after dropping
``null``/absent keys on both sides (what the upstream Go and Rust clients do).
Round-trip fixtures are decoded as their type, re-encoded, and compared
key-presence exact (``null`` and absent differ).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ahp.protocol import (
    ActionEnvelope,
    RootState,
    StateAction,
    TerminalState,
    decode_message,
    structure,
    unstructure,
)
from ahp.protocol.codec import message_to_json, structure_action
from ahp.reducers import reduce_root, reduce_terminal
from tests.conftest import FIXTURES

REDUCERS = sorted((FIXTURES / "reducers").glob("*.json"))
ROUND_TRIPS = sorted((FIXTURES / "round-trips").glob("*.json"))


def _drop_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _drop_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_drop_nulls(v) for v in value]
    return value


def test_fixture_sets_are_present() -> None:
    assert len(REDUCERS) == 26
    assert len(ROUND_TRIPS) == 9


@pytest.mark.parametrize("path", REDUCERS, ids=lambda p: p.stem)
def test_reducer_fixture(path: Path) -> None:
    case = json.loads(path.read_text())
    actions = [structure_action(a) for a in case["actions"]]
    state: Any
    if case["reducer"] == "terminal":
        state = structure(case["initial"], TerminalState)
        for action in actions:
            state = reduce_terminal(state, action)
    else:
        assert case["reducer"] == "root"
        state = structure(case["initial"], RootState)
        for action in actions:
            state = reduce_root(state, action)
    assert _drop_nulls(unstructure(state)) == _drop_nulls(case["expected"])


@pytest.mark.parametrize("path", ROUND_TRIPS, ids=lambda p: p.stem)
def test_round_trip_fixture(path: Path) -> None:
    case = json.loads(path.read_text())
    kind = case["type"]
    if kind == "ActionEnvelope":
        out = unstructure(structure(case["input"], ActionEnvelope))
    elif kind == "StateAction":
        out = unstructure(structure_action(case["input"]), StateAction)
    else:
        assert kind == "JsonRpcMessage"
        out = message_to_json(decode_message(case["input"]))
    assert out == case["acceptableOutputs"][0]
