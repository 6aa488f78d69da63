"""Incremental escape scanner: pty bytes in, decoded text and events out.

Why this module exists: the pty delivers an arbitrary byte stream in ~4 KB
reads. AHP requires that shell-integration sequences (OSC 633, and the OSC 133
marks) never reach ``terminal/data``, while every other byte reaches it
unchanged, even when a sequence or a UTF-8 character is split across reads. The
command tracker also needs the integration marks as events, in order with the
text. This module does exactly that and nothing else: no I/O, no clock, no
terminal emulation (CSI is never interpreted). The API is h11's::

    scanner = Scanner()
    for chunk in chunks:
        for event in scanner.feed(chunk):
            ...
    events = scanner.close()        # end of stream

Theory of operation
-------------------
Only OSC sequences (``ESC ]`` ... ``BEL`` or ``ESC \\``) matter. A chunk with
no ``ESC`` at all (one ``memchr``), or with no ``ESC ]`` and no trailing ``ESC``,
while no state is held from the previous chunk, goes to the incremental UTF-8
decoder in a single call: that is the fast path for ordinary output, colours
included. Otherwise one compiled pattern finds each ``ESC ]`` together with its
payload (up to the first ``BEL`` or ``ESC``) and its terminator, and the bytes
between OSCs go to the decoder in bulk; there is never a per-byte Python loop.

Each complete OSC is classified by its payload:

* ``633;...`` (any letter) and ``133;A|B|C|D[;...]``: shell integration. The
  sequence is removed from the text; recognised ones yield an event (a 133 mark
  has ``osc=133``, so the tracker can tell the two families apart).
* everything else passes through byte for byte, with its own terminator. OSC
  0/2 also yield :class:`TitleChanged`, OSC 7 and OSC 1337 ``CurrentDir=``
  :class:`CwdReported`. An event is emitted *after* the text that precedes it
  (including the sequence itself when it passes through). A cwd is reported only
  when it is one of this machine: an OSC 7 naming another host (``file://h/p``
  from a shell inside ``ssh``: not a path here) is not, nor is a path with a NUL
  or another control character in it (decoded). ``633;P;Cwd=`` is the exception:
  only a NUL (no path holds one) makes it no cwd, because our own shells report
  their real ``$PWD`` with it, and a directory's name may hold a newline; the
  tracker (:mod:`ahp.vt.integration`) takes such a cwd only when it is signed
  with the terminal's nonce. (The reported URI percent-encodes every control
  character: ``%0A``.)

Decisions for bad input (each is deterministic in the byte stream, so the
output never depends on how the stream was split into chunks):

* **Malformed OSC** (an ``ESC`` not followed by ``\\`` inside it): the ``ESC``
  ends the OSC, as in xterm and xterm.js, and then starts the next sequence.
  A malformed shell-integration OSC is dropped without an event (it can be
  neither trusted nor shown); any other malformed OSC is released as text,
  unchanged and without an event.
* **Overlong OSC** (its terminator does not begin within the first
  ``max_pending`` bytes, counted from its ``ESC``): an ordinary OSC's first
  ``max_pending - 1`` bytes are released as text and scanning continues after
  them. A shell-integration OSC is instead swallowed up to its terminator
  *without buffering* (a flag, not a buffer), as a real terminal would swallow
  it; so a very long ``633;E`` command line never leaks into the output and
  memory stays bounded.
* **End of stream** (:meth:`Scanner.close`): a held ordinary OSC or lone ``ESC``
  is released as text; a held shell-integration OSC is dropped.
* **Joins**: removing a sequence must not create a new one out of its
  neighbours (``ESC`` + removed + ``]633;...`` would read as ``ESC]633;``). When
  the text just before a removed sequence is an unfinished escape (a bare
  ``ESC``, or a malformed OSC the removed sequence's ``ESC`` cut short), the
  removed sequence is replaced by ``ESC \\`` (ST), which leaves a VT parser in
  the state the original ``ESC`` left it in. Valid input never needs this.

Memory: the scanner holds at most ``max_pending`` bytes (:attr:`pending_size`)
plus the incremental decoder's < 4 bytes, whatever the input.
"""

from __future__ import annotations

import codecs
import re
from typing import Final

from ahp.protocol.uri import file_uri_to_path, names_this_machine, path_to_file_uri
from ahp.vt.events import (
    CommandFinished,
    CommandLine,
    CommandStart,
    CwdReported,
    Event,
    PromptEnd,
    PromptStart,
    Property,
    Text,
    TitleChanged,
)

