"""asciicast v3 encoding and decoding, playback timing, the rotated line sink (pure or
file-only parts; the recorder over real ptys is in tests/test_record.py)."""

from __future__ import annotations

import io
import os
import re
from pathlib import Path

import orjson
import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from ahp.record import asciicast
from ahp.record.asciicast import Event, Header, RecordingError
from ahp.record.play import MAX_PAUSE, play, read_lines, schedule
from ahp.record.recorder import recording_name
from ahp.record.sink import LineSink, Rotation
from ahp.record.wirelog import MAX_LINE_BYTES, format_entry

# -- the format ---------------------------------------------------------------------------------


def test_header_round_trip_and_shape() -> None:
    header = Header(
        cols=100,
        rows=30,
        term_type="xterm-256color",
        timestamp=1_700_000_000,
        title="build",
        env={"TERM": "xterm-256color"},
        idle_time_limit=2.5,
        extra={"x-ahp-terminal": "ahp-terminal:/t1"},
    )
    line = asciicast.encode_header(header)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    value = orjson.loads(line)
    assert next(iter(value)) == "version" and value["version"] == 3
    assert value["term"] == {"cols": 100, "rows": 30, "type": "xterm-256color"}
    assert asciicast.decode_header(line) == header


def test_the_documented_example_decodes() -> None:
    # The example of https://docs.asciinema.org/manual/asciicast/v3 (comments included).
    text = (
        '{"version": 3, "term": {"cols": 80, "rows": 24, "type": "xterm-256color"}, '
        '"timestamp": 1504467315, "title": "Demo", "env": {"SHELL": "/bin/zsh"}}\n'
        "# event stream follows the header\n"
        '[0.248, "o", "\\u001b[1;31mHello \\u001b[32mWorld!\\u001b[0m\\n"]\n'
        '[1.001, "o", "That was ok\\rThis is better."]\n'
        '[3.500, "m", ""]\n'
        '[0.143, "o", "Now... "]\n'
        "# terminal window resized to 90 cols and 30 rows\n"
        '[2.050, "r", "90x30"]\n'
        '[1.541, "o", "Bye!"]\n'
        '[0.887, "x", "0"]\n'
    )
    header, events = asciicast.decode(text.splitlines())
    assert (header.cols, header.rows, header.title) == (80, 24, "Demo")
    assert [e.code for e in events] == ["o", "o", "m", "o", "r", "o", "x"]


@given(
    st.lists(
        st.tuples(
            st.floats(min_value=0, max_value=1e6, allow_nan=False),
            st.sampled_from(["o", "i", "m", "x"]),
            st.text(),
        ),
        max_size=30,
    )
)
@settings(max_examples=200, deadline=None)
def test_events_round_trip(events: list[tuple[float, str, str]]) -> None:
    lines = [asciicast.encode_header(Header(cols=80, rows=24))]
    lines += [asciicast.encode_event(*e) for e in events]
    _, decoded = asciicast.decode(lines)
    out = list(decoded)
    assert len(out) == len(events)
    for got, (interval, code, data) in zip(out, events, strict=True):
        assert got.code == code
        assert abs(got.interval - interval) <= 1e-6 * max(1.0, interval)
        # Lone surrogates cannot be UTF-8: they are written as U+FFFD.
        assert got.data == data.encode("utf-8", "replace").decode("utf-8")


def test_negative_intervals_are_written_as_zero() -> None:
    assert asciicast.decode_event(asciicast.encode_event(-1.0, "o", "x")).interval == 0.0


@pytest.mark.parametrize(
    ("line", "why"),
    [
        ("not json", "not JSON"),
        ('{"a": 1}', "3-element"),
        ("[1, 2]", "3-element"),
        ('[-1, "o", "x"]', "interval"),
        ('[true, "o", "x"]', "interval"),
        ('[1, "", "x"]', "code"),
        ('[1, "o", 3]', "data"),
        ('[1, "r", "80 by 24"]', "COLSxROWS"),
    ],
)
def test_bad_events_are_named(line: str, why: str) -> None:
    header = asciicast.encode_header(Header(cols=80, rows=24)).decode()
    _, events = asciicast.decode([header, '[0.5, "o", "fine"]', line])
    assert next(events).data == "fine"  # what precedes a bad line is not lost
    with pytest.raises(RecordingError, match=why) as caught:
        next(events)
    assert "line 3" in str(caught.value)


