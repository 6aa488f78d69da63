"""How ``python -m ahp mcp`` ends: on a signal at once, at stdin's end after its answers.

The real server runs as a subprocess spoken to in raw JSON lines.

* A client that stops reading stdout (a ~2 MB answer fills the pipe), then sends
  SIGTERM or SIGINT or closes stdin: the server hung in the SDK's stdout write,
  a worker thread that cannot be cancelled, and the usual ``terminate(); wait()``
  never returned. Now it exits and its terminals' shells are gone.
* A script piped in (``printf ... | ahp-terminals mcp``): the SDK cancelled
  every request still running when stdin ended, so only the first lines were
  answered and the tool call was neither run nor answered. Now each is
  answered; a call still running :data:`~ahp.mcp.stdio.EOF_GRACE` after the end
  is stopped and answered as stopped.

:class:`~ahp.mcp.stdio.StdoutWriter` is tested in-process on a real pipe and
thread: its queue is bounded, a write past the bound waits and can be
cancelled, and releasing it never waits for a write nobody reads.
"""

from __future__ import annotations

import array
import fcntl
import json
import os
import signal
import subprocess
import sys
import termios
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from ahp.mcp.server import STOPPED
from ahp.mcp.stdio import EOF_GRACE, StdoutWriter
from tests.helpers import TIMEOUT, kill_and_reap, stat_fields

ROOT = Path(__file__).resolve().parents[1]


def _env() -> dict[str, str]:
    """The MCP server's environment: the test's (its hermetic HOME: read at call time,
    not at import, which came before conftest's fixture and gave the machine's own
    ~/.bashrc to every shell), this checkout first on the path."""
    return {**os.environ, "PYTHONPATH": str(ROOT), "SHELL": "/bin/bash"}


def _line(message: dict[str, Any]) -> bytes:
    return json.dumps(message).encode() + b"\n"


INITIALIZE = _line(
    {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "test", "version": "1"},
        },
    }
)
INITIALIZED = _line({"jsonrpc": "2.0", "method": "notifications/initialized"})


def _call(request_id: int, tool: str, **arguments: Any) -> bytes:
    return _line(
        {
            "jsonrpc": "2.0",
            "id": request_id,
            "method": "tools/call",
            "params": {"name": tool, "arguments": arguments},
        }
    )


def _unread(fd: int) -> int:
    """Bytes waiting in the pipe ``fd`` reads."""
    size = array.array("i", [0])
    fcntl.ioctl(fd, termios.FIONREAD, size)
    return size[0]


def _shells(pid: int) -> list[int]:
    return [
        int(entry)
        for entry in os.listdir("/proc")
        if entry.isdigit()
        and (fields := stat_fields(int(entry))) is not None
        and int(fields[1]) == pid
    ]


