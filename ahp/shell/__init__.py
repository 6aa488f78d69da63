"""Shell integration: make bash, zsh and fish report command boundaries.

A terminal only knows bytes. To tell an AHP client "this command started, printed this and exited
with 1", the shell itself has to mark its prompt and its commands. We do that the way the VS Code
agent host does: when we recognise an interactive bash, zsh or fish launch, we rewrite the launch so
the shell loads the user's normal startup files and then one of our scripts
(``ahp/shell/scripts/``), which installs hooks that print OSC 633 sequences::

    ESC ] 633 ; D [; <exit code>] BEL     previous command finished (bare D: no command ran)
    ESC ] 633 ; P ; Cwd=<escaped $PWD> BEL
    ESC ] 633 ; A BEL  <the user's prompt>  ESC ] 633 ; B BEL
    ...the user types a command line...
    ESC ] 633 ; E ; <escaped command line> ; <nonce> BEL
    ESC ] 633 ; C BEL
    ...command output...
    ESC ] 633 ; D ; <exit code> BEL      (then P, A, prompt, B again)

The nonce is random per terminal. It reaches the shell as ``AHP_NONCE``; every script moves it into
a non-exported shell variable before any user code runs, so programs started from the shell cannot
read it and therefore cannot forge a trusted ``E`` (command line) sequence.

This module is pure launch rewriting: it never starts a process. The only I/O is creating (and, in
:func:`remove_launch_files`, deleting) the private zsh ``ZDOTDIR``. Whoever owns the terminal owns
the returned :class:`ShellLaunch` and must call :func:`remove_launch_files` once the shell has
exited (calling it earlier is safe too: zsh reads those files only at start-up).

Anything we do not recognise (``sh``, ``dash``, ``python``, ``bash -c ...``, ``zsh script.zsh``) is
returned untouched with ``integrated=False``: no command detection, but nothing breaks.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Final

import attrs

__all__ = [
    "SCRIPTS_DIR",
    "ShellLaunch",
    "escape_value",
    "prepare_shell",
    "remove_launch_files",
]

SCRIPTS_DIR: Final = Path(__file__).resolve().parent / "scripts"
"""Directory holding the integration scripts (shipped as package data)."""

BASH_SCRIPT: Final = SCRIPTS_DIR / "bash_integration.sh"
ZSH_SCRIPT: Final = SCRIPTS_DIR / "zsh_integration.zsh"
FISH_SCRIPT: Final = SCRIPTS_DIR / "fish_integration.fish"

NONCE_ENV: Final = "AHP_NONCE"
"""Environment variable that carries the per-terminal nonce into the shell (and no further)."""

# Variables only our scripts read. They are dropped from every launch we do not integrate, and the
# scripts unset them before the user's first command.
_PRIVATE_ENV: Final = (NONCE_ENV, "AHP_SHELL_LOGIN", "AHP_ZDOTDIR_WAS_SET", "USER_ZDOTDIR")

_NONCE_RE: Final = re.compile(r"[A-Za-z0-9_-]{1,128}")

# Extra arguments under which a shell is still "a plain interactive shell" we may integrate.
# Everything else (-c, a script path, --norc, -x, ...) leaves the launch untouched.
_LOGIN_FLAGS: Final = frozenset({"-l", "--login"})
_INTERACTIVE_FLAGS: Final = frozenset({"-i", "--interactive"})
_COMBINED_FLAGS: Final = frozenset({"-il", "-li"})


@attrs.frozen
class ShellLaunch:
    """How to start a shell, possibly rewritten to load command detection.

    Attributes:
        argv: The program and its arguments.
        env: The complete environment for the child.
        integrated: True if the launch was rewritten to load one of our scripts. False means
            the shell (or program) runs exactly as requested and will emit no OSC 633.
        cleanup_paths: Temporary files or directories created for this launch; remove them with
            :func:`remove_launch_files` when the terminal is disposed.
    """

    argv: tuple[str, ...]
    env: dict[str, str]
    integrated: bool
    cleanup_paths: tuple[str, ...] = ()


def escape_value(value: str) -> str:
    r"""Escape a command line or path for an OSC 633 ``E`` or ``P`` payload.

    ``\`` becomes ``\\``, ``;`` becomes ``\x3b`` and every character below U+0020 (newline, tab,
    ESC, BEL, ...) becomes ``\xNN`` with two lowercase hex digits. Everything else is kept, so the
    payload can never contain the BEL/ESC that would end the sequence, nor an unescaped ``;`` that
    would be mistaken for the nonce separator. This is the reference for what the shell scripts
    print; the tests compare them against it.
    """
    out: list[str] = []
    for ch in value:
        if ch == "\\":
            out.append("\\\\")
        elif ch == ";":
            out.append("\\x3b")
        elif ord(ch) < 0x20:
            out.append(f"\\x{ord(ch):02x}")
        else:
            out.append(ch)
    return "".join(out)


def prepare_shell(
    argv: Sequence[str],
    env: Mapping[str, str],
    *,
    nonce: str,
    login: bool = False,
) -> ShellLaunch:
    """Rewrite a shell launch so the shell reports prompts and commands with OSC 633.

    Args:
        argv: The requested command, e.g. ``["/bin/bash"]`` or ``["zsh", "-l"]``. The shell is
            recognised by the basename of ``argv[0]``.
        env: The environment the caller wants the child to have; it is copied, never mutated.
        nonce: Per-terminal secret echoed in ``E`` sequences (letters, digits, ``_`` and ``-``).
        login: Start a login shell even if ``argv`` carries no login flag.

    Returns:
        A :class:`ShellLaunch`. For anything other than a plain interactive bash, zsh or fish
        (optionally with ``-i``, ``-l``/``--login``) it holds ``argv`` unchanged, ``env`` without
        any ``AHP_*`` integration variables and ``integrated=False``.

    Raises:
        ValueError: If ``argv`` is empty or ``nonce`` is not a short token of safe characters.
        OSError: If the temporary zsh ``ZDOTDIR`` cannot be created.
    """
    if not argv:
        raise ValueError("argv must not be empty")
    if not _NONCE_RE.fullmatch(nonce):
        raise ValueError("nonce must be 1-128 characters of [A-Za-z0-9_-]")
    base_env = {k: v for k, v in env.items() if k not in _PRIVATE_ENV}
    untouched = ShellLaunch(argv=tuple(argv), env=base_env, integrated=False)

    program = argv[0]
    shell = os.path.basename(program)
    wants_login = _classify_args(argv[1:])
    if wants_login is None:
        return untouched
    login = login or wants_login

    if shell == "bash":
        return _prepare_bash(program, base_env, nonce, login)
    if shell == "zsh":
        return _prepare_zsh(program, base_env, nonce, login)
    if shell == "fish":
        return _prepare_fish(program, base_env, nonce, login)
    return untouched


def remove_launch_files(launch: ShellLaunch) -> None:
    """Delete the temporary files of ``launch``. Idempotent; never raises for missing paths."""
    for path in launch.cleanup_paths:
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)


def _classify_args(args: Sequence[str]) -> bool | None:
    """Return whether ``args`` ask for a login shell, or None if they are not integrable."""
    login = False
    for arg in args:
        if arg in _LOGIN_FLAGS or arg in _COMBINED_FLAGS:
            login = True
        elif arg not in _INTERACTIVE_FLAGS:
            return None
    return login


def _prepare_bash(program: str, env: dict[str, str], nonce: str, login: bool) -> ShellLaunch:
    # A login bash never reads --init-file, so a login shell is imitated by the script instead
    # (AHP_SHELL_LOGIN=1: /etc/profile, then ~/.bash_profile | ~/.bash_login | ~/.profile).
    child_env = dict(env)
    child_env[NONCE_ENV] = nonce
    if login:
        child_env["AHP_SHELL_LOGIN"] = "1"
    return ShellLaunch(
        argv=(program, "--init-file", str(BASH_SCRIPT), "-i"),
        env=child_env,
        integrated=True,
    )


def _prepare_zsh(program: str, env: dict[str, str], nonce: str, login: bool) -> ShellLaunch:
    # zsh has no --init-file: point ZDOTDIR at a private directory whose startup files load the
    # user's own files (from USER_ZDOTDIR) and then our hooks. The script restores ZDOTDIR before
    # the first prompt, so user commands and child shells see the user's original value.
    zdotdir = tempfile.mkdtemp(prefix="ahp-zsh-")  # mode 0700, owned by us
    try:
        script = _zsh_quote(str(ZSH_SCRIPT))
        for phase in ("zshenv", "zprofile", "zshrc", "zlogin"):
            stub = Path(zdotdir, "." + phase)
            stub.write_text(
                f"# Generated by ahp: loads your ~/.{phase}, then ahp's command detection.\n"
                f"typeset -g __ahp_phase={phase}\n"
                f"builtin source {script}\n",
                encoding="utf-8",
            )
    except BaseException:
        shutil.rmtree(zdotdir, ignore_errors=True)
        raise
    child_env = dict(env)
    user_zdotdir = env.get("ZDOTDIR", "")
    if user_zdotdir:
        child_env["AHP_ZDOTDIR_WAS_SET"] = "1"
    else:
        user_zdotdir = env.get("HOME", "") or os.path.expanduser("~")
    child_env["USER_ZDOTDIR"] = user_zdotdir
    child_env["ZDOTDIR"] = zdotdir
    child_env[NONCE_ENV] = nonce
    return ShellLaunch(
        argv=(program, "-il" if login else "-i"),
        env=child_env,
        integrated=True,
        cleanup_paths=(zdotdir,),
    )


def _prepare_fish(program: str, env: dict[str, str], nonce: str, login: bool) -> ShellLaunch:
    # --init-command runs after config.fish and conf.d, right before the first prompt.
    child_env = dict(env)
    child_env[NONCE_ENV] = nonce
    init = f"source {_fish_quote(str(FISH_SCRIPT))}"
    argv = (program, "-l", "--init-command", init) if login else (program, "--init-command", init)
    return ShellLaunch(argv=argv, env=child_env, integrated=True)


def _zsh_quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


def _fish_quote(text: str) -> str:
    # In fish single quotes only \\ and \' are escapes.
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"
