"""The wire log: every JSON-RPC message, as VS Code's agent-host tools log them.

Why this shape: VS Code's AHP client writes its traffic as JSONL, one message
per line with a root-level ``_ahpLog`` object (``ts``: ISO 8601 UTC with
milliseconds, ``dir``: ``"c2s"`` client to server or ``"s2c"``, ``connectionId``,
``transport``, and ``byteLength``: the frame's UTF-8 length), into files named
``ahp-<timestamp>-<id>.jsonl`` rotated at 75 MiB into ``….1.jsonl``, ``….2.jsonl``
…, keeping 5. ``serve --wire-log DIR`` writes the server's side of every
connection the same way, so the same tools (and ``jq``) read both sides.
One log per server run, every connection in it (``connectionId`` tells them
apart: ``"1"``, ``"2"`` … in order of acceptance; ``transport`` is
``"websocket"``).

What a line holds: the message exactly as sent or received, with ``_ahpLog``
added as its last member. Messages are decoded and re-encoded so that credential
fields (``token``, ``authorization``, ``password``, the resume token, … at any
depth: :data:`SECRET_KEYS`) can be replaced by ``<redacted>``: a client's, and the
server's too, which echo what clients sent (a ``root/configChanged`` is broadcast
with its config; a rejected action is echoed to its sender) and hand out resume
tokens. The one exception is the bulk of the traffic, the server's
``terminal/data`` and ``terminal/input`` envelopes in the shape it encodes them
(:func:`_server_data`: no member in them but their text can hold a client's
choice): those are spliced (the encoded frame, its closing brace, the metadata; no
decoding). A client frame that is not a JSON object is logged as
``{"_raw": text, "_ahpLog": …}``, the string value of any credential member in it
redacted too. The server's tokens are scrubbed from every line
whatever field holds them (:class:`~ahp.record.sink.LineSink` ``redact``). A
message larger than :data:`MAX_LINE_BYTES` has its long strings elided
(``"… [N chars elided]"``) and ``_ahpLog.truncated: true``, as VS Code does. When
the queue was full, one line ``{"_ahpLog": {…, "dropped": N}}`` says how many
messages are missing.

Cost: with no wire log the server pays one ``is None`` test per message read
and one per batch written (:mod:`ahp.server.websocket`). With it, each message
costs one bounded enqueue on the hot path (a tuple holding a reference to the
frame already encoded for the socket: no copy); the formatting and the writing
happen in the writer task's worker thread: a spliced envelope costs a prefix test
and one ``find`` over its channel; another message one decode and one encode (about
1 us for a small one, 2 ms per MiB). The queue is bounded
(:data:`~ahp.record.sink.MAX_QUEUED_LINES` messages,
:data:`~ahp.record.sink.MAX_QUEUED_BYTES` bytes of frames); past it messages are
dropped and counted, never waited for.
"""

from __future__ import annotations

import datetime
import itertools
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import orjson
import trio

from ahp.protocol.commands import RESUME_META
from ahp.record.sink import LineSink, Rotation, make_private_dirs

__all__ = [
    "MAX_LINE_BYTES",
    "SECRET_KEYS",
    "WIRE_FILES",
    "WIRE_FILE_BYTES",
    "WireLog",
    "format_entry",
]

#: A wire log file is rotated before it passes this size (VS Code's: 75 MiB).
WIRE_FILE_BYTES: Final = 75 * 1024 * 1024
#: Files kept (VS Code's: 5).
WIRE_FILES: Final = 5
#: A message whose frame is larger than this (bytes) is logged with long strings elided.
MAX_LINE_BYTES: Final = 1024 * 1024
#: Strings longer than this (characters) are elided in such a message.
ELIDE_STRING: Final = 16 * 1024
#: Keys whose values are credentials (compared lower-cased), redacted in client messages.
SECRET_KEYS: Final = frozenset(
    {
        "token",
        "accesstoken",
        "connectiontoken",
        "authorization",
        "password",
        "secret",
        "tkn",
        # The per-client resume token (whoever presents it takes that client's id).
        RESUME_META,
    }
)
REDACTED: Final = "<redacted>"
#: A credential member in text that is not JSON (logged raw): its string value.
_RAW_SECRET: Final = re.compile(
    r'"(' + "|".join(re.escape(k) for k in sorted(SECRET_KEYS)) + r')"(\s*:\s*)"(?:[^"\\]|\\.)*"',
    re.IGNORECASE,
)
#: How the server's encoder starts a ``terminal/data`` / ``terminal/input`` envelope
#: (:attr:`ahp.engine.envelopes.Published.frame`), before and after its channel.
_DATA_HEAD: Final = b'{"jsonrpc":"2.0","method":"action","params":{"channel":"'
_DATA_ACTION: Final = b'","action":{"data":"'
#: Queue weight of a message beyond its frame (the tuple, the metadata).
_OVERHEAD: Final = 64

#: One queued message: (wall time, direction, connection id, the frame).
_Item = tuple[float, str, str, str | bytes]


def _iso(ts: float) -> str:
    when = datetime.datetime.fromtimestamp(ts, datetime.UTC)
    return when.strftime("%Y-%m-%dT%H:%M:%S.") + f"{when.microsecond // 1000:03d}Z"


def _redact(value: Any) -> Any:
    if isinstance(value, dict):
        return {
            k: REDACTED if isinstance(k, str) and k.lower() in SECRET_KEYS else _redact(v)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_redact(v) for v in value]
    return value


