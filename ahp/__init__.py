"""ahp-terminals: terminals for AI agents, served over the Agent Host Protocol.

The package is layered so that each layer can be read and tested on its own:
``ahp.protocol`` (wire model and codec, pure), ``ahp.reducers`` (pure state
transitions), ``ahp.vt`` (incremental byte scanner, pure), ``ahp.pty``
(process spawning, the only OS-level code), ``ahp.engine`` (one Trio nursery per
terminal) and ``ahp.server`` (the WebSocket sidecar).
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
