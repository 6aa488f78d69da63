"""Pure reducers for the terminal and root channels, the scrollback policy, and the
terminal core (the reducer stage's rules, :mod:`ahp.reducers.core`)."""

from ahp.protocol.state import RootState, TerminalState
from ahp.reducers.core import Accepted, Rejected, TerminalCore, Verdict
from ahp.reducers.root import heal_root, reduce_root
from ahp.reducers.scrollback import (
    DEFAULT_SCROLLBACK,
    MAX_PARTS,
    Scrollback,
    content_length,
    low_water_for,
    part_length,
    trim,
)
from ahp.reducers.terminal import append_data, reduce_terminal

__all__ = [
    "Accepted",
    "Rejected",
    "TerminalCore",
    "Verdict",
    "DEFAULT_SCROLLBACK",
    "MAX_PARTS",
    "RootState",
    "Scrollback",
    "TerminalState",
    "append_data",
    "content_length",
    "heal_root",
    "low_water_for",
    "part_length",
    "reduce_root",
    "reduce_terminal",
    "trim",
]
