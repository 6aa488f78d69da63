"""Recording terminals as asciicast v3 over real ptys and real bash: the file's
validity, its output, markers and exit; input only when asked; a stalled disk
(a FIFO nobody reads); the size bound; cancellation; ``serve --record`` through a
real server and client; ``ahp-terminals play`` in a subprocess."""

from __future__ import annotations

import itertools
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ahp
from ahp.protocol.actions import (
    ActionEnvelope,
    TerminalCommandExecuted,
    TerminalCommandFinished,
)
from ahp.record import RecordOptions, record_host, record_terminal
from ahp.record.asciicast import (
    CAUGHT_UP_PREFIX,
    MAX_LINE_BYTES,
    SKIPPED_MARKER,
    Event,
    Header,
    decode,
    decode_event,
    encode_event,
    encode_header,
    parse_command_marker,
    size_bound_marker,
)
from ahp.record.recorder import (
    DISPOSED_MARKER,
    MAX_OPEN_COMMANDS,
    RECORD_CATCH_UP_CHARS,
    RECORD_EVENT_CHARS,
    STOPPED_MARKER,
    Recorder,
    recording_name,
)
from ahp.server import ServeOptions
from tests.helpers import TIMEOUT, open_fds, wait_for_state, wait_for_text
from tests.wire import TOKEN, peer, running_server

REPO = Path(__file__).resolve().parents[1]


def read_cast(path: Path) -> tuple[Header, list[Event]]:
    """Every line parsed (a bad one raises)."""
    header, events = decode(path.read_bytes().splitlines())
    return header, list(events)


def output_of(events: list[Event]) -> str:
    return "".join(e.data for e in events if e.code == "o")


def command_markers(events: list[Event]) -> list[tuple[str, str, int | None]]:
    return [m for e in events if e.code == "m" and (m := parse_command_marker(e.data))]


async def test_a_recording_is_valid_asciicast_v3_with_commands_and_exit(tmp_path: Path) -> None:
    async with (
        ahp.open_host(shell="/bin/bash") as host,
        record_host(host, tmp_path) as recorders,
    ):
        started = time.time()
        term = await host.create_terminal(cols=100, rows=30)
        recorder = recorders[term.uri]
        assert (await term.run("echo hello")).exit_code == 0
        assert (await term.run("false")).exit_code == 1
        assert (await term.run("(exit 7)")).exit_code == 7
        await term.resize(120, 40)
        await term.send_input("exit 3\n")
        with trio.fail_after(TIMEOUT):
            assert await term.wait_exited() == 3
        expected = term.state.text()
        await host.dispose(term.uri)
        with trio.fail_after(TIMEOUT):
            await recorder.done.wait()
        assert term.uri not in recorders  # a finished recorder leaves the table
    assert re.fullmatch(r"\d{8}T\d{6}Z-t1\.cast", recorder.path.name)
    assert oct(recorder.path.stat().st_mode & 0o777) == "0o600"
    header, events = read_cast(recorder.path)
    assert (header.cols, header.rows, header.term_type) == (100, 30, "xterm-256color")
    assert header.env == {"TERM": "xterm-256color"}
    assert header.timestamp is not None and abs(header.timestamp - started) < 60
    assert header.extra == {"x-ahp-terminal": term.uri}
    assert output_of(events) == expected  # every byte of output, in order
    assert command_markers(events) == [
        ("start", "echo hello", None),
        ("end", "echo hello", 0),
        ("start", "false", None),
        ("end", "false", 1),
        ("start", "(exit 7)", None),
        ("end", "(exit 7)", 7),
        ("start", "exit 3", None),  # (the shell exited in it: the exit event says how)
    ]
    assert [e.data for e in events if e.code == "r"] == ["120x40"]
    assert not [e for e in events if e.code == "i"]  # input only with record_input
    assert events[-1] == Event(events[-1].interval, "x", "3")
    assert recorder.lost_bytes == 0 and recorder.resyncs == 0


