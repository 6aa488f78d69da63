"""The sidecar's edges (issue 12): hostile or broken peers cost nobody else anything.

Before authentication: malformed upgrades get 400 and one short log line; pending
connections are capped below the fd limit. After it: the cost of decoding one
frame, the number of terminals and the size of ``root/configChanged`` values are
bounded, cwd URIs are read strictly, and the shell-integration nonce is in no
process's environment. Everything runs on loopback, bounded in count and time.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Final

import orjson
import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from ahp.cli import build_parser
from ahp.engine import open_host
from ahp.protocol.codec import ProtocolError
from ahp.protocol.jsonshape import MAX_DEPTH, MAX_ITEMS, FrameShapeError, check_shape
from ahp.protocol.processes import EXEC
from ahp.protocol.state import CommandPart
from ahp.protocol.uri import local_file_uri_to_path
from ahp.server import ServeOptions
from ahp.server.admission import (
    MAX_PENDING,
    MIN_PENDING,
    PendingConnections,
    RateLimitedLog,
    pending_limit,
)
from ahp.server.session import DEFAULT_MAX_TERMINALS, MAX_CONFIG_BYTES, SERVER_LIMIT, _parse
from ahp.server.websocket import LARGE_FRAME
from tests.helpers import TIMEOUT, kill_and_reap
from tests.wire import TOKEN, Peer, peer, running_server

ROOT = "ahp-root://"
REPO = Path(__file__).resolve().parents[1]

# -- malformed upgrades ------------------------------------------------------------------------


async def _raw_reply(port: int, request: bytes) -> bytes:
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    try:
        await stream.send_all(request)
        reply = b""
        with trio.fail_after(TIMEOUT):
            while True:
                chunk = await stream.receive_some(4096)
                if not chunk:
                    break
                reply += chunk
                if b"\r\n\r\n" in reply:
                    break
    finally:
        await stream.aclose()
    return reply


def _upgrade(target: bytes, **headers: bytes) -> bytes:
    base = {
        b"Host": b"127.0.0.1",
        b"Upgrade": b"websocket",
        b"Connection": b"Upgrade",
        b"Sec-WebSocket-Key": b"dGhlIHNhbXBsZSBub25jZQ==",
        b"Sec-WebSocket-Version": b"13",
    }
    for name, value in headers.items():
        base[name.replace("_", "-").encode()] = value
    lines = [b"GET " + target + b" HTTP/1.1"] + [k + b": " + v for k, v in base.items()]
    return b"\r\n".join(lines) + b"\r\n\r\n"


_TOKENED = f"/?tkn={TOKEN}".encode()

MALFORMED = [
    pytest.param(_upgrade(_TOKENED, Host="h\xe9st".encode()), id="non-ascii-host"),
    pytest.param(_upgrade(_TOKENED, Host=b"\xff\xfe"), id="non-utf8-host"),
    pytest.param(_upgrade(_TOKENED, Connection="Upgr\xe4de".encode()), id="non-ascii-connection"),
    pytest.param(
        _upgrade(_TOKENED, Sec_WebSocket_Protocol="pr\xf6to".encode()), id="non-ascii-protocol"
    ),
    pytest.param(
        _upgrade(_TOKENED, Sec_WebSocket_Extensions="\xe9xt".encode()), id="non-ascii-extensions"
    ),
    pytest.param(_upgrade(b"//[x/?tkn=" + TOKEN.encode()), id="bad-ipv6-target"),
    pytest.param(_upgrade(b"/\xe9?tkn=" + TOKEN.encode()), id="non-ascii-target"),
    pytest.param(_upgrade(b"http://[::1/?tkn=" + TOKEN.encode()), id="absolute-bad-target"),
    pytest.param(_upgrade(_TOKENED, Origin="\xe9vil".encode()), id="non-ascii-origin"),
]
#: (An unsupported version is answered 426 with the versions we speak, RFC 6455 4.4.)
MALFORMED += [
    pytest.param(_upgrade(_TOKENED, Sec_WebSocket_Version=b"13\xff"), id="bad-version"),
]


@pytest.mark.parametrize("request_bytes", MALFORMED)
async def test_a_malformed_upgrade_gets_400_and_one_short_log_line(
    request_bytes: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="ahp")
    async with running_server() as sidecar:
        assert sidecar.port is not None
        reply = await _raw_reply(sidecar.port, request_bytes)
        # The server still serves everyone else afterwards.
        good = await _raw_reply(sidecar.port, _upgrade(_TOKENED))
    expected = b"426" if b"Version: 13\xff" in request_bytes else b"400"
    assert reply.startswith(b"HTTP/1.1 " + expected + b" "), reply[:80]
    assert good.startswith(b"HTTP/1.1 101 "), good[:80]
    records = [r for r in caplog.records if r.name.startswith("ahp") and r.levelno >= logging.INFO]
    assert len(records) <= 1, [r.getMessage() for r in records]
    for record in records:
        assert record.exc_info is None
        assert len(record.getMessage()) < 300
        assert TOKEN not in record.getMessage()


# -- cwd URIs ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "uri",
    ["file:///tmp?q", "file:///tmp#f", "file:///tmp?q#f", "file://localhost/tmp?", "file:/tmp#"],
)
def test_a_cwd_uri_with_a_query_or_fragment_is_refused(uri: str) -> None:
    with pytest.raises(ValueError, match="query or fragment"):
        local_file_uri_to_path(uri, "myhost")


@pytest.mark.parametrize(
    "uri",
    [
        "file:///tmp/a%20b",
        "file://localhost/tmp/a%20b",
        "file://LOCALHOST/tmp/a%20b",
        "file://127.0.0.1/tmp/a%20b",
        "file://127.0.0.2/tmp/a%20b",
        "file://[::1]/tmp/a%20b",
        "file://myhost/tmp/a%20b",
    ],
)
def test_a_cwd_uri_naming_this_machine_is_accepted_like_an_empty_host(uri: str) -> None:
    assert local_file_uri_to_path(uri, "myhost") == "/tmp/a b"


@pytest.mark.parametrize(
    "uri", ["file://otherhost/tmp", "file://10.0.0.1/tmp", "file://[::2]/tmp", "file://[::1/tmp"]
)
def test_a_cwd_uri_naming_another_host_is_refused(uri: str) -> None:
    with pytest.raises(ValueError, match="another host"):
        local_file_uri_to_path(uri, "myhost")


# -- counts and sizes --------------------------------------------------------------------------


async def _create(p: Peer, uri: str) -> dict[str, Any]:
    claim = {"kind": "client", "clientId": "c1"}
    return await p.call("createTerminal", {"channel": uri, "claim": claim})


async def test_terminals_past_max_terminals_are_refused_with_a_clear_error() -> None:
    options = ServeOptions(port=0, token=TOKEN, max_terminals=2)
    async with (
        running_server(options, shell="/bin/sh") as server,
        peer(server.url) as p,
        peer(server.url) as other,
    ):
        await p.initialize("c1")
        await other.initialize("c2")
        assert "result" in await _create(p, "ahp-terminal:/a")
        assert "result" in await _create(other, "ahp-terminal:/b")
        refused = await _create(p, "ahp-terminal:/c")
        assert refused["error"]["code"] == SERVER_LIMIT
        assert "at most 2 terminals" in refused["error"]["message"]
        assert refused["error"]["data"] == {"limit": 2}
        # Nothing was lost: both connections go on, and a slot freed can be used.
        assert await other.result("ping", {}) is None
        assert "result" in await p.call("disposeTerminal", {"channel": "ahp-terminal:/a"})
        assert "result" in await _create(other, "ahp-terminal:/c")


def test_serve_max_terminals_flag() -> None:
    parser = build_parser()
    assert parser.parse_args(["serve"]).max_terminals == DEFAULT_MAX_TERMINALS
    assert parser.parse_args(["serve", "--max-terminals", "7"]).max_terminals == 7
    with pytest.raises(SystemExit):
        parser.parse_args(["serve", "--max-terminals", "0"])


async def test_a_config_over_the_bound_is_rejected_to_its_sender_and_not_broadcast() -> None:
    async with (
        running_server(shell="/bin/sh") as server,
        peer(server.url) as sender,
        peer(server.url) as watcher,
    ):
        await sender.initialize("c1")
        await watcher.initialize("c2")
        big = {"blob": "x" * MAX_CONFIG_BYTES}
        seq = await sender.dispatch(ROOT, {"type": "root/configChanged", "config": big})
        rejected = await sender.action(lambda a: a["origin"]["clientSeq"] == seq)
        assert "larger than" in rejected["rejectionReason"]
        assert rejected["action"] == {"type": "root/configChanged", "config": {}}
        # The watcher sees only the next, small change (the big one was never broadcast).
        await sender.dispatch(ROOT, {"type": "root/configChanged", "config": {"a": 1}})
        seen = await watcher.action(lambda a: a["action"]["type"] == "root/configChanged")
        assert seen["action"]["config"] == {"a": 1}
        assert "rejectionReason" not in seen


# -- the cost of decoding one frame ------------------------------------------------------------


def _depth(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max(map(_depth, value.values()), default=0)
    if isinstance(value, list):
        return 1 + max(map(_depth, value), default=0)
    return 0


def _items(value: Any) -> int:
    """Containers plus commas, as the scanner counts them."""
    if isinstance(value, dict):
        return 1 + max(len(value) - 1, 0) + sum(map(_items, value.values()))
    if isinstance(value, list):
        return 1 + max(len(value) - 1, 0) + sum(map(_items, value))
    return 0


_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(-(2**53), 2**53)
    | st.text(alphabet=st.sampled_from('ab"\\[]{},:\n\x00é'))
)
_JSON = st.recursive(
    _SCALARS,
    lambda inner: (
        st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=4), inner, max_size=5)
    ),
    max_leaves=40,
)


@settings(max_examples=300, deadline=None)
@given(value=_JSON, max_depth=st.integers(0, 8), max_items=st.integers(0, 60), pad=st.booleans())
def test_the_shape_check_agrees_with_the_decoded_tree(
    value: Any, max_depth: int, max_items: int, pad: bool
) -> None:
    frame = orjson.dumps(value)
    if pad:  # past the plain-count shortcut: the exact reading
        frame = frame + b" " * 20_000
    too_costly = _depth(value) > max_depth or _items(value) > max_items
    if too_costly:
        with pytest.raises(FrameShapeError):
            check_shape(frame, max_depth=max_depth, max_items=max_items)
        with pytest.raises(FrameShapeError):
            check_shape(frame.decode(), max_depth=max_depth, max_items=max_items)
    else:
        check_shape(frame, max_depth=max_depth, max_items=max_items)
        check_shape(frame.decode(), max_depth=max_depth, max_items=max_items)


@pytest.mark.parametrize(
    ("frame", "refused"),
    [
        (b"[" * MAX_DEPTH + b"]" * MAX_DEPTH, False),
        (b"[" * (MAX_DEPTH + 1) + b"]" * (MAX_DEPTH + 1), True),
        (b"[" + b"[]," * (MAX_ITEMS // 2 - 1) + b"[]]", False),
        (b"[" + b"[]," * MAX_ITEMS + b"[]]", True),
        (b"[" + b'"a",' * (2 * MAX_ITEMS) + b'"a"]', True),
        # Structure inside strings costs nothing, escaped quotes and backslashes included.
        (orjson.dumps(["[[{,:" * 200_000, '\\"' * 100_000, '"' * 100_000]), False),
        (orjson.dumps({"k": "\\"}) * 1 + b" " * 30_000, False),
        # Not JSON, and cheap for the decoder to refuse (it stops at the first wrong byte).
        (b'"' + b'\\"' * 200_000, False),
        (b"]" * 200_000, False),
    ],
    ids=[
        "depth-at-bound",
        "depth-over",
        "items-at-bound",
        "items-over",
        "strings-over",
        "structure-in-strings",
        "escaped-backslash",
        "unterminated",
        "closings",
    ],
)
def test_the_shape_check_at_its_bounds(frame: bytes, refused: bool) -> None:
    if refused:
        with pytest.raises(FrameShapeError):
            check_shape(frame)
    else:
        check_shape(frame)


@pytest.mark.parametrize(
    "payload",
    [
        pytest.param(b"[" + b"[]," * 300_000 + b"[]]", id="300k-empty-arrays"),
        pytest.param(
            b'{"jsonrpc":"2.0","id":7,"method":"ping","params":{"x":['
            + b"{}," * 300_000
            + b"{}]}}",
            id="request-with-300k-objects",
        ),
        pytest.param(b"[" * 1000 + b"]" * 1000, id="1000-deep"),
        # From LARGE_FRAME on, the check and the decoding are separate steps.
        pytest.param(b"[" + b"[]," * (LARGE_FRAME // 2) + b"[]]", id="large-frame"),
    ],
)
async def test_a_frame_too_costly_to_decode_is_refused_before_decoding(payload: bytes) -> None:
    async with running_server() as server, peer(server.url) as p:
        await p.initialize("c1")
        await p.send(payload.decode())
        answer = await p.recv()
        assert answer["error"]["code"] == -32700, answer
        assert "items" in answer["error"]["message"] or "deeper" in answer["error"]["message"]
        assert await p.result("ping", {}) is None  # the connection goes on


# -- unauthenticated connections and file descriptors ------------------------------------------


@asynccontextmanager
async def _serve(*args: str, nofile: int) -> AsyncIterator[tuple[str, list[bytes]]]:
    """``python -m ahp serve`` with ``RLIMIT_NOFILE`` lowered to ``nofile``: (URL, stderr)."""

    def lower_fd_limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))

    env = {**os.environ, "PYTHONPATH": str(REPO)}
    cmd = [sys.executable, "-m", "ahp", "serve", "--port", "0", "--shell", "/bin/sh", *args]
    async with trio.open_nursery() as nursery:
        proc = await trio.lowlevel.open_process(
            cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            cwd=str(REPO),
            preexec_fn=lower_fd_limit,
        )
        assert proc.stdout is not None
        err: list[bytes] = []

        async def drain() -> None:
            assert proc.stderr is not None
            async for chunk in proc.stderr:
                err.append(bytes(chunk))

        nursery.start_soon(drain)
        try:
            out = b""
            with trio.fail_after(TIMEOUT):
                while b"\n" not in out:
                    chunk = await proc.stdout.receive_some(4096)
                    assert chunk, b"".join(err).decode(errors="replace")
                    out += chunk
            yield out.decode().split("\n", 1)[0], err
            proc.send_signal(signal.SIGTERM)
            with trio.fail_after(TIMEOUT):
                assert await proc.wait() == 0
        finally:
            await kill_and_reap(proc)


def _port(url: str) -> int:
    match = re.search(r":(\d+)/", url)
    assert match is not None, url
    return int(match.group(1))


async def test_a_clients_newline_cannot_forge_a_line_of_the_servers_log() -> None:
    forged = "\n1999-01-01 00:00:00,000 ERROR ahp.server: FORGED"
    async with _serve("--log-level", "debug", nofile=1024) as (url, err), peer(url) as p:
        params = {
            "channel": ROOT,
            "clientId": "c1" + forged,
            "protocolVersions": ["0.5.0"],
            "clientInfo": {"name": "probe" + forged, "version": "1"},
        }
        await p.result("initialize", params)
        await p.call("ping", {"channel": ROOT})
    lines = b"".join(err).decode(errors="replace").splitlines()
    assert not [line for line in lines if line.startswith("1999-01-01")], lines
    assert any("probe\\x0a1999-01-01" in line for line in lines), lines


#: Slow connections opened against a server allowed ``_NOFILE`` fds: well past the limit.
_NOFILE: Final = 96
_SLOW_CONNECTIONS: Final = 2 * _NOFILE


async def test_slow_unauthenticated_connections_cannot_exhaust_the_servers_fds() -> None:
    """Each slow peer sends half an upgrade and then nothing. The server keeps at most
    ``pending_limit(96)`` = 12 of them (the oldest is dropped for a newer one), so a
    legitimate client still connects at once and its terminals still get ptys; the log
    gets no traceback and at most a line a second per kind."""
    started = trio.current_time()
    async with _serve("--log-level", "info", nofile=_NOFILE) as (url, err):
        port = _port(url)
        slow: list[trio.SocketStream] = []
        try:
            for _ in range(_SLOW_CONNECTIONS):
                stream = await trio.open_tcp_stream("127.0.0.1", port)
                slow.append(stream)
                with contextlib.suppress(trio.BrokenResourceError):
                    await stream.send_all(b"GET /?tkn=x HTTP/1.1\r\nHost: 127.0")
            connect_started = trio.current_time()
            async with peer(url) as p:
                connected = trio.current_time() - connect_started
                await p.initialize("c1")
                for name in ("a", "b", "c"):
                    created = await _create(p, f"ahp-terminal:/{name}")
                    assert "result" in created, created
                await p.result("subscribe", {"channel": "ahp-terminal:/c"})
                await p.dispatch(
                    "ahp-terminal:/c", {"type": "terminal/input", "data": "echo ok$((6*7))\n"}
                )
                await p.text_until("ahp-terminal:/c", "ok42")
        finally:
            for stream in slow:
                await stream.aclose()
    elapsed = trio.current_time() - started
    print(f"legitimate connect with {_SLOW_CONNECTIONS} slow peers: {connected * 1000:.1f} ms")
    logs = b"".join(err).decode(errors="replace")
    assert "Traceback" not in logs and "EMFILE" not in logs, logs[-3000:]
    for kind in ("unauthenticated connection", "cannot accept"):
        lines = [line for line in logs.splitlines() if kind in line]
        assert len(lines) <= elapsed + 1, lines


async def test_running_out_of_fds_is_a_clear_error_and_recoverable() -> None:
    """Terminals until the process has no fd left (``--max-terminals`` out of the way):
    ``createTerminal`` then fails with -32000 "out of resources", not -32603, and works
    again once a terminal is disposed."""
    async with _serve("--max-terminals", "1000", nofile=64) as (url, err), peer(url) as p:
        await p.initialize("c1")
        created = 0
        while True:
            answer = await _create(p, f"ahp-terminal:/t{created}")
            if "error" in answer:
                break
            created += 1
            assert created < 64, "every terminal takes at least one fd"
        assert answer["error"]["code"] == SERVER_LIMIT, answer
        assert "out of resources" in answer["error"]["message"], answer
        assert created >= 1
        # An exec's pipes need fds too: the same answer (it was -32603 and a traceback).
        answer = await p.call(EXEC, {"argv": ["true"]})
        assert answer["error"]["code"] == SERVER_LIMIT, answer
        assert "out of resources" in answer["error"]["message"], answer
        assert "result" in await p.call("disposeTerminal", {"channel": "ahp-terminal:/t0"})
        again: dict[str, Any] = {}
        with trio.fail_after(TIMEOUT):  # (the disposed terminal's fds close as it is reaped)
            while "result" not in again:
                again = await _create(p, "ahp-terminal:/again")
                await trio.sleep(0.05)
    logs = b"".join(err).decode(errors="replace")
    assert "Traceback" not in logs, logs[-3000:]


def _accept_failures(err: list[bytes]) -> list[str]:
    logs = b"".join(err).decode(errors="replace")
    return [line for line in logs.splitlines() if "cannot accept connections" in line]


async def test_the_accept_loop_backs_off_quietly_when_out_of_fds_and_recovers() -> None:
    """Terminals take the fds, then authenticated connections the last ones, until
    ``accept`` fails: the server waits and retries, logging at most a line a second
    and no traceback; a connection waiting in the backlog is served once a terminal
    is disposed."""
    async with _serve("--max-terminals", "1000", nofile=64) as (url, err), peer(url) as p:
        upgrade = _upgrade(url[url.index("/?") :].encode())
        await p.initialize("c1")
        created = 0
        while "result" in await _create(p, f"ahp-terminal:/t{created}"):
            created += 1
        held: list[trio.SocketStream] = []
        try:
            with trio.fail_after(TIMEOUT):
                while not _accept_failures(err):
                    stream = await trio.open_tcp_stream("127.0.0.1", _port(url))
                    held.append(stream)
                    await stream.send_all(upgrade)
                    reply = b""
                    while b"\r\n" not in reply and not _accept_failures(err):
                        with trio.move_on_after(0.05):
                            reply += await stream.receive_some(4096)
            first_failure = trio.current_time()
            # A client arriving now waits in the listen backlog (Linux's accept fails with
            # EMFILE before it looks at the queue, so the loop keeps failing meanwhile).
            waiting = await trio.open_tcp_stream("127.0.0.1", _port(url))
            held.append(waiting)
            await waiting.send_all(upgrade)
            await trio.sleep(2.5)  # (the loop keeps retrying meanwhile)
            lines = _accept_failures(err)
            assert 1 <= len(lines) <= (trio.current_time() - first_failure) + 1, lines
            for i in range(min(created, 3)):
                await p.call("disposeTerminal", {"channel": f"ahp-terminal:/t{i}"})
            reply = b""
            with trio.fail_after(TIMEOUT):
                while b"\r\n" not in reply:
                    chunk = await waiting.receive_some(4096)
                    assert chunk, b"".join(err).decode(errors="replace")[-2000:]
                    reply += chunk
            assert reply.startswith(b"HTTP/1.1 101 "), reply[:80]
        finally:
            for stream in held:
                await stream.aclose()
    logs = b"".join(err).decode(errors="replace")
    assert "Traceback" not in logs, logs[-3000:]


@pytest.mark.parametrize(
    ("nofile", "limit"),
    [
        (16, MIN_PENDING),
        (96, 12),
        (1024, 128),
        (65536, MAX_PENDING),
        (resource.RLIM_INFINITY, MAX_PENDING),
    ],
)
def test_the_pending_limit_is_an_eighth_of_the_fd_limit_within_bounds(
    nofile: int, limit: int
) -> None:
    assert pending_limit(nofile) == limit


async def test_pending_connections_evict_the_oldest_past_the_limit() -> None:
    pending = PendingConnections(2)
    scopes = [trio.CancelScope() for _ in range(4)]
    for scope in scopes[:3]:
        pending.admit(scope)
    assert [s.cancel_called for s in scopes] == [True, False, False, False]
    pending.release(scopes[1])
    pending.admit(scopes[3])
    assert [s.cancel_called for s in scopes] == [True, False, False, False]
    assert len(pending) == 2 and pending.evicted == 1


async def test_rate_limited_log_lines(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="ahp.test")
    notes = RateLimitedLog(logging.getLogger("ahp.test"), interval=1.0)
    assert notes.log("a", logging.INFO, "first %d", 1)
    assert not notes.log("a", logging.INFO, "second")
    assert not notes.log("a", logging.INFO, "third")
    assert notes.log("b", logging.INFO, "other kind")
    await trio.sleep(1.0)
    assert notes.log("a", logging.INFO, "fourth")
    messages = [r.getMessage() for r in caplog.records]
    assert messages == ["first 1", "other kind", "fourth (2 similar lines left out)"]


# -- the shell-integration nonce ---------------------------------------------------------------

#: Prints every variable of ours, and the nonce wherever it appears, in the initial
#: environment (/proc/PID/environ) of each ancestor of this process, up to and including
#: the process whose pid is argv[1]; then "clean" if there was nothing.
_SEARCH_ANCESTORS = """
import os, sys
stop, nonce = int(sys.argv[1]), sys.argv[2].encode()
names = {b"AHP_NONCE", b"ZDOTDIR", b"USER_ZDOTDIR", b"AHP_SHELL_LOGIN", b"AHP_ZDOTDIR_WAS_SET"}
pid, found, seen = os.getppid(), [], 0
while pid > 1:
    seen += 1
    with open(f"/proc/{pid}/environ", "rb") as f:
        for entry in f.read().split(b"\\0"):
            if entry.split(b"=", 1)[0] in names or nonce in entry:
                found.append(f"{pid}: {entry[:60]!r}")
    if pid == stop:
        break
    with open(f"/proc/{pid}/stat") as f:
        pid = int(f.read().rsplit(")", 1)[1].split()[1])
