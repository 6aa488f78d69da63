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
dropped up to its newline and reported as :data:`TOO_LONG`; the server keeps
going.

Answers the SDK would not give: :class:`ScreenedLines` sits between
:class:`StdinLines` and the SDK. The SDK drops a line it cannot validate
without answering it (it logs it at debug level), so a client that sent a
request in it would wait forever; :mod:`ahp.mcp.screen` decides what each such
line is owed (-32700, -32600, -32602 or a tool error), and the answer goes
into the SDK's own write stream, so the SDK's single stdout writer frames it
(one JSON line) and never interleaves it with its own answers.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
from collections.abc import AsyncIterator
from typing import Final, Protocol

import anyio
import mcp_types
import trio
from mcp.shared.message import SessionMessage

from ahp.mcp.screen import Answer, screen, too_long

__all__ = [
    "MAX_LINE_BYTES",
    "READ_SIZE",
    "TOO_LONG",
    "AnswerStream",
    "ScreenedLines",
    "StdinLines",
    "claim_stdin",
]

log = logging.getLogger("ahp.mcp")


class AnswerStream(Protocol):
    """Where :class:`ScreenedLines` sends answers: a clone of the SDK's write stream."""

    async def send(self, item: SessionMessage, /) -> None: ...
    def close(self) -> None: ...


#: The longest JSON-RPC message line accepted (bytes).
MAX_LINE_BYTES: Final = 16 * 1024 * 1024
#: Bytes read per system call.
READ_SIZE: Final = 65_536
#: What an over-long line is replaced by (:class:`ScreenedLines` answers it; not JSON either).
TOO_LONG: Final = f"<a message line over {MAX_LINE_BYTES} bytes was dropped>\n"


class StdinLines:
    """Lines (``str``, newline kept) from a file descriptor, until end of file.

    Decoded as UTF-8 with ``surrogateescape``: a byte that is not UTF-8 becomes a lone
    surrogate (U+DC80-U+DCFF), which :mod:`ahp.mcp.screen` refuses naming the byte,
    where replacing it with U+FFFD would run a command other than the one sent.

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
                return line.decode("utf-8", "surrogateescape")
            if self._eof:
                if self._buffer and not self._dropping:
                    rest = bytes(self._buffer)
                    self._buffer.clear()
                    return rest.decode("utf-8", "surrogateescape")
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


class ScreenedLines:
    """The lines of ``lines`` that the SDK's stdio transport takes; answers the others.

    Iterated by the SDK's reader task in place of stdin (``stdio_server(stdin=...)``).
    Each line is screened (:func:`ahp.mcp.screen.screen`): one the SDK takes is
    yielded unchanged; one it would drop unanswered is answered here and not yielded
    (a blank line is skipped). Answers are sent into the SDK's write stream
    (:meth:`answer_into`, a clone of it), whose single writer task frames each message
    as one line on stdout; an answer waits for :meth:`answer_into` and then for that
    writer, so a client that stops reading stops our reading too (no buffer grows).

    Ownership: owns the clone and closes it when ``lines`` ends (the SDK's writer
    finishes once every sender is closed) or at :meth:`close`; does not own ``lines``.
    Cancellation: ``__anext__`` is cancellable at any await; an answer cancelled
    mid-send is not sent.
    """

    def __init__(self, lines: AsyncIterator[str], *, max_line_bytes: int = MAX_LINE_BYTES) -> None:
        self._lines = lines
        self._max_line_bytes = max_line_bytes
        self._answers: AnswerStream | None = None
        self._ready = trio.Event()
        self._closed = False

    def answer_into(self, stream: AnswerStream) -> None:
        """Send answers into ``stream`` (owned from now on: closed with this reader)."""
        if self._closed:
            stream.close()
            return
        self._answers = stream
        self._ready.set()

    def close(self) -> None:
        """Close the answer stream; later answers are dropped. Idempotent."""
        self._closed = True
        answers, self._answers = self._answers, None
        if answers is not None:
            answers.close()
        self._ready.set()

    def __aiter__(self) -> ScreenedLines:
        return self

    async def __anext__(self) -> str:
        while True:
            try:
                line = await self._lines.__anext__()
            except StopAsyncIteration:
                self.close()
                raise
            verdict = too_long(self._max_line_bytes) if line == TOO_LONG else screen(line)
            if verdict.forward:
                return line
            if verdict.reason:
                log.warning("stdin: %s (%s)", verdict.reason, _answered(verdict.answer))
            if verdict.answer is not None:
                await self._send(verdict.answer)

    async def _send(self, answer: Answer) -> None:
        await self._ready.wait()
        if self._answers is None:
            return
        try:
            await self._answers.send(SessionMessage(answer))
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            log.debug("stdin: the answer was not written (stdout closed)")


def _answered(answer: Answer | None) -> str:
    if answer is None:
        return "not answered"
    if isinstance(answer, mcp_types.JSONRPCError):
        return f"answered {answer.error.code}"
    return "answered with a tool error"
