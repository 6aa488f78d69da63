"""The AHP wire model: frozen state, action and JSON-RPC types plus the one codec.

Pure: nothing here performs I/O or reads a clock.
"""

from ahp.protocol.actions import *  # noqa: F403
from ahp.protocol.codec import (
    ProtocolError,
    decode_message,
    dumps,
    encode_message,
    structure,
    unstructure,
)
from ahp.protocol.jsonrpc import (
    ErrorCode,
    JsonRpcError,
    JsonRpcErrorObject,
    JsonRpcMessage,
    JsonRpcNotification,
    JsonRpcRequest,
    JsonRpcSuccess,
)
from ahp.protocol.rope import Rope
from ahp.protocol.state import (
    ROOT_URI,
    TERMINAL_SCHEME,
    ChannelState,
    ClientClaim,
    CommandPart,
    ContentPart,
    OpaqueState,
    RootConfig,
    RootState,
    SessionClaim,
    Snapshot,
    TerminalClaim,
    TerminalInfo,
    TerminalLifecycle,
    TerminalState,
    UnclassifiedPart,
    part_text,
)
from ahp.protocol.uri import file_uri_to_path, local_file_uri_to_path, path_to_file_uri

__all__ = [
    "ROOT_URI",
    "TERMINAL_SCHEME",
    "ChannelState",
    "ClientClaim",
    "CommandPart",
    "ContentPart",
    "ErrorCode",
    "JsonRpcError",
    "JsonRpcErrorObject",
    "JsonRpcMessage",
    "JsonRpcNotification",
    "JsonRpcRequest",
    "JsonRpcSuccess",
    "OpaqueState",
    "ProtocolError",
    "RootConfig",
    "RootState",
    "Rope",
    "SessionClaim",
    "Snapshot",
    "TerminalClaim",
    "TerminalInfo",
    "TerminalLifecycle",
    "TerminalState",
    "UnclassifiedPart",
    "decode_message",
    "dumps",
    "encode_message",
    "file_uri_to_path",
    "local_file_uri_to_path",
    "part_text",
    "path_to_file_uri",
    "structure",
    "unstructure",
]

from ahp.protocol import actions as _actions

__all__ += _actions.__all__
