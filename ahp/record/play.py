"""``ahp-terminals play FILE``: replay an asciicast recording in this terminal.

Why here, beside the recorder: a recording a person cannot watch without
installing asciinema is half a feature. Playback writes each output event's
text to standard output after its interval (divided by ``--speed``, each pause
capped at ``--idle-time-limit`` seconds, else at the header's
``idle_time_limit``), and stops at the exit event. Input events are not
replayed (they were echoed as output already), nor are markers and resizes
(a terminal cannot be resized from inside it portably); ``--markers`` prints
the markers (command starts and ends) on standard error as they pass.

The timing logic (:func:`schedule`) is pure and tested on its own; :func:`play`
takes the clock and the output as arguments. The file is read line by line, each
line at most :data:`~ahp.record.asciicast.MAX_LINE_BYTES` (:func:`read_lines`: a
recording of 64 MiB is never held in memory, and neither is ``/dev/zero``, a FIFO
that never ends a line, or a file of one huge line). A bad line stops playback
with a one-line error naming it, after everything before it was played; so does a
pause longer than :data:`MAX_PAUSE` (an interval of ``1e20``, or ``--speed 1e-9``),
which ``--idle-time-limit`` caps.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from typing import BinaryIO, Final, TextIO

from ahp import arguments
from ahp.printable import printable
from ahp.record.asciicast import MAX_LINE_BYTES, Event, RecordingError, decode

__all__ = ["MAX_PAUSE", "add_parser", "play", "read_lines", "run", "schedule"]

#: Highest playback speed accepted (a factor).
MAX_SPEED: Final = 1_000_000.0
#: Longest pause played (seconds, after ``--speed`` and ``--idle-time-limit``): a
#: longer one stops playback with an error naming its line (nobody watches a day of
#: nothing; an absurd interval is not slept, nor passed to ``time.sleep``, which
#: refuses ones past ``time_t``).
MAX_PAUSE: Final = 24 * 3600.0


def read_lines(f: BinaryIO, limit: int = MAX_LINE_BYTES) -> Iterator[bytes]:
    """The lines of ``f``, read one at a time, none longer than ``limit`` bytes (newline
    included): :class:`RecordingError` naming the line at a longer one. Memory: at most
    ``limit + 1`` bytes of the file at a time, whatever the file is (a FIFO or
    ``/dev/zero`` that never ends a line included)."""
    number = 0
    while line := f.readline(limit + 1):
        number += 1
        if len(line) > limit:
            raise RecordingError(
                f"line {number}: longer than {limit} bytes (not an asciicast recording)"
            )
        yield line


class _Numbered:
    """The lines of a recording, counting those taken: the count is the line number of
    the event :func:`~ahp.record.asciicast.decode` yielded last (it reads lazily, one
    line per event after any comments)."""

    def __init__(self, lines: Iterable[str | bytes]) -> None:
        self.lines = lines
        self.count = 0

    def __iter__(self) -> Iterator[str | bytes]:
        for line in self.lines:
            self.count += 1
            yield line


def schedule(
    events: Iterable[Event], *, speed: float = 1.0, idle_time_limit: float | None = None
) -> Iterator[tuple[float, Event]]:
    """Each event with the delay (seconds) to wait before it: its interval, capped at
    ``idle_time_limit``, divided by ``speed``."""
    if not speed > 0:
        raise ValueError("speed must be positive")
    for event in events:
        delay = event.interval
        if idle_time_limit is not None:
            delay = min(delay, idle_time_limit)
        yield delay / speed, event


def play(
    lines: Iterable[str | bytes],
    out: BinaryIO,
    *,
    speed: float = 1.0,
    idle_time_limit: float | None = None,
    markers: TextIO | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> str | None:
    """Play a recording's lines to ``out``; the exit status recorded (``x``), if any.

    Raises :class:`~ahp.record.asciicast.RecordingError` at a bad line, or at a pause
    longer than :data:`MAX_PAUSE` (what came before it has been played). Markers are
    written to ``markers`` with their control characters shown as ``\\xNN``
    (:func:`~ahp.printable.printable`): a label is for a person to read, and must not
    drive their terminal.
    """
    numbered = _Numbered(lines)
    header, events = decode(numbered)
    limit = idle_time_limit if idle_time_limit is not None else header.idle_time_limit
    for delay, event in schedule(events, speed=speed, idle_time_limit=limit):
        if delay > MAX_PAUSE:
            at = "" if speed == 1 else f" at speed {speed:g}"
            raise RecordingError(
                f"line {numbered.count}: a pause of {delay:.6g} seconds{at}, longer than "
                f"{MAX_PAUSE:g} s (cap pauses with --idle-time-limit)"
            )
        if delay > 0:
            out.flush()
            sleep(delay)
        if event.code == "o":
            out.write(event.data.encode("utf-8", "replace"))
        elif event.code == "m" and markers is not None and event.data:
            out.flush()
            markers.write(f"[{printable(event.data)}]\n")
            markers.flush()
        elif event.code == "x":
            out.flush()
            return event.data
    out.flush()
    return None


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser], help: str) -> None:
    p = sub.add_parser(
        "play",
        help=help,
        description=(
            "Replay an asciicast recording in this terminal: output as it was written, "
            "with its timing. Exits 0 at the end, 1 if the file cannot be read or a line "
            "is not valid asciicast v3."
        ),
    )
    p.add_argument("file", metavar="FILE", help="the .cast file")
    p.add_argument(
        "--speed",
        type=arguments.above_zero(MAX_SPEED),
        default=1.0,
        help="playback speed factor (default 1; 2 = twice)",
    )
    p.add_argument(
        "--idle-time-limit",
        type=arguments.above_zero(),
        metavar="SECONDS",
        help="cap every pause at this many seconds (default: the file's, else none)",
    )
    p.add_argument(
        "--markers", action="store_true", help="print markers (commands) on stderr as they pass"
    )
    p.set_defaults(handler=run)


class _ReadFailed(Exception):
    """Reading the recording failed (``error``): told apart from a failed write."""

    def __init__(self, error: OSError) -> None:
        super().__init__(error)
        self.error = error


def _reading(f: BinaryIO) -> Iterator[bytes]:
    """:func:`read_lines` of ``f``, its read errors raised as :class:`_ReadFailed`
    (an error writing the output does not pass through here)."""
    try:
        yield from read_lines(f)
    except OSError as exc:
        raise _ReadFailed(exc) from exc


def _discard_stdout() -> None:
    """Point standard output at ``/dev/null``: what is buffered for it is dropped, and
    the interpreter's last flush at exit does not fail a second time."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    finally:
        os.close(devnull)


