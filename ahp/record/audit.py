"""The audit log: one JSON line per privileged event (``serve --audit-log FILE``).

Why: the AHP threat model asks a host to audit privileged actions; a sidecar
that runs commands for agents must be able to say afterwards who connected,
who created, claimed, typed into, signalled or disposed which terminal, and
when. Each line is a JSON object with ``ts`` (UTC, ISO 8601 with milliseconds),
``event`` and the event's fields:

=====================  ===================================================================
``event``              fields
=====================  ===================================================================
``connection``         ``peer``, ``accepted`` (bool), ``reason`` (refused: why; a
                       malformed upgrade: ``bad request: …``), ``path``, ``readOnly``
                       (a read-only connection); ``leftOut``: refusals not written
                       since the last refused line (:data:`AUDIT_REFUSALS_PER_SECOND`)
``disconnected``       ``peer``, ``clientId``, ``code`` (the close code)
``initialize``         ``clientId``, ``protocolVersion`` (None: refused), ``offered``,
                       ``peer``; ``reconnect`` (bool)
``terminal.created``   ``terminal``, ``by`` (clientId), ``name``, ``cwd``, ``claim``;
                       ``error`` when it was refused; ``inProcess`` (no ``by``) when
                       the library created it (:meth:`AuditLog.watching`)
``terminal.disposed``  ``terminal``, ``by``; ``error`` when it was refused;
                       ``inProcess`` as above
``claim``              ``terminal``, ``by``, ``claim`` (requested), ``previous``,
                       ``accepted`` (bool, as the terminal decided)
``input``              ``terminal``, ``by``, ``bytes`` (UTF-8 length); ``text`` only with
                       ``--audit-input``; ``refused`` when the claim rule refused it
``signal``             ``terminal``, ``by``, ``signal``, ``groups`` (process groups);
                       ``error`` when it was refused
``exec``               ``terminal``, ``by``, ``command`` (at most 4096 characters),
                       ``cwd``, ``env`` (names only); ``error`` when refused
``config``             ``by``, ``keys`` (the configuration keys changed, never values),
                       ``replace``, ``accepted``
``dropped``            ``count``: lines lost because the queue was full or a write failed
=====================  ===================================================================

Never the token: it appears in no field (peers are addresses, paths are logged
without their query, headers are not logged), and every line written is
scrubbed of it anyway (:class:`~ahp.record.sink.LineSink` ``redact``), so even
input text that contains it is logged as ``<redacted>``.

Off the hot path: :meth:`AuditLog.event` builds one small dict and encodes it
(microseconds) and queues it without waiting; the queue and the files are bounded
(:data:`AUDIT_FILE_BYTES` times :data:`AUDIT_FILES`, queue bounds of
:mod:`ahp.record.sink`); lines that do not fit are dropped and counted, then
reported by a ``dropped`` line. Rotation is ``FILE``, ``FILE.1`` …
(``tail -F FILE`` follows it). Refused connections are the one event anyone who
can reach the port causes, without a token: at most
:data:`AUDIT_REFUSALS_PER_SECOND` of their lines a second are written (the others
counted, the count in the next one's ``leftOut``), each path cut at
:data:`MAX_REFUSED_PATH`, so a flood of refusals cannot rotate the privileged events
out of the files (it took 17 s before: 3 KB lines, ~5 MB/s).

Ownership: :meth:`AuditLog.run` (the writer task) owns the file; run it in the
server's nursery (:func:`ahp.server.serve_host` does with
``ServeOptions.audit_log``).
"""

from __future__ import annotations

import contextvars
import datetime
import os
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Final

import orjson
import trio

from ahp.engine import Host, Terminal
from ahp.record.sink import LineSink, Rotation

__all__ = [
    "ACTOR",
    "AUDIT_FILES",
    "AUDIT_FILE_BYTES",
    "AUDIT_REFUSALS_PER_SECOND",
    "MAX_REFUSED_PATH",
    "AuditLog",
    "iso_now",
]

#: The client on whose behalf the current task acts (set by the server around the
#: requests it audits itself): a terminal created or disposed while it is unset was
#: the library's doing, and is audited as ``inProcess``.
ACTOR: contextvars.ContextVar[str | None] = contextvars.ContextVar("ahp_audit_actor", default=None)

#: Refused-connection lines written at most per second; past it they are counted (see
#: the module docstring): 10 lines of ~300 bytes a second take 8 hours to fill the files.
AUDIT_REFUSALS_PER_SECOND: Final = 10
#: A refused connection's path (the peer's choice, before any token) is cut here.
MAX_REFUSED_PATH: Final = 256
#: An audit file is rotated before it passes this size (bytes).
AUDIT_FILE_BYTES: Final = 16 * 1024 * 1024
#: Files kept: ``FILE`` and ``FILE.1`` … ``FILE.<AUDIT_FILES - 1>``.
AUDIT_FILES: Final = 5
#: Longest input text logged in one line with ``--audit-input`` (characters); the
#: byte count is always exact.
MAX_AUDIT_TEXT: Final = 4096
#: Longest string of any field, and most items of any list or object, in one line (a
#: longer one is cut, with "…").
MAX_AUDIT_ITEMS: Final = 64
_MAX_AUDIT_DEPTH: Final = 4


def iso_now() -> str:
    """Now, as ``2026-12-01T10:00:00.123Z``."""
    now = datetime.datetime.now(datetime.UTC)
    return now.strftime("%Y-%m-%dT%H:%M:%S.") + f"{now.microsecond // 1000:03d}Z"


