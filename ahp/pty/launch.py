"""Starting a child on a pty (or on pipes): :func:`spawn`.

Why this module exists: a terminal child needs three things that ``subprocess`` does
not give in one call: its own session, the pty slave as its *controlling* terminal
(without it, ``^C`` written to the master interrupts nothing) and a parent that kept
no copy of the slave (without that, EOF never arrives). Doing it with ``fork`` from
Python, ``pty.fork`` or ``preexec_fn`` is unsafe in a threaded Trio process. So the
child execs a tiny launcher first:

* ``setsid -c argv...`` (util-linux): the ``Popen`` child is not a process-group
  leader, so ``setsid()`` succeeds without forking (the pid we hold is the real
  child), and ``-c`` makes stdin, the slave, the controlling terminal;
* if ``setsid`` is missing, ``python -I -S -c HELPER argv...`` does the same with
  ``os.setsid()``, ``ioctl(0, TIOCSCTTY)`` and ``os.execvp``, after restoring every
  signal's default disposition and an empty signal mask;
* when this process ignores signals (``nohup``, a background job: a ``SIG_IGN``
  survives ``exec``), the child (pty or pipes) starts through a helper that
  restores every default and then execs the launcher or the program in place: a
  terminal's program always starts with every signal at its default, so Ctrl-C
  interrupts it.

Every child (pty or pipes) execs ``setpriv --pdeathsig KILL`` right before its
program (after the launcher, same pid: :func:`ahp.pty.process.death_signal_launcher`):
when the server dies, ``SIGKILL`` included, its children die with it instead of
running on as orphans. (Their own children are not reached: a killed shell's
session is hung up, and ``serve``'s exit sweeps what it adopted,
:mod:`ahp.pty.orphans`.) The fork is made from the event loop's thread
(:func:`ahp.pty.process.start_process`), because the death signal follows the
thread that forked.

Pipe mode needs no terminal: ``start_new_session=True`` gives the child its own
process group so that :meth:`Child.signal_group` works the same way. Its stdin can be
``/dev/null`` instead of a pipe, and its stderr a pipe of its own
(``SpawnSpec.stdin_closed`` / ``stderr_apart``: what :mod:`ahp.engine.exec` runs with).

Ownership and failure: every fd opened here is close-on-exec from creation (``openpty``
and ``pipe2(O_CLOEXEC)``, so a concurrent spawn in another thread cannot inherit a
slave or pipe end and delay our EOF), and is
either handed to the returned :class:`Child` or closed before :func:`spawn` returns
or raises. Validation runs before anything is opened; an ``OSError`` from ``Popen``
becomes :class:`SpawnError` (``subprocess`` reaps a child that failed before exec).

Cancellation: :func:`spawn` may be cancelled before the process starts (nothing is
left behind). The fork and ``exec`` then run without a checkpoint (they block the
loop until the child has called ``exec``: well under a millisecond), and the
``Child`` is returned without another one, so the caller always receives ownership
of a started process and must ``terminate()`` it (a pending cancellation fires at
the caller's next checkpoint).
"""

from __future__ import annotations

import functools
import os
import shutil
import signal
import subprocess
import sys
import termios
from collections.abc import Sequence
from contextlib import ExitStack
from typing import Final

import trio

from ahp.pty.child import Child, set_window_size
from ahp.pty.process import Process, death_signal_launcher, start_process
from ahp.pty.spec import SpawnError, SpawnSpec, validate

__all__ = [
    "CTTY_HELPER",
    "SIGNALS_HELPER",
    "default_launcher",
    "ignored_signals",
    "python_launcher",
    "spawn",
    "spawn_with",
]

#: ``termios.IUTF8`` (Linux); typeshed lacks it, the value is fixed by the kernel ABI.
IUTF8: Final[int] = getattr(termios, "IUTF8", 0o040000)

