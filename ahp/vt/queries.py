"""Remove terminal queries from recorded output, so that replaying it asks the terminal nothing.

Why: ``attach`` draws a terminal's history by writing the recorded output to the
person's terminal. That output contains the questions programs asked their
terminal when they ran (``vi`` asks for the cursor position, device attributes,
colours, …). Written again, they make the *local* terminal answer, and its
answers arrive as keystrokes — typed into the remote shell, or left in the
person's own shell. The questions were answered long ago; replaying them is
never right. :class:`QueryFilter` drops them and keeps everything else.

What counts as a query (each makes a terminal write a report to its input):

* ENQ (answerback) and ``ESC Z`` (DECID);
* CSI: DSR/CPR (final ``n``), DA1/DA2/DA3 (``c`` with no, ``>`` or ``=`` prefix),
  DECRQM (``$p``), XTVERSION (``>q``), window reports (``t`` with 11, 13, 14, 15,
  16, 18, 19, 20 or 21), DECREQTPARM (``x``), DECRQPSR (``$w``), DECRQTSR
  (``$u``), DECRQCRA (``*y``), XTQMODKEYS (``?m``), XTSMGRAPHICS (``?S``) and the
  kitty keyboard query (``?u``);
* OSC with a ``?`` field (colour queries ``10;?``, ``11;?``, ``4;N;?``, clipboard
  ``52;c;?``, …);
* DCS ``$q`` (DECRQSS) and ``+q`` (XTGETTCAP); APC kitty-graphics queries (``a=q``).

Splits: the filter is fed the output in any pieces; an escape sequence cut
between pieces is held back until it is complete (so a query split anywhere is
still removed). What is held is bounded by :data:`MAX_QUERY`: a sequence longer
than that is not a query, and it passes through unchanged as it arrives.

Pure: no I/O, no Trio.
"""

from __future__ import annotations

import re
from typing import Final

__all__ = ["MAX_QUERY", "QueryFilter", "strip_queries"]

#: Longest escape sequence held back while incomplete (characters); every query is
#: far shorter, so a longer one passes through as it arrives.
MAX_QUERY: Final = 256

_ESC: Final = "\x1b"
_ENQ: Final = "\x05"
_BEL: Final = "\x07"
#: What ends (BEL, ESC \\) or aborts (CAN, SUB, ESC) an OSC/DCS/APC string.
_STRING_STOP: Final = re.compile(r"[\x07\x18\x1a\x1b]")
#: A complete CSI sequence: parameters, intermediates, final byte.
_CSI: Final = re.compile(r"\x1b\[([\x30-\x3f]*)([\x20-\x2f]*)([\x40-\x7e])")
_CSI_PARTIAL: Final = re.compile(r"\x1b\[[\x30-\x3f]*[\x20-\x2f]*\Z")
#: The fast path: text and complete sequences that are never queries (CSI without
#: prefix or intermediates and a final other than c, n, t, x; DEC private modes;
#: charset designations; two-character escapes other than ESC Z). Matching them in
#: one regex run keeps colour-heavy output from going through Python per sequence.
_HARMLESS: Final = re.compile(
    r"(?:[^\x1b\x05]+"
    r"|\x1b\[[0-9;:]*[@-bd-mo-su-wyz{|}~]"
    r"|\x1b\[\?[0-9;]*[hlr]"
    r"|\x1b[()*+][0-9A-Za-z]"
    r"|\x1b[=>78DEHM])+"
)
_WINDOW_REPORTS: Final = frozenset({"11", "13", "14", "15", "16", "18", "19", "20", "21"})


def _csi_is_query(params: str, intermediates: str, final: str) -> bool:
    prefix = params[:1] if params[:1] in ("?", ">", "=", "<") else ""
    if final == "n":
        return True
    if final == "c":
        return prefix in ("", ">", "=") and not intermediates
    if intermediates == "$":
        return final in "pwu"
    if intermediates == "*":
        return final == "y"
    if intermediates:
        return False
    if final == "q":
        return prefix == ">"
    if final == "t":
        return params.split(";", 1)[0] in _WINDOW_REPORTS
    if final == "x":
        return prefix == ""
    if final in "mSu":
        return prefix == "?"
    return False