@pytest.mark.parametrize("how", ["SIGTERM", "SIGINT", "stdin closed"])
async def test_the_server_ends_while_the_client_does_not_read_its_answers(
    tmp_path: Path, how: str
) -> None:
    """Nothing is read after the first answer; a ~2 MB answer fills the pipe. SIGTERM,
    SIGINT or the end of stdin still end the server (0) and its terminals' shells."""
    with (tmp_path / "mcp-stderr.log").open("wb") as errlog:
        proc = await trio.lowlevel.open_process(
            [sys.executable, "-m", "ahp", "mcp"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=errlog,
            env=_env(),
            cwd=str(tmp_path),
        )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        with trio.fail_after(TIMEOUT):
            await proc.stdin.send_all(INITIALIZE)
            first = await proc.stdout.receive_some()
            assert first.startswith(b'{"jsonrpc":"2.0","id":1,"result"'), first
            await proc.stdin.send_all(INITIALIZED)
            big = "seq 1 400000; sleep 100"
            budget = {"head_bytes": 1_000_000, "tail_bytes": 1_000_000}
            await proc.stdin.send_all(
                _call(2, "run_command", command=big, yield_after=1, **budget)
                + _call(3, "run_command", command=big, terminal="other", yield_after=1, **budget)
            )
            # The pipe fills (64 KiB here); the server's writer is then blocked on it.
            assert isinstance(proc.stdout, trio.lowlevel.FdStream)
            while _unread(proc.stdout.fileno()) < 65_536:  # noqa: ASYNC110 (a pipe is polled)
                await trio.sleep(0.05)
            shells = _shells(proc.pid)
            assert shells, "the terminals' shells are children of the server"
            if how == "stdin closed":
                await proc.stdin.aclose()
            else:
                proc.send_signal(getattr(signal, how))
            assert await proc.wait() == 0
        for pid in shells:
            fields = stat_fields(pid)
            assert fields is None or fields[0] == "Z", f"shell {pid} outlived the server"
    finally:
        await kill_and_reap(proc)
        await proc.stdin.aclose()
    log = (tmp_path / "mcp-stderr.log").read_text()
    assert "Traceback" not in log, log


async def _piped(tmp_path: Path, script: bytes) -> tuple[int, dict[Any, dict[str, Any]]]:
    """Run the server with ``script`` as its stdin (a file: the end is there at once);
    its exit status and its answers by id (every stdout line must be one)."""
    (tmp_path / "script.jsonl").write_bytes(script)
    with (tmp_path / "script.jsonl").open("rb") as stdin:
        done = await trio.run_process(
            [sys.executable, "-m", "ahp", "mcp"],
            stdin=stdin,
            capture_stdout=True,
            capture_stderr=True,
            check=False,
            env=_env(),
            cwd=str(tmp_path),
        )
    assert b"Traceback" not in done.stderr, done.stderr.decode()
    answers = [json.loads(line) for line in done.stdout.splitlines()]
    return done.returncode, {a["id"]: a for a in answers if "id" in a}


async def test_a_piped_script_is_answered_in_full(tmp_path: Path) -> None:
    """initialize, tools/list, a tool call that touches a file, ping, then the end of
    stdin: each request is answered and the call is run (before, only initialize was
    sure to be: the rest was cancelled at the end of stdin)."""
    touched = tmp_path / "touched"
    script = b"".join(
        [
            INITIALIZE,
            INITIALIZED,
            _line({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}),
            _call(3, "run_command", command=f"echo piped-$((6*7)); touch {touched}"),
            _line({"jsonrpc": "2.0", "id": 4, "method": "ping"}),
        ]
    )
    with trio.fail_after(TIMEOUT):
        status, answers = await _piped(tmp_path, script)
    assert status == 0
    assert sorted(answers) == [1, 2, 3, 4], answers
    assert answers[2]["result"]["tools"]
    called = answers[3]["result"]
    assert not called["isError"] and "piped-42" in called["content"][0]["text"], called
    assert answers[4]["result"] == {}
    assert touched.exists()


async def test_a_call_still_running_after_the_grace_is_stopped_and_answered(
    tmp_path: Path,
) -> None:
    """A call that would run past EOF_GRACE is stopped and answered as stopped; a call
    that ends within it is answered with its result; the server then exits."""
    script = b"".join(
        [
            INITIALIZE,
            INITIALIZED,
            _call(2, "run_command", command="sleep 1000", yield_after=1000),
            _call(3, "run_command", command="sleep 1; echo one", terminal="b", yield_after=100),
        ]
    )
    with trio.fail_after(EOF_GRACE + 2 * TIMEOUT):
        status, answers = await _piped(tmp_path, script)
    assert status == 0
    stopped = answers[2]["result"]
    assert stopped["isError"], stopped
    assert STOPPED.split("{", 1)[0] in stopped["content"][0]["text"], stopped
    finished = answers[3]["result"]
    assert not finished["isError"] and "one\n" in finished["content"][0]["text"], finished


async def test_stdout_writer_queue_is_bounded_and_its_wait_cancellable() -> None:
    """Nothing reads the pipe: a message alone is taken whatever its size, the next one
    waits for room (cancellably), and it goes once the pipe is read; releasing the
    writer while its thread is blocked in a write does not wait for it."""
    read_end, write_end = os.pipe()
    writer = StdoutWriter(write_end, max_queued=100_000)
    try:
        with trio.fail_after(TIMEOUT):
            await writer.write("x" * 200_000 + "\n")  # alone: taken
            assert writer.queued == 200_001
            with trio.CancelScope() as waiting:
                waiting.cancel()  # (a write past the bound waits: cancelled here)
                await writer.write("y\n")
            assert waiting.cancelled_caught and writer.queued == 200_001
            done = trio.Event()

            async def second() -> None:
                await writer.write("z\n")
                done.set()

            async with trio.open_nursery() as nursery:
                nursery.start_soon(second)
                await trio.testing.wait_all_tasks_blocked()
                assert not done.is_set()  # (the thread is blocked: the pipe is full)
                received = b""
                while not received.endswith(b"z\n"):
                    received += await trio.to_thread.run_sync(os.read, read_end, 1 << 20)
            assert received == b"x" * 200_000 + b"\nz\n"
            await writer.drain()
            assert writer.queued == 0
            await writer.write("w" * 100_000 + "\n")  # fills the pipe: the thread blocks
            writer.release()  # at once (the descriptor is left to the thread)
    finally:
        writer.release()
        os.close(read_end)  # the thread's write fails (EPIPE): it ends
    thread = writer._thread
    await trio.to_thread.run_sync(thread.join, TIMEOUT)
    assert not thread.is_alive() and isinstance(writer.failed, BrokenPipeError)
    os.close(write_end)  # (not closed by release(): the thread was writing to it)
