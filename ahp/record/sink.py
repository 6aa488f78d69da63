"""A bounded queue of log lines and the task that writes them to rotated files.

Why: the audit log and the wire log are written from the server's hot paths (a
connection's reader, its writer, a request handler), where waiting for a disk is
not allowed. Their producers call :meth:`LineSink.put`: synchronous, O(1), never
waits — the item is queued, or, when the queue is at its bound
(:data:`MAX_QUEUED_LINES` items or :data:`MAX_QUEUED_BYTES` bytes), dropped and
counted. One writer task (:meth:`LineSink.run`) takes everything queued, formats
it into lines and writes them in a worker thread (``trio.to_thread``), so neither
formatting a large batch nor a slow ``write(2)`` holds the event loop. The
writer gathers lines for up to :data:`WRITE_DELAY` seconds (less when the queue
is half full), so a busy log costs one worker-thread hop per batch, not per line. After a
drop, the next batch carries one line saying how many items were lost
(``dropped_line``), so a gap is never silent.

Rotation: a file that would grow past ``max_file_bytes`` is rotated first (a single
line larger than the bound gets a file of its own), with one of two naming
schemes (:class:`Rotation`): ``"numbered"`` (``FILE`` is always the current one,
older ones ``FILE.1`` … ``FILE.<n-1>``, the oldest deleted: what ``logrotate``
and ``tail -F`` expect) or ``"segments"`` (VS Code's AHP logger: ``base.jsonl``,
then ``base.1.jsonl``, ``base.2.jsonl`` …, keeping the newest ``max_files``).

Redaction: ``redact`` (the server's tokens, for instance) is replaced by
``<redacted>`` in every byte written, whatever the line's producer put in it: as
it is, and as it appears inside a JSON string, once and twice escaped (a token
holding ``"`` or ``\\`` is ``Tok\\"en`` in a line, and ``Tok\\\\\\"en`` in a
frame logged as a string; a client's ASCII-only escaping, ``\\u00f6`` and ``\\/``, too:
:func:`secret_forms`).

Failures: a write that fails (disk full, file removed) is logged once per kind
and its lines are counted as dropped; the sink keeps going. Cancellation: on
cancel the writer writes what is queued, shielded, for at most
:data:`FLUSH_TIMEOUT` seconds, closes its file and returns; a ``write(2)`` to a
regular file in flight is not interruptible and is waited for.

Ownership: the sink owns its file descriptor (opened and closed by :meth:`run`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections import deque
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Final, Generic, Literal, TypeVar

import orjson
import trio

__all__ = [
    "FLUSH_TIMEOUT",
    "PRIVATE_DIR_MODE",
    "MAX_QUEUED_BYTES",
    "MAX_QUEUED_LINES",
    "REDACTED",
    "LineSink",
    "Rotation",
    "make_private_dirs",
    "secret_forms",
]

#: The mode of every directory the logs and recordings create (they hold what the
#: terminals print and who did what: the user's alone, like the files, 0600).
PRIVATE_DIR_MODE: Final = 0o700


def make_private_dirs(directory: Path) -> None:
    """Create ``directory`` and every missing parent with :data:`PRIVATE_DIR_MODE`
    (``mkdir -p`` gives the parents the umask's mode); an existing one is left as it
    is. Blocking: call it from a worker thread."""
    missing: list[Path] = []
    for path in (directory, *directory.parents):
        if path.exists():
            break
        missing.append(path)
    for path in reversed(missing):
        path.mkdir(mode=PRIVATE_DIR_MODE, exist_ok=True)


log = logging.getLogger("ahp.record")

#: Items queued at most before new ones are dropped (and counted).
MAX_QUEUED_LINES: Final = 16 * 1024
#: Bytes (as reported by the producer's ``size``) queued at most before drops.
MAX_QUEUED_BYTES: Final = 8 * 1024 * 1024
#: Seconds the writer spends on what is still queued when it is cancelled.
FLUSH_TIMEOUT: Final = 2.0
#: Seconds the writer waits after the first queued line for more (unless the queue is
#: half full): lines reach the file at most this late, in one write per batch.
WRITE_DELAY: Final = 0.05
#: What a redacted secret is replaced with.
REDACTED: Final = b"<redacted>"

T = TypeVar("T")


def secret_forms(secrets: Sequence[str]) -> list[bytes]:
    """Every byte string under which ``secrets`` may appear in a JSON line: as they
    are, and JSON-escaped once and twice, longest first (so a secret inside another is
    not replaced first, leaving the rest of the longer one behind).

    The escapings: orjson's, which every line and frame written is encoded with
    (``"``, ``\\`` and control characters escaped, other characters as UTF-8), and a
    client's, which a frame that is not JSON is logged as it came in (a string, so
    escaped once more): ASCII-only (other characters as ``\\uXXXX``, Python's
    ``json.dumps``, lowercase hex), each also with ``/`` as ``\\/``. (Other spellings,
    such as uppercase hex or needless escapes of ASCII letters, are not found.)"""
    forms: set[bytes] = set()
    for secret in secrets:
        if not secret:
            continue
        forms.add(secret.encode("utf-8", "surrogatepass"))
        ones: set[bytes] = {json.dumps(secret, ensure_ascii=True)[1:-1].encode()}
        with contextlib.suppress(orjson.JSONEncodeError):  # (a lone surrogate: ASCII only)
            ones.add(orjson.dumps(secret)[1:-1])
        ones.update([once.replace(b"/", b"\\/") for once in ones])
        for once in ones:
            forms.update((once, orjson.dumps(once.decode())[1:-1]))
    return sorted(forms, key=len, reverse=True)


class Rotation:
    """Where a rotated log's files are and how they move (see the module docstring)."""

    def __init__(
        self, path: Path, *, scheme: Literal["numbered", "segments"], max_files: int
    ) -> None:
        if max_files < 1:
            raise ValueError("max_files must be at least 1")
        self.path = path
        self.scheme = scheme
        self.max_files = max_files
        self.segment = 0

    def current(self) -> Path:
        """The file written now."""
        return self.path if self.scheme == "numbered" else self._segment(self.segment)

    def _segment(self, n: int) -> Path:
        if n == 0:
            return self.path
        stem, dot, suffix = self.path.name.rpartition(".")
        return self.path.with_name(f"{stem}.{n}.{suffix}" if dot else f"{self.path.name}.{n}")

    def _numbered(self, n: int) -> Path:
        return self.path if n == 0 else self.path.with_name(f"{self.path.name}.{n}")

    def rotate(self) -> None:
        """Move on to a fresh current file (blocking file operations: call in a thread)."""
        if self.scheme == "numbered":
            with contextlib.suppress(FileNotFoundError):
                self._numbered(self.max_files - 1).unlink()
            for n in range(self.max_files - 2, -1, -1):
                with contextlib.suppress(FileNotFoundError):
                    self._numbered(n).rename(self._numbered(n + 1))
            return
        self.segment += 1
        if self.segment - self.max_files >= 0:
            with contextlib.suppress(FileNotFoundError):
                self._segment(self.segment - self.max_files).unlink()


class LineSink(Generic[T]):
    """Bounded queue of items, formatted and written to rotated files by :meth:`run`.

    Args:
        rotation: the files.
        max_file_bytes: rotate before a file would pass this size.
        format_item: one item → one line (bytes ending in a newline); runs in the
            writer's worker thread, so it must only read the item.
        dropped_line: the line that reports ``n`` dropped items.
        size: an item's weight against :data:`MAX_QUEUED_BYTES`.
        redact: secrets replaced by :data:`REDACTED` in everything written (in each
            of their :func:`secret_forms`).
    """

    def __init__(
        self,
        rotation: Rotation,
        *,
        max_file_bytes: int,
        format_item: Callable[[T], bytes],
        dropped_line: Callable[[int], bytes],
        size: Callable[[T], int],
        redact: Sequence[str] = (),
        max_lines: int = MAX_QUEUED_LINES,
        max_bytes: int = MAX_QUEUED_BYTES,
    ) -> None:
        if max_file_bytes < 1:
            raise ValueError("max_file_bytes must be at least 1")
        self.rotation = rotation
        self.max_file_bytes = max_file_bytes
        self._format = format_item
        self._dropped_line = dropped_line
        self._size = size
        self._secrets = secret_forms(redact)
        self.max_lines = max_lines
        self.max_bytes = max_bytes
        self._items: deque[T] = deque()
        self._bytes = 0
        self._lot = trio.lowlevel.ParkingLot()
        self._progress = trio.lowlevel.ParkingLot()  # a batch was written
        self._half_lot = trio.lowlevel.ParkingLot()  # the queue is half full
        self._accepted = 0  # items put and not dropped, ever
        self._finished = 0  # of which written (or lost at the write)
        self._fd = -1
        self._file_size = 0
        self._failures: set[str] = set()
        #: Items dropped since the last report line (queue full or a failed write).
        self.pending_drops = 0
        #: Counters for tests and figures.
        self.dropped = 0
        self.written_lines = 0
        self.peak_bytes = 0
        self.running = False

    @property
    def queued_bytes(self) -> int:
        return self._bytes

    def __len__(self) -> int:
        return len(self._items)

    def put(self, item: T) -> bool:
        """Queue ``item`` (never waits); False when it was dropped (queue at its bound)."""
        size = self._size(item)
        if len(self._items) >= self.max_lines or self._bytes + size > self.max_bytes:
            self.dropped += 1
            self.pending_drops += 1
            return False
        self._items.append(item)
        self._accepted += 1
        self._bytes += size
        self.peak_bytes = max(self.peak_bytes, self._bytes)
        if len(self._items) == 1:
            self._lot.unpark_all()
        elif self._half_lot and self._half_full():
            self._half_lot.unpark_all()
        return True

    def _half_full(self) -> bool:
        return len(self._items) * 2 >= self.max_lines or self._bytes * 2 >= self.max_bytes

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Open the current file, then write batches until cancelled (see the module
        docstring); raises ``OSError`` before ``started`` if the file cannot be opened."""
        await trio.to_thread.run_sync(self._open)
        self.running = True
        task_status.started()
        try:
            while True:
                while not self._items and not self.pending_drops:
                    await self._lot.park()
                if not self._half_full():
                    # Gather a batch: one worker-thread hop per WRITE_DELAY, not per line.
                    with trio.move_on_after(WRITE_DELAY):
                        await self._half_lot.park()
                await self._write_batch()
        finally:
            self.running = False
            self._progress.unpark_all()
            with trio.CancelScope(shield=True), trio.move_on_after(FLUSH_TIMEOUT):
                if self._items or self.pending_drops:
                    await self._write_batch()
            if self._fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(self._fd)
                self._fd = -1

    async def wait_written(self) -> None:
        """Return once every item queued before the call has been written (or lost to
        a failed write); returns at once when the writer is not running."""
        target = self._accepted
        while self._finished < target and self.running:
            await self._progress.park()
        await trio.lowlevel.checkpoint()

    async def _write_batch(self) -> None:
        items = list(self._items)
        done = self._accepted
        self._items.clear()
        self._bytes = 0
        drops, self.pending_drops = self.pending_drops, 0
        try:
            failed = await trio.to_thread.run_sync(self._write_items, items, drops)
        except trio.Cancelled:
            # Cancelled before the thread started (the write itself is not
            # cancellable): nothing was written; the batch goes back for the flush.
            self._items.extendleft(reversed(items))
            self._bytes += sum(map(self._size, items))
            self.pending_drops += drops
            raise
        if failed:
            self.dropped += failed
            self.pending_drops += failed
        self._finished = done
        self._progress.unpark_all()

    # -- the worker thread's side ------------------------------------------------------------

    def _open(self) -> None:
        path = self.rotation.current()
        make_private_dirs(path.parent)
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        self._file_size = os.fstat(self._fd).st_size

    def _write_items(self, items: list[T], drops: int) -> int:
        """Format and write; how many items were lost (not formatted or not written)."""
        failed = 0
        lines: list[bytes] = []
        if drops:
            lines.append(self._dropped_line(drops))
        for item in items:
            try:
                lines.append(self._format(item))
            except Exception:  # a bug in a formatter must not end the log
                self._fail("format", "cannot format a log line")
                failed += 1
        chunk: list[bytes] = []
        chunk_size = 0
        for raw in lines:
            line = raw
            for secret in self._secrets:
                if secret in line:
                    line = line.replace(secret, REDACTED)
            if self._file_size + chunk_size > 0 and (
                self._file_size + chunk_size + len(line) > self.max_file_bytes
            ):
                failed += self._flush(chunk)
                chunk, chunk_size = [], 0
                self._rotate()
            chunk.append(line)
            chunk_size += len(line)
        return failed + self._flush(chunk)

    def _flush(self, chunk: list[bytes]) -> int:
        """Write ``chunk``; the number of its lines lost (all of them on an error)."""
        if not chunk:
            return 0
        data = b"".join(chunk)
        if self._fd < 0:
            self._fail("closed", f"{self.rotation.current()} is not open")
            return len(chunk)
        try:
            view = memoryview(data)
            while view:
                written = os.write(self._fd, view)
                view = view[written:]
        except OSError as exc:
            self._fail(type(exc).__name__, f"cannot write {self.rotation.current()}: {exc}")
            return len(chunk)
        self._file_size += len(data)
        self.written_lines += len(chunk)
        return 0

    def _rotate(self) -> None:
        if self._fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = -1
        try:
            self.rotation.rotate()
            self._open()
        except OSError as exc:
            self._fail("rotate", f"cannot rotate {self.rotation.path}: {exc}")

    def _fail(self, kind: str, message: str) -> None:
        if kind not in self._failures:
            self._failures.add(kind)
            log.warning("%s (lines are dropped and counted)", message)
