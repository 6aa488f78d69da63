"""The upstream AHP 1.x round-trip vectors (``tests/fixtures/ahp-1x``), every one of them.

Each vector is decoded as its type, re-encoded and compared key-presence exact
with ``acceptableOutputs[0]`` (``null`` and absent differ). A vector whose type
this host never reads or writes is listed in :data:`NOT_APPLICABLE` with the
reason, and a test checks that every file is either run or listed, so nothing
is skipped silently. (No 1.x reducer vectors exist: see the set's README.)
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ahp.protocol import ActionEnvelope, structure, unstructure
from ahp.protocol.commands import (
    Implementation,
    InitializeResult,
    ReconnectChannels,
    ReconnectReplay,
    ReconnectSnapshot,
    SubscribeParams,
    SubscribeResult,
    reconnect_form,
)
from tests.conftest import FIXTURES_1X

ROUND_TRIPS = sorted((FIXTURES_1X / "round-trips").glob("*.json"))

#: Vectors of types this host never reads or writes, with the reason.
NOT_APPLICABLE = {
    "059-channel-delivery-frame.json": "channel/frame exists only after windowed delivery "
    "is accepted; this host declines it (no flowControl in any subscribe result)",
    "060-channel-delivery-credit.json": "channel/credit: windowed delivery, declined",
    "063-channel-delivery-unicode-frame.json": "channel/frame: windowed delivery, declined",
}


def _reconnect_result(value: Any) -> Any:
    if "channels" in value:
        return ReconnectChannels
    return ReconnectReplay if value.get("type") == "replay" else ReconnectSnapshot


def _round_trip(kind: str, value: Any) -> Any:
    simple: dict[str, Any] = {
        "ActionEnvelope": ActionEnvelope,
        "Implementation": Implementation,
        "InitializeResult": InitializeResult,
        "SubscribeParams": SubscribeParams,
        "SubscribeResult": SubscribeResult,
    }
    if kind in simple:
        cl = simple[kind]
    elif kind == "ReconnectParams":
        cl = reconnect_form(value)
    elif kind == "ReconnectResult":
        cl = _reconnect_result(value)
    else:
        raise AssertionError(f"no type for {kind}")
    return unstructure(structure(value, cl))


def test_every_vector_is_run_or_listed_with_a_reason() -> None:
    names = {p.name for p in ROUND_TRIPS}
    assert len(names) == 21
    assert set(NOT_APPLICABLE) <= names
    run = [p for p in ROUND_TRIPS if p.name not in NOT_APPLICABLE]
    assert len(run) == 18


@pytest.mark.parametrize(
    "path", [p for p in ROUND_TRIPS if p.name not in NOT_APPLICABLE], ids=lambda p: p.stem
)
def test_round_trip_1x(path: Path) -> None:
    case = json.loads(path.read_text())
    assert _round_trip(case["type"], case["input"]) == case["acceptableOutputs"][0]


def test_reconnect_forms_are_told_apart_by_their_subscriptions() -> None:
    vectors = {p.name: json.loads(p.read_text()) for p in ROUND_TRIPS}
    form_b = vectors["054-reconnect-params-per-channel-cursors.json"]["input"]
    form_a = vectors["069-channel-reconnect-action-checkpoint.json"]["input"]
    assert reconnect_form(form_b).__name__ == "ReconnectCursorParams"
    assert reconnect_form(form_a).__name__ == "ReconnectParams"
    empty_b = {"channel": "ahp-root://", "clientId": "c", "subscriptions": []}
    assert reconnect_form(empty_b).__name__ == "ReconnectCursorParams"
    assert reconnect_form({**empty_b, "lastSeenServerSeq": 3}).__name__ == "ReconnectParams"
    # Neither a cursor nor subscriptions: reported against the 0.5 shape.
    assert reconnect_form({"clientId": "c"}).__name__ == "ReconnectParams"
