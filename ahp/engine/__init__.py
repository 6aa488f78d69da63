"""The Trio engine: terminals as nurseries, one host, sequencing and fan-out.

Each terminal (:mod:`ahp.engine.terminal`) is a nursery of stage tasks — pty-read,
parse, reducer, input-write, exit watcher — joined by bounded memory channels;
the stages' logic lives in sans-I/O cores (:class:`ahp.vt.OutputParser`,
:class:`ahp.reducers.TerminalCore`) that the tasks only drive. The reducer task
publishes through the host's :class:`Hub` (global ``serverSeq``, replay log)
into each subscriber's bounded :class:`Outbox`, drained by that subscriber's own
task (a WebSocket connection's writer, a :class:`Subscription`'s consumer).
Launch preparation (:mod:`ahp.engine.launch`) runs before a terminal exists.
The engine never imports the server or the client.
"""

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
