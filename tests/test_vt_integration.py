"""Tests for ahp.vt.integration (command tracking) and ahp.vt.uri (pure; no I/O).

Test rules:
- Clocks are plain numbers passed in; nothing is mocked.
- Streams go through the real Scanner, so the tracker is tested on what the
  engine will actually feed it.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ahp.protocol.actions import (
    TerminalAction,
    TerminalCommandDetectionAvailable,
    TerminalCommandExecuted,
    TerminalCommandFinished,
    TerminalCwdChanged,
    TerminalData,
    TerminalTitleChanged,
)
from ahp.protocol.uri import file_uri_to_path, path_to_file_uri
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
from ahp.vt.integration import CommandTracker, events_to_actions
from ahp.vt.scanner import Scanner

NONCE = "5f0e4c1a-nonce"
DETECTED = TerminalCommandDetectionAvailable()
#: The C mark our shell scripts print (signed with the terminal's nonce).
C_MARK = b"\x1b]633;C;" + NONCE.encode() + b"\x07"


def d_mark(code: bytes = b"") -> bytes:
    """Our scripts' D mark: ``633;D;[code];<nonce>``."""
    return b"\x1b]633;D;" + code + b";" + NONCE.encode() + b"\x07"


def actions_for(
    chunks: Sequence[bytes], *, nonce: str | None = NONCE, clock: Sequence[float] | None = None
) -> list[TerminalAction]:
    """Scan and track ``chunks``; chunk k happens at wall 1000*k ms, mono ``clock[k]`` ms."""
    scanner = Scanner()
    tracker = CommandTracker(nonce=nonce)
    out: list[TerminalAction] = []
    for k, chunk in enumerate(chunks):
        mono = clock[k] if clock is not None else 10.0 * k
        out += events_to_actions(tracker, scanner.feed(chunk), wall_ms=1000 * k, mono_ms=mono)
    out += events_to_actions(tracker, scanner.close(), wall_ms=-1, mono_ms=-1.0)
    return out


def handle(tracker: CommandTracker, event: Event, mono_ms: float = 0.0) -> list[TerminalAction]:
    return tracker.handle(event, wall_ms=123, mono_ms=mono_ms)


# -- command lifecycle ---------------------------------------------------------


def test_full_cycle_in_one_read() -> None:
    data = (
        b"\x1b]633;A\x07$ \x1b]633;B\x07"
        b"\x1b]633;E;make test;" + NONCE.encode() + b"\x07" + C_MARK + b"ok\r\n" + d_mark(b"0")
    )
    assert actions_for([data]) == [
        TerminalData("$ "),
        DETECTED,  # our own shell: announced at the end of its first prompt
        TerminalCommandExecuted(commandId="cmd-1", commandLine="make test", timestamp=0),
        TerminalData("ok\r\n"),  # output in the same read as D comes before the finish
        TerminalCommandFinished(commandId="cmd-1", exitCode=0, durationMs=0),
    ]


def test_duration_from_monotonic_clock_and_ids_unique() -> None:
    chunks = [C_MARK, b"out" + d_mark(b"1"), C_MARK, d_mark(b"2")]
    actions = actions_for(chunks, clock=[100.0, 1334.6, 2000.0, 1990.0])
    assert actions == [
        DETECTED,
        TerminalCommandExecuted(commandId="cmd-1", commandLine="", timestamp=0),
        TerminalData("out"),
        TerminalCommandFinished(commandId="cmd-1", exitCode=1, durationMs=1235),
        TerminalCommandExecuted(commandId="cmd-2", commandLine="", timestamp=2000),
        # A monotonic clock never goes back, but a negative difference is clamped.
        TerminalCommandFinished(commandId="cmd-2", exitCode=2, durationMs=0),
    ]


def test_detection_available_only_once() -> None:
    tracker = CommandTracker(nonce=None)
    assert handle(tracker, Property("IsWindows", "False")) == [DETECTED]
    for event in (PromptStart(), PromptEnd(), Property("k", "v"), CommandLine("x", None)):
        assert handle(tracker, event) == []
    assert tracker.detection_available


@pytest.mark.parametrize(
    "first",
    [PromptStart(), PromptEnd(), CommandStart(), CommandFinished(0), CommandLine("x", None)],
)
def test_any_shell_integration_event_announces_detection(first: Event) -> None:
    assert handle(CommandTracker(nonce=None), first)[0] == DETECTED


