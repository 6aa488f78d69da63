"""A client's local copy of a channel: confirmed state plus pending actions.

Why: AHP clients apply their own dispatched actions optimistically (write-ahead)
and reconcile when the server's echo arrives. The confirmed state only ever
moves by server envelopes, folded with the project's own reducers, so two
clients that saw the same envelopes hold equal confirmed states. Pending
actions are re-applied on top for the :attr:`Mirror.state` view; an echo of our
own action confirms (pops) it, a rejection drops it.

Terminal I/O is deliberately not optimistic: ``terminal/input`` is a reducer
no-op and output only arrives as server ``terminal/data``.

Memory: a terminal mirror keeps at most ``scrollback`` characters and
:data:`~ahp.reducers.MAX_PARTS` parts (the same oldest-first policy as the
server, :class:`ahp.reducers.Scrollback`), so a client
following a flood for days stays bounded. Because the server trims at its own
points, two parties' retained heads may differ; the retained tails agree.
"""

from __future__ import annotations

from collections import deque

from ahp.protocol.actions import ActionEnvelope, StateAction
from ahp.protocol.state import ChannelState, RootState, TerminalState
from ahp.reducers import Scrollback, reduce_root, reduce_terminal

__all__ = ["Mirror", "reduce_channel"]


def reduce_channel(state: ChannelState, action: StateAction) -> ChannelState:
    if isinstance(state, TerminalState):
        return reduce_terminal(state, action)
    assert isinstance(state, RootState)
    return reduce_root(state, action)


class Mirror:
    """One channel's state as this client knows it."""

    def __init__(
        self,
        channel: str,
        state: ChannelState,
        from_seq: int,
        client_id: str,
        *,
        scrollback: int | None = None,
    ) -> None:
        self.channel = channel
        self.scrollback = scrollback
        self._scrollback: Scrollback | None = None
        if scrollback is not None and isinstance(state, TerminalState):
            self._scrollback = Scrollback(scrollback, state=state)
        self.confirmed = state
        self.from_seq = from_seq
        self.client_id = client_id
        self.pending: deque[tuple[int, StateAction]] = deque()
        self.last_seq = from_seq

    @property
    def state(self) -> ChannelState:
        """Confirmed state with pending (unconfirmed) actions applied on top."""
        state = self.confirmed
        for _, action in self.pending:
            state = reduce_channel(state, action)
        return state

    def reset(self, state: ChannelState, from_seq: int) -> None:
        """Replace the state by a fresh snapshot; pending actions are dropped."""
        self.confirmed = state
        if self.scrollback is not None and isinstance(state, TerminalState):
            self._scrollback = Scrollback(self.scrollback, state=state)
        self.from_seq = from_seq
        self.last_seq = from_seq
        self.pending.clear()

    def add_pending(self, client_seq: int, action: StateAction) -> None:
        self.pending.append((client_seq, action))

    def apply(self, envelope: ActionEnvelope) -> None:
        """Fold one server envelope in (envelopes at or below ``from_seq`` are ignored)."""
        if envelope.serverSeq <= self.from_seq:
            return
        self.last_seq = max(self.last_seq, envelope.serverSeq)
        origin = envelope.origin
        if origin is not None and origin.clientId == self.client_id:
            # Our own action: confirm (or drop on rejection) its pending entry.
            while self.pending and self.pending[0][0] <= origin.clientSeq:
                self.pending.popleft()
        if envelope.rejectionReason is None:
            action = envelope.action
            state = reduce_channel(self.confirmed, action)
            if self._scrollback is not None and isinstance(state, TerminalState):
                state = self._scrollback.account(state, action)
            self.confirmed = state
