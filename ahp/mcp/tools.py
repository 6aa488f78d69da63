"""The MCP tools: names, descriptions, JSON schemas, and checking a call's arguments.

Why a module of its own: what a model sees — the tool names, what each one is
for, every parameter's meaning, unit and default — decides whether it uses the
terminals well (answers a prompt instead of waiting for a timeout, reads a
background server's log instead of restarting it). That text and the schemas
are data, kept here apart from the code that acts on them, and the same schema
that is advertised is the one arguments are checked against, so the two cannot
drift.

Argument checking implements the small JSON Schema subset these schemas use
(object with ``properties``/``required``/``additionalProperties: false``;
``string`` with length bounds; ``integer``/``number`` with bounds; ``boolean``;
``array`` of strings with ``maxItems``) and fills in ``default``. Its messages
name the parameter and say what was expected, for a model to correct itself.
A number outside its ``minimum``/``maximum`` is not refused but *clamped* to the
bound (every number here is a time or a size, whose bounds are named constants),
and the clamp is reported in the answer: a ``timeout`` of ``1e-300`` becomes
:data:`MIN_TIMEOUT`, one of ``1e300`` becomes :data:`MAX_SECONDS`. Only what has
no nearest bound is refused: NaN, a string, a fraction where a count is meant.

Pure: no I/O, no Trio, no MCP SDK.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Final

import attrs

from ahp.agent.status import STATUSES
from ahp.mcp.keys import KEY_SUMMARY, MAX_KEYS

__all__ = [
    "DEFAULT_HEAD_BYTES",
    "DEFAULT_TAIL_BYTES",
    "DEFAULT_WAIT",
    "DEFAULT_YIELD_AFTER",
    "MAX_BUDGET_BYTES",
    "MAX_COMMAND_CHARS",
    "MAX_INPUT_CHARS",
    "MAX_SECONDS",
    "MIN_TIMEOUT",
    "TOOLS",
    "ArgumentError",
    "ToolSpec",
    "check_arguments",
    "tool",
]

#: Seconds ``run_command`` waits before handing back a still-running command.
DEFAULT_YIELD_AFTER: Final = 30.0
#: Seconds ``wait_command`` waits by default.
DEFAULT_WAIT: Final = 30.0
#: The longest any wait or timeout parameter may be (one day).
MAX_SECONDS: Final = 86_400.0
#: The shortest hard ``timeout``: the Ctrl-C it sends must not arrive before the shell
#: has even started the command (a ``timeout`` of 1e-300 left the terminal busy).
MIN_TIMEOUT: Final = 1.0
#: Rendered output kept from the start / the end of a command by default.
DEFAULT_HEAD_BYTES: Final = 4_000
DEFAULT_TAIL_BYTES: Final = 12_000
#: The largest head or tail a call may ask for.
MAX_BUDGET_BYTES: Final = 1_000_000
#: The longest command line accepted.
MAX_COMMAND_CHARS: Final = 65_536
#: The most text one ``send_input`` call may type.
MAX_INPUT_CHARS: Final = 65_536
#: Terminal names: short, printable, no path tricks (a full ``ahp-terminal:/…`` URI also works).
NAME_PATTERN_TEXT: Final = "letters, digits, '.', '_' or '-' (at most 64)"


class ArgumentError(ValueError):
    """A tool was called with arguments that do not fit its schema (message says which)."""


@attrs.frozen
class ToolSpec:
    """One tool as advertised: schema, description and behaviour hints."""

    name: str
    title: str
    description: str
    input_schema: Mapping[str, Any]
    output_schema: Mapping[str, Any] | None = None
    read_only: bool = False
    destructive: bool = False


def _obj(properties: dict[str, Any], required: tuple[str, ...] = ()) -> dict[str, Any]:
    schema: dict[str, Any] = {
        "type": "object",
        "properties": properties,
        "additionalProperties": False,
    }
    if required:
        schema["required"] = list(required)
    return schema


def _seconds(
    description: str, default: float | None = None, minimum: float = 0.0
) -> dict[str, Any]:
    schema: dict[str, Any] = {
        "type": "number",
        "minimum": minimum,
        "maximum": MAX_SECONDS,
        "description": description,
    }
    if default is not None:
        schema["default"] = default
    return schema


_TERMINAL: Final = {
    "type": "string",
    "minLength": 1,
    "maxLength": 200,
    "description": (
        "Terminal name, e.g. 'main' or 'server' (" + NAME_PATTERN_TEXT + "), as shown by "
        "list_terminals."
    ),
}
_COMMAND_ID: Final = {
    "type": "string",
    "minLength": 1,
    "maxLength": 200,
    "description": "The command_id that run_command returned.",
}
_HEAD: Final = {
    "type": "integer",
    "minimum": 0,
    "maximum": MAX_BUDGET_BYTES,
    "default": DEFAULT_HEAD_BYTES,
    "description": (
        "Output budget: bytes of rendered output kept from the START. Output beyond "
        "head_bytes + tail_bytes is cut from the middle and the result says exactly how many "
        "bytes and lines were left out."
    ),
}
_TAIL: Final = {
    "type": "integer",
    "minimum": 0,
    "maximum": MAX_BUDGET_BYTES,
    "default": DEFAULT_TAIL_BYTES,
    "description": "Output budget: bytes of rendered output kept from the END.",
}

#: The structured result of a command (``structuredContent`` of the command tools).
COMMAND_RESULT_SCHEMA: Final = {
    "type": "object",
    "properties": {
        "terminal": {"type": "string", "description": "terminal name"},
        "command_id": {"type": "string"},
        "command": {"type": "string"},
        "status": {
            "type": "string",
            "enum": list(STATUSES),
        },
        "exit_code": {"type": ["integer", "null"]},
        "duration_ms": {"type": "integer"},
        "output": {
            "type": "string",
            "description": "rendered output shown by this answer, within the budget",
        },
        "new_only": {
            "type": "boolean",
            "description": "output is only what is new since the last answer about the command",
        },
        "echo_lines": {
            "type": "integer",
            "description": "lines of typed text, echoed by the terminal, left out of output",
        },
        "notes": {
            "type": "array",
            "items": {"type": "string"},
            "description": "arguments clamped to their bounds, one sentence each",
        },
        "truncated": {"type": "boolean"},
        "omitted_bytes": {"type": "integer"},
        "omitted_lines": {"type": "integer"},
        "timed_out": {"type": "boolean"},
        "waiting_for_input": {"type": "boolean"},
        "alternate_screen": {"type": "boolean"},
        "shell_exited": {"type": "boolean"},
        "background": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"pid": {"type": "integer"}, "command_line": {"type": "string"}},
                "required": ["pid", "command_line"],
            },
        },
        "stderr": {
            "type": "string",
            "description": "run_command with pty false: stderr, within the same budget",
        },
        "signal": {
            "type": ["string", "null"],
            "description": "run_command with pty false: the signal that ended it",
        },
    },
    "required": ["terminal", "command_id", "command", "status", "exit_code", "output"],
}

_CWD: Final = {"type": "string", "minLength": 1, "maxLength": 4096}
_CWD_RULE: Final = (
    "A relative path is taken from the directory the server was started in (never from "
    "where a terminal's shell is now), '~' and '~/…' from the server's home directory; "
    "'-' is a directory named '-'. Default: a new terminal and pty false start in the "
    "server's directory."
)

_FULL: Final = {
    "type": "boolean",
    "default": False,
    "description": (
        "Return the command's whole output (within the head_bytes/tail_bytes budget) "
        "instead of only what is new since the last answer about it."
    ),
}

_AFTER_RUNNING: Final = (
    "If the result's status is 'running', the command keeps running in its terminal: follow it "
    "with read_output or wait_command, type into it with send_input, stop it with interrupt or "
    "kill_command. If the status is 'waiting_for_input', the command is blocked on a prompt (the "
    "prompt is at the end of the output): answer with send_input (e.g. text='y', "
    "keys=['enter']), then wait_command."
)

TOOLS: Final[tuple[ToolSpec, ...]] = (
    ToolSpec(
        name="run_command",
        title="Run a shell command",
        description=(
            "Run a command line in a persistent terminal (a real pty running bash: pipes, "
            "&&, quoting, environment variables and `cd` work and persist between calls in the "
            "same terminal). Returns the exit code and the rendered output (escape sequences "
            "applied, progress bars collapsed to their final state). Returns early, instead of "
            "hanging, when the command waits for input or is still running after yield_after "
            "seconds. " + _AFTER_RUNNING + " Pagers are disabled (PAGER=cat), so `git log` "
            "and the like print and exit. Several commands can run at once in different "
            "terminals; a person may be watching the terminals live."
        ),
        input_schema=_obj(
            {
                "command": {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": MAX_COMMAND_CHARS,
                    "description": "The command line, as typed at a bash prompt.",
                },
                "terminal": {
                    **_TERMINAL,
                    "description": (
                        "Terminal to run in; created if it does not exist. Default: 'main', or "
                        "a new terminal when 'main' is busy with another command. Use separate "
                        "named terminals for long-running things (a dev server in 'server', "
                        "tests in 'main')."
                    ),
                },
                "cwd": {
                    **_CWD,
                    "description": (
                        "Directory to run in. A new terminal starts there; in an existing one "
                        "the shell changes to it first (and stays there); pty false runs "
                        "there. " + _CWD_RULE
                    ),
                },
                "timeout": _seconds(
                    "Hard limit in seconds: when it passes the command is interrupted "
                    "(Ctrl-C), and killed 5 s later if it ignored that; the status is "
                    "'timed_out'. Default: no hard limit.",
                    minimum=MIN_TIMEOUT,
                ),
                "yield_after": _seconds(
                    "Soft limit in seconds: if the command is still running then, return "
                    "with status 'running' and the output so far; the command keeps running.",
                    DEFAULT_YIELD_AFTER,
                ),
                "head_bytes": _HEAD,
                "tail_bytes": _TAIL,
                "pty": {
                    "type": "boolean",
                    "default": True,
                    "description": (
                        "false: run the command line without a terminal, as a child process "
                        "(/bin/sh -c in cwd): stdin is closed, so it cannot wait on a prompt; "
                        "stdout and stderr come back apart (output, stderr) with the exact exit "
                        "code or signal; timeout kills it. Nothing persists between such calls "
                        "and terminal/yield_after do not apply; the answer is final (its "
                        "command_id, exec-<n>, still works with read_output). Use it for "
                        "builds, tests, git."
                    ),
                },
            },
            ("command",),
        ),
        output_schema=COMMAND_RESULT_SCHEMA,
        destructive=True,
    ),
    ToolSpec(
        name="read_output",
        title="Read new output of a command",
        description=(
            "Return the output a command printed since the last answer about it (run_command, "
            "read_output, wait_command, send_input), and its current status, without waiting. "
            "Use it to check on a background command such as a server or a long build."
        ),
        input_schema=_obj(
            {
                "command_id": _COMMAND_ID,
                "full": {
                    "type": "boolean",
                    "default": False,
                    "description": (
                        "Return all the output kept for the command (within the tail_bytes "
                        "budget) instead of only what is new."
                    ),
                },
                "tail_bytes": {
                    **_TAIL,
                    "description": "At most this many bytes (the most recent) are returned.",
                },
            },
            ("command_id",),
        ),
        output_schema=COMMAND_RESULT_SCHEMA,
        read_only=True,
    ),
    ToolSpec(
        name="wait_command",
        title="Wait for a command",
        description=(
            "Wait until a command finishes, starts waiting for input, or `timeout` seconds "
            "pass (then status stays 'running'; waiting never stops the command). Returns the "
            "status and the output printed since the last answer about this command "
            "(full=true: all of it)."
        ),
        input_schema=_obj(
            {
                "command_id": _COMMAND_ID,
                "timeout": _seconds("Seconds to wait at most.", DEFAULT_WAIT),
                "full": _FULL,
                "head_bytes": _HEAD,
                "tail_bytes": _TAIL,
            },
            ("command_id",),
        ),
        output_schema=COMMAND_RESULT_SCHEMA,
        read_only=True,
    ),
    ToolSpec(
        name="send_input",
        title="Type into a terminal",
        description=(
            "Type text and/or press keys in a running command (command_id) or a terminal. "
            "`text` is typed literally (no Enter is added); `keys` are pressed after it, "
            "e.g. text='yes', keys=['enter'] answers a prompt; keys=['ctrl-c'] interrupts; "
            "keys=['q'] is not a key name, use text='q'. Known keys: " + KEY_SUMMARY + ". "
            "With `wait` > 0 and a command_id, then waits like wait_command and returns the "
            "command's status and the output since the last answer (the terminal's echo of "
            "multi-line text is not repeated)."
        ),
        input_schema=_obj(
            {
                "command_id": _COMMAND_ID,
                "terminal": {**_TERMINAL, "description": "Terminal to type into (or command_id)."},
                "text": {
                    "type": "string",
                    "maxLength": MAX_INPUT_CHARS,
                    "description": "Text typed as is. Use keys=['enter'] to submit it.",
                },
                "keys": {
                    "type": "array",
                    "items": {"type": "string", "minLength": 1, "maxLength": 32},
                    "maxItems": MAX_KEYS,
                    "description": "Key names pressed in order after the text.",
                },
                "wait": {
                    "type": "number",
                    "minimum": 0,
                    "maximum": MAX_SECONDS,
                    "default": 0,
                    "description": (
                        "Seconds to wait afterwards for the command (needs command_id); 0 "
                        "returns at once."
                    ),
                },
                "full": _FULL,
            }
        ),
        destructive=True,
    ),
    ToolSpec(
        name="interrupt",
        title="Interrupt (Ctrl-C)",
        description=(
            "Send Ctrl-C to the command running in a terminal (by command_id or terminal "
            "name) and return the command's result once it stopped (up to a few seconds). "
            "Use kill_command if it ignores Ctrl-C."
        ),
        input_schema=_obj({"command_id": _COMMAND_ID, "terminal": _TERMINAL}),
        destructive=True,
    ),
    ToolSpec(
        name="kill_command",
        title="Kill a command",
        description=(
            "Kill a command's whole process group (SIGKILL), including anything it started "
            "in the same group, and return its final result. The terminal stays usable."
        ),
        input_schema=_obj({"command_id": _COMMAND_ID}, ("command_id",)),
        output_schema=COMMAND_RESULT_SCHEMA,
        destructive=True,
    ),
    ToolSpec(
        name="list_terminals",
        title="List terminals",
        description=(
            "List the terminals with their state: idle at a prompt, running a command (with "
            "its command_id and status), or exited; plus title and working directory. With a "
            "sidecar (--connect), says first when the connection to it is down, and for how long."
        ),
        input_schema=_obj({}),
        output_schema={
            "type": "object",
            "properties": {
                "terminals": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {
                            "terminal": {"type": "string"},
                            "uri": {"type": "string"},
                            "state": {"type": "string", "enum": ["idle", "busy", "exited"]},
                            "title": {"type": "string"},
                            "cwd": {"type": ["string", "null"]},
                            "exit_code": {"type": ["integer", "null"]},
                            "command_id": {"type": ["string", "null"]},
                            "command": {"type": ["string", "null"]},
                            "command_status": {"type": ["string", "null"]},
                        },
                        "required": ["terminal", "uri", "state"],
                    },
                },
                "connection": {"type": "string"},
            },
            "required": ["terminals"],
        },
        read_only=True,
    ),
    ToolSpec(
        name="read_screen",
        title="Show a terminal's screen",
        description=(
            "Return what a terminal's screen shows right now, rendered as text rows, with "
            "the cursor position and whether a full-screen program (alternate screen: vi, "
            "less, top) is active. Use it to see the state of an interactive program."
        ),
        input_schema=_obj({"terminal": _TERMINAL}, ("terminal",)),
        output_schema={
            "type": "object",
            "properties": {
                "terminal": {"type": "string"},
                "text": {"type": "string"},
                "cursor_row": {"type": "integer"},
                "cursor_col": {"type": "integer"},
                "alternate_screen": {"type": "boolean"},
                "note": {
                    "type": "string",
                    "description": "present when the screen was rendered smaller than it is",
                },
            },
            "required": ["terminal", "text", "cursor_row", "cursor_col", "alternate_screen"],
        },
        read_only=True,
    ),
    ToolSpec(
        name="create_terminal",
        title="Create a terminal",
        description=(
            "Create a new terminal (a bash shell on a pty). run_command creates terminals on "
            "demand, so this is only needed for a specific size or starting directory."
        ),
        input_schema=_obj(
            {
                "terminal": {
                    **_TERMINAL,
                    "description": "Name for the terminal. Default: a fresh name.",
                },
                "cwd": {**_CWD, "description": "Starting directory. " + _CWD_RULE},
                "cols": {"type": "integer", "minimum": 20, "maximum": 500, "default": 120},
                "rows": {"type": "integer", "minimum": 5, "maximum": 200, "default": 40},
            }
        ),
    ),
    ToolSpec(
        name="close_terminal",
        title="Close a terminal",
        description=(
            "Close a terminal: its shell and everything running in it are ended (hang-up, "
            "then kill)."
        ),
        input_schema=_obj({"terminal": _TERMINAL}, ("terminal",)),
        destructive=True,
    ),
)

_BY_NAME: Final = {spec.name: spec for spec in TOOLS}


def tool(name: str) -> ToolSpec:
    """The tool called ``name`` (``ArgumentError`` naming the known tools otherwise)."""
    spec = _BY_NAME.get(name)
    if spec is None:
        raise ArgumentError(f"unknown tool {name!r}; the tools are: {', '.join(_BY_NAME)}")
    return spec


def _type_name(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def _check(where: str, schema: Mapping[str, Any], value: Any, notes: list[str]) -> Any:
    kind = schema.get("type")
    if kind == "string":
        if not isinstance(value, str):
            raise ArgumentError(f"{where} must be a string, got {_type_name(value)}")
        if len(value) < schema.get("minLength", 0):
            raise ArgumentError(f"{where} must not be empty")
        if len(value) > schema.get("maxLength", math.inf):
            raise ArgumentError(f"{where} is too long (at most {schema['maxLength']} characters)")
        if "\x00" in value:
            raise ArgumentError(f"{where} must not contain NUL characters")
        return value
    if kind == "boolean":
        if not isinstance(value, bool):
            raise ArgumentError(f"{where} must be true or false, got {_type_name(value)}")
        return value
    if kind in ("integer", "number"):
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ArgumentError(f"{where} must be a number, got {_type_name(value)}")
        if math.isnan(value):
            raise ArgumentError(f"{where} must be a number, got NaN")
        low = schema.get("minimum", -math.inf)
        high = schema.get("maximum", math.inf)
        if value < low or value > high:
            bound = low if value < low else high
            side = "below the least" if value < low else "above the most"
            name = where.partition(": ")[2] or where
            notes.append(f"{name} {value!r} is {side} allowed: {bound!r} was used")
            value = bound
        if kind == "integer":
            if isinstance(value, float) and not value.is_integer():
                raise ArgumentError(f"{where} must be a whole number, got {value}")
            value = int(value)
        return value
    if kind == "array":
        if not isinstance(value, list):
            raise ArgumentError(f"{where} must be an array, got {_type_name(value)}")
        if len(value) > schema.get("maxItems", math.inf):
            raise ArgumentError(f"{where} has too many items (at most {schema['maxItems']})")
        return [
            _check(f"{where}[{i}]", schema["items"], item, notes) for i, item in enumerate(value)
        ]
    raise AssertionError(f"unsupported schema type {kind!r}")  # a bug in TOOLS, not input


def check_arguments(
    spec: ToolSpec, arguments: Mapping[str, Any] | None, notes: list[str] | None = None
) -> dict[str, Any]:
    """``arguments`` checked against ``spec.input_schema``, with defaults filled in.

    A number beyond its bounds is clamped to the bound; each clamp appends one
    sentence to ``notes`` (for the answer to say so).

    Raises:
        ArgumentError: a missing required or unknown parameter, or a value of the
            wrong type or out of its bounds; the message names the parameter.
    """
    if notes is None:
        notes = []
    schema = spec.input_schema
    properties: Mapping[str, Any] = schema["properties"]
    given = dict(arguments or {})
    unknown = sorted(set(given) - set(properties))
    if unknown:
        known = ", ".join(properties) or "none"
        raise ArgumentError(f"{spec.name}: unknown parameter {unknown[0]!r} (parameters: {known})")
    missing = [name for name in schema.get("required", ()) if given.get(name) is None]
    if missing:
        raise ArgumentError(f"{spec.name}: missing required parameter {missing[0]!r}")
    checked: dict[str, Any] = {}
    for name, prop in properties.items():
        value = given.get(name)
        if value is None:  # JSON null means "not given", as models often send it
            checked[name] = prop.get("default")
        else:
            checked[name] = _check(f"{spec.name}: {name!r}", prop, value, notes)
    return checked