def run(args: argparse.Namespace) -> int:
    if sys.stdout is None:  # (started with standard output closed: ``>&-``)
        print("ahp-terminals play: standard output is closed: nowhere to play to", file=sys.stderr)
        return 1
    try:
        with open(args.file, "rb") as f:
            play(
                _reading(f),
                sys.stdout.buffer,
                speed=args.speed,
                idle_time_limit=args.idle_time_limit,
                markers=sys.stderr if args.markers else None,
            )
    except BrokenPipeError:
        raise  # the reader of standard output is gone: the command line says nothing
    except _ReadFailed as failed:
        exc = failed.error
        print(
            f"ahp-terminals play: cannot read {args.file}: {exc.strerror or exc}", file=sys.stderr
        )
        return 1
    except OSError as exc:
        if exc.filename is not None:  # (opening the file)
            print(
                f"ahp-terminals play: cannot read {args.file}: {exc.strerror or exc}",
                file=sys.stderr,
            )
        else:  # (writing: /dev/full, a disk that filled up, a terminal gone)
            _discard_stdout()
            print(
                f"ahp-terminals play: cannot write to standard output: {exc.strerror or exc}",
                file=sys.stderr,
            )
        return 1
    except RecordingError as exc:
        sys.stdout.flush()
        print(f"ahp-terminals play: {args.file}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return 0