async def test_input_is_recorded_only_when_asked_and_late_start_keeps_the_screen(
    tmp_path: Path,
) -> None:
    path = tmp_path / "late.cast"
    async with ahp.open_host(shell="/bin/bash") as host, trio.open_nursery() as nursery:
        term = await host.create_terminal()
        await term.run("echo before-recording")
        fds = open_fds()
        recorder = await nursery.start(
            record_terminal, term, path, RecordOptions(record_input=True)
        )
        await term.send_input("echo typed-123\n")
        await wait_for_text(term, "typed-123\r\n")
        await host.dispose(term.uri)
        expected = term.state.text()  # (bash's next prompt may come before the disposal)
        with trio.fail_after(TIMEOUT):
            await recorder.done.wait()
        assert open_fds() <= fds  # the file is closed
    _, events = read_cast(path)
    assert events[0].code == "o" and "before-recording" in events[0].data
    assert output_of(events) == expected
    assert events[-1] == Event(events[-1].interval, "m", DISPOSED_MARKER)
    assert [e.data for e in events if e.code == "i"] == ["echo typed-123\n"]


async def drain(fd: int, into: bytearray) -> None:
    """Read a stalled FIFO's reader end ``fd`` (owned: closed at the end) into ``into``."""
    stream = trio.lowlevel.FdStream(fd)
    async with stream:
        while chunk := await stream.receive_some(1 << 16):
            into.extend(chunk)


async def test_a_stalled_disk_neither_stalls_the_pty_nor_grows_memory(tmp_path: Path) -> None:
    """A FIFO that is open for reading but never read: the recorder's writes block at
    once (the pipe holds 64 KiB). The terminal prints 8 MB meanwhile and finishes; the
    recorder holds at most its bounds; once the FIFO is read again the recording goes
    on, saying output was skipped."""
    fifo = tmp_path / "stalled.cast"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # a reader that never reads
    # (The outbox must hold the largest envelope of output, a parse batch of up to about
    # a megabyte, or every such envelope alone would overflow it.)
    options = RecordOptions(buffer_bytes=64 * 1024, outbox_bytes=2 * 1024 * 1024)
    received = bytearray()
    async with ahp.open_host(shell="/bin/bash") as host, trio.open_nursery() as nursery:
        term = await host.create_terminal()
        recorder = await nursery.start(record_terminal, term, fifo, options)
        result = await term.run(
            "head -c 8000000 /dev/zero | tr '\\0' a; echo; echo done-$((6*7))", timeout=TIMEOUT * 3
        )
        assert result.exit_code == 0 and "done-42" in result.output
        # The recorder fell behind and was never waited for: bounded memory.
        assert recorder.written_bytes <= 128 * 1024  # the pipe took what it holds, no more
        one_line = 2 * 1024 * 1024  # one output event (a parse batch, 'a's: no escaping)
        assert recorder.peak_buffered <= options.buffer_bytes + one_line
        assert recorder.subscription.outbox.max_bytes == options.outbox_bytes
        assert recorder.subscription.outbox.overflowed  # it fell behind: a resync follows
        nursery.start_soon(drain, reader, received)
        # The recorder resyncs once it can write again (a marker: what the snapshot holds
        # was skipped); output after that is recorded. On a loaded machine the resync
        # can come late, after the next command's output: wait for it first.
        with trio.fail_after(TIMEOUT):
            while recorder.resyncs < 1:  # noqa: ASYNC110 (a counter, not an event)
                await trio.sleep(0.02)
        await term.run("echo after-the-stall")
        await host.dispose(term.uri)
        with trio.fail_after(TIMEOUT):
            await recorder.done.wait()
    header, events = decode(bytes(received).splitlines())
    events_list = list(events)  # every line parses
    assert header.cols == 80
    assert recorder.resyncs >= 1
    skipped = [e.data for e in events_list if e.code == "m" and e.data.startswith(SKIPPED_MARKER)]
    assert skipped, events_list[-5:]  # 8 MB: more than the scrollback and the catch-up hold
    assert recorder.lost_chars > 0 and recorder.caught_up_chars >= RECORD_CATCH_UP_CHARS
    assert "after-the-stall" in output_of(events_list)


