"""The viewer page's server side, without a browser: routes, headers, the recordings API,
the page's own Origin, the token as a subprotocol offer, and read-only connections.

Real servers on port 0 and raw sockets or real clients (``ahp.client``); the browser
tests are ``tests/test_viewer.py``.
"""

from __future__ import annotations

import logging
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest
import trio

from ahp.client import RpcError, connect
from ahp.protocol import TerminalInput
from ahp.server import ServeOptions
from ahp.server.session import READ_ONLY_META
from ahp.server.web import (
    MAX_RECORDING_BYTES,
    MAX_RECORDINGS_LISTED,
    MAX_RECORDINGS_SCANNED,
    STATIC_ROOT,
    content_security_policy,
)
from tests.helpers import TIMEOUT
from tests.test_audit_wire import wait_lines
from tests.wire import TOKEN, peer, running_server, upgrade_status_line

READ = "read-only-test-token"
REPO = Path(__file__).resolve().parents[1]


async def request(
    port: int, target: str, headers: dict[str, str] | None = None, method: str = "GET"
) -> tuple[int, dict[str, str], bytes]:
    """One plain HTTP request to 127.0.0.1:``port``: (status, headers, body)."""
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    try:
        lines = [f"{method} {target} HTTP/1.1", f"Host: 127.0.0.1:{port}"]
        lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
        await stream.send_all(("\r\n".join(lines) + "\r\n\r\n").encode())
        reply = b""
        with trio.fail_after(TIMEOUT):
            while chunk := await stream.receive_some(65536):
                reply += chunk
    finally:
        await stream.aclose()
    head, body = reply.split(b"\r\n\r\n", 1)
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    fields = {}
    for line in header_lines:
        name, value = line.split(":", 1)
        fields[name.lower()] = value.strip()
    return int(status_line.split()[1]), fields, body


def options(**kwargs: object) -> ServeOptions:
    return ServeOptions(port=0, token=TOKEN, read_token=READ, **kwargs)  # type: ignore[arg-type]


# -- the page and its files -----------------------------------------------------------------


async def test_the_page_is_served_with_a_strict_policy() -> None:
    async with running_server(options()) as sidecar:
        assert sidecar.port is not None
        status, headers, body = await request(sidecar.port, "/")
        assert status == 200 and headers["content-type"].startswith("text/html")
        assert b'<script type="module" src="/static/viewer.js">' in body
        csp = headers["content-security-policy"]
        assert "default-src 'none'" in csp and "script-src 'self' 'wasm-unsafe-eval'" in csp
        assert f"connect-src 'self' ws://127.0.0.1:{sidecar.port}" in csp
        assert "frame-ancestors 'none'" in csp and "unsafe-eval'" not in csp.replace(
            "wasm-unsafe-eval'", ""
        )
        for name, value in (
            ("x-content-type-options", "nosniff"),
            ("referrer-policy", "no-referrer"),
            ("cross-origin-resource-policy", "same-origin"),
            ("x-frame-options", "DENY"),
        ):
            assert headers[name] == value
        status, headers, body = await request(sidecar.port, "/static/vendor/xterm/xterm.mjs")
        assert status == 200 and headers["content-type"].startswith("text/javascript")
        assert b"export{" in body and headers["cross-origin-resource-policy"] == "same-origin"
        # HEAD: the same head, no body.
        status, headers, body = await request(sidecar.port, "/", method="HEAD")
        assert status == 200 and body == b"" and int(headers["content-length"]) > 0


def test_the_page_has_no_inline_script_and_loads_nothing_from_elsewhere() -> None:
    html = (STATIC_ROOT / "index.html").read_text()
    for tag in re.findall(r"<script\b[^>]*>", html):
        assert 'src="/static/' in tag, tag
    bodies = re.findall(r"<script\b[^>]*>(.*?)</script>", html, re.DOTALL)
    assert len(bodies) == html.count("<script") and not any(b.strip() for b in bodies)
    assert not re.search(r"\son[a-z]+=", html)  # no inline event handlers
    assert not re.search(r"(src|href)=\"(https?:)?//", html)
    for path in STATIC_ROOT.rglob("*"):
        if path.suffix in (".js", ".mjs", ".html") and "vendor" not in path.parts:
            assert "http://" not in path.read_text() and "https://" not in path.read_text(), path


