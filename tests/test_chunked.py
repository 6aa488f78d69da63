"""Answers encoded in pieces (issue 25, item 5): the same bytes as one step, in order.

The pure encoder (:mod:`ahp.protocol.chunked`) against ``orjson.dumps`` with
hypothesis (random values, random piece sizes); the outbox's placeholder
(:meth:`ahp.engine.outbox.Outbox.hold`): what is queued behind an answer still
being encoded waits for it, the bytes are accounted, a dropped answer stops; and a
real server: a subscriber asking for a snapshot of megabytes while its terminal
prints gets the answer before every newer envelope of the channel, and loses none.
"""

from __future__ import annotations

import sys
from typing import Any, cast

import orjson
import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from ahp.engine.envelopes import Published
from ahp.engine.outbox import CHUNKED_WEIGHT, Outbox, ResponsePool, encode_answer
from ahp.protocol.actions import ActionEnvelope, RootTerminalsChanged, TerminalData
from ahp.protocol.chunked import PIECE_WEIGHT, encode_pieces, weight
from ahp.server.session import Session
from tests.helpers import wait_for_text
from tests.wire import peer, running_server

ROOT = "ahp-root://"

# JSON values orjson encodes (64-bit integers, finite floats, any text but lone
# surrogates), nested.
_TEXT = st.text(st.characters(exclude_categories=["Cs"]), max_size=40) | st.sampled_from(
    ["\x1b[1m\x1b[0m" * 20, "é€😀\x00\x7f\u2028", '"\\/' * 10]
)
_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | _TEXT
)
_VALUES = st.recursive(
    _SCALARS,
    lambda children: (
        st.lists(children, max_size=8)
        | st.tuples(children, children)
        | st.dictionaries(_TEXT, children, max_size=8)
    ),
    max_leaves=60,
)


@settings(max_examples=400)
@given(_VALUES, st.integers(min_value=1, max_value=300))
def test_pieces_join_into_the_one_step_encoding(value: Any, limit: int) -> None:
    pieces = list(encode_pieces(value, limit))
    assert b"".join(pieces) == orjson.dumps(value)
    # Every piece is one bounded call (a number is written in 24 bytes at most, a
    # character in 6: ``\\u001b``).
    assert max(map(len, pieces)) <= 6 * max(limit, 24) + 8


@given(st.text(st.characters(exclude_categories=["Cs"]), min_size=1, max_size=2000))
def test_a_long_string_is_encoded_slice_by_slice(text: str) -> None:
    value = {"result": {"content": [{"type": "unclassified", "value": text}]}}
    pieces = list(encode_pieces(value, 16))
    assert b"".join(pieces) == orjson.dumps(value)
    assert len(pieces) >= len(text) // 16


def test_what_one_step_refuses_is_refused() -> None:
    for bad in ({1: "a"}, [2**64], "\ud800", {"a": [object()]}):
        with pytest.raises(orjson.JSONEncodeError):
            orjson.dumps(bad)
        with pytest.raises(orjson.JSONEncodeError):
            b"".join(encode_pieces(bad, 1))
    with pytest.raises(ValueError):
        list(encode_pieces([], 0))


def test_weight_stops_at_its_cap() -> None:
    big = [["x" * 10] * 1000] * 1000
    assert weight(big, 100) > 100
    assert weight({"a": "b"}, 100) == weight({"a": "b"}, 10**9)
    assert weight("x" * PIECE_WEIGHT, PIECE_WEIGHT) > PIECE_WEIGHT


def _envelope(seq: int, channel: str = "ahp-terminal:/t", data: str = "x") -> Published:
    return Published(ActionEnvelope(channel=channel, action=TerminalData(data=data), serverSeq=seq))


def has_ready(outbox: Outbox) -> bool:
    """``outbox.has_ready``, read through a call: mypy would keep the property narrowed
    across the ``complete`` that changes it."""
    return outbox.has_ready


def test_what_is_queued_behind_an_answer_waits_for_it() -> None:
    pool = ResponsePool(1 << 30)
    outbox = Outbox(pool=pool, track_in_flight=True)
    before = _envelope(1)
    outbox.put(before)
    pending = outbox.hold()
    after = [_envelope(2), _envelope(3, channel="ahp-terminal:/u")]
    for item in after:
        outbox.put(item)
    assert outbox.queued_behind == 2
    assert outbox.get_nowait() == [before]
    assert not has_ready(outbox) and outbox.get_nowait() == []
    assert outbox.grow(pending, b'{"a":') and outbox.grow(pending, b"1}")
    assert pool.held == 7 and outbox.pending_bytes >= 7
    outbox.complete(pending)
    assert has_ready(outbox)
    assert outbox.get_nowait() == [pending, *after]
    assert b"".join(pending.pieces) == b'{"a":1}'
    outbox.sent()
    assert pool.held == 0 and outbox.pending_bytes == 0


