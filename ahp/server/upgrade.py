"""The WebSocket upgrade: read the HTTP request, check it, answer a refusal.

Why a module of its own: before a connection is a WebSocket it is an HTTP request
from an unauthenticated peer, and everything about it is bounded and checked here
(the whole head within :data:`HANDSHAKE_TIMEOUT`, at most :data:`MAX_HEAD` bytes, every
value the checks read printable ASCII) before :mod:`ahp.server.websocket` decides
whether to accept it and :func:`ahp.server.wsconn.accept` makes it a
:class:`~ahp.server.wsconn.ServerWebSocket`. wsproto parses the request; a request that
asks for no upgrade (a health probe, a page) is handed back as a
:class:`~ahp.server.http.PlainRequest`.

Ownership: the caller owns the stream; this module only reads from it and writes an
answer to it. Buffering: the bytes read until the head is complete (h11 refuses a head
over 16 KiB, so at most that plus one read). Cancellation: :func:`read_upgrade` has its
own deadline and returns None when it passes.
"""

from __future__ import annotations

import base64
import contextlib
import logging
import re
from collections.abc import Callable
from typing import Any, Final
from urllib.parse import urlsplit

import attrs
import trio
from wsproto import ConnectionType, WSConnection
from wsproto.events import RejectConnection, RejectData, Request
from wsproto.utilities import RemoteProtocolError

from ahp.server.http import PlainRequest, plain_request
from ahp.server.wsconn import RECEIVE_SIZE

__all__ = ["HANDSHAKE_TIMEOUT", "MAX_HEAD", "UpgradeRequest", "read_upgrade", "reject"]

log = logging.getLogger("ahp.server")

#: Longest request head looked at as a plain HTTP request (h11's own bound).
MAX_HEAD: Final = 16 * 1024
#: Seconds a peer gets to send its whole upgrade request.
HANDSHAKE_TIMEOUT: Final = 10.0
#: What an upgrade's target and the header values the checks read may contain.
_PRINTABLE_ASCII: Final = re.compile(r"[\x20-\x7e]*")


@attrs.frozen
class UpgradeRequest:
    """What the checks before accepting look at: the request line and headers."""

    target: str
    host: str | None
    #: Lower-cased names, as sent (``Host`` and ``Sec-WebSocket-*`` are not included).
    headers: tuple[tuple[bytes, bytes], ...]
    remote: str
    #: ``Sec-WebSocket-Protocol`` offers, in the client's order.
    subprotocols: tuple[str, ...] = ()
    #: Bytes that followed the request head in the same reads: frames a client sent
    #: before the answer (RFC 6455 says it must wait; wsproto's server drops them).
    #: :func:`accept` hands them to the connection, which parses them first.
    early_data: bytes = b""

    def header(self, name: bytes) -> str | None:
        for key, value in self.headers:
            if key == name:
                return value.decode("latin-1")
        return None


def _remote(stream: trio.abc.Stream) -> str:
    transport = getattr(stream, "transport_stream", stream)  # under TLS
    sock = getattr(transport, "socket", None)
    try:
        peer = sock.getpeername() if sock is not None else None
    except OSError:
        return "<disconnected peer>"
    if isinstance(peer, tuple):
        return f"{peer[0]}:{peer[1]}"
    return "<unix socket peer>" if peer is not None else "<peer>"


def _bad_request(why: str) -> bytes:
    """A complete ``400`` answer (built by hand: after a parse failure wsproto's state
    is not to be trusted)."""
    body = f"bad upgrade request: {why}\n".encode("ascii", "replace")
    head = (
        "HTTP/1.1 400 Bad Request\r\n"
        "content-type: text/plain; charset=utf-8\r\n"
        f"content-length: {len(body)}\r\n"
        "connection: close\r\n\r\n"
    )
    return head.encode("ascii") + body


def _check_request(event: Request) -> str | None:
    """Why an upgrade request wsproto accepted is still unusable, or None.

    Everything the checks before accepting read must be printable ASCII (a
    ``Host`` or a subprotocol with other bytes names nothing we could match) and
    the target must split as a URL (``//[x/`` does not).
    """
    texts = [("target", event.target), ("Host", event.host)]
    texts += [("Sec-WebSocket-Protocol", p) for p in event.subprotocols]
    texts += [(k.decode("latin-1"), v.decode("latin-1")) for k, v in event.extra_headers]
    for name, text in texts:
        if not _PRINTABLE_ASCII.fullmatch(text):
            return f"{_short(name)} is not printable ASCII"
    try:
        urlsplit(event.target)
    except ValueError:
        return "unusable request target"
    if sum(1 for key, _ in event.extra_headers if key.lower() == b"origin") > 1:
        # (Admission reads the first; a browser never sends two.)
        return "more than one Origin header"
    return None


def _check_head(head: bytes) -> str | None:
    """What RFC 6455 (4.2.1) asks of an opening handshake that wsproto does not check:
    HTTP/1.1 (an upgrade is not HTTP/1.0's, and a ``HTTP/2.0`` line is not HTTP/2), and
    one ``Sec-WebSocket-Key`` that is 16 bytes in base64."""
    request_line, _, rest = head.partition(b"\r\n")
    if not request_line.endswith(b" HTTP/1.1"):
        return "a WebSocket upgrade must be an HTTP/1.1 request"
    keys = [
        value.strip()
        for name, _, value in (line.partition(b":") for line in rest.split(b"\r\n"))
        if name.strip().lower() == b"sec-websocket-key"
    ]
    if len(keys) != 1:
        return "exactly one Sec-WebSocket-Key header is needed"
    try:
        key = base64.b64decode(keys[0], validate=True)
    except ValueError:
        key = b""
    if len(key) != 16:
        return "Sec-WebSocket-Key must be 16 bytes in base64"
    return None


