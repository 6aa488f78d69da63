"""Pure terminal-stream processing: escape scanning and shell-integration tracking.

Nothing in this package performs I/O, reads a clock or imports trio, ``os``,
``socket`` or ``fcntl`` (``tests/test_vt_boundary.py`` enforces it): the engine
feeds bytes and timestamps in and publishes what comes out.
"""

from ahp.vt.events import (
    CommandFinished,
    CommandLine,
    CommandStart,
    CwdReported,
    Event,
    PromptEnd,
    PromptStart,
    Property,
    ShellIntegrationEvent,
    Text,
    TitleChanged,
)
from ahp.vt.integration import CommandTracker, events_to_actions
from ahp.vt.parser import OutputParser
from ahp.vt.scanner import MAX_PENDING_ESCAPE, MIN_PENDING_ESCAPE, Scanner, unescape_value

__all__ = [
    "MAX_PENDING_ESCAPE",
    "MIN_PENDING_ESCAPE",
    "OutputParser",
    "CommandFinished",
    "CommandLine",
    "CommandStart",
    "CommandTracker",
    "CwdReported",
    "Event",
    "PromptEnd",
    "PromptStart",
    "Property",
    "Scanner",
    "ShellIntegrationEvent",
    "Text",
    "TitleChanged",
    "events_to_actions",
    "unescape_value",
]
