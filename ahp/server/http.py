"""Plain HTTP ``GET`` on the serve port: health probes and pages, beside the upgrade.

Why: the same port that upgrades to WebSocket answers a few plain requests —
``/healthz`` and ``/readyz`` for the engines that schedule sidecars (Kubernetes,
Nomad, Compose health checks), and the viewer page — so that a sidecar needs one
port, one Host check and one listener. A request without ``Upgrade: websocket``
is answered here and the connection closed; the upgrade path is unchanged.

The pure part (:func:`plain_request`, :class:`HttpResponse`, :meth:`HttpResponse.encode`,
:class:`Routes`) does no I/O. Buffering: the request head is the one
:func:`ahp.server.upgrade.read_upgrade` already bounds (h11's 16 KiB); a request
body is never read (``GET``/``HEAD`` only; anything else is 405). An answer's body
is in memory (at most :data:`MAX_BODY`), or a file streamed after the head
(:attr:`HttpResponse.streamed`, :mod:`ahp.server.download`: one chunk in memory at a
time, whatever the file's size). Every answer
closes its connection (``Connection: close``): a probe or a page load opens a
new one, so no idle keep-alive connection holds a place.

Security: every answer carries ``X-Content-Type-Options: nosniff``,
``Referrer-Policy: no-referrer`` and ``Cache-Control: no-store`` unless the
route sets its own; the Host check (DNS rebinding) applies to plain requests as
to upgrades (:func:`ahp.server.gate.check_host`); the token is never
required by ``/healthz`` and ``/readyz``, which reveal nothing but a word.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Final
from urllib.parse import urlsplit

import attrs
import h11

if TYPE_CHECKING:
    from ahp.server.download import FileBody

__all__ = [
    "MAX_BODY",
    "HttpResponse",
    "PlainRequest",
    "Routes",
    "health_routes",
    "plain_request",
]

#: Largest body a route may answer with from memory (a page asset, a listing); larger is
#: 500. A streamed body (:attr:`HttpResponse.streamed`: a recording) is not held whole.
MAX_BODY: Final = 64 * 1024 * 1024
#: Headers every answer carries unless its route sets the same name.
BASE_HEADERS: Final[tuple[tuple[str, str], ...]] = (
    ("x-content-type-options", "nosniff"),
    ("referrer-policy", "no-referrer"),
    ("cache-control", "no-store"),
)
_REASONS: Final = {
    200: "OK",
    204: "No Content",
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    500: "Internal Server Error",
    503: "Service Unavailable",
}


@attrs.frozen
class PlainRequest:
    """A complete HTTP request head that asks for no WebSocket upgrade."""

    method: str
    #: The request target as sent (path and query; a fragment never reaches a server).
    target: str
    host: str | None
    #: Lower-cased names, as sent.
    headers: tuple[tuple[bytes, bytes], ...]
    remote: str

    @property
    def path(self) -> str:
        return urlsplit(self.target).path or "/"

    def header(self, name: bytes) -> str | None:
        for key, value in self.headers:
            if key == name:
                return value.decode("latin-1")
        return None


def plain_request(head: bytes, remote: str) -> PlainRequest | None:
    """The request in ``head`` (bytes up to and including the blank line) if it is a
    well-formed HTTP/1.x request without ``Upgrade: websocket``; None otherwise (an
    upgrade, or bytes h11 cannot parse: the upgrade path answers those)."""
    conn = h11.Connection(h11.SERVER)
    try:
        conn.receive_data(head)
        event = conn.next_event()
    except h11.RemoteProtocolError:
        return None
    if not isinstance(event, h11.Request):
        return None
    headers = tuple((bytes(k), bytes(v)) for k, v in event.headers)
    for key, value in headers:
        if key == b"upgrade" and b"websocket" in value.lower():
            return None
    host = next((v.decode("latin-1") for k, v in headers if k == b"host"), None)
    return PlainRequest(
        method=event.method.decode("ascii", "replace"),
        target=event.target.decode("latin-1"),
        host=host,
        headers=headers,
        remote=remote,
    )


@attrs.frozen
class HttpResponse:
    status: int
    body: bytes = b""
    content_type: str = "text/plain; charset=utf-8"
    #: Extra headers (lower-case names); a name given here replaces the base header.
    headers: tuple[tuple[str, str], ...] = ()
    #: A body sent from a file after the head, instead of ``body`` (its length is the
    #: ``Content-Length``). The answer owns it: whoever takes the answer closes it
    #: (:meth:`FileBody.close`), sent or not (:func:`ahp.server.plain.answer_plain`).
    streamed: FileBody | None = None
    #: Why the request's token was refused (a 401 of a route that needs one), for the
    #: rate-limited log and the audit log, like a refused upgrade's reason
    #: (:func:`ahp.server.plain.answer_plain`); None for every other answer.
    refused: str | None = None

    @classmethod
    def text(cls, status: int, text: str) -> HttpResponse:
        return cls(status, (text + "\n").encode())

    def encode(self, *, head_only: bool = False) -> bytes:
        """The whole answer: status line, headers, and the body unless ``head_only``; the
        head only for a streamed body (:attr:`streamed` sends it)."""
        head, body = self.parts(head_only=head_only)
        return head + body if body else head

    def parts(self, *, head_only: bool = False) -> tuple[bytes, bytes]:
        """:meth:`encode`'s answer as (head, body), the body not copied (an asset's is
        the cached file: sent as it is); the body is ``b""`` when :meth:`encode` would
        send none."""
        body = self.body
        status = self.status
        length = len(body)
        if self.streamed is not None:
            length, head_only = self.streamed.length, True
        elif len(body) > MAX_BODY:
            status, body = 500, b"answer too large\n"
            length = len(body)
        own = {name for name, _ in self.headers}
        lines = [f"HTTP/1.1 {status} {_REASONS.get(status, 'Unknown')}"]
        lines += [f"{n}: {v}" for n, v in BASE_HEADERS if n not in own]
        lines += [f"{n}: {v}" for n, v in self.headers]
        if "content-type" not in own:
            lines.append(f"content-type: {self.content_type}")
        lines += [f"content-length: {length}", "connection: close", "", ""]
        head = "\r\n".join(lines).encode("latin-1")
        return head, b"" if head_only else body


Handler = Callable[[PlainRequest], Awaitable[HttpResponse]]


@attrs.define
class Routes:
    """Path → handler. Exact paths, and prefixes ending in ``/`` (the longest wins)."""

    exact: dict[str, Handler] = attrs.field(factory=dict)
    prefixes: dict[str, Handler] = attrs.field(factory=dict)

    def add(self, path: str, handler: Handler) -> None:
        if path.endswith("/") and path != "/":
            self.prefixes[path] = handler
        else:
            self.exact[path] = handler

    def update(self, other: Routes) -> None:
        self.exact.update(other.exact)
        self.prefixes.update(other.prefixes)

    def find(self, path: str) -> Handler | None:
        handler = self.exact.get(path)
        if handler is not None:
            return handler
        for prefix in sorted(self.prefixes, key=len, reverse=True):
            if path.startswith(prefix):
                return self.prefixes[prefix]
        return None

    async def answer(self, request: PlainRequest) -> HttpResponse:
        """The route's answer; 405 for a method other than GET/HEAD, 404 for no route."""
        if request.method not in ("GET", "HEAD"):
            return HttpResponse(
                405, b"only GET and HEAD are served here\n", headers=(("allow", "GET, HEAD"),)
            )
        handler = self.find(request.path)
        if handler is None:
            return HttpResponse.text(404, "not found")
        return await handler(request)


def health_routes(
    ready: Callable[[], bool],
    extra: Mapping[str, Handler] | None = None,
    *,
    able: Callable[[], bool] = lambda: True,
) -> Routes:
    """``/healthz`` (the process answers: 200 ``ok``) and ``/readyz`` (200 ``ready`` while
    ``ready()`` and ``able()``; else 503 ``draining`` when not ``ready()``, 503 ``unable``
    when not ``able()``: a new terminal cannot start, its directory or its shell is
    gone). Neither needs the token; neither says more."""

    async def healthz(request: PlainRequest) -> HttpResponse:
        return HttpResponse.text(200, "ok")

    async def readyz(request: PlainRequest) -> HttpResponse:
        if not ready():
            return HttpResponse.text(503, "draining")
        if not able():
            return HttpResponse.text(503, "unable")
        return HttpResponse.text(200, "ready")

    routes = Routes()
    routes.add("/healthz", healthz)
    routes.add("/readyz", readyz)
    for path, handler in (extra or {}).items():
        routes.add(path, handler)
    return routes