__all__ = ["MAX_PENDING_ESCAPE", "MIN_PENDING_ESCAPE", "Scanner", "has_control", "unescape_value"]

#: Bound on an OSC held back while waiting for its terminator: the terminator
#: must begin within this many bytes of the OSC's ``ESC``, else it is overlong.
MAX_PENDING_ESCAPE: Final = 4096
#: Smallest accepted bound: enough to classify any payload by its prefix.
MIN_PENDING_ESCAPE: Final = 16

_ESC: Final = 0x1B
_BEL: Final = 0x07
_BACKSLASH: Final = 0x5C
_OSC: Final = b"\x1b]"
_ST: Final = b"\x1b\\"
_TERMINATOR: Final = re.compile(rb"[\x07\x1b]")
_ESCAPED: Final = re.compile(rb"\\(?:(\\)|x([0-9a-fA-F]{2}))")
_EXIT_CODE: Final = re.compile(rb"[+-]?[0-9]{1,18}")
_TITLE_HEADS: Final = (b"0;", b"2;")
#: A control character (C0, DEL, C1) in a reported cwd's decoded path.
_CONTROL: Final = re.compile("[\x00-\x1f\x7f-\x9f]")

# One immutable instance per mark and family (the family tells the command tracker which
# integration sent the mark; see ahp.vt.events.OscFamily).
_MARKS: Final[dict[bytes, Event]] = {
    b"A": PromptStart(),
    b"B": PromptEnd(),
    b"C": CommandStart(),
}
_MARKS_133: Final[dict[bytes, Event]] = {
    b"A": PromptStart(osc=133),
    b"B": PromptEnd(osc=133),
    b"C": CommandStart(osc=133),
}
#: The commonest complete payloads, classified by one dict lookup.
_FIXED: Final[dict[bytes, tuple[bool, Event | None]]] = {
    **{b"633;" + k: (True, v) for k, v in _MARKS.items()},
    **{b"133;" + k: (True, v) for k, v in _MARKS_133.items()},
    b"633;D": (True, CommandFinished(None)),
    b"133;D": (True, CommandFinished(None, osc=133)),
    **{b"633;D;%d" % code: (True, CommandFinished(code)) for code in (0, 1, 2, 126, 127, 130)},
    **{
        b"133;D;%d" % code: (True, CommandFinished(code, osc=133))
        for code in (0, 1, 2, 126, 127, 130)
    },
}


