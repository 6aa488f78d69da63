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
takes the clock and the output as arguments. The file is read line by line
(a recording of 64 MiB is never held in memory); a bad line stops playback with
a one-line error naming it, after everything before it was played.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from typing import BinaryIO, Final, TextIO

from ahp import arguments
from ahp.record.asciicast import Event, RecordingError, decode

__all__ = ["add_parser", "play", "run", "schedule"]

#: Highest playback speed accepted (a factor).
MAX_SPEED: Final = 1_000_000.0


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

    Raises :class:`~ahp.record.asciicast.RecordingError` at a bad line (what came
    before it has been played).
    """
    header, events = decode(lines)
    limit = idle_time_limit if idle_time_limit is not None else header.idle_time_limit
    for delay, event in schedule(events, speed=speed, idle_time_limit=limit):
        if delay > 0:
            out.flush()
            sleep(delay)
        if event.code == "o":
            out.write(event.data.encode("utf-8", "replace"))
        elif event.code == "m" and markers is not None and event.data:
            out.flush()
            markers.write(f"[{event.data}]\n")
            markers.flush()
        elif event.code == "x":
            out.flush()
            return event.data
    out.flush()
    return None


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "play",
        help="replay a terminal recording (asciicast v3, as serve --record writes)",
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


def run(args: argparse.Namespace) -> int:
    try:
        with open(args.file, "rb") as f:
            play(
                f,
                sys.stdout.buffer,
                speed=args.speed,
                idle_time_limit=args.idle_time_limit,
                markers=sys.stderr if args.markers else None,
            )
    except BrokenPipeError:
        raise  # the reader of standard output is gone: the command line says nothing
    except OSError as exc:
        print(f"ahp play: cannot read {args.file}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    except RecordingError as exc:
        sys.stdout.flush()
        print(f"ahp play: {args.file}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return 0
