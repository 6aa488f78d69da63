"""The visible screen of a terminal, rendered on demand; no program's output can break it.

Why on demand and not in the engine: a full emulator is far slower than the engine
(``benchmarks/README.md``), so it stays out of the hot path. The terminal's state
already holds its output; :class:`ScreenModel` feeds an emulator only with what was
appended since it last looked, when someone asks for the screen. When it cannot tell
what is new (the scrollback was trimmed, first use) or the backlog is large, it
starts a fresh emulator and replays the last :data:`SCREEN_REPLAY` characters: a
screen's worth of output is far less than that. A replay starts outside any escape
sequence (:func:`resume_at`): one that began before the replay's start (a clipboard
write or an image longer than the replay) is skipped to its end, not shown as text.

Why Ghostty's emulator: chosen by measurement on recorded output of real programs
(``tests/fixtures/programs/``, ``benchmarks/bench_screen.py``, section "Issue 20:
screen model" of ``benchmarks/README.md``): libghostty-vt, through the ``pyghostty``
binding, agreed with tmux on every row of the corpus and ran about 20x faster than
pyte, which raised on vim 9's output and mis-drew colon sub-parameters and joined
emoji. pyte stays as the fallback where pyghostty cannot be loaded (it ships wheels
for glibc Linux and macOS only); ``ScreenModel(emulator="pyte")`` forces it.

Why contained: an emulator is a large parser fed by whatever a program writes, and
pyte raises on dozens of sequences (any CSI with a private marker its handler does
not take, stray parameters, ...). An exception from the emulator is never raised to
the caller and never leaves the model broken: the model builds a fresh emulator
from the output it retains (the last :data:`SCREEN_REPLAY` characters), replaying it
piece by piece (a piece starts at each ESC or C1 CSI); when a piece raises again,
its escape sequence is dropped with the parser state it left, and the text after it
is kept. :attr:`ScreenModel.contained` counts
these rebuilds. The same holds for reading the screen and for resizing.

Ownership and buffering: a model owns one emulator of ``cols`` x ``rows`` cells
(no scrollback) and a copy of the last output it fed, at most
:data:`RETAINED_MAX` characters. Not thread-safe; no I/O but loading the
emulator's shared library on first use; imports no Trio.
"""

from __future__ import annotations

import contextlib
import copy
import re
from collections import deque
from typing import Any, Final, Protocol

import attrs
import pyte

from ahp.protocol.state import CommandPart, TerminalState, part_text

__all__ = [
    "EMULATORS",
    "REPLAY_LOOKBACK",
    "RETAINED_MAX",
    "SCREEN_REPLAY",
    "Screen",
    "ScreenModel",
    "available_emulator",
    "resume_at",
]

#: Characters replayed into a fresh emulator when the increment is unknown or too
#: large, and the output kept to rebuild the screen after an emulator error.
SCREEN_REPLAY: Final = 64 * 1024
#: Most characters of fed output retained before the copy is compacted to the last
#: :data:`SCREEN_REPLAY` (compacting on every feed would copy 64 KiB each time).
RETAINED_MAX: Final = 2 * SCREEN_REPLAY
#: How far before a replay's start the model looks for an escape sequence the replay
#: would begin inside (a clipboard write, an image, a title longer than what is
#: replayed): the replay then starts after its end, so none of its payload shows as
#: text. Looked at in growing steps, from :data:`REPLAY_LOOKBACK_STEP`; a sequence
#: that began further back (more than 4 Mi characters, the default scrollback) is
#: not found.
REPLAY_LOOKBACK: Final = 4 * 1024 * 1024
REPLAY_LOOKBACK_STEP: Final = 4096
#: A CSI, or an escape with intermediates, as far as it goes (its final included).
_CSI_BODY: Final = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]?")
_ESC_BODY: Final = re.compile(r"\x1b[ -/]*[0-~]?")
#: What ends an OSC (BEL too), or a DCS/SOS/PM/APC string.
_OSC_STOP: Final = re.compile(r"[\x07\x18\x1a\x1b]")
_STRING_STOP: Final = re.compile(r"[\x18\x1a\x1b]")
#: The emulators a model can run, best first.
EMULATORS: Final = ("ghostty", "pyte")
_ALT_MODES: Final = frozenset(m << 5 for m in (1049, 1047, 47))
#: Where a rebuild cuts the retained output: before each ESC and each 8-bit CSI.
_PIECE: Final = re.compile("(?=[\x1b\x9b])")
#: The escape sequence a piece starts with (CSI, or ESC and its intermediates and final).
_SEQUENCE: Final = re.compile("(?:\x1b\\[|\x9b)[0-?]*[ -/]*[@-~]|\x1b[ -/]*[0-~]")


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


