"""Plain HTTP on the serve port: the pure request/answer layer and a real server's probes."""

from __future__ import annotations

import io
from pathlib import Path

import trio
from hypothesis import given
from hypothesis import strategies as st

from ahp.server.download import Downloads, FileBody
from ahp.server.http import (
    MAX_BODY,
    HttpResponse,
    PlainRequest,
    Routes,
    health_routes,
    plain_request,
)
from tests.helpers import TIMEOUT
from tests.wire import running_server, upgrade_status_line


def test_a_get_without_upgrade_is_a_plain_request() -> None:
    req = plain_request(b"GET /healthz?x=1 HTTP/1.1\r\nHost: h:1\r\nX-A: b\r\n\r\n", "peer")
    assert req is not None
    assert (req.method, req.path, req.host, req.header(b"x-a")) == ("GET", "/healthz", "h:1", "b")


def test_an_upgrade_or_garbage_is_not_a_plain_request() -> None:
    upgrade = b"GET / HTTP/1.1\r\nHost: h\r\nUpgrade: WebSocket\r\nConnection: Upgrade\r\n\r\n"
    assert plain_request(upgrade, "peer") is None
    assert plain_request(b"\x00\x01 nonsense\r\n\r\n", "peer") is None


@given(st.binary(max_size=300))
def test_plain_request_never_raises(data: bytes) -> None:
    plain_request(data + b"\r\n\r\n", "peer")


def test_an_answer_carries_the_base_headers_and_its_length() -> None:
    raw = HttpResponse.text(200, "ok").encode()
    head, body = raw.split(b"\r\n\r\n", 1)
    assert head.startswith(b"HTTP/1.1 200 OK\r\n")
    for header in (b"x-content-type-options: nosniff", b"connection: close", b"content-length: 3"):
        assert header in head
    assert body == b"ok\n"
    assert HttpResponse.text(200, "ok").encode(head_only=True) == head + b"\r\n\r\n"


def test_a_streamed_answer_encodes_its_head_with_the_file_length(tmp_path: Path) -> None:
    """A streamed body is never in the encoded answer (its sender sends it); its length,
    not MAX_BODY, is the Content-Length; closing it gives its place back once."""
    (tmp_path / "f").write_bytes(b"0123456789")
    downloads = Downloads(limit=1)
    assert downloads.take() and not downloads.take()
    body = FileBody(io.FileIO(tmp_path / "f", "rb"), MAX_BODY + 1, release=downloads.give_back)
    try:
        raw = HttpResponse(200, streamed=body).encode()
        assert raw.endswith(b"\r\n\r\n") and raw.startswith(b"HTTP/1.1 200 OK\r\n")
        assert f"content-length: {MAX_BODY + 1}".encode() in raw
    finally:
        body.close()
        body.close()
    assert downloads.active == 0


def test_a_route_header_replaces_the_base_one() -> None:
    raw = HttpResponse(200, b"x", headers=(("cache-control", "max-age=60"),)).encode()
    assert b"cache-control: max-age=60" in raw
    assert b"no-store" not in raw


async def test_routes_prefer_exact_then_longest_prefix_and_refuse_other_methods() -> None:
    def fixed(text: str):  # type: ignore[no-untyped-def]
        async def handler(request: PlainRequest) -> HttpResponse:
            return HttpResponse.text(200, text)

        return handler

    routes = Routes()
    routes.add("/a/", fixed("prefix-a"))
    routes.add("/a/b/", fixed("prefix-ab"))
    routes.add("/a/x", fixed("exact"))

    async def body(method: str, target: str) -> tuple[int, bytes]:
        answer = await routes.answer(PlainRequest(method, target, "h", (), "peer"))
        return answer.status, answer.body

    assert await body("GET", "/a/x") == (200, b"exact\n")
    assert await body("GET", "/a/b/c") == (200, b"prefix-ab\n")
    assert await body("GET", "/a/q") == (200, b"prefix-a\n")
    assert (await body("GET", "/nowhere"))[0] == 404
    assert (await body("POST", "/a/x"))[0] == 405


async def test_readyz_follows_the_ready_callable() -> None:
    ready = True
    routes = health_routes(lambda: ready)
    request = PlainRequest("GET", "/readyz", "h", (), "peer")
    assert (await routes.answer(request)).status == 200
    ready = False
    answer = await routes.answer(request)
    assert (answer.status, answer.body) == (503, b"draining\n")


async def test_readyz_says_unable_while_a_new_terminal_cannot_start(tmp_path: Path) -> None:
    """Probe M (finding 3): ``/readyz`` said ``ready`` while every ``createTerminal``
    failed (the directory terminals start in, or their shell, was gone). It answers
    503 ``unable`` while so, and ``ready`` again once they are back."""
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    shell = tmp_path / "shell"
    shell.symlink_to("/bin/sh")
    async with running_server(cwd=str(workspace), shell=str(shell)) as sidecar:
        port = sidecar.port
        assert port is not None
        assert (await _get(port, "/readyz")).endswith(b"\r\n\r\nready\n")
        workspace.rmdir()
        unable = await _get(port, "/readyz")
        assert unable.startswith(b"HTTP/1.1 503 ") and unable.endswith(b"\r\n\r\nunable\n")
        assert (await _get(port, "/healthz")).startswith(b"HTTP/1.1 200 ")  # (alive)
        workspace.mkdir()
        assert (await _get(port, "/readyz")).endswith(b"\r\n\r\nready\n")
        shell.unlink()
        assert (await _get(port, "/readyz")).endswith(b"\r\n\r\nunable\n")


async def _get(port: int, target: str, host: str | None = None, method: str = "GET") -> bytes:
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    try:
        lines = [f"{method} {target} HTTP/1.1", f"Host: {host or f'127.0.0.1:{port}'}"]
        await stream.send_all(("\r\n".join(lines) + "\r\n\r\n").encode())
        reply = b""
        with trio.fail_after(TIMEOUT):
            while chunk := await stream.receive_some(65536):
                reply += chunk
    finally:
        await stream.aclose()
    return reply


async def test_a_real_server_answers_probes_without_a_token_and_still_upgrades() -> None:
    async with running_server() as sidecar:
        port = sidecar.port
        assert port is not None
        healthz = await _get(port, "/healthz")
        assert healthz.startswith(b"HTTP/1.1 200 ")
        assert healthz.endswith(b"\r\n\r\nok\n")
        assert (await _get(port, "/readyz")).endswith(b"\r\n\r\nready\n")
        assert (await _get(port, "/nothing-here")).startswith(b"HTTP/1.1 404 ")
        assert (await _get(port, "/healthz", method="DELETE")).startswith(b"HTTP/1.1 405 ")
        head = await _get(port, "/healthz", method="HEAD")
        assert head.startswith(b"HTTP/1.1 200 ")
        assert head.endswith(b"\r\n\r\n")
        # DNS rebinding: a loopback server answers no other Host, plain or upgrade.
        assert (await _get(port, "/healthz", host="evil.example")).startswith(b"HTTP/1.1 403 ")
        sidecar.state.draining = True
        assert (await _get(port, "/readyz")).startswith(b"HTTP/1.1 503 ")
        assert (await _get(port, "/healthz")).startswith(b"HTTP/1.1 200 ")
        # The upgrade path is unchanged.
        status = await upgrade_status_line(port, f"/?tkn={sidecar.token}", {})
        assert status.startswith(b"HTTP/1.1 101")