class Scanner:
    """Split a pty byte stream into decoded :class:`Text` and events.

    One scanner per terminal; it owns one incremental UTF-8 decoder
    (``errors="replace"``). Not thread-safe, never blocks.

    Args:
        max_pending: Bound on the bytes held back for an unterminated OSC
            (at least :data:`MIN_PENDING_ESCAPE`).
        last_titles: Report only the last of a run of title changes (OSC 0/2) that
            no other sequence separates within one :meth:`feed`, at its place; the
            sequences themselves still pass through. The text is the same, and so is
            the last title; what is saved is the work per dropped title (a shell
            retitling its terminal on every line made that ~8 us a line, issue 25).
            Which titles are dropped depends on how the stream was split, so the
            default (every title an event) is what the split-invariance contract
            above states.
        hostname: This machine's name (``socket.gethostname()``, passed in: no I/O
            here). An OSC 7 ``file://`` URI reports a cwd only when its host is
            empty, ``localhost``, a loopback address or this name.
    """

    def __init__(
        self,
        *,
        max_pending: int = MAX_PENDING_ESCAPE,
        last_titles: bool = False,
        hostname: str = "",
    ) -> None:
        if max_pending < MIN_PENDING_ESCAPE:
            raise ValueError(f"max_pending must be >= {MIN_PENDING_ESCAPE}, got {max_pending}")
        self._max_pending = max_pending
        self._last_titles = last_titles
        self._hostname = hostname
        # One match = one OSC: ESC ] payload [terminator]. The payload stops at
        # the first BEL or ESC, or after max_pending - 3 bytes; group 2 is the
        # terminator when it is a complete BEL or ST.
        self._osc = _osc_pattern(max_pending)
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        # Invariant: len(_pending) <= _max_pending. It is empty, a lone ESC, or
        # the start of an OSC (b"\x1b]..."), possibly ending in the ESC of a
        # would-be ST.
        self._pending = b""
        # The output before _pending[0] ends in an unfinished escape ("Joins" above).
        # Invariant: False whenever _pending is empty.
        self._pending_open = False
        # Inside an overlong shell-integration OSC: drop bytes up to its terminator.
        self._discarding = False

    @property
    def pending_size(self) -> int:
        """Bytes held back for an incomplete escape sequence (<= ``max_pending``)."""
        return len(self._pending)

    def feed(self, data: bytes) -> list[Event]:
        """Scan the next chunk of the stream.

        Args:
            data: The bytes read from the pty (any size, may be empty).

        Returns:
            Events in stream order. Text of this chunk between two events comes
            out as one :class:`Text`; empty text is never emitted. A tail that
            may begin an escape sequence (or a partial UTF-8 character) is held
            until a later ``feed`` or :meth:`close`.
        """
        if not self._pending and not self._discarding:
            # Fast path: ordinary output (colours included), one decoder call.
            # memchr for ESC first: most bulk output has none at all.
            if data.find(b"\x1b") < 0:
                text = self._decoder.decode(data)
                return [Text(text)] if text else []
            m = self._osc.search(data)
            if m is None and data[-1] != _ESC:
                text = self._decoder.decode(data)
                return [Text(text)] if text else []
            return self._scan(data, 0, m, False)
        buf = self._pending + data
        open0 = self._pending_open
        self._pending, self._pending_open = b"", False
        pos = 0
        if self._discarding:
            pos = self._skip_discarded(buf, 0)
        return self._scan(buf, pos, self._osc.search(buf, pos), open0)

    def close(self) -> list[Event]:
        """End of stream: release whatever is held back and flush the decoder.

        Returns:
            At most one :class:`Text`. The scanner is reset and may be reused
            for a new stream.
        """
        held = self._pending
        discarding = self._discarding
        self._pending, self._pending_open, self._discarding = b"", False, False
        if discarding or (held[:2] == _OSC and _is_shell_integration(held[2:].rstrip(b"\x1b"))):
            held = b""
        text = self._decoder.decode(held, True)
        return [Text(text)] if text else []

    # -- internals ---------------------------------------------------------------

    def _scan(self, buf: bytes, pos: int, m: re.Match[bytes] | None, open0: bool) -> list[Event]:
        """Scan ``buf[pos:]``, given ``m``, the first OSC match at or after ``pos``.

        ``open0`` is the "unfinished escape before index 0" flag recorded with
        the bytes held from the previous chunk.
        """
        events: list[Event] = []
        strs: list[str] = []  # decoded text not yet emitted
        raw: list[bytes] = []  # text bytes not yet decoded
        n = len(buf)
        search = self._osc.search
        decode = self._decoder.decode
        frag_end = -1  # end of the last malformed OSC released as text
        coalesce = self._last_titles
        title: bytes | None = None  # last_titles: the payload of the title not yet reported
        title_at = 0  # ... which follows raw[:title_at]
        while m is not None:
            i = m.start()
            if i > pos:
                raw.append(buf[pos:i])
            # Does the output just before this ESC end in an unfinished escape
            # (a bare ESC, or a malformed OSC this ESC cut short)? See "Joins".
            open_before = open0 if i == 0 else (i == frag_end or buf[i - 1] == _ESC)
            if m.lastindex == 2:
                # Complete: terminated by BEL or ST.
                pos = m.end()
                payload = m.group(1)
                if coalesce and payload[:2] in _TITLE_HEADS:
                    # A title passes through; only the run's last one becomes an event.
                    raw.append(buf[i:pos])
                    title, title_at = payload, len(raw)
                    m = search(buf, pos)
                    continue
                if title is not None:
                    self._put_title(events, strs, raw, title, title_at)
                    title = None
                known = _FIXED.get(payload)
                remove, event = known if known is not None else _interpret(payload, self._hostname)
                if remove:
                    # _drop inlined (hot: shell marks come with every prompt), then the event.
                    if open_before:
                        raw.append(_ST)
                    text = decode(b"".join(raw) if raw else b"", True)
                    raw.clear()
                    if text:
                        strs.append(text)
                    if event is not None:
                        if strs:
                            events.append(Text("".join(strs)))
                            strs.clear()
                        events.append(event)
                else:
                    raw.append(buf[i:pos])
                    if event is not None:
                        self._decode(strs, raw, False)
                        _emit(events, strs)
                        events.append(event)
            else:
                t = m.end(1)  # first byte after the payload
                if t == n or (t == n - 1 and buf[t] == _ESC):
                    # Unterminated so far (maybe ending in the ESC of an ST): hold.
                    # Bounded: the pattern caps the payload at max_pending - 3.
                    self._pending = buf[i:]
                    self._pending_open = open_before
                    pos = n
                    break
                if title is not None:
                    self._put_title(events, strs, raw, title, title_at)
                    title = None
                if buf[t] == _ESC:
                    # Malformed: an ESC that is not ST ends the OSC, then is scanned again.
                    if _is_shell_integration(m.group(1)):
                        self._drop(strs, raw, open_before)
                    else:
                        raw.append(buf[i:t])
                        frag_end = t
                    pos = t
                elif _is_shell_integration(m.group(1)):
                    # Overlong shell integration: swallow it up to its terminator.
                    self._drop(strs, raw, open_before)
                    self._discarding = True
                    pos = self._skip_discarded(buf, t)
                else:
                    # Overlong: no terminator within max_pending bytes; release.
                    raw.append(buf[i:t])
                    pos = t
            m = search(buf, pos)
        if pos < n:
            if buf[n - 1] == _ESC:
                # A lone trailing ESC may start an OSC: hold it.
                last = n - 1
                raw.append(buf[pos:last])
                self._pending = b"\x1b"
                if last == 0:
                    self._pending_open = open0
                else:
                    self._pending_open = last == frag_end or buf[last - 1] == _ESC
            else:
                raw.append(buf[pos:])
        if title is not None:
            self._put_title(events, strs, raw, title, title_at)
        self._decode(strs, raw, False)
        _emit(events, strs)
        return events

    def _put_title(
        self, events: list[Event], strs: list[str], raw: list[bytes], payload: bytes, at: int
    ) -> None:
        """Report the title ``payload`` (``last_titles``) after the text before it:
        ``strs`` and ``raw[:at]``, which ends with the title's own sequence."""
        before = raw[:at]
        del raw[:at]
        self._decode(strs, before, False)
        _emit(events, strs)
        events.append(TitleChanged(payload[2:].decode("utf-8", "replace")))

    def _skip_discarded(self, buf: bytes, pos: int) -> int:
        """Drop the rest of an overlong shell-integration OSC; return where text resumes."""
        n = len(buf)
        m = _TERMINATOR.search(buf, pos)
        if m is None:
            return n
        t = m.start()
        if buf[t] == _BEL:
            self._discarding = False
            return t + 1
        if t + 1 == n:
            self._pending, self._pending_open = b"\x1b", False
            return n
        self._discarding = False
        return t + 2 if buf[t + 1] == _BACKSLASH else t

    def _decode(self, strs: list[str], raw: list[bytes], final: bool) -> None:
        if raw:
            data = raw[0] if len(raw) == 1 else b"".join(raw)
            raw.clear()
        else:
            data = b""
        text = self._decoder.decode(data, final)
        if text:
            strs.append(text)

    def _drop(self, strs: list[str], raw: list[bytes], open_before: bool) -> None:
        """Account for a sequence dropped without an event (see the inlined copy in _scan)."""
        if open_before:
            raw.append(_ST)
        # The dropped ESC ends any partial UTF-8 character before it, exactly as
        # it would have if the sequence had stayed in the text.
        self._decode(strs, raw, True)