class _Emulator(Protocol):
    """What the model needs of an emulator; any method may raise (the model contains it)."""

    name: str

    def feed(self, text: str) -> None: ...
    def recover(self) -> None:
        """After ``feed`` raised: reset the parser, keep the cells."""

    def resize(self, cols: int, rows: int) -> None: ...
    def snapshot(self) -> Screen: ...
    def close(self) -> None: ...


class _Ghostty:
    """libghostty-vt through pyghostty (cffi over a bundled shared library)."""

    name = "ghostty"

    def __init__(self, cols: int, rows: int) -> None:
        from pyghostty.core import Terminal

        self._term: Any = Terminal(cols=cols, rows=rows, scrollback=0)
        self._rows = rows

    def feed(self, text: str) -> None:
        try:  # the engine decodes with surrogateescape: give the program's bytes back
            data = text.encode("utf-8", "surrogateescape")
        except UnicodeEncodeError:
            data = text.encode("utf-8", "replace")
        self._term.feed(data)

    def recover(self) -> None:
        """Nothing to do: libghostty-vt's parser does not fail on input."""

    def resize(self, cols: int, rows: int) -> None:
        self._term.resize(cols, rows)
        self._rows = rows

    def snapshot(self) -> Screen:
        term = self._term
        lines = [line.rstrip() for line in term.text().split("\n")][: self._rows]
        lines += [""] * (self._rows - len(lines))
        col, row = term.cursor
        alternate = term.get("active_screen", "GhosttyTerminalScreen") != 0
        return Screen(tuple(lines), int(row), int(col), bool(alternate))

    def close(self) -> None:
        self._term.close()


class _Pyte:
    """pyte's screen and stream, plus the alternate screen (pyte 0.8 lacks it)."""

    name = "pyte"

    def __init__(self, cols: int, rows: int) -> None:
        self.screen = _PyteScreen(cols, rows)
        self._stream = _PyteStream(self.screen)

    def feed(self, text: str) -> None:
        self._stream.feed(text)

    def recover(self) -> None:
        self._stream = _PyteStream(self.screen)

    def resize(self, cols: int, rows: int) -> None:
        self.screen.resize(lines=rows, columns=cols)

    def snapshot(self) -> Screen:
        screen = self.screen
        return Screen(
            lines=tuple(line.rstrip() for line in screen.display),
            cursor_row=screen.cursor.y,
            cursor_col=screen.cursor.x,
            alternate_screen=screen.alternate,
        )

    def close(self) -> None:
        """Nothing to free: pure Python."""


class _PyteStream(pyte.Stream):
    """pyte's stream, plus REP (``CSI n b``), which pyte 0.8 ignores."""

    csi = {**pyte.Stream.csi, "b": "repeat_last"}  # noqa: RUF012 (pyte declares it so)


class _PyteScreen(pyte.Screen):
    """pyte's screen, plus the alternate screen and REP, without SGR's private forms."""

    def __init__(self, columns: int, lines: int) -> None:
        super().__init__(columns, lines)
        self.alternate = False
        self._saved_main: tuple[dict[int, dict[int, Any]], Any] | None = None
        self._last = ""  # the last character drawn, for REP

    def draw(self, data: str) -> None:
        super().draw(data)
        if data:
            self._last = data[-1]

    def repeat_last(self, count: int = 1, *_: int, **__: Any) -> None:
        """REP: the last character drawn, ``count`` more times (as libghostty-vt draws
        it, wrapping), at most a screenful."""
        if self._last:
            self.draw(self._last * min(max(count, 1), self.columns * self.lines))

    def select_graphic_rendition(self, *attrs: int, private: bool = False) -> None:
        if not private:  # CSI ? 4 m (vim 9's query) is not a rendition
            super().select_graphic_rendition(*attrs)

    def set_mode(self, *modes: int, **kwargs: Any) -> None:
        if kwargs.get("private") and {m << 5 for m in modes} & _ALT_MODES:
            if not self.alternate:
                self._saved_main = (
                    {y: dict(line) for y, line in self.buffer.items()},
                    copy.copy(self.cursor),
                )
                self.alternate = True
                self.erase_in_display(2)
            modes = tuple(m for m in modes if m << 5 not in _ALT_MODES)
        super().set_mode(*modes, **kwargs)

    def reset_mode(self, *modes: int, **kwargs: Any) -> None:
        if kwargs.get("private") and {m << 5 for m in modes} & _ALT_MODES:
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
            modes = tuple(m for m in modes if m << 5 not in _ALT_MODES)
        super().reset_mode(*modes, **kwargs)

    def reset(self) -> None:
        super().reset()
        self.alternate = False
        self._saved_main = None


