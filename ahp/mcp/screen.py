"""The answer owed to a stdin line that the SDK's stdio transport would drop unanswered.

Why: the SDK's transport (``mcp.server.stdio``, mcp 2.3) validates each line
with ``mcp_types.jsonrpc_message_adapter``; a line that fails becomes an
exception in the session's stream, which logs it at debug level and answers
nothing. A client that sent a request in such a line waits forever: a line
that is not JSON, a request without ``"jsonrpc"``, a string holding half of a
surrogate pair (``"\\udcff"``, as ``json.dumps`` and ``JSON.stringify`` write a
string cut inside an emoji), an id of 5,000 digits, params nested 3,000 deep.
JSON-RPC 2.0 owes each of them an error (-32700 with id null for a line that
is not JSON, -32600 for JSON that is not a valid request, with the id when one
can be read). :func:`screen` validates the line exactly as the SDK will, so a
line the SDK takes goes on unchanged; for one it would refuse, it works out the
answer from Python's own parse of the line. :class:`ahp.mcp.stdio.ScreenedLines`
writes the answers. Pure: no I/O.

A lone surrogate in a ``tools/call``'s arguments is answered as a tool error
(``isError``), not a JSON-RPC error: ``docs/mcp.md`` promises that bad
arguments are tool errors whose message says what to do, and clients hand tool
errors to the model, which wrote the argument and can send it again as valid
Unicode, while a JSON-RPC error usually stops at the client (an integer of more
than :data:`MAX_INT_DIGITS` digits in the arguments is a tool error too). One
anywhere else is -32602 in the params (the tool's name, ``initialize``'s client
info) and -32600 outside them (the method), naming where it is. Nothing with a
lone surrogate is run: replacing it (with U+FFFD) would run a command other
than the one sent. Bytes that are not UTF-8 are the same case: the reader decodes
a line with ``surrogateescape`` (:class:`ahp.mcp.stdio.StdinLines`), so such a
byte arrives here as a lone surrogate written literally in the line, and its
answer names the byte (``0xff``) rather than a surrogate. A request whose id the
SDK takes for a notification's (``true``, ``1.5``, ``null``: MCP ids are strings
or integers) is answered -32600 too.

Cost: every line is validated twice (here and by the SDK), both in pydantic-core;
a refused line is parsed once more by :mod:`json`. Bounds: Python's parse of a
refused line stops at the interpreter's recursion limit (about 1,000 levels;
then only the members before the deep one are read, for the id) and does not
convert integers of more than :data:`MAX_INT_DIGITS` digits.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any, Final

import attrs
import mcp_types
import pydantic

__all__ = [
    "Answer",
    "INVALID_PARAMS",
    "INVALID_REQUEST",
    "MAX_DEPTH",
    "MAX_INT_DIGITS",
    "PARSE_ERROR",
    "Screened",
    "screen",
    "too_long",
]

PARSE_ERROR: Final = -32700
INVALID_REQUEST: Final = -32600
INVALID_PARAMS: Final = -32602

#: The deepest nesting of arrays and objects a line may have (the message itself is level
#: 1): the SDK's JSON parser (jiter, in pydantic-core) refuses a deeper line ("recursion
#: limit exceeded"), which is then answered -32600 naming this bound. Measured with mcp
#: 2.3.0 / pydantic-core 2; ``tests/test_mcp_stdio.py`` checks the parser still agrees.
MAX_DEPTH: Final = 201

#: The most digits an integer in a line may have: the SDK's parser refuses a longer one
#: ("number out of range"), and Python's ``int`` would by default too (``sys.int_info``'s
#: 4300); Python's parse here keeps a longer one as its digit count, unconverted.
MAX_INT_DIGITS: Final = 4300

#: An answer to a line: an error, or (a tool error) a result.
Answer = mcp_types.JSONRPCError | mcp_types.JSONRPCResponse


@attrs.frozen
class Screened:
    """What to do with one line: hand it to the SDK, or answer it (or neither)."""

    #: Hand the line to the SDK (it takes it).
    forward: bool
    #: The answer to write back (never with ``forward``).
    answer: Answer | None = None
    #: Why the line was not forwarded, for the log (empty when it was, or for a blank line).
    reason: str = ""
    #: The message the SDK will read from a forwarded line (the reader keeps track of the
    #: requests still owed an answer: ``ahp.mcp.stdio.InFlight``).
    message: mcp_types.JSONRPCMessage | None = None


@attrs.frozen
class _LongInt:
    """An integer of more than :data:`MAX_INT_DIGITS` digits, left unconverted."""

    digits: int


class _NotJson(ValueError):
    """``NaN``, ``Infinity``: Python's parser takes them, JSON does not."""


