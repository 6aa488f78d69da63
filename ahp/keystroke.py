"""The keystroke's fast path: every trick that shortens a keystroke's round trip, in one place.

Why one home: a keystroke typed by a remote client travels through six tasks in two
layers — the connection's reader (frame → ``terminal/input``), the terminal's reducer,
its input-write task (→ the pty), then back: pty-read, parse, reducer, and the
connection's writer (→ a frame with the echo). Each hop is a pass of Trio's
scheduler (~20 µs on this project's VMs) and each wait in ``epoll`` a sleep and a
wake-up. The tricks below cut passes, system calls and wake-ups on that path; they
used to be spread over five files and three layers. The code of each stays where it
acts (the engine cannot import the server), but its constants, its switch and the
account of what it saves live here, and every site names its trick.

None of them skips a stage: every keystroke goes through every task of the terminal
(``ahp.engine.terminal``, "One path"), eight task steps in-process from the caller to
the subscriber holding the echo, and in the sidecar the connection's reader and
writer take the caller's and the subscriber's places. The tricks make those steps
cheaper (fewer system calls, no extra passes, no sleep where the echo is microseconds
away); the time left is the Python work of each step (issue 23's trace,
``benchmarks/README.md``, "Issue 23: keystroke echo"). Three shortcuts that did fold
stages (the caller ran the reducer, the reducer wrote the pty, pty-read parsed and
applied) were removed in session 6 (``benchmarks/README.md``, "Issue 23: the folding
shortcuts removed").

The tricks (what each saves, measured on the sidecar's echo with the independent C
client unless said; the A/Bs that keep each are in ``benchmarks/README.md``, "Issue 23:
the keystroke's fast path" and "Issue 23: keystroke echo"; ``benchmarks/ab_echo.py``
runs them):

``fast_frames`` (``ahp.server.wsconn``)
    A client's small, final, masked text frame is unmasked and decoded here
    (:func:`parse_simple_frame`) instead of by wsproto's event machinery; anything
    else (fragments, control frames, binary, large or invalid frames) goes to
    wsproto from that byte on. Saves ~8 µs of CPU per keystroke (issue 17).
``fd_io`` (``ahp.server.wsconn``)
    On a plain socket, reads and writes go straight to its descriptor
    (non-blocking ``recv``/``send``, waiting for readiness only when needed);
    Trio's socket wrapper adds a scheduler pass to every successful call. Server CPU
    per keystroke 0.72x (issue 17).
``no_checkpoint`` (``ahp.server.dispatch``)
    The connection's reader dispatches input with ``checkpoint=False``: its own loop
    checkpoints at the next receive, so the dispatch does not add a pass.
``echo_pairing`` (``ahp.server.writer``, ``ahp.engine.outbox``)
    The envelope echoing a client's input is queued without waking the writer; the
    output it causes follows a few passes later and both leave in one write (one
    system call, one wake-up of the client), or the echo leaves alone after
    :data:`ECHO_PAIR_WAIT`. Server CPU per keystroke 0.82x (issue 17).

Removed after A/Bs showed they did not pay: ``small_read`` (pty-read handed a first read
shorter than 256 bytes on at once, without the read that would find the pty empty): 1.71x
when it came (issue 17), and in session 16, turned off against on, ``benchmarks/ab_echo.py``
8 and 14 rounds: back to back 0.942 and 0.950, after a pause 0.994 and 0.989, server CPU
per keystroke 0.86 and 0.98 (the EAGAIN read is a few microseconds of a step that costs
tens; ``benchmarks/README.md``, "Session 16"). ``echo_spin`` (input-write kept the scheduler
polling for up to 200 µs after a keystroke reached the pty, instead of sleeping in
``epoll_wait`` until the echo). The echo is the kernel's work, in an unbound kworker,
then ``cat``'s; a spinning core pushes both to the other core, and on the project's
virtual machines every wake-up across cores costs 0.15-0.3 ms, more than the sleep it
saved (session 12, three A/Bs without it against with it: back to back 0.88-1.12x,
after a pause 0.93-1.01x, server CPU per keystroke 0.80-1.08x, no gain anywhere;
``benchmarks/README.md``, "Session 12").

Cuts that are not switches, because they change only what a step costs, never what it
does (session 13): the connection's writer and each pty-read task keep one cancel scope
across their waits instead of entering one per wait (a scope costs ~5 us to enter and
leave, ~7 us with a deadline, and the keystroke's path entered two: the writer's
lone-echo wait and the pty-read's wait), replaced only after it fired; the reducer
returns a ``terminal/input`` at once (input changes nothing in the state); an outbox
take of two items that cannot merge (an echo and its output) skips coalescing. Two
interleaved A/Bs against the code before (``benchmarks/ab_echo.py``, 6 and 10 rounds):
after a pause 0.990 and 0.944 [0.92-1.00], back to back 0.998 and 0.984 (noise of
placement), server CPU per keystroke 0.92 and 1.02 (``benchmarks/README.md``,
"Session 13").

Switches: ``AHP_KEYSTROKE_OFF=name[,name...]`` (read once, at import) turns tricks off,
for A/B measurements only; :func:`enabled` tells the sites.
"""

