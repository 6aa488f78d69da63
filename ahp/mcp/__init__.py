"""Our terminals as tools for any agent that speaks the Model Context Protocol (MCP).

``python -m ahp mcp`` is an MCP server on stdio (the official ``mcp`` SDK, run
on Trio): tools to run commands, follow and answer them, read screens and manage
terminals, layered thinly over the agent-facing command API
(``Terminal.run(yield_after=)`` / ``CommandHandle``). Layers, each its own module:

* :mod:`ahp.mcp.keys` — named keys to bytes (pure);
* :mod:`ahp.mcp.tools` — tool names, descriptions, schemas, argument checks (pure);
* :mod:`ahp.mcp.render` — results as text and structured content (pure);
* :mod:`ahp.mcp.contract` — the command API the tools rely on, as protocols;
* :mod:`ahp.mcp.backend` — our own host, or a sidecar through ``ahp.client``;
* :mod:`ahp.mcp.output` — what a tool call answers (pure);
* :mod:`ahp.mcp.tracked` — the commands the tools keep, bounded (pure);
* :mod:`ahp.mcp.toolbox` — what each tool does;
* :mod:`ahp.mcp.screen` — the answers owed to stdin lines the SDK would drop (pure);
* :mod:`ahp.mcp.stdio` / :mod:`ahp.mcp.server` — the SDK server, stdio, lifetime;
* :mod:`ahp.mcp.command` — the ``mcp`` subcommand.

Importing this package loads neither Trio nor the SDK.
"""
