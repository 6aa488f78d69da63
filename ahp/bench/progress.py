"""The progress line on stderr while the benchmark runs.

Why: a full run takes minutes; a person watching should see which section and
which run is going, and a log (stderr redirected to a file) should get one line
per step instead of carriage-return noise.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

__all__ = ["Progress"]


class Progress:
    """``[bench 3/9 0:42] engine, 10 subscribers: run 2/5``, rewritten in place on a tty."""

    def __init__(self, total_sections: int, stream: TextIO | None = None) -> None:
        self.total = total_sections
        self.section = 0
        self.name = ""
        self._stream = stream if stream is not None else sys.stderr
        self._tty = self._stream.isatty()
        self._start = time.monotonic()

    def begin(self, name: str) -> None:
        """Start the next section."""
        self.section += 1
        self.name = name
        self.update("")

    def update(self, detail: str) -> None:
        elapsed = int(time.monotonic() - self._start)
        line = f"[bench {self.section}/{self.total} {elapsed // 60}:{elapsed % 60:02d}] {self.name}"
        if detail:
            line += f": {detail}"
        if self._tty:
            self._stream.write(f"\r\x1b[K{line}")
        else:
            self._stream.write(line + "\n")
        self._stream.flush()

    def note(self, message: str) -> None:
        """A message that stays (a skipped section, a failure)."""
        if self._tty:
            self._stream.write("\r\x1b[K")
        self._stream.write(f"[bench] {message}\n")
        self._stream.flush()

    def done(self) -> None:
        if self._tty:
            self._stream.write("\r\x1b[K")
        elapsed = time.monotonic() - self._start
        self._stream.write(f"[bench] done in {elapsed:.0f} s\n")
        self._stream.flush()