_AVAILABLE: str | None = None


def available_emulator() -> str:
    """The best emulator that loads here: ``"ghostty"``, else ``"pyte"``."""
    global _AVAILABLE  # noqa: PLW0603 (probed once per process)
    if _AVAILABLE is None:
        try:
            _Ghostty(2, 2).close()
        except Exception:  # no wheel for this platform, or the library does not load
            _AVAILABLE = "pyte"
        else:
            _AVAILABLE = "ghostty"
    return _AVAILABLE


def _make(name: str, cols: int, rows: int) -> _Emulator:
    return _Ghostty(cols, rows) if name == "ghostty" else _Pyte(cols, rows)


class _Retained:
    """The last output fed, kept to rebuild the screen (bounded by :data:`RETAINED_MAX`)."""

    def __init__(self) -> None:
        self._pieces: deque[str] = deque()
        self._size = 0

    def clear(self) -> None:
        self._pieces.clear()
        self._size = 0

    def add(self, text: str) -> None:
        self._pieces.append(text)
        self._size += len(text)
        if self._size > RETAINED_MAX:
            kept = self.text()
            self._pieces = deque([kept])
            self._size = len(kept)

    def text(self) -> str:
        """The last :data:`SCREEN_REPLAY` characters, from outside any escape sequence
        (as far as what is retained tells)."""
        joined = "".join(self._pieces)
        cut = len(joined) - SCREEN_REPLAY
        if cut <= 0:
            return joined
        return joined[resume_at(joined, cut, True) :]


def resume_at(text: str, cut: int, whole: bool) -> int | None:
    """Where to start a replay of ``text[cut:]`` so that it does not begin inside an
    escape sequence: ``cut``, or the end of the sequence ``cut`` falls in (as a VT
    parser ends it). ``None`` when ``text[:cut]`` cannot tell (no ESC, CAN or SUB
    in it) and is not ``whole`` (the start of the output).

    Pure and cheap: a few ``rfind``; what follows ``cut`` is read only when
    ``cut`` falls inside a sequence.
    """
    esc = text.rfind("\x1b", 0, cut)
    last = max(esc, text.rfind("\x18", 0, cut), text.rfind("\x1a", 0, cut))
    if last < 0:
        return cut if whole else None
    if last != esc or esc + 1 >= len(text):
        return cut  # a CAN or SUB ended whatever was open; or nothing follows
    kind = text[esc + 1]
    if kind in "]P_^X":
        if kind == "]" and text.rfind("\x07", esc, cut) >= 0:
            return cut  # the OSC ended with a BEL before the cut
        stop = (_OSC_STOP if kind == "]" else _STRING_STOP).search(text, max(cut, esc + 2))
        if stop is None:
            return len(text)  # all of it is the string's payload
        end = stop.start()
        if text[end] != "\x1b":
            return end + 1  # BEL, CAN, SUB: taken with it
        return end + 2 if text[end + 1 : end + 2] == "\\" else end
    body = (_CSI_BODY if kind == "[" else _ESC_BODY).match(text, esc)
    assert body is not None  # (both match the ESC alone)
    return max(cut, body.end())


def _replay_text(state: TerminalState) -> str:
    """The last :data:`SCREEN_REPLAY` characters of ``state``, from outside any escape
    sequence (see :data:`REPLAY_LOOKBACK`)."""
    look = REPLAY_LOOKBACK_STEP
    while True:
        text = state.tail(SCREEN_REPLAY + look)
        cut = len(text) - SCREEN_REPLAY
        if cut <= 0:
            return text  # the whole output: it starts at rest
        whole = cut < look or look >= REPLAY_LOOKBACK
        start = resume_at(text, cut, whole)
        if start is not None:
            return text[start:]
        look *= 4


def _key(part: object) -> str | None:
    return part.commandId if isinstance(part, CommandPart) else None


