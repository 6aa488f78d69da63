"""Published envelopes, encoded once, and the bounded replay log.

Why: every envelope a terminal publishes may go to many subscribers and may be
replayed after a reconnect. :class:`Published` wraps an
:class:`~ahp.protocol.ActionEnvelope` with its JSON-RPC ``action`` notification
frame, encoded lazily and at most once, so ten WebSocket viewers cost one
encode. :class:`ReplayLog` keeps the most recent envelopes of the whole host,
bounded by count *and* by bytes; it knows the highest sequence number it has
evicted, which tells whether a reconnecting client's gap can still be replayed.

Sizes are *memory*, not characters: what the bounds protect is the process's
memory, and a ``str`` holding one character outside the BMP stores every
character in 4 bytes (``len`` would under-count it 4x). :func:`payload_size`
charges ``sys.getsizeof`` (O(1): the header plus 1, 2 or 4 bytes per
character) plus, for non-ASCII text, ``len`` bytes for the UTF-8 copy that
orjson caches on the string when a frame is encoded (a lower bound of that copy,
exact for ASCII-heavy output). Encoding to measure UTF-8 exactly would cost a
copy per envelope.

The replay log keeps envelopes, not :class:`Published` values: a cached frame
(a second copy of the payload, 4 bytes per character when it holds a non-BMP
character) lives only as long as some outbox still holds the envelope, and a
replay re-encodes the (rare) envelopes it needs.
"""

from __future__ import annotations

import sys
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Final

from ahp.protocol.actions import (
    ActionEnvelope,
    RootTerminalsChanged,
    StateAction,
    TerminalData,
    TerminalInput,
)
from ahp.protocol.codec import dumps_utf8, unstructure

__all__ = [
    "ENVELOPE_OVERHEAD",
    "MERGE_ALONE",
    "MERGE_LIMIT",
    "REPLAY_LOG_BYTES",
    "REPLAY_LOG_ENVELOPES",
    "Published",
    "ReplayLog",
    "identity_size",
    "payload_size",
    "wire_size",
]

#: Replay log bounds (envelopes across all channels, and the memory they hold).
REPLAY_LOG_ENVELOPES: Final = 4096
REPLAY_LOG_BYTES: Final = 8 * 1024 * 1024

#: Bytes charged for an envelope beyond its text payload: the ``Published``,
#: ``ActionEnvelope`` and action objects, the ``serverSeq`` int and a queue slot
#: (measured with tracemalloc: ~224 bytes).
ENVELOPE_OVERHEAD: Final = 224

#: Channels up to this many characters are covered by ENVELOPE_OVERHEAD (output's hot
#: path skips measuring them); longer ones, and every origin, are counted.
_SHORT_CHANNEL: Final = 64

#: Largest payload, in characters, that coalescing builds from a run of consecutive
#: ``terminal/data`` (a run never grows past it; a single envelope larger than it is
#: passed on as it is). Characters, not memory: it bounds the copy a merge makes
#: and the size of the frame that carries it (UTF-8, ~1 byte per character of
#: terminal output), while the outbox bounds count the memory queued.
MERGE_LIMIT: Final = 256 * 1024
#: An envelope of at least this many characters is passed on as it is, never merged:
#: its frame is encoded once and shared by every subscriber (a merge copies the text
#: and encodes the copy again, for each subscriber that merges), and at this size a
#: frame's own overhead (~100 bytes) is under 1 % of it. Merging is for runs of
#: small envelopes (a client pays per frame).
MERGE_ALONE: Final = 16 * 1024


def payload_size(text: str) -> int:
    """Memory held by a payload string, in O(1); see the module docstring."""
    size = sys.getsizeof(text)
    return size if text.isascii() else size + len(text)


def wire_size(text: str) -> int:
    """Bytes ``text`` takes in a frame, in O(1): its length, or the UTF-8 upper bound
    (4 bytes a character) when it is not ASCII."""
    return len(text) if text.isascii() else 4 * len(text)


def identity_size(envelope: ActionEnvelope) -> int:
    """Bytes an envelope's frame carries besides its payload that a client chose: the
    channel, the origin's ``clientId`` and a rejection's reason (issue 26: a 1 MB
    ``clientId`` made every 1-byte keystroke echo a 1 MB frame, counted as 225 bytes)."""
    size = wire_size(envelope.channel)
    origin = envelope.origin
    if origin is not None:
        size += wire_size(origin.clientId)
    reason = envelope.rejectionReason
    if reason is not None:
        size += wire_size(reason)
    return size