def _parse_int(text: str) -> int | _LongInt:
    digits = len(text.lstrip("-"))
    return _LongInt(digits) if digits > MAX_INT_DIGITS else int(text)


def _parse_constant(text: str) -> Any:
    raise _NotJson(f"{text} is not a JSON value")


#: A surrogate code point: Python's parser keeps a lone ``\\udcff`` as one (a valid
#: pair is decoded to one character, so none is left of it).
_SURROGATE: Final = re.compile("[\ud800-\udfff]")

#: A byte that was not UTF-8, as ``surrogateescape`` decodes it (0x80-0xff to U+DC80-U+DCFF).
_RAW_BYTE: Final = re.compile("[\udc80-\udcff]")

_DECODER: Final = json.JSONDecoder(parse_int=_parse_int, parse_constant=_parse_constant)


def too_long(max_line_bytes: int) -> Screened:
    """The answer to a line the reader dropped for being over ``max_line_bytes`` (its id
    was not read: the line is not kept)."""
    return _error(
        None,
        INVALID_REQUEST,
        f"Invalid Request: a message line over {max_line_bytes} bytes was dropped; "
        "send smaller messages",
        reason="an over-long line",
    )


def screen(line: str) -> Screened:
    """What to do with ``line`` (one line of stdin, newline included or not): forward a
    line the SDK takes; answer (or, for notifications, only drop) any other; ignore a
    blank line (it carries no message; clients do not send them)."""
    if not line.strip():
        return Screened(forward=False)  # not worth a log line either
    try:
        message = mcp_types.jsonrpc_message_adapter.validate_json(line, by_name=False)
    except pydantic.ValidationError as exc:
        return _refused(line, exc)
    if isinstance(message, mcp_types.JSONRPCNotification) and '"id"' in line:
        # The SDK takes {"id": true | 1.5 | null, "method": ...} as a notification and
        # answers nothing; the client meant a request (MCP: an id is a string or integer).
        try:
            raw = _DECODER.decode(line)
        except (ValueError, RecursionError):
            return Screened(forward=True, message=message)
        if isinstance(raw, dict) and "id" in raw:
            return _error(
                None,
                INVALID_REQUEST,
                f"Invalid Request: the id is {_kind(raw['id'])}; an id is a string or an integer",
                reason="an id of the wrong type",
            )
    return Screened(forward=True, message=message)


