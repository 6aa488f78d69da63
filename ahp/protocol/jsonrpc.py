"""JSON-RPC 2.0 messages as AHP uses them (one message per WebSocket text frame).

Why separate classes instead of one dict: the server routes on the *kind* of a
message (request, notification, response) before it looks at params, and the
client matches responses to requests by ``id``. Ids are kept exactly as
received (any JSON scalar) so that responses echo them verbatim. ``params`` and
``result`` stay raw JSON here; typed params live in :mod:`ahp.protocol.commands`.
"""

from __future__ import annotations

from enum import IntEnum
from typing import Any

from attrs import frozen

#: A JSON-RPC id as received: ``int``, ``float``, ``str`` or ``None``.
JsonRpcId = int | float | str | None


class ErrorCode(IntEnum):
    """JSON-RPC and AHP error codes (the AHP wire specification, §3.5; ``docs/protocol.md``)."""

    PARSE_ERROR = -32700
    INVALID_REQUEST = -32600
    METHOD_NOT_FOUND = -32601
    INVALID_PARAMS = -32602
    INTERNAL_ERROR = -32603
    UNSUPPORTED_PROTOCOL_VERSION = -32005
    NOT_FOUND = -32008
    PERMISSION_DENIED = -32009
    ALREADY_EXISTS = -32010


@frozen
class JsonRpcRequest:
    id: JsonRpcId
    method: str
    params: Any = None


@frozen
class JsonRpcNotification:
    method: str
    params: Any = None


@frozen
class JsonRpcErrorObject:
    code: int
    message: str
    data: Any = None


@frozen
class JsonRpcSuccess:
    id: JsonRpcId
    result: Any


@frozen
class JsonRpcError:
    id: JsonRpcId
    error: JsonRpcErrorObject


JsonRpcMessage = JsonRpcRequest | JsonRpcNotification | JsonRpcSuccess | JsonRpcError