@pytest.mark.parametrize(
    "target",
    [
        "/static/../server/web.py",
        "/static/%2e%2e/server/web.py",
        "/static/vendor/refresh.sh",
        "/static/vendor/README.md",
        "/static/vendor/xterm/LICENSE.xterm",
        "/static/.hidden.js",
        "/static//etc/passwd",
        "/static/nothing.js",
    ],
)
async def test_only_the_page_files_are_served(target: str) -> None:
    async with running_server(options()) as sidecar:
        assert sidecar.port is not None
        status, _, _ = await request(sidecar.port, target)
        assert status == 404


def test_the_policy_names_only_a_plain_host() -> None:
    assert "connect-src 'self' ws://[::1]:9" in content_security_policy("[::1]:9")
    assert "wss://h:1" in content_security_policy("h:1", tls=True)
    injected = content_security_policy("h; script-src *")
    assert "connect-src 'self';" in injected and "script-src *" not in injected


async def test_no_web_serves_no_page_but_the_probes() -> None:
    async with running_server(options(web=False)) as sidecar:
        assert sidecar.port is not None and sidecar.page_url is None
        assert (await request(sidecar.port, "/"))[0] == 404
        assert (await request(sidecar.port, "/healthz"))[0] == 200
        # …and the page's own origin is no longer accepted for a WebSocket.
        origin = {"Origin": f"http://127.0.0.1:{sidecar.port}"}
        line = await upgrade_status_line(sidecar.port, f"/?tkn={TOKEN}", origin)
        assert line.startswith(b"HTTP/1.1 403")


async def test_the_printed_urls_carry_the_tokens_in_the_fragment() -> None:
    async with running_server(options()) as sidecar:
        assert sidecar.page_url == f"http://127.0.0.1:{sidecar.port}/#tkn={TOKEN}"
        assert sidecar.read_only_url == f"http://127.0.0.1:{sidecar.port}/#ro={READ}"


async def test_the_read_only_token_is_random_unless_given_and_never_the_token() -> None:
    async with running_server(ServeOptions(port=0, token=TOKEN)) as sidecar:
        assert sidecar.read_token and sidecar.read_token != TOKEN
    refusals: list[str] = []
    try:
        async with running_server(ServeOptions(port=0, token=TOKEN, read_token=TOKEN)):
            pass
    except* ValueError as group:
        refusals = [str(e) for e in _leaves(group)]
    assert refusals == ["the read-only token must differ from the token"]


def _leaves(error: BaseException) -> list[BaseException]:
    if isinstance(error, BaseExceptionGroup):
        return [leaf for e in error.exceptions for leaf in _leaves(e)]
    return [error]


# -- the page's WebSocket: its own origin, the token as a subprotocol -----------------------------


async def test_the_pages_own_origin_is_accepted_and_no_other() -> None:
    async with running_server(options()) as sidecar:
        port = sidecar.port
        assert port is not None
        for origin in (f"http://127.0.0.1:{port}", f"http://localhost:{port}"):
            line = await upgrade_status_line(port, f"/?tkn={TOKEN}", {"Origin": origin})
            assert line.startswith(b"HTTP/1.1 101"), origin
        for origin in (
            f"http://evil.example:{port}",  # a rebound name: refused by Origin and by Host
            f"http://127.0.0.1:{port + 1 if port < 65535 else 1}",
            f"https://127.0.0.1:{port}",
            "null",
        ):
            line = await upgrade_status_line(port, f"/?tkn={TOKEN}", {"Origin": origin})
            assert line.startswith(b"HTTP/1.1 403"), origin
        # Its own origin does not lift the Host check (DNS rebinding).
        line = await upgrade_status_line(
            port,
            f"/?tkn={TOKEN}",
            {"Origin": f"http://127.0.0.1:{port}", "Host": f"evil.example:{port}"},
        )
        assert line.startswith(b"HTTP/1.1 403")


