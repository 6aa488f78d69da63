"""The root channel reducer: the host catalogue (``ahp-root://``), pure.

A terminal host has no agents or sessions; it still carries those fields
through so that any upstream root fixture or client mirror folds identically.
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

__all__ = ["reduce_root"]


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
