"""Launch preparation: a :class:`TerminalSpec` checked and turned into what to spawn.

Why a separate step, run before a terminal's URI is reserved: everything that
can be refused without starting a process (a cwd that does not exist or is not
a local ``file://`` URI, a program that is not on ``PATH``, a title that is too
long, a NUL in the environment) is refused here, synchronously, with a
:class:`~ahp.pty.SpawnError`, while nothing is registered yet. A terminal that
gets past this point exists in the host's table, and every path of its
lifetime from then on ends in ``closed`` (see :mod:`ahp.engine.terminal`), so
a dispose or a host shutdown that arrives while it spawns never waits for good.

The only I/O is reading the filesystem to validate, and the temporary zsh
``ZDOTDIR`` that :func:`ahp.shell.prepare_shell` may create: the returned
:class:`Launch` owns it, and :func:`discard` (or the terminal, once its process
ended) removes it. On any error here, nothing is left behind.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from typing import Final

import attrs

from ahp.protocol.state import TerminalClaim
from ahp.protocol.uri import local_file_uri_to_path, path_to_file_uri
from ahp.pty import SpawnError, SpawnSpec
from ahp.pty.environment import NONINTERACTIVE_ENV
from ahp.pty.spec import validate
from ahp.reducers import DEFAULT_SCROLLBACK
from ahp.reducers.core import MAX_TITLE, normal_title
from ahp.shell import ShellLaunch, prepare_shell, remove_launch_files

__all__ = [
    "DISPOSE_GRACE",
    "Launch",
    "TerminalSpec",
    "default_launch_problem",
    "default_shell",
    "discard",
    "prepare_launch",
]

#: Default grace period between hang-up and kill on dispose.
DISPOSE_GRACE: Final = 2.0


def default_shell(env: Mapping[str, str]) -> str:
    """The user's shell: ``$SHELL``, else ``/bin/sh``."""
    return env.get("SHELL") or "/bin/sh"


def default_launch_problem(shell: str | None, cwd: str | None) -> str | None:
    """Why a terminal started with these defaults (a host's ``shell`` and ``cwd``;
    ``None``: ``$SHELL``, the home directory) cannot start now, or ``None``: the
    directory is missing or cannot be entered, the program is not found or not
    executable. Only the filesystem is looked at (a few ``stat``s): for ``serve``'s
    start-up and ``/readyz``."""
    env = dict(os.environ)
    try:
        path = _cwd_path(cwd)
        validate(SpawnSpec(argv=(shell or default_shell(env),), cwd=path, env=env))
    except SpawnError as exc:
        return str(exc)
    return None


@attrs.frozen
class TerminalSpec:
    """How to create a terminal.

    ``argv`` runs a program; without it the user's shell runs (``shell``, else
    ``$SHELL``, else ``/bin/sh``) with command detection injected when the shell
    is bash, zsh or fish. ``cwd`` is an absolute path or a ``file://`` URI
    (default: the home directory; a host with a default of its own fills it in).
    The child's environment is this process's environment plus
    ``TERM=xterm-256color``, plus (unless ``interactive``) the non-interactive
    defaults :data:`ahp.pty.environment.NONINTERACTIVE_ENV` (no pagers, no
    credential prompts), plus ``env``. ``name`` (the initial title) is at most
    :data:`~ahp.reducers.core.MAX_TITLE` characters.
    """

    uri: str
    claim: TerminalClaim
    name: str | None = None
    argv: tuple[str, ...] | None = None
    shell: str | None = None
    login: bool = False
    cwd: str | None = None
    env: Mapping[str, str] = attrs.field(factory=dict)
    cols: int = 80
    rows: int = 24
    use_pty: bool = True
    shell_integration: bool = True
    scrollback: int = DEFAULT_SCROLLBACK
    grace: float = DISPOSE_GRACE
    interactive: bool = False
    #: Niceness added to the process (:meth:`ahp.pty.Child.renice_processes` right after
    #: the spawn; its descendants inherit it) and given to a pty child's autogroup: 0
    #: leaves it at the server's.
    nice: int = 0
    #: Load the user's startup files (``~/.bashrc``, ...) before command detection; False
    #: starts the shell without them (:func:`ahp.shell.prepare_shell` ``user_rc``).
    user_rc: bool = True
    #: Pipes only (``use_pty=False``): stdin is ``/dev/null``, and stderr has a pipe of its
    #: own, read beside stdout (:class:`ahp.pty.SpawnSpec`; what :mod:`ahp.engine.exec` uses).
    stdin_closed: bool = False
    stderr_apart: bool = False


@attrs.frozen
class Launch:
    """A validated launch: what to spawn, and the terminal's first title and cwd."""

    spawn: SpawnSpec
    shell: ShellLaunch
    title: str
    cwd_uri: str

    @property
    def integrated(self) -> bool:
        return self.shell.integrated


def _cwd_path(cwd: str | None) -> str:
    if cwd is None:
        return os.path.expanduser("~")
    if cwd.startswith("file:"):
        try:
            return local_file_uri_to_path(cwd, socket.gethostname())
        except ValueError as exc:
            raise SpawnError(f"cwd {cwd!r} is not a usable file:// URI: {exc}") from None
    if not os.path.isabs(cwd):
        raise SpawnError(f"cwd must be an absolute path or a file:// URI, got {cwd!r}")
    return cwd


def prepare_launch(spec: TerminalSpec, *, nonce: str) -> Launch:
    """Check ``spec`` and build its launch (shell integration injected when possible).

    Raises:
        SpawnError: the terminal cannot be started (the message names the value);
            nothing is left behind.
    """
    if spec.name is not None and len(spec.name) > MAX_TITLE:
        raise SpawnError(f"name is longer than {MAX_TITLE} characters")
    if spec.argv is not None and not spec.argv:
        raise SpawnError("argv must not be empty")
    base_env = dict(os.environ)
    base_env["TERM"] = "xterm-256color"
    if not spec.interactive:
        base_env.update(NONINTERACTIVE_ENV)
    base_env.update(spec.env)
    cwd = _cwd_path(spec.cwd)
    if spec.argv is not None:
        shell = ShellLaunch(argv=tuple(spec.argv), env=base_env, integrated=False)
    else:
        program = spec.shell or default_shell(base_env)
        argv = (program, "-l") if spec.login else (program,)
        if spec.shell_integration and spec.use_pty:
            shell = prepare_shell(
                argv, base_env, nonce=nonce, login=spec.login, user_rc=spec.user_rc
            )
        else:
            shell = ShellLaunch(argv=argv, env=base_env, integrated=False)
    try:
        spawn = SpawnSpec(
            argv=shell.argv,
            cwd=cwd,
            env=shell.env,
            cols=spec.cols,
            rows=spec.rows,
            use_pty=spec.use_pty,
            stdin_closed=spec.stdin_closed,
            stderr_apart=spec.stderr_apart,
        )
        validate(spawn)
        cwd_uri = path_to_file_uri(cwd)
    except ValueError as exc:  # path_to_file_uri: cannot happen after validate; be safe
        remove_launch_files(shell)
        raise SpawnError(str(exc)) from None
    except BaseException:
        remove_launch_files(shell)
        raise
    program = spec.argv[0] if spec.argv else shell.argv[0]
    title = spec.name or os.path.basename(program)
    return Launch(spawn=spawn, shell=shell, title=normal_title(title[:MAX_TITLE]), cwd_uri=cwd_uri)


def discard(launch: Launch) -> None:
    """Remove the launch's temporary files (idempotent)."""
    remove_launch_files(launch.shell)
