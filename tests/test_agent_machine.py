"""The command state machine and its table, without a pty (issue 20, item 1).

Test rules: pure logic, so hypothesis drives it with every order of events; no
Trio, no clock (times are numbers passed in).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ahp.agent.command import CommandResult
from ahp.agent.evidence import (
    MAX_PROGRAM_NAME,
    InputEvidence,
    editor_reads,
    interactive_shell,
    program_name,
    prompt_unseen,
)
from ahp.agent.line import CommandLineError, command_text, keystrokes
from ahp.agent.machine import INPUT_POLL, MAX_INPUT_POLL, CommandMachine, IllegalEvent
from ahp.agent.options import RunChanges, RunOptions
from ahp.agent.registry import CommandRegistry
from ahp.agent.status import (
    FINAL_STATUSES,
    LIVE_STATUSES,
    REQUESTED_ENDS,
    STATUSES,
    TRANSITIONS,
    Event,
    Status,
    markdown_table,
)
from ahp.mcp.tools import COMMAND_RESULT_SCHEMA
from ahp.pty.procfs import TtyStatus

DOCS = Path(__file__).resolve().parents[1] / "docs" / "agent.md"

#: Events that end a command from any live status.
ENDING = (Event.ENDED, Event.SHELL_EXITED, Event.DISPOSED, Event.LOST, Event.FAILED)
#: Events any live command may get (REFUSED only comes before anything else).
LIVE_EVENTS = [e for e in Event if e is not Event.REFUSED]


def test_every_live_status_has_a_row_for_every_event_but_refusal() -> None:
    for status, row in TRANSITIONS.items():
        missing = set(LIVE_EVENTS) - set(row)
        assert missing == set(), f"{status} has no row for {missing}"
    assert Event.REFUSED in TRANSITIONS[Status.RUNNING]


def test_derived_sets() -> None:
    assert set(STATUSES) == {str(s) for s in Status}
    assert set(STATUSES) - {str(s) for s in LIVE_STATUSES} == FINAL_STATUSES
    assert {"lost", "refused", "shell_exited", "finished"} <= FINAL_STATUSES
    assert "running" not in FINAL_STATUSES and "waiting_for_input" not in FINAL_STATUSES
    # The MCP output schema's enum is the same list (defect 4: "lost" was missing).
    assert COMMAND_RESULT_SCHEMA["properties"]["status"]["enum"] == list(STATUSES)  # type: ignore[index]


def test_result_done_follows_the_table() -> None:
    fields = {a.name: a.default for a in attrs.fields(CommandResult)}
    values: dict[str, Any] = {
        **{k: v for k, v in fields.items() if v is not attrs.NOTHING},
        "command_line": "x",
        "status": "running",
        "output": "",
        "raw_output": "",
        "exit_code": None,
        "duration_ms": 0,
        "truncated": False,
        "omitted_bytes": 0,
        "omitted_lines": 0,
        "total_bytes": 0,
        "total_lines": 0,
        "timed_out": False,
        "waiting_for_input": False,
        "alternate_screen": False,
        "shell_exited": False,
        "background": (),
        "command_id": "cmd-x",
    }
    base = CommandResult(**values)
    for status in STATUSES:
        assert attrs.evolve(base, status=status).done == (status in FINAL_STATUSES)


def test_docs_carry_the_generated_table() -> None:
    text = DOCS.read_text()
    assert markdown_table() in text, "docs/agent.md: paste markdown_table() again"
    for status in Status:
        assert f"`{status}`" in text


def test_run_changes_name_the_options_fields() -> None:
    assert set(RunChanges.__annotations__) == {a.name for a in attrs.fields(RunOptions)}


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"timeout": 0}, "timeout"),
        ({"yield_after": -1}, "yield_after"),
        ({"input_quiet": 0}, "input_quiet"),
        ({"head_bytes": -1}, "head_bytes"),
        ({"tail_bytes": 9 * 1024 * 1024}, "exceed"),
        ({"max_output_bytes": 0}, "max_output_bytes"),
    ],
)
def test_options_refuse_bad_values(changes: RunChanges, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        RunOptions().with_changes(changes)


def test_options_budget() -> None:
    assert RunOptions(max_output_bytes=100).budget() == (25, 75)
    assert RunOptions(max_output_bytes=100, head_bytes=10).budget() == (10, 75)


events = st.lists(st.sampled_from(LIVE_EVENTS), max_size=40)


@settings(max_examples=400, deadline=None)
@given(events, st.sampled_from(ENDING), events)
def test_every_order_of_events_ends_in_exactly_one_final_status(
    before: list[Event], end: Event, after: list[Event]
) -> None:
    machine = CommandMachine(now=0.0, input_quiet=0.5)
    endings = 0
    for i, event in enumerate([*before, end, *after]):
        was_done = machine.done
        transition = machine.handle(event, float(i), exit_code=7)
        if was_done:
            assert transition is None  # nothing leads out of a final status
            continue
        assert transition is not None
        assert transition.after == TRANSITIONS[transition.before][event] or (
            event in REQUESTED_ENDS
        )
        endings += transition.ended
    assert machine.done and endings == 1
    assert str(machine.status) in FINAL_STATUSES


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from([Event.INTERRUPT, Event.TIME_OUT, Event.KILL, Event.OUTPUT])))
def test_a_requested_end_is_reported_as_requested(asked: list[Event]) -> None:
    machine = CommandMachine(now=0.0, input_quiet=0.5)
    for event in asked:
        machine.handle(event, 0.0)
    machine.handle(Event.ENDED, 1.0, exit_code=130)
    if Event.KILL in asked:
        expected = Status.KILLED
    elif Event.TIME_OUT in asked:
        expected = Status.TIMED_OUT
    elif Event.INTERRUPT in asked:
        expected = Status.INTERRUPTED
    else:
        expected = Status.FINISHED
    assert machine.status is expected and machine.exit_code == 130


def test_refusal_and_illegal_events() -> None:
    machine = CommandMachine(now=0.0, input_quiet=0.5)
    transition = machine.handle(Event.REFUSED, 0.0, note="busy")
    assert transition is not None and transition.ended
    assert machine.status is Status.REFUSED and machine.note == "busy"
    waiting = CommandMachine(now=0.0, input_quiet=0.5)
    waiting.handle(Event.EXECUTING, 0.0)
    waiting.handle(Event.INPUT_SEEN, 1.0)
    with pytest.raises(IllegalEvent):
        waiting.handle(Event.REFUSED, 2.0)
    with pytest.raises(ValueError, match="input_quiet"):
        CommandMachine(now=0.0, input_quiet=0)


def settled(machine: CommandMachine) -> bool:
    """``machine.settled``, read through a call: mypy would keep the property narrowed
    across the ``handle`` calls that change it."""
    return machine.settled


def evidence(machine: CommandMachine) -> object | None:
    """``machine.evidence``, read through a call (as :func:`settled`)."""
    return machine.evidence


def test_waiting_episodes_are_reported_once() -> None:
    machine = CommandMachine(now=0.0, input_quiet=0.5)
    machine.handle(Event.EXECUTING, 0.0)
    assert not settled(machine)
    machine.handle(Event.INPUT_SEEN, 1.0, evidence="e1")
    assert settled(machine) and machine.episode == 1 and evidence(machine) == "e1"
    machine.acknowledge()
    assert not settled(machine)
    machine.handle(Event.INPUT_SEEN, 2.0, evidence="e2")  # the same episode
    assert not settled(machine) and machine.episode == 1
    machine.handle(Event.INPUT_SENT, 3.0)
    assert machine.status is Status.RUNNING and evidence(machine) is None
    machine.handle(Event.INPUT_SEEN, 4.0)
    assert settled(machine) and machine.episode == 2


def test_an_episode_is_settled_for_every_waiter_that_counted_from_before_it() -> None:
    """Two waiters began before episode 1; the first acknowledges it: the second, counting
    from what was reported when it began, still finds it settled; a waiter beginning
    after the acknowledgement does not."""
    machine = CommandMachine(now=0.0, input_quiet=0.5)
    machine.handle(Event.EXECUTING, 0.0)
    first = second = machine.reported
    machine.handle(Event.INPUT_SEEN, 1.0)
    assert machine.settled_since(first)
    machine.acknowledge()
    assert machine.settled_since(second)
    assert not machine.settled_since(machine.reported)
    machine.handle(Event.INPUT_SENT, 2.0)
    assert not machine.settled_since(second)  # running again: nothing to return for
    machine.handle(Event.ENDED, 3.0, exit_code=0)
    assert machine.settled_since(machine.reported)


def test_a_command_line_is_text() -> None:
    assert command_text("a\r\nb\rc\n\td") == "a\nb\nc\n\td"
    assert keystrokes("x\ty\nz") == "x\x16\ty\rz\r"
    for char, name in (("\x03", "Ctrl-C"), ("\x1b", "ESC"), ("\x7f", "DEL"), ("\x00", "NUL")):
        with pytest.raises(CommandLineError, match=rf"U\+00.. \({name}.*at index 4"):
            command_text(f"echo{char}")
    with pytest.raises(CommandLineError, match="fish"):
        keystrokes("a\tb", fish=True)
    assert keystrokes("ab", fish=True) == "ab\r"


def test_a_pasted_command_is_one_paste_and_one_enter() -> None:
    """Several lines for zsh or fish: one bracketed paste, its line ends and TABs text
    (a Ctrl-V would be pasted as it is), then one Enter; fish drops a pasted TAB."""
    assert keystrokes("a\tb\nc", paste=True) == "\x1b[200~a\tb\nc\x1b[201~\r"
    assert keystrokes("a\nc", fish=True, paste=True) == "\x1b[200~a\nc\x1b[201~\r"
    with pytest.raises(CommandLineError, match="fish"):
        keystrokes("a\tb\nc", fish=True, paste=True)


@given(st.text())
def test_typed_command_text_holds_no_other_key(text: str) -> None:
    try:
        typed = keystrokes(command_text(text))
    except CommandLineError:
        return
    assert not re.search(r"[\x00-\x08\x0a-\x0c\x0e-\x15\x17-\x1f\x7f]", typed)
    assert "\n" not in typed and typed.count("\x16") == typed.count("\t")


def test_the_input_watch_clock() -> None:
    machine = CommandMachine(now=10.0, input_quiet=0.5)
    assert machine.next_look() is None  # not executing yet
    machine.handle(Event.EXECUTING, 11.0)
    assert machine.next_look() == 11.5
    machine.handle(Event.OUTPUT, 12.0)
    assert machine.next_look() == 12.5
    # Fruitless looks back off, doubling up to the bound.
    gaps = []
    now = 12.5
    for _ in range(6):
        machine.looked(now)
        due = machine.next_look()
        assert due is not None
        gaps.append(due - now)
        now = due
    assert gaps[0] == INPUT_POLL and gaps[-1] == MAX_INPUT_POLL
    assert gaps == sorted(gaps)
    machine.handle(Event.OUTPUT, 20.0)  # output resets the back-off
    assert machine.next_look() == 20.5
    machine.handle(Event.INPUT_SEEN, 21.0)
    assert machine.next_look() is None  # waiting already
    machine.handle(Event.ENDED, 22.0, exit_code=0)
    assert machine.next_look() is None


def test_the_table_in_the_docs_names_every_event() -> None:
    table = markdown_table()
    for event in Event:
        assert re.search(rf"^\| `{event}` \|", table, re.MULTILINE)


@pytest.mark.parametrize(
    ("line", "name"),
    [
        ("/usr/bin/vim .git/COMMIT_EDITMSG", "vim"),
        (
            "/root/.pyenv/versions/3.11.7/bin/python /root/.pyenv/bin/ipython --no-banner",
            "python ipython",
        ),
        ("python3 -c input()", "python3"),
        ("node -e x", "node"),
        ("", "the command"),
        ("x" * 100, "x" * MAX_PROGRAM_NAME),
    ],
)
def test_program_names_in_notes(line: str, name: str) -> None:
    assert program_name(line) == name
    evidence = InputEvidence(readers=(1,), echo=False, source="procfs", programs=(line,))
    assert evidence.describe().startswith(f"{name} waits for input, echo off")


def test_a_line_not_started_is_looked_at_once_an_end_is_asked() -> None:
    """Fallback mode: a Ctrl-C can drop a line before its start marker; the input
    watch must look then too, or the command would stay running for ever."""
    machine = CommandMachine(now=10.0, input_quiet=0.5)
    assert machine.next_look(unstarted=True) is None  # nothing asked: wait for the start
    machine.handle(Event.TIME_OUT, 10.1)
    assert machine.next_look() is None  # detected mode watches the start itself
    due = machine.next_look(unstarted=True)
    assert due is not None and due <= 10.1 + 0.5 + 1e-9  # after input_quiet of quiet


@pytest.mark.parametrize(
    ("line", "shell"),
    [
        ("bash", "bash"),
        ("bash --norc", "bash"),
        ("-bash", "bash"),
        ("/bin/bash --init-file /tmp/ahp-bash-x/launch.bash -i", "bash"),
        ("zsh -f", "zsh"),
        ("fish -C true", "fish"),
        ("sh -o vi", "sh"),
        ("bash -c 'read x'", None),
        ("bash -ic ls", None),
        ("bash build.sh", None),
        ("python3", None),
        ("", None),
    ],
)
def test_interactive_shells_are_told_from_scripts(line: str, shell: str | None) -> None:
    """A nested shell at its own prompt is named as one; a shell running ``-c`` or a
    script is a program like any other."""
    assert interactive_shell(line) == shell


# -- the shell back at its prompt, seen from its tty -----------------------------------------

#: bash's readline at its prompt (polls, raw mode); zsh's zle reads in raw mode.
_PROMPT = TtyStatus(
    foreground_pgrp=7,
    echo=False,
    readers=(),
    tty_pollers=(7,),
    shell_foreground=True,
    shell_replaced=False,
    canonical=False,
)


@pytest.mark.parametrize(
    ("changes", "at_prompt"),
    [
        ({}, True),
        ({"readers": (7,), "tty_pollers": ()}, True),  # zle
        ({"readers": (7,), "tty_pollers": (), "echo": True, "canonical": True}, False),  # read
        ({"readers": (7,), "tty_pollers": (), "canonical": True}, False),  # read -s
        ({"canonical": None}, False),  # an older server: not known
        ({"shell_foreground": False}, False),  # a job of its own
        ({"shell_replaced": True}, False),  # exec: another program
        ({"unread": 3}, False),
        ({"tty_pollers": ()}, False),
    ],
)
def test_the_line_editor_reading_is_told_from_a_read(
    changes: dict[str, Any], at_prompt: bool
) -> None:
    assert editor_reads(attrs.evolve(_PROMPT, **changes)) == at_prompt
    assert not editor_reads(None)


@pytest.mark.parametrize(
    ("changes", "unseen"),
    [
        ({"shell_stderr_tty": False}, True),  # bash, exec 2>/dev/null
        ({"shell_stderr_tty": True}, False),
        ({"shell_stderr_tty": None}, False),  # an older server
        ({"shell_stderr_tty": False, "programs": ("zsh -i",)}, False),  # zsh: on its tty
        ({"shell_stderr_tty": False, "programs": ()}, False),
    ],
)
def test_a_prompt_is_unseen_only_when_bash_has_its_stderr_elsewhere(
    changes: dict[str, Any], unseen: bool
) -> None:
    base = attrs.evolve(_PROMPT, programs=("/bin/bash --init-file /tmp/x -i",))
    assert prompt_unseen(attrs.evolve(base, **changes)) == unseen
    assert not prompt_unseen(None)


def test_detection_lost_comes_back_only_with_a_new_end() -> None:
    registry = CommandRegistry()
    assert not registry.detection_back("cmd-2")  # never lost
    registry.lose_detection(frozenset({"cmd-1", "cmd-2"}))
    assert (registry.detection_back("cmd-2"), _lost(registry)) == (False, True)
    assert (registry.detection_back("cmd-3"), _lost(registry)) == (True, False)
    registry.lose_detection()  # for good (exec bash)
    assert (registry.detection_back("cmd-4"), _lost(registry)) == (False, True)


def _lost(registry: CommandRegistry) -> bool:
    return registry.detection_lost
