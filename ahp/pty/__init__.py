"""Child processes on ptys: the only place in ``ahp`` with os/fcntl/termios/signal code.

Why this package exists: every other layer is either pure (protocol, reducers, vt
scanner) or Trio-structured (engine, server). Process spawning, controlling
terminals, non-blocking fds, window sizes, signal escalation and reaping are where
terminal hosts leak fds, leave zombies and block their event loop, so all of it
lives here, behind a handful of names:

* :func:`spawn` turns a :class:`SpawnSpec` into a running :class:`Child`, or raises
  :class:`SpawnError` with a message fit for a human and nothing left behind;
* :class:`Child` reads (``read_nowait``/``wait_readable``), writes (``write``, which
  raises :class:`ChildGone`), resizes, signals, waits and always cleans up
  (``terminate``);
* :func:`kill_session` sweeps what a terminal's session leaves behind (procfs scan);
* :mod:`ahp.pty.orphans` reaps and, at exit, kills what detaches from the terminals
  (``serve`` only: it is a child subreaper, or PID 1 of a container);
* :mod:`ahp.pty.process` forks from the loop's thread, so that children die with the
  server (their death signal), and lists our children for the orphan reaper.

No buffering happens here beyond the kernel's; the engine owns the reader/writer
tasks and the bounds. See ``child.py`` for the Linux pty EOF/EIO facts.
"""

from ahp.pty.child import DEFAULT_GRACE, SIGTERM_GRACE, WRITE_CHUNK, Child, ChildGone
from ahp.pty.launch import spawn
from ahp.pty.procfs import session_members
from ahp.pty.reap import kill_session
from ahp.pty.spec import SpawnError, SpawnSpec

__all__ = [
    "DEFAULT_GRACE",
    "SIGTERM_GRACE",
    "WRITE_CHUNK",
    "Child",
    "ChildGone",
    "SpawnError",
    "SpawnSpec",
    "kill_session",
    "session_members",
    "spawn",
]
