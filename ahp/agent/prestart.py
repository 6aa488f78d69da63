"""What a typed command line printed before the shell started it, and what that means.

Why: with command detection a command exists for the collector from the shell's
``commandExecuted`` on. Some typed lines never get one: a syntax error (``echo (``
in bash, ``fi``), a Ctrl-C that reached the shell after it read the line and before
it ran it (a tiny ``timeout``), a line the shell keeps reading the rest of (an
unclosed quote or bracket: zsh's and fish's continuation prompt). Waiting for the
start would wait for ever, and the terminal would stay "busy" for every later run.
:class:`PreStart` keeps what the terminal printed from the typing on (the echo,
the error, the new prompt), bounded, and answers the collector's two questions
once the shell is seen reading again: is this the shell's primary prompt again
(:meth:`PreStart.back_at_prompt`: the command was dropped), and what did the shell
say (:meth:`PreStart.said`: the error, without the echo and the prompt).

fish refuses a line with a syntax error (``echo $((1+2))``, ``(exit 42)``) without
dropping it: it prints the error, draws its prompt again (its ``fish_prompt``
function, not the event: no command mark) and keeps the line in its editor, for
editing; the next keys typed would be appended to it. :meth:`PreStart.kept_line`
sees that: the prompt drawn again after the typing, the typed line after it. (An
unclosed block, ``begin`` without ``end``, or bash's ``for …; do …; done``, which is
one in fish, draws no prompt: fish's editor goes to a new line and waits for the rest.)

A Ctrl-C (an interrupt, a timeout) is not over when it is sent: until the shell
took it, it is still on its way (in the kernel's buffer, or pending in a shell not
yet scheduled), and a command typed then loses its first keys to the line the
shell discards. Only output that arrived after it shows the shell took it
(:func:`prompt_after`: a new line, then a prompt).

Pure: no I/O, no clock.
"""

from __future__ import annotations

from typing import Final

from ahp.agent.evidence import looks_like_prompt
from ahp.agent.render import strip_escapes

__all__ = ["MAX_PRE_START", "PreStart", "prompt_after", "screen_line"]

#: Characters of pre-start output kept (the tail: the new prompt is at its end).
MAX_PRE_START: Final = 16 * 1024


def screen_line(text: str) -> str:
    """The last line of VT ``text`` as it shows: escapes gone, and of a line
    rewritten after ``\\r`` (a prompt redrawn) the last non-blank part."""
    line = strip_escapes(text).rpartition("\n")[2]
    for part in reversed(line.split("\r")):
        if part.strip():
            return part
    return ""


def prompt_after(text: str, prompt: str = "") -> bool:
    """``text`` (output since a Ctrl-C was asked for) shows the shell took it: a new
    line was started, and the last line is ``prompt`` (the one the command was
    typed at) or one that looks like a prompt (a prompt that changed: it shows
    ``$?``, the time)."""
    if "\n" not in text:
        return False
    last = screen_line(text).strip()
    return bool(last) and (last == prompt.strip() or looks_like_prompt(last))


class PreStart:
    """Output of a typed command before its start, and the prompt it was typed at.

    Args:
        prompt: the terminal's last line when the command was typed
            (:func:`screen_line` of its text).
        typed_lines: how many lines were typed (the echo to leave out).
        first: the first typed line (what a shell that keeps a refused line shows
            after its prompt: :meth:`kept_line`).
    """

    def __init__(self, prompt: str, typed_lines: int, first: str = "") -> None:
        self.prompt = prompt.strip()
        self.typed_lines = typed_lines
        self.first = first.strip()
        self._text = ""
        #: Output since :meth:`mark` (``None``: not marked), bounded as the rest.
        self._since: str | None = None
        #: Changes with every :meth:`feed` (a look before and after tells "quiet").
        self.count = 0

    def feed(self, data: str) -> None:
        self.count += 1
        text = self._text + data
        self._text = text[-MAX_PRE_START:]
        if self._since is not None:
            self._since = (self._since + data)[-MAX_PRE_START:]

    def mark(self) -> None:
        """From now on, keep apart what is printed (:meth:`since_mark`): the answer to a
        key sent."""
        self._since = ""

    def since_mark(self) -> str:
        return self._since or ""

    def kept_line(self) -> str | None:
        """The shell drew its prompt again after the typing, with the typed line after
        it: it refused the line and keeps it in its editor (fish; see the module doc).
        Looked for after the echo's first line; a line fish redraws wider than the
        screen shows only its start, an autosuggestion may follow it. The prompt it
        drew (``None``: not so): the one the command was typed at, or, when it was
        typed before the shell drew it (fish prints its missing-newline mark, ``⏎``,
        after the command's end and before its prompt), the one drawn first."""
        return self._kept()[1]

    def _kept(self) -> tuple[int, str | None]:
        """The index (in the text's lines) of the last line that shows a prompt and the
        typed line after it (0: none after the echo's first line), and that prompt."""
        if not self.first:
            return 0, None
        lines = self._text.split("\n")
        prompts = [self.prompt] if self.prompt else []
        drawn_first = next((p for p in strip_escapes(lines[0]).split("\r") if p.strip()), "")
        if drawn_first and not self.first.startswith(drawn_first.strip()):
            prompts.append(drawn_first.strip())  # not the echo: the prompt, drawn late
        for index in range(len(lines) - 1, 0, -1):
            for drawn in strip_escapes(lines[index]).split("\r"):
                part = drawn.strip()
                for prompt in prompts:
                    if not part.startswith(prompt):
                        continue
                    rest = part[len(prompt) :].strip()
                    if rest and (self.first.startswith(rest) or rest.startswith(self.first)):
                        return index, prompt
        return 0, None

    def last_line(self) -> str:
        return screen_line(self._text)

    def back_at_prompt(self) -> bool:
        """The last line is the prompt the command was typed at (not a continuation
        prompt such as ``> ``): the shell dropped the line."""
        last = self.last_line().strip()
        return bool(last) and bool(self.prompt) and last == self.prompt

    def said(self) -> str:
        """What the shell printed between the echo of the typed lines and the new
        prompt (VT text; e.g. ``bash: syntax error near unexpected token ...``)."""
        said = self._text.split("\n")[self.typed_lines : -1]
        return "".join(line + "\n" for line in said)

    def prompt_again(self) -> bool:
        """The prompt the command was typed at was drawn again after the echo's first
        line: the shell dropped what it had read and reads on (bash after a line it
        cannot parse in a group typed line by line: :func:`ahp.agent.markers.group`)."""
        if not self.prompt:
            return False
        for line in self._text.split("\n")[1:]:
            for drawn in strip_escapes(line).split("\r"):
                if drawn.strip().startswith(self.prompt):
                    return True
        return False

    def after_first(self) -> str:
        """What the terminal printed after the echo's first line, up to the last line
        (the prompt): a dropped group's error, then its later lines as they ran (echo
        and output; VT text)."""
        return "".join(line + "\n" for line in self._text.split("\n")[1:-1])

    def said_kept(self) -> str:
        """What the shell printed between the echo of the typed line and the prompt it
        drew again with the line it kept (:meth:`kept_line`; VT text: fish's error and
        the caret under the refused part)."""
        said = self._text.split("\n")[1 : self._kept()[0]]
        return "".join(line + "\n" for line in said)
