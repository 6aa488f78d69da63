"""Who may change a terminal: the one table of :mod:`ahp.reducers.policy`, cell by cell.

Each cell (change x actor x mode) is exercised through a real server with real
clients (raw peers), in both modes (``serve --holder-only-input`` or not): a
fresh terminal per cell, set up so that the actor is what the column says; the
verdict the server gives must be the table's. Rejections go to the sender only,
with a reason; the library (in-process) may always act.
"""

from __future__ import annotations

import signal as signals
from pathlib import Path
from typing import Any

import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st

from ahp.engine import Host
from ahp.protocol.actions import (
    TerminalClaimed,
    TerminalCleared,
    TerminalResized,
    TerminalTitleChanged,
)
from ahp.protocol.processes import SIGNAL
from ahp.protocol.state import ClientClaim, SessionClaim
from ahp.reducers.policy import (
    POLICY,
    Actor,
    Change,
    actor_of,
    allowed,
    policy_table,
    refusal,
)
from ahp.server import ServeOptions
from tests.helpers import TIMEOUT, wait_for_text
from tests.wire import TOKEN, Peer, peer, running_server

REPO = Path(__file__).resolve().parents[1]

HOLDER, OTHER = "alice", "bob"
SESSION = {"kind": "session", "session": "ahp-session:/agent"}


def _claim_for(actor: Actor) -> dict[str, str]:
    """The claim a cell's terminal is created with."""
    if actor is Actor.UNHELD:
        return SESSION
    return {"kind": "client", "clientId": HOLDER}


def _client_action(change: Change) -> dict[str, Any]:
    actions: dict[Change, dict[str, Any]] = {
        Change.INPUT: {"type": "terminal/input", "data": "true\r"},
        Change.RESIZE: {"type": "terminal/resized", "cols": 100, "rows": 30},
        Change.TITLE: {"type": "terminal/titleChanged", "title": "renamed"},
        Change.CLEAR: {"type": "terminal/cleared"},
        Change.CLAIM: {"type": "terminal/claimed", "claim": {"kind": "client", "clientId": "x"}},
    }
    return actions[change]


async def _by_client(p: Peer, uri: str, change: Change) -> bool:
    """Make ``change`` as ``p``'s client; whether the server took it (a rejection must
    carry a reason; that it reaches ``p`` only is the next test's)."""
    if change is Change.SIGNAL:
        answer = await p.call(SIGNAL, {"channel": uri, "signal": "SIGINT"})
        if "error" in answer:
            assert answer["error"]["code"] == -32009 and answer["error"]["message"], answer
            return False
        return True
    if change is Change.DISPOSE:
        answer = await p.call("disposeTerminal", {"channel": uri})
        if "error" in answer:
            assert answer["error"]["code"] == -32009 and answer["error"]["message"], answer
            return False
        return True
    seq = await p.dispatch(uri, _client_action(change))
    echo = await p.action(
        lambda x: x["channel"] == uri and x.get("origin", {}).get("clientSeq") == seq
    )
    if "rejectionReason" not in echo:
        return True
    assert echo["rejectionReason"], echo
    return False


async def _in_process(host: Host, uri: str, change: Change) -> bool:
    """Make ``change`` as the library; whether it took effect."""
    term = host.get(uri)
    with trio.fail_after(TIMEOUT):
        if change is Change.INPUT:
            await term.send_input("echo lib-$((6*7))\r")
            await wait_for_text(term, "lib-42")
        elif change is Change.SIGNAL:
            await term.signal_command(signals.SIGINT)
        elif change is Change.DISPOSE:
            await host.dispose(uri)
            return uri not in host
        elif change is Change.RESIZE:
            await term.dispatch(TerminalResized(cols=100, rows=30), wait=True)
            return term.state.cols == 100
        elif change is Change.TITLE:
            await term.dispatch(TerminalTitleChanged(title="renamed"), wait=True)
            return term.state.title == "renamed"
        elif change is Change.CLEAR:
            await term.dispatch(TerminalCleared(), wait=True)
        elif change is Change.CLAIM:
            await term.dispatch(TerminalClaimed(claim=ClientClaim("x")), wait=True)
            return term.state.claim == ClientClaim("x")
    return True


