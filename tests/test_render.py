"""The pure parts of the run API: line renderer, screen model, budget, fallback markers.

Property tests check what must hold for any input: rendering does not depend on
how the output was split into chunks, the renderer agrees with a full emulator
(pyte) where both apply, the budget's counts add up exactly, and every bound is
exceeded at least once.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tracemalloc
import unittest.mock

import pyte
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from ahp.agent import render as render_module
from ahp.agent.budget import RETAINED_OUTPUT_BYTES, OutputBudget, _Retained, omission_marker
from ahp.agent.evidence import looks_like_prompt
from ahp.agent.markers import Markers, group
from ahp.agent.render import MAX_SEQUENCE, LineRenderer
from ahp.agent.screen import SCREEN_REPLAY, ScreenModel
from ahp.protocol.state import ClientClaim, CommandPart, TerminalState, UnclassifiedPart
from ahp.pty import procfs


def render(chunks: list[str], cols: int = 20, rows: int = 5) -> list[str]:
    out: list[str] = []
    renderer = LineRenderer(out.append, cols=cols, rows=rows)
    for chunk in chunks:
        renderer.feed(chunk)
    return out + renderer.lines()


# -- the line renderer ---------------------------------------------------------------------------


def test_progress_bar_cursor_moves_wrap_and_wide_characters() -> None:
    assert render(["0%\r50%\r100%\r\n"]) == ["100%"]
    assert render(["abc\r\ndef\r\n\x1b[2A\x1b[1CX\r\n\r\n"]) == ["aXc", "def"]
    assert render(["x" * 45 + "\r\n"]) == ["x" * 45]  # wrapped at 20, joined again
    assert render(["漢字漢字漢字漢字漢字漢字\r\n"]) == ["漢字漢字漢字漢字漢字漢字"]  # 24 cells
    assert render(["e\u0301\r\n"]) == ["e\u0301"]  # combining accent stays on its letter
    assert render(["tab\there\r\n"]) == ["tab     here"]
    assert render(["abc\b\bX\r\n"]) == ["aXc"]
    assert render(["abcdef\r\x1b[3C\x1b[K\r\n"]) == ["abc"]


def alternate(renderer: LineRenderer) -> bool:
    """``renderer.alternate``, read through a call: mypy would keep it narrowed across
    the ``feed`` that changes it."""
    return renderer.alternate


def test_alternate_screen_contents_are_left_out() -> None:
    out: list[str] = []
    renderer = LineRenderer(out.append)
    renderer.feed("before\r\n\x1b[?1049h\x1b[H\x1b[2Jeditor\r\nstuff")
    assert alternate(renderer) and renderer.used_alternate
    renderer.feed("\x1b[?1049lafter\r\n")
    assert not alternate(renderer)
    assert out + renderer.lines() == ["before", "after"]


def test_lines_leave_the_window_and_clear_keeps_what_was_shown() -> None:
    out: list[str] = []
    renderer = LineRenderer(out.append, rows=3)
    renderer.feed("".join(f"{i}\r\n" for i in range(10)))
    assert out == [str(i) for i in range(8)]  # 8, 9 and the cursor's line remain
    renderer.feed("\x1b[H\x1b[2Jnew\r\n")
    assert out[-2:] == ["8", "9"] and renderer.lines() == ["new"]


def test_overlong_escape_is_dropped_and_rendering_goes_on() -> None:
    junk = "\x1b]0;" + "t" * (MAX_SEQUENCE + 10)  # an OSC that has not ended yet
    half = MAX_SEQUENCE // 2
    lines = render([junk[:half], junk[half:], "\x07\r\nok\r\n"], cols=80)
    assert lines == ["", "ok"]  # none of it shown


_PAYLOAD = "".join(chr(0x41 + i % 26) for i in range(100_000))  # base64-like, no controls
_LONG = MAX_SEQUENCE * 5


@pytest.mark.parametrize(
    ("output", "shown"),
    [
        ("before\r\n\x1b]52;c;" + _PAYLOAD + "\x07after\r\n", ["before", "after"]),  # clipboard
        ("before\r\n\x1bPq" + "#1~~@@vv@@$-" * 7000 + "\x1b\\after\r\n", ["before", "after"]),
        ("before\r\n\x1b_Ga=T,f=100;" + _PAYLOAD + "\x1b\\after\r\n", ["before", "after"]),
        ("\x1b]0;" + "T" * 20_000 + "\x07x\r\n", ["x"]),  # a title
        ("a \x1b]8;;http://e.com/" + "p" * _LONG + "\x1b\\link\x1b]8;;\x1b\\ b\r\n", ["a link b"]),
        ("A\x1b]0;" + "t" * _LONG + "\x1b[1mB\r\n", ["AB"]),  # cut short by a colour's ESC
        ("A\x1b]0;" + "t" * _LONG + "\x18B\r\n", ["AB"]),  # cancelled by CAN
        ("X\x1bP" + "d" * _LONG + "\r\nmore", ["X"]),  # never ends: all of it discarded
        ("A\x1b[" + "1;" * _LONG + "mB\r\n", ["AB"]),  # endless parameters
        ("abc\x1b[" + "0" * _LONG + "1Dz\r\n", ["abcz"]),  # discarded, not obeyed
        ("A\x1b[" + "1;" * _LONG + "\r\nB\r\n", ["A", "B"]),  # broken by a control
        ("A\x1b " + " " * _LONG + "7B\r\n", ["AB"]),  # an escape's intermediates
    ],
)
def test_a_long_string_or_sequence_is_discarded_whatever_the_split(
    output: str, shown: list[str]
) -> None:
    """An escape sequence longer than MAX_SEQUENCE (an OSC 52 clipboard write, a sixel or
    kitty image, a long title or link) shows nothing of itself, as on a terminal, and
    is never held whole: only "inside one" is remembered."""
    assert render([output], cols=80) == shown
    size = len(output)
    cuts = {1, 2, 3, MAX_SEQUENCE - 1, MAX_SEQUENCE, MAX_SEQUENCE + 1, MAX_SEQUENCE + 2}
    cuts |= {size - k for k in range(1, 12)} | set(range(0, size, 997))
    for cut in sorted(c for c in cuts if 0 < c < size):
        assert render([output[:cut], output[cut:]], cols=80) == shown, cut
    for step in (7, 1000, 4096, 5000):
        chunks = [output[i : i + step] for i in range(0, size, step)]
        assert render(chunks, cols=80) == shown, step
    out: list[str] = []
    renderer = LineRenderer(out.append, cols=80)
    for i in range(0, size, 1000):
        renderer.feed(output[i : i + 1000])
        assert len(renderer._pending) <= MAX_SEQUENCE


def test_rep_repeats_the_last_character_up_to_the_end_of_the_line() -> None:
    """REP (CSI n b, terminfo's ``rep``, which ncurses uses) as tmux draws it."""
    assert render(["a\x1b[5bz\r\n"], cols=80) == ["aaaaaaz"]
    assert render(["a\x1b[b\x1b[31m\x1b[2b|\r\n"], cols=80) == ["aaaa|"]  # default 1
    assert render(["abc\x1b[99999b\r\n"], cols=10) == ["abcccccccc"]  # bounded by the line
    assert render(["漢\x1b[3b|\r\n"], cols=7) == ["漢漢漢|"]  # wide: by cells
    assert render(["a\r\x1b[3bz\r\n"], cols=80) == ["z"]  # not after a control
    assert render(["\x1b[3bz\r\n"], cols=80) == ["z"]  # nothing to repeat
    for cut in range(1, 8):
        assert render(["ab\x1b[4bc\r\n"[:cut], "ab\x1b[4bc\r\n"[cut:]]) == ["abbbbbc"]


_TOKENS = st.sampled_from(
    [
        "a",
        "bc",
        "漢",
        "é",
        "\r\n",
        "\r",
        "\n",
        "\b",
        "\t",
        "\x1b[A",
        "\x1b[2B",
        "\x1b[3C",
        "\x1b[D",
        "\x1b[K",
        "\x1b[1K",
        "\x1b[2J",
        "\x1b[2;3H",
        "\x1b[31m",
        "\x1b[0m",
        "\x1b]0;title\x07",
        "\x1b[?1049h",
        "\x1b[?1049l",
        "\x1b7",
        "\x1b8",
        "\x1b[3b",
        "xxxxxxxxxxxxxxxxxxxxxxxxx",
        "line\r\nline\r\n",
    ]
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_TOKENS, max_size=40), st.data())
def test_rendering_does_not_depend_on_chunking(tokens: list[str], data: st.DataObject) -> None:
    text = "".join(tokens)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(text)), max_size=8)))
    chunks = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]
    assert render(chunks) == render([text])
    assert render(list(text)) == render([text])