def _refused(line: str, exc: pydantic.ValidationError) -> Screened:
    """The answer to a line the SDK refused with ``exc``."""
    try:
        raw = _DECODER.decode(line)
    except RecursionError:
        return _error(
            _leading_id(line),
            INVALID_REQUEST,
            f"Invalid Request: nested deeper than {MAX_DEPTH} levels of arrays and objects",
            reason="a line nested too deep",
        )
    except ValueError as parse:  # JSONDecodeError, _NotJson
        if (byte := _RAW_BYTE.search(line)) is not None:
            detail = (
                f"a byte that is not UTF-8 (0x{ord(byte.group()) - 0xDC00:02x}) "
                f"at character {byte.start()}"
            )
        elif isinstance(parse, json.JSONDecodeError):
            detail = f"{parse.msg} at character {parse.pos}"
        else:
            detail = str(parse)
        return _error(None, PARSE_ERROR, f"Parse error: {detail}", reason="a line that is not JSON")
    if not isinstance(raw, dict):
        what = "a batch (an array)" if isinstance(raw, list) else _kind(raw)
        return _error(
            None,
            INVALID_REQUEST,
            f"Invalid Request: a message is a JSON object, not {what}",
            reason="a line that is not an object",
        )
    if "id" not in raw and "method" in raw:
        return Screened(forward=False, reason="an invalid notification")
    if "method" not in raw and ("result" in raw or "error" in raw):
        return Screened(forward=False, reason="an invalid response")
    request_id = raw.get("id")
    if isinstance(request_id, _LongInt):
        return _error(
            None,
            INVALID_REQUEST,
            f"Invalid Request: the id is an integer of {request_id.digits} digits; "
            f"at most {MAX_INT_DIGITS}",
            reason="an over-long id",
        )
    if isinstance(request_id, str) and (found := _SURROGATE.search(request_id)) is not None:
        problem, remedy = _bad_char(found.group(), line)
        return _error(  # an id that cannot be written back
            None,
            INVALID_REQUEST,
            f"Invalid Request: the id {problem}; {remedy}",
            reason="a lone surrogate in the id",
        )
    if not isinstance(request_id, str | int) or isinstance(request_id, bool):
        request_id = None
    flaw = _first_flaw(raw, line)
    if flaw is not None:
        return _flaw_answer(raw, request_id, *flaw)
    depth = _depth(raw)
    if depth > MAX_DEPTH:
        return _error(
            request_id,
            INVALID_REQUEST,
            f"Invalid Request: nested {depth} levels deep; at "
            f"most {MAX_DEPTH} levels of arrays and objects",
            reason="a line nested too deep",
        )
    return _error(
        request_id,
        INVALID_REQUEST,
        f"Invalid Request: {_summary(exc, raw)}",
        reason="an invalid request",
    )


def _error(request_id: str | int | None, code: int, message: str, *, reason: str) -> Screened:
    answer = mcp_types.JSONRPCError(
        jsonrpc="2.0", id=request_id, error=mcp_types.ErrorData(code=code, message=message)
    )
    return Screened(forward=False, answer=answer, reason=reason)


def _kind(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, float):
        return "a number with a fraction or exponent"
    if isinstance(value, int | _LongInt):
        return "an integer"
    if isinstance(value, str):
        return "a string"
    return "an array" if isinstance(value, list) else "an object"


def _summary(exc: pydantic.ValidationError, raw: dict[str, Any]) -> str:
    """The SDK's complaints about the branch the message was meant as, at most three."""
    branch = (
        "JSONRPCRequest"
        if "method" in raw
        else ("JSONRPCError" if "error" in raw else "JSONRPCResponse")
    )
    errors = [e for e in exc.errors() if e["loc"][:1] == (branch,)] or exc.errors()
    parts = []
    for error in errors[:3]:
        where = ".".join(str(part) for part in error["loc"][1:])
        parts.append(f"{where}: {error['msg']}" if where else str(error["msg"]))
    return "; ".join(parts) or "not a JSON-RPC 2.0 message"


def _walk(value: Any) -> Iterator[tuple[str, Any]]:
    """Every value in ``value`` with its path (``$.params.arguments.command``), object
    keys as values too (path ending ``{}``); iterative, so any depth Python parsed."""
    stack: list[tuple[str, Any]] = [("$", value)]
    while stack:
        path, item = stack.pop()
        yield path, item
        if isinstance(item, dict):
            for key, member in reversed(list(item.items())):
                stack.append((f"{path}.{{}}", key))
                stack.append((f"{path}.{key}", member))
        elif isinstance(item, list):
            stack.extend((f"{path}[{i}]", member) for i, member in reversed(list(enumerate(item))))


def _first_flaw(raw: dict[str, Any], line: str) -> tuple[str, str, str] | None:
    """The first value the SDK's parser refuses although it is JSON: its path, what is
    wrong with it (a string holding a lone surrogate or a byte that is not UTF-8, an
    integer too long), what to do."""
    for path, item in _walk(raw):
        if isinstance(item, str) and (found := _SURROGATE.search(item)) is not None:
            return path, *_bad_char(found.group(), line)
        if isinstance(item, _LongInt):
            return (
                path,
                f"is an integer of {item.digits} digits",
                f"send at most {MAX_INT_DIGITS} digits",
            )
    return None


