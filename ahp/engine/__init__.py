"""The Trio engine: terminals as nurseries, one host, sequencing and fan-out."""

from ahp.engine.envelopes import Published, ReplayLog
from ahp.engine.host import Host, TerminalExists, TerminalNotFound, open_host
from ahp.engine.hub import Hub
from ahp.engine.launch import TerminalSpec
from ahp.engine.outbox import Outbox
from ahp.engine.subscription import Subscription
from ahp.engine.terminal import Terminal

__all__ = [
    "Host",
    "Hub",
    "Outbox",
    "Published",
    "ReplayLog",
    "Subscription",
    "Terminal",
    "TerminalExists",
    "TerminalNotFound",
    "TerminalSpec",
    "open_host",
]