_SIMPLE = st.sampled_from(
    [
        *("a", "bcd", "\r\n", "\r", "\x1b[A", "\x1b[2A", "\x1b[B", "\x1b[3C", "\x1b[2D"),
        *("\x1b[K", "\x1b[1K", "\x1b[2K", "\x1b[31mred\x1b[0m"),
    ]
)


#: Pieces of long, short, broken and cut-short sequences, rendered with a tiny
#: MAX_SEQUENCE so that random ones cross it.
_LONG_PIECES = st.sampled_from(
    [
        *("a", "xyz", "\r\n", "\x1b", "\x1b]", "\x1b]0;", "\x1bP", "\x1b_", "\x1b[", "\x1b "),
        *("tttttttttt", "1;2;3;4;5", "0000000", "   ", "$", "\x07", "\x18", "\\", "\x1b\\"),
        *("m", "H", "A", "b", "7", "\x1b[2b", "\x1b[31m", "\x1b[2D", "\x1b]8;;u\x1b\\"),
    ]
)


@settings(max_examples=500, deadline=None)
@given(st.lists(_LONG_PIECES, max_size=40), st.data())
def test_overlong_sequences_render_the_same_however_split(
    pieces: list[str], data: st.DataObject
) -> None:
    text = "".join(pieces)
    # (Garbage left out: a CSI cut short by an SGR, which the SGR pre-strip may join.)
    assume(re.search(r"\x1b\[[0-?]*[ -/]*\x1b\[[0-9;:]*m", text) is None)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(text)), max_size=8)))
    chunks = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]
    with unittest.mock.patch.object(render_module, "MAX_SEQUENCE", 12):
        whole = render([text])
        assert render(chunks) == whole
        assert render(list(text)) == whole


