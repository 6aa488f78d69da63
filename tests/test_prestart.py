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


# What fish 3.6 printed (recorded through a real pty, its integration's OSC 633 marks
# left out as the terminal leaves them out): a line it refuses is kept in its editor,
# after its prompt drawn again; a block left open goes on on a new line, no prompt.
FISH_PROMPT = "\x1b[92mroot\x1b(B\x1b[m@\x1b(B\x1b[mvm\x1b(B\x1b[m \x1b[31m~\x1b(B\x1b[m# "
FISH_REFUSED = (
    "echo \r\x1b[20C$((1+2)\r\x1b[28C)\r\x1b[29C\r\n"
    "fish: command substitutions not allowed here\r\necho $((1+2))\r\n       ^~~~^\r\n"
    "\x1b[2m\u23ce\x1b(B\x1b[m" + " " * 79 + "\r\u23ce \r\x1b[K"
    f"{FISH_PROMPT}echo $((1+2))\x1b[K\r\x1b[29C\x1b]0;~\x07\x1b[30m\x1b(B\x1b[m\r"
    f"{FISH_PROMPT}echo $((1+2))\x1b[K\r\x1b[29C\x1b[14D\x1b[34mecho\x1b[30m\x1b(B\x1b[m "
    "\x1b[36m$(\x1b[31m(1+2)\x1b[36m)\r\x1b[29C\x1b[30m\x1b(B\x1b[m"
)
FISH_OPEN_BLOCK = (
    "for \r\x1b[15Ci \r\x1b[17Cin \r\x1b[20C1 \r\x1b[22C2;\r\x1b[24C \r\x1b[25Cdo "
    "\r\x1b[28Cecho \r\x1b[33C$i;\r\x1b[36C \r\x1b[37Cdone\r\n\x1b[K\x1b[A\r\n\x1b[15C"
    "\x1b[A\x08\x08\x08\x08\x1b[34mfor\x1b[30m\x1b(B\x1b[m \x1b[36mi\x1b[30m\x1b(B\x1b[m "
    "\x1b[34min\x1b[30m\x1b(B\x1b[m 1 2; do echo $i; done\r\r\n\x1b[15C\x1b[30m\x1b(B\x1b[m"
)


@given(st.integers(min_value=0, max_value=len(FISH_REFUSED)))
def test_a_line_fish_refuses_is_kept_after_its_prompt(at: int) -> None:
    """Probe L: fish reprints its prompt with the refused line still in its editor: it
    was taken for a continuation prompt (waiting for input, echo off) and the next
    command was appended to the line."""
    pre = PreStart(screen_line(FISH_PROMPT), typed_lines=1, first="echo $((1+2))")
    pre.feed(FISH_REFUSED[:at])
    pre.feed(FISH_REFUSED[at:])
    assert pre.kept_line() == "root@vm ~#" and not pre.back_at_prompt()
    assert pre.said_kept() == (
        "fish: command substitutions not allowed here\r\necho $((1+2))\r\n       ^~~~^\r\n"
    )
    pre.mark()
    pre.feed("\x1b[7m^C\x1b[30m\x1b(B\x1b[m\r\n\u23ce \r\x1b[K" + FISH_PROMPT + "\x1b[K\r\x1b[11C")
    assert prompt_after(pre.since_mark(), pre.prompt)  # Ctrl-C cleared it: its prompt, empty


def test_a_line_fish_refuses_is_kept_after_a_prompt_drawn_late() -> None:
    """Typed right after the previous command's end, before fish drew its prompt (its
    missing-newline mark, ``⏎``, was the terminal's last line then): the prompt fish
    drew first, before the echo, is its prompt."""
    pre = PreStart("\u23ce", typed_lines=1, first="(exit 42)")
    pre.feed(
        f"\x1b]0;~\x07{FISH_PROMPT}\x1b[K\r\x1b[11C(exit \r\x1b[17C42)\r\x1b[20C\r\n"
        "fish: command substitutions not allowed here\r\n"
        f"\x1b[2m\u23ce\x1b(B\x1b[m   \r\u23ce \r\x1b[K{FISH_PROMPT}(exit 42)\x1b[K\r\x1b[20C"
    )
    assert pre.kept_line() == "root@vm ~#"
    assert pre.said_kept() == "fish: command substitutions not allowed here\r\n"


def test_a_block_fish_keeps_open_is_no_kept_line() -> None:
    pre = PreStart(screen_line(FISH_PROMPT), typed_lines=1, first="for i in 1 2; do echo $i; done")
    pre.feed(FISH_OPEN_BLOCK)
    assert pre.kept_line() is None and not pre.back_at_prompt()
    # Nor is bash's error, back at its bare prompt (no line after it).
    bash = PreStart("root@vm:~# ", typed_lines=1, first="echo (")
    bash.feed(BASH_ERROR)
    assert bash.back_at_prompt() and bash.kept_line() is None
    # Nor a line echoed at the prompt it was typed at, before any new line.
    typed = PreStart(screen_line(FISH_PROMPT), typed_lines=1, first="echo hi")
    typed.feed("\r" + FISH_PROMPT + "echo hi\x1b[K")
    assert typed.kept_line() is None


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