@pytest.mark.parametrize(
    ("header", "why"),
    [
        ("", "empty recording"),
        ('{"version": 2, "width": 80, "height": 24}', "not asciicast v3"),
        ('{"version": 3}', "no 'term'"),
        ('{"version": 3, "term": {"cols": 0, "rows": 24}}', "positive integers"),
        ('{"version": 3, "term": {"cols": 80, "rows": 24}, "env": {"A": 1}}', "env"),
        ("[1, 2, 3]", "JSON object"),
    ],
)
def test_bad_headers_are_named(header: str, why: str) -> None:
    with pytest.raises(RecordingError, match=why):
        asciicast.decode([header] if header else [])


def test_unknown_event_codes_are_kept() -> None:
    header = asciicast.encode_header(Header(cols=80, rows=24))
    _, events = asciicast.decode([header, b'[0.1, "z", "future"]'])
    assert list(events) == [Event(0.1, "z", "future")]


@given(st.text(), st.one_of(st.none(), st.integers(-300, 300)))
def test_command_markers_parse_back(line: str, code: int | None) -> None:
    assert asciicast.parse_command_marker(asciicast.command_started(line)) == ("start", line, None)
    assert asciicast.parse_command_marker(asciicast.command_finished(line, code)) == (
        "end",
        line,
        code,
    )


def test_other_markers_are_not_commands() -> None:
    for label in (asciicast.SKIPPED_MARKER, asciicast.size_bound_marker(10), "", "exit"):
        assert asciicast.parse_command_marker(label) is None


# -- playback -----------------------------------------------------------------------------------


def test_schedule_caps_idle_time_and_applies_speed() -> None:
    events = [Event(0.5, "o", "a"), Event(10.0, "o", "b"), Event(0.0, "x", "0")]
    assert [d for d, _ in schedule(events, speed=2.0, idle_time_limit=1.0)] == [0.25, 0.5, 0.0]
    with pytest.raises(ValueError, match="speed"):
        list(schedule(events, speed=0))


def test_play_writes_output_sleeps_and_stops_at_exit() -> None:
    header = asciicast.encode_header(Header(cols=80, rows=24, idle_time_limit=2.0))
    lines = [
        header,
        asciicast.encode_event(1.0, "o", "hello "),
        asciicast.encode_event(0.0, "i", "typed"),
        asciicast.encode_event(30.0, "m", "$ ls"),
        asciicast.encode_event(0.5, "r", "100x40"),
        asciicast.encode_event(0.25, "o", "wörld\r\n"),
        asciicast.encode_event(0.0, "x", "7"),
        asciicast.encode_event(5.0, "o", "after the exit"),
    ]
    out, markers = io.BytesIO(), io.StringIO()
    slept: list[float] = []
    status = play(lines, out, speed=1.0, markers=markers, sleep=slept.append)
    assert status == "7"
    assert out.getvalue() == "hello wörld\r\n".encode()
    assert markers.getvalue() == "[$ ls]\n"
    assert slept == [1.0, 2.0, 0.5, 0.25]  # the 30 s pause capped by the header's limit


def test_read_lines_bounds_every_line_and_names_a_longer_one() -> None:
    lines = [b"x" * 15 + b"\n", b"no newline at the end"[:16]]
    assert list(read_lines(io.BytesIO(b"".join(lines)), limit=16)) == lines
    f = io.BytesIO(b"ok\n" + b"y" * 16 + b"\n" + b"never read\n")
    taken = read_lines(f, limit=16)
    assert next(taken) == b"ok\n"
    with pytest.raises(RecordingError, match=r"^line 2: longer than 16 bytes"):
        next(taken)
    assert f.tell() <= 3 + 17  # no more of the file than the bound was read
    with open("/dev/zero", "rb") as zero:  # endless, no newline: stops at the bound
        with pytest.raises(RecordingError, match=r"^line 1: longer than 4096 bytes"):
            list(read_lines(zero, limit=4096))
        assert zero.tell() <= 2 * 4096