async def upgrade_head(port: int, protocols: str) -> str:
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    try:
        lines = [
            "GET / HTTP/1.1",
            f"Host: 127.0.0.1:{port}",
            "Upgrade: websocket",
            "Connection: Upgrade",
            "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==",
            "Sec-WebSocket-Version: 13",
            f"Sec-WebSocket-Protocol: {protocols}",
        ]
        await stream.send_all(("\r\n".join(lines) + "\r\n\r\n").encode())
        reply = b""
        with trio.fail_after(TIMEOUT):
            while b"\r\n\r\n" not in reply and (chunk := await stream.receive_some(4096)):
                reply += chunk
    finally:
        await stream.aclose()
    return reply.split(b"\r\n\r\n", 1)[0].decode("latin-1")


async def test_the_token_offered_as_a_subprotocol_admits_and_is_never_echoed() -> None:
    async with running_server(options()) as sidecar:
        assert sidecar.port is not None
        head = await upgrade_head(sidecar.port, f"ahp-terminals, ahp-terminals.bearer.{TOKEN}")
        assert head.startswith("HTTP/1.1 101")
        assert "sec-websocket-protocol: ahp-terminals" in head.lower()
        assert TOKEN not in head
        head = await upgrade_head(sidecar.port, "ahp-terminals, ahp-terminals.bearer.wrong")
        assert head.startswith("HTTP/1.1 403")


# -- read-only connections ----------------------------------------------------------------------


async def test_a_read_only_connection_watches_and_can_do_nothing_else() -> None:
    async with (
        running_server(options(), shell="/bin/sh") as sidecar,
        connect(sidecar.url, client_id="owner") as owner,
    ):
        await owner.create_terminal("ahp-terminal:/t")
        ro_url = sidecar.url.replace(f"tkn={TOKEN}", f"tkn={READ}")
        async with connect(ro_url, client_id="watcher") as watcher:
            record = sidecar.state.clients.get("watcher")
            assert record is not None and record.read_only
            await watcher.subscribe("ahp-terminal:/t")
            # Requests that change something: -32009.
            for method, params in (
                (
                    "createTerminal",
                    {
                        "channel": "ahp-terminal:/new",
                        "claim": {"kind": "client", "clientId": "watcher"},
                    },
                ),
                ("disposeTerminal", {"channel": "ahp-terminal:/t"}),
            ):
                with pytest.raises(RpcError) as refused:
                    await watcher.request(method, params)
                assert refused.value.code == -32009
            # Dispatches: rejected to the watcher, with the true claim after it.
            rejections: list[str] = []
            watcher.on_envelope(
                lambda e: rejections.append(e.rejectionReason) if e.rejectionReason else None
            )
            await watcher.dispatch("ahp-terminal:/t", TerminalInput(data="echo watcher-typed\n"))
            await owner.send_input("ahp-terminal:/t", "echo owner-typed\n")
            await owner.wait_for(
                lambda: "owner-typed\r\n" in owner.terminal_state("ahp-terminal:/t").text(),
                timeout=TIMEOUT,
            )
            await watcher.wait_for(
                lambda: "owner-typed\r\n" in watcher.terminal_state("ahp-terminal:/t").text(),
                timeout=TIMEOUT,
            )
            assert "watcher-typed" not in owner.terminal_state("ahp-terminal:/t").text()
            assert "ahp-terminal:/t" in sidecar.state.host
        # It may not take the id of a client with full access.
        with pytest.raises(RpcError) as taken:
            async with connect(ro_url, client_id="owner", auto_reconnect=False):
                pass
        assert taken.value.code == -32009


async def test_a_read_only_initialize_says_so() -> None:
    async with running_server(options()) as sidecar:
        ro_url = sidecar.url.replace(f"tkn={TOKEN}", f"tkn={READ}")
        async with peer(ro_url) as watcher, peer(sidecar.url) as full:
            assert (await watcher.initialize("w")).get("_meta") == {READ_ONLY_META: True}
            assert "_meta" not in await full.initialize("f")
            # A read-only reconnect may not resume a full client's record either.
        async with peer(ro_url) as again:
            answer = await again.call(
                "reconnect",
                {
                    "channel": "ahp-root://",
                    "clientId": "f",
                    "lastSeenServerSeq": 0,
                    "subscriptions": ["ahp-root://"],
                },
            )
            assert answer["error"]["code"] == -32009


