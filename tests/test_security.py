"""Security: who may connect, what a browser page can do, what reaches a shell.

A terminal sidecar is remote code execution by design (``docs/threat-model.md``).
These tests check the doors: the token (403 at the upgrade, constant-time
comparison, never logged), the ``Origin`` allow-list against cross-site WebSocket
hijacking, the ``Host`` check against DNS rebinding, and that client input
(``name``, ``cwd``, titles, URIs) is never spliced into a shell command line.

The browser tests drive a real headless Chromium (Debian package ``chromium``)
through the DevTools protocol; they skip with a clear reason when
``/usr/bin/chromium`` is missing.
"""

from __future__ import annotations

import contextlib
import functools
import hmac
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import orjson
import pytest
import trio

from ahp.server import ServeOptions
from ahp.ws import open_websocket_url
from tests.helpers import TIMEOUT, kill_and_reap
from tests.wire import TOKEN, peer, running_server, upgrade_answer_head, upgrade_status_line

ROOT = "ahp-root://"
T1 = "ahp-terminal:/t1"
REPO = Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"


async def upgrade_status(port: int, target: str, headers: Mapping[str, str | None]) -> int:
    """Send a raw upgrade request; return the HTTP status code of the answer."""
    return int((await upgrade_status_line(port, target, headers)).split(b" ", 2)[1])


# -- the token -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("target", "headers", "status"),
    [
        ("/", {}, 403),
        ("/?tkn=", {}, 403),
        ("/?tkn=wrong", {}, 403),
        (f"/?tkn={TOKEN.upper()}", {}, 403),
        (f"/?tkn={TOKEN[:-1]}", {}, 403),
        (f"/?tkn={TOKEN}x", {}, 403),
        (f"/?tkn=%20{TOKEN}", {}, 403),
        (f"/?tkn=wrong&tkn={TOKEN}", {}, 403),
        (f"/?TKN={TOKEN}", {}, 403),
        (f"/?tkn={TOKEN}", {"Authorization": "Bearer wrong"}, 403),
        ("/", {"Authorization": f"Basic {TOKEN}"}, 403),
        ("/", {"Authorization": "Bearer "}, 403),
        (f"/?tkn={TOKEN}", {}, 101),
        (f"/other/path?x=1&tkn={TOKEN}", {}, 101),
        ("/", {"Authorization": f"Bearer {TOKEN}"}, 101),
        ("/", {"Authorization": f"bearer {TOKEN}"}, 101),
        (f"/?tkn={TOKEN}", {"Authorization": f"Basic {TOKEN}"}, 101),
    ],
)
async def test_token_at_the_upgrade(target: str, headers: dict[str, str], status: int) -> None:
    async with running_server() as server:
        assert server.port is not None
        assert await upgrade_status(server.port, target, headers) == status
        assert len(server.state.clients) == 0  # no protocol work for anyone


async def test_tokens_are_compared_in_constant_time(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[bytes, bytes]] = []
    original = hmac.compare_digest

    def spy(a: bytes, b: bytes) -> bool:
        calls.append((a, b))
        return original(a, b)

    monkeypatch.setattr("ahp.server.gate.hmac.compare_digest", spy)  # the gate's
    async with running_server() as server:
        assert server.port is not None
        assert await upgrade_status(server.port, "/?tkn=wrong-token", {}) == 403
        assert await upgrade_status(server.port, f"/?tkn={TOKEN}", {}) == 101
        read = server.read_token
    # Each offered token is compared with both the token and the read-only token.
    assert read is not None
    assert calls == [
        (b"wrong-token", TOKEN.encode()),
        (b"wrong-token", read.encode()),
        (TOKEN.encode(), TOKEN.encode()),
        (TOKEN.encode(), read.encode()),
    ]


