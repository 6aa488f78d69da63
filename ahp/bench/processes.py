"""Servers under test as child processes: start, talk to, sample, stop.

Why: both servers (the sidecar worker and terminado) run in their own process
so the client in the benchmark process measures them the same way; this module
owns those processes — started with ``trio.lowlevel.open_process``, always
killed and reaped on exit — and samples their RSS while a run goes on (the
peak is what a stalled client costs).
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import orjson
import trio

from ahp.bench.procfs import cpu_seconds, rss_kb

__all__ = ["ChildServer", "RssSampler", "SidecarWorker", "open_child_server", "open_worker"]

#: How often a server's RSS is sampled during a run (seconds).
SAMPLE_INTERVAL = 0.02


def _package_env() -> dict[str, str]:
    """This environment, plus the checkout on PYTHONPATH (works without ``pip install``)."""
    import ahp

    env = dict(os.environ)
    root = str(Path(ahp.__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    return env


class ChildServer:
    """A child process that printed its first line (its address) on stdout."""

    def __init__(self, process: trio.Process, first_line: bytes, rest: bytes) -> None:
        self.process = process
        self.pid = process.pid
        self.first_line = first_line
        self._buffer = rest

    async def read_line(self) -> bytes:
        stdout = self.process.stdout
        assert stdout is not None
        while b"\n" not in self._buffer:
            data = await stdout.receive_some(65536)
            if not data:
                raise RuntimeError(f"server process {self.pid} closed its stdout")
            self._buffer += data
        line, self._buffer = self._buffer.split(b"\n", 1)
        return line

    def rss_kb(self) -> int:
        return rss_kb(self.pid)

    def cpu_seconds(self) -> float:
        return cpu_seconds(self.pid)


@asynccontextmanager
async def open_child_server(
    argv: Sequence[str], *, quit_line: bytes | None = None, startup_timeout: float = 30
) -> AsyncIterator[ChildServer]:
    """Start ``argv``, wait for its first stdout line, yield; stop and reap on exit.

    Stopping: ``quit_line`` on stdin (then up to 5 s), else ``SIGTERM`` (then up to
    5 s); ``SIGKILL`` last.
    """
    process = await trio.lowlevel.open_process(
        list(argv),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=_package_env(),
    )
    try:
        buffer = b""
        assert process.stdout is not None
        with trio.fail_after(startup_timeout):
            while b"\n" not in buffer:
                data = await process.stdout.receive_some(65536)
                if not data:
                    code = await process.wait()
                    raise RuntimeError(f"{argv[0]} exited with {code} before it was ready")
                buffer += data
        first, rest = buffer.split(b"\n", 1)
        yield ChildServer(process, first, rest)
    finally:
        with trio.CancelScope(shield=True):
            if quit_line is not None and process.stdin is not None:
                with trio.move_on_after(1):
                    try:
                        await process.stdin.send_all(quit_line)
                        await process.stdin.aclose()
                    except (trio.BrokenResourceError, trio.ClosedResourceError):
                        pass
            elif process.returncode is None:
                process.terminate()
            with trio.move_on_after(5):
                await process.wait()
            if process.returncode is None:
                process.kill()
                await process.wait()


class SidecarWorker:
    """Handle on ``python -m ahp.bench.worker``: URL, token, commands, RSS."""

    def __init__(self, server: ChildServer, token: str) -> None:
        self.server = server
        self.token = token
        hello = orjson.loads(server.first_line)
        self.url: str = hello["url"]
        self.pid = server.pid

    async def call(self, op: str, **params: Any) -> dict[str, Any]:
        stdin = self.server.process.stdin
        assert stdin is not None
        await stdin.send_all(orjson.dumps({"op": op, **params}) + b"\n")
        reply: dict[str, Any] = orjson.loads(await self.server.read_line())
        if "error" in reply:
            raise RuntimeError(f"worker {op}: {reply['error']}")
        return reply

    def rss_kb(self) -> int:
        return self.server.rss_kb()

    def cpu_seconds(self) -> float:
        return self.server.cpu_seconds()


@asynccontextmanager
async def open_worker() -> AsyncIterator[SidecarWorker]:
    token = secrets.token_hex(16)
    argv = [sys.executable, "-m", "ahp.bench.worker", f"--token={token}"]
    async with open_child_server(argv, quit_line=b'{"op": "quit"}\n') as server:
        yield SidecarWorker(server, token)


class RssSampler:
    """Samples a process's RSS every few milliseconds inside ``async with``; keeps the peak."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.start_kb = rss_kb(pid)
        self.peak_kb = self.start_kb
        self.end_kb = self.start_kb
        self._scope: trio.CancelScope | None = None

    async def _run(self) -> None:
        while True:
            await trio.sleep(SAMPLE_INTERVAL)
            try:
                self.peak_kb = max(self.peak_kb, rss_kb(self.pid))
            except OSError:
                return

    @asynccontextmanager
    async def running(self) -> AsyncIterator[RssSampler]:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._run)
            try:
                yield self
            finally:
                nursery.cancel_scope.cancel()
                try:
                    self.end_kb = rss_kb(self.pid)
                    self.peak_kb = max(self.peak_kb, self.end_kb)
                except OSError:
                    pass