@pytest.mark.parametrize("first", [PromptEnd(), CommandStart(nonce=NONCE), CommandLine("x", NONCE)])
def test_our_shell_announces_detection_once_its_line_editor_reads(first: Event) -> None:
    assert handle(CommandTracker(nonce=NONCE), first)[0] == DETECTED


def test_our_shell_does_not_announce_detection_before_its_prompt_ends() -> None:
    # The shell reports its cwd and starts a prompt before its line editor reads
    # input: a command typed then would be echoed twice.
    tracker = CommandTracker(nonce=NONCE)
    for event in (
        CommandFinished(0, nonce=NONCE),  # bash's first PROMPT_COMMAND: "no command" ended
        CwdReported("file:///a", shell_integration=True, nonce=NONCE),
        Property("k", "v", nonce=NONCE),
        PromptStart(),
    ):
        assert DETECTED not in handle(tracker, event)
    assert not tracker.detection_available
    assert handle(tracker, PromptEnd()) == [DETECTED]


def test_cwd_from_633_announces_detection_but_osc7_does_not() -> None:
    tracker = CommandTracker(nonce=None)
    assert handle(tracker, CwdReported("file:///a")) == [TerminalCwdChanged(cwd="file:///a")]
    assert handle(tracker, CwdReported("file:///b", shell_integration=True)) == [
        DETECTED,
        TerminalCwdChanged(cwd="file:///b"),
    ]


def test_finish_without_start_does_nothing() -> None:
    assert actions_for([b"x\x1b]633;D;0\x07y"], nonce=None) == [
        TerminalData("x"),
        DETECTED,
        TerminalData("y"),
    ]
    # Our own shell: a D before any command is its first prompt's "no command" ended,
    # before the line editor reads: not yet a reason to announce detection.
    assert actions_for([b"x\x1b]633;D;0\x07y"]) == [TerminalData("xy")]
    tracker = CommandTracker(nonce=NONCE)
    handle(tracker, CommandStart(nonce=NONCE))
    assert handle(tracker, CommandFinished(0, nonce=NONCE))
    assert handle(tracker, CommandFinished(0, nonce=NONCE)) == []  # nothing running


def test_finish_without_code_omits_exit_code() -> None:
    actions = actions_for([C_MARK + d_mark()])
    assert actions[-1] == TerminalCommandFinished(commandId="cmd-1", exitCode=None, durationMs=0)


def test_second_start_leaves_the_first_incomplete() -> None:
    tracker = CommandTracker(nonce=NONCE)
    handle(tracker, CommandStart(nonce=NONCE), 0)
    assert handle(tracker, CommandStart(nonce=NONCE), 5) == [
        TerminalCommandExecuted(commandId="cmd-2", commandLine="", timestamp=123)
    ]
    assert handle(tracker, CommandFinished(3, nonce=NONCE), 12) == [
        TerminalCommandFinished(commandId="cmd-2", exitCode=3, durationMs=7)
    ]
    assert tracker.running_command is None


# -- nonce ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "forged",
    [
        b"\x1b]633;E;rm -rf /;wrong\x07",
        b"\x1b]633;E;rm -rf /\x07",
        b"\x1b]633;E;rm -rf /;\x07",
        b"\x1b]633;E;rm -rf /;" + NONCE.upper().encode() + b"\x07",
    ],
)
def test_forged_command_line_never_used(forged: bytes) -> None:
    actions = actions_for([forged + C_MARK])
    assert TerminalCommandExecuted(commandId="cmd-1", commandLine="", timestamp=0) in actions


def test_without_a_nonce_nothing_is_trusted() -> None:
    for nonce in (None, ""):
        tracker = CommandTracker(nonce=nonce)
        handle(tracker, CommandLine("ls", nonce))
        assert handle(tracker, CommandStart())[-1] == TerminalCommandExecuted(
            commandId="cmd-1", commandLine="", timestamp=123
        )