# -- recordings -----------------------------------------------------------------------------------


CAST = b'{"version": 3, "term": {"cols": 80, "rows": 24}}\n[0.1, "o", "hi\\r\\n"]\n'


async def test_recordings_need_the_full_token_in_a_header(tmp_path: Path) -> None:
    (tmp_path / "one.cast").write_bytes(CAST)
    (tmp_path / "notes.txt").write_text("not a recording")
    async with running_server(options(record_dir=str(tmp_path))) as sidecar:
        port = sidecar.port
        assert port is not None
        for headers in ({}, {"Authorization": f"Bearer {READ}"}, {"Authorization": "Bearer x"}):
            assert (await request(port, "/api/recordings", headers))[0] == 401
            assert (await request(port, "/api/recordings/one.cast", headers))[0] == 401
        assert (await request(port, f"/api/recordings?tkn={TOKEN}"))[0] == 401  # not in URLs
        auth = {"Authorization": f"Bearer {TOKEN}"}
        status, headers, body = await request(port, "/api/recordings", auth)
        assert status == 200 and headers["content-type"] == "application/json"
        listing = orjson.loads(body)
        assert listing["enabled"] is True and listing["leftOff"] == 0
        assert [r["name"] for r in listing["recordings"]] == ["one.cast"]
        assert listing["recordings"][0]["size"] == len(CAST)
        status, headers, body = await request(port, "/api/recordings/one.cast", auth)
        assert status == 200 and body == CAST
        for bad in ("../one.cast", "notes.txt", ".one.cast", "missing.cast", "a%2fb.cast"):
            assert (await request(port, f"/api/recordings/{bad}", auth))[0] == 404, bad


