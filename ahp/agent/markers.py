"""The fallback's markers: how a command is delimited in a shell without command detection.

Why: a shell this host did not start with its integration (``sh``, a remote
``bash`` started by someone else) announces neither a command's start nor its
end. The command is then typed wrapped (:func:`wrap`) as
``printf <begin>; eval 'COMMAND'; printf <end with $?>`` on one line (``$status``
in fish), the
markers built by ``printf`` from a random token, so that the typed (echoed) text
never contains the markers themselves; :class:`Markers` passes on what lies
between them and parses the exit code from the end marker.

Buffering: :meth:`Markers.feed` holds back at most the length of a partial end
marker (plus a few line ends) between calls. Pure: no I/O.
"""

from __future__ import annotations

import re
from typing import Final

__all__ = ["MARKER_LOOKBACK", "MARKER_TAIL", "Markers", "group", "wrap"]

#: After a resynchronisation, the end of the terminal's text searched for the end marker.
MARKER_LOOKBACK: Final = 64 * 1024
#: Before concluding "waiting for input", the end of the terminal's text searched for it.
MARKER_TAIL: Final = 1024


def wrap(command_line: str, token: str, *, fish: bool = False) -> str:
    """The line typed for ``command_line`` in the fallback (markers from ``token``).

    ``fish``: in fish's syntax, which refuses POSIX's ``$?`` (``fish: $? is not the
    exit status``: the line never ran, nor any later one); its single quotes take
    ``\\'`` and ``\\\\`` as escapes, and its exit status is ``$status``."""
    if fish:
        quoted = "'" + command_line.replace("\\", "\\\\").replace("'", "\\'") + "'"
        status = "$status"
    else:
        quoted = "'" + command_line.replace("'", "'\\''") + "'"
        status = '"$?"'
    return (
        f"printf '__AHP_%s_{token}__\\n' BEGIN; eval {quoted}; "
        f"printf '\\n__AHP_END_{token}_%s__\\n' {status}"
    )


def group(command_line: str, *, fish: bool = False) -> str:
    """``command_line`` as one command for a shell with command detection.

    Typed as it is, a command of several lines (``cat <<EOF`` … ``EOF``, then
    ``wc -l``) runs as several commands, each with its own start and end: the
    command would be over at the first one's end and the later ones' output would
    land in the next command. Grouped — ``{ …\n}`` (bash, zsh, sh), ``begin …\nend``
    (fish) — the shell reads every line before it runs any, so they are one command,
    reported once, with the last one's exit status, in the same shell (``cd`` and
    variables persist, ``exit`` exits). One line is left as it is; trailing line
    ends are dropped.

    Where the shell takes a bracketed paste as one buffer (zsh with it on, fish:
    :func:`ahp.agent.start._pastes`), the lines are pasted instead, ungrouped. The
    group is typed line by line: a line the shell cannot parse drops the unfinished
    group, and the shell reads the later lines as commands of their own (bash: they
    run, untracked; the first one's end was taken for the command's). bash parses a
    pasted buffer line by line as well, so it keeps the group, and this limit.
    """
    body = command_line.rstrip("\r\n")
    if "\n" not in body:
        return body
    return f"begin\n{body}\nend" if fish else f"{{ {body}\n}}"


class Markers:
    """Streaming filter for the fallback: passes on what lies between the markers."""

    def __init__(self, token: str) -> None:
        self.begin = f"__AHP_BEGIN_{token}__\r\n"
        self._end_prefix = f"\r\n__AHP_END_{token}_"
        self._end = re.compile(rf"\r?\n?__AHP_END_{token}_(\d+)__")
        self._buffer = ""
        self.started = False
        self.exit_code: int | None = None
        self.done = False

    def feed(self, data: str) -> str:
        """The output in ``data`` (some may be held back until the next call)."""
        if self.done:
            return ""
        buffer = self._buffer + data
        if not self.started:
            at = buffer.find(self.begin)
            if at < 0:
                self._buffer = buffer[-len(self.begin) :]
                return ""
            self.started = True
            buffer = buffer[at + len(self.begin) :]
        match = self._end.search(buffer)
        if match is not None:
            self.done = True
            self.exit_code = int(match.group(1))
            self._buffer = ""
            return buffer[: match.start()]
        hold = self._held(buffer)
        self._buffer = buffer[len(buffer) - hold :] if hold else ""
        return buffer[: len(buffer) - hold]

    def resynchronised(self, tail: str) -> None:
        """Output was lost; ``tail`` is the end of the terminal's text now."""
        self._buffer = ""
        if not self.started and self.begin in tail:
            self.started = True

    def find_end(self, text: str) -> int | None:
        """The exit code from an end marker in ``text`` (a state after a resync)."""
        match = self._end.search(text)
        return int(match.group(1)) if match is not None else None

    def _held(self, buffer: str) -> int:
        """Length of the longest end of ``buffer`` that may begin the end marker."""
        at = buffer.rfind("__AHP_END_")
        if at >= 0 and re.fullmatch(r"__AHP_END_[0-9a-f]*_?\d*_?", buffer[at:]):
            while at > 0 and buffer[at - 1] in "\r\n" and len(buffer) - at < 64:
                at -= 1
            return len(buffer) - at
        prefix = self._end_prefix
        for k in range(min(len(prefix), len(buffer)), 0, -1):
            tail = buffer[-k:]
            if (
                prefix.startswith(tail)
                or prefix[1:].startswith(tail)
                or prefix[2:].startswith(tail)
            ):
                return k
        return 0
