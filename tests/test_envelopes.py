"""An envelope's frame: the hand-built one of the hot path is the converter's, byte for byte.

``Published.frame`` builds ``terminal/data`` and ``terminal/input`` envelopes (a keystroke's
echo and output, every output batch) without the converter; every other envelope goes
through it. Property-tested against the converter's encoding over any text, channel,
sequence number and origin.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from ahp.engine.envelopes import Published
from ahp.protocol.actions import (
    ActionEnvelope,
    ActionOrigin,
    TerminalData,
    TerminalInput,
    TerminalTitleChanged,
)
from ahp.protocol.codec import dumps_utf8, unstructure

# (Text the server sends is valid Unicode: lone surrogates are replaced before any envelope.)
_TEXT = st.text(st.characters(exclude_categories=["Cs"]), max_size=200)
_ORIGINS = st.none() | st.builds(ActionOrigin, clientId=_TEXT, clientSeq=st.integers(0, 2**63 - 1))


def _converter_frame(envelope: ActionEnvelope) -> bytes:
    return dumps_utf8(
        {"jsonrpc": "2.0", "method": "action", "params": unstructure(envelope, ActionEnvelope)}
    )


@given(
    data=_TEXT,
    kind=st.sampled_from([TerminalData, TerminalInput]),
    channel=_TEXT,
    seq=st.integers(0, 2**63 - 1),
    origin=_ORIGINS,
    reason=st.none() | _TEXT,
)
def test_the_hot_paths_frame_is_the_converters(
    *,
    data: str,
    kind: type[TerminalData] | type[TerminalInput],
    channel: str,
    seq: int,
    origin: ActionOrigin | None,
    reason: str | None,
) -> None:
    action = kind(data=data)
    envelope = ActionEnvelope(
        channel=channel, action=action, serverSeq=seq, origin=origin, rejectionReason=reason
    )
    assert Published(envelope).frame == _converter_frame(envelope)


def test_other_envelopes_go_through_the_converter() -> None:
    envelope = ActionEnvelope(
        channel="ahp-terminal:/t", action=TerminalTitleChanged(title="t"), serverSeq=3
    )
    assert Published(envelope).frame == _converter_frame(envelope)
