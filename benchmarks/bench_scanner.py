"""Throughput of :class:`ahp.vt.scanner.Scanner` (CPU only, one core).

Run ``python benchmarks/bench_scanner.py [size_mb]``; the lead's bench command
calls :func:`run`. Figures are MB/s (10**6 bytes per second) of scanner input,
best of a few repetitions. ``decoder_*`` rows are the floor the scanner is
compared with: a bare incremental UTF-8 decoder over the same chunks.

Workloads:

* ``plain_4k``: text lines, ~1% multi-byte UTF-8, in 4 KiB chunks (a pty read);
* ``colour_4k``: a colour change every few characters, no OSC (``ls --color``,
  compilers): still the fast path;
* ``escape_heavy_4k``: the same colours plus an OSC 633 mark (``A``/``B``/
  ``E``/``C``/``D``/``P;Cwd``) on *every* line, 4 KiB chunks: the stress case,
  far denser than a shell (which sends ~7 marks per command);
* ``shell_session_4k``: commands of 40 coloured lines each, framed by the
  marks a shell with integration sends (prompt, command line, cwd);
* ``fast_path_64k``: the plain text in 64 KiB chunks (the fast path alone);
* ``retitled_16k`` / ``retitled_last_16k``: a title (OSC 0) before every line, as a
  shell loop retitling its terminal prints it (issue 25's ``fragmented scrollback``),
  in 16 KiB chunks (a read batch), every title an event / with ``last_titles`` (the
  engine's parse task: only the last title of a run).
"""

from __future__ import annotations

import codecs
import sys
import time
from collections.abc import Callable
from pathlib import Path

try:
    from ahp.vt.scanner import Scanner
except ModuleNotFoundError:  # a checkout without `pip install -e .`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from ahp.vt.scanner import Scanner

__all__ = [
    "make_colour",
    "make_escape_heavy",
    "make_plain",
    "make_retitled",
    "make_shell_session",
    "run",
]

_WORDS = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa"]
_REPEATS = 5


def make_plain(size: int) -> bytes:
    """About ``size`` bytes of text lines, one in ~10 lines carrying a non-ASCII word."""
    lines: list[str] = []
    total = 0
    n = 0
    while total < size:
        words = [_WORDS[(n * 7 + k) % len(_WORDS)] for k in range(12)]
        if n % 10 == 0:
            words[3] = "naïve-€-日本"
        line = f"{n:08d} " + " ".join(words) + "\r\n"
        lines.append(line)
        total += len(line.encode())
        n += 1
    return "".join(lines).encode()


def _coloured_line(n: int) -> bytes:
    return (
        b"".join(
            b"\x1b[%dm%s\x1b[0m " % (31 + k % 7, _WORDS[(n + k) % len(_WORDS)].encode())
            for k in range(8)
        )
        + b"\r\n"
    )


def make_colour(size: int) -> bytes:
    """About ``size`` bytes of text with a colour change every few characters."""
    parts: list[bytes] = []
    total = 0
    n = 0
    while total < size:
        line = _coloured_line(n)
        parts.append(line)
        total += len(line)
        n += 1
    return b"".join(parts)


def make_shell_session(size: int, lines_per_command: int = 40) -> bytes:
    """About ``size`` bytes of commands (coloured output) between shell-integration marks."""
    parts: list[bytes] = []
    total = 0
    n = 0
    while total < size:
        head = (
            b"\x1b]633;A\x07\x1b[32muser@host\x1b[0m:\x1b[34m~/project\x1b[0m$ \x1b]633;B\x07"
            b"\x1b]633;E;ls -l --color\\x3b make;6d4f0c7e\x07\x1b]633;C\x07"
        )
        body = b"".join(_coloured_line(n + k) for k in range(lines_per_command))
        tail = b"\x1b]633;D;0\x07\x1b]633;P;Cwd=/home/user/project\x07"
        parts += (head, body, tail)
        total += len(head) + len(body) + len(tail)
        n += 1
    return b"".join(parts)


