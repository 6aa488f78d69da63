"""The C peer: ttyd (libwebsockets + libuv), run as child processes and measured like the sidecar.

Why ttyd: it is the terminal server written in C that people deploy to share a
terminal over the web, so it answers "how far from a native server" on the same
machine, through the same clients (issue 23 states its goals against it). It is
not a dependency of ``ahp`` and nothing here builds it: the benchmark finds the
binary in ``$AHP_BENCH_TTYD`` or on ``PATH``, and without it every ttyd figure
and target is "not measured", with the reason in one line (:func:`ttyd_missing`).

Set up as it is deployed: ``ttyd --writable PROGRAM`` (clients may type; ttyd is
read-only without it), everything else at ttyd's defaults (``TERM=xterm-256color``,
pings every 5 s, its own flow control: one pty read in flight per connection),
bound to the loopback interface on a port the kernel picks (``--port 0``; the port
is read from ttyd's log). ttyd starts its program for each WebSocket connection
(after the client's first message, :func:`~ahp.bench.wsclient.ttyd_init`), so one
terminal cannot have two viewers: the stalled-viewer run does not apply to it.
Two processes per :func:`open_ttyd`: one runs the workload's gate, one runs
``cat`` (the echo runs); a connection to either is a fresh terminal. Server CPU
and RSS are the gate process's (``/proc``, its programs excluded), as for the others.

The gate differs from the others' in one way: after the ``cat`` it waits for
another line (:func:`ttyd_gate_argv`). ttyd has no end-of-output message and,
when its program exits right after writing, closes the connection before it
has sent everything (measured here: 8-22 KB of a 5 MB cat lost in 6 of 6 runs,
the connection dropped without a close frame). So the client counts the
characters and stops at the last one (:class:`~ahp.bench.wsclient.TtydDialect`);
the program is ended by ttyd (``SIGHUP``) when the client closes.

Ownership: :func:`open_ttyd` owns both processes; on exit they get ``SIGTERM``,
then ``SIGKILL`` after :data:`STOP_TIMEOUT`, and are reaped. Their logs go to a
temporary directory removed with them; the last lines are quoted if one fails.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any, Final

import trio

from ahp.bench.endtoend import TerminalKind
from ahp.bench.procfs import cpu_seconds, rss_kb
from ahp.bench.workload import Workload
from ahp.bench.wsclient import Dialect, TtydDialect

__all__ = [
    "TTYD_ENV",
    "TtydProcess",
    "TtydServer",
    "open_ttyd",
    "ttyd_binary",
    "ttyd_gate_argv",
    "ttyd_missing",
    "ttyd_version",
]

#: Environment variable naming the ttyd binary (else ``ttyd`` on ``PATH``).
TTYD_ENV: Final = "AHP_BENCH_TTYD"
#: Seconds ttyd may take to print its port.
STARTUP_TIMEOUT: Final = 15.0
#: Seconds ttyd has to exit after ``SIGTERM`` before it is killed.
STOP_TIMEOUT: Final = 5.0
#: Seconds ``ttyd --version`` may take.
VERSION_TIMEOUT: Final = 10.0
#: Bytes of ttyd's log scanned for its port (its start-up notices are ~1 KB).
MAX_STARTUP_LOG: Final = 64 * 1024
#: Bytes of the log quoted when ttyd fails.
LOG_TAIL: Final = 2000
#: How often the log is looked at while waiting for the port (seconds).
POLL_INTERVAL: Final = 0.01
#: ttyd's WebSocket path (its ``endpoints.ws``).
WS_PATH: Final = "/ws"

_PORT = re.compile(rb"Listening on port: (\d+)")


def ttyd_binary() -> str | None:
    """The ttyd to run: ``$AHP_BENCH_TTYD`` if set, else ``ttyd`` on ``PATH``."""
    configured = os.environ.get(TTYD_ENV)
    if configured:
        return configured
    return shutil.which("ttyd")


def ttyd_missing() -> str | None:
    """Why ttyd cannot run here (one line), or None."""
    binary = ttyd_binary()
    if binary is None:
        return f"ttyd is not on PATH (install it, or set {TTYD_ENV} to its path)"
    if not (os.path.isfile(binary) and os.access(binary, os.X_OK)):
        return f"{TTYD_ENV}={binary} is not an executable file"
    try:
        ttyd_version()
    except (OSError, subprocess.SubprocessError, ValueError) as exc:
        return f"{binary} --version failed: {exc}"
    return None


@functools.cache
def _version_of(binary: str) -> str:
    result = subprocess.run(
        [binary, "--version"],
        capture_output=True,
        text=True,
        timeout=VERSION_TIMEOUT,
        check=True,
    )
    words = (result.stdout or result.stderr).split()
    if len(words) < 3 or words[:2] != ["ttyd", "version"]:
        raise ValueError(f"unexpected answer {result.stdout.strip()[:200]!r}")
    return words[2]


def ttyd_version() -> str:
    """ttyd's version as it prints it (``1.7.7-...``); raises when it does not run."""
    binary = ttyd_binary()
    if binary is None:
        raise FileNotFoundError("ttyd")
    return _version_of(binary)


