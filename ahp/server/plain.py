"""Plain HTTP answers on the WebSocket port: built, then sent at the client's pace.

Why a module of its own: a request without an upgrade (the viewer page, its files,
a recording's download, a probe) is answered by :mod:`ahp.server.http`'s routes,
but its answer must be sent by the transport under rules of its own, which have
nothing to do with a WebSocket's frames: the ``Host`` check and the audit of a
refusal (:mod:`ahp.server.gate`), an answer that owns an open file until it is
closed (:class:`PlainAnswer`), and sends that need no deadline but the progress rule
of :mod:`ahp.server.download` (a piece taken every so often). Where the answer is
sent — within the unauthenticated phase or after it, holding a place among the
plain sends — is the transport's choice (:mod:`ahp.server.websocket`,
:class:`~ahp.server.admission.PlainSends`).
"""

from __future__ import annotations

import contextlib
import logging

import trio

from ahp.record.audit import AuditLog
from ahp.server import download
from ahp.server.admission import RateLimitedLog
from ahp.server.config import ServerConfig
from ahp.server.download import FileBody
from ahp.server.gate import AUDIT_REASON, check_host
from ahp.server.http import HttpResponse, PlainRequest

__all__ = ["PlainAnswer", "answer_plain"]

log = logging.getLogger("ahp.server")


def _refused_plain(
    request: PlainRequest, refusal: str, notes: RateLimitedLog, audit: AuditLog | None
) -> None:
    """Log (rate-limited) and audit a plain request refused for its Host or its token,
    as a refused upgrade is (the path only: the query may hold a token)."""
    notes.log(
        "refused",
        logging.WARNING,
        "refused request from %s to %s: %s",
        request.remote,
        request.path[:AUDIT_REASON],
        refusal,
    )
    if audit is not None:
        audit.connection(request.remote, accepted=False, reason=refusal, path=request.path)


class PlainAnswer:
    """A plain request's answer, built and not yet sent: its head, its in-memory body
    (not copied: an asset's is the cached file) and its streamed body (a recording's
    open file), which this answer owns until :meth:`close` (idempotent; whoever holds
    the answer calls it, sent or not)."""

    def __init__(self, response: HttpResponse, request: PlainRequest) -> None:
        head_only = request.method == "HEAD"
        self.head, self.body = response.parts(head_only=head_only)
        self.streamed: FileBody | None = response.streamed
        self.peer = _peer_address(request.remote)
        if head_only:
            self.close()

    @property
    def length(self) -> int:
        return len(self.head) + len(self.body)

    def close(self) -> None:
        streamed, self.streamed = self.streamed, None
        if streamed is not None:
            streamed.close()

    async def send_at_once(self, stream: trio.abc.Stream) -> None:
        """Send the in-memory answer in one write, under the caller's deadline (the
        unauthenticated phase's: no place after it was free). A streamed body is never
        sent this way (its answer holds a place among the downloads instead)."""
        assert self.streamed is None
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
            await stream.send_all(self.head)  # (two writes: the body is not copied)
            if self.body:
                await stream.send_all(self.body)

    async def send(self, stream: trio.abc.Stream, notes: RateLimitedLog) -> None:
        """Send the whole answer, after the unauthenticated phase: no deadline but the
        progress rule of :mod:`ahp.server.download` (a :data:`DOWNLOAD_PIECE` taken at
        least every :data:`DOWNLOAD_IDLE` seconds, else the connection is closed); then
        close the streamed body. The caller closes the connection."""
        try:
            with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                for part in (self.head, self.body):
                    if not await _send_paced(stream, part):
                        notes.log(
                            "download",
                            logging.INFO,
                            "closed an answer to %s after part of its %d bytes: %s",
                            self.peer,
                            self.length,
                            "the client took nothing",
                        )
                        return
                if self.streamed is not None:
                    await _send_download(stream, self.streamed, notes)
        finally:
            self.close()


def _peer_address(remote: str) -> str:
    """The address of a ``host:port`` peer (the key of per-peer bounds)."""
    return remote.rsplit(":", 1)[0] if ":" in remote else remote


async def _send_paced(stream: trio.abc.Stream, data: bytes) -> bool:
    """Send ``data`` a :data:`~ahp.server.download.DOWNLOAD_PIECE` at a time, each within
    :data:`~ahp.server.download.DOWNLOAD_IDLE` seconds; False when one was not taken in
    time (the rest is not sent)."""
    with memoryview(data) as view:
        for start in range(0, len(view), download.DOWNLOAD_PIECE):
            with trio.move_on_after(download.DOWNLOAD_IDLE) as idle:
                await stream.send_all(view[start : start + download.DOWNLOAD_PIECE])
            if idle.cancelled_caught:
                return False
    return True


async def answer_plain(
    request: PlainRequest,
    config: ServerConfig,
    notes: RateLimitedLog,
    audit: AuditLog | None = None,
) -> PlainAnswer:
    """The answer to a request without an upgrade (:mod:`ahp.server.http`), not sent:
    the caller owns it (:meth:`PlainAnswer.close`). A refusal (the Host, a route's
    token check: :attr:`HttpResponse.refused`) is logged and audited like a refused
    upgrade's."""
    refusal = check_host(request.host, config)
    if refusal is not None:
        _refused_plain(request, refusal, notes, audit)
        response = HttpResponse.text(403, refusal)
    elif config.routes is None:
        response = HttpResponse.text(404, "not found")
    else:
        try:
            response = await config.routes.answer(request)
        except Exception:
            log.exception("answering %s %s failed", request.method, request.path)
            response = HttpResponse.text(500, "internal error")
        if response.refused is not None:
            _refused_plain(request, response.refused, notes, audit)
    # (No checkpoint from the route's answer to its taker: a streamed body is closed.)
    return PlainAnswer(response, request)


async def _send_download(stream: trio.abc.Stream, body: FileBody, notes: RateLimitedLog) -> None:
    """Send a streamed answer's body (its head is out) and close it; the caller closes
    the connection. No deadline but the progress rule of :mod:`ahp.server.download`."""
    try:
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
            why = await body.send(stream)
            if why is not None:
                notes.log(
                    "download",
                    logging.INFO,
                    "closed a download after %d of %d bytes: %s",
                    body.sent,
                    body.length,
                    "the client took nothing" if why == "idle" else "the file shrank",
                )
    finally:
        body.close()