#: Every signal back to its default disposition, and an empty signal mask.
_DEFAULT_SIGNALS: Final = """\
for sig in signal.valid_signals():
    if sig not in (signal.SIGKILL, signal.SIGSTOP):
        try:
            signal.signal(sig, signal.SIG_DFL)
        except (OSError, ValueError):
            pass
signal.pthread_sigmask(signal.SIG_SETMASK, ())
"""
_EXEC_ARGV: Final = """\
try:
    os.execvp(sys.argv[1], sys.argv[1:])
except OSError as exc:
    os.write(2, f"ahp: cannot execute {sys.argv[1]!r}: {exc.strerror}\\r\\n".encode())
    os._exit(127)
"""
#: Source run by ``python -c`` when ``setsid`` is not installed, or when this process
#: ignores signals (:func:`ignored_signals`). ``sys.argv[1:]`` is the child's argv;
#: exit status 127 with a message if the exec fails.
CTTY_HELPER: Final = (
    "import fcntl, os, signal, sys, termios\n"
    "os.setsid()\n"
    "fcntl.ioctl(0, termios.TIOCSCTTY, 0)\n" + _DEFAULT_SIGNALS + _EXEC_ARGV
)
#: Source run by ``python -c`` before a pipes child when this process ignores signals:
#: every disposition back to its default, then ``execvp(argv)`` (same pid).
SIGNALS_HELPER: Final = "import os, signal, sys\n" + _DEFAULT_SIGNALS + _EXEC_ARGV
#: Signals ``subprocess`` itself restores in the child (``restore_signals``); Python
#: ignores SIGPIPE and SIGXFSZ for its own sake.
_RESTORED: Final = frozenset({signal.SIGPIPE, signal.SIGXFSZ})


def python_launcher() -> tuple[str, ...]:
    """Argv prefix that runs :data:`CTTY_HELPER` with this interpreter."""
    if not sys.executable:
        raise SpawnError("cannot set a controlling terminal: no 'setsid' and no Python binary")
    return (sys.executable, "-I", "-S", "-c", CTTY_HELPER)


def ignored_signals() -> list[signal.Signals]:
    """The signals this process ignores that an ``exec`` would pass on to a child.

    A server started by ``nohup``, as a shell's background job or by a supervisor
    inherits ``SIG_IGN`` for SIGHUP, SIGINT or SIGQUIT, and so would every terminal's
    program: Ctrl-C (and :meth:`Child.signal_group` with SIGINT) would interrupt
    nothing, a hang-up would end nothing. :func:`spawn` then starts the child
    through :data:`SIGNALS_HELPER`, which restores every default first, then execs
    the launcher (same pid). Read at each spawn (cheap: no system call)."""
    ignored = []
    for sig in signal.valid_signals():
        if sig in _RESTORED or sig in (signal.SIGKILL, signal.SIGSTOP):
            continue
        try:
            if signal.getsignal(sig) is signal.SIG_IGN:
                ignored.append(signal.Signals(sig))
        except (ValueError, OSError):  # pragma: no cover - real-time signals on odd libcs
            continue
    return ignored


@functools.cache
def default_launcher() -> tuple[str, ...]:
    """Argv prefix that gives the child a session and the pty as controlling terminal.

    ``setsid -c`` found on *this* process's ``PATH`` (resolved once), else
    :func:`python_launcher`.
    """
    setsid = shutil.which("setsid")
    if setsid is not None:
        return (os.path.abspath(setsid), "-c")
    return python_launcher()


async def spawn(spec: SpawnSpec) -> Child:
    """Validate ``spec``, start the child and hand over ownership as a :class:`Child`.

    Pty mode: a fresh pty with the spec's window size (and ``IUTF8`` set, so that
    line editing erases whole UTF-8 characters); the slave is the child's stdin,
    stdout, stderr and controlling terminal, in a new session. Pipe mode: a stdin
    pipe (or ``/dev/null``) and one pipe shared by stdout and stderr (or one each), in a
    new session.

    Raises:
        SpawnError: If the spec is invalid or the process could not be started; no fd
            and no process is left behind.
    """
    return await spawn_with(spec, launcher=default_launcher() if spec.use_pty else ())


