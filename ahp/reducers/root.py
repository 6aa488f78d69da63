"""The root channel reducer: the host catalogue (``ahp-root://``), pure.

A terminal host has no agents or sessions; it still carries those fields
through so that any upstream root fixture or client mirror folds identically.

:func:`heal_root` is the root counterpart of the terminal core's healing value:
the upstream TypeScript ``AhpStateMirror`` (0.5.1 and 0.8 clients, driven against
this server) applies every envelope it receives, a rejected one included, so a
client whose ``root/terminalsChanged`` was refused would keep the list it forged
until the next catalogue change. The server follows such a rejection with the
true value, sent to the sender only.
"""

from __future__ import annotations

from attrs import evolve

from ahp.protocol.actions import (
    RootActiveSessionsChanged,
    RootAgentsChanged,
    RootConfigChanged,
    RootTerminalsChanged,
    StateAction,
)
from ahp.protocol.state import RootState

__all__ = ["heal_root", "reduce_root"]


def reduce_root(state: RootState, action: StateAction) -> RootState:
    """Apply one action to the root state; unknown or foreign actions are no-ops."""
    match action:
        case RootTerminalsChanged(terminals=terminals):
            return evolve(state, terminals=terminals)
        case RootAgentsChanged(agents=agents):
            return evolve(state, agents=agents)
        case RootActiveSessionsChanged(activeSessions=count):
            return evolve(state, activeSessions=count)
        case RootConfigChanged(config=values, replace=replace):
            if state.config is None:
                return state
            merged = dict(values) if replace else {**state.config.values, **values}
            return evolve(state, config=evolve(state.config, values=merged))
        case _:
            return state


def heal_root(state: RootState, rejected: StateAction) -> StateAction | None:
    """The action that restores ``state`` in a mirror that applied ``rejected``.

    None when applying ``rejected`` changes nothing that an action can set back:
    ``root/configChanged`` is a no-op without a config, and a forged
    ``root/activeSessionsChanged`` cannot be undone while the host has no count
    (the field is absent here, and no action removes it).
    """
    match rejected:
        case RootTerminalsChanged():
            return RootTerminalsChanged(terminals=state.terminals or ())
        case RootAgentsChanged():
            return RootAgentsChanged(agents=state.agents)
        case RootActiveSessionsChanged() if state.activeSessions is not None:
            return RootActiveSessionsChanged(activeSessions=state.activeSessions)
        case _:
            return None
