"""Removing terminal queries from replayed output (:mod:`ahp.vt.queries`).

The property: whatever the pieces the output arrives in, the filtered result is
the output with exactly the queries removed — a query split anywhere is still
removed, and nothing else is changed.
"""

from __future__ import annotations

import itertools
import unittest.mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ahp.vt import queries
from ahp.vt.queries import MAX_QUERY, QueryFilter, strip_queries

#: Queries (each makes a terminal answer on its input).
QUERIES = [
    "\x1b[6n",
    "\x1b[5n",
    "\x1b[?6n",
    "\x1b[c",
    "\x1b[0c",
    "\x1b[>c",
    "\x1b[>0c",
    "\x1b[=c",
    "\x1b[?1049$p",
    "\x1b[4$p",
    "\x1b[>q",
    "\x1b[>0q",
    "\x1b[14t",
    "\x1b[18t",
    "\x1b[21t",
    "\x1b[1x",
    "\x1b[?u",
    "\x1b[?4m",
    "\x1b[?1;1S",
    "\x1b[1;1;1;1;1*y",
    "\x1b]10;?\x07",
    "\x1b]11;?\x1b\\",
    "\x1b]4;1;?\x07",
    "\x1b]4;1;?;2;?\x1b\\",
    "\x1b]52;c;?\x07",
    "\x1bP$qm\x1b\\",
    "\x1bP+q544e\x1b\\",
    "\x1b_Gi=31,a=q;AAAA\x1b\\",
    "\x1bZ",
    "\x05",
]

#: Escape sequences that are not queries (they must pass through unchanged).
KEPT = [
    "\x1b[0m",
    "\x1b[1;31m",
    "\x1b[H\x1b[2J",
    "\x1b[?1049h",
    "\x1b[?1049l",
    "\x1b[?25l",
    "\x1b[2 q",
    "\x1b[8;40;120t",
    "\x1b[22;0t",
    "\x1b[?0c",
    "\x1b]0;a title\x07",
    "\x1b]2;title;with;semicolons\x1b\\",
    "\x1b]8;;https://example.com/?q\x1b\\",
    "\x1b]10;#ffffff\x07",
    "\x1bPq#0;2;0;0;0#1!6~\x1b\\",
    "\x1b(B",
    "\x1b=",
    "\x1b>",
    "\x1b7",
    "\x1b8",
    "\x1b[" + "1;" * 200 + "m",  # longer than MAX_QUERY, and no query
    "\x1b]0;" + "t" * 600 + "\x07",
    "\x1b]8;;http://e.com/" + "p" * 600 + "\x1b\\",
    "\x1bPq" + "#1!6~" * 200 + "\x1b\\",
    "\x1b_Ga=T,f=100;" + "QUFB" * 200 + "\x1b\\",
]

#: Queries longer than MAX_QUERY, and what is left of them (a long CSI's final becomes
#: CAN, which cancels it in the terminal).
LONG_QUERIES = [
    ("\x1b]4;" + "".join(f"{i};?;" for i in range(80)) + "\x07", ""),  # palette
    ("\x1bP+q" + ";".join(["544e", "636f6c73"] * 40) + "\x1b\\", ""),  # XTGETTCAP
    ("\x1bP$q" + "m" * 400 + "\x1b\\", ""),
    ("\x1b]10;" + "?;" * 200 + "\x07", ""),
    ("\x1b]777;" + "?;" * 200 + "\x07", ""),  # asks in its first MAX_QUERY characters
    ("\x1b]4;" + "1;rgb:00/00/00;" * 30 + "\x07", ""),  # OSC 4 may ask later: removed
    ("\x1b]52;c;" + "QUFB" * 200 + "\x07", ""),  # a clipboard write too
    ("\x1b_Gi=31,a=q;" + "QUFB" * 200 + "\x1b\\", ""),
    ("\x1b_G" + "i=31," * 100 + "a=q;AAAA\x1b\\", ""),  # its first field has not ended
    ("\x1b[" + "1;" * 200 + "6n", "\x1b[" + "1;" * 200 + "6\x18"),
    ("\x1b[" + "0" * 400 + "14t", "\x1b[" + "0" * 400 + "14\x18"),
    ("\x1b[?" + "1;" * 200 + "1$p", "\x1b[?" + "1;" * 200 + "1$\x18"),
]

TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cc", "Cs")), max_size=20)


@pytest.mark.parametrize("query", QUERIES)
def test_each_query_is_removed(query: str) -> None:
    assert strip_queries(f"a{query}b") == "ab"


@pytest.mark.parametrize(("query", "left"), LONG_QUERIES)
def test_a_query_longer_than_max_query_is_removed_however_split(query: str, left: str) -> None:
    """A long query is recognised without being held: a string is judged on its first
    MAX_QUERY characters, a CSI's final replaced by CAN; at every split point."""
    assert strip_queries(f"a{query}b") == f"a{left}b"
    stream = f"a{query}b\x1b[6n"
    for cut in range(len(stream) + 1):
        f = QueryFilter()
        out = f.feed(stream[:cut])
        assert len(f._held) <= MAX_QUERY + 1
        out += f.feed(stream[cut:])
        assert out + f.flush() == f"a{left}b", cut
    f = QueryFilter()
    assert "".join(f.feed(c) for c in stream) + f.flush() == f"a{left}b"


