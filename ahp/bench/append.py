"""Append scaling of the pure reducer: is appending output O(chunk)?

Why: terminal content grows by small ``terminal/data`` chunks while older
states stay alive (held by subscribers, snapshots, the replay log). With plain
strings each append would copy the whole tail, and appending 100 MB would cost
~100x appending 10 MB instead of ~10x. This folds ``size`` bytes of 4 KiB
chunks through :func:`ahp.reducers.reduce_terminal`, keeping the last 8 states
alive, without a pty or a scrollback trim; the figure is the time ratio of a
large and a 10x smaller size (target <= 12x).

:func:`commands_seconds` does the same for a long-lived agent shell: many
short commands (a prompt, the command, one line of output, its end), folded
with the engine's scrollback accounting. With the content kept as a tuple each
append cost O(number of parts), so 10x the commands cost far more than 10x the
time; the target is again <= 12x.
"""

from __future__ import annotations

import gc
import time
from collections import deque

from ahp.protocol.actions import (
    StateAction,
    TerminalCommandExecuted,
    TerminalCommandFinished,
    TerminalData,
)
from ahp.protocol.state import ClientClaim, TerminalState
from ahp.reducers import DEFAULT_SCROLLBACK, Scrollback, reduce_terminal

__all__ = ["CHUNK", "RETAINED", "append_seconds", "commands_seconds"]

CHUNK = 4096
RETAINED = 8


def _chunks() -> list[TerminalData]:
    """16 distinct 4 KiB chunks of text lines with a little multi-byte UTF-8."""
    chunks: list[TerminalData] = []
    for n in range(16):
        line = f"{n:04d} compiling src/module_{n}.rs: warning: unused variable `größe` → ok\r\n"
        text = (line * (CHUNK // len(line) + 1))[:CHUNK]
        chunks.append(TerminalData(data=text))
    return chunks


def append_seconds(total_bytes: int) -> float:
    """Seconds to append ``total_bytes`` of output in 4 KiB chunks, 8 states retained."""
    actions = _chunks()
    state = TerminalState(title="bench", claim=ClientClaim(clientId=""), content=())
    retained: deque[TerminalState] = deque(maxlen=RETAINED)
    count = max(1, total_bytes // CHUNK)
    gc.collect()
    start = time.perf_counter()
    for i in range(count):
        state = reduce_terminal(state, actions[i & 15])
        retained.append(state)
    seconds = time.perf_counter() - start
    del retained, state
    gc.collect()
    return seconds


def commands_seconds(commands: int) -> float:
    """Seconds to fold ``commands`` short commands (prompt, command, 64 characters of
    output, end) with the default scrollback accounting, 8 states retained."""
    state = TerminalState(title="bench", claim=ClientClaim(clientId=""), content=())
    scrollback = Scrollback(DEFAULT_SCROLLBACK)
    retained: deque[TerminalState] = deque(maxlen=RETAINED)
    prompt = TerminalData(data="agent@host:~/src$ ")
    output = TerminalData(data="x" * 62 + "\r\n")
    gc.collect()
    start = time.perf_counter()
    for n in range(commands):
        cid = f"c{n}"
        actions: tuple[StateAction, ...] = (
            prompt,
            TerminalCommandExecuted(commandId=cid, commandLine="make test", timestamp=n),
            output,
            TerminalCommandFinished(commandId=cid, exitCode=0, durationMs=3),
        )
        for action in actions:
            state = scrollback.account(reduce_terminal(state, action), action)
            retained.append(state)
    seconds = time.perf_counter() - start
    del retained, state
    gc.collect()
    return seconds