def test_play_stops_at_an_absurd_pause_and_names_its_line() -> None:
    header = asciicast.encode_header(Header(cols=80, rows=24))
    lines = [header, b"# a comment\n", b'[0.1,"o","a"]\n', b'[1e20,"o","b"]\n']
    out, slept = io.BytesIO(), list[float]()
    with pytest.raises(RecordingError, match=r"^line 4: a pause of 1e\+20 seconds"):
        play(lines, out, sleep=slept.append)
    assert (out.getvalue(), slept) == (b"a", [0.1])  # played up to it, never slept it
    # A speed that makes an ordinary pause absurd; the same pause capped is played.
    with pytest.raises(RecordingError, match=r"^line 3: a pause of 1e\+299 seconds at speed"):
        play(lines[:3], io.BytesIO(), speed=1e-300, sleep=slept.append)
    assert play(lines, io.BytesIO(), idle_time_limit=MAX_PAUSE, sleep=slept.append) is None


def test_markers_are_printed_with_their_control_characters_shown() -> None:
    header = asciicast.encode_header(Header(cols=80, rows=24))
    label = "\x1b]52;c;aGVsbG8=\x07 and\r\nmore"  # would set the clipboard, forge a line
    lines = [header, asciicast.encode_event(0.0, "m", label)]
    markers = io.StringIO()
    play(lines, io.BytesIO(), markers=markers, sleep=lambda _: None)
    assert markers.getvalue() == "[\\x1b]52;c;aGVsbG8=\\x07 and\\x0d\\x0amore]\n"


# -- the wire log's lines -------------------------------------------------------------------------


def test_server_frames_are_spliced_verbatim() -> None:
    frame = b'{"jsonrpc":"2.0","id":3,"result":{"ok":true}}'
    line = format_entry(1.5, "s2c", "7", frame, "websocket")
    assert line.startswith(frame[:-1]) and line.endswith(b"}\n")
    value = orjson.loads(line)
    assert value["result"] == {"ok": True}
    assert value["_ahpLog"] == {
        "ts": "1970-01-01T00:00:01.500Z",
        "dir": "s2c",
        "connectionId": "7",
        "transport": "websocket",
        "byteLength": len(frame),
    }


def test_client_credentials_are_redacted_at_any_depth() -> None:
    frame = orjson.dumps(
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "authenticate",
            "params": {"token": "s3cret", "nested": [{"Authorization": "Bearer x"}], "keep": 1},
        }
    )
    value = orjson.loads(format_entry(0, "c2s", "1", frame.decode(), "websocket"))
    assert value["params"] == {
        "token": "<redacted>",
        "nested": [{"Authorization": "<redacted>"}],
        "keep": 1,
    }
    assert b"s3cret" not in orjson.dumps(value)


def test_non_json_and_oversized_frames_stay_one_json_line() -> None:
    raw = orjson.loads(format_entry(0, "c2s", "1", "{not json", "websocket"))
    assert raw["_raw"] == "{not json" and raw["_ahpLog"]["dir"] == "c2s"
    huge = orjson.dumps({"jsonrpc": "2.0", "id": 1, "result": {"data": "x" * MAX_LINE_BYTES}})
    line = format_entry(0, "s2c", "1", huge, "websocket")
    assert line.count(b"\n") == 1 and len(line) < MAX_LINE_BYTES // 2
    value = orjson.loads(line)
    assert value["_ahpLog"]["truncated"] is True
    assert value["_ahpLog"]["byteLength"] == len(huge)
    assert "chars elided" in value["result"]["data"]


# -- the line sink ------------------------------------------------------------------------------


