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
``request``            ``method``, ``by``, ``terminal`` (its ``channel``), ``error``: a
                       request refused to a read-only connection that has no event
                       of its own above
``leftOut``            ``peer``, ``by``, ``count`` and ``lines`` (per event; ``(refused)``
                       after a refusal's), ``inputBytes``: lines one connection caused
                       that its budget left out (:class:`PeerQuota`); ``connections``:
                       read-only connections whose own summaries are counted in it
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

No peer can push the rest of the trail out (:class:`PeerQuota`). Every line a
connection causes (its requests' and actions' events, its ``connection`` and
``disconnected`` lines) is charged, in bytes, to a budget of that connection for
that event (refused and accepted apart): :data:`AUDIT_PEER_BURST` at once, then
:data:`AUDIT_PEER_BYTES_PER_SECOND`. Flooding one event (refused claims, input)
leaves out only more of that event, never another one (an exec after a flood of
input is written). Read-only connections, all together, also share one budget of
:data:`AUDIT_READ_ONLY_BURST`, then :data:`AUDIT_READ_ONLY_BYTES_PER_SECOND` (the
read-only token is handed to watchers: opening many connections must not multiply
it): at that pace the files last about a day. A line left out is counted, and the
counts go out in a ``leftOut`` line before the connection's next line that is
written, and when it disconnects (read-only connections' at most one a second, the
others merged into the next one written). A full-access connection can
do more than fill the log (its terminals run commands as the user, who owns the
files): its budget keeps a runaway client, or one pasting megabytes with
``--audit-input``, from rotating the other clients' events away. Strings a client
chose are cut at :data:`MAX_AUDIT_STRING` characters (``text`` and ``command`` at
:data:`MAX_AUDIT_TEXT`), with their length noted: ``…[N characters]``.

Ownership: :meth:`AuditLog.run` (the writer task) owns the file; run it in the
server's nursery (:func:`ahp.server.serve_host` does with
``ServeOptions.audit_log``).
"""

from __future__ import annotations

import contextvars
import datetime
import math
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
    "AUDIT_PEER_BURST",
    "AUDIT_PEER_BYTES_PER_SECOND",
    "AUDIT_READ_ONLY_BURST",
    "AUDIT_READ_ONLY_BYTES_PER_SECOND",
    "AUDIT_REFUSALS_PER_SECOND",
    "MAX_AUDIT_STRING",
    "MAX_REFUSED_PATH",
    "QUOTA",
    "AuditLog",
    "PeerQuota",
    "iso_now",
]

#: The client on whose behalf the current task acts (set by the server around the
#: requests it audits itself): a terminal created or disposed while it is unset was
#: the library's doing, and is audited as ``inProcess``.
ACTOR: contextvars.ContextVar[str | None] = contextvars.ContextVar("ahp_audit_actor", default=None)

#: The budget of the connection the current task serves (set by the server for each
#: connection's task, inherited by the tasks it starts): :meth:`AuditLog.event` charges it.
QUOTA: contextvars.ContextVar[PeerQuota | None] = contextvars.ContextVar(
    "ahp_audit_quota", default=None
)

#: Bytes of audit lines one connection may cause at once, per event (refused apart).
AUDIT_PEER_BURST: Final = 64 * 1024
#: ... and per second after that, per event: ~15 input lines a second without text, one of
#: 2 KiB with it; a person typing, or an agent's commands, stay well under it.
AUDIT_PEER_BYTES_PER_SECOND: Final = 2048
#: Bytes of audit lines every read-only connection together may cause at once ...
AUDIT_READ_ONLY_BURST: Final = 64 * 1024
#: ... and per second after that (80 MiB of files take 22 hours at this pace).
AUDIT_READ_ONLY_BYTES_PER_SECOND: Final = 1024
#: Longest string a line holds (characters) but for ``text`` and ``command``: past it,
#: cut, with the length noted.
MAX_AUDIT_STRING: Final = 1024
#: The fields that may hold up to :data:`MAX_AUDIT_TEXT` characters.
_LONG_FIELDS: Final = frozenset({"text", "command"})

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


class _Bucket:
    """A token bucket of bytes: ``burst`` at once, refilled at ``rate`` a second."""

    __slots__ = ("burst", "level", "rate", "since")

    def __init__(self, rate: float, burst: float) -> None:
        self.rate = rate
        self.burst = burst
        self.level = burst
        self.since = time.monotonic()

    def room(self, size: int, now: float) -> bool:
        self.level = min(self.burst, self.level + (now - self.since) * self.rate)
        self.since = now
        return self.level >= size


class PeerQuota:
    """What one connection may cause to be written, and what was left out of it (see
    the module docstring). Made by :meth:`AuditLog.quota`, one per connection; made
    current for its task with :data:`QUOTA`; :meth:`AuditLog.close_quota` at its end."""

    __slots__ = ("_buckets", "_shared", "by", "input_bytes", "left", "peer")

    def __init__(self, peer: str | None, shared: _Bucket | None) -> None:
        self.peer = peer
        #: The last ``by`` of its lines (its clientId once it has one).
        self.by: str | None = None
        self._shared = shared
        self._buckets: dict[str, _Bucket] = {}
        #: Lines left out since the last summary, per event; their input's bytes.
        self.left: dict[str, int] = {}
        self.input_bytes = 0

    @property
    def read_only(self) -> bool:
        return self._shared is not None

    def admit(self, key: str, size: int) -> bool:
        """Charge a line of ``size`` bytes to ``key``'s budget (and the read-only
        connections' shared one); False (nothing charged) when either has no room."""
        now = time.monotonic()
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = self._buckets[key] = _Bucket(AUDIT_PEER_BYTES_PER_SECOND, AUDIT_PEER_BURST)
        shared = self._shared
        if not bucket.room(size, now) or (shared is not None and not shared.room(size, now)):
            return False
        bucket.level -= size
        if shared is not None:
            shared.level -= size
        return True

    def summary(self) -> dict[str, Any] | None:
        """The ``leftOut`` fields for what was left out since the last one (then reset),
        or None."""
        if not self.left:
            return None
        left, self.left = self.left, {}
        input_bytes, self.input_bytes = self.input_bytes, 0
        return {
            "peer": self.peer,
            "by": self.by,
            "count": sum(left.values()),
            "lines": left,
            "inputBytes": input_bytes or None,
            "readOnly": self.read_only or None,
        }