class TtydProcess:
    """One running ttyd: its pid, port and log."""

    def __init__(self, process: trio.Process, port: int, log: Path) -> None:
        self.process = process
        self.pid = process.pid
        self.port = port
        self.log = log

    @property
    def url(self) -> str:
        return f"ws://127.0.0.1:{self.port}{WS_PATH}"


def _tail(log: Path) -> str:
    try:
        return log.read_bytes()[-LOG_TAIL:].decode(errors="replace").strip()
    except OSError:
        return ""


async def _wait_for_port(process: trio.Process, log: Path) -> int:
    with trio.fail_after(STARTUP_TIMEOUT):
        while True:
            with log.open("rb") as f:
                head = f.read(MAX_STARTUP_LOG)
            found = _PORT.search(head)
            if found:
                return int(found.group(1))
            if process.poll() is not None:
                raise RuntimeError(
                    f"ttyd exited with {process.returncode} before listening: {_tail(log)}"
                )
            await trio.sleep(POLL_INTERVAL)


@asynccontextmanager
async def open_ttyd_process(
    binary: str, program: Sequence[str], *, cwd: str, log: Path
) -> AsyncIterator[TtydProcess]:
    """``ttyd --writable PROGRAM`` on a loopback port; stopped and reaped on exit."""
    argv = [
        binary,
        "--port",
        "0",
        "--interface",
        "127.0.0.1",
        "--writable",
        "--cwd",
        cwd,
        *program,
    ]
    with log.open("wb") as out:
        process = await trio.lowlevel.open_process(
            argv, stdin=subprocess.DEVNULL, stdout=out, stderr=out
        )
    try:
        try:
            port = await _wait_for_port(process, log)
        except trio.TooSlowError:
            raise RuntimeError(
                f"ttyd printed no port within {STARTUP_TIMEOUT:g} s: {_tail(log)}"
            ) from None
        yield TtydProcess(process, port, log)
    finally:
        with trio.CancelScope(shield=True):
            if process.returncode is None:
                process.terminate()
            with trio.move_on_after(STOP_TIMEOUT):
                await process.wait()
            if process.returncode is None:
                process.kill()
                await process.wait()


class TtydServer:
    """Two ttyd processes as one :class:`~ahp.bench.endtoend.ServerUnderTest`.

    ``gate`` runs the workload's gate (throughput; its pid is the one measured),
    ``echo`` runs ``cat`` (keystroke echo). Each connection is a new terminal.
    """

    dialect_name = "ttyd"
    #: Whether two clients can follow one terminal (the stalled-viewer run needs it).
    shares_terminals = False

    def __init__(self, gate: TtydProcess, echo: TtydProcess, workload: Workload) -> None:
        self.gate = gate
        self.echo = echo
        self.pid = gate.pid
        #: The process whose terminals the echo runs use (their CPU is its).
        self.echo_pid = echo.pid
        self._expect = workload.gated_chars()

    async def terminal(self, kind: TerminalKind) -> tuple[str, Callable[[], Dialect], Any]:
        if kind == "gate":
            expect = self._expect
            return self.gate.url, lambda: TtydDialect(expect), kind
        return self.echo.url, TtydDialect, kind

    def channel(self, handle: Any) -> str | None:
        return None

    def expected_chars(self, handle: Any) -> int | None:
        return self._expect if handle == "gate" else None

    async def release(self, handle: Any) -> None:
        """Nothing to do: ttyd ends a terminal's program when its connection closes."""

    async def stats(self) -> dict[str, Any]:
        return {}

    def rss_kb(self) -> int:
        return rss_kb(self.pid)

    def cpu_seconds(self) -> float:
        return cpu_seconds(self.pid)


def ttyd_gate_argv(workload: Workload) -> list[str]:
    """The workload's gate that stays alive after its output (see the module docstring)."""
    return ["sh", "-c", 'read _ ; cat "$@" ; read _', "sh", str(workload.path)]


@asynccontextmanager
async def open_ttyd(workload: Workload) -> AsyncIterator[TtydServer]:
    """ttyd serving the workload's gate and ``cat``; raises if ttyd is missing."""
    binary = ttyd_binary()
    why = ttyd_missing()
    if binary is None or why is not None:
        raise RuntimeError(why or "ttyd is missing")
    cwd = str(workload.path.parent)
    with tempfile.TemporaryDirectory(prefix="ahp-bench-ttyd-") as tmp:
        async with AsyncExitStack() as stack:
            gate = await stack.enter_async_context(
                open_ttyd_process(
                    binary, ttyd_gate_argv(workload), cwd=cwd, log=Path(tmp) / "gate.log"
                )
            )
            echo = await stack.enter_async_context(
                open_ttyd_process(binary, ["cat"], cwd=cwd, log=Path(tmp) / "echo.log")
            )
            yield TtydServer(gate, echo, workload)