def _osc_pattern(max_pending: int) -> re.Pattern[bytes]:
    # The terminator must begin within the first max_pending bytes of the OSC,
    # so the payload (from offset 2) has at most max_pending - 3 bytes, and a
    # held OSC (payload plus a trailing ESC) at most max_pending bytes.
    return re.compile(rb"\x1b\]([^\x07\x1b]{0,%d})(\x07|\x1b\\)?" % (max_pending - 3))


def _emit(events: list[Event], strs: list[str]) -> None:
    if strs:
        events.append(Text(strs[0] if len(strs) == 1 else "".join(strs)))
        strs.clear()


def _is_shell_integration(payload: bytes) -> bool:
    """Whether an OSC payload (after ``ESC ]``) is one the scanner removes."""
    if payload.startswith(b"633;"):
        return True
    if payload.startswith(b"133;"):
        return payload[4:].partition(b";")[0] in (b"A", b"B", b"C", b"D")
    return False


def _interpret(payload: bytes, hostname: str) -> tuple[bool, Event | None]:
    """Classify a complete OSC payload: (remove it from the text?, event or None)."""
    head = payload[:4]
    if head == b"633;":
        return True, _parse_633(payload[4:])
    if head == b"133;":
        code, _, args = payload[4:].partition(b";")
        mark = _MARKS_133.get(code)
        if mark is not None:
            return True, mark
        if code == b"D":
            return True, CommandFinished(_parse_exit_code(args), osc=133)
        return False, None
    head = payload[:2]
    if head in (b"0;", b"2;"):
        return False, TitleChanged(payload[2:].decode("utf-8", "replace"))
    if head == b"7;":
        uri = _osc7_uri(payload[2:], hostname)
        return False, None if uri is None else CwdReported(uri)
    if payload.startswith(b"1337;CurrentDir="):
        uri = _path_uri(payload[16:].decode("utf-8", "surrogateescape"))
        return False, None if uri is None else CwdReported(uri)
    return False, None


