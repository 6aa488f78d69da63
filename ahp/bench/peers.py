"""The peer: terminado (Tornado), run as a child process and measured like the sidecar.

Why terminado: it is the Python terminal server people know (Jupyter's), so
it answers "compared to what" on the same runtime. It is not a dependency of
``ahp``: install it into the benchmark's environment (``nox -s bench`` does;
otherwise ``pip install terminado``). The server is a short script run with
this interpreter: two ``NamedTermManager`` routes, ``/gate/<name>`` running
the workload's gate and ``/echo/<name>`` running ``cat``, so several clients
can share one terminal (the stalled-client run) and each run gets a fresh one.
It speaks terminado's own protocol (``["stdin", text]`` in; ``["setup", {}]``,
``["stdout", text]``, ``["disconnect", 1]`` out), handled by
:class:`~ahp.bench.wsclient.TerminadoDialect`.

Set up as Jupyter deploys it: ``NamedTermManager`` (Jupyter's terminal manager
is one), ``TERM=xterm-256color`` (terminado's default), and a socket handler that,
like Jupyter's, records last-activity timestamps on every message in and out.
The one difference kept on purpose is the program: the benchmark's gate rather
than ``$SHELL -l``, because terminado starts the program when the WebSocket
opens, so a login shell's start-up (0.26 s to the prompt on the development
machine, with its rc files) would land inside the timed run; the gate measured
the same as ``exec cat`` typed at a shell's prompt (benchmarks/README.md).
"""

from __future__ import annotations

import importlib.util
import itertools
import json
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from ahp.bench.endtoend import TerminalKind
from ahp.bench.processes import ChildServer, open_child_server
from ahp.bench.workload import Workload
from ahp.bench.wsclient import Dialect, TerminadoDialect

__all__ = ["TERMINADO_SCRIPT", "TerminadoServer", "open_terminado", "terminado_missing"]

TERMINADO_SCRIPT = """
import asyncio, datetime, json, sys
import tornado.httpserver, tornado.netutil, tornado.web
from terminado import NamedTermManager, TermSocket

def utcnow():
    return datetime.datetime.now(datetime.timezone.utc)

class DeployedTermSocket(TermSocket):
    # What Jupyter's TermSocket (jupyter_server_terminals) adds to every message in
    # and out: the server's and the terminal's last-activity timestamps.
    def on_message(self, message):
        result = super().on_message(message)
        self._update_activity()
        return result

    def write_message(self, message, binary=False):
        result = super().write_message(message, binary=binary)
        self._update_activity()
        return result

    def _update_activity(self):
        self.application.settings["terminal_last_activity"] = utcnow()
        terminal = self.term_manager.terminals.get(self.term_name)
        if terminal is not None:
            terminal.last_activity = utcnow()

async def main():
    gate = json.loads(sys.argv[1])
    cwd = sys.argv[2]
    settings = {"cwd": cwd}
    gate_terms = NamedTermManager(shell_command=gate, term_settings=settings)
    echo_terms = NamedTermManager(shell_command=["cat"], term_settings=settings)
    app = tornado.web.Application([
        (r"/gate/(\\w+)", DeployedTermSocket, {"term_manager": gate_terms}),
        (r"/echo/(\\w+)", DeployedTermSocket, {"term_manager": echo_terms}),
    ])
    sockets = tornado.netutil.bind_sockets(0, "127.0.0.1")
    server = tornado.httpserver.HTTPServer(app)
    server.add_sockets(sockets)
    print(sockets[0].getsockname()[1], flush=True)
    await asyncio.Event().wait()

asyncio.run(main())
"""


def terminado_missing() -> str | None:
    """Why terminado cannot run here, or None."""
    for module in ("terminado", "tornado"):
        if importlib.util.find_spec(module) is None:
            return (
                f"{module} is not installed in this environment "
                f"(pip install terminado, or run nox -s bench)"
            )
    return None


def terminado_version() -> str:
    from importlib.metadata import version

    return version("terminado")


class TerminadoServer:
    """A terminado child process as a :class:`~ahp.bench.endtoend.ServerUnderTest`."""

    dialect_name = "terminado"
    shares_terminals = True

    def __init__(self, server: ChildServer) -> None:
        self.server = server
        self.pid = self.echo_pid = server.pid
        self.port = int(server.first_line)
        self._names = itertools.count(1)

    async def terminal(self, kind: TerminalKind) -> tuple[str, Callable[[], Dialect], Any]:
        url = f"ws://127.0.0.1:{self.port}/{kind}/t{next(self._names)}"
        return url, TerminadoDialect, None

    def channel(self, handle: Any) -> str | None:
        return None

    def expected_chars(self, handle: Any) -> int | None:
        return None

    async def release(self, handle: Any) -> None:
        """Nothing to do: a gate terminal ends with its ``cat``; echo ones with the server."""

    async def stats(self) -> dict[str, Any]:
        return {}

    def rss_kb(self) -> int:
        return self.server.rss_kb()

    def cpu_seconds(self) -> float:
        return self.server.cpu_seconds()


@asynccontextmanager
async def open_terminado(workload: Workload) -> AsyncIterator[TerminadoServer]:
    argv = [
        sys.executable,
        "-c",
        TERMINADO_SCRIPT,
        json.dumps(workload.gate_argv()),
        str(workload.path.parent),
    ]
    async with open_child_server(argv) as server:
        yield TerminadoServer(server)