class ScreenModel:
    """The screen of one terminal, brought up to date from its state when asked.

    Buffering: one emulator of ``cols`` x ``rows`` cells, the last output fed (see
    :class:`_Retained`) and where it last read the state (part index, part identity,
    length). No method raises because of what a program wrote.

    Args:
        cols, rows: the initial size (a state's own size wins in :meth:`update`).
        emulator: one of :data:`EMULATORS`, or ``None`` for the best that loads here.
    """

    def __init__(self, cols: int = 80, rows: int = 24, *, emulator: str | None = None) -> None:
        if emulator is not None and emulator not in EMULATORS:
            raise ValueError(f"emulator must be one of {EMULATORS}, not {emulator!r}")
        self._cols = max(1, cols)
        self._rows = max(1, rows)
        self._kind = emulator or available_emulator()
        self._emulator = self._new()
        self._retained = _Retained()
        self._count = 0  # number of content parts seen
        self._last_key: str | None = None
        self._last_len = 0  # length of the last seen part's text
        self._last_state: TerminalState | None = None
        self._screen: Screen | None = None
        #: Figures for tests and benchmarks: characters fed, replays done, emulator
        #: errors contained (each one a rebuild from the retained output).
        self.fed = 0
        self.replays = 0
        self.contained = 0

    @property
    def emulator(self) -> str:
        """The name of the emulator in use (one of :data:`EMULATORS`)."""
        return self._kind

    def _new(self) -> _Emulator:
        try:
            return _make(self._kind, self._cols, self._rows)
        except Exception:
            if self._kind == "pyte":
                raise  # pure Python: nothing to fall back to
            self._kind = "pyte"  # the native library failed: keep answering with pyte
            return _make(self._kind, self._cols, self._rows)

    def feed(self, text: str) -> None:
        """Feed output directly (when the caller has it at hand rather than a state)."""
        if not text:
            return
        self._retained.add(text)
        self.fed += len(text)
        self._screen = None
        try:
            self._emulator.feed(text)
        except Exception:
            self._rebuild()

    def _replace(self) -> None:
        """A fresh, blank emulator instead of the current one."""
        old, self._emulator = self._emulator, self._new()
        self._screen = None
        with contextlib.suppress(Exception):  # a broken one's memory is the collector's
            old.close()

    def _rebuild(self) -> None:
        """A fresh emulator from the retained output, without the sequences that raise."""
        self.contained += 1
        self._replace()
        for piece in _PIECE.split(self._retained.text()):
            if piece and not self._feed_piece(piece):
                # Drop the sequence that raised (or one character), keep the text after it.
                match = _SEQUENCE.match(piece)
                rest = piece[match.end() if match else 1 :]
                if rest and not self._feed_piece(rest):
                    self._replace()  # text alone raised: go on from a blank screen

    def _feed_piece(self, piece: str) -> bool:
        """Feed one piece; on an error reset the parser and say so."""
        try:
            self._emulator.feed(piece)
        except Exception:
            try:
                self._emulator.recover()
            except Exception:  # cannot even reset its parser: go on from a blank one
                self._replace()
            return False
        return True

    def _resize(self, cols: int, rows: int) -> None:
        self._cols, self._rows = cols, rows
        self._screen = None
        try:
            self._emulator.resize(cols, rows)
        except Exception:
            self._rebuild()

    def update(self, state: TerminalState) -> Screen:
        """The screen after everything ``state`` holds."""
        if state is self._last_state and self._screen is not None:
            return self._screen
        cols = max(1, state.cols or self._cols)
        rows = max(1, state.rows or self._rows)
        if (cols, rows) != (self._cols, self._rows):
            self._resize(cols, rows)
        delta = self._delta(state)
        if delta is None or len(delta) > SCREEN_REPLAY:
            self._replace()
            self._retained.clear()
            self.replays += 1
            self.feed(_replay_text(state))
        elif delta:
            self.feed(delta)
        parts = state.content
        self._count = len(parts)
        self._last_key = _key(parts[-1]) if parts else None
        self._last_len = len(part_text(parts[-1])) if parts else 0
        self._last_state = state
        return self.screen()

    def screen(self) -> Screen:
        """The screen now (cached until the next feed)."""
        if self._screen is None:
            try:
                self._screen = self._emulator.snapshot()
            except Exception:
                self._rebuild()
                try:
                    self._screen = self._emulator.snapshot()
                except Exception:  # nothing sensible to show: a blank screen, not an error
                    self._screen = Screen(("",) * self._rows, 0, 0, False)
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
