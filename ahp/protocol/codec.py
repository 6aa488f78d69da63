"""The one converter: wire JSON <-> protocol classes.

Why one module: every rule about the wire shape lives here and nowhere else —
optional fields are omitted rather than written as ``null``; discriminators
(``type`` for actions and content parts, ``kind`` for claims) are always
written; unknown action types survive as :class:`UnknownAction` and re-encode
verbatim; unknown extra keys are ignored; scalars are checked strictly (a
``"5"`` is not a number, ``true`` is not an integer). Anything malformed raises
:class:`ProtocolError`, which carries a JSON path such as ``$.action.cols`` for
the ``-32602`` error data.

Versions: this converter *writes* the 0.5 shape (``exitCode``; session claims
without ``chat``; the internal ``exited`` flag never appears) and *reads* both
families — a terminal state or catalogue entry may carry 0.5's ``exitCode`` or
1.x's ``lifecycle``, and either sets ``exited``. The 1.x shape is written by
:mod:`ahp.protocol.dialect`, on top of this.

The converter is cattrs' orjson preconf, built once at import. Encoding returns
``str`` (not ``bytes``): AHP requires WebSocket *text* frames.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final, TypeVar, get_args, get_origin

import attrs
import orjson
from cattrs import ClassValidationError, IterableValidationError, transform_error
from cattrs.gen import make_dict_structure_fn, make_dict_unstructure_fn, override
from cattrs.preconf.orjson import make_converter
from cattrs.strategies import configure_tagged_union
from cattrs.v import format_exception

from ahp.protocol.actions import StateAction, UnknownAction
from ahp.protocol.commands import ChannelRecovery
from ahp.protocol.jsonrpc import (
    JsonRpcError,
    JsonRpcErrorObject,
    JsonRpcMessage,
    JsonRpcNotification,
    JsonRpcRequest,
    JsonRpcSuccess,
)
from ahp.protocol.parts import Parts
from ahp.protocol.rope import Rope
from ahp.protocol.state import (
    ROOT_URI,
    TERMINAL_SCHEME,
    ChannelState,
    ContentPart,
    OpaqueState,
    RootState,
    SessionClaim,
    Snapshot,
    TerminalClaim,
    TerminalInfo,
    TerminalState,
)

__all__ = [
    "ProtocolError",
    "converter",
    "decode_json",
    "decode_message",
    "dumps",
    "dumps_utf8",
    "encode_message",
    "shrink_to_fit",
    "structure",
    "unstructure",
]

T = TypeVar("T")


class ProtocolError(ValueError):
    """A message or value that does not match the protocol.

    Attributes:
        path: JSON path of the first problem (``$`` is the value itself).
        code: the JSON-RPC error code the server should answer with.
    """

    def __init__(self, message: str, *, path: str = "$", code: int = -32602) -> None:
        super().__init__(message)
        self.message = message
        self.path = path
        self.code = code


converter: Final = make_converter(omit_if_default=True)


#: Integral floats become ints only below this magnitude (signed 64-bit, what orjson writes).
_INT_LIMIT: Final = 2**63


def _strict(kind: type[Any], name: str) -> Callable[[Any, Any], Any]:
    def hook(value: Any, _: Any) -> Any:
        if type(value) is bool and kind is not bool:
            raise TypeError(f"expected {name}, got a boolean")
        if kind is int and type(value) is float and value.is_integer():
            if not -_INT_LIMIT <= value < _INT_LIMIT:
                # 1e300 is "integral" but would not encode again (orjson: 64-bit ints only).
                raise TypeError(f"expected {name} in the 64-bit range, got {value!r}")
            return int(value)
        if not isinstance(value, kind):
            raise TypeError(f"expected {name}, got {type(value).__name__}")
        return value

    return hook


converter.register_structure_hook(int, _strict(int, "an integer"))
converter.register_structure_hook(str, _strict(str, "a string"))
converter.register_structure_hook(bool, _strict(bool, "a boolean"))


def _structure_json_object(value: Any, _: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise TypeError(f"expected an object, got {type(value).__name__}")
    return value


converter.register_structure_hook_func(lambda t: t == dict[str, Any], _structure_json_object)
converter.register_structure_hook(Rope, lambda v, _: Rope(_strict(str, "a string")(v, None)))
converter.register_unstructure_hook(Rope, str)


def _structure_list(value: Any, _: Any) -> tuple[Any, ...]:
    if not isinstance(value, list):
        raise TypeError(f"expected an array, got {type(value).__name__}")
    return tuple(value)


converter.register_structure_hook_func(lambda t: t == tuple[Any, ...], _structure_list)


def _is_homogeneous_tuple(t: Any) -> bool:
    args = get_args(t)
    return get_origin(t) is tuple and len(args) == 2 and args[1] is Ellipsis and args[0] is not Any


def _homogeneous_tuple_hook(t: Any) -> Callable[[Any, Any], Any]:
    def hook(value: Any, cl: Any) -> Any:
        # cattrs would iterate a string ("ahp-root://" -> 11 one-letter URIs).
        if not isinstance(value, list | tuple):
            raise TypeError(f"expected an array, got {type(value).__name__}")
        return converter._structure_tuple(value, cl)

    return hook


converter.register_structure_hook_factory(_is_homogeneous_tuple, _homogeneous_tuple_hook)
converter.register_unstructure_hook_func(lambda t: t == tuple[Any, ...], list)


def _lifecycle_fields(value: Any) -> tuple[bool, int | None] | None:
    """``(exited, exitCode)`` from a 1.x ``lifecycle`` object, or None when absent."""
    if "lifecycle" not in value:
        return None
    lifecycle = value["lifecycle"]
    if not isinstance(lifecycle, dict):
        raise TypeError("expected an object at lifecycle")
    status = lifecycle.get("status")
    if status == "running":
        return False, None
    if status != "exited":
        raise ValueError(f"lifecycle status must be 'running' or 'exited', got {status!r}")
    code = lifecycle.get("exitCode")
    return True, None if code is None else _strict(int, "an integer")(code, None)


def _exit_aware(cl: type[Any]) -> None:
    """Hooks for a class with ``exitCode`` and ``exited`` (terminal state and info):
    ``exited`` is never written; it is read from ``lifecycle`` (1.x) or implied
    by ``exitCode`` (0.5).

    The field-by-field functions are generated on first use, not here: they
    capture the hooks of the fields' types (claims, content parts) as they are
    at generation time, so this may be called before those are registered.
    """
    generated: dict[str, Callable[..., Any]] = {}

    def structure_fields(value: Any) -> Any:
        fn = generated.get("structure")
        if fn is None:
            fn = make_dict_structure_fn(cl, converter, exited=override(omit=True))
            generated["structure"] = fn
        return fn(value, cl)

    def structure_hook(value: Any, _: Any) -> Any:
        if not isinstance(value, dict):
            raise TypeError(f"expected an object, got {type(value).__name__}")
        lifecycle = _lifecycle_fields(value)
        obj = structure_fields(value)
        if lifecycle is not None:
            exited, code = lifecycle
            return attrs.evolve(obj, exited=exited, exitCode=code)
        if obj.exitCode is not None:
            return attrs.evolve(obj, exited=True)
        return obj

    def unstructure_hook(value: Any) -> Any:
        fn = generated.get("unstructure")
        if fn is None:
            fn = make_dict_unstructure_fn(
                cl, converter, _cattrs_omit_if_default=True, exited=override(omit=True)
            )
            generated["unstructure"] = fn
        return fn(value)

    converter.register_structure_hook(cl, structure_hook)
    converter.register_unstructure_hook(cl, unstructure_hook)


converter.register_unstructure_hook(
    SessionClaim,
    make_dict_unstructure_fn(
        SessionClaim, converter, _cattrs_omit_if_default=True, chat=override(omit=True)
    ),
)


def _class_tag(name: str) -> Callable[[type[Any]], str]:
    def tag(cl: type[Any]) -> str:
        value: str = getattr(cl, name)
        return value

    return tag


class _TagError(ValueError):
    """A tagged union's tag is missing or unknown (its message is shown as it is)."""