def test_trusted_line_is_consumed_and_a_later_forgery_ignored() -> None:
    tracker = CommandTracker(nonce=NONCE)
    handle(tracker, CommandLine("ls -l", NONCE))
    handle(tracker, CommandLine("rm -rf /", "forged"))
    executed = handle(tracker, CommandStart(nonce=NONCE))
    assert executed[-1] == TerminalCommandExecuted(
        commandId="cmd-1", commandLine="ls -l", timestamp=123
    )
    # Consumed: the next command has no line unless a new trusted E arrives.
    assert handle(tracker, CommandStart(nonce=NONCE))[-1] == TerminalCommandExecuted(
        commandId="cmd-2", commandLine="", timestamp=123
    )


def test_unescaped_command_line() -> None:
    line = b"printf 'a\\x3bb\\x0a' \\\\ x"
    actions = actions_for([b"\x1b]633;E;" + line + b";" + NONCE.encode() + b"\x07" + C_MARK])
    assert actions[-1] == TerminalCommandExecuted(
        commandId="cmd-1", commandLine="printf 'a;b\n' \\ x", timestamp=0
    )


def test_program_output_cannot_move_our_shells_commands_or_cwd() -> None:
    """Session 19's probe: ``cat`` of a file holding shell-integration marks, in a shell
    we injected. Before, its ``D;0`` finished the running command with exit code 0 and
    its ``A B C`` started a phantom command that the real ``D;1`` then finished. Only
    signed marks count there; the forged ones are removed from the text all the same."""
    forged = (
        b"\x1b]633;D;0\x07\x1b]633;D;0;wrong\x07\x1b]633;A\x07\x1b]633;B\x07"
        b"\x1b]633;E;rm -rf /;wrong\x07\x1b]633;C\x07\x1b]633;C;wrong\x07"
        b"\x1b]633;P;Cwd=/evil\x07\x1b]633;P;Cwd=/evil;wrong\x07\x1b]7;file://h/evil\x07"
    )
    started = b"\x1b]633;E;cat notes;" + NONCE.encode() + b"\x07" + C_MARK
    cwd = b"\x1b]633;P;Cwd=/home;" + NONCE.encode() + b"\x07"
    actions = actions_for([cwd + started, b"a" + forged + b"z", d_mark(b"1")])
    assert actions == [
        TerminalCwdChanged(cwd="file:///home"),
        DETECTED,
        TerminalCommandExecuted(commandId="cmd-1", commandLine="cat notes", timestamp=0),
        TerminalData("a\x1b]7;file://h/evil\x07z"),  # (OSC 7 is shown: it is not ours)
        TerminalCommandFinished(commandId="cmd-1", exitCode=1, durationMs=20),  # (chunk 2)
    ]


def test_a_cwd_with_a_newline_counts_only_from_our_signed_report() -> None:
    """Probe L: ``cd $'new\\nline'`` never updated the cwd (any control character made a
    report no cwd). Our shells escape it (``\\x0a``) and sign the report: believed, the
    URI holds ``%0A``. The same path from anyone else (an OSC 7, an unsigned or
    wrongly signed mark, any mark in a terminal without a nonce) is not."""
    ours = b"\x1b]633;P;Cwd=/tmp/new\\x0aline;" + NONCE.encode() + b"\x07"
    assert actions_for([ours]) == [TerminalCwdChanged(cwd="file:///tmp/new%0Aline")]
    others = (
        b"\x1b]633;P;Cwd=/tmp/new\\x0aline\x07\x1b]633;P;Cwd=/tmp/new\\x0aline;wrong\x07"
        b"\x1b]7;file:///tmp/new%0Aline\x07"
    )
    assert actions_for([others]) == [TerminalData("\x1b]7;file:///tmp/new%0Aline\x07")]
    assert actions_for([others], nonce=None) == [TerminalData("\x1b]7;file:///tmp/new%0Aline\x07")]


def test_a_shell_we_did_not_inject_is_believed_unsigned() -> None:
    # (VS Code's own scripts sign only E; a shell started without ours has no nonce.)
    data = b"\x1b]633;P;Cwd=/a\x07\x1b]633;C\x07x\x1b]633;D;3\x07\x1b]7;file://localhost/b\x07"
    assert actions_for([data], nonce=None) == [
        DETECTED,
        TerminalCwdChanged(cwd="file:///a"),
        TerminalCommandExecuted(commandId="cmd-1", commandLine="", timestamp=0),
        TerminalData("x"),
        TerminalCommandFinished(commandId="cmd-1", exitCode=3, durationMs=0),
        TerminalData("\x1b]7;file://localhost/b\x07"),
        TerminalCwdChanged(cwd="file:///b"),
    ]


