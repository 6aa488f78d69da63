"""A command line as text for the shell's line editor: its line ends, its control characters.

Why: ``run(command)`` types the command into the shell's line editor (readline, zle,
fish's), which takes every character as a key. A caller means text: a lone ``\\r`` (a
file with old Mac line ends, a CRLF cut in two) is a line end, not Enter pressed
half-way (the rest ran after the command's end, untracked: ``exit 5`` killed the shell
unseen); a TAB in a heredoc or between quotes is a TAB, not completion (it vanished:
``echo a<TAB>b`` printed ``ab``); a Ctrl-C, Ctrl-U, Ctrl-Z or ESC inside a command is a
key no caller of ``run`` means (``echo a\\x03echo b`` ran ``cho b``). So
:func:`command_text` makes ``\\r\\n`` and ``\\r`` line ends (``\\n``) and refuses the other
control characters, naming the first (keys go in with ``send_input``), and
:func:`keystrokes` types the text: line ends as Enter, a TAB quoted with Ctrl-V (the
``quoted-insert`` of readline and zle, the tty's ``lnext`` for a shell without a line
editor); fish has no such key, so a TAB in a command for fish is refused. A command of
several lines for zsh or fish goes in as one bracketed paste (line ends and zsh's TABs
are text there), then one Enter.

Pure: no I/O.
"""

from __future__ import annotations

import re
from typing import Final

__all__ = ["CommandLineError", "command_text", "keystrokes"]

#: Characters a command line may not hold: C0 controls but TAB and the line ends, and DEL.
_CONTROL: Final = re.compile(r"[\x00-\x08\x0b-\x0c\x0e-\x1f\x7f]")

#: Names of the control characters (a key where there is one).
_NAMES: Final = {0x00: "NUL", 0x1B: "ESC", 0x7F: "DEL (Backspace)"}


class CommandLineError(ValueError):
    """A command line that cannot be typed as text: it holds a control character the
    shell's line editor would take as a key (or a TAB, in fish). Nothing was typed."""


def _name(char: str) -> str:
    code = ord(char)
    name = _NAMES.get(code)
    if name is None:
        name = f"Ctrl-{chr(code + 0x40)}"
    return f"U+{code:04X} ({name})"


def command_text(command_line: str) -> str:
    """``command_line`` with ``\\r\\n`` and lone ``\\r`` made ``\\n``.

    Raises:
        CommandLineError: it holds another control character (TAB aside).
    """
    text = command_line.replace("\r\n", "\n").replace("\r", "\n")
    found = _CONTROL.search(text)
    if found is not None:
        raise CommandLineError(
            f"the command holds the control character {_name(found.group())} at index "
            f"{found.start()}: a command is text for the shell, and its line editor would "
            "take that character as a key; nothing was typed. Write escapes as text "
            "(printf '\\033'), and send keys with send_input"
        )
    return text


def keystrokes(typed: str, *, fish: bool = False, paste: bool = False) -> str:
    """The keys that type ``typed`` (a :func:`command_text`, wrapped or grouped) and
    press Enter: each line end an Enter (``\\r``), each TAB quoted with Ctrl-V.

    ``paste``: ``typed`` goes in as one bracketed paste (``ESC[200~`` … ``ESC[201~``),
    then one Enter: the line editor inserts the text as it is (line ends and zsh's TABs
    are text, not keys: no Ctrl-V, which a paste would insert as it is) and the Enter
    hands the shell the whole of it, to parse before it runs any of it (see
    :func:`ahp.agent.markers.group`).

    Raises:
        CommandLineError: a TAB in a command for fish (its editor completes on TAB and
            has no key that inserts one; from a paste, fish 3.6 drops it).
    """
    if "\t" in typed:
        if fish:
            raise CommandLineError(
                "the command holds a TAB: fish's line editor takes it as completion and "
                "has no key that inserts one; nothing was typed. Use spaces, or \\t in "
                "printf or echo -e"
            )
        if not paste:
            typed = typed.replace("\t", "\x16\t")
    if paste:
        return f"\x1b[200~{typed}\x1b[201~\r"
    return typed.replace("\n", "\r") + "\r"