def _format_exception(exc: BaseException, type_: Any) -> str:
    return str(exc) if isinstance(exc, _TagError) else format_exception(exc, type_)


def _tagged_union(union: Any, tag_name: str, attribute: str) -> None:
    """A tagged union whose unknown or missing tag is named in the error (cattrs reports
    a ``KeyError``: "required field missing", at the union's path, for ``{"kind":
    "nope"}`` as for ``{}``)."""
    configure_tagged_union(union, converter, tag_name=tag_name, tag_generator=_class_tag(attribute))
    tags = sorted(getattr(member, attribute) for member in get_args(union))
    inner = converter.get_structure_hook(union)
    expected = " or ".join(repr(tag) for tag in tags)

    def structure_tagged(value: Any, cl: Any) -> Any:
        if isinstance(value, Mapping) and value.get(tag_name) not in tags:
            if tag_name not in value:
                raise _TagError(f"{tag_name!r} missing (expected {expected})")
            shown = repr(value[tag_name])
            shown = shown if len(shown) <= 40 else shown[:40] + "..."
            raise _TagError(f"unknown {tag_name!r} {shown} (expected {expected})")
        return inner(value, cl)

    converter.register_structure_hook(union, structure_tagged)


_tagged_union(TerminalClaim, "kind", "KIND")
_tagged_union(ContentPart, "type", "TYPE")