def _dropped_line(count: int) -> bytes:
    return orjson.dumps({"ts": iso_now(), "event": "dropped", "count": count}) + b"\n"


class AuditLog:
    """The audit log of one server (see the module docstring).

    Args:
        path: the log file (its directory is created).
        token: the server's token, scrubbed from every line.
        record_input: log the text of input too (``--audit-input``), not only its size.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        token: str | None = None,
        record_input: bool = False,
        max_file_bytes: int = AUDIT_FILE_BYTES,
        max_files: int = AUDIT_FILES,
        max_lines: int | None = None,
    ) -> None:
        self.path = Path(path)
        self.record_input = record_input
        extra: dict[str, int] = {} if max_lines is None else {"max_lines": max_lines}
        self.sink: LineSink[bytes] = LineSink(
            Rotation(self.path, scheme="numbered", max_files=max_files),
            max_file_bytes=max_file_bytes,
            format_item=lambda line: line,
            dropped_line=_dropped_line,
            size=len,
            redact=(token,) if token else (),
            **extra,
        )
        #: Refused-connection lines of the current second, its start, and the refusals
        #: not written since the last refused line.
        self._refusals = 0
        self._refusals_since = -1.0
        self._refusals_left_out = 0

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """The writer task (until cancelled); ``OSError`` before ``started`` if the file
        cannot be opened."""
        await self.sink.run(task_status=task_status)

    def event(self, kind: str, **fields: Any) -> None:
        """Queue one line (never waits; dropped and counted when the queue is full)."""
        line: dict[str, Any] = {"ts": iso_now(), "event": kind}
        line.update({k: _bounded(v) for k, v in fields.items() if v is not None})
        self.sink.put(orjson.dumps(line, default=_plain) + b"\n")

    # -- the events ----------------------------------------------------------------------------

    def connection(
        self,
        peer: str,
        *,
        accepted: bool,
        reason: str | None = None,
        path: str | None = None,
        read_only: bool = False,
    ) -> None:
        left_out = None
        if not accepted:  # (see AUDIT_REFUSALS_PER_SECOND)
            now = time.monotonic()
            if now - self._refusals_since >= 1.0:
                self._refusals_since, self._refusals = now, 0
            self._refusals += 1
            if self._refusals > AUDIT_REFUSALS_PER_SECOND:
                self._refusals_left_out += 1
                return
            left_out, self._refusals_left_out = self._refusals_left_out or None, 0
            path = path[:MAX_REFUSED_PATH] if path is not None else None
        self.event(
            "connection",
            peer=peer,
            accepted=accepted,
            reason=reason,
            path=path,
            readOnly=read_only or None,
            leftOut=left_out,
        )

    def initialize(
        self,
        client_id: str,
        version: str | None,
        offered: Any = (),
        *,
        peer: str | None = None,
        reconnect: bool = False,
    ) -> None:
        """``offered``: the client's ``protocolVersions`` as it sent them (any JSON: a
        list, a legacy integer, nothing); written as a list, bounded like every value."""
        if isinstance(offered, list | tuple):
            offers = list(offered) or None
        else:
            offers = None if offered is None else [offered]
        self.event(
            "initialize",
            clientId=client_id,
            protocolVersion=version,
            offered=offers,
            peer=peer,
            reconnect=reconnect or None,
        )

    @asynccontextmanager
    async def watching(self, host: Host) -> AsyncIterator[None]:
        """While the block runs, audit the terminals ``host`` creates and disposes
        outside any client's request (the library's, an MCP agent's): ``by`` is absent
        and ``inProcess`` true."""

        def created(terminal: Terminal) -> None:
            if ACTOR.get() is None:
                name = terminal.spec.name
                self.event("terminal.created", terminal=terminal.uri, name=name, inProcess=True)

        def disposed(terminal: Terminal) -> None:
            if ACTOR.get() is None:
                self.event("terminal.disposed", terminal=terminal.uri, inProcess=True)

        host.on_terminal_created.append(created)
        host.on_terminal_disposed.append(disposed)
        try:
            yield
        finally:
            host.on_terminal_created.remove(created)
            host.on_terminal_disposed.remove(disposed)

    def input(self, terminal: str, by: str | None, data: str, *, refused: str | None) -> None:
        size = len(data.encode("utf-8", "surrogatepass"))
        text = data[:MAX_AUDIT_TEXT] if self.record_input else None
        self.event("input", terminal=terminal, by=by, bytes=size, text=text, refused=refused)


def _bounded(value: Any, depth: int = 0) -> Any:
    """``value`` with every string cut at :data:`MAX_AUDIT_TEXT` characters and every
    list and object at :data:`MAX_AUDIT_ITEMS` items (a client chooses its ``clientId``
    and its offered versions: one line must not cost megabytes)."""
    if isinstance(value, str):
        return value if len(value) <= MAX_AUDIT_TEXT else value[:MAX_AUDIT_TEXT] + "…"
    if depth >= _MAX_AUDIT_DEPTH:
        return str(value)[:MAX_AUDIT_TEXT]
    if isinstance(value, list | tuple):
        return [_bounded(v, depth + 1) for v in value[:MAX_AUDIT_ITEMS]]
    if isinstance(value, dict):
        items = list(value.items())[:MAX_AUDIT_ITEMS]
        return {str(k)[:MAX_AUDIT_TEXT]: _bounded(v, depth + 1) for k, v in items}
    return value


def _plain(value: Any) -> Any:
    """orjson's fallback for a value it cannot encode: its text."""
    return str(value)
