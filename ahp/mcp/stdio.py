"""Standard input for the MCP stdio transport, read by Trio so that shutdown never hangs.

Why: the SDK's ``mcp.server.stdio.stdio_server`` runs on Trio (through anyio)
and is what we use, but it reads stdin with ``anyio.wrap_file`` — a blocking
``readline`` in a worker thread, which cannot be cancelled. When the server is
asked to stop (SIGTERM, Ctrl-C) while the client still holds our stdin open,
the cancelled task waits for that thread, i.e. for a line that may never come:
measured, the process had to be killed (the evidence is
``tests/test_mcp.py::test_sdk_stdin_reader_blocks_cancellation``).
``stdio_server`` accepts its stdin as a parameter, so the least-bad design is
to keep the SDK's transport, framing and stdout handling, and hand it this
reader instead: the same line iteration over a Trio ``FdStream``, which a
cancel scope interrupts at once.

Ownership: :func:`claim_stdin` takes fd 0 as the SDK would (the wire moves to
a private descriptor; fd 0 becomes ``/dev/null`` so nothing else in the
process reads our messages), and :meth:`StdinLines.release` restores it and
its blocking mode. Buffering: a line longer than :data:`MAX_LINE_BYTES` is
dropped up to its newline and reported as one unparsable line, which the SDK
answers with a parse error; the server keeps going.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from typing import Final

import trio

__all__ = ["MAX_LINE_BYTES", "READ_SIZE", "StdinLines", "claim_stdin"]

#: The longest JSON-RPC message line accepted (bytes).
MAX_LINE_BYTES: Final = 16 * 1024 * 1024
#: Bytes read per system call.
READ_SIZE: Final = 65_536
#: What an over-long line is replaced by: not JSON, so the SDK reports a parse error.
TOO_LONG: Final = f"<a message line over {MAX_LINE_BYTES} bytes was dropped>\n"


class StdinLines:
    """Lines (``str``, newline kept) from a file descriptor, until end of file.

    Iterate with ``async for``; each ``__anext__`` is cancellable. Owns ``fd``.
    """

    def __init__(self, fd: int, *, restore: tuple[int, int] | None = None) -> None:
        self._fd = fd
        self._stream = trio.lowlevel.FdStream(os.dup(fd))
        self._buffer = bytearray()
        self._dropping = False
        self._eof = False
        self._restore = restore

    def __aiter__(self) -> StdinLines:
        return self

    async def __anext__(self) -> str:
        while True:
            newline = self._buffer.find(b"\n")
            if newline >= 0:
                line = bytes(self._buffer[: newline + 1])
                del self._buffer[: newline + 1]
                if self._dropping:
                    self._dropping = False
                    return TOO_LONG
                return line.decode("utf-8", "replace")
            if self._eof:
                if self._buffer and not self._dropping:
                    rest = bytes(self._buffer)
                    self._buffer.clear()
                    return rest.decode("utf-8", "replace")
                raise StopAsyncIteration
            if len(self._buffer) > MAX_LINE_BYTES:
                self._buffer.clear()
                self._dropping = True
            chunk = await self._stream.receive_some(READ_SIZE)
            if not chunk:
                self._eof = True
            else:
                self._buffer += chunk

    def release(self) -> None:
        """Close the reader, leave the descriptor blocking, restore fd 0 if it was claimed.
        Once only: a second call does nothing (closing the number again could close
        whatever reused it)."""
        fd, self._fd = self._fd, -1
        if fd < 0:
            return
        self._stream.close()
        with contextlib.suppress(OSError):
            os.set_blocking(fd, True)  # FdStream made the shared description non-blocking
        if self._restore is not None:
            target, private = self._restore
            with contextlib.suppress(OSError):
                os.dup2(private, target)
        with contextlib.suppress(OSError):
            os.close(fd)


def claim_stdin() -> StdinLines:
    """Read the MCP wire from fd 0 through Trio; fd 0 reads ``/dev/null`` meanwhile."""
    private = fcntl.fcntl(0, fcntl.F_DUPFD_CLOEXEC, 3)
    null = os.open(os.devnull, os.O_RDONLY)
    try:
        os.dup2(null, 0)
    finally:
        os.close(null)
    return StdinLines(private, restore=(0, private))