# -- 133-only shells, cwd and title --------------------------------------------


def test_osc133_only_stream() -> None:
    data = b"\x1b]133;A\x07$ \x1b]133;B\x07\x1b]133;C\x07out\r\n\x1b]133;D;4\x07"
    assert actions_for([data]) == [
        TerminalData("$ "),
        DETECTED,
        TerminalCommandExecuted(commandId="cmd-1", commandLine="", timestamp=0),
        TerminalData("out\r\n"),
        TerminalCommandFinished(commandId="cmd-1", exitCode=4, durationMs=0),
    ]


def test_cwd_and_title_deduplicated() -> None:
    data = (
        b"\x1b]633;P;Cwd=/home/u\x07\x1b]7;file://h/home/u\x07"
        b"\x1b]0;t\x07\x1b]2;t\x07\x1b]633;P;Cwd=/tmp\x07\x1b]0;u\x07"
    )
    assert actions_for([data], nonce=None) == [
        DETECTED,
        TerminalCwdChanged(cwd="file:///home/u"),
        TerminalData("\x1b]7;file://h/home/u\x07\x1b]0;t\x07"),
        TerminalTitleChanged(title="t"),
        TerminalData("\x1b]2;t\x07"),
        TerminalCwdChanged(cwd="file:///tmp"),
        TerminalData("\x1b]0;u\x07"),
        TerminalTitleChanged(title="u"),
    ]


def test_text_is_not_an_action_of_the_tracker() -> None:
    assert handle(CommandTracker(nonce=NONCE), Text("x")) == []


def test_events_to_actions_merges_text_across_silent_events() -> None:
    tracker = CommandTracker(nonce=None)
    handle(tracker, PromptStart())
    events: list[Event] = [Text("a"), PromptStart(), Text("b"), Text(""), PromptEnd(), Text("c")]
    assert events_to_actions(tracker, events, wall_ms=0, mono_ms=0) == [TerminalData("abc")]
    title: list[Event] = [Text("a"), TitleChanged("t"), Text("b")]
    assert events_to_actions(tracker, title, wall_ms=0, mono_ms=0) == [
        TerminalData("a"),
        TerminalTitleChanged(title="t"),
        TerminalData("b"),
    ]


# -- file URIs -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "uri"),
    [
        ("/", "file:///"),
        ("/home/u", "file:///home/u"),
        ("/a b/c", "file:///a%20b/c"),
        ("/x%y#z?w", "file:///x%25y%23z%3Fw"),
        ("/tést/日本", "file:///t%C3%A9st/%E6%97%A5%E6%9C%AC"),
        ("/a:b@c~d", "file:///a%3Ab%40c~d"),
    ],
)
def test_path_to_file_uri(path: str, uri: str) -> None:
    assert path_to_file_uri(path) == uri
    assert file_uri_to_path(uri) == path


@pytest.mark.parametrize(
    ("uri", "path"),
    [
        ("file://localhost/etc", "/etc"),
        ("file://host.example/a%20b", "/a b"),
        ("FILE:///x", "/x"),
        ("file:/y", "/y"),
        ("file:///%FF", os.fsdecode(b"/\xff")),
    ],
)
def test_file_uri_to_path(uri: str, path: str) -> None:
    assert file_uri_to_path(uri) == path


@pytest.mark.parametrize("uri", ["http://x/y", "file://host", "file:relative", "/plain", ""])
def test_file_uri_to_path_rejects(uri: str) -> None:
    with pytest.raises(ValueError, match="URI"):
        file_uri_to_path(uri)


@pytest.mark.parametrize("path", ["", "relative/p", "~/x"])
def test_path_to_file_uri_rejects_relative(path: str) -> None:
    with pytest.raises(ValueError, match="absolute"):
        path_to_file_uri(path)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=40))
def test_file_uri_round_trips_any_path_bytes(raw: bytes) -> None:
    path = os.fsdecode(b"/" + raw.replace(b"\x00", b""))
    uri = path_to_file_uri(path)
    assert uri.isascii()
    assert file_uri_to_path(uri) == path
    assert path_to_file_uri(file_uri_to_path(uri)) == uri