def _string_is_query(kind: str, body: str) -> bool:
    """Whether an OSC (``]``), DCS (``P``) or APC (``_``) string with ``body`` asks something."""
    if kind == "]":
        return "?" in body.split(";")[1:]
    if kind == "P":
        return body.startswith(("$q", "+q"))
    return body.startswith("G") and "a=q" in body.split(";", 1)[0]


class QueryFilter:
    """Feed it output in pieces; it returns the same output without terminal queries.

    State between pieces: at most :data:`MAX_QUERY` characters of an incomplete
    escape sequence, plus whether a long string sequence is passing through.
    """

    def __init__(self) -> None:
        self._held = ""
        #: Inside a long OSC/DCS/APC string that is passing through, up to its end.
        self._passing = False

    def feed(self, text: str) -> str:
        data = self._held + text
        self._held = ""
        out: list[str] = []
        i = 0
        n = len(data)
        if self._passing:
            end = _string_end(data, 0)
            if end is None:
                keep = 1 if data.endswith(_ESC) else 0  # maybe the start of ST
                self._held = data[n - keep :]
                return data[: n - keep]
            out.append(data[:end])
            self._passing = False
            i = end
        while i < n:
            harmless = _HARMLESS.match(data, i)
            if harmless is not None:
                out.append(harmless.group())
                i = harmless.end()
                if i >= n:
                    break
            j = i  # an ESC or ENQ that starts something else
            if data[j] == _ENQ:
                i = j + 1
                continue
            end, drop = self._sequence(data, j)
            if end is None:  # incomplete: hold it back, unless it is too long to be a query
                if n - j <= MAX_QUERY:
                    self._held = data[j:]
                    break
                out.append(data[j:])
                self._passing = data[j + 1 : j + 2] in ("]", "P", "_")
                if self._passing and data.endswith(_ESC):
                    out[-1] = out[-1][:-1]
                    self._held = _ESC
                break
            if not drop:
                out.append(data[j:end])
            i = end
        return "".join(out)

    def flush(self) -> str:
        """What is held back (an incomplete sequence), as is; the filter starts afresh."""
        held, self._held, self._passing = self._held, "", False
        return held

    def _sequence(self, data: str, j: int) -> tuple[int | None, bool]:
        """``(end, is_query)`` of the escape sequence at ``data[j]`` (ESC); end None if cut."""
        if j + 1 >= len(data):
            return None, False
        kind = data[j + 1]
        if kind == "[":
            match = _CSI.match(data, j)
            if match is None:
                if _CSI_PARTIAL.match(data, j):
                    return None, False
                return j + 2, False  # malformed: pass the ESC [ on, then the rest as text
            csi_end = match.end()
            return csi_end, csi_end - j <= MAX_QUERY and _csi_is_query(*match.groups())
        if kind in ("]", "P", "_", "^", "X"):
            end = _string_end(data, j + 2)
            if end is None:
                return None, False
            body = data[j + 2 : end].removesuffix(_BEL).removesuffix("\x1b\\")
            short = end - j <= MAX_QUERY
            return end, short and kind in ("]", "P", "_") and _string_is_query(kind, body)
        if kind == "Z":
            return j + 2, True
        if kind == _ESC or kind < " ":
            return j + 1, False  # a lone ESC: what follows is read afresh
        return j + 2, False  # any other two-character escape (or ESC + intermediate + final)


def _string_end(data: str, start: int) -> int | None:
    """Index just past the terminator of a string sequence whose body starts at ``start``.

    BEL and ESC ``\\`` end it (included); CAN, SUB and an ESC starting anything else
    abort it (the string ends just before them). None when the data ends first.
    """
    match = _STRING_STOP.search(data, start)
    if match is None:
        return None
    i = match.start()
    c = data[i]
    if c == _BEL:
        return i + 1
    if c == _ESC:
        if i + 1 >= len(data):
            return None
        return i + 2 if data[i + 1] == "\\" else i
    return i  # CAN or SUB


def strip_queries(text: str) -> str:
    """``text`` without terminal queries; an incomplete sequence at its end is kept as is."""
    f = QueryFilter()
    return f.feed(text) + f.flush()
