"""asciicast v3: the recording format, encoded and decoded without I/O.

Why a pure module: the recorder (:mod:`ahp.record.recorder`) writes these lines,
``ahp-terminals play`` (:mod:`ahp.record.play`) and the tests read them back, and
a browser player (asciinema-player) reads the same files; one encoder and one
decoder, tested on their own (with property tests), keep the three in agreement.

The format (https://docs.asciinema.org/manual/asciicast/v3): newline-delimited
JSON. The first line is the header object: ``version`` 3, ``term`` ``{cols,
rows, type}``, and optionally ``timestamp`` (Unix seconds), ``idle_time_limit``,
``command``, ``title``, ``env``, ``tags``. Every following line is one event,
``[interval, code, data]``, the interval in seconds since the *previous* event
(the first: since the start). Codes: ``o`` output, ``i`` input, ``r`` resize
(``"COLSxROWS"``), ``m`` marker (a label), ``x`` exit (the status as a string).
Lines starting with ``#`` are comments. Unknown codes are kept by the decoder
(a newer writer's events are not an error).

This host's markers (see :func:`command_started` / :func:`command_finished`) carry
each detected command's line and exit code, and say when output was skipped
(:data:`SKIPPED_MARKER`) or the size bound ended the recording
(:func:`size_bound_marker`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, Final

import attrs
import orjson

__all__ = [
    "CODES",
    "MAX_LINE_BYTES",
    "CAUGHT_UP_PREFIX",
    "SKIPPED_MARKER",
    "Event",
    "Header",
    "RecordingError",
    "caught_up_marker",
    "command_finished",
    "command_started",
    "decode",
    "decode_event",
    "decode_header",
    "encode_event",
    "encode_header",
    "parse_command_marker",
    "size_bound_marker",
]

VERSION: Final = 3
#: Event codes this host writes (others are decoded and kept as they are).
CODES: Final = frozenset({"o", "i", "r", "m", "x"})
#: Marker written after the recorder fell behind and resynchronised: output between
#: the last event and this one is missing from the file (:func:`caught_up_marker`
#: says how much, and what follows at once).
SKIPPED_MARKER: Final = "output skipped: the recorder fell behind (disk too slow)"
#: The start of the marker of a resync that lost nothing (:func:`caught_up_marker`).
CAUGHT_UP_PREFIX: Final = "the recorder fell behind (disk too slow)"
#: Prefixes of the command markers (see :func:`command_started`).
COMMAND_PREFIX: Final = "$ "
EXIT_PREFIX: Final = "exit "
#: Longest line a reader takes (bytes, newline included): a longer one is not a
#: recording (``ahp-terminals play`` stops there, naming the line, instead of reading
#: an endless or newline-less file into memory). This host's recorder writes lines of
#: at most about 400 KB (:data:`ahp.record.recorder.RECORD_EVENT_CHARS`); asciinema's
#: are a read of the terminal each, a few KB.
MAX_LINE_BYTES: Final = 1024 * 1024
#: Interval precision written (microseconds, as asciinema writes them).
_DIGITS: Final = 6


class RecordingError(ValueError):
    """A line that is not valid asciicast v3; the message says which line and why."""


@attrs.frozen
class Header:
    """The first line of a recording."""

    cols: int
    rows: int
    term_type: str | None = None
    #: Unix time (seconds) the recording started.
    timestamp: int | None = None
    title: str | None = None
    command: str | None = None
    env: dict[str, str] = attrs.field(factory=dict)
    idle_time_limit: float | None = None
    #: Everything else the header held (kept by the decoder).
    extra: dict[str, Any] = attrs.field(factory=dict)


@attrs.frozen
class Event:
    """One event: ``interval`` seconds after the previous one."""

    interval: float
    code: str
    data: str


def encode_header(header: Header) -> bytes:
    """The header line (with its newline)."""
    term: dict[str, Any] = {"cols": header.cols, "rows": header.rows}
    if header.term_type is not None:
        term["type"] = header.term_type
    value: dict[str, Any] = {"version": VERSION, "term": term}
    if header.timestamp is not None:
        value["timestamp"] = header.timestamp
    if header.idle_time_limit is not None:
        value["idle_time_limit"] = header.idle_time_limit
    if header.command is not None:
        value["command"] = header.command
    if header.title is not None:
        value["title"] = header.title
    if header.env:
        value["env"] = header.env
    for key, extra in header.extra.items():
        value.setdefault(key, extra)
    return orjson.dumps(value) + b"\n"


def encode_event(interval: float, code: str, data: str) -> bytes:
    """One event line (with its newline). ``interval`` is rounded to microseconds
    and never negative. Text that is not valid Unicode (lone surrogates from
    undecodable bytes) is written with U+FFFD in their place."""
    seconds = round(max(interval, 0.0), _DIGITS)
    try:
        return orjson.dumps([seconds, code, data]) + b"\n"
    except TypeError:  # lone surrogates: orjson refuses them
        clean = data.encode("utf-8", "replace").decode("utf-8")
        return orjson.dumps([seconds, code, clean]) + b"\n"


def command_started(command_line: str) -> str:
    """The marker label at a command's start: ``"$ <command line>"``."""
    return COMMAND_PREFIX + command_line


