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
still removed), and the output does not depend on the split. What is held is
bounded by :data:`MAX_QUERY`. A longer sequence is still recognised, with a few
characters of state, never held:

* a string (OSC, DCS, APC) is judged on its first :data:`MAX_QUERY` characters
  and then removed whole, up to its end, or passed through as it arrives. Removed:
  one that asks there already, and every OSC 4, 5, 10 to 19 and 52 (colours and
  the clipboard: a ``?`` may still follow; a long one is dropped from a replay
  even when it only sets), a DCS ``$q``/``+q``, a kitty-graphics APC whose first
  field asks (``a=q``) or has not ended;
* a CSI passes through as it arrives, and when its final character makes it a
  query, that character is replaced by CAN, which cancels the sequence in the
  terminal (a CSI carries nothing a terminal acts on before its final).

Pure: no I/O, no Trio.
"""

from __future__ import annotations

import re
from typing import Final

__all__ = ["MAX_QUERY", "QueryFilter", "strip_queries"]

#: Longest escape sequence held back while incomplete (characters; one more for the
#: ESC that may start a string's ST); a longer one is judged without being held.
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
_CAN: Final = "\x18"
#: OSCs a terminal answers with a report when a field is ``?`` (xterm: palette, special
#: colours, dynamic colours, clipboard).
_ASKING_OSC: Final = frozenset({"4", "5", *(str(n) for n in range(10, 20)), "52"})
#: A long CSI's parameters and intermediates, as far as they go.
_PARAMS: Final = re.compile(r"[\x30-\x3f]*")
_INTERMEDIATES: Final = re.compile(r"[\x20-\x2f]*")
_LEADING_ZEROS: Final = re.compile(r"\A0+(?=[0-9])")


def _first_params(params: str) -> str:
    """A long CSI's parameters as remembered: the leading zeros of the first one
    dropped (``CSI 0…014 t`` asks as ``CSI 14 t`` does), then at most MAX_QUERY."""
    marker = 1 if params[:1] in ("?", ">", "=", "<") else 0
    return (params[:marker] + _LEADING_ZEROS.sub("", params[marker:], count=1))[:MAX_QUERY]


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
        return params.split(";", 1)[0].lstrip("0") in _WINDOW_REPORTS
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
    if kind == "_":
        return body.startswith("G") and "a=q" in body.split(";", 1)[0]
    return False  # SOS, PM


def _long_string_is_query(kind: str, head: str) -> bool:
    """Whether a string longer than :data:`MAX_QUERY` whose body starts with ``head``
    (its first ``MAX_QUERY - 2`` characters) is removed: it asks, or may still ask."""
    if kind == "]":
        fields = head.split(";")
        return fields[0] in _ASKING_OSC or "?" in fields[1:] or fields[-1][:1] == "?"
    if kind == "_":
        return head.startswith("G") and ("a=q" in head.split(";", 1)[0] or ";" not in head)
    return _string_is_query(kind, head)


class QueryFilter:
    """Feed it output in pieces; it returns the same output without terminal queries.

    State between pieces: at most :data:`MAX_QUERY` (+1) characters of an incomplete
    escape sequence, plus, inside a longer one, what to do with the rest of it: a
    string's mode, or a CSI's first parameters and intermediates (a few characters).
    """

    def __init__(self) -> None:
        self._held = ""
        #: Inside a long OSC/DCS/APC string: "pass" it or "drop" it, up to its end;
        #: inside a long CSI: "params" or "inter" (its intermediates); else "".
        self._long = ""
        self._csi_params = ""  # a long CSI's first parameters (at most MAX_QUERY)
        self._csi_inter = ""  # ... and its first intermediates (at most 2)

    def feed(self, text: str) -> str:
        data = self._held + text
        self._held = ""
        out: list[str] = []
        i = 0
        n = len(data)
        if self._long:
            i = self._go_on(data, out)
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
            end, kept = self._sequence(data, j)
            if end is None:  # incomplete: hold it back, unless it is too long to
                long = n - j - (data.endswith(_ESC) and n - j > 2)
                if long <= MAX_QUERY:
                    self._held = data[j:]
                    break
                self._start_long(data, j, out)
                i = self._go_on(data, out, j + MAX_QUERY)
                continue
            out.append(kept)
            i = end
        return "".join(out)

    def flush(self) -> str:
        """What is held back (an incomplete sequence), as is; the filter starts afresh."""
        held = self._held if self._long != "drop" else ""
        self._held, self._long = "", ""
        return held

    def _start_long(self, data: str, j: int, out: list[str]) -> None:
        """``data[j:]`` is an incomplete sequence longer than :data:`MAX_QUERY`: decide
        on its first MAX_QUERY characters what to do with it; they go out if it passes."""
        kind = data[j + 1]
        head = data[j : j + MAX_QUERY]
        if kind == "[":
            self._long = "params"
            self._csi_params = self._csi_inter = ""
            out.append(head[:2])
            self._csi_part(head, 2, out)
        else:
            self._long = "drop" if _long_string_is_query(kind, head[2:]) else "pass"
            if self._long == "pass":
                out.append(head)

    def _go_on(self, data: str, out: list[str], start: int = 0) -> int:
        """Go on with a long sequence from ``data[start]``; return where what follows it
        starts (``len(data)`` while it goes on)."""
        n = len(data)
        if self._long in ("pass", "drop"):
            end = _string_end(data, start)
            passing = self._long == "pass"
            if end is None:
                keep = 1 if data.endswith(_ESC) and n - 1 >= start else 0  # maybe its ST
                if passing:
                    out.append(data[start : n - keep])
                self._held = data[n - keep :]
                return n
            if passing:
                out.append(data[start:end])
            self._long = ""
            return end
        i = self._csi_part(data, start, out)
        if i == n:
            return n
        self._long = ""
        final = data[i]
        if not "@" <= final <= "~":
            return i  # broken: read afresh (as a whole one's would be)
        asks = _csi_is_query(self._csi_params, self._csi_inter, final)
        out.append(_CAN if asks else final)
        return i + 1

    def _csi_part(self, data: str, start: int, out: list[str]) -> int:
        """Pass on a long CSI's parameters and intermediates from ``data[start]``,
        remembering the first ones; return where they stop."""
        i = start
        if self._long == "params":
            i = _PARAMS.match(data, i).end()  # type: ignore[union-attr]
            if len(self._csi_params) < MAX_QUERY:
                self._csi_params = _first_params(self._csi_params + data[start:i])
            if i == len(data):
                out.append(data[start:i])
                return i
            self._long = "inter"
        mid = i
        i = _INTERMEDIATES.match(data, i).end()  # type: ignore[union-attr]
        if len(self._csi_inter) < 2:
            self._csi_inter = (self._csi_inter + data[mid : min(i, mid + 2)])[:2]
        out.append(data[start:i])
        return i

    def _sequence(self, data: str, j: int) -> tuple[int | None, str]:
        """``(end, kept)`` of the escape sequence at ``data[j]`` (ESC): what of it goes
        out (``""`` for a query); end None if it is cut short by the end of ``data``."""
        if j + 1 >= len(data):
            return None, ""
        kind = data[j + 1]
        if kind == "[":
            match = _CSI.match(data, j)
            if match is None:
                if _CSI_PARTIAL.match(data, j):
                    return None, ""
                return j + 2, data[j : j + 2]  # malformed: pass ESC [ on, then the rest as text
            end = match.end()
            params, inter, final = match.groups()
            if end - 1 - j > MAX_QUERY:  # long: as when it comes in pieces
                asks = _csi_is_query(_first_params(params), inter[:2], final)
                return end, data[j : end - 1] + (_CAN if asks else final)
            return end, "" if _csi_is_query(params, inter, final) else data[j:end]
        if kind in ("]", "P", "_", "^", "X"):
            stop = _string_end(data, j + 2)
            if stop is None:
                return None, ""
            end = stop
            body = data[j + 2 : end].removesuffix(_BEL).removesuffix("\x1b\\")
            if 2 + len(body) > MAX_QUERY:  # long: as when it comes in pieces
                asks = _long_string_is_query(kind, body[: MAX_QUERY - 2])
            else:
                asks = _string_is_query(kind, body)
            return end, "" if asks else data[j:end]
        if kind == "Z":
            return j + 2, ""
        if kind == _ESC or kind < " ":
            return j + 1, _ESC  # a lone ESC: what follows is read afresh
        return j + 2, data[j : j + 2]  # any other two-character escape, or ESC + intermediate


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
