"""Tests for ahp.vt.scanner (pure; no I/O).

Test rules:
- h11 style: every stream is fed whole, byte by byte and in Hypothesis-chosen
  pieces, and the merged event lists must be identical.
- Invariants checked on every stream: no empty Text, one Text per run of text
  in a feed, ``pending_size <= max_pending`` after every feed, and no
  shell-integration sequence in the published text (also across feeds).
- Small ``max_pending`` values are used next to the default so that Hypothesis
  reaches the overlong paths.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable, Sequence

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ahp.vt.events import (
    CommandFinished,
    CommandLine,
    CommandStart,
    CwdReported,
    Event,
    PromptEnd,
    PromptStart,
    Property,
    Text,
    TitleChanged,
)
from ahp.vt.scanner import (
    _FIXED,
    MAX_PENDING_ESCAPE,
    MIN_PENDING_ESCAPE,
    Scanner,
    _interpret,
    unescape_value,
)

# -- helpers -------------------------------------------------------------------


def merge(events: Iterable[Event]) -> list[Event]:
    """Merge adjacent Text events (split points may split text)."""
    out: list[Event] = []
    for event in events:
        if isinstance(event, Text) and out and isinstance(out[-1], Text):
            out[-1] = Text(out[-1].data + event.data)
        else:
            out.append(event)
    return out


def check_feed_output(events: Sequence[Event]) -> None:
    for a, b in itertools.pairwise(events):
        assert not (isinstance(a, Text) and isinstance(b, Text)), "text of one feed not merged"
    for event in events:
        if isinstance(event, Text):
            assert event.data, "empty Text"


def run(chunks: Iterable[bytes], max_pending: int = MAX_PENDING_ESCAPE) -> list[Event]:
    """Feed every chunk then close; check the per-feed invariants; merge texts."""
    scanner = Scanner(max_pending=max_pending)
    events: list[Event] = []
    for chunk in chunks:
        out = scanner.feed(chunk)
        check_feed_output(out)
        assert scanner.pending_size <= max_pending
        events.extend(out)
    out = scanner.close()
    check_feed_output(out)
    assert scanner.pending_size == 0
    events.extend(out)
    return merge(events)


def scan(data: bytes, max_pending: int = MAX_PENDING_ESCAPE) -> list[Event]:
    return run([data], max_pending)


def bytewise(data: bytes) -> list[bytes]:
    return [data[i : i + 1] for i in range(len(data))]


def split_at(data: bytes, cuts: Iterable[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    bounds = [0, *points, len(data)]
    return [data[a:b] for a, b in itertools.pairwise(bounds)]


def text_of(events: Iterable[Event]) -> str:
    return "".join(e.data for e in events if isinstance(e, Text))


def non_text(events: Iterable[Event]) -> list[Event]:
    return [e for e in events if not isinstance(e, Text)]


RECOGNISED_133 = re.compile(r"\x1b\]133;[ABCD](?:;[^\x07\x1b]*)?(?:\x07|\x1b\\)")


def assert_no_shell_integration(text: str) -> None:
    assert "\x1b]633;" not in text
    assert RECOGNISED_133.search(text) is None


# -- stream grammar ------------------------------------------------------------

Token = tuple[bytes, list[Event]]

plain_text = st.text(
    alphabet=st.characters(blacklist_categories=["Cs"], blacklist_characters="\x1b\x07"),
    max_size=12,
) | st.sampled_from(["]", "]633;", "633;A", "133;A", ";", "\\", "\\x3b", "é", "日本", "🙂", "\r\n"])


@st.composite
def text_token(draw: st.DrawFn) -> Token:
    s = draw(plain_text)
    return s.encode(), ([Text(s)] if s else [])


def kept(raw: bytes, *events: Event) -> Token:
    return raw, [Text(raw.decode()), *events]


terminator = st.sampled_from([b"\x07", b"\x1b\\"])
simple = st.text(
    alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x7E, blacklist_characters="\\;"),
    max_size=10,
)


@st.composite
def osc633_token(draw: st.DrawFn) -> Token:
    end = draw(terminator)
    kind = draw(st.sampled_from("ABCDdEPQFGx"))
    if kind in "ABC":
        marks: dict[str, Event] = {"A": PromptStart(), "B": PromptEnd(), "C": CommandStart()}
        event = marks[kind]
        return b"\x1b]633;" + kind.encode() + end, [event]
    if kind == "D":
        return b"\x1b]633;D" + end, [CommandFinished(None)]
    if kind == "d":
        code = draw(st.integers(-300, 300))
        return b"\x1b]633;D;%d" % code + end, [CommandFinished(code)]
    if kind == "E":
        line = draw(simple)
        nonce = draw(st.none() | simple)
        raw = b"\x1b]633;E;" + line.encode()
        if nonce is not None:
            raw += b";" + nonce.encode()
        return raw + end, [CommandLine(line, nonce)]
    if kind == "P":
        key = draw(simple.filter(lambda k: "=" not in k and k != "Cwd"))
        value = draw(simple)
        return b"\x1b]633;P;%s=%s" % (key.encode(), value.encode()) + end, [Property(key, value)]
    if kind == "Q":
        return b"\x1b]633;P;Cwd=/tmp/a b" + end, [CwdReported("file:///tmp/a%20b", True)]
    return b"\x1b]633;" + draw(st.sampled_from([b"F", b"G", b"H", b"", b"ZZ;1"])) + end, []


@st.composite
def osc133_token(draw: st.DrawFn) -> Token:
    end = draw(terminator)
    kind = draw(st.sampled_from(["A", "B", "C", "D", "D;0", "D;7", "A;cl=m", "L", "Z;x"]))
    events: dict[str, Event] = {
        "A": PromptStart(),
        "B": PromptEnd(),
        "C": CommandStart(),
        "D": CommandFinished(None),
        "D;0": CommandFinished(0),
        "D;7": CommandFinished(7),
        "A;cl=m": PromptStart(),
    }
    raw = b"\x1b]133;" + kind.encode() + end
    if kind in events:
        return raw, [events[kind]]
    return kept(raw)  # unrecognised 133 passes through


@st.composite
def passthrough_token(draw: st.DrawFn) -> Token:
    end = draw(terminator)
    which = draw(st.sampled_from(["title0", "title2", "cwd", "link", "csi", "other"]))
    if which in ("title0", "title2"):
        title = draw(simple)
        raw = b"\x1b]" + which[-1].encode() + b";" + title.encode() + end
        return kept(raw, TitleChanged(title))
    if which == "cwd":
        return kept(b"\x1b]7;file://localhost/home/u%20x" + end, CwdReported("file:///home/u%20x"))
    if which == "link":
        return kept(b"\x1b]8;;https://example.com/\x1b\\link\x1b]8;;\x1b\\")
    if which == "csi":
        return kept(
            draw(st.sampled_from([b"\x1b[31m", b"\x1b[0m", b"\x1b[2J\x1b[H", b"\x1b[?25l"]))
        )
    return kept(b"\x1b]52;c;aGVsbG8=" + end)


clean_token = st.one_of(text_token(), osc633_token(), osc133_token(), passthrough_token())

dirty_piece = st.sampled_from(
    [
        b"\x1b",
        b"\x1b\x1b",
        b"\x1b]",
        b"\x1b]633;",
        b"\x1b]633;E;unterminated",
        b"\x1b]0;unterminated",
        b"\x1b]133;A",
        b"\x07",
        b"\x1b\\",
        b"]633;A\x07",
        b"\xff",
        b"\xe2\x82",
        b"\xc3",
        b"\x80",
        b"\x1b[3",
    ]
)


@st.composite
def clean_stream(draw: st.DrawFn) -> tuple[bytes, list[Event]]:
    tokens = draw(st.lists(clean_token, max_size=25))
    data = b"".join(raw for raw, _ in tokens)
    expected = merge(e for _, events in tokens for e in events)
    return data, expected


@st.composite
def dirty_stream(draw: st.DrawFn) -> bytes:
    parts = draw(
        st.lists(
            st.one_of(
                clean_token.map(lambda t: t[0]),
                dirty_piece,
                st.binary(max_size=8),
                st.integers(1, 40).map(lambda k: b"x" * k),
            ),
            max_size=30,
        )
    )
    return b"".join(parts)


any_stream = st.one_of(st.binary(max_size=300), dirty_stream())
bounds = st.sampled_from([MIN_PENDING_ESCAPE, 20, 32, MAX_PENDING_ESCAPE])
fast = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# -- properties ----------------------------------------------------------------


@fast
@given(clean_stream(), st.lists(st.integers(0, 10_000), max_size=12))
def test_clean_streams_exact(stream: tuple[bytes, list[Event]], cuts: list[int]) -> None:
    data, expected = stream
    assert scan(data) == expected
    assert run(bytewise(data)) == expected
    assert run(split_at(data, cuts)) == expected


@fast
@given(any_stream, bounds, st.lists(st.integers(0, 10_000), max_size=12))
def test_split_invariance(data: bytes, max_pending: int, cuts: list[int]) -> None:
    whole = scan(data, max_pending)
    assert run(bytewise(data), max_pending) == whole
    assert run(split_at(data, cuts), max_pending) == whole


@fast
@given(any_stream, bounds)
def test_no_shell_integration_in_text(data: bytes, max_pending: int) -> None:
    # Byte by byte: the concatenation of everything published, across feeds.
    scanner = Scanner(max_pending=max_pending)
    published: list[str] = []
    for chunk in bytewise(data):
        for event in scanner.feed(chunk):
            if isinstance(event, Text):
                assert_no_shell_integration(event.data)
                published.append(event.data)
    published.extend(e.data for e in scanner.close() if isinstance(e, Text))
    assert_no_shell_integration("".join(published))


@fast
@given(st.text(max_size=200), st.lists(st.integers(0, 10_000), max_size=8))
def test_plain_text_round_trips(s: str, cuts: list[int]) -> None:
    s = s.replace("\x1b", "")
    data = s.encode("utf-8", "surrogatepass")
    expected = data.decode("utf-8", "replace")
    assert text_of(run(split_at(data, cuts))) == expected


@fast
@given(st.binary(max_size=200), st.lists(st.integers(0, 10_000), max_size=8))
def test_invalid_utf8_decodes_like_the_stdlib(data: bytes, cuts: list[int]) -> None:
    data = data.replace(b"\x1b", b"")
    assert text_of(run(split_at(data, cuts))) == data.decode("utf-8", "replace")


# -- text and decoding ---------------------------------------------------------


def test_fast_path_single_text() -> None:
    scanner = Scanner()
    assert scanner.feed(b"hello \x1b[1mworld\x1b[0m\r\n") == [Text("hello \x1b[1mworld\x1b[0m\r\n")]
    assert scanner.feed(b"") == []
    assert scanner.pending_size == 0


def test_multibyte_character_split_across_feeds() -> None:
    euro = "€".encode()
    scanner = Scanner()
    assert scanner.feed(b"a" + euro[:1]) == [Text("a")]
    assert scanner.feed(euro[1:2]) == []
    assert scanner.feed(euro[2:] + b"b") == [Text("€b")]


def test_invalid_bytes_become_replacement_characters() -> None:
    assert scan(b"a\xffb\xe2\x82") == [Text("a\ufffdb\ufffd")]


def test_partial_character_before_a_removed_sequence_is_replaced() -> None:
    # The removed ESC ends the character, exactly as a kept ESC would.
    assert scan(b"\xe2\x82\x1b]633;A\x07\xac") == [Text("\ufffd"), PromptStart(), Text("\ufffd")]
    assert scan(b"\xe2\x82\x1b[m") == [Text("\ufffd\x1b[m")]


def test_text_between_events_is_merged() -> None:
    events = Scanner().feed(b"a\x1b[1mb\x1b]8;;u\x07c\x1b]633;F\x07d\x1b]633;A\x07e")
    assert events == [Text("a\x1b[1mb\x1b]8;;u\x07cd"), PromptStart(), Text("e")]


# -- shell integration ---------------------------------------------------------


def test_full_command_cycle() -> None:
    data = (
        b"\x1b]633;A\x07$ \x1b]633;B\x07"
        b"\x1b]633;E;echo hi\\x3b ls;n0nce\x07\x1b]633;C\x07"
        b"hi\r\n\x1b]633;D;0\x07\x1b]633;P;Cwd=/home/u\x07"
    )
    assert scan(data) == [
        PromptStart(),
        Text("$ "),
        PromptEnd(),
        CommandLine("echo hi; ls", "n0nce"),
        CommandStart(),
        Text("hi\r\n"),
        CommandFinished(0),
        CwdReported("file:///home/u", shell_integration=True),
    ]


@pytest.mark.parametrize(
    ("payload", "event"),
    [
        (b"633;A;extra", PromptStart()),
        (b"633;D", CommandFinished(None)),
        (b"633;D;", CommandFinished(None)),
        (b"633;D;abc", CommandFinished(None)),
        (b"633;D;1x", CommandFinished(None)),
        (b"633;D;-1", CommandFinished(-1)),
        (b"633;D;130", CommandFinished(130)),
        (b"633;D;2;extra", CommandFinished(2)),
        (b"633;E", CommandLine("", None)),
        (b"633;E;ls", CommandLine("ls", None)),
        (b"633;E;ls;", CommandLine("ls", "")),
        (b"633;E;a\\\\b;n;x", CommandLine("a\\b", "n;x")),
        (b"633;P;IsWindows=True", Property("IsWindows", "True")),
        (b"633;P;K=a=b", Property("K", "a=b")),
        (b"633;P;K\\x3dV", Property("K", "V")),
        (b"633;P;Cwd=/a\\x3bb", CwdReported("file:///a%3Bb", shell_integration=True)),
        # Our shells' own report: a directory's name may hold a newline (the tracker
        # believes it only when signed); a NUL is in no path.
        (b"633;P;Cwd=/a\\x0ab", CwdReported("file:///a%0Ab", shell_integration=True)),
        (b"633;P;Cwd=/a\\x1b[31m", CwdReported("file:///a%1B%5B31m", shell_integration=True)),
        # A byte that is not UTF-8 is the byte, not U+FFFD (probe N finding 8); elsewhere
        # than in a path it is U+FFFD.
        (b"633;P;Cwd=/bad\xffx", CwdReported("file:///bad%FFx", shell_integration=True)),
        (b"633;P;Cwd=/bad\\xffx", CwdReported("file:///bad%FFx", shell_integration=True)),
        (b"633;P;K\xff=v\xff", Property("K\ufffd", "v\ufffd")),
        (b"633;E;a\xff", CommandLine("a\ufffd", None)),
        (b"133;A", PromptStart()),
        (b"133;A;cl=m;aid=3", PromptStart()),
        (b"133;B", PromptEnd()),
        (b"133;C", CommandStart()),
        (b"133;D;1", CommandFinished(1)),
        (b"133;D", CommandFinished(None)),
    ],
)
def test_shell_integration_events(payload: bytes, event: Event) -> None:
    for end in (b"\x07", b"\x1b\\"):
        assert scan(b"x\x1b]" + payload + end + b"y") == [Text("x"), event, Text("y")]


@pytest.mark.parametrize(
    "payload",
    [
        b"633;F",
        b"633;G",
        b"633;H",
        b"633;",
        b"633;P;NoEquals",
        b"633;P;Cwd=relative",
        b"633;P;Cwd=/a\\x00b",
        b"633;ZZ",
    ],
)
def test_other_633_swallowed_silently(payload: bytes) -> None:
    assert scan(b"x\x1b]" + payload + b"\x07y") == [Text("xy")]


@pytest.mark.parametrize("payload", [b"133;L", b"133;AB", b"133", b"633", b"1337;SetMark"])
def test_unrecognised_sequences_pass_through(payload: bytes) -> None:
    data = b"x\x1b]" + payload + b"\x07y"
    assert scan(data) == [Text(data.decode())]


def test_titles_pass_through_and_are_reported() -> None:
    data = b"a\x1b]0;t\xc3\xa9st\x07b\x1b]2;two\x1b\\c\x1b]1;icon\x07"
    assert scan(data) == [
        Text("a\x1b]0;tést\x07"),
        TitleChanged("tést"),
        Text("b\x1b]2;two\x1b\\"),
        TitleChanged("two"),
        Text("c\x1b]1;icon\x07"),
    ]


@pytest.mark.parametrize(
    ("report", "uri"),
    [
        (b"file:///home/a%20b", "file:///home/a%20b"),
        (b"file://127.0.0.1/t", "file:///t"),
        (b"FILE://LocalHost/t", "file:///t"),
        (b"file:/no/authority", "file:///no/authority"),
        (b"file:///tmp/%ff%fe", "file:///tmp/%FF%FE"),  # (not UTF-8: the bytes kept)
        (b"file:///home/a b", "file:///home/a%20b"),
        (b"file://localhost/t%C3%A9", "file:///t%C3%A9"),
        (b"file:///t\xc3\xa9", "file:///t%C3%A9"),
        (b"/plain/path", "file:///plain/path"),
        (b"kitty-shell-cwd://localhost/a b", "file:///a%20b"),
        # Another host (a shell inside ssh): its path is not a path here.
        (b"file://otherhost/tmp", None),
        (b"kitty-shell-cwd://otherhost/tmp", None),
        # A NUL or another control character in the decoded path: no cwd.
        (b"file:///tmp/%00nul", None),
        (b"file:///tmp/a\x01b", None),
        (b"file:///tmp/%0Aline", None),
        (b"file:///tmp/%C2%9B31m", None),
        (b"/tmp/a\x7fb", None),
        (b"http://example.com/x", None),
        (b"file://hostonly", None),
    ],
)
def test_osc7_passes_through_and_reports_cwd(report: bytes, uri: str | None) -> None:
    data = b"\x1b]7;" + report + b"\x07"
    expected: list[Event] = [Text(data.decode("utf-8", "replace"))]
    if uri is not None:
        expected.append(CwdReported(uri))
    assert scan(data) == expected


def test_osc7_of_this_host_by_name() -> None:
    data = b"\x1b]7;file://MyBox/home/a\x07\x1b]7;file://other/x\x07"
    events = Scanner(hostname="mybox").feed(data)
    first, second = "\x1b]7;file://MyBox/home/a\x07", "\x1b]7;file://other/x\x07"
    assert events == [Text(first), CwdReported("file:///home/a"), Text(second)]
    # The text (terminal/data) is what the program wrote, whatever the report was.
    assert Scanner().feed(data) == [Text(data.decode())]


def test_osc1337_current_dir() -> None:
    data = b"\x1b]1337;CurrentDir=/srv/x y\x07"
    assert scan(data) == [Text(data.decode()), CwdReported("file:///srv/x%20y")]


def test_preserves_other_sequences_byte_for_byte() -> None:
    data = (
        b"\x1b[38;5;196mred\x1b[0m \x1b]8;id=1;https://e.x/?a=b\x1b\\link\x1b]8;;\x1b\\"
        b" \x1b[2J\x1b[?1049h\x1bP+q544e\x1b\\\x1b]52;c;?\x07\x1b]10;?\x1b\\"
    )
    assert text_of(run(bytewise(data))) == data.decode()


# -- splitting -----------------------------------------------------------------


def test_lone_trailing_escape_is_held() -> None:
    scanner = Scanner()
    assert scanner.feed(b"abc\x1b") == [Text("abc")]
    assert scanner.pending_size == 1
    assert scanner.feed(b"]633;A\x07def") == [PromptStart(), Text("def")]
    assert scanner.feed(b"\x1b") == []
    assert scanner.feed(b"[31m") == [Text("\x1b[31m")]


def test_sequence_split_everywhere() -> None:
    data = b"ab\x1b]633;E;x;y\x1b\\cd"
    expected = [Text("ab"), CommandLine("x", "y"), Text("cd")]
    for cut in range(len(data) + 1):
        assert run([data[:cut], data[cut:]]) == expected
    assert run(bytewise(data)) == expected


def test_st_split_between_escape_and_backslash() -> None:
    scanner = Scanner()
    assert scanner.feed(b"\x1b]0;t\x1b") == []
    assert scanner.feed(b"\\") == [Text("\x1b]0;t\x1b\\"), TitleChanged("t")]


# -- bad input -----------------------------------------------------------------


def test_malformed_osc_released_as_text() -> None:
    # The ESC ends the OSC (no event) and starts the next sequence.
    assert scan(b"\x1b]0;ab\x1b[31mx") == [Text("\x1b]0;ab\x1b[31mx")]


def test_malformed_shell_integration_dropped() -> None:
    assert scan(b"a\x1b]633;C\x1b[31mb") == [Text("a\x1b[31mb")]
    assert scan(b"a\x1b]133;D;0\x1b[mb") == [Text("a\x1b[mb")]


def test_malformed_osc_followed_by_a_sequence() -> None:
    assert scan(b"\x1b]0;ab\x1b]633;A\x07c") == [Text("\x1b]0;ab\x1b\\"), PromptStart(), Text("c")]


def test_removal_never_joins_a_new_sequence() -> None:
    for data in (
        b"\x1b\x1b]633;A\x07]633;E;rm -rf /;x\x07",
        b"\x1b]63\x1b]633;A\x073;E;rm -rf /;x\x07",
        b"\x1b]\x1b]633;F\x07633;E;x\x07",
    ):
        text = text_of(scan(data))
        assert_no_shell_integration(text)
        assert text_of(run(bytewise(data))) == text
        assert "\x1b\\" in text  # the removed sequence became ST


def test_unterminated_osc_of_10_kb_is_released() -> None:
    data = b"\x1b]0;" + b"a" * 10_000 + b"\x07tail"
    for chunks in ([data], bytewise(data), split_at(data, range(0, len(data), 1000))):
        events = run(chunks)  # asserts pending_size <= MAX_PENDING_ESCAPE after each feed
        assert events == [Text(data.decode())]  # released unchanged, no title event


def test_pending_never_exceeds_the_bound() -> None:
    scanner = Scanner()
    scanner.feed(b"\x1b]2;")
    for _ in range(20_000):
        scanner.feed(b"z")
        assert scanner.pending_size <= MAX_PENDING_ESCAPE
    scanner.feed(b"\x1b]633;P;Key=")
    for _ in range(20_000):
        scanner.feed(b"z")
        assert scanner.pending_size <= MAX_PENDING_ESCAPE


def test_overlong_bound_is_exact() -> None:
    limit = 32
    for size in range(limit - 6, limit + 3):
        data = b"\x1b]0;" + b"t" * size + b"\x07"
        complete = len(data) - 1 < limit  # the terminator begins within `limit` bytes
        events = scan(data, limit)
        assert (TitleChanged("t" * size) in events) == complete
        assert text_of(events) == data.decode()
        assert run(bytewise(data), limit) == events


def test_overlong_shell_integration_is_swallowed() -> None:
    data = b"a\x1b]633;E;" + b"x" * 10_000 + b";nonce\x07b\x1b]633;C\x07"
    assert scan(data) == [Text("ab"), CommandStart()]
    assert run(bytewise(data)) == [Text("ab"), CommandStart()]
    # ... up to a BEL, an ST, or an ESC that starts something else.
    assert scan(b"\x1b]633;P;" + b"y" * 5000 + b"\x1b\\z") == [Text("z")]
    assert scan(b"\x1b]633;P;" + b"y" * 5000 + b"\x1b[1mz") == [Text("\x1b[1mz")]


def test_close_releases_or_drops_held_bytes() -> None:
    for held, text in [
        (b"\x1b", "\x1b"),
        (b"\x1b]0;abc", "\x1b]0;abc"),
        (b"\x1b]0;abc\x1b", "\x1b]0;abc\x1b"),
        (b"\x1b]633;E;ls", ""),
        (b"\x1b]133;A", ""),
        (b"\x1b]133;Q", "\x1b]133;Q"),
        (b"\xe2\x82", "\ufffd"),
    ]:
        scanner = Scanner()
        events = scanner.feed(b"x" + held)
        events += scanner.close()
        assert merge(events) == [Text("x" + text)]
        assert scanner.pending_size == 0
        # The scanner is reusable after close().
        assert scanner.feed(b"\x1b]633;A\x07") == [PromptStart()]


def test_flood_of_escape_sequences() -> None:
    assert Scanner().feed(b"\x1b]633;A\x07" * 100_000) == [PromptStart()] * 100_000
    colours = b"\x1b[31mx\x1b[0m" * 100_000
    assert Scanner().feed(colours) == [Text(colours.decode())]
    titles = b"\x1b]0;t\x07" * 100_000
    assert merge(run(split_at(titles, range(0, len(titles), 4096)))) == merge(
        [Text("\x1b]0;t\x07"), TitleChanged("t")] * 100_000
    )


def test_max_pending_must_allow_classification() -> None:
    with pytest.raises(ValueError, match="max_pending"):
        Scanner(max_pending=MIN_PENDING_ESCAPE - 1)


# -- unescaping ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "value"),
    [
        (b"plain", "plain"),
        (b"a\\\\b", "a\\b"),
        (b"a\\x3bb", "a;b"),
        (b"line\\x0a", "line\n"),
        (b"\\x3B\\X3b", ";\\X3b"),
        (b"\\x4A\\x4a", "JJ"),
        (b"\\\\x3b", "\\x3b"),
        (b"\\q \\x4 \\xzz \\", "\\q \\x4 \\xzz \\"),
        (b"\\xc3\\xa9", "é"),
        (b"\\xff", "\ufffd"),
        ("日本".encode(), "日本"),
    ],
)
def test_unescape_value(raw: bytes, value: str) -> None:
    assert unescape_value(raw) == value


def test_fixed_shortcut_agrees_with_the_parser() -> None:
    for payload, expected in _FIXED.items():
        assert _interpret(payload, "") == expected


# -- last_titles: only the last title of a run, per feed ---------------------------------------


def last_of_runs(events: Sequence[Event]) -> list[Event]:
    """``events`` (one feed's) with every title change that another one follows, with
    nothing but text between, left out; texts merged."""  # (what compact() keeps, per run)
    out: list[Event] = []
    for index, event in enumerate(events):
        if isinstance(event, TitleChanged):
            later = next((e for e in events[index + 1 :] if not isinstance(e, Text)), None)
            if isinstance(later, TitleChanged):
                continue
        out.append(event)
    return merge(out)


title_storm = st.lists(
    st.one_of(
        st.integers(0, 99).map(lambda k: b"\x1b]0;line %d\x07" % k),
        st.just(b"\x1b]2;st\x1b\\"),
        st.just(b"text line\r\n"),
        st.just("\u00e9\u2192".encode()),
        st.just(b"\x1b]633;A\x07"),
        st.just(b"\x1b]7;file:///tmp\x07"),
        st.just(b"\x1b]0;unterminated"),
        st.just(b"\x1b"),
    ),
    max_size=40,
).map(b"".join)


@fast
@given(st.one_of(title_storm, any_stream), bounds, st.lists(st.integers(0, 10_000), max_size=12))
def test_last_titles_reports_the_last_title_of_each_run(
    data: bytes, max_pending: int, cuts: list[int]
) -> None:
    for chunks in (split_at(data, cuts), bytewise(data), [data]):
        every = Scanner(max_pending=max_pending)
        last = Scanner(max_pending=max_pending, last_titles=True)
        for chunk in chunks:
            out, full = last.feed(chunk), every.feed(chunk)
            check_feed_output(out)
            # The same text and the same last title of every run; at most as many
            # titles (a sequence that yields no event, e.g. a malformed one, may
            # end a run early: its title is then reported too).
            assert last_of_runs(out) == last_of_runs(full)
            assert len(non_text(out)) <= len(non_text(full))
            assert last.pending_size <= max_pending
        assert last.close() == every.close()


def test_last_titles_in_a_storm_of_retitled_lines() -> None:
    storm = b"".join(b"\x1b]0;line %d\x07out %d\n" % (i, i) for i in range(1000))
    events = Scanner(last_titles=True).feed(storm)
    head, tail = storm.rsplit(b"\x07", 1)
    assert events == [Text(head.decode() + "\x07"), TitleChanged("line 999"), Text(tail.decode())]
    marked = Scanner(last_titles=True).feed(b"\x1b]0;a\x07x\x1b]0;b\x07\x1b]633;A\x07y\x1b]2;c\x07")
    assert marked == [
        Text("\x1b]0;a\x07x\x1b]0;b\x07"),
        TitleChanged("b"),
        PromptStart(),
        Text("y\x1b]2;c\x07"),
        TitleChanged("c"),
    ]


def test_signed_marks_carry_their_nonce() -> None:
    # Our scripts sign C, D and P with the terminal's nonce (ahp.vt.integration).
    events = Scanner().feed(
        b"\x1b]633;C;n-1\x07\x1b]633;D;;n-1\x07\x1b]633;D;7;n-1\x07"
        b"\x1b]633;P;Cwd=/a\\x3bb;n-1\x07\x1b]633;P;k=v;n-1\x07\x1b]633;C\x07\x1b]633;D;3\x07"
    )
    assert [getattr(e, "nonce", "?") for e in events] == ["n-1"] * 5 + [None, None]
    c, d, d7, cwd, prop, bare_c, bare_d = events
    assert isinstance(c, CommandStart) and isinstance(bare_c, CommandStart)
    assert d == CommandFinished(None) and d7 == CommandFinished(7) and bare_d == CommandFinished(3)
    assert cwd == CwdReported("file:///a%3Bb", shell_integration=True)
    assert prop == Property("k", "v")