@pytest.mark.parametrize("holder_only", [False, True], ids=["default", "holder-only"])
async def test_every_cell_of_the_policy_table_through_a_real_server(holder_only: bool) -> None:
    options = ServeOptions(port=0, token=TOKEN, holder_only_input=holder_only)
    async with (
        running_server(options, shell="/bin/sh") as sidecar,
        peer(sidecar.url) as alice,
        peer(sidecar.url) as bob,
    ):
        host = sidecar.state.host
        await alice.initialize(HOLDER, [])
        await bob.initialize(OTHER, [])
        table = POLICY[holder_only]
        n = 0
        for change in Change:
            for actor in Actor:
                n += 1
                uri = f"ahp-terminal:/{change.value}-{n}"
                assert (
                    await alice.call("createTerminal", {"channel": uri, "claim": _claim_for(actor)})
                ).get("result", "error") is None
                for p in (alice, bob):
                    await p.result("subscribe", {"channel": uri})
                with trio.fail_after(TIMEOUT):
                    if actor is Actor.IN_PROCESS:
                        took = await _in_process(host, uri, change)
                    else:
                        acting = alice if actor is Actor.HOLDER else bob
                        took = await _by_client(acting, uri, change)
                expected = actor in table[change]
                assert took == expected, (change, actor, holder_only)
                if uri in host:
                    still = host.get(uri)
                    # A rejected change left the terminal as it was.
                    if not took and change is Change.TITLE:
                        assert still.state.title != "renamed"
                    if not took and change is Change.RESIZE:
                        assert still.state.cols == 80
                    if not took and change is Change.CLAIM:
                        assert still.state.claim != ClientClaim("x")
                else:
                    assert took and change is Change.DISPOSE
        assert n == len(Change) * len(Actor)


async def test_a_rejection_is_sent_to_its_sender_only_with_a_reason() -> None:
    """bob's rejected resize of alice's terminal: bob gets the echo (reason) and the heal;
    alice, subscribed, sees neither (her next envelope on the channel is her own title)."""
    async with (
        running_server(shell="/bin/sh") as sidecar,
        peer(sidecar.url) as alice,
        peer(sidecar.url) as bob,
    ):
        uri = "ahp-terminal:/held"
        await alice.initialize(HOLDER, [])
        await bob.initialize(OTHER, [])
        await alice.result(
            "createTerminal", {"channel": uri, "claim": {"kind": "client", "clientId": HOLDER}}
        )
        for p in (alice, bob):
            await p.result("subscribe", {"channel": uri})
        seq = await bob.dispatch(uri, {"type": "terminal/resized", "cols": 10, "rows": 5})
        echo = await bob.action(lambda x: x.get("origin") == {"clientId": OTHER, "clientSeq": seq})
        assert "claimed by client 'alice'" in echo["rejectionReason"]
        heal = await bob.action(lambda x: x["action"]["type"] == "terminal/resized")
        assert heal["action"] == {"type": "terminal/resized", "cols": 80, "rows": 24}
        mine = await alice.dispatch(uri, {"type": "terminal/titleChanged", "title": "mine"})
        while True:
            got = await alice.action(lambda x: x["channel"] == uri)
            if got.get("origin") == {"clientId": HOLDER, "clientSeq": mine}:
                break
            assert got["action"]["type"] != "terminal/resized", got
            assert "rejectionReason" not in got, got
        assert host_cols(sidecar.state.host, uri) == 80


def host_cols(host: Host, uri: str) -> int | None:
    return host.get(uri).state.cols


def test_the_threat_model_quotes_the_policy_table() -> None:
    doc = (REPO / "docs" / "threat-model.md").read_text()
    assert policy_table() in doc


def test_the_table_is_complete_and_holder_only_is_never_wider() -> None:
    for mode in (False, True):
        assert set(POLICY[mode]) == set(Change)
    for change in Change:
        assert POLICY[True][change] <= POLICY[False][change]
        assert Actor.HOLDER in POLICY[True][change]
        assert Actor.IN_PROCESS in POLICY[True][change]
        assert Actor.OTHER not in POLICY[True][change]


_CLAIMS = st.one_of(
    st.builds(ClientClaim, clientId=st.sampled_from(["", "alice", "bob"])),
    st.builds(SessionClaim, session=st.just("ahp-session:/s")),
)


@given(
    change=st.sampled_from(list(Change)),
    claim=_CLAIMS,
    client=st.sampled_from([None, "alice", "bob"]),
    holder_only=st.booleans(),
)
def test_refusal_agrees_with_the_table(
    change: Change, claim: ClientClaim | SessionClaim, client: str | None, holder_only: bool
) -> None:
    actor = actor_of(claim, client)
    why = refusal(change, claim, client, holder_only=holder_only)
    assert (why is None) == allowed(change, actor, holder_only=holder_only)
    if why is not None:
        assert why.startswith(change.value + ":")
    if client is None:
        assert why is None
    if isinstance(claim, ClientClaim) and claim.clientId == client and client:
        assert why is None  # the holder may do everything in both modes
