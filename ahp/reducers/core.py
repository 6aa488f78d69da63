"""The terminal core: the reducer stage's rules, sans I/O.

Why: a terminal's policy (what a client may dispatch, how long a title may be)
must be testable without a pty or Trio; the engine's reducer task only drives
it. (This module grows into the whole core: see the engine's docstrings.)
"""

from __future__ import annotations

from typing import Final

__all__ = ["MAX_TITLE"]

#: Longest title (characters) a terminal accepts from a client (``terminal/titleChanged``,
#: ``createTerminal.name``), like the shell's OSC 0/2 titles, which the scanner bounds at
#: ``MAX_PENDING_ESCAPE`` (4096) bytes. Longer ones are rejected.
MAX_TITLE: Final = 4096
