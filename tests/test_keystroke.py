"""The keystroke fast path's pure parts (:mod:`ahp.keystroke`)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from wsproto.frame_protocol import FrameProtocol

from ahp import keystroke


def _client_frame(text: str) -> bytearray:
    """A masked final text frame, as a client's wsproto sends it."""
    return FrameProtocol(client=True, extensions=[]).send_data(text, fin=True)


@given(st.lists(st.text(max_size=300), min_size=1, max_size=5), st.data())
def test_simple_frames_parse_whole_and_in_order_however_they_arrive(
    texts: list[str], data: st.DataObject
) -> None:
    stream = b"".join(_client_frame(t) for t in texts)
    cut = sorted(data.draw(st.sets(st.integers(0, len(stream)), max_size=4)))
    buf = bytearray()
    got: list[str] = []
    for start, end in zip([0, *cut], [*cut, len(stream)], strict=True):
        buf += stream[start:end]
        while True:
            text, fallback = keystroke.parse_simple_frame(buf, 1 << 20)
            assert not fallback
            if text is None:
                break
            got.append(text)
    assert got == texts
    assert not buf


@pytest.mark.parametrize(
    "frame",
    [
        FrameProtocol(client=True, extensions=[]).send_data(b"binary", fin=True),
        FrameProtocol(client=True, extensions=[]).send_data("part", fin=False),
        FrameProtocol(client=True, extensions=[]).ping(b"p"),
        FrameProtocol(client=False, extensions=[]).send_data("unmasked", fin=True),
        _client_frame("x" * (keystroke.FAST_FRAME_MAX + 1)),
        b"\x81\xfe\x00\x05\0\0\0\0hello",  # (5 bytes in a 16-bit length: wsproto's 1002)
    ],
    ids=["binary", "fragment", "ping", "unmasked", "too-big", "non-minimal-length"],
)
def test_anything_else_goes_to_wsproto_untouched(frame: bytes) -> None:
    buf = bytearray(frame)
    assert keystroke.parse_simple_frame(buf, 1 << 20) == (None, True)
    assert buf == frame


def test_invalid_utf8_goes_to_wsproto() -> None:
    frame = bytearray(_client_frame("ab"))
    frame[-1] ^= 0x80 ^ ord("b")  # unmasked 0x80 alone is not UTF-8
    frame[-2] ^= 0x80 ^ ord("a") ^ 0x40
    assert keystroke.parse_simple_frame(bytearray(frame), 1 << 20)[1]


def test_the_message_bound_applies() -> None:
    buf = bytearray(_client_frame("x" * 100))
    assert keystroke.parse_simple_frame(buf, 99) == (None, True)


def test_every_trick_is_on_by_default_and_names_are_checked() -> None:
    assert all(keystroke.enabled(name) for name in keystroke.TRICKS)
    # The folding shortcuts (issue 23) are no tricks any more.
    for name in ("warp_drive", "direct_write", "inline_output", "inline_dispatch"):
        with pytest.raises(ValueError, match="no such trick"):
            keystroke.enabled(name)
