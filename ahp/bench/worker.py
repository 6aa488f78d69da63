"""The sidecar under test, in its own process: ``python -m ahp.bench.worker``.

Why a separate process: a real sidecar runs apart from its clients (an editor,
an agent), and the peer it is compared with (terminado) runs in its own process
too; measuring both the same way — server in a child process, the same client
code in the benchmark process — is the only fair comparison on a 2-core
machine. It also makes memory figures clean: the benchmark reads this
process's ``VmRSS`` from ``/proc`` and the terminals' own programs (``cat``)
are other processes, so they are excluded by construction.

The worker prepares its process as ``serve`` does
(:func:`ahp.server.app.prepare_server_process`: the allocator's fixed thresholds,
the start-up objects frozen out of the collector), runs
:func:`ahp.engine.open_host` and :func:`ahp.server.serve_host`
(via ``nursery.start``), prints one JSON line ``{"url": ..., "pid": ...}``, then
answers one JSON command per stdin line with one JSON line on stdout:

* ``{"op": "create", "argv": [...]}`` -> ``{"uri": ...}``
* ``{"op": "wait_exited", "uri": ...}`` -> ``{"read_batches": n, "bytes_read": n}``
* ``{"op": "run", "argv": [...]}`` -> create, wait for exit, dispose: ``{"seconds": s}``
* ``{"op": "dispose", "uri": ...}``, ``{"op": "gc"}`` -> ``{}``
* ``{"op": "stats"}`` -> ``{"closed_1013": n, "terminals": n}`` (slow clients cut off,
  as seen in the server's log: closed with 1013 or dropped)
* ``{"op": "quit"}`` (or EOF) -> exits 0.
"""

from __future__ import annotations

import argparse
import gc
import logging
import os
import sys
import time
from typing import Any

import orjson
import trio

from ahp.engine import Host, open_host
from ahp.server import ServeOptions, serve_host
from ahp.server.app import SERVE_CHILD_NICE, prepare_server_process

__all__ = ["main"]


#: Words of the server's log lines that say a slow client was cut off (closed with
#: 1013, or dropped because it reads nothing at all).
_SLOW_CLIENT_WORDS = ("1013", "too slow", "reads nothing", "dropping the connection")


class _CloseCounter(logging.Handler):
    """Counts the server's log records that say a slow client was cut off.

    The server has no counter for it; its log line is the observable fact.
    """

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.closed_1013 = 0

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if any(word in message for word in _SLOW_CLIENT_WORDS):
            self.closed_1013 += 1


def _reply(payload: dict[str, Any]) -> None:
    sys.stdout.buffer.write(orjson.dumps(payload) + b"\n")
    sys.stdout.buffer.flush()


async def _lines(stream: trio.abc.ReceiveStream) -> Any:
    buffer = b""
    while True:
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            yield line
        data = await stream.receive_some(65536)
        if not data:
            return
        buffer += data


async def _handle(host: Host, counter: _CloseCounter, command: dict[str, Any]) -> dict[str, Any]:
    op = command["op"]
    if op == "create":
        term = await host.create_terminal(argv=command["argv"], cwd=command.get("cwd"))
        return {"uri": term.uri}
    if op == "wait_exited":
        term = host.get(command["uri"])
        await term.wait_exited()
        return {"read_batches": term.read_batches, "bytes_read": term.bytes_read}
    if op == "run":
        start = time.perf_counter()
        term = await host.create_terminal(argv=command["argv"], cwd=command.get("cwd"))
        await term.wait_exited()
        seconds = time.perf_counter() - start
        await host.dispose(term.uri)
        return {"seconds": seconds, "bytes_read": term.bytes_read}
    if op == "dispose":
        await host.dispose(command["uri"])
        return {}
    if op == "gc":
        gc.collect()
        return {}
    if op == "stats":
        return {"closed_1013": counter.closed_1013, "terminals": len(host.terminals)}
    raise ValueError(f"unknown op {op!r}")


async def _serve(token: str) -> int:
    counter = _CloseCounter()
    server_log = logging.getLogger("ahp.server")
    server_log.addHandler(counter)
    server_log.setLevel(logging.INFO)
    server_log.propagate = False
    prepare_server_process()  # (the allocator and the collector as ``serve`` sets them)
    async with open_host() as host, trio.open_nursery() as nursery:
        # (As ``serve`` runs them: the terminals' programs at its default niceness.)
        options = ServeOptions(port=0, token=token, child_nice=SERVE_CHILD_NICE)
        sidecar = await nursery.start(serve_host, host, options)
        _reply({"url": sidecar.url, "pid": os.getpid()})
        stdin = trio.lowlevel.FdStream(os.dup(sys.stdin.fileno()))
        async with stdin:
            async for line in _lines(stdin):
                command = orjson.loads(line)
                if command["op"] == "quit":
                    break
                try:
                    _reply(await _handle(host, counter, command))
                except Exception as exc:
                    _reply({"error": f"{type(exc).__name__}: {exc}"})
        nursery.cancel_scope.cancel()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ahp.bench.worker")
    parser.add_argument("--token", required=True)
    args = parser.parse_args(argv)
    return trio.run(_serve, args.token)


if __name__ == "__main__":
    raise SystemExit(main())