# Registered before the state hooks are generated (they look up the content's hook once).
def _parts_structure(t: Any) -> Callable[[Any, Any], Any]:
    inner: Any = tuple[ContentPart, ...]  # the only Parts on the wire
    return lambda value, _: Parts(converter.structure(value, inner))


def _parts_unstructure(t: Any) -> Callable[[Any], Any]:
    return lambda value: [converter.unstructure(part, ContentPart) for part in value]


def _is_parts(t: Any) -> bool:
    return t is Parts or get_origin(t) is Parts


converter.register_structure_hook_factory(_is_parts, _parts_structure)
converter.register_unstructure_hook_factory(_is_parts, _parts_unstructure)
# (Here, after the part and Parts hooks, though the field functions are made on first use.)
_exit_aware(TerminalState)
_exit_aware(TerminalInfo)


def _action_tag(cl: type[Any]) -> str:
    tag = getattr(cl, "TYPE", None)
    return tag if isinstance(tag, str) else "\x00unknown"


converter.register_structure_hook(
    UnknownAction, lambda value, _: UnknownAction(_structure_json_object(value, None))
)
configure_tagged_union(
    StateAction, converter, tag_name="type", tag_generator=_action_tag, default=UnknownAction
)
_tagged_action_unstructure = converter.get_unstructure_hook(StateAction)


def _unstructure_action(action: Any) -> Any:
    if action.__class__ is UnknownAction:
        return dict(action.raw)
    return _tagged_action_unstructure(action)


converter.register_unstructure_hook(StateAction, _unstructure_action)
_structure_action_tagged = converter.get_structure_hook(StateAction)


def _structure_action(value: Any, cl: Any) -> Any:
    if not isinstance(value, dict):
        raise TypeError(f"expected an action object, got {type(value).__name__}")
    if not isinstance(value.get("type"), str):
        raise TypeError("action needs a string 'type'")
    return _structure_action_tagged(value, cl)


converter.register_structure_hook(StateAction, _structure_action)


