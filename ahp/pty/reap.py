"""Leftovers of a terminal's session: background jobs that outlive the shell.

Why: a terminal's process is the leader of its own session (``setsid``), and
:meth:`ahp.pty.Child.terminate` signals its *process group*. A job-control shell
puts background jobs (``sleep 100 &``) and pipelines in other process groups of
the same session, and a non-interactive ``sh -c 'x &'`` leaves ``x`` behind in
the group of a command that has finished. Such processes keep the pty open and
would outlive the disposed terminal as orphans. Every process whose session id
is the terminal's pid belongs to that terminal; after the leader has been
terminated and reaped, :func:`kill_session` stops and kills whatever is left
(found by :mod:`ahp.pty.procfs`'s scan, :func:`~ahp.pty.procfs.session_members`).

Killing is paced: a thousand processes killed at once exit at once, and the
kernel's exit work (serialised on its task list, interrupts off) then takes both
cores of a small machine for 50 to 140 ms, whatever their nice value: every other
terminal's output and every client's echo wait that long (issue 25). So
:func:`kill_session` sends ``SIGKILL`` :data:`KILL_BATCH` processes at a time and
sleeps :data:`KILL_PAUSE` between batches; the members are all stopped first, at
once (``SIGSTOP`` costs the kernel little), so none can fork while the kill goes
on. It blocks for that long (about 0.6 s per thousand leftovers): call it from a
worker thread, as the engine does.

A process that called ``setsid`` itself (a daemon) has left the terminal for good
and is not chased. Linux keeps a pid allocated while any process still uses it as
its session id, so the pid of a reaped leader cannot name an unrelated session.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import time
from typing import Final

from ahp.pty.procfs import session_members

__all__ = ["kill_session", "session_members"]

log = logging.getLogger("ahp.pty")

#: Rounds of scan-and-kill (a member may fork while the previous round runs).
KILL_ROUNDS: Final = 10
#: Processes sent ``SIGKILL`` between two pauses (their exits then overlap little).
KILL_BATCH: Final = 16
#: Seconds slept after each batch of :data:`KILL_BATCH` kills.
KILL_PAUSE: Final = 0.002


def kill_session(sid: int, *, paced: bool = True) -> int:
    """Stop, then kill, every remaining process of session ``sid``; how many were found.

    Call it only after the session leader (pid ``sid``) has been reaped. Blocking
    (a procfs scan per round, and with ``paced`` a pause per :data:`KILL_BATCH`
    kills): run it in a worker thread. ``paced=False`` kills at once, for a process
    about to exit.
    """
    found: set[int] = set()
    for _ in range(KILL_ROUNDS):
        members = [pid for pid in session_members(sid) if pid != os.getpid()]
        if not members:
            break
        found.update(members)
        for pid in members:  # stopped processes cannot fork
            _signal(pid, signal.SIGSTOP)
        for n, pid in enumerate(members, 1):
            _signal(pid, signal.SIGKILL)
            if paced and n % KILL_BATCH == 0 and n < len(members):
                time.sleep(KILL_PAUSE)
    if found:
        log.info("killed %d leftover process(es) of terminal session %d", len(found), sid)
    return len(found)


def _signal(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)