@settings(max_examples=300, deadline=None)
@given(st.lists(_SIMPLE, max_size=30))
def test_renderer_agrees_with_pyte(tokens: list[str]) -> None:
    """Where both apply (no scrolling, no wrapping), the line model is the emulator."""
    text = "".join(tokens)
    rows = 40
    screen = pyte.Screen(200, rows)
    pyte.Stream(screen).feed(text)
    expected = [line.rstrip() for line in screen.display]
    while expected and not expected[-1]:
        expected.pop()
    assert render([text], cols=200, rows=rows) == expected


def test_prompt_heuristic() -> None:
    assert looks_like_prompt("name? ")
    assert looks_like_prompt("Password:")
    assert looks_like_prompt("Continue [y/N]")
    assert not looks_like_prompt("compiling foo.c")
    assert not looks_like_prompt("")


# -- the screen model ----------------------------------------------------------------------------


def _state(*parts: str, command: str | None = None) -> TerminalState:
    content: list[UnclassifiedPart | CommandPart] = [UnclassifiedPart(p) for p in parts]
    if command is not None:
        content.append(CommandPart("c1", "cmd", command, 0, isComplete=False))
    return TerminalState(title="t", claim=ClientClaim(""), content=tuple(content), cols=30, rows=6)


def test_screen_model_follows_increments_and_replays_when_lost() -> None:
    model = ScreenModel(30, 6)
    steps = [
        _state("$ "),
        _state("$ ls\r\n"),
        _state("$ ls\r\n", command="a\r\n"),
        _state("$ ls\r\n", command="a\r\nb\x1b[?1049hfull"),
        _state("$ ls\r\n", command="a\r\nb\x1b[?1049hfull\x1b[?1049l!"),
    ]
    for state in steps:
        got = model.update(state)
        fresh = ScreenModel(30, 6).update(state)
        assert got == fresh
    assert model.replays == 1  # only the first update had to replay
    assert got.text() == "$ ls\na\nb!" and not got.alternate_screen
    # Content that shrank (cleared, trimmed): a replay.
    assert model.update(_state("fresh")).lines[0] == "fresh"
    assert model.replays == 2
    # A backlog beyond SCREEN_REPLAY: a fresh emulator fed only the tail.
    big = _state("fresh" + "".join(f"{i}\r\n" for i in range(SCREEN_REPLAY // 3)) + "end")
    screen = model.update(big)
    assert model.replays == 3 and screen.lines[screen.cursor_row] == "end"


def test_screen_of_the_alternate_screen() -> None:
    model = ScreenModel(20, 4)
    model.feed("shell$ \x1b[?1049h\x1b[H\x1b[2Jvi here")
    screen = model.screen()
    assert screen.alternate_screen and screen.lines[0] == "vi here"
    model.feed("\x1b[?1049l")
    assert model.screen().lines[0] == "shell$" and not model.screen().alternate_screen


@pytest.mark.parametrize(
    ("output", "shown"),
    [
        # An OSC cut short by the ESC of a colour (xterm, xterm.js and tmux end it there):
        # everything after it, up to the next BEL, was hidden from the agent.
        (
            "before\x1b]0;title\x1b[1mbold\x1b[0m after\r\n1\r\nEND\r\n",
            ["beforebold after", "1", "END"],
        ),
        ("A\x1b]0;abc\x18C\r\n", ["AC"]),  # CAN cancels it
        ("A\x1b]0;abc\x1aC\r\n", ["AC"]),  # so does SUB
        ("A\x1b]0;t\x07B\r\n", ["AB"]),
        ("A\x1b]0;t\x1b\\B\r\n", ["AB"]),
        ("x\x1bPq#0\x1b[31mred\r\n", ["xred"]),  # a DCS cut short likewise
    ],
)
def test_a_string_sequence_cut_short_hides_nothing_after_it(output: str, shown: list[str]) -> None:
    for cut in range(len(output) + 1):  # (however the output was split)
        lines: list[str] = []
        renderer = LineRenderer(lines.append)
        renderer.feed(output[:cut])
        renderer.feed(output[cut:])
        renderer.flush()
        assert lines == shown, (cut, lines)


# -- the output budget ---------------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.text(st.characters(codec="utf-8", exclude_characters="\n"), max_size=30)),
    st.integers(0, 60),
    st.integers(0, 60),
    st.integers(0, 5),
)
def test_budget_counts_are_exact(lines: list[str], head: int, tail: int, live: int) -> None:
    budget = OutputBudget(head, tail)
    finished, still = lines[: len(lines) - live], lines[len(lines) - live :]
    for line in finished:
        budget.add(line)
    out = budget.render(still)
    whole = "".join(line + "\n" for line in lines)
    total = len(whole.encode())
    assert (out.total_bytes, out.total_lines) == (total, len(lines))
    if not out.truncated:
        assert out.text == whole and out.omitted_bytes == 0
        return
    head_text, marker, tail_text = _split(out.text, out.omitted_bytes, out.omitted_lines)
    assert marker
    assert len(head_text.encode()) <= head + 1  # + the newline closing a cut line
    assert len(tail_text.encode()) <= tail
    shown = len(head_text.encode()) + len(tail_text.encode())
    # Exact, but for the newline the head adds after a line it cut.
    assert out.omitted_bytes + shown - total in (0, 1)
    assert 0 <= out.omitted_lines <= len(lines)
    assert whole.endswith(tail_text)
    assert budget.retained_text(still) == whole


@settings(max_examples=500, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.text(st.characters(codec="utf-8", exclude_characters="\n"), max_size=12),
            st.text(st.sampled_from("xé€"), min_size=20, max_size=200),  # longer than a budget
        ),
        max_size=8,
    ),
    st.integers(0, 60),
    st.integers(0, 60),
    st.integers(0, 3),
    st.integers(0, 300),
)
def test_budget_tail_is_the_true_end(
    lines: list[str], head: int, tail: int, live: int, retain: int
) -> None:
    """Head, marker, tail: the tail is the output's last bytes, as many as fit (whole
    lines, then the end of the first that does not fit whole, wherever it is, or the
    rest of the line the head cut), never overlapping the head; a line shown in part
    is not counted omitted."""
    retain = max(retain, tail)
    budget = OutputBudget(head, tail, retain_bytes=retain)
    finished, still = lines[: len(lines) - live], lines[len(lines) - live :]
    for line in finished:
        budget.add(line)
    out = budget.render(still)
    whole = "".join(line + "\n" for line in lines).encode()
    if not out.truncated:
        assert out.text.encode() == whole and out.omitted_lines == 0
        return
    head_text, marker, tail_text = _split(out.text, out.omitted_bytes, out.omitted_lines)
    assert marker, out.text
    shown_tail = tail_text.encode()
    assert whole.endswith(shown_tail) and len(shown_tail) <= tail
    start = len(whole) - len(shown_tail)  # where the tail starts
    head_end = len(whole) - out.omitted_bytes - len(shown_tail)  # where the head ends
    assert 0 <= head_end < start
    assert head_text.encode() in (whole[:head_end], whole[:head_end] + b"\n")
    if budget.dropped_bytes:
        return  # (older lines dropped: the head may end anywhere before the retained ones)
    # Maximal: every byte after the head up to the budget, but for the bytes of a
    # character the cut would split (a line in the middle larger than the room left
    # shows its end too: it was dropped whole, probe N finding 4).
    want = min(tail, len(whole) - head_end)
    assert len(shown_tail) <= want
    assert all(0x80 <= byte < 0xC0 for byte in whole[len(whole) - want : start]), (
        want,
        len(shown_tail),
    )
    # Lines: each shown in part counted once, none shown counted omitted.
    head_cut = whole[head_end - 1 : head_end] not in (b"\n", b"")
    first = whole.count(b"\n", 0, head_end) + head_cut
    last = whole.count(b"\n", start)
    cut_across = head_cut and whole.count(b"\n", head_end, start) == 0  # one line, both
    assert out.omitted_lines == len(lines) - first - last + (1 if cut_across else 0)


