"""The root catalogue under storms: paced per reducer batch, merged latest-wins, bounded.

Test rules (see conftest): real ptys and processes; every wait under
``fail_after``; progress is observed (bytes the storm's reader took), never slept
for.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ahp.engine import Outbox, open_host
from ahp.engine.envelopes import Published
from ahp.protocol import ROOT_URI, ActionEnvelope, ActionOrigin
from ahp.protocol.actions import RootTerminalsChanged, TerminalTitleChanged
from ahp.pty import SpawnError
from ahp.reducers.core import MAX_TITLE
from tests.helpers import wait_for_state

STORM = ["sh", "-c", r"while :; do printf '\033]0;a\007\033]0;b\007'; done"]


def _catalogue(seq: int) -> Published:
    return Published(
        ActionEnvelope(channel=ROOT_URI, action=RootTerminalsChanged(terminals=()), serverSeq=seq)
    )


def test_outbox_keeps_only_the_latest_catalogue() -> None:
    outbox = Outbox(max_bytes=10 * 1024)
    for seq in range(1, 1000):  # far more than the bound, were they all counted
        last = _catalogue(seq)
        assert outbox.put(last)
    assert outbox.backlog == last.size
    assert outbox.merged == 998
    batch = outbox.get_nowait()
    assert [item.seq for item in batch if isinstance(item, Published)] == [999]
    assert not outbox.overflowed


def test_latest_wins_keeps_order_and_other_items() -> None:
    outbox = Outbox()
    data = Published(
        ActionEnvelope(
            channel="ahp-terminal:/a",
            action=TerminalTitleChanged(title="x"),
            serverSeq=2,
            origin=ActionOrigin(clientId="c", clientSeq=1),
        )
    )
    outbox.put(_catalogue(1))
    outbox.put(data)
    outbox.put("response")
    outbox.put(_catalogue(3))
    batch = outbox.get_nowait()
    assert batch[0] is data and batch[1] == "response"
    assert isinstance(batch[2], Published) and batch[2].seq == 3
    assert len(batch) == 3


async def test_title_storm_costs_root_subscribers_one_catalogue_per_batch() -> None:
    """Regression: every title change re-published the whole catalogue; a root
    subscriber that read a little slower than the storm was cut off within seconds."""
    async with open_host() as host:
        for _ in range(30):  # idle terminals make each catalogue larger
            await host.create_terminal(argv=["cat"])
        root = Outbox(max_bytes=64 * 1024)  # a subscriber that takes nothing meanwhile
        host.hub.subscribe(ROOT_URI, root)
        storm = await host.create_terminal(argv=STORM, name="storm")
        await wait_for_state(storm, lambda _: storm.bytes_read >= 256 * 1024)  # ~20k titles
        # Catalogues go out at most every host.CATALOGUE_INTERVAL: the storm can reach its
        # bytes before the first one with it is published (the 30 just went out).
        # (The storm's titles change its state all the time: the condition is re-read.)
        await wait_for_state(storm, lambda _: not host.catalogue_pending and len(root) > 0)
        put = len(root)  # every catalogue queued (the superseded ones are still there)
        assert put <= storm.reducer_batches + 1  # + the storm's own creation
        assert not root.overflowed
        [catalogue] = [i for i in root.get_nowait() if isinstance(i, Published)][-1:]
        assert isinstance(catalogue.envelope.action, RootTerminalsChanged)
        assert len(catalogue.envelope.action.terminals or ()) == 31


async def test_client_titles_and_names_are_bounded() -> None:
    async with open_host() as host:
        with pytest.raises(SpawnError, match="name"):
            await host.create_terminal(argv=["cat"], name="n" * (MAX_TITLE + 1))
        assert host.list_terminals() == ()
        term = await host.create_terminal(argv=["cat"], name="n" * MAX_TITLE)
        sender = Outbox()
        host.hub.subscribe(term.uri, sender)
        origin = ActionOrigin(clientId="c", clientSeq=1)
        await term.dispatch(
            TerminalTitleChanged(title="t" * (MAX_TITLE + 1)), origin=origin, sender=sender
        )
        await term.dispatch(TerminalTitleChanged(title="ok"), origin=origin, sender=sender)
        await wait_for_state(term, lambda s: s.title == "ok")
        envelopes = [i.envelope for i in sender.get_nowait() if isinstance(i, Published)]
        rejected, heal, accepted = envelopes
        assert rejected.rejectionReason and "title" in rejected.rejectionReason
        assert heal.action == TerminalTitleChanged(title="n" * MAX_TITLE) and heal.origin is None
        assert accepted.action == TerminalTitleChanged(title="ok") and accepted.origin == origin
        assert host.list_terminals()[0].title == "ok"


@given(st.lists(st.sampled_from(["catalogue", "data", "response"]), max_size=60))
def test_latest_wins_keeps_everything_else_in_order(kinds: list[str]) -> None:
    outbox = Outbox(max_bytes=1 << 30)
    queued: list[object] = []
    for seq, kind in enumerate(kinds, 1):
        if kind == "catalogue":
            item: object = _catalogue(seq)
        elif kind == "data":
            item = Published(
                ActionEnvelope(
                    channel="ahp-terminal:/a",
                    action=TerminalTitleChanged(title=str(seq)),
                    serverSeq=seq,
                    origin=ActionOrigin(clientId="c", clientSeq=seq),
                )
            )
        else:
            item = f"response {seq}"
        outbox.put(item)  # type: ignore[arg-type]
        queued.append(item)
    catalogues = [i for i in queued if isinstance(i, Published) and i.latest_wins]
    expected = [
        i for i in queued if not (isinstance(i, Published) and i.latest_wins) or i is catalogues[-1]
    ]
    assert outbox.get_nowait(coalesce=False) == expected
    assert outbox.backlog == 0 and not outbox.overflowed