def _escaped(char: str) -> str:
    return f"\\u{ord(char):04x}"


def _bad_char(char: str, line: str) -> tuple[str, str]:
    """What is wrong with ``char``, a lone surrogate found in a value of ``line``, and
    what to do: a byte that was not UTF-8 when the character stands in the line itself
    (``surrogateescape`` made it), else a lone surrogate the JSON escaped."""
    if _RAW_BYTE.fullmatch(char) and char in line:
        return f"holds a byte that is not UTF-8 (0x{ord(char) - 0xDC00:02x})", "send UTF-8"
    return f"holds a lone surrogate ({_escaped(char)})", "send valid Unicode"


def _flaw_answer(
    raw: dict[str, Any], request_id: str | int | None, path: str, problem: str, remedy: str
) -> Screened:
    """A tool error for a flaw in a ``tools/call``'s arguments; otherwise -32602 for one in
    the params, -32600 for one elsewhere (the id is read already)."""
    prefix = "$.params.arguments."
    params = raw.get("params")
    if (
        raw.get("method") == "tools/call"
        and request_id is not None
        and path.startswith(prefix)
        and isinstance(params, dict)
        and isinstance(params.get("name"), str)
    ):
        argument = path.removeprefix(prefix)
        if argument == "{}":
            where = "an argument's name"
        elif argument.endswith(".{}"):
            where = f"a member name in argument {argument.removesuffix('.{}')!r}"
        else:
            where = f"argument {argument!r}"
        text = f"{where} {problem}, so nothing was run; {remedy}" + (
            " (a string cut inside an emoji, or inside any character past U+FFFF, leaves "
            "half of its surrogate pair)"
            if "surrogate" in problem
            else ""
        )
        # As the SDK writes a tool's result on a 2025-era connection ("resultType" is
        # 2026-era; its clients read an absent one as "complete").
        result = {"content": [{"type": "text", "text": text}], "isError": True}
        answer = mcp_types.JSONRPCResponse(jsonrpc="2.0", id=request_id, result=result)
        return Screened(forward=False, answer=answer, reason="a bad value in a tool's arguments")
    where = f"a member name in {path.removesuffix('.{}')}" if path.endswith(".{}") else path
    if path == "$.params" or path.startswith(("$.params.", "$.params[")):
        return _error(
            request_id,
            INVALID_PARAMS,
            f"Invalid params: {where} {problem}; {remedy}",
            reason="a bad param",
        )
    return _error(
        request_id,
        INVALID_REQUEST,
        f"Invalid Request: {where} {problem}; {remedy}",
        reason="a bad value",
    )


def _depth(value: Any) -> int:
    """The nesting of arrays and objects in ``value`` (a scalar is 0); iterative."""
    deepest = 0
    stack: list[tuple[int, Any]] = [(1, value)]
    while stack:
        level, item = stack.pop()
        if isinstance(item, dict):
            deepest = max(deepest, level)
            stack.extend((level + 1, member) for member in item.values())
        elif isinstance(item, list):
            deepest = max(deepest, level)
            stack.extend((level + 1, member) for member in item)
    return deepest


def _leading_id(line: str) -> str | int | None:
    """The top-level ``"id"`` of a line too deep for Python's parser, when it comes
    before the deep member (clients write ``jsonrpc``, ``id``, ``method``, ``params``)."""
    text = line.strip()
    if not text.startswith("{"):
        return None
    position = 1
    try:
        while True:
            position = _skip_space(text, position)
            key, position = _DECODER.raw_decode(text, position)
            if not isinstance(key, str):
                return None
            position = _skip_space(text, position)
            if text[position : position + 1] != ":":
                return None
            position = _skip_space(text, position + 1)
            value, position = _DECODER.raw_decode(text, position)
            if key == "id":
                if isinstance(value, str | int) and not isinstance(value, bool):
                    return value
                return None
            position = _skip_space(text, position)
            if text[position : position + 1] != ",":
                return None
            position += 1
    except (ValueError, RecursionError):
        return None


def _skip_space(text: str, position: int) -> int:
    while text[position : position + 1] in (" ", "\t", "\n", "\r"):
        position += 1
    return position
