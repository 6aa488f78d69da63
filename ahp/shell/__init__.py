"""Shell integration: make bash, zsh and fish report command boundaries.

A terminal only knows bytes. To tell an AHP client "this command started, printed this and exited
with 1", the shell itself has to mark its prompt and its commands. We do that the way the VS Code
agent host does: when we recognise an interactive bash, zsh or fish launch, we rewrite the launch so
the shell loads the user's normal startup files and then one of our scripts
(``ahp/shell/scripts/``), which installs hooks that print OSC 633 sequences::

    ESC ] 633 ; P ; Cwd=<escaped $PWD> ; <nonce> BEL
    ESC ] 633 ; D ; [<exit code>] ; <nonce> BEL   previous command finished (no code: none ran)
    ESC ] 633 ; A BEL  <the user's prompt>  ESC ] 633 ; B BEL
    ...the user types a command line...
    ESC ] 633 ; E ; <escaped command line> ; <nonce> BEL
    ESC ] 633 ; C ; <nonce> BEL
    ...command output...
    ESC ] 633 ; P ; Cwd=<escaped $PWD> ; <nonce> BEL
    ESC ] 633 ; D ; <exit code> ; <nonce> BEL      (then A, prompt, B again)

The cwd comes before ``D`` (bash, fish), or as the shell changes directory (zsh's ``chpwd``;
zsh's ``D`` is printed by zsh itself, before any hook runs, and its ``P`` follows again), so that
whoever sees a command's end already has the cwd it left.

VS Code's scripts sign only ``E``; ours sign every mark that moves the terminal's state, because
a program's output can print the same sequences (``cat`` of a file holding ``633;D;0``), and
in a shell we injected the command tracker believes only signed ones
(:mod:`ahp.vt.integration`). ``A`` and ``B`` live in the prompt string, which a user's rc may
export to every child, so they stay bare (they only announce that detection works).

The nonce is random per terminal, and no process's environment ever holds it: a command can read
its ancestors' initial environments (``/proc/$PPID/environ`` keeps what ``execve`` got, whatever
the shell unsets later), so an environment variable would let it forge command lines. Instead each
launch gets a private directory (``mkdtemp``, mode 0700) holding a *launch file* (0600) in the
shell's own syntax: the nonce and the launch's other settings as shell variables, not exported.
bash reads it as its ``--init-file`` and fish through ``--init-command``, so only the file's path is
on the command line; the file removes its directory, then sources our script. zsh has no such
option: it finds its startup files through ``ZDOTDIR``, the one variable we must pass. Our
``.zshenv`` (in that directory) sources the launch file, deletes it, and overwrites the
``ZDOTDIR=`` entry of its own initial environment with NUL bytes (through ``/proc/self/mem``, with
zsh's ``zsh/system`` module), so that nothing of ours is left there either.

This module is pure launch rewriting: it never starts a process. The only I/O is creating (and, in
:func:`remove_launch_files`, deleting) the private directory. Whoever owns the terminal owns the
returned :class:`ShellLaunch` and must call :func:`remove_launch_files` once the shell has exited
(calling it earlier is safe too once the shell has read its files; bash and fish remove theirs
themselves at start-up).

Anything we do not recognise (``sh``, ``dash``, ``python``, ``bash -c ...``, ``zsh script.zsh``) is
returned untouched with ``integrated=False``: no command detection, but nothing breaks.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Mapping, Sequence
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

LAUNCH_FILE: Final = "launch"
"""Name (plus the shell's extension) of the launch file in a launch's private directory."""

# Variables earlier versions passed to the scripts: never passed on to a child now.
_PRIVATE_ENV: Final = ("AHP_NONCE", "AHP_SHELL_LOGIN", "AHP_ZDOTDIR_WAS_SET", "USER_ZDOTDIR")

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
        cleanup_paths: Temporary files or directories created for this launch (the private
            directory with the launch file); remove them with :func:`remove_launch_files` when
            the terminal is disposed.
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
    user_rc: bool = True,
) -> ShellLaunch:
    """Rewrite a shell launch so the shell reports prompts and commands with OSC 633.

    Args:
        argv: The requested command, e.g. ``["/bin/bash"]`` or ``["zsh", "-l"]``. The shell is
            recognised by the basename of ``argv[0]``.
        env: The environment the caller wants the child to have; it is copied, never mutated.
        nonce: Per-terminal secret echoed in ``E`` sequences (letters, digits, ``_`` and ``-``).
        login: Start a login shell even if ``argv`` carries no login flag.
        user_rc: Load the user's startup files (``~/.bashrc``, ``~/.profile``, zsh's
            ``~/.zshenv`` … ``~/.zlogin``, fish's ``config.fish`` and ``conf.d``) before
            the integration, as the shell would. False starts the shell without them
            (system-wide files as the shell reads them; fish gets ``--no-config``), so
            the environment is the host's own; command detection is loaded either way.

    Returns:
        A :class:`ShellLaunch`. For anything other than a plain interactive bash, zsh or fish
        (optionally with ``-i``, ``-l``/``--login``) it holds ``argv`` unchanged, ``env`` without
        any ``AHP_*`` integration variables and ``integrated=False``.

    Raises:
        ValueError: If ``argv`` is empty or ``nonce`` is not a short token of safe characters.
        OSError: If the private launch directory cannot be created.
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
        return _prepare_bash(program, base_env, nonce, login, user_rc)
    if shell == "zsh":
        return _prepare_zsh(program, base_env, nonce, login, user_rc)
    if shell == "fish":
        return _prepare_fish(program, base_env, nonce, login, user_rc)
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


def _launch_dir(shell: str, contents: Callable[[str], dict[str, str]]) -> str:
    """A private directory (0700) holding ``contents(directory)`` (file name -> text), each
    file created 0600."""
    directory = tempfile.mkdtemp(prefix=f"ahp-{shell}-")
    try:
        for name, text in contents(directory).items():
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
            with open(os.open(os.path.join(directory, name), flags, 0o600), "w") as file:
                file.write(text)
    except BaseException:
        shutil.rmtree(directory, ignore_errors=True)
        raise
    return directory


_HEADER: Final = "# Generated by ahp for one terminal: read once at start-up, then removed.\n"


def _prepare_bash(
    program: str, env: dict[str, str], nonce: str, login: bool, user_rc: bool
) -> ShellLaunch:
    # A login bash never reads --init-file, so a login shell is imitated by the script instead
    # (__ahp_login=1: /etc/profile, then ~/.bash_profile | ~/.bash_login | ~/.profile).
    name = LAUNCH_FILE + ".bash"
    directory = _launch_dir(
        "bash",
        lambda d: {
            name: _HEADER + f"__ahp_nonce={nonce}\n"
            f"__ahp_login={'1' if login else ''}\n"
            f"__ahp_norc={'' if user_rc else '1'}\n"
            f"command rm -rf -- {_sh_quote(d)} 2>/dev/null\n"
            f"builtin source {_sh_quote(str(BASH_SCRIPT))}\n"
        },
    )
    return ShellLaunch(
        argv=(program, "--init-file", os.path.join(directory, name), "-i"),
        env=dict(env),
        integrated=True,
        cleanup_paths=(directory,),
    )


def _prepare_zsh(
    program: str, env: dict[str, str], nonce: str, login: bool, user_rc: bool
) -> ShellLaunch:
    # zsh has no --init-file: point ZDOTDIR at a private directory whose startup files load the
    # user's own files (from their ZDOTDIR, else HOME) and then our hooks. The script restores
    # ZDOTDIR before the first prompt, so user commands and child shells see the user's value,
    # and scrubs ZDOTDIR from zsh's initial environment (see the module docstring).
    user_zdotdir = env.get("ZDOTDIR", "")
    was_set = bool(user_zdotdir)
    if not was_set:
        user_zdotdir = env.get("HOME", "") or os.path.expanduser("~")
    script = _sh_quote(str(ZSH_SCRIPT))
    files = {
        f".{phase}": (
            f"# Generated by ahp: loads your ~/.{phase}, then ahp's command detection.\n"
            f"typeset -g __ahp_phase={phase}\n"
            f"builtin source {script}\n"
        )
        for phase in ("zshenv", "zprofile", "zshrc", "zlogin")
    }
    files[LAUNCH_FILE + ".zsh"] = (
        _HEADER + f"typeset -g __ahp_nonce={nonce}\n"
        f"typeset -g __ahp_zd={_sh_quote(user_zdotdir)}\n"
        f"typeset -gi __ahp_zd_set={int(was_set)}\n"
        f"typeset -gi __ahp_norc={int(not user_rc)}\n"
    )
    zdotdir = _launch_dir("zsh", lambda _: files)
    child_env = dict(env)
    child_env["ZDOTDIR"] = zdotdir
    return ShellLaunch(
        argv=(program, "-il" if login else "-i"),
        env=child_env,
        integrated=True,
        cleanup_paths=(zdotdir,),
    )


def _prepare_fish(
    program: str, env: dict[str, str], nonce: str, login: bool, user_rc: bool
) -> ShellLaunch:
    # --init-command runs after config.fish and conf.d, right before the first prompt.
    name = LAUNCH_FILE + ".fish"
    directory = _launch_dir(
        "fish",
        lambda d: {
            name: _HEADER + f"set -g __ahp_nonce {nonce}\n"
            f"command rm -rf -- {_fish_quote(d)} 2>/dev/null\n"
            f"source {_fish_quote(str(FISH_SCRIPT))}\n"
        },
    )
    init = f"source {_fish_quote(os.path.join(directory, name))}"
    flags: tuple[str, ...] = ("-l",) if login else ()
    if not user_rc:
        flags += ("--no-config",)
    argv = (program, *flags, "--init-command", init)
    return ShellLaunch(argv=argv, env=dict(env), integrated=True, cleanup_paths=(directory,))


def _sh_quote(text: str) -> str:
    """Single-quoted for bash and zsh (any text without NUL)."""
    return "'" + text.replace("'", "'\\''") + "'"


def _fish_quote(text: str) -> str:
    # In fish single quotes only \\ and \' are escapes.
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"
