"""The viewer page's routes: the page, its assets, and the recordings of the server.

Why here: the page is served by ``serve`` itself, on the port of the WebSocket (plain
``GET`` before any upgrade, :mod:`ahp.server.http`), so a person needs nothing but a
browser and the URL ``serve`` prints. Its assets are files of the package
(``ahp/web/static``, vendored libraries included, see ``vendor/README.md`` there): no
CDN, works offline.

Security: the page's URL carries the token in its fragment, which a browser never
sends; the page hands it to its WebSocket as a subprotocol offer (see
:data:`BEARER_PROTOCOL_PREFIX`), never in a request line, a Referer or a log. Every
answer here carries a strict Content-Security-Policy (:func:`content_security_policy`:
scripts, styles, images and connections from this origin only, the page's own
WebSocket named explicitly since ``'self'`` does not cover ``ws:`` in every browser, no
inline script, no framing), ``Cross-Origin-Resource-Policy: same-origin`` and the base
headers of :mod:`ahp.server.http` (``nosniff``, ``no-referrer``, ``no-store``). The
recordings (``/api/recordings``) need the full token in an ``Authorization: Bearer``
header: no URL ever carries it, and a cross-origin page cannot send that header
without a CORS preflight, which this server never grants. A request whose token is
refused (401: ``/api/access``, the recordings) says why (:attr:`HttpResponse.refused
<ahp.server.http.HttpResponse.refused>`): it is logged (rate-limited) and audited as a
refused upgrade is, so guessing tokens over HTTP is as visible as over WebSocket.

Buffering and ownership: the assets are read once, on first request, and kept (they are
the package's own files, about 0.6 MB in all, bounded by :data:`MAX_ASSET_BYTES`); a
recording is never read whole: its answer owns the open file and streams it
(:class:`~ahp.server.download.FileBody`: one :data:`~ahp.server.download.DOWNLOAD_CHUNK`
in memory at a time, the file's size at open time as ``Content-Length``, as long as the
client keeps taking it), at most :data:`~ahp.server.download.MAX_DOWNLOADS` at once per
server (past it 503); a recording over :data:`MAX_RECORDING_BYTES` is listed but refused
with 413 (the page would load it whole). The listing is bounded by
:data:`MAX_RECORDINGS_LISTED`. The file reads run in Trio's worker threads
(``trio.Path``, ``trio.to_thread``), so a slow disk delays only the request that reads it.
"""

from __future__ import annotations

import hmac
import io
import os
import re
import stat
from pathlib import Path
from typing import Final

import orjson
import trio

from ahp.server.download import Downloads, FileBody
from ahp.server.http import HttpResponse, PlainRequest, Routes

__all__ = [
    "BEARER_PROTOCOL_PREFIX",
    "MAX_ASSET_BYTES",
    "MAX_RECORDINGS_LISTED",
    "MAX_RECORDINGS_SCANNED",
    "MAX_RECORDING_BYTES",
    "PAGE_PROTOCOL",
    "STATIC_ROOT",
    "content_security_policy",
    "web_routes",
]

#: Where the page's files are (package data: part of the wheel).
STATIC_ROOT: Final = Path(__file__).resolve().parent.parent / "web" / "static"
#: The subprotocol the page asks for; the server answers with it (a browser fails a
#: connection whose offered subprotocols get no answer).
PAGE_PROTOCOL: Final = "ahp-terminals"
#: A subprotocol offer ``ahp-terminals.bearer.<token>`` carries the token: the one header
#: a browser's ``WebSocket`` lets a page set. Never chosen as the answer (the token would
#: be echoed back).
BEARER_PROTOCOL_PREFIX: Final = "ahp-terminals.bearer."
#: Largest asset file served (the biggest, xterm.js, is about 340 KB); larger is 500.
MAX_ASSET_BYTES: Final = 4 * 1024 * 1024
#: Recordings listed at most (the newest first); the listing says when it left some off.
MAX_RECORDINGS_LISTED: Final = 1000
#: Directory entries looked at per listing at most (a directory of a million files costs
#: one bounded scan); past it the listing says it is partial.
MAX_RECORDINGS_SCANNED: Final = 10 * MAX_RECORDINGS_LISTED
#: Largest recording served to the page, which loads it whole (asciinema-player); larger
#: is 413. The server streams it (:mod:`ahp.server.download`): this bounds no memory here.
MAX_RECORDING_BYTES: Final = 64 * 1024 * 1024
#: A recording's name as the page may ask for it: a plain file name, no path.
_RECORDING_NAME: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,200}\.cast")
#: Characters of a ``Host`` header copied into the policy (anything else: left out).
_HOST_SAFE: Final = re.compile(r"[A-Za-z0-9.\-\[\]:]{1,300}")
_TYPES: Final = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".mjs": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
}