def _structure_channel_state(value: Any, _: Any) -> ChannelState:
    # Terminal states have a required 'content'; root states a required 'agents'.
    if isinstance(value, dict) and "content" in value:
        return converter.structure(value, TerminalState)
    return converter.structure(value, RootState)


converter.register_structure_hook(ChannelState, _structure_channel_state)


def _structure_snapshot(value: Any, _: Any) -> Snapshot:
    # The channel's kind comes from its URI; a kind this host does not model (a
    # session's, a canvas's) is kept verbatim.
    if not isinstance(value, dict):
        raise TypeError(f"expected an object, got {type(value).__name__}")
    resource = _strict(str, "a string")(value.get("resource"), None)
    state: ChannelState | OpaqueState
    if resource == ROOT_URI:
        state = converter.structure(value.get("state"), RootState)
    elif resource.startswith(TERMINAL_SCHEME):
        state = converter.structure(value.get("state"), TerminalState)
    else:
        state = OpaqueState(_structure_json_object(value.get("state"), None))
    return Snapshot(
        resource=resource, state=state, fromSeq=_strict(int, "an integer")(value["fromSeq"], None)
    )


converter.register_structure_hook(Snapshot, _structure_snapshot)
converter.register_unstructure_hook(OpaqueState, lambda state: dict(state.raw))
# (After the Snapshot hook: the union's member hooks are built here, once.)
configure_tagged_union(
    ChannelRecovery, converter, tag_name="kind", tag_generator=_class_tag("KIND")
)


def _first_error(exc: Exception) -> tuple[str, str]:
    messages = (
        transform_error(exc, format_exception=_format_exception)
        if isinstance(exc, ClassValidationError | IterableValidationError)
        else [str(exc)]
    )
    first = messages[0] if messages else str(exc)
    text, sep, path = first.rpartition(" @ ")
    return (text, path) if sep else (first, "$")


def structure(value: Any, cl: type[T]) -> T:
    """Build a protocol value from JSON data; raise :class:`ProtocolError` if malformed."""
    try:
        return converter.structure(value, cl)
    except (ClassValidationError, IterableValidationError) as exc:
        message, path = _first_error(exc)
        raise ProtocolError(f"{message} at {path}", path=path) from None
    except (TypeError, ValueError, KeyError, AttributeError) as exc:
        raise ProtocolError(f"{exc} at $", path="$") from None


def structure_action(value: Any) -> StateAction:
    """Build any action (unknown types become :class:`UnknownAction`)."""
    action: StateAction = structure(value, StateAction)  # type: ignore[arg-type]
    return action


def unstructure(value: Any, cl: Any = None) -> Any:
    """JSON-ready data for a protocol value (optional fields omitted)."""
    return converter.unstructure(value, cl) if cl is not None else converter.unstructure(value)


def dumps(data: Any) -> str:
    """Serialise JSON-ready data to a compact ``str`` (text frame payload)."""
    return orjson.dumps(data).decode()


def dumps_utf8(data: Any) -> bytes:
    """Serialise JSON-ready data to compact UTF-8: a text frame's payload, encoded once
    (the server's writer frames these bytes as they are). The result is
    :func:`shrink_to_fit`: what it costs in memory is its length, as the outbox, the replay
    log and the response pool count it."""
    return shrink_to_fit(orjson.dumps(data))


def shrink_to_fit(encoded: bytes) -> bytes:
    """``encoded`` (an ``orjson.dumps`` result) copied into an object of its own length.

    Why: orjson writes into a buffer reserved for the worst case (about six bytes a
    character of text, and never under 4 KiB from 3.12 on) and returns it without
    shrinking it: a 38-byte answer held a 4 KiB block, 1 KB of text about 8 KiB,
    100 KB about 1 MiB (``tracemalloc``; orjson 3.10-3.13). Everything the server keeps
    for a while (a slow client's queued answers and envelopes, the replay log) is
    bounded by its length, so the bounds missed the memory held by up to 100x: a
    client that sent tiny requests and read no answer took the server from 91 to
    867 MiB before its 16 MiB outbox bound closed it. The copy costs ~0.1 us for an
    answer and ~2 us for a 117 KB output batch (one ``memcpy``; the big block is freed
    at once)."""
    return b"".join((encoded, b""))