def _lines(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines() if path.exists() else []


async def test_sink_drops_past_its_bound_and_says_how_many(tmp_path: Path) -> None:
    sink: LineSink[bytes] = LineSink(
        Rotation(tmp_path / "log", scheme="numbered", max_files=2),
        max_file_bytes=1 << 20,
        format_item=lambda b: b + b"\n",
        dropped_line=lambda n: b"dropped %d\n" % n,
        size=len,
        max_lines=10,
    )
    # Queued before the writer runs: the bound holds at 10, the rest is counted.
    for n in range(25):
        sink.put(b"line %d" % n)
    assert len(sink) == 10 and sink.dropped == 15
    async with trio.open_nursery() as nursery:
        await nursery.start(sink.run)
        with trio.fail_after(10):
            await sink.wait_written()
        nursery.cancel_scope.cancel()
    lines = _lines(tmp_path / "log")
    assert lines[0] == b"dropped 15"
    assert lines[1:] == [b"line %d" % n for n in range(10)]


async def test_sink_bytes_bound_and_redaction(tmp_path: Path) -> None:
    sink: LineSink[bytes] = LineSink(
        Rotation(tmp_path / "log", scheme="numbered", max_files=1),
        max_file_bytes=1 << 20,
        format_item=lambda b: b + b"\n",
        dropped_line=lambda n: b"dropped %d\n" % n,
        size=len,
        redact=("hunter2",),
        max_bytes=100,
    )
    assert sink.put(b"a" * 60)
    assert not sink.put(b"b" * 60)  # 120 > 100 bytes
    assert sink.put(b"my password is hunter2!")
    async with trio.open_nursery() as nursery:
        await nursery.start(sink.run)
        nursery.cancel_scope.cancel()  # the writer flushes what is queued on its way out
    assert _lines(tmp_path / "log") == [
        b"dropped 1",
        b"a" * 60,
        b"my password is <redacted>!",
    ]


@pytest.mark.parametrize("scheme", ["numbered", "segments"])
async def test_sink_rotates_and_keeps_a_bounded_history(tmp_path: Path, scheme: str) -> None:
    fds = len(os.listdir("/proc/self/fd"))
    path = tmp_path / "ahp-x.jsonl"
    rotation = Rotation(path, scheme=scheme, max_files=3)  # type: ignore[arg-type]
    sink: LineSink[int] = LineSink(
        rotation,
        max_file_bytes=100,
        format_item=lambda n: b"%09d\n" % n,  # 10 bytes a line: 10 lines a file
        dropped_line=lambda n: b"dropped\n",
        size=lambda _: 10,
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(sink.run)
        for n in range(95):
            sink.put(n)
            if n % 7 == 0:
                await trio.lowlevel.checkpoint()
        with trio.fail_after(10):
            await sink.wait_written()
        nursery.cancel_scope.cancel()
    assert len(os.listdir("/proc/self/fd")) <= fds  # every file closed
    files = sorted(os.listdir(tmp_path))
    assert len(files) == 3  # the bound on files
    assert all((tmp_path / f).stat().st_size <= 100 for f in files)
    if scheme == "numbered":
        assert files == ["ahp-x.jsonl", "ahp-x.jsonl.1", "ahp-x.jsonl.2"]
        ordered = [path.with_name(f"ahp-x.jsonl.{n}") for n in (2, 1)] + [path]
    else:
        assert files == ["ahp-x.7.jsonl", "ahp-x.8.jsonl", "ahp-x.9.jsonl"]
        ordered = [path.with_name(f"ahp-x.{n}.jsonl") for n in (7, 8, 9)]
    kept = [int(line) for p in ordered for line in _lines(p)]
    assert kept == list(range(70, 95))  # the newest lines, in order, none lost in between


@given(st.text(), st.floats(min_value=0, max_value=4e9))
@settings(deadline=None)
def test_recording_names_are_safe_and_stable(uri: str, started: float) -> None:
    name = recording_name(f"ahp-terminal:/{uri}", started)
    assert name == recording_name(f"ahp-terminal:/{uri}", started)  # stable
    assert re.fullmatch(r"\d{8}T\d{6}Z-[A-Za-z0-9._-]+\.cast", name), name
    assert ".." not in name and "/" not in name and len(name.encode()) <= 140