async def test_a_stall_the_scrollback_covers_loses_nothing(tmp_path: Path) -> None:
    """A shorter stall: the recorder falls behind and resyncs, and what it missed is
    still in the terminal's scrollback. It is written at once behind a marker, and
    the recording's output is exactly what the terminal printed."""
    fifo = tmp_path / "stalled.cast"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    options = RecordOptions(buffer_bytes=16 * 1024, outbox_bytes=64 * 1024)
    received = bytearray()
    async with ahp.open_host(shell="/bin/bash") as host, trio.open_nursery() as nursery:
        term = await host.create_terminal()
        recorder = await nursery.start(record_terminal, term, fifo, options)
        # 40 000 distinct short lines (~230 KB): past the bounds and the FIFO, within the scrollback
        # and the catch-up bound.
        result = await term.run("seq 1 40000; echo done-$((6*7))", timeout=TIMEOUT * 3)
        assert result.exit_code == 0 and "done-42" in result.output
        nursery.start_soon(drain, reader, received)
        await term.run("echo after-the-stall")
        with trio.fail_after(TIMEOUT):
            while recorder.resyncs < 1:  # noqa: ASYNC110 (a counter, not an event)
                await trio.sleep(0.02)
        await host.dispose(term.uri)
        # (Read once nothing more can be applied: bash's next prompt may still come
        # between the run's end and the disposal, and the recording has it too.)
        printed = term.state.text()
        with trio.fail_after(TIMEOUT):
            await recorder.done.wait()
    _, events = decode(bytes(received).splitlines())
    events_list = list(events)
    caught = [e.data for e in events_list if e.code == "m" and e.data.startswith(CAUGHT_UP_PREFIX)]
    assert caught and recorder.lost_chars == 0 and recorder.caught_up_chars > 0, caught
    assert output_of(events_list) == printed


async def test_the_size_bound_stops_the_recording_and_says_so(tmp_path: Path) -> None:
    path = tmp_path / "bounded.cast"
    bound = 4096
    async with ahp.open_host(shell="/bin/bash") as host, trio.open_nursery() as nursery:
        term = await host.create_terminal()
        recorder = await nursery.start(record_terminal, term, path, RecordOptions(max_bytes=bound))
        assert (await term.run("seq 1 5000")).exit_code == 0  # ~24 KB of output
        with trio.fail_after(TIMEOUT):
            await recorder.done.wait()  # it stopped by itself
        assert recorder.stopped_at_bound
        assert (await term.run("echo still-alive")).output == "still-alive\n"
    assert bound - 64 < path.stat().st_size <= bound  # full: the output that fits is there
    _, events = read_cast(path)
    assert events[-1].code == "m" and events[-1].data == size_bound_marker(bound)
    assert "1\r\n2\r\n3\r\n" in output_of(events)


async def test_cancelling_a_recorder_ends_its_file_with_a_marker(tmp_path: Path) -> None:
    path = tmp_path / "cancelled.cast"
    async with ahp.open_host(shell="/bin/bash") as host:
        term = await host.create_terminal()
        fds = open_fds()
        async with trio.open_nursery() as nursery:
            recorder = await nursery.start(record_terminal, term, path)
            await term.run("echo recorded")
            nursery.cancel_scope.cancel()
        assert recorder.done.is_set() and open_fds() <= fds
        assert not term.closed.is_set()  # the terminal lives on
    _, events = read_cast(path)
    assert "recorded" in output_of(events)
    assert events[-1].code == "m" and events[-1].data == STOPPED_MARKER