def decode_json(frame: str | bytes) -> Any:
    """Parse a frame; invalid JSON (or invalid UTF-8) raises ``ProtocolError(code=-32700)``."""
    try:
        return orjson.loads(frame)
    except orjson.JSONDecodeError as exc:
        raise ProtocolError(f"parse error: {exc}", code=-32700) from None


_VALID_ID_TYPES: Final = (int, float, str, type(None))


def _check_id(message: Mapping[str, Any]) -> Any:
    msg_id = message["id"]
    if type(msg_id) is bool or not isinstance(msg_id, _VALID_ID_TYPES):
        raise ProtocolError("'id' must be a number, a string or null", path="$.id", code=-32600)
    return msg_id


def decode_message(frame: str | bytes | Any) -> JsonRpcMessage:
    """Decode one JSON-RPC 2.0 message from a frame (or already-parsed JSON).

    Raises ``ProtocolError`` with ``code`` -32700 (not JSON) or -32600 (not a
    JSON-RPC message; this includes batches, which AHP does not define).
    """
    data = decode_json(frame) if isinstance(frame, str | bytes) else frame
    if not isinstance(data, dict):
        kind = "a batch (array)" if isinstance(data, list) else type(data).__name__
        raise ProtocolError(f"expected a JSON-RPC object, got {kind}", code=-32600)
    if data.get("jsonrpc") != "2.0":
        raise ProtocolError("'jsonrpc' must be \"2.0\"", path="$.jsonrpc", code=-32600)
    if "method" in data:
        method = data["method"]
        if not isinstance(method, str):
            raise ProtocolError("'method' must be a string", path="$.method", code=-32600)
        params = data.get("params")
        if params is not None and not isinstance(params, dict | list):
            raise ProtocolError("'params' must be an object", path="$.params", code=-32600)
        if "id" in data:
            return JsonRpcRequest(id=_check_id(data), method=method, params=params)
        return JsonRpcNotification(method=method, params=params)
    if "id" in data and "result" in data:
        return JsonRpcSuccess(id=_check_id(data), result=data["result"])
    if "id" in data and "error" in data:
        error = data["error"]
        if not (
            isinstance(error, dict)
            and type(error.get("code")) is int
            and isinstance(error.get("message"), str)
        ):
            raise ProtocolError("malformed 'error' object", path="$.error", code=-32600)
        return JsonRpcError(
            id=_check_id(data),
            error=JsonRpcErrorObject(
                code=error["code"], message=error["message"], data=error.get("data")
            ),
        )
    raise ProtocolError("not a JSON-RPC request, notification or response", code=-32600)


def message_to_json(message: JsonRpcMessage) -> dict[str, Any]:
    """JSON-ready data for a JSON-RPC message (``jsonrpc`` always written)."""
    out: dict[str, Any] = {"jsonrpc": "2.0"}
    match message:
        case JsonRpcRequest(id=msg_id, method=method, params=params):
            out["id"] = msg_id
            out["method"] = method
            if params is not None:
                out["params"] = params
        case JsonRpcNotification(method=method, params=params):
            out["method"] = method
            if params is not None:
                out["params"] = params
        case JsonRpcSuccess(id=msg_id, result=result):
            out["id"] = msg_id
            out["result"] = result
        case JsonRpcError(id=msg_id, error=error):
            out["id"] = msg_id
            err: dict[str, Any] = {"code": error.code, "message": error.message}
            if error.data is not None:
                err["data"] = error.data
            out["error"] = err
    return out


def encode_message(message: JsonRpcMessage) -> str:
    """Serialise a JSON-RPC message to one text frame."""
    return dumps(message_to_json(message))
