"""Published envelopes, encoded once, and the bounded replay log.

Why: every envelope a terminal publishes may go to many subscribers and may be
replayed after a reconnect. :class:`Published` wraps an
:class:`~ahp.protocol.ActionEnvelope` with its JSON-RPC ``action`` notification
frame, encoded lazily and at most once, so ten WebSocket viewers cost one
encode. :class:`ReplayLog` keeps the most recent envelopes of the whole host,
bounded by count *and* by bytes; it knows the highest sequence number it has
evicted, which tells whether a reconnecting client's gap can still be replayed.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator
from typing import Final

from ahp.protocol.actions import ActionEnvelope, StateAction, TerminalData, TerminalInput
from ahp.protocol.codec import dumps, unstructure

__all__ = ["REPLAY_LOG_BYTES", "REPLAY_LOG_ENVELOPES", "Published", "ReplayLog"]

#: Replay log bounds (envelopes across all channels, and their payload bytes).
REPLAY_LOG_ENVELOPES: Final = 4096
REPLAY_LOG_BYTES: Final = 8 * 1024 * 1024

#: Bytes charged for an envelope beyond its text payload (keys, numbers, framing).
ENVELOPE_OVERHEAD: Final = 96


class Published:
    """An envelope plus its cached wire frame. Immutable once built.

    ``size`` approximates the frame length: for ``terminal/data`` and
    ``terminal/input`` (the hot path) without encoding it (payload text plus a
    fixed overhead), for every other action by encoding it at once; bounds are
    enforced with it.
    """

    __slots__ = ("_frame", "envelope", "size")

    def __init__(self, envelope: ActionEnvelope) -> None:
        self.envelope = envelope
        self._frame: str | None = None
        action = envelope.action
        if isinstance(action, TerminalData | TerminalInput):
            self.size = ENVELOPE_OVERHEAD + len(action.data)
        else:
            # Rare, usually small, and possibly large (a client's 10 MB title, config or
            # unknown action; a catalogue of long titles): encoded now so that outboxes
            # and the replay log bound the real size, not the 96-byte estimate.
            try:
                self.size = len(self.frame)
            except (TypeError, ValueError):  # left for the writer to report
                self.size = ENVELOPE_OVERHEAD

    @property
    def channel(self) -> str:
        return self.envelope.channel

    @property
    def seq(self) -> int:
        return self.envelope.serverSeq

    @property
    def frame(self) -> str:
        """The ``action`` notification as one JSON text frame (encoded on first use)."""
        frame = self._frame
        if frame is None:
            frame = dumps(
                {
                    "jsonrpc": "2.0",
                    "method": "action",
                    "params": unstructure(self.envelope, ActionEnvelope),
                }
            )
            self._frame = frame
        return frame

    def mergeable(self) -> bool:
        """True for a server ``terminal/data`` envelope (no origin, no rejection)."""
        env = self.envelope
        return isinstance(env.action, TerminalData) and env.origin is None

    def merged_with(self, later: Published) -> Published:
        """One envelope equivalent to ``self`` then ``later`` (both mergeable, same channel)."""
        first = self.envelope.action
        second = later.envelope.action
        assert isinstance(first, TerminalData)
        assert isinstance(second, TerminalData)
        action: StateAction = TerminalData(data=first.data + second.data)
        return Published(ActionEnvelope(channel=self.channel, action=action, serverSeq=later.seq))


class ReplayLog:
    """The most recent published envelopes of a host, bounded by count and bytes.

    Owned by the host; appended to by whoever publishes (all in one Trio thread).
    """

    def __init__(
        self, *, max_envelopes: int = REPLAY_LOG_ENVELOPES, max_bytes: int = REPLAY_LOG_BYTES
    ) -> None:
        self.max_envelopes = max_envelopes
        self.max_bytes = max_bytes
        self._items: deque[Published] = deque()
        self._bytes = 0
        #: Highest serverSeq no longer in the log (0: nothing evicted yet).
        self.evicted_through = 0

    def __len__(self) -> int:
        return len(self._items)

    @property
    def size(self) -> int:
        return self._bytes

    def append(self, item: Published) -> None:
        self._items.append(item)
        self._bytes += item.size
        while self._items and (
            len(self._items) > self.max_envelopes or self._bytes > self.max_bytes
        ):
            old = self._items.popleft()
            self._bytes -= old.size
            self.evicted_through = old.seq

    def can_replay_after(self, seq: int) -> bool:
        """Whether every envelope newer than ``seq`` is still here."""
        return seq >= self.evicted_through

    def after(self, seq: int, channels: Iterable[str]) -> Iterator[Published]:
        """Envelopes with ``serverSeq > seq`` on ``channels``, ascending."""
        wanted = set(channels)
        for item in self._items:
            if item.seq > seq and item.channel in wanted:
                yield item