def _elide(value: Any) -> Any:
    if isinstance(value, str) and len(value) > ELIDE_STRING:
        keep = ELIDE_STRING // 2
        return f"{value[:keep]}… [{len(value) - keep} chars elided]"
    if isinstance(value, dict):
        return {k: _elide(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_elide(v) for v in value]
    return value


def _server_data(raw: bytes) -> bool:
    """Whether ``raw`` is a ``terminal/data`` or ``terminal/input`` envelope as the server
    encodes them: its channel, then its action with the text first; the rest (the type,
    ``serverSeq``, ``origin``) is the server's own, so no client chose a key in it. A
    channel holding an escaped quote is not recognised (decoded, as any message)."""
    if not raw.startswith(_DATA_HEAD):
        return False
    end = raw.find(b'"', len(_DATA_HEAD))
    return end > 0 and raw[end - 1] != 0x5C and raw.startswith(_DATA_ACTION, end)


def format_entry(
    ts: float, direction: str, connection_id: str, frame: str | bytes, transport: str
) -> bytes:
    """One line of the log (with its newline); see the module docstring."""
    raw = frame.encode("utf-8", "surrogatepass") if isinstance(frame, str) else frame
    meta: dict[str, Any] = {
        "ts": _iso(ts),
        "dir": direction,
        "connectionId": connection_id,
        "transport": transport,
        "byteLength": len(raw),
    }
    large = len(raw) > MAX_LINE_BYTES
    secret = direction == "c2s" or not _server_data(raw)
    if not secret and not large and raw[:1] == b"{" and raw.rstrip()[-1:] == b"}":
        body = raw.rstrip()[:-1]
        sep = b"," if body.strip() != b"{" else b""
        return body + sep + b'"_ahpLog":' + orjson.dumps(meta) + b"}\n"
    try:
        message = orjson.loads(raw)
    except orjson.JSONDecodeError:
        message = None
    if not isinstance(message, dict):
        text = raw.decode("utf-8", "replace")
        if secret:  # (credentials in a frame that is not JSON are still credentials)
            text = _RAW_SECRET.sub(lambda m: f'"{m[1]}"{m[2]}"{REDACTED}"', text)
        if large:
            text, meta["truncated"] = _elide(text), True
        return orjson.dumps({"_raw": text, "_ahpLog": meta}) + b"\n"
    if secret:
        message = _redact(message)
    if large:
        message = _elide(message)
        meta["truncated"] = True
    message.pop("_ahpLog", None)
    message["_ahpLog"] = meta
    return orjson.dumps(message) + b"\n"


class WireLog:
    """The wire log of one server (see the module docstring).

    Args:
        directory: where the files go (created, mode 0700).
        token: the server's token, scrubbed from every line.
        read_token: the server's read-only token, scrubbed too.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        token: str | None = None,
        read_token: str | None = None,
        transport: str = "websocket",
        max_file_bytes: int = WIRE_FILE_BYTES,
        max_files: int = WIRE_FILES,
        max_lines: int | None = None,
        max_bytes: int | None = None,
    ) -> None:
        self.directory = Path(directory)
        self.transport = transport
        now = datetime.datetime.now(datetime.UTC)
        stamp = now.strftime("%Y-%m-%dT%H-%M-%S-") + f"{now.microsecond // 1000:03d}Z"
        self.path = self.directory / f"ahp-{stamp}-server-{os.getpid()}.jsonl"
        self._ids = itertools.count(1)
        extra: dict[str, int] = {}
        if max_lines is not None:
            extra["max_lines"] = max_lines
        if max_bytes is not None:
            extra["max_bytes"] = max_bytes
        self.sink: LineSink[_Item] = LineSink(
            Rotation(self.path, scheme="segments", max_files=max_files),
            max_file_bytes=max_file_bytes,
            format_item=self._format,
            dropped_line=self._dropped_line,
            size=lambda item: len(item[3]) + _OVERHEAD,
            redact=[t for t in (token, read_token) if t],
            **extra,
        )

    def _format(self, item: _Item) -> bytes:
        ts, direction, connection_id, frame = item
        return format_entry(ts, direction, connection_id, frame, self.transport)

    def _dropped_line(self, count: int) -> bytes:
        meta = {
            "ts": _iso(time.time()),
            "connectionId": "wire-log",
            "transport": self.transport,
            "dropped": count,
        }
        return orjson.dumps({"_ahpLog": meta}) + b"\n"

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """The writer task (until cancelled); ``OSError`` before ``started`` if the
        directory or file cannot be created."""
        await trio.to_thread.run_sync(make_private_dirs, self.directory)
        await self.sink.run(task_status=task_status)

    def connection_id(self) -> str:
        """A fresh id for a connection (``"1"``, ``"2"`` …)."""
        return str(next(self._ids))

    def c2s(self, connection_id: str, frame: str | bytes) -> None:
        """A message received (never waits; dropped and counted when the queue is full)."""
        self.sink.put((time.time(), "c2s", connection_id, frame))

    def s2c(self, connection_id: str, frame: str | bytes) -> None:
        """A message sent (never waits)."""
        self.sink.put((time.time(), "s2c", connection_id, frame))

    def tap(
        self, frames: Iterator[bytes | list[bytes]], connection_id: str
    ) -> Iterator[bytes | list[bytes]]:
        """``frames``, each logged as sent as it is taken (the writer's batch; a frame
        given in pieces is logged joined)."""
        put, now = self.sink.put, time.time
        for frame in frames:
            put(
                (
                    now(),
                    "s2c",
                    connection_id,
                    frame if isinstance(frame, bytes) else b"".join(frame),
                )
            )
            yield frame