async def test_serve_record_writes_one_file_per_terminal_and_play_replays_it(
    tmp_path: Path,
) -> None:
    options = ServeOptions(port=0, token=TOKEN, record_dir=str(tmp_path / "casts"))
    async with running_server(options, shell="/bin/bash") as server, peer(server.url) as p:
        await p.initialize("c1")
        for uri in ("ahp-terminal:/build", "ahp-terminal:/a b/../c", "ahp-terminal:/a-b-..-c"):
            params = {"channel": uri, "claim": {"kind": "client", "clientId": "c1"}}
            assert await p.result("createTerminal", params) is None
        host = server.state.host
        build = host.get("ahp-terminal:/build")
        recorder = server.state.recorders["ahp-terminal:/build"]
        await build.send_input("printf 'played %s\\n' back\n")
        # Until bash drew its next prompt too: it is in the recording, so it must be in
        # what is compared (under load it came after "played back" was first seen).
        state = await wait_for_state(
            build, lambda s: "played back" in s.text() and s.text().endswith("$ ")
        )
        expected = state.text()
        assert await p.result("disposeTerminal", {"channel": "ahp-terminal:/build"}) is None
        files = sorted(os.listdir(tmp_path / "casts"))
        assert len(files) == 3  # (the last two sanitise alike: "-2" for the second)
        assert all(re.fullmatch(r"\d{8}T\d{6}Z-[A-Za-z0-9._-]+\.cast", f) for f in files)
        with trio.fail_after(TIMEOUT):
            await recorder.done.wait()  # it ends with its terminal's channel
    build_file = tmp_path / "casts" / next(f for f in files if f.endswith("-build.cast"))
    assert recorder.path == build_file
    _, events = read_cast(build_file)
    assert output_of(events) == expected
    # Played back in a subprocess, fast: exactly the output, nothing else.
    with trio.fail_after(TIMEOUT):
        done = await trio.run_process(
            [sys.executable, "-m", "ahp", "play", str(build_file), "--speed", "1000"],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )
    assert done.returncode == 0, done.stderr
    assert done.stdout.decode() == expected


async def test_play_cli_speed_idle_limit_and_errors(tmp_path: Path) -> None:
    path = tmp_path / "slow.cast"
    lines = [
        encode_header(Header(cols=80, rows=24)),
        encode_event(0.1, "o", "one "),
        encode_event(3600.0, "o", "two\r\n"),  # an hour of idle time, capped below
        encode_event(0.1, "x", "0"),
    ]
    path.write_bytes(b"".join(lines))
    env = {**os.environ, "PYTHONPATH": str(REPO)}

    bad = tmp_path / "bad.cast"
    bad.write_bytes(lines[0] + lines[1] + b"[1, 2]\n")
    runs = {
        "capped": (str(path), "--speed", "10", "--idle-time-limit", "0.5"),
        "bad line": (str(bad), "--speed", "1000"),
        "missing": (str(tmp_path / "missing.cast"),),
        "bad speed": (str(path), "--speed", "0"),
    }
    done: dict[str, subprocess.CompletedProcess[bytes]] = {}

    async def play(name: str, args: tuple[str, ...]) -> None:
        with trio.fail_after(TIMEOUT):
            done[name] = await trio.run_process(
                [sys.executable, "-m", "ahp", "play", *args],
                capture_stdout=True,
                capture_stderr=True,
                check=False,
                env=env,
            )

    async with trio.open_nursery() as nursery:  # (at once: each is a Python start-up)
        for name, args in runs.items():
            nursery.start_soon(play, name, args)
    assert (done["capped"].returncode, done["capped"].stdout) == (0, b"one two\r\n")
    bad_line = done["bad line"]
    assert bad_line.returncode == 1 and bad_line.stdout == b"one "
    assert bad_line.stderr.decode().strip().endswith("line 3: an event is a 3-element array")
    assert done["missing"].returncode == 1 and b"cannot read" in done["missing"].stderr
    assert done["bad speed"].returncode == 2 and b"--speed" in done["bad speed"].stderr


