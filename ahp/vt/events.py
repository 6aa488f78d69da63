"""Events produced by :class:`ahp.vt.scanner.Scanner`.

Why separate classes rather than tuples: the engine and the command tracker
dispatch with ``match event:``, and frozen attrs classes give exhaustive,
typed patterns, cheap equality for tests and immutability (an event list can be
handed around without copying). Every event is pure data: nothing here knows
about clocks, actions or the wire.
"""

from __future__ import annotations

from typing import Literal

from attrs import field, frozen

__all__ = [
    "CommandFinished",
    "CommandLine",
    "CommandStart",
    "CwdReported",
    "Event",
    "OscFamily",
    "PromptEnd",
    "PromptStart",
    "Property",
    "ShellIntegrationEvent",
    "Text",
    "TitleChanged",
]

#: Which OSC family carried a mark: ``633`` (VS Code style, what our scripts send) or ``133``
#: (FinalTerm style, sent by shells and prompt themes with their own integration, e.g. fish 4).
#: Compared with ``eq=False``: the two families mean the same thing, so a mark equals its twin
#: from the other family; only the command tracker looks at ``osc``, to avoid counting a command
#: twice when a shell sends both.
OscFamily = Literal[633, 133]


@frozen
class Text:
    """Decoded terminal output to publish (never empty).

    It keeps every escape sequence the scanner passes through (colours, cursor
    movement, OSC 8 links, titles); shell-integration sequences are removed.
    """

    data: str


@frozen
class TitleChanged:
    """OSC 0 or OSC 2 set the window title (the sequence itself stays in the text)."""

    title: str


@frozen
class CwdReported:
    """The shell reported its working directory, as a normalised ``file:///`` URI.

    Sources: OSC 7 (passed through in the text, ``shell_integration=False``),
    ``OSC 633 ; P ; Cwd=<path>`` (removed from the text, ``shell_integration=True``)
    and OSC 1337 ``CurrentDir=<path>`` (passed through).
    """

    uri: str
    shell_integration: bool = False
    #: The nonce after the path (``633;P;Cwd=<path>;<nonce>``), if any (see :class:`CommandStart`).
    nonce: str | None = field(default=None, eq=False, kw_only=True)


@frozen
class PromptStart:
    """``633;A`` / ``133;A``: the prompt is about to be printed."""

    osc: OscFamily = field(default=633, eq=False, kw_only=True)


@frozen
class PromptEnd:
    """``633;B`` / ``133;B``: the prompt ended; the user types the command next."""

    osc: OscFamily = field(default=633, eq=False, kw_only=True)


@frozen
class CommandStart:
    """``633;C[;<nonce>]`` / ``133;C``: the command line was accepted; its output follows.

    Our shell scripts sign ``C``, ``D`` and ``P`` with the terminal's nonce, as ``E``:
    program output can print these marks too (``cat`` of a file holding them), and in
    a shell we injected only signed ones may start or finish a command.
    """

    osc: OscFamily = field(default=633, eq=False, kw_only=True)
    nonce: str | None = field(default=None, eq=False, kw_only=True)


@frozen
class CommandFinished:
    """``633;D[;code[;<nonce>]]`` / ``133;D[;code]``: the command ended (``None``: no or
    bad code); signed as :class:`CommandStart` is."""

    exit_code: int | None
    osc: OscFamily = field(default=633, eq=False, kw_only=True)
    nonce: str | None = field(default=None, eq=False, kw_only=True)


@frozen
class CommandLine:
    """``633;E;<command line>;<nonce>``: the (unescaped) command line about to run.

    Untrusted as such: program output can forge it, so only a line whose
    ``nonce`` equals the terminal's secret nonce may be believed.
    """

    command_line: str
    nonce: str | None


@frozen
class Property:
    """``633;P;<key>=<value>[;<nonce>]`` other than ``Cwd`` (unescaped), e.g.
    ``IsWindows=True``."""

    key: str
    value: str
    nonce: str | None = field(default=None, eq=False, kw_only=True)


#: Events that only shell integration produces (all of them removed from the text).
ShellIntegrationEvent = (
    PromptStart | PromptEnd | CommandStart | CommandFinished | CommandLine | Property
)

Event = Text | TitleChanged | CwdReported | ShellIntegrationEvent