def test_latest_wins_envelopes_before_and_behind_an_answer() -> None:
    outbox = Outbox()
    catalogue = [
        Published(
            ActionEnvelope(channel=ROOT, action=RootTerminalsChanged(terminals=()), serverSeq=n)
        )
        for n in (1, 2)
    ]
    assert all(item.latest_wins for item in catalogue)
    outbox.put(catalogue[0])
    pending = outbox.hold()
    outbox.put(catalogue[1])  # supersedes the first one, across the answer
    assert outbox.get_nowait() == []  # (the superseded one is left out)
    assert outbox.backlog == catalogue[1].size
    outbox.replace(pending, b"{}")
    assert outbox.get_nowait() == [pending, catalogue[1]]
    assert outbox.backlog == 0 and outbox.queued_bytes == 0


def test_a_dropped_answer_stops_and_takes_what_waited_with_it() -> None:
    pool = ResponsePool(1 << 30)
    outbox = Outbox(pool=pool, max_bytes=10 * sys.getsizeof(_envelope(1)) + 1000)
    pending = outbox.hold()
    assert outbox.grow(pending, b"x" * 100)
    outbox.put(_envelope(1))
    outbox.close()
    assert pending.dropped and not outbox.grow(pending, b"y")
    assert len(outbox) == 0 and pool.held == 0
    # Overflow drops it too.
    outbox = Outbox(pool=pool, max_bytes=1000)
    pending = outbox.hold()
    outbox.grow(pending, b"x" * 100)
    outbox.put(_envelope(1, data="z" * 2000))
    assert outbox.overflowed and pending.dropped and pool.held == 0


async def test_encode_answer_fills_the_placeholder_with_checkpoints() -> None:
    pool = ResponsePool(1 << 30)
    outbox = Outbox(pool=pool, track_in_flight=True)
    value = {"jsonrpc": "2.0", "id": 1, "result": {"text": "\x1b[1m" * (CHUNKED_WEIGHT // 2)}}
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await trio.lowlevel.checkpoint()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(ticker)
        await trio.lowlevel.checkpoint()
        pending = outbox.hold()
        start = ticks
        await encode_answer(outbox, pending, value)
        ran = ticks - start
        nursery.cancel_scope.cancel()
    assert pending.ready and b"".join(pending.pieces) == orjson.dumps(value)
    assert ran >= 8, ran  # other tasks ran while it was encoded
    assert pool.held == pending.size and not pool.encoding.locked()


_FILL = "printf '\\033[1m\\033[0m%.0s' $(seq 160000)"  # 1.28 M characters of escapes


async def test_a_big_snapshot_precedes_every_newer_envelope_and_none_is_lost(
    tmp_path: Any,
) -> None:
    stop = tmp_path / "stop"
    script = (
        f"{_FILL}; echo READY; i=0; while [ ! -e {stop} ]; do i=$((i+1)); echo line $i; done;"
        " echo END"
    )
    async with running_server(scrollback=16 * 1024 * 1024) as server:
        host = server.state.host
        terminal = await host.create_terminal(argv=["sh", "-c", script])
        uri = terminal.uri
        await wait_for_text(terminal, "READY")
        async with peer(server.url) as p:
            await p.initialize("chunked-subscriber", [])
            # (The server's open connections are Sessions; the state types them by what
            # its drain needs.)
            (session,) = (
                s
                for s in server.state.sessions
                if cast(Session, s).client_id == "chunked-subscriber"
            )
            outbox = session.outbox
            answer: dict[str, Any] = {}

            async def subscribe() -> None:
                answer.update(await p.call("subscribe", {"channel": uri}))

            async def resize_while_the_answer_is_encoded() -> None:
                # The shell's output comes in bursts the scheduler may place before or
                # after the encoding: a resize dispatched while the answer is held is
                # published for certain (its envelope goes to this subscriber too).
                while not outbox.holding:
                    await trio.lowlevel.checkpoint()
                await terminal.resize(100, 30)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(resize_while_the_answer_is_encoded)
                await subscribe()
                nursery.cancel_scope.cancel()
            # Nothing of the channel came before its answer (p.call keeps what came
            # before the answer in p.notes).
            assert not [n for n in p.notes if n["params"]["channel"] == uri]
            snapshot = answer["result"]["snapshot"]
            assert len(orjson.dumps(snapshot)) > CHUNKED_WEIGHT
            assert outbox.queued_behind, "no envelope came while an answer was encoded"
            text = "".join(part["value"] for part in snapshot["state"]["content"])
            seq = snapshot["fromSeq"]
            stop.touch()
            while not text.rstrip().endswith("END"):
                params = await p.action(lambda q: q["channel"] == uri)
                assert params["serverSeq"] > seq
                seq = params["serverSeq"]
                if params["action"]["type"] == "terminal/data":
                    text += params["action"]["data"]
            await terminal.wait_exited()
            assert text == terminal.state.text()
            await host.dispose(uri)


def test_discard_drops_everything_queued_and_gives_the_pool_back() -> None:
    pool = ResponsePool(1 << 30)
    outbox = Outbox(pool=pool, track_in_flight=True)
    outbox.put(b"x" * 1000)
    assert outbox.get_nowait()  # (in flight)
    outbox.put(_envelope(1))
    outbox.put(b"y" * 1000)
    pending = outbox.hold()
    outbox.grow(pending, b"z" * 1000)
    outbox.discard()
    assert len(outbox) == 0 and outbox.pending_bytes == 0 and pool.held == 0
    assert pending.dropped and outbox.closed and not outbox.put(_envelope(2))
