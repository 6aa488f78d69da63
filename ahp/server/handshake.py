"""The handshake and subscription requests: ``initialize``, ``reconnect``,
``subscribe``, ``unsubscribe`` and ``ping``.

Why a module of its own: these are the requests that answer with snapshots or
replayed envelopes, projected onto the connection's dialect; their rule is the
ordering guarantee (each answer is queued in the same synchronous step that
registers its subscriptions, :meth:`ahp.server.connection.Connection.subscribe`),
and they are the ones the server's response pool holds back when it is full.

Dialects: ``initialize`` picks the highest offered version this host speaks
(0.3.x to 0.8.x: the 0.5 dialect; 0.9.x, 0.10.x and 1.x: the 1.x dialect; see
:mod:`ahp.protocol.dialect`) and the connection keeps it (a ``reconnect``
resumes the record's). Answers and replayed envelopes are projected onto it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any, Final

from ahp.protocol.codec import structure
from ahp.protocol.commands import (
    READ_ONLY_META,
    RESUME_META,
    ChannelMissing,
    ChannelParams,
    ChannelRecovery,
    ChannelReplay,
    ChannelSnapshot,
    Implementation,
    InitializeParams,
    InitializeResult,
    ReconnectChannels,
    ReconnectCursorParams,
    ReconnectParams,
    ReconnectReplay,
    ReconnectSnapshot,
    ResumedWindows,
    SubscribeResult,
    reconnect_form,
)
from ahp.protocol.dialect import (
    SUPPORTED_VERSIONS,
    Dialect,
    envelope_json,
    negotiate,
    result_json,
)
from ahp.protocol.jsonrpc import ErrorCode
from ahp.protocol.state import ROOT_URI
from ahp.server.clients import ClientRecord, RegistryFull
from ahp.server.connection import Connection
from ahp.server.errors import SERVER_LIMIT, Fail, short
from ahp.server.identity import (
    check_client_id,
    check_read_only_id,
    release_forgotten_claims,
    take_identity,
    token_of,
)
from ahp.version import __version__

__all__ = [
    "READ_ONLY_META",
    "SERVER_INFO",
    "initialize",
    "ping",
    "reconnect",
    "subscribe",
    "unsubscribe",
]

log = logging.getLogger("ahp.server")

#: The most scrollback (bytes of text, :attr:`ahp.engine.Terminal.scrollback_bytes`) the
#: snapshots of one ``initialize`` or ``reconnect`` answer may hold; past it the request
#: is refused (-32000) before anything is built. An answer is one frame, encoded whole
#: before its first byte is written: thirty terminals of escape-dense output made one of
#: 126 MB (+220 MiB of RSS) for a read-only viewer, and the default 256 terminals would
#: have made gigabytes. Terminals past it are subscribed one by one (``subscribe``: one
#: snapshot an answer, paced by the server's response pool).
MAX_ANSWER_SCROLLBACK: Final = 32 * 1024 * 1024


def _check_answer_size(conn: Connection, channels: Iterable[str]) -> None:
    """-32000 if the snapshots of ``channels`` together hold more than
    :data:`MAX_ANSWER_SCROLLBACK` (O(1) a channel; nothing is built)."""
    host = conn.host
    total = 0
    count = 0
    for channel in channels:
        if channel != ROOT_URI and channel in host:
            total += host.get(channel).scrollback_bytes
            count += 1
    if total > MAX_ANSWER_SCROLLBACK:
        raise Fail(
            SERVER_LIMIT,
            f"the snapshots of these {count} terminals hold {total} bytes of scrollback, "
            f"more than one answer carries ({MAX_ANSWER_SCROLLBACK}): subscribe to them "
            "one by one (subscribe)",
            {"limit": MAX_ANSWER_SCROLLBACK},
        )


#: Who this server is (``serverInfo``, sent to 1.x clients).
SERVER_INFO: Final = Implementation(name="ahp-terminals", version=__version__)


async def ping(conn: Connection, params: Any) -> None:
    return None


async def initialize(conn: Connection, params: Any) -> Any:
    if conn.record is not None:
        raise Fail(ErrorCode.METHOD_NOT_FOUND, "already initialized")
    p = structure(params, InitializeParams)
    check_client_id(p.clientId)
    version = negotiate(p.protocolVersions)
    if (audit := conn.server.audit) is not None:
        audit.initialize(p.clientId, version, p.protocolVersions, peer=conn.peer)
    if version is None:
        conn.close_request = (1002, "unsupported protocol version")
        raise Fail(
            ErrorCode.UNSUPPORTED_PROTOCOL_VERSION,
            "unsupported protocol version; this host speaks 0.3 to 0.10 and 1.x",
            {"supportedVersions": list(SUPPORTED_VERSIONS)},
        )
    if p.clientInfo is not None:
        log.debug("client %s is %s %s", p.clientId, p.clientInfo.name, p.clientInfo.version)
    check_read_only_id(conn, p.clientId)
    _check_answer_size(conn, dict.fromkeys(p.initialSubscriptions))
    token = token_of(params)
    await take_identity(conn, p.clientId, token)
    bound = token is not None  # (asked for a token: only it resumes this id)
    try:
        record = conn.server.clients.connect(
            p.clientId, version, conn.link, bound=bound, read_only=conn.read_only
        )
    except RegistryFull as exc:
        raise Fail(ErrorCode.PERMISSION_DENIED, str(exc)) from None
    conn.begin(record)
    await release_forgotten_claims(conn)
    snapshots = [s for s in map(conn.subscribe, dict.fromkeys(p.initialSubscriptions)) if s]
    result = InitializeResult(
        protocolVersion=version,
        serverSeq=conn.host.hub.seq,
        snapshots=tuple(snapshots),
        defaultDirectory=conn.server.default_directory,
        serverInfo=SERVER_INFO if conn.dialect is Dialect.V1 else None,
    )
    out = result_json(result, conn.dialect)
    meta: dict[str, Any] = {}
    if conn.read_only:
        meta[READ_ONLY_META] = True
    if token is not None:
        meta[RESUME_META] = record.secret
    if meta:
        out["_meta"] = meta
    return out


async def reconnect(conn: Connection, params: Any) -> Any:
    if conn.record is not None:
        raise Fail(ErrorCode.METHOD_NOT_FOUND, "already initialized")
    form = reconnect_form(params)
    p = structure(params, form)
    check_client_id(p.clientId)
    if conn.read_only:
        check_read_only_id(conn, p.clientId)
    _check_answer_size(conn, _snapshotted(conn, p, conn.server.clients.get(p.clientId)))
    await take_identity(conn, p.clientId, token_of(params))
    record = conn.server.clients.resume(p.clientId, conn.link)
    if (audit := conn.server.audit) is not None:
        version = record.protocol_version if record is not None else None
        audit.initialize(p.clientId, version, peer=conn.peer, reconnect=True)
    await release_forgotten_claims(conn)
    if record is None:
        raise Fail(ErrorCode.NOT_FOUND, "Reconnect client not found")
    conn.begin(record)
    if isinstance(p, ReconnectCursorParams):
        return _recover_channels(conn, p, record)
    assert isinstance(p, ReconnectParams)
    requested = list(dict.fromkeys(p.subscriptions))
    valid = [c for c in requested if c == ROOT_URI or c in conn.host]
    missing = [c for c in requested if c not in valid]
    log_ = conn.host.hub.log
    # Windowed delivery is never granted here, so no windowed subscription resumes.
    windows = ResumedWindows(items=()) if p.windows is not None else None
    result: ReconnectReplay | ReconnectSnapshot
    # A cursor past the server's own sequence was not given by this server (a restart,
    # or a client's bug): nothing can be replayed to it, it gets snapshots; so does
    # cursor 0 (no baseline: a replay would miss what came before its envelopes).
    # So does a channel the client has no snapshot of (never subscribed, or a terminal
    # created again under its URI while it was away), or one whose last snapshot is newer
    # than the cursor (``_replayable``): then every channel gets one.
    if _replays(conn, p, record):
        actions = tuple(
            envelope_json(envelope, conn.dialect)
            for envelope in log_.after(p.lastSeenServerSeq, valid)
        )
        for channel in valid:
            conn.host.hub.subscribe(channel, conn.outbox)
            conn.subscriptions.add(channel)
        result = ReconnectReplay(
            type="replay", actions=actions, missing=tuple(missing), windows=windows
        )
    else:
        snapshots = tuple(s for s in map(conn.subscribe, valid) if s)
        result = ReconnectSnapshot(
            type="snapshot",
            snapshots=snapshots,
            # (1.x: the channels that cannot be resumed; 0.5 had no such field here.)
            missing=tuple(missing) if conn.dialect is Dialect.V1 else None,
            windows=windows,
        )
    return result_json(result, conn.dialect)


def _baseline(conn: Connection, record: ClientRecord | None, channel: str) -> bool:
    """Whether the client holds a snapshot of this very channel to replay onto: one it
    was given, of the terminal that has the URI now (a URI disposed and created again
    while the client was away names another terminal, whose envelopes applied to the
    first one's snapshot mixed the two; a channel it never subscribed to has none)."""
    if record is None or channel not in record.snapshot_of:
        return False
    if channel == ROOT_URI:
        return True
    return channel in conn.host and record.snapshot_of[channel] == conn.host.get(channel).generation


def _replayable(conn: Connection, record: ClientRecord | None, channel: str, seq: int) -> bool:
    """Whether ``channel`` can be resumed from cursor ``seq`` by a replay: the client has
    its baseline, the cursor was given by this server (0 is no cursor; one past the
    server's sequence is not its own) and the replay log still holds what came after.

    A cursor older than the last snapshot this server sent the client of the channel is
    ambiguous: the client may hold that snapshot (then envelopes between the cursor and
    its ``fromSeq`` are in it already, and replaying them repeats them) or may never have
    read it (a ``subscribe`` whose answer the broken connection lost; then skipping them
    loses them). Neither replay is right for both, so such a channel gets a snapshot."""
    hub = conn.host.hub
    return (
        0 < seq <= hub.seq
        and hub.log.can_replay_after(seq)
        and _baseline(conn, record, channel)
        and record is not None
        and seq >= record.snapshot_seq.get(channel, 0)
    )


def _snapshotted(
    conn: Connection, p: ReconnectParams | ReconnectCursorParams, record: ClientRecord | None
) -> list[str]:
    """The channels a ``reconnect`` would answer with snapshots (not replays): form A's
    all when one of them cannot be replayed from its cursor, form B's those that cannot."""
    if isinstance(p, ReconnectCursorParams):
        return [
            c.channel
            for c in p.subscriptions
            if not _replayable(conn, record, c.channel, c.lastSeenServerSeq)
        ]
    return [] if _replays(conn, p, record) else list(dict.fromkeys(p.subscriptions))


def _replays(conn: Connection, p: ReconnectParams, record: ClientRecord | None) -> bool:
    """Whether a form A ``reconnect`` (one cursor for all) is answered with a replay:
    its cursor can be replayed from, and every channel it names that exists, too."""
    seq = p.lastSeenServerSeq
    hub = conn.host.hub
    return (
        0 < seq <= hub.seq
        and hub.log.can_replay_after(seq)
        and all(
            _replayable(conn, record, c, seq)
            for c in dict.fromkeys(p.subscriptions)
            if c == ROOT_URI or c in conn.host
        )
    )


def _recover_channels(conn: Connection, p: ReconnectCursorParams, record: ClientRecord) -> Any:
    """Reconnect form B: one replay, snapshot or missing entry per requested channel,
    each from its own cursor (a snapshot when the cursor is 0 or too old)."""
    cursors: dict[str, int] = {}
    for cursor in p.subscriptions:
        cursors.setdefault(cursor.channel, cursor.lastSeenServerSeq)
    log_ = conn.host.hub.log
    replayable = {
        c: seq
        for c, seq in cursors.items()
        if (c == ROOT_URI or c in conn.host) and _replayable(conn, record, c, seq)
    }
    replays: dict[str, list[Any]] = {c: [] for c in replayable}
    if replayable:
        for envelope in log_.after(min(replayable.values()), replayable):
            if envelope.serverSeq > replayable[envelope.channel]:
                replays[envelope.channel].append(envelope_json(envelope, conn.dialect))
    channels: list[ChannelRecovery] = []
    for channel in cursors:
        if channel in replays:
            conn.host.hub.subscribe(channel, conn.outbox)
            conn.subscriptions.add(channel)
            channels.append(ChannelReplay(channel=channel, actions=tuple(replays[channel])))
            continue
        snapshot = conn.subscribe(channel)
        if snapshot is None:
            channels.append(ChannelMissing(channel=channel))
        else:
            channels.append(ChannelSnapshot(channel=channel, snapshot=snapshot))
    return result_json(ReconnectChannels(channels=tuple(channels)), conn.dialect)


async def subscribe(conn: Connection, params: Any) -> Any:
    p = structure(params, ChannelParams)
    snapshot = conn.subscribe(p.channel)
    if snapshot is None:
        raise Fail(ErrorCode.NOT_FOUND, f"Resource not found: {short(p.channel)}")
    # Windowed delivery (``flowControl``) is declined by leaving it out.
    return result_json(SubscribeResult(snapshot=snapshot), conn.dialect)


async def unsubscribe(conn: Connection, params: Any) -> None:
    p = structure(params, ChannelParams)
    if p.channel in conn.subscriptions:
        conn.subscriptions.discard(p.channel)
        conn.host.hub.unsubscribe(p.channel, conn.outbox)
