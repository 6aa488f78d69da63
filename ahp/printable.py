"""Text from a peer made safe for a person's terminal and for a line-based log.

Why a module of its own: names, ids and messages that a client or a server chose end
up printed by the CLI and written to the sidecar's log. A control character in them
can drive the reader's terminal (an escape sequence) or forge a line of the log (a
newline followed by a made-up timestamp and ``ERROR``); both places show them the same
way, as ``\\xNN``. Pure: no I/O.
"""

from __future__ import annotations

import logging
from typing import Final

__all__ = ["OneLineFormatter", "configure_logging", "printable"]

#: Control characters (C0, DEL, C1) and how :func:`printable` shows them: ``\\xNN``.
_CONTROLS: Final = {c: f"\\x{c:02x}" for c in (*range(0x20), *range(0x7F, 0xA0))}


def printable(text: str) -> str:
    """``text`` safe to print on a person's terminal: every control character (C0, DEL,
    C1: escape sequences, BEL, carriage return, newline, tab) shown as ``\\xNN``, so a
    name from a server can neither drive the terminal nor break a table's line. One
    C-speed scan when there is none (the common case)."""
    if text.isprintable():
        return text
    return text.translate(_CONTROLS)


class OneLineFormatter(logging.Formatter):
    """A log formatter whose record lines stay one line each: the message's control
    characters (a client's id with a newline in it) are shown as ``\\xNN``
    (:func:`printable`). A traceback, added after the message, keeps its lines."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        return printable(super().formatMessage(record))


def configure_logging(level: str, fmt: str) -> None:
    """Log to stderr at ``level`` in ``fmt``, one line per record (:class:`OneLineFormatter`)."""
    handler = logging.StreamHandler()
    handler.setFormatter(OneLineFormatter(fmt))
    logging.basicConfig(level=level.upper(), handlers=[handler])
