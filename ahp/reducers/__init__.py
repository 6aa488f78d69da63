"""Pure reducers for the terminal and root channels, and the scrollback policy."""

from ahp.protocol.state import RootState, TerminalState
from ahp.reducers.root import reduce_root
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
    "DEFAULT_SCROLLBACK",
    "MAX_PARTS",
    "RootState",
    "Scrollback",
    "TerminalState",
    "append_data",
    "content_length",
    "low_water_for",
    "part_length",
    "reduce_root",
    "reduce_terminal",
    "trim",
]