async def test_play_cli_fails_in_one_line_on_endless_lines_absurd_pauses_and_no_stdout(
    tmp_path: Path,
) -> None:
    """``play`` of ``/dev/zero`` (endless, no newline) or of a file with one huge line
    read it all into memory (a MemoryError traceback under ``ulimit -v``, else the
    machine's memory); an interval of 1e20 s, or ``--speed 1e-300``, was passed to
    ``time.sleep`` (an OverflowError traceback); a closed standard output gave an
    AttributeError traceback; ``--markers`` printed a marker's escape sequences raw
    (OSC 52: the reader's clipboard). Now: one line naming the line, exit 1, and the
    markers' control characters shown as ``\\xNN``."""
    header = encode_header(Header(cols=80, rows=24))
    long_line = tmp_path / "long.cast"
    with long_line.open("wb") as f:
        f.write(header + encode_event(0.1, "o", "a"))
        for _ in range(48):  # 3 MiB, no newline
            f.write(b"b" * 65536)
    big = tmp_path / "big20.cast"
    big.write_bytes(header + b'[0.1,"o","a"]\n[1e20,"o","b"]\n')
    small = tmp_path / "small.cast"
    small.write_bytes(header + b'[0.5,"o","a"]\n')
    mark = tmp_path / "mark.cast"
    mark.write_bytes(header + b'[0.1,"o","a"]\n[0.1,"m","\\u001b]52;c;aGVsbG8=\\u0007"]\n')
    play = f"{sys.executable} -m ahp play"
    runs = {
        # (The bound on address space makes the old behaviour fail fast, not swap.)
        "zero": f"ulimit -v 1500000; exec {play} /dev/zero",
        "long line": f"exec {play} {long_line}",
        "big": f"exec {play} {big}",
        "tiny speed": f"exec {play} {small} --speed 1e-300",
        "no stdout": f"exec {play} {small} >&-",
        "full": f"exec {play} {small} > /dev/full",
        "markers": f"exec {play} {mark} --markers --speed 1000",
    }
    done: dict[str, subprocess.CompletedProcess[bytes]] = {}

    async def run(name: str, script: str) -> None:
        with trio.fail_after(TIMEOUT):
            done[name] = await trio.run_process(
                ["bash", "-c", script],
                capture_stdout=True,
                capture_stderr=True,
                check=False,
                env={**os.environ, "PYTHONPATH": str(REPO)},
            )

    async with trio.open_nursery() as nursery:
        for name, script in runs.items():
            nursery.start_soon(run, name, script)
    expected = {
        "zero": (b"", "/dev/zero: line 1: longer than 1048576 bytes (not an asciicast recording)"),
        "long line": (b"a", "long.cast: line 3: longer than 1048576 bytes"),
        "big": (b"a", "big20.cast: line 3: a pause of 1e+20 seconds, longer than 86400 s"),
        "tiny speed": (b"", "small.cast: line 2: a pause of 5e+299 seconds at speed 1e-300"),
        "no stdout": (b"", "ahp-terminals play: standard output is closed"),
        # (It said "cannot read small.cast: No space left on device": a write failed.)
        "full": (
            b"",
            "ahp-terminals play: cannot write to standard output: No space left on device",
        ),
    }
    for name, (stdout, message) in expected.items():
        result = done[name]
        lines = result.stderr.decode().splitlines()
        assert (result.returncode, result.stdout) == (1, stdout), (name, result.stderr)
        assert len(lines) == 1 and message in lines[0], (name, lines)
    markers = done["markers"]
    assert (markers.returncode, markers.stdout) == (0, b"a"), markers.stderr
    assert markers.stderr == b"[\\x1b]52;c;aGVsbG8=\\x07]\n"  # shown, not sent


async def test_play_into_a_pipe_closed_early_ends_quietly(tmp_path: Path) -> None:
    """``play FILE | head``: the reader leaving is not an error to report (it said
    "cannot read FILE: Broken pipe"); the status is a shell's for SIGPIPE."""
    path = tmp_path / "long.cast"
    events = [encode_event(0.0, "o", f"line {n}\r\n") for n in range(200_000)]
    path.write_bytes(encode_header(Header(cols=80, rows=24)) + b"".join(events))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    script = (
        f"set -o pipefail; {sys.executable} -m ahp play {path} --speed 1000 | head -c 6; "
        'echo " status ${PIPESTATUS[0]}"'
    )
    with trio.fail_after(TIMEOUT):
        done = await trio.run_process(
            ["bash", "-c", script], capture_stdout=True, capture_stderr=True, env=env
        )
    assert done.stdout == b"line 0 status 141\n"
    assert done.stderr == b""