@pytest.mark.parametrize("kept", KEPT)
def test_other_sequences_are_kept(kept: str) -> None:
    assert strip_queries(f"a{kept}b") == f"a{kept}b"


def test_what_vi_writes_on_start_leaves_no_query() -> None:
    start = "\x1b[?1049h\x1b[22;0;0t\x1b[>4;2m\x1b[?1h\x1b=\x1b[?2004h\x1b[1;24r\x1b[?12h\x1b[?12l"
    asks = "\x1b[27m\x1b[23m\x1b[m\x1b[H\x1b[2J\x1b[?25l\x1b[24;1H\x1b[?u\x1b[c\x1b]11;?\x07"
    more = "\x1b[>c\x1b[6n\x1b]10;?\x07\x1bP$qq\x1b\\\x1b[?1$p"
    out = strip_queries(start + asks + more)
    assert "\x1b[c" not in out and "6n" not in out and ";?" not in out and "$q" not in out
    assert out.startswith(start)


def test_an_incomplete_sequence_is_held_then_completed() -> None:
    f = QueryFilter()
    assert f.feed("ab\x1b[") == "ab"
    assert f.feed("6") == ""
    assert f.feed("ncd\x1b]11;") == "cd"
    assert f.feed("?\x1b") == ""
    assert f.feed("\\ef\x1b") == "ef"
    assert f.flush() == "\x1b"
    assert f.feed("[6n") == "[6n"  # flushed: the filter started afresh


def test_holding_is_bounded_by_max_query() -> None:
    f = QueryFilter()
    long_title = "\x1b]0;" + "t" * (MAX_QUERY * 4)
    out = f.feed(long_title[: MAX_QUERY // 2])
    assert out == ""  # held: it could still be a query
    out += f.feed(long_title[MAX_QUERY // 2 :])
    assert out == long_title  # too long to be a query: passed through
    assert f.feed("tt\x07x\x1b[6n") == "tt\x07x"
    assert f.flush() == ""


def test_an_escape_inside_a_long_string_ends_it_as_a_terminal_would() -> None:
    # ESC inside a DCS aborts it (the VT500 parser goes to its escape state), so the
    # CSI after it is a query the terminal would answer: it is removed.
    image = "\x1bPq" + "#1!6~" * MAX_QUERY + "\x1b[6n-" + "\x1b\\"
    f = QueryFilter()
    out = "".join(f.feed(image[i : i + 7]) for i in range(0, len(image), 7))
    assert out + f.flush() == image.replace("\x1b[6n", "") == strip_queries(image)


pieces = st.lists(
    st.one_of(
        TEXT.map(lambda t: (t, t)),
        st.sampled_from(QUERIES).map(lambda q: (q, "")),
        st.sampled_from(KEPT).map(lambda k: (k, k)),
    ),
    max_size=30,
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pieces, st.lists(st.integers(min_value=0, max_value=10_000), max_size=12))
def test_split_anywhere_removes_exactly_the_queries(
    parts: list[tuple[str, str]], cuts: list[int]
) -> None:
    stream = "".join(raw for raw, _ in parts)
    expected = "".join(kept for _, kept in parts)
    assert strip_queries(stream) == expected
    bounds = sorted({0, len(stream), *(c % (len(stream) + 1) for c in cuts)})
    f = QueryFilter()
    out = "".join(f.feed(stream[a:b]) for a, b in itertools.pairwise(bounds))
    assert out + f.flush() == expected


@settings(max_examples=500, deadline=None)
@given(st.text(alphabet="\x1b\x07\x05\x18[]P_?;:$>=Gac6nqtpx\\b0123456789", max_size=60), st.data())
def test_long_sequences_split_anywhere_give_the_same_output(text: str, data: st.DataObject) -> None:
    """As below, with a MAX_QUERY so small that random sequences are long."""
    with unittest.mock.patch.object(queries, "MAX_QUERY", 6):
        whole = strip_queries(text)
        cuts = data.draw(st.lists(st.integers(min_value=0, max_value=len(text)), max_size=8))
        bounds = sorted({0, len(text), *cuts})
        f = QueryFilter()
        out = "".join(f.feed(text[a:b]) for a, b in itertools.pairwise(bounds))
        assert out + f.flush() == whole
        f = QueryFilter()
        assert "".join(f.feed(c) for c in text) + f.flush() == whole


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="\x1b\x07\x05\x18[]P_?;:$>=c6nqtpx\\ab0123456789", max_size=60), st.data())
def test_any_input_split_anywhere_gives_the_same_output(text: str, data: st.DataObject) -> None:
    whole = strip_queries(text)
    cuts = data.draw(st.lists(st.integers(min_value=0, max_value=len(text)), max_size=8))
    bounds = sorted({0, len(text), *cuts})
    f = QueryFilter()
    out = "".join(f.feed(text[a:b]) for a, b in itertools.pairwise(bounds))
    assert out + f.flush() == whole