def _parse_633(rest: bytes) -> Event | None:
    code, _, args = rest.partition(b";")
    if code == b"C" and args:
        return CommandStart(nonce=_nonce(args))
    mark = _MARKS.get(code)
    if mark is not None:
        return mark
    if code == b"D":
        field, sep, nonce = args.partition(b";")
        return CommandFinished(_parse_exit_code(field), nonce=_nonce(nonce) if sep else None)
    if code == b"E":
        line, sep, nonce = args.partition(b";")
        return CommandLine(unescape_value(line), _nonce(nonce) if sep else None)
    if code == b"P":
        # (A value's own ";" is escaped, "\x3b": the first raw one starts the nonce.)
        raw, sep, signed = args.partition(b";")
        signer = _nonce(signed) if sep else None
        # (A byte that is not UTF-8 stays itself, as a lone surrogate, until the cwd's
        # URI writes it %XX: a directory named so is reported as it is.)
        key, eq, value = unescape_value(raw, errors="surrogateescape").partition("=")
        if not eq:
            return None
        if key == "Cwd":
            uri = _path_uri(value, controls=True)
            return None if uri is None else CwdReported(uri, shell_integration=True, nonce=signer)
        key, value = (
            text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
            for text in (key, value)
        )
        return Property(key, value, nonce=signer)
    return None  # F, G, H, ...: swallowed


def _nonce(raw: bytes) -> str:
    return raw.decode("utf-8", "replace")


def _parse_exit_code(args: bytes) -> int | None:
    field = args.partition(b";")[0].strip()
    if _EXIT_CODE.fullmatch(field) is None:
        return None
    return int(field)


def unescape_value(raw: bytes, *, errors: str = "replace") -> str:
    """Undo the shell-integration escaping of ``633;E`` / ``633;P`` values.

    ``\\\\`` becomes ``\\`` and ``\\xNN`` (two hex digits, any case) the byte
    ``0xNN``; any other backslash is kept as is. The bytes are then decoded as
    UTF-8 with ``errors`` (replacement; ``"surrogateescape"`` for a path).
    """
    if b"\\" in raw:
        raw = _ESCAPED.sub(_unescape_match, raw)
    return raw.decode("utf-8", errors)


def _unescape_match(m: re.Match[bytes]) -> bytes:
    if m.group(1) is not None:
        return b"\\"
    return bytes((int(m.group(2), 16),))


def _path_uri(path: str, *, controls: bool = False) -> str | None:
    if "\x00" in path or (not controls and _CONTROL.search(path) is not None):
        return None  # a NUL (no path has one) or another control: not a cwd to report
    try:
        return path_to_file_uri(path)
    except ValueError:
        return None  # relative or empty: not a usable cwd


def has_control(uri: str) -> bool:
    """Whether the path of a reported cwd (a ``file:`` URI) holds a control
    character (C0, DEL, C1) once decoded."""
    try:
        return _CONTROL.search(file_uri_to_path(uri)) is not None
    except ValueError:
        return False


def _osc7_uri(raw: bytes, hostname: str) -> str | None:
    """Normalise an OSC 7 report to ``file:///path``; ``None`` when it names another
    host than this machine (``hostname``), or is no absolute path."""
    text = raw.decode("utf-8", "surrogateescape")
    if text.startswith("/"):
        return _path_uri(text)
    lowered = text.lower()
    for scheme in ("kitty-shell-cwd://", "file://"):
        if lowered.startswith(scheme):
            slash = text.find("/", len(scheme))
            if slash < 0 or not names_this_machine(lowered[len(scheme) : slash], hostname):
                return None
            if scheme == "kitty-shell-cwd://":
                return _path_uri(text[slash:])  # kitty's variant: the path unencoded
            break
    try:
        return _path_uri(file_uri_to_path(text))
    except ValueError:
        return None