async def test_started_commands_remembered_are_bounded(tmp_path: Path) -> None:
    async with ahp.open_host() as host:
        term = await host.create_terminal(argv=["cat"])
        recorder = Recorder(term, tmp_path / "x.cast", RecordOptions())
        try:
            seq = itertools.count(1)

            def envelope(action: Any) -> ActionEnvelope:
                return ActionEnvelope(channel=term.uri, action=action, serverSeq=next(seq))

            total = MAX_OPEN_COMMANDS + 50
            for n in range(total):  # started, never finished
                executed = TerminalCommandExecuted(
                    commandId=f"c{n}", commandLine=f"cmd {n}", timestamp=0
                )
                assert recorder._envelope(envelope(executed))
            assert len(recorder._commands) == MAX_OPEN_COMMANDS  # the bound holds
            newest, oldest = f"c{total - 1}", "c0"
            for command_id in (newest, oldest):
                recorder._envelope(
                    envelope(TerminalCommandFinished(commandId=command_id, exitCode=0))
                )
        finally:
            await recorder.subscription.aclose()
    labels = [parse_command_marker(line_data(line)) for line in recorder._buffer]
    ends = [m for m in labels if m and m[0] == "end"]
    assert ends == [("end", f"cmd {total - 1}", 0), ("end", "", 0)]  # the oldest forgotten


def line_data(line: bytes) -> str:
    value = decode_event(line)
    return value.data


async def test_record_host_never_follows_nor_truncates_what_is_at_a_recording_name(
    tmp_path: Path,
) -> None:
    """Recording names are predictable (the UTC second and the URI): whoever can write
    into the directory could place a dangling symlink there, and the recording was
    written through it, outside (``open(O_CREAT | O_TRUNC)`` follows links, and
    ``exists()`` is False for a dangling one); a file at the name would have been
    truncated had it appeared after the check. Now the file is created with
    ``O_EXCL | O_NOFOLLOW`` and a taken name means the next one."""
    casts, outside = tmp_path / "casts", tmp_path / "outside"
    casts.mkdir(mode=0o700)
    outside.mkdir()
    uri = "ahp-terminal:/victim"
    now = int(time.time())
    for second in range(now - 2, now + 6 * TIMEOUT):  # whichever second it starts in
        name = recording_name(uri, second)
        (casts / name).symlink_to(outside / f"{second}.cast")  # dangling
        (casts / name.replace(".cast", "-2.cast")).write_bytes(b"keep\n")
    async with (
        ahp.open_host(shell="/bin/bash") as host,
        record_host(host, casts) as recorders,
    ):
        term = await host.create_terminal(uri)
        recorder = recorders[uri]
        await term.run("echo recorded-here")
        await host.dispose(uri)
        with trio.fail_after(TIMEOUT):
            await recorder.done.wait()
    assert os.listdir(outside) == []  # nothing written through a link
    assert recorder.path.name.endswith("-victim-3.cast") and not recorder.path.is_symlink()
    assert "recorded-here" in output_of(read_cast(recorder.path)[1])
    kept = [p for p in casts.iterdir() if p.name.endswith("-2.cast")]
    assert kept and all(p.read_bytes() == b"keep\n" for p in kept)  # never truncated
    assert all(p.is_symlink() for p in casts.iterdir() if p.name.endswith("-victim.cast"))