from __future__ import annotations

import os
from typing import Final

__all__ = [
    "ECHO_PAIR_WAIT",
    "FAST_FRAME_MAX",
    "TRICKS",
    "enabled",
    "parse_simple_frame",
]

#: The tricks by name (see the module docstring).
TRICKS: Final = frozenset(
    {
        "fast_frames",
        "fd_io",
        "no_checkpoint",
        "echo_pairing",
    }
)
_OFF: Final = frozenset(
    name.strip() for name in os.environ.get("AHP_KEYSTROKE_OFF", "").split(",") if name.strip()
)

#: ``fast_frames``: the largest client frame parsed here rather than by wsproto.
FAST_FRAME_MAX: Final = 64 * 1024
#: ``echo_pairing``: seconds a lone input echo waits for the output it causes.
ECHO_PAIR_WAIT: Final = 0.002


def enabled(trick: str) -> bool:
    """Whether ``trick`` is on (all are, unless ``AHP_KEYSTROKE_OFF`` names it)."""
    if trick not in TRICKS:
        raise ValueError(f"no such trick: {trick!r}")
    return trick not in _OFF


def parse_simple_frame(buf: bytearray, max_size: int) -> tuple[str | None, bool]:
    """The ``fast_frames`` parser: ``(text, False)`` if ``buf`` starts with a whole
    simple client frame (final, masked, text, no extension bits, at most
    ``min(FAST_FRAME_MAX, max_size)`` bytes, valid UTF-8), which is then removed from
    ``buf``; ``(None, False)`` if more bytes are needed to tell; ``(None, True)`` if the
    frame is anything else (the caller hands every pending byte to wsproto).

    Pure: ``buf`` is only read, and cut once a frame was taken.
    """
    if len(buf) < 2:
        return None, False
    length = buf[1] & 0x7F
    if buf[0] != 0x81 or not buf[1] & 0x80 or length == 127:
        return None, True
    start = 2
    if length == 126:
        if len(buf) < 4:
            return None, False
        length = (buf[2] << 8) | buf[3]
        start = 4
        if length < 126:
            return None, True  # (a length not in its shortest form: wsproto closes, 1002)
    if length > FAST_FRAME_MAX or length > max_size:
        return None, True
    end = start + 4 + length
    if len(buf) < end:
        return None, False
    mask = int.from_bytes(bytes(buf[start : start + 4]) * ((length + 3) // 4 or 1), "little")
    payload = int.from_bytes(buf[start + 4 : end], "little") ^ mask
    try:
        text = (payload & ((1 << (8 * length)) - 1)).to_bytes(length, "little").decode()
    except UnicodeDecodeError:
        return None, True  # (wsproto closes with 1007)
    del buf[:end]
    return text, False