def content_security_policy(host: str | None, *, tls: bool = False) -> str:
    """The page's policy. ``connect-src`` names the page's own WebSocket origin besides
    ``'self'`` (CSP 3 lets ``'self'`` match ``ws:`` of the same host, older engines do
    not). ``'wasm-unsafe-eval'`` lets asciinema-player compile its WebAssembly terminal;
    it allows no JavaScript ``eval``. Styles allow ``'unsafe-inline'``: xterm.js's DOM
    renderer writes its colours into ``<style>`` elements it creates (no script can be
    injected through a style)."""
    connect = ["'self'"]
    if host is not None and _HOST_SAFE.fullmatch(host):
        connect.append(f"{'wss' if tls else 'ws'}://{host}")
    return "; ".join(
        (
            "default-src 'none'",
            "script-src 'self' 'wasm-unsafe-eval'",
            "style-src 'self' 'unsafe-inline'",
            "img-src 'self' data:",
            "font-src 'self'",
            f"connect-src {' '.join(connect)}",
            "base-uri 'none'",
            "form-action 'none'",
            "frame-ancestors 'none'",
        )
    )


def _page_headers(request: PlainRequest, tls: bool) -> tuple[tuple[str, str], ...]:
    return (
        ("content-security-policy", content_security_policy(request.host, tls=tls)),
        ("cross-origin-resource-policy", "same-origin"),
        ("cross-origin-opener-policy", "same-origin"),
        ("x-frame-options", "DENY"),
    )


class _Assets:
    """The package's page files, read on first use and kept (see the module docstring)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._cache: dict[str, bytes] = {}

    async def get(self, relative: str) -> bytes | None:
        """The file at ``relative`` under the root, or None (no such file, not a type the
        page uses, or a path that leaves the root)."""
        cached = self._cache.get(relative)
        if cached is not None:
            return cached
        parts = relative.split("/")
        if any(p in ("", ".", "..") or p.startswith(".") for p in parts):
            return None
        path = self.root.joinpath(*parts)
        if path.suffix not in _TYPES:
            return None
        target = trio.Path(path)
        try:
            if not await target.is_file() or (await target.stat()).st_size > MAX_ASSET_BYTES:
                return None
            data = await target.read_bytes()
        except OSError:
            return None
        self._cache[relative] = data
        return data


#: Why a request's token is refused (the reason of a refused upgrade, logged and audited
#: the same way: :attr:`HttpResponse.refused`).
WRONG_TOKEN: Final = "missing or wrong token"
#: ... and why the read-only token is refused where the full one is needed.
READ_ONLY_TOKEN: Final = "the read-only token where the full token is needed"


def _offered(request: PlainRequest) -> bytes:
    """The token of the request's ``Authorization: Bearer``, or b"" (none)."""
    auth = request.header(b"authorization") or ""
    return auth[7:].strip().encode() if auth.lower().startswith("bearer ") else b""


def _authorized(request: PlainRequest, token: str | None) -> bool:
    if token is None:
        return True
    return hmac.compare_digest(_offered(request), token.encode())