async def test_wrong_tokens_over_http_are_logged_and_audited(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Probe K, finding 6: a wrong token at ``/api/access`` or the recordings is refused
    (401) and, like a refused upgrade, logged and audited (both rate-limited) with its
    reason and path, never the token. (Before: 3000 guesses a second left no trace.)"""
    caplog.set_level(logging.INFO, logger="ahp.server")
    log = tmp_path / "audit.log"
    guesses = [f"guess-{n}-zq" for n in range(5)]  # (7 refusals: under the audit's 10/s)
    async with running_server(options(record_dir=str(tmp_path), audit_log=str(log))) as sidecar:
        port = sidecar.port
        assert port is not None
        for guess in guesses:
            auth = {"Authorization": f"Bearer {guess}"}
            assert (await request(port, "/api/access", auth))[0] == 401
        assert (await request(port, "/api/recordings"))[0] == 401
        read = {"Authorization": f"Bearer {READ}"}
        assert (await request(port, "/api/recordings/one.cast?tkn=in-a-query-zq", read))[0] == 401
        assert (await request(port, "/api/access", read))[0] == 200  # (not a refusal)

        def refused(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
            return [x for x in lines if x["event"] == "connection" and not x["accepted"]]

        lines = await wait_lines([log], lambda ls: len(refused(ls)) >= len(guesses) + 2)
    found = refused(lines)
    assert {(x["path"], x["reason"]) for x in found} == {
        ("/api/access", "missing or wrong token"),
        ("/api/recordings", "missing or wrong token"),
        ("/api/recordings/one.cast", "the read-only token where the full token is needed"),
    }
    assert len(found) == len(guesses) + 2
    text = log.read_text() + caplog.text
    assert "-zq" not in text and READ not in text and TOKEN not in text
    notes = [r.getMessage() for r in caplog.records if "refused request" in r.getMessage()]
    assert notes and "missing or wrong token" in notes[0] and "/api/access" in notes[0]


async def test_a_link_or_a_fifo_named_like_a_recording_is_not_served(tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("not for the page")
    (tmp_path / "rec").mkdir()
    (tmp_path / "rec" / "link.cast").symlink_to(secret)
    os.mkfifo(tmp_path / "rec" / "fifo.cast")  # (nobody writes it: a blocking open would hang)
    async with running_server(options(record_dir=str(tmp_path / "rec"))) as sidecar:
        port = sidecar.port
        assert port is not None
        auth = {"Authorization": f"Bearer {TOKEN}"}
        for name in ("link.cast", "fifo.cast"):
            status, _, body = await request(port, f"/api/recordings/{name}", auth)
            assert status == 404 and b"not for the page" not in body, name
        listing = orjson.loads((await request(port, "/api/recordings", auth))[2])
        assert listing["recordings"] == []


async def test_recordings_past_their_bounds(tmp_path: Path) -> None:
    big = tmp_path / "big.cast"
    with big.open("wb") as f:
        f.truncate(MAX_RECORDING_BYTES + 1)  # sparse: no disk is spent
    for i in range(MAX_RECORDINGS_LISTED):
        (tmp_path / f"r{i:04}.cast").write_bytes(b"")
        os.utime(tmp_path / f"r{i:04}.cast", (1_000_000 + i, 1_000_000 + i))
    async with running_server(options(record_dir=str(tmp_path))) as sidecar:
        port = sidecar.port
        assert port is not None
        auth = {"Authorization": f"Bearer {TOKEN}"}
        status, _, body = await request(port, "/api/recordings/big.cast", auth)
        assert status == 413 and b"ahp-terminals play" in body
        listing = orjson.loads((await request(port, "/api/recordings", auth))[2])
        assert len(listing["recordings"]) == MAX_RECORDINGS_LISTED
        assert listing["leftOff"] == 1
        # The newest first: the big one (just written), then r0999 …; r0000 is left off.
        names = [r["name"] for r in listing["recordings"]]
        assert names[:2] == ["big.cast", "r0999.cast"] and "r0000.cast" not in names


async def test_a_listing_scans_a_bounded_number_of_entries(tmp_path: Path) -> None:
    for i in range(MAX_RECORDINGS_SCANNED + 1):
        (tmp_path / f"x{i}.txt").touch()  # (not recordings: only the scan counts them)
    async with running_server(options(record_dir=str(tmp_path))) as sidecar:
        assert sidecar.port is not None
        auth = {"Authorization": f"Bearer {TOKEN}"}
        listing = orjson.loads((await request(sidecar.port, "/api/recordings", auth))[2])
        assert listing["partial"] is True and listing["recordings"] == []


async def test_without_a_record_dir_the_listing_says_recording_is_off() -> None:
    async with running_server(options()) as sidecar:
        assert sidecar.port is not None
        auth = {"Authorization": f"Bearer {TOKEN}"}
        listing = orjson.loads((await request(sidecar.port, "/api/recordings", auth))[2])
        assert listing == {"enabled": False, "recordings": [], "leftOff": 0}
        assert (await request(sidecar.port, "/api/recordings/x.cast", auth))[0] == 404


async def test_serve_on_a_terminal_prints_the_three_urls_quoted_for_shells() -> None:
    """A person's ``serve``: stdout is a terminal, so the page's URLs are printed too, each
    quoted (a pipe gets the one bare line programs read: tests/test_cli.py)."""
    master, slave = os.openpty()
    env = {**os.environ, "PYTHONPATH": str(REPO), "AHP_TOKEN": TOKEN, "AHP_READ_TOKEN": READ}
    proc = await trio.lowlevel.open_process(
        [sys.executable, "-m", "ahp", "serve", "--port", "0", "--log-level", "warning"],
        stdout=slave,
        stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
        env=env,
        cwd=str(REPO),
    )
    os.close(slave)
    try:
        out = b""
        async with trio.lowlevel.FdStream(master) as stream:
            with trio.fail_after(TIMEOUT):
                while out.count(b"\n") < 3:
                    chunk = await stream.receive_some(4096)
                    assert chunk, out
                    out += chunk
            lines = out.decode().replace("\r", "").splitlines()
            port = re.search(r":(\d+)/", lines[0]).group(1)  # type: ignore[union-attr]
            assert lines == [
                f"connect:   'ws://127.0.0.1:{port}/?tkn={TOKEN}'",
                f"viewer:    'http://127.0.0.1:{port}/#tkn={TOKEN}'",
                f"read-only: 'http://127.0.0.1:{port}/#ro={READ}'",
            ]
            proc.send_signal(signal.SIGINT)
            with trio.fail_after(TIMEOUT):
                assert await proc.wait() == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def _open_serve(env: dict[str, str], stdout: int) -> trio.Process:
    """``serve`` on any free port, printing to ``stdout`` (a descriptor), with this
    environment but its ``AHP_`` variables replaced by ``env``."""
    full = {k: v for k, v in os.environ.items() if not k.startswith("AHP_")}
    return await trio.lowlevel.open_process(
        [sys.executable, "-m", "ahp", "serve", "--port", "0", "--log-level", "warning"],
        stdout=stdout,
        stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
        env={**full, "PYTHONPATH": str(REPO), **env},
        cwd=str(REPO),
    )


async def _serve_lines(
    env: dict[str, str], count: int, *, tty: bool, tmp_path: Path | None = None
) -> list[str]:
    """The first ``count`` lines ``serve`` prints with ``env``, stdout a pty, or a file
    in ``tmp_path`` (read back through a pipe-like loop)."""
    if not tty:
        assert tmp_path is not None
        return await _serve_into_file(env, count, tmp_path)
    master, slave = os.openpty()
    proc = await _open_serve(env, slave)
    os.close(slave)
    try:
        out = b""
        async with trio.lowlevel.FdStream(master) as stream:
            with trio.fail_after(TIMEOUT):
                while out.count(b"\n") < count:
                    chunk = await stream.receive_some(4096)
                    assert chunk, out
                    out += chunk
        return out.decode().replace("\r", "").splitlines()
    finally:
        proc.send_signal(signal.SIGINT)
        with trio.fail_after(TIMEOUT):
            await proc.wait()


async def _serve_into_file(env: dict[str, str], count: int, tmp_path: Path) -> list[str]:
    out = tmp_path / "serve.out"
    with open(out, "wb") as f:  # noqa: ASYNC230 (a local file, before the process runs)
        proc = await _open_serve(env, f.fileno())
    try:
        with trio.fail_after(TIMEOUT):
            while out.read_text().count("\n") < count:  # noqa: ASYNC110 (a file: polled)
                await trio.sleep(0.05)
        return out.read_text().splitlines()
    finally:
        proc.send_signal(signal.SIGINT)
        with trio.fail_after(TIMEOUT):
            await proc.wait()


async def test_serve_into_a_file_prints_the_page_urls_after_the_first_line(
    tmp_path: Path,
) -> None:
    # Probe P: under nohup or into a log file the read-only token was printed nowhere.
    # The first line stays the one programs read; the page's URLs follow, on stdout only,
    # and only into a file (a pipe, which a program reads, still gets the one line).
    lines = await _serve_lines(
        {"AHP_TOKEN": TOKEN, "AHP_READ_TOKEN": READ}, 3, tty=False, tmp_path=tmp_path
    )
    port = re.search(r":(\d+)/", lines[0]).group(1)  # type: ignore[union-attr]
    assert lines == [
        f"ws://127.0.0.1:{port}/?tkn={TOKEN}",
        f"viewer:    http://127.0.0.1:{port}/#tkn={TOKEN}",
        f"read-only: http://127.0.0.1:{port}/#ro={READ}",
    ]


async def test_serve_with_a_token_file_shows_a_person_the_read_only_url(tmp_path: Path) -> None:
    # Probe P: with $AHP_TOKEN_FILE the random read-only token was printed nowhere, and
    # nothing said to add the token to the bare viewer URL.
    secret = tmp_path / "token"
    secret.write_text(TOKEN)
    lines = await _serve_lines({"AHP_TOKEN_FILE": str(secret)}, 3, tty=True)
    port = re.search(r":(\d+)/", lines[0]).group(1)  # type: ignore[union-attr]
    assert lines[:2] == [
        f"connect:   ws://127.0.0.1:{port}/",
        f"viewer:    http://127.0.0.1:{port}/  (add #tkn= and the token in $AHP_TOKEN_FILE)",
    ]
    assert re.fullmatch(rf"read-only: 'http://127\.0\.0\.1:{port}/#ro=[\w-]+'", lines[2])
    assert TOKEN not in "".join(lines)
