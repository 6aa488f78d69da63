"""Rendering a command's output as a terminal would show it, line by line.

Why our own renderer and not the full emulator (:mod:`ahp.agent.screen`): a
command's output can be hundreds of megabytes, and pyte renders about 1 MB/s in
pure Python (measured, ``benchmarks/README.md``). What an agent needs from a
command is the *final text*: a ``\\r`` progress bar as its last state, cursor
moves applied, escapes gone, the alternate screen's contents dropped (as a real
terminal restores the main screen on ``rmcup``). That needs only a line model:

* A *window* of at most ``rows`` lines that the cursor can reach, like the visible
  screen of a terminal whose top is where the command started. Lines that scroll
  above the window can no longer change and are handed to ``sink`` at once, so
  memory is bounded by the window, whatever the output's size.
* A plain-text fast path: runs of printable characters are written with string
  slicing, not one cell at a time.
* Lines wrapped at ``cols`` are joined again when they leave the window, so a long
  line reaches the agent as one line.
* REP (``CSI n b``, terminfo's ``rep``) repeats the last character written, as
  tmux does: at most up to the end of the line, nothing after a control.
* Escape sequences show nothing, however long: one that has not ended within
  :data:`MAX_SEQUENCE` characters (a clipboard write, an image, a title of 20 KB)
  is discarded up to its end with only its kind remembered, as xterm does, so no
  read split makes its payload appear as text.

What it approximates (a full-screen program should be read through
:meth:`ahp.engine.Terminal.screen` instead): scroll regions, insert/delete line
inside a region and absolute positions are relative to the window, not to the
real screen (where the prompt also sits). ``ED 2`` (clear screen) first hands the
window's lines to ``sink``: an agent gets what was shown before the clear.

:func:`strip_escapes` is the plain cut: escapes and controls removed, nothing applied.

Pure: no I/O, no clock; the caller feeds text and collects lines.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable
from typing import Final

__all__ = [
    "MAX_CSI_PARAM",
    "MAX_SEQUENCE",
    "MAX_JOINED_LINE",
    "MAX_WINDOW_COLS",
    "MAX_WINDOW_ROWS",
    "LineRenderer",
    "cell_width",
    "strip_escapes",
]

#: Numeric CSI parameters are clamped to this (a huge count is no reason to loop).
MAX_CSI_PARAM: Final = 10_000
#: Tab stops every this many columns.
TAB_WIDTH: Final = 8
#: An escape sequence is held back, while it has not ended, up to this many characters.
#: A longer one (an OSC 52 clipboard write, a sixel or kitty image, a CSI with endless
#: parameters) is discarded up to its end without being held: the renderer only
#: remembers that it is inside one, as xterm does, and none of it is shown.
MAX_SEQUENCE: Final = 4096
#: A logical line (wrapped at ``cols``) longer than this many characters is handed on
#: in pieces of this size: the pieces scrolled above the window are held until the
#: line ends, so without it one endless line (``tr '\\0' x < /dev/zero``) would be
#: held whole, however the output is budgeted afterwards.
MAX_JOINED_LINE: Final = 1024 * 1024
#: The window is at most this many rows and columns, whatever size the terminal
#: reports (any client may resize it): the window holds ``rows`` x ``cols`` cells.
MAX_WINDOW_ROWS: Final = 500
MAX_WINDOW_COLS: Final = 1000

_TOKEN: Final = re.compile(
    r"(?P<text>[^\x00-\x1f\x7f-\x9f]+)"
    r"|(?P<csi>\x1b\[(?P<params>[0-?]*)(?P<inter>[ -/]*)(?P<final>[@-~]))"
    # OSC: ended by BEL or ST (ESC \\); cut short, as xterm does, by CAN or SUB (taken
    # with it) or by an ESC that starts another sequence (left for it)
    r"|(?P<osc>\x1b\][^\x07\x18\x1a\x1b]*(?:\x07|\x1b\\|[\x18\x1a]|(?=\x1b[^\\])))"
    r"|(?P<string>\x1b[P_^X][^\x18\x1a\x1b]*(?:\x1b\\|[\x18\x1a]|(?=\x1b[^\\])))"
    # other escapes; never a string or CSI introducer (P X [ ] ^ _)
    r"|(?P<esc>\x1b[ -/]*[0-OQ-WYZ\\`a-~])"
    r"|(?P<ctl>[\x00-\x1f\x7f-\x9f])",
    re.DOTALL,
)
#: Colours and attributes (SGR) change nothing in the text: removed before tokenizing.
_SGR: Final = re.compile(r"\x1b\[[0-9;:]*m")
#: Where removing SGRs first would change the text: the start of an OSC or a
#: DCS/SOS/PM/APC string (an SGR's ESC may cut one short), or an ESC, bare or with
#: intermediates, followed by an ESC (which breaks it; without the SGR, what follows
#: would complete it). (Not looked for, as it costs a scan of every CSI: a CSI cut
#: short by an SGR, which is garbage; it may render differently by the read split.)
_NO_SGR_STRIP: Final = re.compile(r"\x1b(?:[\]P_^X]|[ -/]*\x1b)")
#: Whole lines of printable ASCII: the fast path.
_PLAIN_LINES: Final = re.compile(r"(?:[ -~]*\r\n)+")
#: An escape that may be completed by the next chunk.
_PARTIAL: Final = re.compile(
    r"\x1b(?:\[[0-?]*[ -/]*"
    r"|\][^\x07\x18\x1a\x1b]*(?:\x1b)?"
    r"|[P_^X][^\x18\x1a\x1b]*(?:\x1b)?"
    r"|[ -/]*)?\Z"
)
#: What a malformed escape sequence consists of before the character that breaks it.
_PREFIX: Final = re.compile(r"\x1b(?:\[[0-?]*[ -/]*|[ -/]*)")
#: Discarding an overlong sequence (see :data:`MAX_SEQUENCE`), by its kind: the
#: first character that is no longer part of it. An OSC or a DCS/SOS/PM/APC string
#: ends as in ``_TOKEN``; a CSI's or an escape's final character is discarded with it,
#: any other character ends it and is read afresh.
_OSC_STOP: Final = re.compile(r"[\x07\x18\x1a\x1b]")
_STRING_STOP: Final = re.compile(r"[\x18\x1a\x1b]")
_PARAMS_STOP: Final = re.compile(r"[^0-?]")
_INTER_STOP: Final = re.compile(r"[^ -/]")
_CSI_FINAL: Final = re.compile(r"[@-~]")
_ESC_FINAL: Final = re.compile(r"[0-OQ-WYZ\\`a-~]")


def cell_width(char: str) -> int:
    """Columns a character takes on a terminal: 2 for East Asian wide, 0 for combining."""
    if char.isascii():
        return 1
    if unicodedata.combining(char):
        return 0
    return 2 if unicodedata.east_asian_width(char) in "WF" else 1


class _Line:
    """One line of the window: cells (a wide character's second cell is ``""``)."""

    __slots__ = ("cells", "wrapped")

    def __init__(self) -> None:
        self.cells: list[str] = []
        self.wrapped = False  # the text continues on the next line (auto-wrap)

    def text(self) -> str:
        return "".join(self.cells).rstrip(" ")


class LineRenderer:
    """Feed output text; finished lines go to ``sink``, the rest stay in the window.

    Buffering: at most ``rows`` lines of ``cols`` cells (each at most
    :data:`MAX_WINDOW_ROWS` / :data:`MAX_WINDOW_COLS`), the scrolled-out part of
    the current logical line (at most :data:`MAX_JOINED_LINE` characters: a longer
    line goes to ``sink`` in pieces of that size), plus an unfinished escape
    sequence of at most :data:`MAX_SEQUENCE` characters (a longer one is discarded
    up to its end, remembering only that it is inside one). Each line given to ``sink``
    has no trailing newline and no trailing spaces (but for a piece of a longer line).
    """

    def __init__(self, sink: Callable[[str], None], *, cols: int = 80, rows: int = 24) -> None:
        if cols < 1 or rows < 1:
            raise ValueError("cols and rows must be positive")
        self.cols = min(cols, MAX_WINDOW_COLS)
        self.rows = min(rows, MAX_WINDOW_ROWS)
        self._sink = sink
        self._lines: list[_Line] = [_Line()]
        self._row = 0
        self._col = 0
        self._saved = (0, 0)
        self._pending = ""  # an unfinished escape sequence
        #: Inside an overlong sequence being discarded (MAX_SEQUENCE): its kind, one of
        #: "osc", "string" (DCS/SOS/PM/APC), "csi", "inter" (a CSI's or an escape's
        #: intermediates), "esc"; "" when not.
        self._discard = ""
        self._last = ""  # the last graphic character written, for REP ("" after a control)
        self._wrapped_prefix: list[str] = []  # wrapped pieces already sent up
        self._prefix_size = 0  # characters in ``_wrapped_prefix``
        #: The alternate screen is active now / was ever used.
        self.alternate = False
        self.used_alternate = False

    # -- feeding -----------------------------------------------------------------------------

    def feed(self, text: str) -> None:
        if self._pending:
            text = self._pending + text
            self._pending = ""
        if self._discard:
            skipped = self._skip(text)
            if skipped:
                text = text[skipped:]
        if "\x1b[" in text and _NO_SGR_STRIP.search(text) is None:
            text = _SGR.sub("", text)
        pos = 0
        end = len(text)
        match = _TOKEN.match
        plain = _PLAIN_LINES.match
        while pos < end:
            if self._col == 0 and not self.alternate and self._at_fresh_line():
                block = plain(text, pos)
                if block is not None and self._plain_lines(block.group()):
                    pos = block.end()
                    continue
            m = match(text, pos)
            if m is None or (m.lastgroup == "ctl" and text[pos] == "\x1b"):
                if _PARTIAL.match(text, pos) is not None:
                    if end - pos <= MAX_SEQUENCE:
                        self._pending = text[pos:]
                    else:  # overlong: discarded up to its end, in the next chunks
                        self._start_discard(text, pos)
                    return
                # Malformed (a character that cannot be part of it): a lone ESC is
                # dropped and what follows read as text; but what an overlong one had
                # become by then is discarded, as when it came in pieces.
                prefix = _PREFIX.match(text, pos)
                overlong = prefix is not None and prefix.end() - pos > MAX_SEQUENCE
                pos = prefix.end() if prefix is not None and overlong else pos + 1
                continue
            start = pos
            pos = m.end()
            kind = m.lastgroup
            if kind == "text":
                if not self.alternate:
                    self._write(m.group("text"))
            elif kind == "ctl":
                if not self.alternate:
                    self._control(m.group("ctl"))
            elif kind == "csi":
                if pos - start <= MAX_SEQUENCE + 1:  # (a longer one is discarded when split)
                    self._csi(m.group("params"), m.group("inter"), m.group("final"))
            elif kind == "esc" and not self.alternate:
                self._escape(m.group("esc"))
            # osc / string: dropped

    def _start_discard(self, text: str, pos: int) -> None:
        """``text[pos:]`` is an unfinished sequence longer than :data:`MAX_SEQUENCE`:
        discard it, and what follows of it in the next chunks, without holding it."""
        intro = text[pos + 1]
        if intro == "]" or intro in "P_^X":
            self._discard = "osc" if intro == "]" else "string"
            if text[-1] == "\x1b":  # maybe the start of its ST
                self._pending = "\x1b"
        elif intro == "[":
            self._discard = "inter" if " " <= text[-1] <= "/" else "csi"
        else:
            self._discard = "esc"  # ESC and intermediates

    def _skip(self, text: str) -> int:
        """Discard the start of ``text`` that continues an overlong sequence; return how
        many characters that is (all of them while it has not ended)."""
        kind = self._discard
        end = len(text)
        if kind in {"osc", "string"}:
            stop = (_OSC_STOP if kind == "osc" else _STRING_STOP).search(text)
            if stop is None:
                return end
            pos = stop.start()
            if text[pos] != "\x1b":  # BEL (an OSC's), CAN, SUB: taken with it
                self._discard = ""
                return pos + 1
            if pos + 1 == end:
                self._pending = "\x1b"  # maybe the start of its ST
                return end
            self._discard = ""
            return pos + 2 if text[pos + 1] == "\\" else pos  # ST, or the next sequence
        pos = 0
        if kind == "csi":
            stop = _PARAMS_STOP.search(text)
            if stop is None:
                return end
            pos = stop.start()
        stop = _INTER_STOP.search(text, pos)
        if stop is None:
            self._discard = "inter" if kind == "csi" else kind
            return end
        pos = stop.start()
        final = _ESC_FINAL if kind == "esc" else _CSI_FINAL
        self._discard = ""
        return pos + 1 if final.match(text, pos) else pos

    def lines(self) -> list[str]:
        """The window's lines as text (wrapped lines joined), trailing blank lines dropped.

        Together with what ``sink`` received, this is the rendered output so far.
        """
        out: list[str] = []
        current = list(self._wrapped_prefix)
        for line in self._lines:
            current.append(line.text() if not line.wrapped else "".join(line.cells))
            if not line.wrapped:
                out.append("".join(current))
                current = []
        if current:
            out.append("".join(current))
        while out and not out[-1]:
            out.pop()
        return out

    def settled_lines(self) -> int:
        """How many of :meth:`lines` lie above the cursor's line: a program can still
        redraw them (by moving the cursor up), but output that only goes on, or redraws
        its current line (a progress bar), leaves them as they are."""
        return sum(not line.wrapped for line in self._lines[: self._row])

    def flush(self) -> None:
        """Hand every window line to ``sink`` (the output has ended)."""
        for text in self.lines():
            self._sink(text)
        self._lines = [_Line()]
        self._wrapped_prefix = []
        self._prefix_size = 0
        self._row = self._col = 0

    # -- the window ----------------------------------------------------------------------------

    def _scroll_up(self) -> None:
        top = self._lines.pop(0)
        if top.wrapped:
            piece = "".join(top.cells)
            self._wrapped_prefix.append(piece)
            self._prefix_size += len(piece)
            if self._prefix_size >= MAX_JOINED_LINE:
                joined = "".join(self._wrapped_prefix)
                while len(joined) >= MAX_JOINED_LINE:
                    self._sink(joined[:MAX_JOINED_LINE])
                    joined = joined[MAX_JOINED_LINE:]
                self._wrapped_prefix = [joined] if joined else []
                self._prefix_size = len(joined)
        else:
            self._wrapped_prefix.append(top.text())
            self._sink("".join(self._wrapped_prefix))
            self._wrapped_prefix = []
            self._prefix_size = 0
        self._row -= 1

    def _at_fresh_line(self) -> bool:
        """The cursor is on an empty last line that continues nothing."""
        lines = self._lines
        row = self._row
        return (
            row == len(lines) - 1
            and not lines[row].cells
            and not self._wrapped_prefix
            and (row == 0 or not lines[row - 1].wrapped)
        )

    def _plain_lines(self, block: str) -> bool:
        """Lines of printable ASCII, each ending in CR LF, written at a fresh line:
        those that will scroll out go to ``sink`` directly. False when a line would
        wrap (the caller takes the general path)."""
        lines = block.split("\r\n")
        lines.pop()  # the empty string after the last CR LF
        if max(map(len, lines)) > self.cols:
            return False
        above = len(self._lines) - 1  # lines above the cursor's empty line
        overflow = above + len(lines) + 1 - self.rows
        for _ in range(min(max(overflow, 0), above)):
            self._scroll_up()
        direct = max(0, overflow - above)
        sink = self._sink
        for line in lines[:direct]:
            sink(line.rstrip(" "))
        window = self._lines
        window.pop()  # the empty cursor line
        for line in lines[direct:]:
            new = _Line()
            new.cells = list(line)
            window.append(new)
        window.append(_Line())
        self._row = len(window) - 1
        self._last = ""  # (the last thing written was a control)
        return True

    def _line_feed(self) -> None:
        self._row += 1
        if self._row >= len(self._lines):
            self._lines.append(_Line())
            if len(self._lines) > self.rows:
                self._scroll_up()

    def _write(self, text: str) -> None:
        cols = self.cols
        if text.isascii():
            while text:
                if self._col >= cols:
                    self._lines[self._row].wrapped = True
                    self._col = 0
                    self._line_feed()
                room = cols - self._col
                piece, text = text[:room], text[room:]
                self._put(piece, len(piece))
                self._last = piece[-1]
            return
        for char in text:
            width = cell_width(char)
            if width == 0:
                cells = self._lines[self._row].cells
                if self._col > 0 and self._col - 1 < len(cells):
                    cells[self._col - 1] += char
                continue
            if self._col + width > cols:
                self._lines[self._row].wrapped = True
                self._col = 0
                self._line_feed()
            self._put(char, width)
            self._last = char

    def _put(self, piece: str, width: int) -> None:
        """Write ``piece`` (ASCII text, or one character ``width`` cells wide) at the cursor."""
        cells = self._lines[self._row].cells
        col = self._col
        if len(cells) < col:
            cells.extend(" " * (col - len(cells)))
        if width == len(piece):
            cells[col : col + width] = piece
        else:
            cells[col : col + width] = [piece, ""]
        self._col = col + width

    def _control(self, char: str) -> None:
        self._last = ""  # REP repeats no character across a control (as tmux)
        if char == "\n" or char in "\x0b\x0c":
            self._line_feed()
        elif char == "\r":
            self._col = 0
        elif char == "\b":
            self._col = max(0, min(self._col, self.cols - 1) - 1)
        elif char == "\t":
            self._col = min(self.cols - 1, (self._col // TAB_WIDTH + 1) * TAB_WIDTH)
        # BEL and the other controls change nothing visible

    def _escape(self, seq: str) -> None:
        final = seq[-1]
        if seq == "\x1b7":
            self._saved = (self._row, self._col)
        elif seq == "\x1b8":
            self._row = min(self._saved[0], len(self._lines) - 1)
            self._col = self._saved[1]
        elif seq == "\x1bD":
            self._line_feed()
        elif seq == "\x1bE":
            self._col = 0
            self._line_feed()
        elif seq == "\x1bM":
            self._row = max(0, self._row - 1)
        elif seq == "\x1bc":
            self._clear_screen()
            self._row = self._col = 0
        del final

    def _goto_row(self, row: int) -> None:
        row = max(0, min(row, self.rows - 1))
        while row >= len(self._lines):
            self._lines.append(_Line())
        self._row = row

    def _csi(self, params: str, inter: str, final: str) -> None:
        if params.startswith("?"):
            if final in "hl" and not inter:
                modes = {p for p in params[1:].split(";") if p}
                if modes & {"1049", "1047", "47"}:
                    if final == "h" and not self.alternate:
                        self.alternate = True
                        self.used_alternate = True
                    elif final == "l":
                        self.alternate = False
            return
        if self.alternate or inter or (params and not params[0].isdigit() and params[0] != ";"):
            return
        args = [min(int(p), MAX_CSI_PARAM) if p.isdigit() else 0 for p in params.split(";")]
        n = max(1, args[0])
        if final == "m":
            return
        if final == "A":
            self._row = max(0, self._row - n)
        elif final in "Be":
            self._goto_row(self._row + n)
        elif final in "Ca":
            self._col = min(self.cols - 1, self._col + n)
        elif final == "D":
            self._col = max(0, min(self._col, self.cols - 1) - n)
        elif final == "E":
            self._goto_row(self._row + n)
            self._col = 0
        elif final == "F":
            self._row = max(0, self._row - n)
            self._col = 0
        elif final in "G`":
            self._col = min(self.cols - 1, n - 1)
        elif final in "Hf":
            col = args[1] if len(args) > 1 else 1
            self._goto_row(n - 1)
            self._col = min(self.cols - 1, max(1, col) - 1)
        elif final == "d":
            self._goto_row(n - 1)
        elif final == "K":
            self._erase_line(args[0])
        elif final == "J":
            self._erase_display(args[0])
        elif final == "P":
            del self._lines[self._row].cells[self._col : self._col + n]
        elif final == "@":
            cells = self._lines[self._row].cells
            if self._col < len(cells):
                cells[self._col : self._col] = [" "] * n
                del cells[self.cols :]
        elif final == "X":
            cells = self._lines[self._row].cells
            stop = min(len(cells), self._col + n)
            cells[self._col : stop] = [" "] * max(0, stop - self._col)
        elif final == "L":
            for _ in range(min(n, self.rows)):
                self._lines.insert(self._row, _Line())
            del self._lines[max(self.rows, self._row + 1) :]
        elif final == "M":
            del self._lines[self._row : self._row + n]
            if not self._lines:
                self._lines.append(_Line())
            self._row = min(self._row, len(self._lines) - 1)
        elif final == "b":
            self._repeat(n)
        elif final == "s":
            self._saved = (self._row, self._col)
        elif final == "u":
            self._row = min(self._saved[0], len(self._lines) - 1)
            self._col = self._saved[1]

    def _repeat(self, count: int) -> None:
        """REP: the last graphic character written, ``count`` more times, at most up to
        the end of the line (as tmux: a repeat never wraps, so it is bounded by ``cols``)."""
        char = self._last
        if char:
            count = min(count, (self.cols - self._col) // cell_width(char))
            if count > 0:
                self._write(char * count)

    def _erase_line(self, mode: int) -> None:
        line = self._lines[self._row]
        cells = line.cells
        if mode == 0:
            del cells[self._col :]
            line.wrapped = False
        elif mode == 1:
            stop = min(len(cells), self._col + 1)
            cells[:stop] = [" "] * stop
        else:
            cells.clear()
            line.wrapped = False

    def _erase_display(self, mode: int) -> None:
        if mode == 0:
            self._erase_line(0)
            del self._lines[self._row + 1 :]
        elif mode == 1:
            for line in self._lines[: self._row]:
                line.cells.clear()
                line.wrapped = False
            self._erase_line(1)
        else:
            self._clear_screen()

    def _clear_screen(self) -> None:
        """Clear the window; what it showed is handed to ``sink`` first."""
        row, col = self._row, self._col
        self.flush()
        self._goto_row(row)
        self._col = col


_ESCAPES: Final = re.compile(
    # OSC ... BEL/ST, or cut short by CAN, SUB or another sequence's ESC
    r"\x1b\][^\x07\x18\x1a\x1b]*(?:\x07|\x1b\\|[\x18\x1a]|(?=\x1b[^\\]))"
    r"|\x1b[P_^X][^\x18\x1a\x1b]*(?:\x1b\\|[\x18\x1a]|(?=\x1b[^\\]))"  # DCS/APC/PM/SOS
    r"|\x1b\[[0-?]*[ -/]*[@-~]"  # CSI
    r"|\x1b[ -/]*[0-~]"  # other ESC sequences
    r"|[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]"  # other controls (keep \t \n \r)
)


def strip_escapes(text: str) -> str:
    """Text without escape sequences or control characters; ``\\r\\n`` becomes ``\\n``."""
    return _ESCAPES.sub("", text).replace("\r\n", "\n")
