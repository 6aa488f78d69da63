"""ahp-terminals: terminals for AI agents, served over the Agent Host Protocol.

One obvious entry point for embedding::

    async with ahp.open_host() as host:
        term = await host.create_terminal(name="build", cwd="/src")
        result = await term.run("pytest -q", timeout=60)

and to let editors watch over AHP, ``await nursery.start(ahp.serve_host, host)``.

The package is layered so that each layer can be read and tested on its own:
``ahp.protocol`` (wire model and codec, pure), ``ahp.reducers`` (pure state
transitions), ``ahp.vt`` (incremental byte scanner, pure), ``ahp.pty``
(process spawning, the only OS-level code), ``ahp.engine`` (one Trio nursery
per terminal), ``ahp.server`` (the WebSocket sidecar) and ``ahp.client`` (a
Trio client).
"""

from typing import TYPE_CHECKING

from ahp.exports import lazy_exports
from ahp.version import __version__

if TYPE_CHECKING:
    from ahp.agent import BackgroundProcess, CommandHandle, CommandResult
    from ahp.agent.screen import Screen
    from ahp.engine import Host, Subscription, Terminal, TerminalExists, TerminalNotFound, open_host
    from ahp.engine.exec import exec_command
    from ahp.protocol import (
        ActionEnvelope,
        ClientClaim,
        CommandPart,
        SessionClaim,
        Snapshot,
        TerminalInfo,
        TerminalState,
        UnclassifiedPart,
    )
    from ahp.pty import SpawnError
    from ahp.server import ServeOptions, Sidecar, serve_host

#: Public name -> module that defines it. Imported on first use, so that
#: ``import ahp.vt`` (pure) or ``python -m ahp --help`` does not load Trio.
_EXPORTS = {
    "Host": "ahp.engine",
    "Subscription": "ahp.engine",
    "Terminal": "ahp.engine",
    "TerminalExists": "ahp.engine",
    "TerminalNotFound": "ahp.engine",
    "open_host": "ahp.engine",
    "ActionEnvelope": "ahp.protocol",
    "ClientClaim": "ahp.protocol",
    "CommandPart": "ahp.protocol",
    "SessionClaim": "ahp.protocol",
    "Snapshot": "ahp.protocol",
    "TerminalInfo": "ahp.protocol",
    "TerminalState": "ahp.protocol",
    "UnclassifiedPart": "ahp.protocol",
    "SpawnError": "ahp.pty",
    "BackgroundProcess": "ahp.agent",
    "CommandHandle": "ahp.agent",
    "CommandResult": "ahp.agent",
    "Screen": "ahp.agent.screen",
    "exec_command": "ahp.engine.exec",
    "ServeOptions": "ahp.server",
    "Sidecar": "ahp.server",
    "serve_host": "ahp.server",
}


__getattr__ = lazy_exports("ahp", _EXPORTS, globals())


__all__ = [
    "ActionEnvelope",
    "BackgroundProcess",
    "ClientClaim",
    "CommandHandle",
    "CommandPart",
    "CommandResult",
    "Host",
    "ServeOptions",
    "SessionClaim",
    "Sidecar",
    "Screen",
    "Snapshot",
    "SpawnError",
    "Subscription",
    "Terminal",
    "TerminalExists",
    "TerminalInfo",
    "TerminalNotFound",
    "TerminalState",
    "UnclassifiedPart",
    "__version__",
    "exec_command",
    "open_host",
    "serve_host",
]