class AuditLog:
    """The audit log of one server (see the module docstring).

    Args:
        path: the log file (its directory is created).
        token: the server's token, scrubbed from every line.
        read_token: the server's read-only token, scrubbed too.
        record_input: log the text of input too (``--audit-input``), not only its size.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        token: str | None = None,
        read_token: str | None = None,
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
            redact=[t for t in (token, read_token) if t],
            **extra,
        )
        #: Every read-only connection's budget together, and the summaries of read-only
        #: connections that ended when it had no room (merged: carried by the next one).
        self._read_only = _Bucket(AUDIT_READ_ONLY_BYTES_PER_SECOND, AUDIT_READ_ONLY_BURST)
        self._read_only_left: dict[str, int] = {}
        self._read_only_connections = 0
        self._read_only_input = 0
        self._read_only_last: dict[str, Any] = {}  # (the last one merged: its peer and by)
        self._read_only_summary_at = -math.inf
        #: Refused-connection lines of the current second, its start, and the refusals
        #: not written since the last refused line.
        self._refusals = 0
        self._refusals_since = -1.0
        self._refusals_left_out = 0

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """The writer task (until cancelled); ``OSError`` before ``started`` if the file
        cannot be opened."""
        await self.sink.run(task_status=task_status)

    def quota(self, peer: str | None = None, *, read_only: bool = False) -> PeerQuota:
        """A fresh budget for one connection (see :class:`PeerQuota`)."""
        return PeerQuota(peer, self._read_only if read_only else None)

    def event(self, kind: str, *, quota: PeerQuota | bool | None = True, **fields: Any) -> None:
        """Queue one line (never waits; dropped and counted when the queue is full).

        ``quota``: the budget it is charged to; by default the current connection's
        (:data:`QUOTA`), if any; None: none (the server's own doing). Past the budget
        the line is counted, not written (see the module docstring)."""
        line: dict[str, Any] = {"ts": iso_now(), "event": kind}
        line.update(
            {k: _bounded(v, long=k in _LONG_FIELDS) for k, v in fields.items() if v is not None}
        )
        encoded = orjson.dumps(line, default=_plain) + b"\n"
        peer_quota = QUOTA.get() if quota is True else quota or None
        if peer_quota is None:
            self.sink.put(encoded)
            return
        if isinstance(by := fields.get("by"), str):
            peer_quota.by = by
        refused = (
            fields.get("error") is not None
            or fields.get("refused") is not None
            or fields.get("accepted") is False
        )
        key = f"{kind} (refused)" if refused else kind
        if not peer_quota.admit(key, len(encoded)):
            peer_quota.left[key] = peer_quota.left.get(key, 0) + 1
            if kind == "input" and isinstance(size := fields.get("bytes"), int):
                peer_quota.input_bytes += size
            return
        if (summary := peer_quota.summary()) is not None:
            self.event("leftOut", quota=None, **summary)  # (at most one per line written)
        self.sink.put(encoded)

    def close_quota(self, quota: PeerQuota) -> None:
        """The connection is gone: its ``leftOut`` summary, if anything was left out. A
        read-only connection's is written at most once a second for all of them together
        (read-only connections may be opened by the thousand); the others are merged into
        the next one written (``connections``: how many it counts)."""
        summary = quota.summary()
        if not quota.read_only:
            if summary is not None:
                self.event("leftOut", quota=None, **summary)
            return
        if summary is not None:
            for key, n in summary["lines"].items():
                self._read_only_left[key] = self._read_only_left.get(key, 0) + n
            self._read_only_input += summary["inputBytes"] or 0
            self._read_only_connections += 1
            self._read_only_last = summary
        now = time.monotonic()
        if not self._read_only_connections or now - self._read_only_summary_at < 1.0:
            return
        self._read_only_summary_at = now
        left, self._read_only_left = self._read_only_left, {}
        connections, self._read_only_connections = self._read_only_connections, 0
        input_bytes, self._read_only_input = self._read_only_input, 0
        self.event(
            "leftOut",
            quota=None,
            peer=self._read_only_last.get("peer"),
            by=self._read_only_last.get("by"),
            count=sum(left.values()),
            lines=left,
            inputBytes=input_bytes or None,
            connections=connections if connections > 1 else None,
            readOnly=True,
        )

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
                self.event(
                    "terminal.created",
                    quota=None,
                    terminal=terminal.uri,
                    name=name,
                    inProcess=True,
                )

        def disposed(terminal: Terminal) -> None:
            if ACTOR.get() is None:
                self.event("terminal.disposed", quota=None, terminal=terminal.uri, inProcess=True)

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


def _bounded(value: Any, depth: int = 0, *, long: bool = False) -> Any:
    """``value`` with every string cut at :data:`MAX_AUDIT_STRING` characters
    (:data:`MAX_AUDIT_TEXT` if ``long``), its length noted, and every list and object at
    :data:`MAX_AUDIT_ITEMS` items (a client chooses its ``clientId``, its claims and its
    offered versions: one line must not cost megabytes)."""
    if isinstance(value, str):
        limit = MAX_AUDIT_TEXT if long else MAX_AUDIT_STRING
        return value if len(value) <= limit else f"{value[:limit]}…[{len(value)} characters]"
    if depth >= _MAX_AUDIT_DEPTH:
        return _bounded(str(value))
    if isinstance(value, list | tuple):
        return [_bounded(v, depth + 1) for v in value[:MAX_AUDIT_ITEMS]]
    if isinstance(value, dict):
        items = list(value.items())[:MAX_AUDIT_ITEMS]
        return {str(k)[:MAX_AUDIT_STRING]: _bounded(v, depth + 1) for k, v in items}
    return value


def _plain(value: Any) -> Any:
    """orjson's fallback for a value it cannot encode: its text."""
    return str(value)
