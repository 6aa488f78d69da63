"""What a tool call answers: :class:`ToolOutput`, and :class:`ToolError` for a call
that cannot be done.

Why a module of its own: the tools (:mod:`ahp.mcp.toolbox`), the commands they
keep (:mod:`ahp.mcp.tracked`), the answers' text (:mod:`ahp.mcp.render`) and
the MCP server (:mod:`ahp.mcp.server`) all speak in these two types, which
depend on nothing. Pure: no I/O.
"""

from __future__ import annotations

from typing import Any

import attrs

__all__ = ["ToolError", "ToolOutput"]


class ToolError(Exception):
    """A call that cannot be done; the message is shown to the model as is."""


@attrs.frozen
class ToolOutput:
    """What a tool call answers: text for the model, optional structured data, error flag."""

    text: str
    data: dict[str, Any] | None = None
    is_error: bool = False
    #: Arguments that were clamped to their bounds, one sentence each (also in ``text``).
    notes: tuple[str, ...] = ()

    #: One line that says what happened (default: the text's first line).
    headline: str = ""

    @property
    def summary(self) -> str:
        """The text of a ``--structured`` answer, whose data carries the rest."""
        return self.headline or self.text.partition("\n")[0]