def web_routes(
    *,
    token: str | None,
    read_token: str | None = None,
    record_dir: str | None = None,
    tls: bool = False,
    downloads: Downloads | None = None,
) -> Routes:
    """``/`` (the page), ``/static/…`` (its files), ``/api/recordings[/NAME]`` and
    ``/api/access``.

    Args:
        token: the full access token; the recordings need it (``Authorization: Bearer``).
        read_token: the read-only token, if any (``/api/access`` tells it apart).
        record_dir: the directory of ``serve --record`` (None: no recordings listed).
        tls: whether the page is served over ``https`` (its WebSocket is then ``wss``).
        downloads: the places of the recordings being sent (None: a new
            :class:`~ahp.server.download.Downloads` of ``MAX_DOWNLOADS``).
    """
    assets = _Assets(STATIC_ROOT)
    sending = downloads if downloads is not None else Downloads()

    async def page(request: PlainRequest) -> HttpResponse:
        body = await assets.get("index.html")
        if body is None:
            return HttpResponse.text(500, "the viewer page is missing from this installation")
        return HttpResponse(
            200, body, content_type=_TYPES[".html"], headers=_page_headers(request, tls)
        )

    async def static(request: PlainRequest) -> HttpResponse:
        relative = request.path.removeprefix("/static/")
        body = await assets.get(relative)
        if body is None:
            return HttpResponse.text(404, "not found")
        return HttpResponse(
            200,
            body,
            content_type=_TYPES[Path(relative).suffix],
            headers=_page_headers(request, tls),
        )

    def unauthorized(request: PlainRequest) -> HttpResponse:
        # (Both comparisons always run, as for an upgrade.)
        read = read_token is not None and hmac.compare_digest(
            _offered(request), read_token.encode()
        )
        return HttpResponse(
            401,
            b"the recordings need the token (Authorization: Bearer)\n",
            headers=(*_page_headers(request, tls), ("www-authenticate", "Bearer")),
            refused=READ_ONLY_TOKEN if read else WRONG_TOKEN,
        )

    async def recordings(request: PlainRequest) -> HttpResponse:
        if not _authorized(request, token):
            return unauthorized(request)
        listing: list[dict[str, object]] = []
        left_off = 0
        partial = False
        if record_dir is not None:
            entries, partial = await trio.to_thread.run_sync(_list_recordings, record_dir)
            entries.sort(key=lambda e: (-float(e["modified"]), str(e["name"])))  # type: ignore[arg-type]
            listing = entries[:MAX_RECORDINGS_LISTED]
            left_off = len(entries) - len(listing)
        answer: dict[str, object] = {
            "enabled": record_dir is not None,
            "recordings": listing,
            "leftOff": left_off,
        }
        if partial:
            answer["partial"] = True  # more entries than MAX_RECORDINGS_SCANNED
        body = orjson.dumps(answer)
        return HttpResponse(
            200, body, content_type="application/json", headers=_page_headers(request, tls)
        )

    async def recording(request: PlainRequest) -> HttpResponse:
        if not _authorized(request, token):
            return unauthorized(request)
        name = request.path.removeprefix("/api/recordings/")
        if record_dir is None or not _RECORDING_NAME.fullmatch(name):
            return HttpResponse.text(404, "no such recording")
        if not sending.take():
            return HttpResponse.text(
                503, f"{sending.limit} recordings are being sent already: try again later"
            )
        try:
            outcome = await trio.to_thread.run_sync(_open_recording, os.path.join(record_dir, name))
        except BaseException:
            sending.give_back()
            raise
        if isinstance(outcome, HttpResponse):
            sending.give_back()
            return outcome
        file, size = outcome
        # (No checkpoint from the open to the answer: its taker closes the file.)
        return HttpResponse(
            200,
            content_type="application/x-asciicast; charset=utf-8",
            headers=_page_headers(request, tls),
            streamed=FileBody(file, size, release=sending.give_back),
        )

    async def access(request: PlainRequest) -> HttpResponse:
        """Which access the page's token gives: ``{"access": "full" | "read-only"}``, or
        401. A browser hides why a WebSocket upgrade failed (a 403 reads as a lost
        connection): the page asks here to say its token was refused. It tells nothing
        an upgrade does not (its 403 or 101); compared in constant time."""
        if token is None or _authorized(request, token):
            kind = "full"
        elif read_token is not None and _authorized(request, read_token):
            kind = "read-only"
        else:
            return HttpResponse(
                401,
                b"this token is not accepted by this server\n",
                headers=(*_page_headers(request, tls), ("www-authenticate", "Bearer")),
                refused=WRONG_TOKEN,
            )
        return HttpResponse(
            200,
            orjson.dumps({"access": kind}),
            content_type="application/json",
            headers=_page_headers(request, tls),
        )

    routes = Routes()
    routes.add("/api/access", access)
    routes.add("/", page)
    routes.add("/index.html", page)
    routes.add("/static/", static)
    routes.add("/api/recordings", recordings)
    routes.add("/api/recordings/", recording)
    return routes


def _open_recording(path: str) -> tuple[io.FileIO, int] | HttpResponse:
    """The recording at ``path`` opened, with its size now (what its answer sends), or
    the answer that refuses it: not a regular file (a symbolic link, a FIFO: opened
    without following links, without blocking), missing, or larger than
    :data:`MAX_RECORDING_BYTES`. Runs in a worker thread; the caller owns the file."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return HttpResponse.text(404, "no such recording")
    try:
        info = os.fstat(fd)
    except BaseException:
        os.close(fd)
        raise
    if not stat.S_ISREG(info.st_mode):
        # (Checked before the file object takes the descriptor: io.FileIO refuses a
        # directory without owning it, and a 500 leaked one fd a request.)
        os.close(fd)
        return HttpResponse.text(404, "no such recording")
    if info.st_size > MAX_RECORDING_BYTES:
        os.close(fd)
        return HttpResponse.text(
            413,
            f"recording larger than {MAX_RECORDING_BYTES} bytes: play it with ahp-terminals play",
        )
    return io.FileIO(fd, "rb", closefd=True), info.st_size


def _list_recordings(directory: str) -> tuple[list[dict[str, object]], bool]:
    """``*.cast`` files directly in ``directory`` (name, size, modification time in
    seconds), from at most :data:`MAX_RECORDINGS_SCANNED` entries, and whether there
    were more; an unreadable directory lists none. Runs in a worker thread."""
    found: list[dict[str, object]] = []
    try:
        with os.scandir(directory) as entries:
            for scanned, entry in enumerate(entries):
                if scanned >= MAX_RECORDINGS_SCANNED:
                    return found, True
                if not _RECORDING_NAME.fullmatch(entry.name):
                    continue
                try:
                    if not entry.is_file(follow_symlinks=False):
                        continue
                    info = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                found.append({"name": entry.name, "size": info.st_size, "modified": info.st_mtime})
    except OSError:
        pass
    return found, False
