"""A file sent as a plain HTTP answer's body: in bounded chunks, for as long as it moves.

Why: a recording (``GET /api/recordings/NAME``) can be tens of megabytes. It used to
be read whole into memory and encoded with its head (about twice the file per
request), with no bound on how many requests did so at once, and sent within the
deadline of the unauthenticated phase: 20 clients that read 100 bytes of a 40 MB
recording and stalled raised the server's RSS to 1.6 GB, and a client reading at
1.3 MB/s was cut after 10 s with a quarter of it. Here the body is read from the
open file :data:`DOWNLOAD_CHUNK` bytes at a time, each chunk sent before the next is
read, exactly the file's size at open time (``Content-Length``; a file still being
appended to is cut there, a file that shrank ends the answer early, and the client
sees a short body). The download has no overall deadline: it may take as long as it
needs while the client takes it, and a client that takes nothing (not one
:data:`DOWNLOAD_PIECE` of it) for :data:`DOWNLOAD_IDLE` seconds is closed. At most
:data:`MAX_DOWNLOADS` run at once per server (:class:`Downloads`; past it the route
answers 503): streaming bounds each one's memory, but not its two file descriptors
nor how long a client that takes a piece now and then holds them, and a download runs
after the unauthenticated phase, outside its bound on pending connections.

Buffering: one chunk per download (:data:`DOWNLOAD_CHUNK`), whatever the file's size,
plus what the kernel (and TLS) buffer. Ownership: a :class:`FileBody` owns its open
file and its place among the downloads until :meth:`FileBody.close` (idempotent),
which its holder calls whatever happens (sent, cut, refused, cancelled); a file
left unclosed is closed by the garbage collector, its place is not given back.
Cancellation: :meth:`FileBody.send` may be cancelled anywhere (a chunk's read runs to
its end in a worker thread first); the connection is then closed by its owner, the
body incomplete.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Final

import trio

__all__ = [
    "DOWNLOAD_CHUNK",
    "DOWNLOAD_IDLE",
    "DOWNLOAD_PIECE",
    "MAX_DOWNLOADS",
    "Downloads",
    "FileBody",
]

#: Bytes of a file read and held per download at a time (the memory a download
#: costs, whatever the file's size); the next chunk is read once this one is sent.
DOWNLOAD_CHUNK: Final = 64 * 1024
#: Bytes handed to the stream per send: the unit of progress of :data:`DOWNLOAD_IDLE`
#: (a TLS record's size).
DOWNLOAD_PIECE: Final = 16 * 1024
#: Seconds a download may go without the client taking a piece of it
#: (:data:`DOWNLOAD_PIECE`); then its connection is closed. No other deadline applies
#: to a download: a slow client that keeps reading gets the whole file.
DOWNLOAD_IDLE: Final = 30.0
#: Downloads of files served at once per server (past it: 503); each holds a file, a
#: socket and one chunk.
MAX_DOWNLOADS: Final = 16


class Downloads:
    """The places among the downloads of one server: at most ``limit`` at a time.
    Not thread-safe (one Trio run)."""

    def __init__(self, limit: int | None = None) -> None:
        #: (None: :data:`MAX_DOWNLOADS`, read when made.)
        self.limit = limit if limit is not None else MAX_DOWNLOADS
        self.active = 0

    def take(self) -> bool:
        """Take a place; False when all ``limit`` are taken (refuse the download)."""
        if self.active >= self.limit:
            return False
        self.active += 1
        return True

    def give_back(self) -> None:
        self.active -= 1


class FileBody:
    """The first ``length`` bytes of an open file, to be sent as an answer's body.

    Owns ``file`` (closed by :meth:`close`) and calls ``release`` once when closed (the
    place it took among the :class:`Downloads`).
    """

    def __init__(
        self, file: io.FileIO, length: int, release: Callable[[], None] | None = None
    ) -> None:
        self.length = length
        self._file = file
        self._release = release
        #: Bytes sent so far (whole pieces the stream took).
        self.sent = 0

    def close(self) -> None:
        """Close the file and give the place back (once; later calls do nothing)."""
        self._file.close()
        release, self._release = self._release, None
        if release is not None:
            release()

    def _read(self, size: int) -> bytes:
        """Up to ``size`` bytes from the file's position (fewer only at its end).
        Runs in a worker thread."""
        parts = []
        while size > 0:
            part = self._file.read(size)
            if not part:
                break
            parts.append(part)
            size -= len(part)
        return parts[0] if len(parts) == 1 else b"".join(parts)

    async def send(self, stream: trio.abc.SendStream) -> str | None:
        """Send the body on ``stream``: None when all ``length`` bytes went out, else
        why not ("idle": the client took nothing for :data:`DOWNLOAD_IDLE` seconds;
        "shrank": the file ended early). Raises what the stream raises (the peer left).
        Holds one chunk at a time; the caller closes the connection and the body."""
        while self.sent < self.length:
            chunk = await trio.to_thread.run_sync(
                self._read, min(DOWNLOAD_CHUNK, self.length - self.sent)
            )
            if not chunk:
                return "shrank"
            with memoryview(chunk) as view:
                for start in range(0, len(view), DOWNLOAD_PIECE):
                    with trio.move_on_after(DOWNLOAD_IDLE) as idle:
                        await stream.send_all(view[start : start + DOWNLOAD_PIECE])
                    if idle.cancelled_caught:
                        return "idle"
                    self.sent += min(DOWNLOAD_PIECE, len(view) - start)
            del chunk  # (not held while the next one is read)
        return None
