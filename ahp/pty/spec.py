"""What to run, and whether it can run: :class:`SpawnSpec`, :class:`SpawnError`, validation.

Why this module exists: once a child is forked, a bad ``cwd`` or a missing executable
turns into an exit status and a line of text on the terminal, long after the caller
could have said anything useful. Checking the spec *before* any fd is opened or any
process started gives the caller a clear, human error (``SpawnError``) and gives the
spawner a trivial failure path: nothing to close, nothing to reap.

The checks mirror what the child will do: the working directory is resolved as given
(absolute, existing, a searchable directory), and ``argv[0]`` is looked up the way
``execvp(3)`` will look it up in the child, i.e. on the ``PATH`` of the spec's own
environment (or the libc default path when it has none), with relative ``PATH``
entries and relative names taken relative to the child's ``cwd``.

There is an unavoidable race (the file system can change between the check and the
exec); the spawner still maps any ``OSError`` it sees to ``SpawnError``, and an exec
failure *after* the check shows up as exit status 127 (126 when not executable, with
``setsid``) and a message on the terminal.

This module does no I/O beyond ``stat``/``access`` calls and owns no resources.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from typing import Final

import attrs

__all__ = [
    "MAX_WINDOW_DIMENSION",
    "DisposedWhileStarting",
    "SpawnError",
    "SpawnSpec",
    "resolve_executable",
    "validate",
]

#: ``struct winsize`` stores rows and columns as unsigned 16-bit integers.
MAX_WINDOW_DIMENSION: Final = 0xFFFF


class SpawnError(Exception):
    """The child could not be started; ``str(exc)`` is a sentence fit for a human.

    Examples: ``cwd '/nope' does not exist``, ``executable 'zsh-x' not found on PATH
    (/usr/bin:/bin)``. When an ``OSError`` was the cause it is chained as ``__cause__``.
    When this is raised, no process was left running and no fd was left open.
    """


class DisposedWhileStarting(SpawnError):
    """The terminal was disposed (or its host closed) before its child started: nothing
    about the request was wrong, the terminal is just gone."""


@attrs.frozen
class SpawnSpec:
    """Everything needed to start one child.

    Attributes:
        argv: Program and arguments; ``argv[0]`` is looked up on ``env['PATH']``.
        cwd: Absolute filesystem path of the working directory (callers convert
            ``file://`` URIs before building the spec).
        env: The *complete* environment of the child; nothing is inherited from
            this process. Without a ``PATH`` the libc default (``/bin:/usr/bin``) applies.
        cols: Initial window width in character cells (pty mode only).
        rows: Initial window height in character cells (pty mode only).
        use_pty: ``True`` runs the child on a fresh pty as its controlling terminal;
            ``False`` uses plain pipes: one for stdin and one shared by stdout and stderr.
        stdin_closed: pipe mode only: stdin is ``/dev/null`` (a read ends at once), and
            the :class:`~ahp.pty.Child` has no input fd.
        stderr_apart: pipe mode only: stderr gets a pipe of its own
            (:attr:`Child.error_fd <ahp.pty.Child.error_fd>`) instead of sharing stdout's.
    """

    argv: tuple[str, ...]
    cwd: str
    env: Mapping[str, str]
    cols: int = 80
    rows: int = 24
    use_pty: bool = True
    stdin_closed: bool = False
    stderr_apart: bool = False


def check_window_size(cols: int, rows: int) -> None:
    """Raise ``ValueError`` unless both dimensions fit in ``struct winsize``."""
    if not (1 <= cols <= MAX_WINDOW_DIMENSION and 1 <= rows <= MAX_WINDOW_DIMENSION):
        raise ValueError(
            f"window size {cols}x{rows} is invalid: cols and rows must be "
            f"between 1 and {MAX_WINDOW_DIMENSION}"
        )


def validate(spec: SpawnSpec) -> str:
    """Check that ``spec`` can be spawned; return the resolved path of ``argv[0]``.

    Raises:
        SpawnError: With a message naming the offending value.
    """
    if not spec.argv:
        raise SpawnError("argv is empty: there is no program to run")
    for index, arg in enumerate(spec.argv):
        if "\0" in arg:
            raise SpawnError(f"argv[{index}] {arg!r} contains a NUL character")
    for key, value in spec.env.items():
        if not key or "=" in key or "\0" in key:
            raise SpawnError(f"environment variable name {key!r} is invalid")
        if "\0" in value:
            raise SpawnError(f"environment variable {key!r} contains a NUL character")
    try:
        check_window_size(spec.cols, spec.rows)
    except ValueError as exc:
        raise SpawnError(str(exc)) from None
    if spec.use_pty and (spec.stdin_closed or spec.stderr_apart):
        raise SpawnError("stdin_closed and stderr_apart need pipes (use_pty=False)")
    _check_cwd(spec.cwd)
    return resolve_executable(spec.argv[0], cwd=spec.cwd, env=spec.env)


def _check_cwd(cwd: str) -> None:
    if not os.path.isabs(cwd):
        raise SpawnError(f"cwd {cwd!r} is not an absolute path")
    if not os.path.exists(cwd):
        raise SpawnError(f"cwd {cwd!r} does not exist")
    if not os.path.isdir(cwd):
        raise SpawnError(f"cwd {cwd!r} is not a directory")
    if not os.access(cwd, os.X_OK):
        raise SpawnError(f"cwd {cwd!r} is not accessible (permission denied)")


def resolve_executable(name: str, *, cwd: str, env: Mapping[str, str]) -> str:
    """Find ``name`` the way ``execvp`` in the child (running in ``cwd``) will.

    Returns:
        The path that will be executed (absolute unless ``PATH`` itself says otherwise).

    Raises:
        SpawnError: If nothing executable is found.
    """
    if not name:
        raise SpawnError("argv[0] is empty: there is no program to run")
    if "/" in name:
        path = os.path.join(cwd, name)  # join() keeps ``name`` as is when it is absolute
        if not os.path.exists(path):
            raise SpawnError(f"executable {name!r} does not exist")
        if os.path.isdir(path):
            raise SpawnError(f"executable {name!r} is a directory")
        if not os.access(path, os.X_OK):
            raise SpawnError(f"executable {name!r} is not executable (permission denied)")
        return path
    entries = os.get_exec_path(env)  # honours a missing PATH with os.defpath, like libc
    # An empty or relative PATH entry is relative to the child's cwd, not ours.
    search = os.pathsep.join(os.path.join(cwd, entry) for entry in entries)
    found = shutil.which(name, path=search)
    if found is None:
        raise SpawnError(f"executable {name!r} not found on PATH ({os.pathsep.join(entries)})")
    return found