@pytest.mark.parametrize(
    "lines",
    [
        ["S" + "H" * 70000 + "ENDOFLONG", "DONE"],  # its start in the head, its end in the tail
        ["first", "H" * 70000 + "ENDOFLONG", "DONE"],  # its end in the tail only
        ["first", "é" * 40000 + "ENDOFLONG", "x" * 100, "DONE"],  # cut at a character
    ],
)
def test_budget_a_long_line_before_the_last_shows_its_end(lines: list[str]) -> None:
    """A line larger than the room left in the tail, not the last one: the tail holds
    its end, as much as fits (it showed only the lines after it: probe N finding 4)."""
    for live in range(3):
        budget = OutputBudget()
        for line in lines[: len(lines) - live]:
            budget.add(line)
        out = budget.render(lines[len(lines) - live :])
        head_text, marker, tail_text = _split(out.text, out.omitted_bytes, out.omitted_lines)
        whole = "".join(line + "\n" for line in lines).encode()
        assert (
            head_text.startswith(lines[0][:5])
            and marker
            and "ENDOFLONG\n" in tail_text
            and tail_text.endswith("\nDONE\n")
        )
        assert whole.endswith(tail_text.encode())
        assert 48 * 1024 - 4 < len(tail_text.encode()) <= 48 * 1024
        assert out.omitted_lines == 0  # (the long line is shown in part)