print("searched", seen, "ancestors:", "; ".join(found) or "clean")
sys.exit(3)
"""


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
async def test_no_ancestor_of_a_command_has_the_nonce_in_its_environment(
    shell: str, tmp_path: Path
) -> None:
    path = shutil.which(shell)
    if path is None:
        pytest.skip(f"{shell} is not installed")
    script = tmp_path / "search.py"
    script.write_text(_SEARCH_ANCESTORS)
    async with open_host() as host:
        term = await host.create_terminal("ahp-terminal:/n", shell=path, cwd=str(tmp_path))
        assert term.integrated
        with trio.fail_after(TIMEOUT):
            result = await term.run(f"{sys.executable} {script} {os.getpid()} {term.nonce}")
        assert "searched" in result.output, result.raw_output
        assert result.output.strip().endswith("ancestors: clean"), result.output
        # The shell's own ancestors were searched (the shell and this process at least).
        assert int(result.output.split("searched ", 1)[1].split()[0]) >= 2
        # Command detection still works: the command, with its exit code, as the shell
        # reported it with the nonce.
        parts = [p for p in term.state.content if isinstance(p, CommandPart)]
        assert parts and parts[-1].commandLine.startswith(sys.executable), parts
        assert parts[-1].exitCode == 3 and result.exit_code == 3
        await host.dispose("ahp-terminal:/n")


@pytest.mark.parametrize(
    "frame",
    [
        b"[" + b"[]," * (MAX_ITEMS + 1) + b"[]]",
        b'{"a":"' + b"x" * 20_000 + b'", "b":[' + b'"\\\\\\"",' * (MAX_ITEMS + 1) + b"0]}",
        b"[" * 20_000,
    ],
    ids=["items", "strings", "depth"],
)
def test_a_refused_frame_leaves_no_garbage_cycle(frame: bytes) -> None:
    """The frame's copies must be freed as soon as the refusal is handled, not whenever
    the garbage collector runs (measured: 30 MB of RSS per 15 MiB frame otherwise)."""
    gc.collect()
    gc.disable()
    try:
        with pytest.raises(ProtocolError):
            _parse(frame.decode())
        assert gc.collect() == 0
    finally:
        gc.enable()


async def test_a_large_frame_within_the_bounds_is_handled() -> None:
    big = "x" * (2 * LARGE_FRAME)
    async with running_server() as server, peer(server.url) as p:
        await p.initialize("c1")
        answer = await p.call("ping", {"items": [big, [1, 2, {"a": big}]]})
        assert answer["result"] is None, answer


@pytest.mark.parametrize(
    ("cwd", "ok"),
    [
        ("file:///tmp?q#f", False),
        ("file:///tmp#f", False),
        ("file://127.0.0.1/tmp", True),
        ("file://[::1]/tmp", True),
        ("file://localhost/tmp", True),
        ("file://192.0.2.1/tmp", False),
    ],
)
async def test_create_terminal_cwd_uris(cwd: str, ok: bool) -> None:
    async with running_server(shell="/bin/sh") as server, peer(server.url) as p:
        await p.initialize("c1")
        claim = {"kind": "client", "clientId": "c1"}
        answer = await p.call(
            "createTerminal", {"channel": "ahp-terminal:/d", "claim": claim, "cwd": cwd}
        )
        if ok:
            assert "result" in answer, answer
            snapshot = await p.result("subscribe", {"channel": "ahp-terminal:/d"})
            assert snapshot["snapshot"]["state"]["cwd"] == "file:///tmp"
        else:
            assert answer["error"]["code"] == -32602, answer
            assert answer["error"]["data"] == {"path": "$.params.cwd"}


@pytest.mark.parametrize(
    ("option", "value", "why"),
    [
        ("--token", "", "empty (an unset variable?)"),
        ("--read-token", "", "empty (an unset variable?)"),
        ("--read-token", "abcdefgh ", "no spaces or control characters"),
        ("--token", "a\tb", "no spaces or control characters"),
    ],
)
def test_serve_refuses_a_token_that_cannot_serve(
    option: str, value: str, why: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Probe Q: ``--token ''`` (an unset variable) quietly became a random token, and
    ``--read-token 'abcdefgh '`` was taken with its space (the token file refuses both);
    now each is a usage error naming the option, and a good token is taken as it is."""
    parser = build_parser()
    with pytest.raises(SystemExit) as exited:
        parser.parse_args(["serve", option, value])
    assert exited.value.code == 2
    error = capsys.readouterr().err.splitlines()[-1]
    assert f"argument {option}" in error and why in error, error
    assert parser.parse_args(["serve", option, "s3cret-token"]).token in (None, "s3cret-token")
