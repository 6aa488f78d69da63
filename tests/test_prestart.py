"""The pure part of a typed line the shell did not start (:mod:`ahp.agent.prestart`)."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from ahp.agent.prestart import MAX_PRE_START, PreStart, prompt_after, screen_line

BASH_ERROR = "echo (\r\nbash: syntax error near unexpected token `newline'\r\nroot@vm:~# "


def test_screen_line_takes_the_last_redrawn_part() -> None:
    assert screen_line("a\r\nroot@vm:~# ") == "root@vm:~# "
    # zsh's PROMPT_SP, then the prompt; fish's redraw ending in a cursor move.
    assert screen_line("x\r\n%        \r \r\r\x1b[0mvm# \x1b[K") == "vm# "
    assert screen_line("\x1b[92mroot\x1b[m@vm ~# \x1b[K\r\x1b[11C") == "root@vm ~# "
    assert screen_line("") == ""


def test_a_syntax_error_is_back_at_the_prompt() -> None:
    pre = PreStart("root@vm:~# ", typed_lines=1)
    for ch in BASH_ERROR:  # byte by byte, as the terminal may deliver it
        pre.feed(ch)
    assert pre.back_at_prompt()
    assert pre.said() == "bash: syntax error near unexpected token `newline'\r\n"


def test_a_continuation_prompt_is_not_the_prompt() -> None:
    pre = PreStart("root@vm:~# ", typed_lines=1)
    pre.feed("echo 'abc\r\n> ")
    assert not pre.back_at_prompt()
    assert pre.last_line() == "> "


def test_no_prompt_known_is_never_back() -> None:
    pre = PreStart("", typed_lines=1)
    pre.feed("x\r\n$ ")
    assert not pre.back_at_prompt()


def test_the_kept_output_is_bounded() -> None:
    pre = PreStart("$ ", typed_lines=1)
    pre.feed("y\r\n" * MAX_PRE_START)
    pre.feed("$ ")
    assert len(pre._text) == MAX_PRE_START
    assert pre.back_at_prompt()


@given(st.integers(min_value=1, max_value=len(BASH_ERROR) - 1))
def test_any_split_gives_the_same_answer(at: int) -> None:
    pre = PreStart("root@vm:~# ", typed_lines=1)
    pre.feed(BASH_ERROR[:at])
    pre.feed(BASH_ERROR[at:])
    assert pre.back_at_prompt() and pre.said().startswith("bash: syntax error")


# What bash printed after a Ctrl-C (recorded through a real pty): taken, it starts a
# new line and draws a new prompt; held (at its first prompt), it redraws the line.
TAKEN = "\x1b[?2004l\r^C\x1b[?2004l\r\r\n\x1b[?2004h\x1b]633;A\x07root@vm:~# \x1b]633;B\x07"
HELD = "^C\x1b[?2004l\r\x1b[?2004h\x1b[C\x1b[C\x1b[C\x1b[C"


def test_a_prompt_that_changed_counts_and_no_new_line_does_not() -> None:
    assert prompt_after("^C\r\n[130] ~ % ", "[0] ~ % ")  # a prompt showing $?
    assert prompt_after("^C\r\n$ ", "$ ")
    assert not prompt_after("^C$ ", "$ ")  # redrawn on the same line: held
    assert not prompt_after("sleep 3\r\n", "$ ")  # the line accepted, nothing yet
    assert not prompt_after("", "$ ")


@given(st.lists(st.integers(min_value=0, max_value=len(HELD + TAKEN)), max_size=6))
def test_the_answer_to_an_interrupt_split_anywhere(cuts: list[int]) -> None:
    """Fed in pieces (the collector accumulates the answer): never taken while only
    the held redraw has arrived; taken once the new prompt has."""
    text = HELD + TAKEN
    answer = ""
    bounds = [0, *sorted(cuts), len(text)]
    for start, end in itertools.pairwise(bounds):
        answer += text[start:end]
        if end <= len(HELD):
            assert not prompt_after(answer, "root@vm:~# ")
    assert prompt_after(answer, "root@vm:~# ")
    assert not prompt_after(TAKEN.replace("root@vm:~# ", "x"), "root@vm:~# ")  # no prompt
