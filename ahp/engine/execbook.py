"""A host's book of its execs: the running ones, the finished ones kept, the pushed out.

Why a module of its own: the book belongs to the host and lives and dies with it, while
the exec logic (:mod:`ahp.engine.exec`) is a layer above the host, which does not import
it. The book used to be three module-level maps keyed weakly by the host; their values
(an exec holds its host) kept every host alive, with every kept output, after its
``open_host()`` ended. Held by the host, the book is freed with it.

Bounds: the kept ones are at most :data:`ahp.engine.exec.EXEC_TERMINALS_KEPT` (the exec
layer trims them). No I/O.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ahp.engine.exec import Exec

__all__ = ["ExecBook"]


class ExecBook:
    """One host's execs by terminal URI (see the module docstring)."""

    __slots__ = ("finished", "running", "stale")

    def __init__(self) -> None:
        #: Execs whose process runs.
        self.running: dict[str, Exec] = {}
        #: Finished execs still listed, oldest first.
        self.finished: dict[str, Exec] = {}
        #: Finished exec terminals pushed out of the kept ones, not yet disposed.
        self.stale: list[str] = []

    def clear(self) -> None:
        """Forget every exec (the host closed: their outputs are freed now)."""
        self.running.clear()
        self.finished.clear()
        self.stale.clear()
