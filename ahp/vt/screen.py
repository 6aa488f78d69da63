"""The visible screen of a terminal, rendered on demand by a full VT emulator (pyte).

Why on demand and not in the engine: pyte renders about 1 MB/s in pure Python
(``benchmarks/README.md``), two orders of magnitude below the engine's
throughput, so it must stay out of the hot path. The terminal's state already
holds its output; :class:`ScreenModel` feeds pyte only with what was appended
since it last looked, when someone asks for the screen. When it cannot tell what
is new (the scrollback was trimmed, first use) or the backlog is large, it starts
a fresh emulator and replays the last :data:`SCREEN_REPLAY` characters: a
screen's worth of output is far less than that, so only a program that redraws
through a longer stretch without a clear would render differently.

pyte 0.8 does not implement the alternate screen (``CSI ? 1049 h`` and friends);
:class:`_Emulator` adds it: entering saves the main screen and cursor and shows a
blank one, leaving restores them.

Pure: no I/O; the caller passes the state.
"""

from __future__ import annotations

import copy
from typing import Any, Final

import attrs
import pyte

from ahp.protocol.state import CommandPart, TerminalState, part_text

__all__ = ["SCREEN_REPLAY", "Screen", "ScreenModel"]

#: Characters replayed into a fresh emulator when the increment is unknown or too large.
SCREEN_REPLAY: Final = 64 * 1024
_ALT_MODES: Final = frozenset(m << 5 for m in (1049, 1047, 47))


@attrs.frozen
class Screen:
    """The visible screen: ``rows`` lines of rendered text (no trailing spaces).

    Attributes:
        lines: the screen's rows, top to bottom.
        cursor_row: 0-based row of the cursor.
        cursor_col: 0-based column of the cursor.
        alternate_screen: a full-screen program (``less``, ``vi``) has switched to
            the alternate screen.
    """

    lines: tuple[str, ...]
    cursor_row: int
    cursor_col: int
    alternate_screen: bool

    def text(self) -> str:
        """The lines joined with ``\\n``, trailing blank lines stripped."""
        lines = list(self.lines)
        while lines and not lines[-1]:
            lines.pop()
        return "\n".join(lines)


class _Emulator(pyte.Screen):
    """pyte's screen plus the alternate screen."""

    def __init__(self, columns: int, lines: int) -> None:
        super().__init__(columns, lines)
        self.alternate = False
        self._saved_main: tuple[dict[int, dict[int, Any]], Any] | None = None

    def set_mode(self, *mode_list: int, **kwargs: Any) -> None:
        if kwargs.get("private") and {m << 5 for m in mode_list} & _ALT_MODES:
            if not self.alternate:
                self._saved_main = (
                    {y: dict(line) for y, line in self.buffer.items()},
                    copy.copy(self.cursor),
                )
                self.alternate = True
                self.erase_in_display(2)
            mode_list = tuple(m for m in mode_list if m << 5 not in _ALT_MODES)
        super().set_mode(*mode_list, **kwargs)

    def reset_mode(self, *mode_list: int, **kwargs: Any) -> None:
        if kwargs.get("private") and {m << 5 for m in mode_list} & _ALT_MODES:
            if self.alternate and self._saved_main is not None:
                saved, cursor = self._saved_main
                self.erase_in_display(2)
                for y, line in saved.items():
                    if y < self.lines:
                        self.buffer[y].update({x: c for x, c in line.items() if x < self.columns})
                self.cursor = cursor
                self.ensure_hbounds()
                self.ensure_vbounds()
                self.dirty.update(range(self.lines))
            self.alternate = False
            self._saved_main = None
            mode_list = tuple(m for m in mode_list if m << 5 not in _ALT_MODES)
        super().reset_mode(*mode_list, **kwargs)

    def reset(self) -> None:
        super().reset()
        self.alternate = False
        self._saved_main = None


def _key(part: object) -> str | None:
    return part.commandId if isinstance(part, CommandPart) else None


class ScreenModel:
    """The screen of one terminal, brought up to date from its state when asked.

    Buffering: one pyte screen of ``cols`` x ``rows`` cells; nothing else is kept
    but where it last read the state (part index, part identity, length).
    """

    def __init__(self, cols: int = 80, rows: int = 24) -> None:
        self._cols = cols
        self._rows = rows
        self._emulator = _Emulator(cols, rows)
        self._stream = pyte.Stream(self._emulator)
        self._count = 0  # number of content parts seen
        self._last_key: str | None = None
        self._last_len = 0  # length of the last seen part's text
        self._last_state: TerminalState | None = None
        self._screen: Screen | None = None
        #: Figures for tests and benchmarks: characters fed, replays done.
        self.fed = 0
        self.replays = 0

    def feed(self, text: str) -> None:
        """Feed output directly (when the caller has it at hand rather than a state)."""
        self._stream.feed(text)
        self.fed += len(text)
        self._screen = None

    def update(self, state: TerminalState) -> Screen:
        """The screen after everything ``state`` holds."""
        if state is self._last_state and self._screen is not None:
            return self._screen
        cols = state.cols or self._cols
        rows = state.rows or self._rows
        if (cols, rows) != (self._cols, self._rows):
            self._cols, self._rows = cols, rows
            self._emulator.resize(lines=rows, columns=cols)
        delta = self._delta(state)
        if delta is None or len(delta) > SCREEN_REPLAY:
            self._emulator.reset()
            self.replays += 1
            self.feed(state.tail(SCREEN_REPLAY))
        elif delta:
            self.feed(delta)
        parts = state.content
        self._count = len(parts)
        self._last_key = _key(parts[-1]) if parts else None
        self._last_len = len(part_text(parts[-1])) if parts else 0
        self._last_state = state
        return self.screen()

    def screen(self) -> Screen:
        if self._screen is None:
            emulator = self._emulator
            self._screen = Screen(
                lines=tuple(line.rstrip() for line in emulator.display),
                cursor_row=emulator.cursor.y,
                cursor_col=emulator.cursor.x,
                alternate_screen=emulator.alternate,
            )
        return self._screen

    def _delta(self, state: TerminalState) -> str | None:
        """What was appended since the last update, or ``None`` when unknown."""
        parts = state.content
        if self._last_state is None:
            return None
        if self._count == 0:
            return "".join(str(part_text(p)) for p in parts)
        if len(parts) < self._count:
            return None
        last = parts[self._count - 1]
        if _key(last) != self._last_key or isinstance(last, CommandPart) != (
            self._last_key is not None
        ):
            return None
        text = part_text(last)
        if len(text) < self._last_len:
            return None
        pieces = [text.tail(len(text) - self._last_len)] if len(text) > self._last_len else []
        pieces.extend(str(part_text(p)) for p in parts[self._count :])
        return "".join(pieces)