def _short(text: str) -> str:
    text = text.encode("ascii", "backslashreplace").decode("ascii")
    return text if len(text) <= 60 else text[:60] + "..."


class _BadUpgrade(Exception):
    def __init__(self, why: str, answer: bytes) -> None:
        super().__init__(why)
        self.why = why
        self.answer = answer


def _feed_upgrade(ws: WSConnection, data: bytes) -> Request | None:
    """Feed request bytes to wsproto; the request once complete and usable.

    Raises:
        _BadUpgrade: anything wrong with it, with the HTTP answer to send.
    """
    request = None
    try:
        ws.receive_data(data)
        request = next((e for e in ws.events() if isinstance(e, Request)), None)
    except RemoteProtocolError as exc:
        why = _short(str(exc))
        answer = _bad_request(why)
        if isinstance(exc.event_hint, RejectConnection):
            with contextlib.suppress(Exception):  # (wsproto's state after a failed parse)
                answer = ws.send(exc.event_hint)
        raise _BadUpgrade(why, answer) from None
    except Exception as exc:
        # wsproto and h11 raise UnicodeDecodeError, ValueError... on odd bytes: the peer's
        # mistake, not ours.
        why = _short(str(exc) if type(exc) is ValueError else type(exc).__name__)
        raise _BadUpgrade(why, _bad_request(why)) from None
    problem = _check_request(request) if request is not None else None
    if problem is not None:
        raise _BadUpgrade(problem, _bad_request(problem))
    return request


def _log_info(kind: str, message: str, *args: Any) -> None:
    log.info(message, *args)


async def read_upgrade(
    stream: trio.abc.Stream,
    *,
    timeout: float = HANDSHAKE_TIMEOUT,
    note: Callable[..., Any] = _log_info,
) -> tuple[WSConnection, UpgradeRequest] | PlainRequest | None:
    """Read the HTTP upgrade request; None if the peer left, was too slow or sent
    something that is not a usable WebSocket upgrade.

    A well-formed request that asks for no upgrade (a health probe, a page) is
    returned as a :class:`~ahp.server.http.PlainRequest` for the caller to answer.

    A malformed request (bad syntax, bytes that are not ASCII where the checks
    before accepting look, a target that is no URL) is answered ``400`` (``426``
    for an unsupported WebSocket version, as wsproto answers) and logged in one
    short line at INFO, before any token check or protocol work; never with a
    traceback, whatever the parser raised. Those lines go through
    ``note(kind, message, *args)`` (the server rate-limits them per kind).
    """
    ws = WSConnection(ConnectionType.SERVER)
    remote = _remote(stream)
    # Everything read until the request is complete (bounded: a head over MAX_HEAD is
    # refused, so this holds at most that plus one read).
    received = bytearray()
    with trio.move_on_after(timeout):
        while True:
            try:
                data = await stream.receive_some(RECEIVE_SIZE)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                return None
            if not data:
                return None
            received += data
            end = received.find(b"\r\n\r\n")
            if end > MAX_HEAD or (end < 0 and len(received) > MAX_HEAD + 3):
                # (h11 bounds only a head still incomplete: one sent in a single write
                # was parsed whatever its size.)
                note("bad request", "upgrade request from %s: head over %d bytes", remote, MAX_HEAD)
                with contextlib.suppress(Exception):
                    await stream.send_all(_bad_request(f"request head over {MAX_HEAD} bytes"))
                return None
            if 0 <= end <= MAX_HEAD and end + 4 > len(received) - len(data):
                # The head just became complete: a plain request is answered elsewhere.
                plain = plain_request(bytes(received[: end + 4]), remote)
                if plain is not None:
                    return plain
            try:
                event = _feed_upgrade(ws, bytes(data))
            except _BadUpgrade as bad:
                note("bad request", "bad upgrade request from %s: %s", remote, bad.why)
                with contextlib.suppress(Exception):
                    await stream.send_all(bad.answer)
                return None
            if event is not None:
                problem = (
                    _check_head(bytes(received[:end]))
                    if end >= 0
                    else "the request's lines must end with CRLF (a bare LF is not taken)"
                )
                if problem is not None:
                    note("bad request", "bad upgrade request from %s: %s", remote, problem)
                    with contextlib.suppress(Exception):
                        await stream.send_all(_bad_request(problem))
                    return None
                request = UpgradeRequest(
                    target=event.target,
                    host=event.host,
                    headers=tuple(event.extra_headers),
                    remote=remote,
                    subprotocols=tuple(event.subprotocols),
                    early_data=bytes(received[end + 4 :]) if end >= 0 else b"",
                )
                return ws, request
    note("timeout", "upgrade request from %s timed out", remote)
    return None


async def reject(stream: trio.abc.Stream, ws: WSConnection, status: int, body: bytes) -> None:
    """Answer the upgrade with an HTTP error and a short text body."""
    headers = [(b"content-type", b"text/plain; charset=utf-8")]
    data = ws.send(RejectConnection(status_code=status, headers=headers, has_body=True))
    data += ws.send(RejectData(data=body, body_finished=True))
    with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
        await stream.send_all(data)