async def test_the_token_never_appears_in_the_servers_logs(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A whole session, refusals included, logged at DEBUG: the token is nowhere."""
    caplog.set_level(logging.DEBUG)
    async with running_server() as server:
        assert server.port is not None
        assert await upgrade_status(server.port, "/?tkn=wrong", {}) == 403
        assert await upgrade_status(server.port, f"/?tkn={TOKEN}", {"Origin": "http://x"}) == 403
        async with peer(server.url) as p:
            await p.initialize("c1")
            await p.result(
                "createTerminal", {"channel": T1, "claim": {"kind": "client", "clientId": "c1"}}
            )
            await p.result("subscribe", {"channel": T1})
            await p.dispatch(T1, {"type": "terminal/input", "data": "echo hi-$((6*7))\r"})
            await p.text_until(T1, "hi-42")
            await p.send("{bad json")
            assert (await p.response(None))["error"]["code"] == -32700
            await p.result("disposeTerminal", {"channel": T1})
    leaks = [
        r
        for r in caplog.records
        if TOKEN in r.getMessage()
        # (trio-websocket's *client* logs the URL it connects to: that is the test's side)
        and not r.getMessage().startswith("Connecting to ws://")
    ]
    assert not leaks, [(r.name, r.getMessage()) for r in leaks]
    assert any(r.name.startswith("ahp") for r in caplog.records)


@asynccontextmanager
async def serve_subprocess(
    *args: str, env: dict[str, str] | None = None
) -> AsyncIterator[tuple[trio.Process, str, list[bytes]]]:
    """``python -m ahp serve --port 0 --log-level debug``: (process, URL line, stderr)."""
    full_env = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
    cmd = [sys.executable, "-m", "ahp", "serve", "--port", "0", "--log-level", "debug", *args]
    async with trio.open_nursery() as nursery:
        proc = await trio.lowlevel.open_process(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=full_env, cwd=str(REPO)
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
            yield proc, out.decode().split("\n", 1)[0], err
            proc.send_signal(signal.SIGTERM)
            with trio.fail_after(TIMEOUT):
                assert await proc.wait() == 0
        finally:
            await kill_and_reap(proc)


async def test_serve_debug_logs_never_show_the_token_and_children_do_not_inherit_it() -> None:
    secret = "env-secret-" + os.urandom(8).hex()
    read_secret = "env-read-" + os.urandom(8).hex()
    env = {"AHP_TOKEN": secret, "AHP_READ_TOKEN": read_secret}
    async with serve_subprocess(env=env) as (proc, url, err):
        assert url.endswith(f"?tkn={secret}")
        port = int(re.search(r":(\d+)/", url).group(1))  # type: ignore[union-attr]
        assert await upgrade_status(port, "/?tkn=nope", {}) == 403
        async with peer(url) as p:
            await p.initialize("c1")
            await p.result(
                "createTerminal", {"channel": T1, "claim": {"kind": "client", "clientId": "c1"}}
            )
            await p.result("subscribe", {"channel": T1})
            await p.dispatch(
                T1, {"type": "terminal/input", "data": 'echo "[${AHP_TOKEN:-unset}] [$TERM]"\r'}
            )
            text = await p.text_until(T1, "] [xterm-256color]")
            assert "[unset] [xterm-256color]" in text
            # Nor from the server's /proc/PID/environ (the block it started with, which
            # a process of the same user reads without any ptrace right): scrubbed.
            await p.dispatch(
                T1,
                {
                    "type": "terminal/input",
                    "data": f"tr '\\0' '\\n' </proc/{proc.pid}/environ | grep -c '^AHP_.*TOKEN=.' ;"
                    " echo \"environ-$?-\"'done'\r",
                },
            )
            text = await p.text_until(T1, "-done\r\n")
            assert re.search(r"[\r\n]0\r\nenviron-1-done", text), text
        environ = await trio.Path(f"/proc/{proc.pid}/environ").read_bytes()
        assert secret.encode() not in environ and read_secret.encode() not in environ
        assert b"AHP_TOKEN=\0" in environ  # (the name stays, its value is NULs)
    logs = b"".join(err).decode(errors="replace")
    assert "DEBUG" in logs and secret not in logs, logs


# -- Origin and Host ---------------------------------------------------------------------------


ALLOWED = "http://good.example:8080"


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        ({"Origin": "http://evil.example"}, 403),
        ({"Origin": "null"}, 403),
        ({"Origin": ""}, 403),
        ({"Origin": "https://good.example:8080"}, 403),
        ({"Origin": "http://good.example"}, 403),
        ({"Origin": "http://good.example:8080.evil.example"}, 403),
        ({"Origin": "HTTP://GOOD.EXAMPLE:8080"}, 403),
        ({"Origin": "http://127.0.0.1"}, 403),
        ({"Origin": ALLOWED}, 101),
        ({}, 101),  # not a browser: no Origin at all
        ({"Host": "evil.example"}, 403),
        ({"Host": "evil.example:{port}"}, 403),
        ({"Host": "127.0.0.1.evil.example:{port}"}, 403),
        ({"Host": "localhost.evil.example"}, 403),
        ({"Host": "127.0.0.2:{port}"}, 403),
        ({"Host": ""}, 403),
        ({"Host": "localhost:{port}"}, 101),
        ({"Host": "LOCALHOST:{port}"}, 101),
        ({"Host": "127.0.0.1"}, 101),
        ({"Host": "[::1]:{port}"}, 101),
        ({"Host": "evil.example:{port}", "Origin": ALLOWED}, 403),  # rebinding, allowed origin
        ({"Host": "127.0.0.1:abc"}, 403),  # (not a port: it was taken, and reflected)
        ({"Host": "127.0.0.1:{port}@evil.example"}, 403),
        ({"Host": "127.0.0.1:99999999"}, 403),
        ({"Host": "127.0.0.1:-1"}, 403),
        ({"Host": "[::1]:x"}, 403),
    ],
)
async def test_origin_and_host_checks(headers: dict[str, str], status: int) -> None:
    options = ServeOptions(port=0, token=TOKEN, allow_origins=frozenset({ALLOWED}))
    async with running_server(options) as server:
        assert server.port is not None
        filled = {k: v.format(port=server.port) for k, v in headers.items()}
        assert await upgrade_status(server.port, f"/?tkn={TOKEN}", filled) == status


async def _answer_head(port: int, extra: str) -> bytes:
    """A whole upgrade request (``extra`` header lines added) sent in one write; the head
    of the answer, lower-cased."""
    return (await upgrade_answer_head(port, f"/?tkn={TOKEN}", {}, raw=extra)).lower()


@pytest.mark.parametrize(
    "extra",
    [
        # Admission reads the first Origin (a browser never sends two).
        f"Origin: {ALLOWED}\r\nOrigin: http://evil.example\r\n",
        # A head over MAX_HEAD in one write (h11 bounds only a head still incomplete).
        "X-Pad: " + "p" * 60_000 + "\r\n",
    ],
)
async def test_upgrade_heads_the_checks_could_misread_are_refused(extra: str) -> None:
    options = ServeOptions(port=0, token=TOKEN, allow_origins=frozenset({ALLOWED}))
    async with running_server(options) as server, peer(server.url) as p:
        assert server.port is not None
        assert (await _answer_head(server.port, extra)).startswith(b"http/1.1 400 ")
        await p.initialize("after")  # (the server goes on)


@pytest.mark.parametrize(
    ("version", "keys"),
    [
        ("HTTP/1.0", ["dGhlIHNhbXBsZSBub25jZQ=="]),
        ("HTTP/2.0", ["dGhlIHNhbXBsZSBub25jZQ=="]),
        ("HTTP/1.1", ["!!!"]),
        ("HTTP/1.1", ["dGhlIHNhbXBsZQ=="]),  # 10 bytes
        ("HTTP/1.1", ["dGhlIHNhbXBsZSBub25jZQ==", "dGhlIHNhbXBsZSBub25jZQ=="]),
        ("HTTP/1.1", []),
    ],
)
async def test_an_opening_handshake_rfc_6455_refuses_is_refused(
    version: str, keys: list[str]
) -> None:
    async with running_server() as server:
        assert server.port is not None
        request = (
            f"GET /?tkn={TOKEN} {version}\r\nHost: 127.0.0.1:{server.port}\r\n"
            "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
            + "".join(f"Sec-WebSocket-Key: {key}\r\n" for key in keys)
            + "\r\n"
        )
        stream = await trio.open_tcp_stream("127.0.0.1", server.port)
        try:
            await stream.send_all(request.encode())
            with trio.fail_after(TIMEOUT):
                answer = await stream.receive_some(4096)
        finally:
            await stream.aclose()
        assert answer.startswith(b"HTTP/1.1 4"), answer


async def test_a_head_of_bare_lf_lines_is_refused_for_what_it_is() -> None:
    """h11 takes lines ended by a bare LF; the upgrade refuses them, saying so (it used
    to say "must be an HTTP/1.1 request" of an HTTP/1.1 request)."""
    async with running_server() as server:
        assert server.port is not None
        request = (
            f"GET /?tkn={TOKEN} HTTP/1.1\nHost: 127.0.0.1:{server.port}\nUpgrade: websocket\n"
            "Connection: Upgrade\nSec-WebSocket-Version: 13\n"
            "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\n\n"
        )
        stream = await trio.open_tcp_stream("127.0.0.1", server.port)
        try:
            await stream.send_all(request.encode())
            answer = b""
            with trio.fail_after(TIMEOUT):
                while chunk := await stream.receive_some(4096):
                    answer += chunk
        finally:
            await stream.aclose()
        assert answer.startswith(b"HTTP/1.1 400 "), answer
        assert b"CRLF" in answer and b"HTTP/1.1 request" not in answer, answer


async def test_only_a_well_formed_subprotocol_offer_is_answered() -> None:
    async with running_server() as server:
        assert server.port is not None
        head = await _answer_head(server.port, "Sec-WebSocket-Protocol: ,,, ;;\r\n")
        assert head.startswith(b"http/1.1 101 ") and b"sec-websocket-protocol" not in head
        head = await _answer_head(server.port, "Sec-WebSocket-Protocol: ;;, ahp.v1\r\n")
        assert b"sec-websocket-protocol: ahp.v1" in head


async def test_unix_socket_has_no_host_check_but_a_token_and_mode_0600(tmp_path: Path) -> None:
    path = tmp_path / "s.sock"
    async with running_server(ServeOptions(unix=str(path), token=TOKEN)):
        assert oct(path.stat().st_mode & 0o777) == oct(0o600)
        for token, status in (("wrong", 403), (TOKEN, 101)):
            stream = await trio.open_unix_socket(str(path))
            try:
                await stream.send_all(
                    (
                        f"GET /?tkn={token} HTTP/1.1\r\nHost: anything\r\nUpgrade: websocket\r\n"
                        "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                        "Sec-WebSocket-Version: 13\r\n\r\n"
                    ).encode()
                )
                with trio.fail_after(TIMEOUT):
                    reply = await stream.receive_some(4096)
            finally:
                await stream.aclose()
            assert int(reply.split(b" ", 2)[1]) == status


# -- nothing from a client reaches a shell command line ---------------------------------------


async def test_client_strings_never_reach_a_shell_command_line(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    payloads = [
        f"$(touch {marker}1)",
        f"`touch {marker}2`",
        f"x; touch {marker}3",
        f"x' ; touch {marker}4; '",
        f'x" ; touch {marker}5; "',
        f"x | touch {marker}6",
        f"x\n touch {marker}7",
    ]
    odd_dir = tmp_path / "$(touch pwned-cwd);`touch pwned-cwd2`"
    odd_dir.mkdir()
    async with running_server() as server, peer(server.url) as p:
        await p.initialize("c1")
        for i, payload in enumerate(payloads):
            uri = f"ahp-terminal:/x{i}"
            answer = await p.call(
                "createTerminal",
                {
                    "channel": uri,
                    "claim": {"kind": "client", "clientId": payload},
                    "name": payload,
                    "cwd": str(odd_dir),
                },
            )
            assert answer["result"] is None, answer
            await p.result("subscribe", {"channel": uri})
            await p.dispatch(uri, {"type": "terminal/titleChanged", "title": payload})
            pid = server.state.host.get(uri).pid
            assert pid is not None
            argv = _argv(pid)
            assert not any(payload.encode() in arg for arg in argv), argv
            assert os.readlink(f"/proc/{pid}/cwd") == str(odd_dir)
            # A cwd that does not exist and carries a payload: refused, nothing run.
            bad = await p.call(
                "createTerminal",
                {
                    "channel": uri + "-bad",
                    "claim": {"kind": "client", "clientId": "c1"},
                    "cwd": f"/nonexistent/{payload}",
                },
            )
            assert bad["error"]["code"] == -32602
        # Each shell runs and is idle: prove it by a command of our own, then look for marks.
        for i in range(len(payloads)):
            uri = f"ahp-terminal:/x{i}"
            await p.dispatch(uri, {"type": "terminal/input", "data": "echo ok-$((6*7))\r"})
            await p.text_until(uri, "ok-42")
    made = _pwned(tmp_path)
    assert made == [odd_dir.name], made


def _argv(pid: int) -> list[bytes]:
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        return f.read().split(b"\0")


def _pwned(tmp_path: Path) -> list[str]:
    """Files whose name says an injection ran (the odd cwd itself is expected)."""
    found = [str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if "pwned" in p.name]
    return sorted(found + [str(p) for p in Path("/tmp").glob("pwned*")])


# -- a real browser -----------------------------------------------------------------------------


PAGE = """<!doctype html><html><head><title>pending</title></head><body><script>
function attempt(url) {
  return new Promise(function (resolve) {
    var ws;
    try { ws = new WebSocket(url); } catch (e) { resolve("throw:" + e.name); return; }
    ws.onopen = function () { resolve("open"); ws.close(); };
    ws.onclose = function (e) { resolve("closed:" + e.code); };
  });
}
window.outcome = Promise.all(TARGETS.map(attempt)).then(function (r) {
  document.title = r.join(" ");
  return r;
});
</script></body></html>"""


@asynccontextmanager
async def page_server() -> AsyncIterator[tuple[int, list[str]]]:
    """A tiny HTTP server (another origin): (its port, the WebSocket URLs its page opens).

    The list is read when the page is requested, so sidecars that allow-list the
    page's origin can be started after the port is known.
    """
    targets: list[str] = []

    async def handle(stream: trio.SocketStream) -> None:
        request = b""
        with trio.move_on_after(TIMEOUT):
            while b"\r\n\r\n" not in request:
                chunk = await stream.receive_some(4096)
                if not chunk:
                    break
                request += chunk
        if request.startswith(b"GET / "):
            status = b"200 OK"
            payload = PAGE.replace("TARGETS", orjson.dumps(targets).decode()).encode()
        else:
            status, payload = b"404 Not Found", b""
        head = (
            b"HTTP/1.1 " + status + b"\r\nContent-Type: text/html; charset=utf-8\r\n"
            b"Content-Length: " + str(len(payload)).encode() + b"\r\nConnection: close\r\n\r\n"
        )
        with contextlib.suppress(trio.BrokenResourceError):
            await stream.send_all(head + payload)
        await stream.aclose()

    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(
            functools.partial(trio.serve_tcp, handle, 0, host="127.0.0.1")
        )
        try:
            yield listeners[0].socket.getsockname()[1], targets
        finally:
            nursery.cancel_scope.cancel()


async def browser_outcome(page_url: str, tmp_path: Path, *extra_flags: str) -> list[str]:
    """Load ``page_url`` in headless Chromium; the page's WebSocket outcomes (via DevTools)."""
    flags = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
        f"--user-data-dir={tmp_path / 'chromium-profile'}",
        "--remote-debugging-address=127.0.0.1",
        "--remote-debugging-port=0",
        *extra_flags,
        page_url,
    ]
    async with trio.open_nursery() as nursery:
        proc = await trio.lowlevel.open_process(
            [CHROMIUM, *flags], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        assert proc.stderr is not None
        try:
            err = b""
            with trio.fail_after(3 * TIMEOUT):
                while (match := re.search(rb"DevTools listening on (ws://\S+)", err)) is None:
                    chunk = await proc.stderr.receive_some(4096)
                    assert chunk, err.decode(errors="replace")
                    err += chunk
            nursery.start_soon(_drain, proc.stderr)
            browser_ws = match.group(1).decode()
            with trio.fail_after(3 * TIMEOUT):
                return await _evaluate_outcome(browser_ws, page_url)
        finally:
            proc.terminate()
            with trio.CancelScope(shield=True), trio.move_on_after(TIMEOUT):
                await proc.wait()
            if proc.returncode is None:
                proc.kill()
                with trio.CancelScope(shield=True):
                    await proc.wait()
            nursery.cancel_scope.cancel()


async def _drain(stream: Any) -> None:
    async for _ in stream:
        pass


async def _evaluate_outcome(browser_ws: str, page_url: str) -> list[str]:
    """Attach to the page target over the DevTools protocol and await ``window.outcome``."""
    async with open_websocket_url(browser_ws, max_message_size=16 * 2**20) as cdp:
        ids = iter(range(1, 1_000_000))

        async def command(method: str, params: dict[str, Any], session: str | None = None) -> Any:
            msg_id = next(ids)
            message: dict[str, Any] = {"id": msg_id, "method": method, "params": params}
            if session is not None:
                message["sessionId"] = session
            await cdp.send_message(orjson.dumps(message).decode())
            while True:
                answer = orjson.loads(await cdp.get_message())
                if answer.get("id") == msg_id:
                    assert "error" not in answer, answer
                    return answer["result"]

        while True:  # the page target appears once the browser has opened it
            targets = (await command("Target.getTargets", {}))["targetInfos"]
            page = [t for t in targets if t["type"] == "page" and t["url"].startswith(page_url)]
            if page:
                break
            await trio.sleep(0.05)
        session = (
            await command(
                "Target.attachToTarget", {"targetId": page[0]["targetId"], "flatten": True}
            )
        )["sessionId"]
        while True:  # the script may not have run yet
            result = await command(
                "Runtime.evaluate",
                {"expression": "window.outcome", "awaitPromise": True, "returnByValue": True},
                session,
            )
            value = result["result"].get("value")
            if isinstance(value, list):
                return [str(v) for v in value]
            await trio.sleep(0.05)


needs_chromium = pytest.mark.skipif(
    not (os.path.exists(CHROMIUM) and shutil.which(CHROMIUM)),
    reason="headless Chromium is not installed: apt-get install -y chromium",
)


def _refusals(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "refused connection" in r.getMessage()]


@needs_chromium
async def test_a_page_on_another_origin_cannot_connect(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Cross-site WebSocket hijacking, in a real browser: the page knows the address and
    the token, the browser sends the page's Origin, the sidecar refuses the upgrade.
    The control: a second sidecar that allow-lists the page's origin opens."""
    caplog.set_level(logging.INFO, logger="ahp")
    async with page_server() as (page_port, targets):
        origin = f"http://127.0.0.1:{page_port}"
        allowing = ServeOptions(port=0, token=TOKEN, allow_origins=frozenset({origin}))
        async with running_server() as strict, running_server(allowing) as control:
            targets[:] = [strict.url, control.url]
            outcome = await browser_outcome(f"{origin}/", tmp_path)
            assert outcome == ["closed:1006", "open"], outcome  # 1006: the upgrade failed
            refusals = _refusals(caplog)
            assert len(refusals) == 1 and refusals[0].endswith("origin not allowed"), refusals
            assert len(strict.state.clients) == 0


@needs_chromium
async def test_dns_rebinding_in_a_real_browser(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The page is served as ``evil.test`` (resolved to 127.0.0.1, as a rebinding attacker
    would arrange) and opens ``ws://evil.test:PORT``. Even with its origin allow-listed,
    the sidecar bound to loopback refuses a ``Host`` that names another site; the same
    page reaching it as 127.0.0.1 is the control and opens."""
    caplog.set_level(logging.INFO, logger="ahp")
    async with page_server() as (page_port, targets):
        origin = f"http://evil.test:{page_port}"
        options = ServeOptions(port=0, token=TOKEN, allow_origins=frozenset({origin}))
        async with running_server(options) as sidecar:
            rebound = sidecar.url.replace("127.0.0.1", "evil.test")
            targets[:] = [rebound, sidecar.url]
            outcome = await browser_outcome(
                f"{origin}/", tmp_path, "--host-resolver-rules=MAP evil.test 127.0.0.1"
            )
            assert outcome == ["closed:1006", "open"], outcome
            refusals = _refusals(caplog)
            assert len(refusals) == 1 and refusals[0].endswith("unexpected Host header"), refusals
