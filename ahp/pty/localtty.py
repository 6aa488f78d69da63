"""The terminal of the person running ``python -m ahp attach``: raw mode, size, stdio, signals.

Why here: :mod:`ahp.pty` is the only package with termios/fcntl/signal code, and
a local terminal is the other end of the same kind of device the host spawns
processes on. :func:`open_local_terminal` is everything ``attach`` needs:

* stdin and stdout as non-blocking Trio streams (``FdStream`` over ``dup``-ed
  fds, so the event loop never blocks on a slow terminal);
* raw mode (no echo, no line editing, no signal keys: Ctrl-C and Ctrl-Z travel
  to the remote terminal as bytes), when stdin is a terminal;
* the window size and its changes (``SIGWINCH``);
* restoration on every exit path: leaving the ``async with`` block — normally,
  by an exception, by cancellation — puts back the saved termios attributes and
  the blocking mode of both fds (``O_NONBLOCK`` lives on the shared open file
  description, so the parent shell would otherwise inherit it).

:func:`exit_signal_receiver` turns ``SIGTERM``/``SIGHUP`` into events a Trio task
can wait for, so they also end in the ``finally`` clauses rather than killing
the process with the terminal still raw.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import signal
import stat
import struct
import sys
import termios
import tty
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from typing import Final

import trio

__all__ = [
    "EXIT_SIGNALS",
    "LocalTerminal",
    "exit_signal_receiver",
    "open_local_terminal",
    "pending_input",
    "raw_mode",
    "window_size",
]

#: Signals that end an ``attach`` session cleanly (terminal restored first).
EXIT_SIGNALS: Final = (signal.SIGTERM, signal.SIGHUP)
_WINSIZE: Final = struct.Struct("HHHH")  # rows, cols, xpixel, ypixel
#: Primary device attributes (DA1): every VT100-compatible terminal answers it, after
#: answering whatever it was asked before (terminals answer in order).
DA1_QUERY: Final = b"\x1b[c"
_DA1_REPLY: Final = re.compile(rb"\x1b\[\?[0-9;]*c")
#: Longest wait for the terminal's DA1 answer in :meth:`LocalTerminal.settle`.
SETTLE_TIMEOUT: Final = 2.0
#: Most input :meth:`LocalTerminal.settle` reads (and discards) while waiting.
MAX_SETTLE_INPUT: Final = 64 * 1024


def window_size(fd: int) -> tuple[int, int] | None:
    """``(cols, rows)`` of the terminal on ``fd``; None if it is not a terminal or unsized."""
    try:
        packed = fcntl.ioctl(fd, termios.TIOCGWINSZ, b"\0" * _WINSIZE.size)
    except OSError:
        return None
    rows, cols, _, _ = _WINSIZE.unpack(packed)
    if rows == 0 or cols == 0:
        return None
    return cols, rows


def pending_input(fd: int) -> bool:
    """Whether ``fd`` is a pipe, socket or file (not a terminal) with data to read now.

    Non-blocking and without consuming anything: the readable byte count
    (``FIONREAD``) of a pipe or socket, the bytes after the offset of a file. A
    terminal, a character device such as ``/dev/null`` or a closed fd: False.
    """
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISREG(mode):
            return os.fstat(fd).st_size > os.lseek(fd, 0, os.SEEK_CUR)
        if stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode):
            count = fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0")
            return int.from_bytes(count, sys.byteorder) > 0
    except OSError:
        return False
    return False


@contextlib.contextmanager
def raw_mode(fd: int) -> Iterator[bool]:
    """Raw mode on ``fd`` for the block (yields whether it applied: False if not a tty).

    The saved attributes are restored on exit, whatever ended the block, with
    ``TCSAFLUSH``: output already written is still shown, and input nobody read
    (a terminal's late answers to a remote program's queries) is dropped rather
    than left for the shell.
    """
    try:
        saved = termios.tcgetattr(fd)
    except termios.error:
        yield False
        return
    try:
        tty.setraw(fd, termios.TCSANOW)
        yield True
    finally:
        with contextlib.suppress(termios.error, OSError):
            termios.tcsetattr(fd, termios.TCSAFLUSH, saved)


@contextlib.contextmanager
def exit_signal_receiver() -> Iterator[AsyncIterator[int]]:
    """Catch :data:`EXIT_SIGNALS` for the block; iterate the receiver to see them."""
    with trio.open_signal_receiver(*EXIT_SIGNALS) as receiver:
        yield receiver


class LocalTerminal:
    """stdin/stdout of this process while attached; see :func:`open_local_terminal`."""

    def __init__(
        self, input_fd: int, output_fd: int, stdin: trio.lowlevel.FdStream, stdout: trio.abc.Stream
    ) -> None:
        self.input_fd = input_fd
        self.output_fd = output_fd
        #: Keystrokes (raw bytes); ``b""`` at end of input.
        self.stdin = stdin
        #: Where the remote terminal's output is written.
        self.stdout = stdout
        self.raw = False

    @property
    def is_terminal(self) -> bool:
        return os.isatty(self.input_fd)

    async def settle(self, timeout: float = SETTLE_TIMEOUT) -> bytes:
        """Discard whatever the terminal has sent so far; return what came after it.

        Why: output written to the terminal (a replayed history) may have made it
        answer queries; those answers are not keystrokes. This asks for the device
        attributes (:data:`DA1_QUERY`) and reads input up to the answer, which the
        terminal sends after every earlier answer: everything before it is
        dropped, what follows it (keys typed meanwhile) is returned. When no
        answer comes within ``timeout`` or :data:`MAX_SETTLE_INPUT` bytes, pending
        input is flushed (``TCIFLUSH``) and ``b""`` returned. Only for a terminal
        on both stdin and stdout; cancellation leaves input partly read.
        """
        await self.stdout.send_all(DA1_QUERY)
        seen = b""
        with trio.move_on_after(timeout):
            while len(seen) < MAX_SETTLE_INPUT:
                chunk = await self.stdin.receive_some(MAX_SETTLE_INPUT)
                if not chunk:
                    return b""
                seen += chunk
                match = _DA1_REPLY.search(seen)
                if match is not None:
                    return seen[match.end() :]
        self.discard_input()
        return b""

    def discard_input(self) -> None:
        """Drop input the terminal has received but nobody read (``TCIFLUSH``)."""
        with contextlib.suppress(termios.error, OSError):
            termios.tcflush(self.input_fd, termios.TCIFLUSH)

    def size(self) -> tuple[int, int] | None:
        """``(cols, rows)`` of the local window (stdout's terminal, else stdin's)."""
        return window_size(self.output_fd) or window_size(self.input_fd)

    async def follow_window_size(
        self,
        on_change: Callable[[int, int], Awaitable[None]],
        known: tuple[int | None, int | None] | None = None,
    ) -> None:
        """Call ``on_change(cols, rows)`` whenever the local window size differs from the last.

        ``known`` is the size the other side already has: if the current size
        differs, ``on_change`` is called at once. Then after every ``SIGWINCH``
        that changed the size (bursts are coalesced). Runs until cancelled; the
        signal receiver is open before the first size is read, so no change is lost.
        """
        last: tuple[int | None, int | None] | None = known
        with trio.open_signal_receiver(signal.SIGWINCH) as changes:
            size = self.size()
            if size is not None and size != last:
                last = size
                await on_change(*size)
            async for _ in changes:
                size = self.size()
                if size is not None and size != last:
                    last = size
                    await on_change(*size)


@asynccontextmanager
async def open_local_terminal(
    input_fd: int = 0, output_fd: int = 1, *, raw: bool = True
) -> AsyncIterator[LocalTerminal]:
    """Non-blocking streams over ``input_fd``/``output_fd``, raw mode if a tty; all restored.

    Ownership: the streams are over private ``dup``-s of the fds and are closed on
    exit; the original fds stay open, blocking as before and in their previous
    termios mode.
    """
    blocking = {fd: os.get_blocking(fd) for fd in (input_fd, output_fd)}
    try:
        with contextlib.ExitStack() as stack:
            stdin = trio.lowlevel.FdStream(os.dup(input_fd))
            stack.callback(stdin.close)
            stdout = trio.lowlevel.FdStream(os.dup(output_fd))
            stack.callback(stdout.close)
            local = LocalTerminal(input_fd, output_fd, stdin, stdout)
            local.raw = stack.enter_context(raw_mode(input_fd)) if raw else False
            yield local
    finally:
        # FdStream restores the mode it found, but two streams on one open file
        # description (a tty on fds 0 and 1) may find each other's: set it explicitly.
        for fd, was_blocking in blocking.items():
            with contextlib.suppress(OSError):
                os.set_blocking(fd, was_blocking)