def test_budget_one_long_line_keeps_its_end() -> None:
    """A line larger than head and tail together: its start, the marker, its end (the
    end was dropped: "[... 83624 bytes in 0 lines omitted ...]" and no tail)."""
    line = "x" * 100_000 + "THE_END"
    for live in (False, True):
        budget = OutputBudget()
        if not live:
            budget.add(line)
        out = budget.render([line] if live else [])
        head_text, marker, tail_text = _split(out.text, out.omitted_bytes, out.omitted_lines)
        assert head_text == "x" * 16 * 1024 + "\n"
        assert marker == "[... 34472 bytes omitted from a line shown in part ...]\n"
        assert tail_text == line[-(48 * 1024 - 1) :] + "\n"
        assert (out.omitted_lines, out.total_lines) == (0, 1)


def _split(text: str, omitted_bytes: int, omitted_lines: int) -> tuple[str, str, str]:
    marker = omission_marker(omitted_bytes, omitted_lines) + "\n"
    head, found, tail = text.partition(marker)
    return head, found, tail


def test_budget_keeps_whole_output_up_to_its_bound() -> None:
    budget = OutputBudget(10, 10)
    line = "x" * 99  # 100 bytes with its newline
    count = RETAINED_OUTPUT_BYTES // 100 + 50
    for _ in range(count):
        budget.add(line)
    assert budget.dropped_lines == 50 and budget.dropped_bytes == 5000
    kept = len(budget.retained_text().encode())
    assert RETAINED_OUTPUT_BYTES - 100 < kept <= RETAINED_OUTPUT_BYTES
    out = budget.render()
    assert out.truncated and out.total_lines == count
    # The head is a cut line; the tail is a cut line; everything between is counted.
    assert out.omitted_bytes == count * 100 - 10 - 10
    assert out.omitted_lines == count - 2