class Published:
    """An envelope plus its cached wire frame. Immutable once built.

    ``size`` is the memory the envelope holds, and what bounds are enforced
    with: for ``terminal/data`` and ``terminal/input`` (the hot path) without
    encoding (:func:`payload_size` of the text plus :data:`ENVELOPE_OVERHEAD`),
    for every other action by encoding it at once (the frame's size).
    """

    __slots__ = ("_frame", "envelope", "latest_wins", "size")

    def __init__(self, envelope: ActionEnvelope) -> None:
        self.envelope = envelope
        self._frame: bytes | None = None
        action = envelope.action
        #: A queued envelope of this kind is superseded by a later one of its channel
        #: (the root catalogue: each one carries the whole list).
        self.latest_wins = False
        if isinstance(action, TerminalData | TerminalInput):
            # Everything the frame carries: the payload, and the channel and the origin
            # a client chose (bounds count what a subscriber is sent, not only the text).
            self.size = ENVELOPE_OVERHEAD + payload_size(action.data)
            if envelope.origin is not None or len(envelope.channel) > _SHORT_CHANNEL:
                self.size += identity_size(envelope)
        else:
            self.latest_wins = (
                action.__class__ is RootTerminalsChanged
                and envelope.origin is None
                and envelope.rejectionReason is None
            )
            # Rare, usually small, and possibly large (a client's 10 MB title, config or
            # unknown action; a catalogue of long titles): encoded now so that outboxes
            # and the replay log bound the real size, not the 96-byte estimate.
            try:
                self.size = ENVELOPE_OVERHEAD + sys.getsizeof(self.frame)
            except (TypeError, ValueError):  # left for the writer to report
                self.size = ENVELOPE_OVERHEAD

    @property
    def channel(self) -> str:
        return self.envelope.channel

    @property
    def seq(self) -> int:
        return self.envelope.serverSeq

    @property
    def frame(self) -> bytes:
        """The ``action`` notification as a text frame's UTF-8 payload (encoded on first
        use, once for every subscriber)."""
        frame = self._frame
        if frame is None:
            envelope = self.envelope
            action = envelope.action
            cls = action.__class__
            params: dict[str, Any]
            if (cls is TerminalData or cls is TerminalInput) and envelope.rejectionReason is None:
                # The keystroke's two envelopes (its echo, its output) and every output
                # batch, built by hand: the converter's bytes (``tests/test_envelopes``)
                # at a third of its cost (0.9 us against 2.9 for an echo, warm).
                assert isinstance(action, TerminalData | TerminalInput)
                params = {
                    "channel": envelope.channel,
                    "action": {"data": action.data, "type": action.TYPE},
                    "serverSeq": envelope.serverSeq,
                }
                origin = envelope.origin
                if origin is not None:
                    params["origin"] = {"clientId": origin.clientId, "clientSeq": origin.clientSeq}
            else:
                params = unstructure(envelope, ActionEnvelope)
            frame = dumps_utf8({"jsonrpc": "2.0", "method": "action", "params": params})
            self._frame = frame
        return frame

    def mergeable(self) -> bool:
        """True for a server ``terminal/data`` envelope (no origin, no rejection) of
        fewer than :data:`MERGE_ALONE` characters."""
        env = self.envelope
        action = env.action
        return (
            isinstance(action, TerminalData)
            and env.origin is None
            and len(action.data) < MERGE_ALONE
        )

    @staticmethod
    def merge(run: Sequence[Published]) -> Published:
        """One envelope equivalent to ``run``: consecutive mergeable envelopes of one
        channel, in order (one ``"".join``; the last ``serverSeq``)."""
        last = run[-1]
        parts: list[str] = []
        for item in run:
            action = item.envelope.action
            assert isinstance(action, TerminalData)
            parts.append(action.data)
        merged: StateAction = TerminalData(data="".join(parts))
        return Published(ActionEnvelope(channel=last.channel, action=merged, serverSeq=last.seq))


class ReplayLog:
    """The most recent published envelopes of a host, bounded by count and bytes.

    Keeps the envelopes and their sizes, not the :class:`Published` values (whose
    cached frames would double the memory). Owned by the host; appended to by
    whoever publishes (all in one Trio thread).
    """

    def __init__(
        self, *, max_envelopes: int = REPLAY_LOG_ENVELOPES, max_bytes: int = REPLAY_LOG_BYTES
    ) -> None:
        self.max_envelopes = max_envelopes
        self.max_bytes = max_bytes
        self._items: deque[ActionEnvelope] = deque()
        self._sizes: deque[int] = deque()
        self._bytes = 0
        #: Highest serverSeq no longer in the log (0: nothing evicted yet).
        self.evicted_through = 0

    def __len__(self) -> int:
        return len(self._items)

    @property
    def size(self) -> int:
        return self._bytes

    def append(self, item: Published) -> None:
        items, sizes = self._items, self._sizes
        items.append(item.envelope)
        sizes.append(item.size)
        self._bytes += item.size
        while items and (len(items) > self.max_envelopes or self._bytes > self.max_bytes):
            old = items.popleft()
            self._bytes -= sizes.popleft()
            self.evicted_through = old.serverSeq

    def forget(self, channel: str) -> int:
        """Drop every envelope of ``channel`` (a disposed terminal: nobody can replay it
        any more, a reconnect lists it as missing); returns the bytes freed. O(log)."""
        items, sizes = self._items, self._sizes
        if not any(envelope.channel == channel for envelope in items):
            return 0
        kept = [(e, n) for e, n in zip(items, sizes, strict=True) if e.channel != channel]
        freed = self._bytes - sum(n for _, n in kept)
        self._items = deque(e for e, _ in kept)
        self._sizes = deque(n for _, n in kept)
        self._bytes -= freed
        return freed

    def can_replay_after(self, seq: int) -> bool:
        """Whether every envelope newer than ``seq`` is still here."""
        return seq >= self.evicted_through

    def after(self, seq: int, channels: Iterable[str]) -> Iterator[ActionEnvelope]:
        """Envelopes with ``serverSeq > seq`` on ``channels``, ascending."""
        wanted = set(channels)
        for envelope in self._items:
            if envelope.serverSeq > seq and envelope.channel in wanted:
                yield envelope