def command_finished(command_line: str, exit_code: int | None) -> str:
    """The marker label at a command's end: ``"exit <code>: <command line>"`` (``?``
    when the shell reported no code)."""
    code = "?" if exit_code is None else str(exit_code)
    return f"{EXIT_PREFIX}{code}: {command_line}"


def parse_command_marker(label: str) -> tuple[str, str, int | None] | None:
    """``("start", line, None)`` or ``("end", line, code)`` for a command marker,
    None for any other label."""
    if label.startswith(COMMAND_PREFIX):
        return ("start", label[len(COMMAND_PREFIX) :], None)
    if label.startswith(EXIT_PREFIX) and ": " in label:
        code, line = label[len(EXIT_PREFIX) :].split(": ", 1)
        if code == "?":
            return ("end", line, None)
        if code.lstrip("-").isdigit():
            return ("end", line, int(code))
    return None


def caught_up_marker(caught: int, lost: int) -> str:
    """The marker of a resync: ``caught`` characters of the output the recorder
    missed follow at once (their timing is gone); ``lost`` more were no longer
    in the terminal's scrollback (or past the catch-up bound) and are missing. Starts
    with :data:`SKIPPED_MARKER` when ``lost``, else with :data:`CAUGHT_UP_PREFIX`."""
    if lost:
        return f"{SKIPPED_MARKER}: {lost} characters lost, the last {caught} follow at once"
    return f"{CAUGHT_UP_PREFIX}: the {caught} characters it missed follow at once"


def size_bound_marker(bound: int) -> str:
    """The last marker of a recording stopped at its size bound."""
    return f"recording stopped: size bound of {bound} bytes reached"


def decode_header(line: str | bytes, *, where: int = 1) -> Header:
    """The header from the first line; :class:`RecordingError` if it is not a v3 header."""
    try:
        value = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        raise RecordingError(f"line {where}: the header is not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise RecordingError(f"line {where}: the header must be a JSON object")
    if value.get("version") != VERSION:
        raise RecordingError(
            f"line {where}: not asciicast v3 (version {value.get('version')!r}, expected 3)"
        )
    term = value.get("term")
    if not isinstance(term, dict):
        raise RecordingError(f"line {where}: the header has no 'term' object")
    cols, rows = term.get("cols"), term.get("rows")
    if not (type(cols) is int and type(rows) is int and cols > 0 and rows > 0):
        raise RecordingError(f"line {where}: term.cols and term.rows must be positive integers")
    term_type = term.get("type")
    env = value.get("env") or {}
    if not isinstance(env, dict) or not all(isinstance(v, str) for v in env.values()):
        raise RecordingError(f"line {where}: 'env' must map names to strings")
    limit = value.get("idle_time_limit")
    if limit is not None and not (isinstance(limit, int | float) and limit > 0):
        raise RecordingError(f"line {where}: 'idle_time_limit' must be a positive number")
    known = {"version", "term", "timestamp", "title", "command", "env", "idle_time_limit"}
    timestamp = value.get("timestamp")
    return Header(
        cols=cols,
        rows=rows,
        term_type=term_type if isinstance(term_type, str) else None,
        timestamp=int(timestamp) if isinstance(timestamp, int | float) else None,
        title=value["title"] if isinstance(value.get("title"), str) else None,
        command=value["command"] if isinstance(value.get("command"), str) else None,
        env=dict(env),
        idle_time_limit=float(limit) if limit is not None else None,
        extra={k: v for k, v in value.items() if k not in known},
    )


def decode_event(line: str | bytes, *, where: int = 0) -> Event:
    """One event line; :class:`RecordingError` if it is not ``[interval, code, data]``."""
    try:
        value = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        raise RecordingError(f"line {where}: not JSON: {exc}") from None
    if not (isinstance(value, list) and len(value) == 3):
        raise RecordingError(f"line {where}: an event is a 3-element array")
    interval, code, data = value
    if isinstance(interval, bool) or not isinstance(interval, int | float) or interval < 0:
        raise RecordingError(f"line {where}: the interval must be a number >= 0")
    if not isinstance(code, str) or not code:
        raise RecordingError(f"line {where}: the event code must be a non-empty string")
    if not isinstance(data, str):
        raise RecordingError(f"line {where}: the event data must be a string")
    if code == "r" and not _is_size(data):
        raise RecordingError(f"line {where}: a resize is 'COLSxROWS', not {data!r}")
    return Event(float(interval), code, data)


def _is_size(data: str) -> bool:
    cols, sep, rows = data.partition("x")
    return bool(sep) and cols.isdigit() and rows.isdigit()


def decode(lines: Iterable[str | bytes]) -> tuple[Header, Iterator[Event]]:
    """The header and a lazy iterator of the events of a recording's lines.

    Comment lines (``#``) and blank lines are skipped. A bad line raises
    :class:`RecordingError` when the iterator reaches it (the events before it
    have been yielded: nothing is lost).
    """
    it = iter(lines)
    where = 0
    for raw in it:
        where += 1
        if not _skip(raw):
            header = decode_header(raw, where=where)
            break
    else:
        raise RecordingError("empty recording: no header line")

    def events() -> Iterator[Event]:
        n = where
        for raw in it:
            n += 1
            if not _skip(raw):
                yield decode_event(raw, where=n)

    return header, events()


def _skip(raw: str | bytes) -> bool:
    text = raw.strip()
    return not text or text[:1] in ("#", b"#")
