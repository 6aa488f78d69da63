"""Leftovers of a terminal's session: background jobs that outlive the shell.

Why: a terminal's process is the leader of its own session (``setsid``), and
:meth:`ahp.pty.Child.terminate` signals its *process group*. A job-control shell
puts background jobs (``sleep 100 &``) and pipelines in other process groups of
the same session, and a non-interactive ``sh -c 'x &'`` leaves ``x`` behind in
the group of a command that has finished. Such processes keep the pty open and
would outlive the disposed terminal as orphans. Every process whose session id
is the terminal's pid belongs to that terminal; after the leader has been
terminated and reaped, :func:`kill_session` stops and kills whatever is left.

A process that called ``setsid`` itself (a daemon) has left the terminal for good
and is not chased. Linux keeps a pid allocated while any process still uses it as
its session id, so the pid of a reaped leader cannot name an unrelated session.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
from typing import Final

__all__ = ["kill_session", "session_members"]

log = logging.getLogger("ahp.pty")

#: Rounds of scan-and-kill (a member may fork while the previous round runs).
KILL_ROUNDS: Final = 10


def session_members(sid: int) -> list[int]:
    """Pids of the live (not zombie) processes whose session id is ``sid``."""
    members = []
    try:
        entries = os.listdir("/proc")
    except OSError:  # no procfs: nothing to sweep
        return []
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        # pid (comm) state ppid pgrp session ...; comm may contain spaces and ')'.
        fields = stat.rsplit(b")", 1)[-1].split()
        if len(fields) > 3 and int(fields[3]) == sid and fields[0] not in (b"Z", b"X"):
            members.append(int(entry))
    return members


def kill_session(sid: int) -> int:
    """Stop, then kill, every remaining process of session ``sid``; how many were found.

    Call it only after the session leader (pid ``sid``) has been reaped.
    """
    found: set[int] = set()
    for _ in range(KILL_ROUNDS):
        members = [pid for pid in session_members(sid) if pid != os.getpid()]
        if not members:
            break
        found.update(members)
        for sig in (signal.SIGSTOP, signal.SIGKILL):  # stopped processes cannot fork
            for pid in members:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, sig)
    if found:
        log.info("killed %d leftover process(es) of terminal session %d", len(found), sid)
    return len(found)
