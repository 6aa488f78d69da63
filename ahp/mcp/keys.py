"""Named keys a model can press (``"ctrl-c"``, ``"enter"``, ``"up"``) and the bytes they send.

Why a module of its own: a model answering a prompt or driving a full-screen
program thinks in keys, not in escape sequences; getting ``\\r`` versus ``\\n``
or the arrow sequences wrong makes a program misbehave silently. This table is
the one place that knows what a terminal sends for each key, so the tool
description can list the names and a typo gets a clear error listing them.

Pure: no I/O, no Trio. The arrow, Home and End keys send the normal-mode
(``ESC [``) sequences; programs that switch the keypad to application mode
(``less``, ``vi``) accept those as well.
"""

from __future__ import annotations

import string
from collections.abc import Iterable
from typing import Final

__all__ = ["KEYS", "KEY_SUMMARY", "MAX_KEYS", "key_bytes", "keys_text", "normalise_key"]

#: Most keys one ``send_input`` call may press (a runaway list is refused, not sent).
MAX_KEYS: Final = 256

_SPECIAL: Final[dict[str, str]] = {
    "enter": "\r",
    "return": "\r",
    "tab": "\t",
    "backtab": "\x1b[Z",
    "escape": "\x1b",
    "esc": "\x1b",
    "backspace": "\x7f",
    "delete": "\x1b[3~",
    "insert": "\x1b[2~",
    "space": " ",
    "up": "\x1b[A",
    "down": "\x1b[B",
    "right": "\x1b[C",
    "left": "\x1b[D",
    "home": "\x1b[H",
    "end": "\x1b[F",
    "pageup": "\x1b[5~",
    "pagedown": "\x1b[6~",
    "f1": "\x1bOP",
    "f2": "\x1bOQ",
    "f3": "\x1bOR",
    "f4": "\x1bOS",
    "f5": "\x1b[15~",
    "f6": "\x1b[17~",
    "f7": "\x1b[18~",
    "f8": "\x1b[19~",
    "f9": "\x1b[20~",
    "f10": "\x1b[21~",
    "f11": "\x1b[23~",
    "f12": "\x1b[24~",
}

_CTRL_PUNCTUATION: Final[dict[str, str]] = {
    "@": "\x00",
    "space": "\x00",
    "[": "\x1b",
    "\\": "\x1c",
    "]": "\x1d",
    "^": "\x1e",
    "_": "\x1f",
    "?": "\x7f",
}


_ALIASES: Final[dict[str, str]] = {
    "page-up": "pageup",
    "page_up": "pageup",
    "page-down": "pagedown",
    "page_down": "pagedown",
    "shift-tab": "backtab",
    "del": "delete",
    "bs": "backspace",
}


def _build() -> dict[str, str]:
    keys = dict(_SPECIAL)
    for letter in string.ascii_lowercase:
        keys[f"ctrl-{letter}"] = chr(ord(letter) - ord("a") + 1)
    for mark, data in _CTRL_PUNCTUATION.items():
        keys[f"ctrl-{mark}"] = data
    for char in string.ascii_lowercase + string.digits:
        keys[f"alt-{char}"] = "\x1b" + char
    return keys


#: Every accepted key name (lower case, ``-`` joined) and the text it sends.
KEYS: Final[dict[str, str]] = _build()

#: What a model is told it can press (the full table also has aliases and ``alt-<x>``).
KEY_SUMMARY: Final = (
    "enter, tab, backtab, escape, backspace, delete, insert, space, up, down, left, right, "
    "home, end, pageup, pagedown, f1-f12, ctrl-a … ctrl-z (ctrl-c interrupts, ctrl-d is "
    "end-of-input, ctrl-z suspends), ctrl-\\, ctrl-], alt-<letter or digit>"
)


def normalise_key(name: str) -> str:
    """The canonical spelling of a key name: ``"Ctrl+C"``, ``"C-c"``, ``"^C"`` -> ``"ctrl-c"``."""
    key = name.strip().lower()
    if len(key) == 2 and key[0] == "^":
        return f"ctrl-{key[1]}"
    for prefix in ("control-", "control+", "ctrl+", "c-"):
        if key.startswith(prefix) and len(key) > len(prefix):
            return "ctrl-" + key[len(prefix) :]
    for prefix in ("alt+", "meta-", "meta+", "m-"):
        if key.startswith(prefix) and len(key) > len(prefix):
            return "alt-" + key[len(prefix) :]
    return _ALIASES.get(key, key)


def key_bytes(name: str) -> str:
    """The text a terminal receives for the key ``name``.

    Raises:
        ValueError: an unknown key name (the message lists the known ones).
    """
    data = KEYS.get(normalise_key(name))
    if data is None:
        raise ValueError(f"unknown key {name!r}; known keys: {KEY_SUMMARY}")
    return data


def keys_text(names: Iterable[str]) -> str:
    """The text for pressing ``names`` in order (``ValueError`` on an unknown one or too many)."""
    names = list(names)
    if len(names) > MAX_KEYS:
        raise ValueError(f"too many keys ({len(names)}); at most {MAX_KEYS} per call")
    return "".join(key_bytes(name) for name in names)