# -- the fallback's markers ----------------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=60), st.integers(0, 255), st.data())
def test_markers_any_split(body: str, code: int, data: st.DataObject) -> None:
    body = body.replace("__AHP", "")
    token = "0123456789abcdef"
    stream = (
        f"$ printf ... __AHP_%s_{token}__ echo\r\n__AHP_BEGIN_{token}__\r\n"
        f"{body}\r\n__AHP_END_{token}_{code}__\r\n$ "
    )
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=6)))
    markers = Markers(token)
    out = "".join(
        markers.feed(stream[a:b]) for a, b in zip([0, *cuts], [*cuts, len(stream)], strict=True)
    )
    assert markers.done and markers.exit_code == code
    assert out == body


# -- /proc ---------------------------------------------------------------------------------------


def test_command_line_is_bounded() -> None:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; print('ready', flush=True); sys.stdin.read()",
            "x" * (2 * procfs.MAX_CMDLINE),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
        line = procfs.command_line(proc.pid)
        assert line.startswith(sys.executable) and len(line) <= procfs.MAX_CMDLINE
        info = procfs.process_info(proc.pid)
        assert info is not None and info.pid == proc.pid
        assert not procfs.reads_tty(info)  # it reads a pipe, not a terminal
    finally:
        proc.communicate(b"")
    assert procfs.process_info(proc.pid) is None


def test_budget_finished_lines_from_an_index() -> None:
    budget = OutputBudget(10, 10, retain_bytes=30)
    for i in range(10):
        budget.add(f"line{i}")  # 6 bytes each: 5 retained
    assert budget.dropped_lines == 5
    assert budget.finished_lines(8) == ["line8", "line9"]
    assert budget.finished_lines(0) == [f"line{i}" for i in range(5, 10)]  # the rest dropped
    assert budget.finished_lines(10) == []


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.text(st.characters(codec="utf-8", exclude_characters="\n"), max_size=12),
            st.text(st.sampled_from("ab\n€"), max_size=5),  # (a line holding "\n" too)
        ),
        max_size=120,
    ),
    st.integers(0, 400),
    st.data(),
)
def test_packed_retained_lines_behave_as_unpacked(
    lines: list[str], retain: int, data: st.DataObject
) -> None:
    """The retained lines packed a few to a string (to cost their text, not ~120 bytes
    of objects each) give every answer the unpacked lines gave, as lines are added
    and the oldest dropped, at every step."""
    head, tail = data.draw(st.integers(0, retain)), data.draw(st.integers(0, retain))
    packed = OutputBudget(head, tail, retain_bytes=retain)
    packed._retained = _Retained(pack_lines=data.draw(st.integers(1, 5)), pack_bytes=16)
    plain = OutputBudget(head, tail, retain_bytes=retain)
    plain._retained = _Retained(pack_lines=10**9, pack_bytes=10**9)
    for i, line in enumerate(lines):
        packed.add(line)
        plain.add(line)
        assert (packed.dropped_lines, packed.dropped_bytes) == (
            plain.dropped_lines,
            plain.dropped_bytes,
        )
        start = data.draw(st.integers(0, i + 1))
        assert packed.finished_lines(start) == plain.finished_lines(start)
        live = lines[i + 1 : i + 1 + data.draw(st.integers(0, 2))]
        assert packed.render(live) == plain.render(live)
        assert packed.retained_text(live) == plain.retained_text(live)


def test_retained_short_lines_cost_about_their_text() -> None:
    # 8 MiB of 7-byte lines (what `seq` prints) held ~140 MB as one object per line.
    retain = 1024 * 1024
    budget = OutputBudget(retain_bytes=retain)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for i in range(1_000_000, 1_150_000):
            budget.add(str(i))  # 8 bytes each with the newline: 1.2 MB, 1 MiB kept
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert budget.dropped_lines > 0
    assert held < 2 * retain, held  # (one object per line: ~16 MiB)


def test_group_makes_one_command_of_several_lines() -> None:
    assert group("echo a") == "echo a"
    assert group("echo a\n") == "echo a"
    assert group("cat <<EOF\nx\nEOF\nwc -l\n") == "{ cat <<EOF\nx\nEOF\nwc -l\n}"
    assert group("echo a\necho b", fish=True) == "begin\necho a\necho b\nend"
