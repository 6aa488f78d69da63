"""The workload: a generated text file that ``cat`` prints into a pty.

Why generated: the figures must be reproducible on any machine without a data
download, and the text must look like real terminal output — lines of varied
length (compiler output, logs, listings), mostly ASCII with about 1% of the
characters multi-byte UTF-8 (accents, symbols, CJK, emoji) so that decoders
take their slow paths now and then. The file is written once per run into a
temporary directory, in ~1 MB blocks, never held in memory whole.

Every throughput run uses the same *gate*: the child is ``sh -c 'read _; exec
cat FILE'``, so that all subscribers can attach before any output exists; the
measurement starts when the benchmark sends the releasing ``\\r`` and ends at the
last byte (or ``terminal/exited``). The pty echoes that ``\\r`` as ``\\r\\n`` and
turns every ``\\n`` of the file into ``\\r\\n`` (ONLCR), which
:attr:`Workload.pty_bytes` accounts for.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Final

import attrs

__all__ = ["GATE_ECHO", "Workload", "generate"]

#: What the pty prints when the gate is released (the echo of ``\r`` in cooked mode).
GATE_ECHO: Final = "\r\n"

_WORDS: Final = (
    "the", "of", "and", "to", "in", "is", "for", "on", "with", "as", "error", "warning",
    "build", "src/main.rs", "compiling", "test", "passed", "failed", "ok", "GET", "/api/v1",
    "200", "404", "user", "session", "config", "value", "0x7ffd4a2c", "2026-11-29T10:42:17Z",
    "INFO", "DEBUG", "request", "response", "latency=3.2ms", "bytes=4096", "-rw-r--r--",
    "root", "README.md", "node_modules", "package.json", "import", "return", "def", "class",
)  # fmt: skip
_NON_ASCII: Final = (
    "naïve", "café", "€", "größe", "日本語", "данные", "ñandú", "→", "✓", "🎉", "Ωmega", "中文",
)  # fmt: skip
_POOL_LINES: Final = 8192
_BLOCK_LINES: Final = 16384


@attrs.frozen
class Workload:
    """A generated file and the counts every run is checked against."""

    path: Path
    file_bytes: int
    lines: int
    chars: int

    @property
    def pty_bytes(self) -> int:
        """Bytes the pty master yields for one ``cat`` (ONLCR adds ``\\r`` per line)."""
        return self.file_bytes + self.lines

    @property
    def pty_chars(self) -> int:
        """Characters a decoder yields for one ``cat``."""
        return self.chars + self.lines

    def gate_argv(self, repeat: int = 1) -> list[str]:
        """``sh -c 'read _; exec cat FILE...'``: prints nothing until a line is typed."""
        return ["sh", "-c", 'read _ ; exec cat "$@"', "sh", *[str(self.path)] * repeat]

    def gated_bytes(self, repeat: int = 1) -> int:
        return len(GATE_ECHO) + repeat * self.pty_bytes

    def gated_chars(self, repeat: int = 1) -> int:
        return len(GATE_ECHO) + repeat * self.pty_chars


def _line(rng: random.Random) -> str:
    roll = rng.random()
    if roll < 0.08:
        target = rng.randint(0, 12)  # blank lines, prompts, short status lines
    elif roll < 0.70:
        target = rng.randint(30, 100)
    elif roll < 0.95:
        target = rng.randint(100, 160)
    else:
        target = rng.randint(160, 320)  # long log lines and stack traces
    words: list[str] = []
    length = 0
    while length < target:
        word = rng.choice(_NON_ASCII) if rng.random() < 0.04 else rng.choice(_WORDS)
        words.append(word)
        length += len(word) + 1
    return " ".join(words)[:target] + "\n"


def generate(directory: Path, size_mb: float, *, seed: int = 20261129) -> Workload:
    """Write ``about size_mb`` MB (10**6 bytes) of text to ``directory/workload.txt``."""
    rng = random.Random(seed)
    pool = [_line(rng) for _ in range(_POOL_LINES)]
    encoded = [line.encode() for line in pool]
    chars_of = [len(line) for line in pool]
    target = int(size_mb * 1e6)
    path = directory / "workload.txt"
    written = lines = chars = 0
    indices = range(_POOL_LINES)
    with path.open("wb") as out:
        while written < target:
            block: list[bytes] = []
            for i in rng.choices(indices, k=_BLOCK_LINES):
                line = encoded[i]
                block.append(line)
                written += len(line)
                chars += chars_of[i]
                lines += 1
                if written >= target:
                    break
            out.write(b"".join(block))
    return Workload(path=path, file_bytes=written, lines=lines, chars=chars)