async def test_an_unusable_record_directory_is_refused_at_start(tmp_path: Path) -> None:
    """``serve --record DIR`` with DIR a regular file (or a directory no file can be
    created in) started, and recorded nothing: each terminal only logged a warning.
    Now it exits 1 at start-up with one clear line, as ``--audit-log`` does."""
    afile = tmp_path / "afile"
    afile.write_bytes(b"")
    async with ahp.open_host() as host:
        for directory, error in ((afile, NotADirectoryError), (Path("/proc/1"), OSError)):
            with pytest.raises(error):
                async with record_host(host, directory):
                    pass  # pragma: no cover
    assert afile.read_bytes() == b""
    env = {**os.environ, "PYTHONPATH": str(REPO), "AHP_TOKEN": TOKEN}
    done = None
    with trio.move_on_after(TIMEOUT):  # (before the fix it served on, recording nothing)
        done = await trio.run_process(
            [sys.executable, "-m", "ahp", "serve", "--port", "0", "--record", str(afile)],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
            env=env,
        )
    assert done is not None, "the server started"
    assert done.returncode == 1
    assert done.stderr.decode().splitlines() == [
        f"ahp-terminals serve: cannot create the recordings directory {afile}: Not a directory"
    ]


async def test_long_output_and_input_are_split_into_lines_play_reads(tmp_path: Path) -> None:
    """An output envelope (a parse batch, a late start's whole scrollback) or input of any
    length was one line; ``play`` reads lines of at most MAX_LINE_BYTES. Now longer
    data is several events in a row (the same data concatenated), labels are cut."""
    async with ahp.open_host() as host:
        term = await host.create_terminal(argv=["cat"])
        recorder = Recorder(term, tmp_path / "x.cast", RecordOptions(record_input=True))
        try:
            recorder._header(term.state)
            escapes = "\x1b[1m" * 200_000  # 6 bytes a character in JSON: 6 MB of escapes
            assert recorder._event("o", escapes)
            assert recorder._event("i", "é" * 500_000)
            assert recorder._event("m", "$ " + "x" * 2_000_000)
        finally:
            await recorder.subscription.aclose()
    assert max(len(line) for line in recorder._buffer) <= MAX_LINE_BYTES
    _, events = decode(recorder._buffer)
    got = list(events)
    for code, data in (("o", escapes), ("i", "é" * 500_000)):
        split = [e for e in got if e.code == code]
        assert "".join(e.data for e in split) == data
        assert len(split) > 1 and {e.interval for e in split[1:]} == {0.0}  # in a row
    assert [len(e.data) for e in got if e.code == "m"] == [RECORD_EVENT_CHARS]


def test_the_size_bound_fills_the_file() -> None:
    """Output cut at the size bound filled about 3/4 of the room (the prefix tried was
    halved until it fitted, and 256 bytes were kept for a marker of ~70). Now the file
    holds all the output that fits: what is left unused is less than one event's
    overhead and one character, plus the slack of the last marker's interval."""

    @settings(
        max_examples=60,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        database=None,
    )
    @given(
        chunks=st.lists(st.text(min_size=1, max_size=3000), min_size=1, max_size=8),
        bound=st.integers(min_value=1024, max_value=12_000),
    )
    def check(chunks: list[str], bound: int) -> None:
        trio.run(_fill, chunks, bound)

    check()


async def _fill(chunks: list[str], bound: int) -> None:
    async with ahp.open_host() as host:
        term = await host.create_terminal(argv=["cat"])
        recorder = Recorder(term, "/nonexistent/x.cast", RecordOptions(max_bytes=bound))
        try:
            recorder._header(term.state)
            output = "".join(chunks) + "\x1b[0m€😀\n" * 2000  # enough to reach the bound
            for chunk in [*chunks, output[len("".join(chunks)) :]]:
                if not recorder._event("o", chunk):
                    break
        finally:
            await recorder.subscription.aclose()
    data = b"".join(recorder._buffer)
    assert recorder.stopped_at_bound and len(data) == recorder.size <= bound
    _, events = decode(data.splitlines())
    got = list(events)
    assert got[-1] == Event(got[-1].interval, "m", size_bound_marker(bound))
    assert output.startswith(output_of(got))  # the output as it was, cut between characters
    # (An empty output event's line, the longest character's JSON (6 bytes), and the last
    # marker's room kept for an interval of up to 16 characters.)
    assert bound - len(data) < len(encode_event(1.5, "o", "")) + 6 + 16