async def spawn_with(spec: SpawnSpec, *, launcher: Sequence[str]) -> Child:
    """:func:`spawn` with an explicit launcher prefix (used by tests).

    ``launcher`` must exec ``argv`` in place (same pid) after making the pty on
    stdin the controlling terminal of a new session; it is ignored in pipe mode. When
    this process ignores signals, :data:`SIGNALS_HELPER` runs first (every signal back
    to its default, then the launcher; see :func:`ignored_signals`).
    """
    validate(spec)
    prefix: tuple[str, ...] = ()
    if ignored_signals() and not (launcher and launcher[-1] == CTTY_HELPER):
        prefix = _signals_launcher()  # (CTTY_HELPER restores them itself)
    # (after the launcher: a launcher that cannot be executed is still a SpawnError)
    dies_with_us = death_signal_launcher()
    if spec.use_pty:
        return await _spawn_pty(spec, (*prefix, *launcher, *dies_with_us))
    return await _spawn_pipes(spec, (*prefix, *dies_with_us))


async def _spawn_pty(spec: SpawnSpec, launcher: tuple[str, ...]) -> Child:
    master, slave = os.openpty()
    with ExitStack() as on_error:
        on_error.callback(os.close, master)
        with ExitStack() as always:
            always.callback(os.close, slave)  # invariant: no parent copy of the slave survives
            for fd in (master, slave):
                os.set_inheritable(fd, False)  # CLOEXEC: concurrent spawns must not inherit it
            os.set_blocking(master, False)
            set_window_size(master, spec.cols, spec.rows)
            _enable_iutf8(slave)
            process = await _open_process(
                spec,
                [*launcher, *spec.argv],
                stdin=slave,
                stdout=slave,
                stderr=slave,
                start_new_session=False,  # the launcher calls setsid(); a leader could not
            )
        # From here on: no checkpoint until the Child owns everything.
        on_error.pop_all()
    return Child(process, is_pty=True, input_fd=master, output_fd=master)


def _signals_launcher() -> tuple[str, ...]:
    if not sys.executable:
        return ()  # (nothing to restore the signals with: the child inherits them)
    return (sys.executable, "-I", "-S", "-c", SIGNALS_HELPER)


async def _spawn_pipes(spec: SpawnSpec, launcher: tuple[str, ...] = ()) -> Child:
    with ExitStack() as on_error, ExitStack() as always:
        if spec.stdin_closed:
            stdin_read, stdin_write = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC), -1
            always.callback(os.close, stdin_read)
        else:
            stdin_read, stdin_write = os.pipe2(os.O_CLOEXEC)
            always.callback(os.close, stdin_read)
            on_error.callback(os.close, stdin_write)
            os.set_blocking(stdin_write, False)
        output_read, output_write = os.pipe2(os.O_CLOEXEC)
        always.callback(os.close, output_write)  # else EOF never arrives
        on_error.callback(os.close, output_read)
        os.set_blocking(output_read, False)
        error_read, error_write = -1, output_write
        if spec.stderr_apart:
            error_read, error_write = os.pipe2(os.O_CLOEXEC)
            always.callback(os.close, error_write)
            on_error.callback(os.close, error_read)
            os.set_blocking(error_read, False)
        process = await _open_process(
            spec,
            [*launcher, *spec.argv],
            stdin=stdin_read,
            stdout=output_write,
            stderr=error_write,
            start_new_session=True,
        )
        # From here on: no checkpoint until the Child owns everything.
        on_error.pop_all()
    return Child(
        process, is_pty=False, input_fd=stdin_write, output_fd=output_read, error_fd=error_read
    )


async def _open_process(
    spec: SpawnSpec,
    command: list[str],
    *,
    stdin: int,
    stdout: int,
    stderr: int,
    start_new_session: bool,
) -> Process:
    await trio.lowlevel.checkpoint_if_cancelled()
    try:
        # From this thread, not a worker: the death signal is tied to the forking thread.
        return start_process(
            command,
            stdin=stdin,
            stdout=stdout,
            stderr=stderr,
            cwd=spec.cwd,
            env=spec.env,
            start_new_session=start_new_session,
        )
    except (OSError, ValueError, subprocess.SubprocessError) as exc:
        raise SpawnError(f"could not start {spec.argv[0]!r}: {exc}") from exc


def _enable_iutf8(fd: int) -> None:
    attrs = termios.tcgetattr(fd)
    attrs[0] |= IUTF8  # iflag
    termios.tcsetattr(fd, termios.TCSANOW, attrs)