def make_escape_heavy(size: int) -> bytes:
    """About ``size`` bytes of coloured text with an OSC 633 mark on every line."""
    marks = [
        b"\x1b]633;A\x07",
        b"\x1b]633;B\x07",
        b"\x1b]633;E;ls -l\\x3b echo hi;6d4f0c7e\x07",
        b"\x1b]633;C\x07",
        b"\x1b]633;D;0\x07",
        b"\x1b]633;P;Cwd=/home/user/project\x07",
    ]
    parts: list[bytes] = []
    total = 0
    n = 0
    while total < size:
        line = marks[n % len(marks)] + _coloured_line(n)
        parts.append(line)
        total += len(line)
        n += 1
    return b"".join(parts)


def make_retitled(size: int) -> bytes:
    """About ``size`` bytes of lines, each after a title change (OSC 0) of its own."""
    parts: list[bytes] = []
    total = 0
    n = 0
    while total < size:
        line = b"\x1b]0;line %d\x07some output line, some output line, some output line\n" % n
        parts.append(line)
        total += len(line)
        n += 1
    return b"".join(parts)


def _chunks(data: bytes, size: int) -> list[bytes]:
    return [data[i : i + size] for i in range(0, len(data), size)]


def _best_mb_s(func: Callable[[], None], nbytes: int) -> float:
    best = float("inf")
    for _ in range(_REPEATS):
        start = time.perf_counter()
        func()
        best = min(best, time.perf_counter() - start)
    return nbytes / best / 1e6


def _scan_all(chunks: list[bytes], *, last_titles: bool = False) -> Callable[[], None]:
    def go() -> None:
        scanner = Scanner(last_titles=last_titles)
        feed = scanner.feed
        for chunk in chunks:
            feed(chunk)
        scanner.close()

    return go


def _decode_all(chunks: list[bytes]) -> Callable[[], None]:
    def go() -> None:
        decode = codecs.getincrementaldecoder("utf-8")(errors="replace").decode
        for chunk in chunks:
            decode(chunk)
        decode(b"", True)

    return go


def run(size_mb: float = 20.0) -> dict[str, float]:
    """Measure every workload on ``size_mb`` MB of input; return MB/s by name."""
    size = int(size_mb * 1e6)
    plain = make_plain(size)
    colour = make_colour(size)
    heavy = make_escape_heavy(size)
    session = make_shell_session(size)
    plain_4k = _chunks(plain, 4096)
    heavy_4k = _chunks(heavy, 4096)
    retitled = make_retitled(size)
    retitled_16k = _chunks(retitled, 16384)
    return {
        "plain_4k": _best_mb_s(_scan_all(plain_4k), len(plain)),
        "colour_4k": _best_mb_s(_scan_all(_chunks(colour, 4096)), len(colour)),
        "escape_heavy_4k": _best_mb_s(_scan_all(heavy_4k), len(heavy)),
        "shell_session_4k": _best_mb_s(_scan_all(_chunks(session, 4096)), len(session)),
        "fast_path_64k": _best_mb_s(_scan_all(_chunks(plain, 65536)), len(plain)),
        "retitled_16k": _best_mb_s(_scan_all(retitled_16k), len(retitled)),
        "retitled_last_16k": _best_mb_s(_scan_all(retitled_16k, last_titles=True), len(retitled)),
        "decoder_plain_4k": _best_mb_s(_decode_all(plain_4k), len(plain)),
        "decoder_heavy_4k": _best_mb_s(_decode_all(heavy_4k), len(heavy)),
    }


def main(argv: list[str]) -> int:
    size_mb = float(argv[1]) if len(argv) > 1 else 20.0
    for name, mb_s in run(size_mb).items():
        print(f"{name:>18}: {mb_s:9.1f} MB/s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
