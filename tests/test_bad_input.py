"""Bad input at the wire: a corpus of client mistakes, each with its expected answer.

Every case runs against a real sidecar (port 0) with two real WebSocket clients:

- ``a`` sends the case's frames and must receive exactly the expected answers (a
  JSON-RPC error with the documented code and the id echoed, a result, a rejection
  echoed to ``a`` alone, or nothing), then its connection must still work (``ping``,
  ``subscribe``) and the server's state must be untouched;
- ``b`` created the terminal ``T1`` (shell ``/bin/cat``: silent unless typed to) and
  follows the root channel and ``T1``; it must see nothing of ``a``'s mistakes.

Fences, not sleeps: ``a`` renames ``T1`` after its frames (the rename passes the
same reducer queue as every terminal answer, so everything the case caused arrives
before its echo); ``b`` then renames ``T1`` itself. A client that is not initialised
fences with a ``ping``. Cases whose answer is a close expect the close code, and a
new connection must work afterwards.

Decisions recorded by the corpus (where the protocol leaves the answer open):

- a frame that is not one JSON value (empty, truncated, trailing garbage, two
  messages, ``NaN``/``Infinity``, numbers beyond double range, lone surrogates, a
  BOM, invalid UTF-8 in a binary frame) -> ``-32700``, ``id: null``;
- JSON nested deeper than 128 levels -> ``-32700`` (orjson writes only 254 levels,
  and a client's raw JSON can be echoed back or broadcast inside an envelope);
- a valid JSON value that is not a request object (batch, scalar, bad ``jsonrpc``,
  bad ``method``/``params``/``id`` type) -> ``-32600``, ``id: null``;
- duplicate keys: the last one wins (orjson); integer ids beyond 64 bits are read as
  doubles, so they are echoed as the double;
- a notification method sent as a request is answered: ``null``, or ``-32602``;
- malformed ``dispatchAction``/``unsubscribe`` notifications (no ``clientSeq``, no
  action object, no channel) are dropped silently: there is no origin to echo to;
  a well-formed envelope with a bad action is echoed to its sender only with a
  ``rejectionReason``, plus the true value for ``resized``/``claimed``/``titleChanged``;
- ``createTerminal``: a URI with control characters -> ``-32602``; ``cwd`` must be
  an absolute path or a ``file:`` URI of this machine (``file://evil/x`` -> ``-32602``);
- integral numbers beyond 64 bits (``1e300``) are not integers (``-32602``).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Final

import orjson
import pytest
import trio
import trio.testing

from ahp.ws import ConnectionClosed
from tests.helpers import TIMEOUT
from tests.wire import Peer, peer, running_server

ROOT = "ahp-root://"
T1 = "ahp-terminal:/t1"
T2 = "ahp-terminal:/t2"
MiB = 1024 * 1024
_ABSENT = object()


# -- frame builders -------------------------------------------------------------------------


def req(method: Any, params: Any = _ABSENT, msg_id: Any = 1) -> str:
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": msg_id, "method": method}
    if params is not _ABSENT:
        message["params"] = params
    return orjson.dumps(message).decode()


def note(method: str, params: Any = _ABSENT) -> str:
    message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if params is not _ABSENT:
        message["params"] = params
    return orjson.dumps(message).decode()


def act(action: Any, channel: str = T1, client_seq: Any = 1) -> str:
    return note("dispatchAction", {"channel": channel, "clientSeq": client_seq, "action": action})


def ping(msg_id: Any = 1) -> str:
    return req("ping", {"channel": ROOT}, msg_id)


def create(channel: Any = "ahp-terminal:/x", **extra: Any) -> str:
    return req(
        "createTerminal",
        {"channel": channel, "claim": {"kind": "client", "clientId": "a"}, **extra},
    )


def init_params(**extra: Any) -> dict[str, Any]:
    return {"channel": ROOT, "protocolVersions": ["0.5.0"], "clientId": "a", **extra}


def nested(depth: int, leaf: str = "[]") -> str:
    return "[" * depth + leaf + "]" * depth


# -- expected answers -----------------------------------------------------------------------


@dataclass(frozen=True)
class Error:
    code: int
    id: Any = 1
    path: str | None = None


@dataclass(frozen=True)
class Result:
    value: Any = None
    id: Any = 1
    check: Callable[[Any], bool] | None = None  # instead of comparing with ``value``


@dataclass(frozen=True)
class Rejected:
    """The action echoed to the sender with a rejectionReason (and the true value)."""

    type: str
    channel: str = T1
    heal: bool = False


Answer = Error | Result | Rejected

ANY = Result(check=lambda _: True)


def _expand(expect: tuple[Answer, ...]) -> list[Answer | tuple[str, str]]:
    out: list[Answer | tuple[str, str]] = []
    for answer in expect:
        out.append(answer)
        if isinstance(answer, Rejected) and answer.heal:
            out.append(("heal", answer.type))
    return out


def _matches(expected: Answer | tuple[str, str], got: dict[str, Any], client_id: str) -> bool:
    if got.get("jsonrpc") != "2.0":
        return False
    match expected:
        case Error(code=code, id=msg_id, path=path):
            error = got.get("error")
            return (
                "result" not in got
                and got.get("id", _ABSENT) == msg_id
                and type(got.get("id")) is type(msg_id)
                and isinstance(error, dict)
                and error.get("code") == code
                and isinstance(error.get("message"), str)
                and len(error["message"]) < 1000  # client input is never echoed in bulk
                and (path is None or error.get("data", {}).get("path") == path)
            )
        case Result(value=value, id=msg_id, check=check):
            return (
                "error" not in got
                and got.get("id", _ABSENT) == msg_id
                and type(got.get("id")) is type(msg_id)
                and "result" in got
                and (check(got["result"]) if check is not None else got["result"] == value)
            )
        case Rejected(type=kind, channel=channel):
            params = got.get("params", {})
            return (
                got.get("method") == "action"
                and params.get("channel") == channel
                and params.get("origin", {}).get("clientId") == client_id
                and bool(params.get("rejectionReason"))
                and (params["action"].get("type") == kind if isinstance(kind, str) else True)
            )
        case ("heal", kind):
            params = got.get("params", {})
            return (
                got.get("method") == "action"
                and params["action"]["type"] == kind
                and "origin" not in params
                and "rejectionReason" not in params
            )
    return False


# -- the corpus -----------------------------------------------------------------------------

Setup = Callable[[Peer], Awaitable[None]]


async def _dispose_t2(a: Peer) -> None:
    await a.result("createTerminal", {"channel": T2, "claim": {"kind": "client", "clientId": "a"}})
    await a.result("disposeTerminal", {"channel": T2})


@dataclass(frozen=True)
class Case:
    name: str
    frames: tuple[str | bytes, ...]
    expect: tuple[Answer, ...] = ()
    #: Whether ``a`` has initialised (and subscribed to ``T1``) before the frames.
    init: bool = True
    #: The close code expected after the answers (the connection ends).
    closes: int | None = None
    #: Whether the case's own frames initialise ``a`` (successfully).
    initializes: bool = False
    setup: Setup | None = None
    marks: tuple[Any, ...] = field(default=())


def case(
    name: str, frames: str | bytes | tuple[str | bytes, ...], *expect: Answer, **kw: Any
) -> Case:
    return Case(name, frames if isinstance(frames, tuple) else (frames,), tuple(expect), **kw)


PARSE = Error(-32700, None)
INVALID = Error(-32600, None)
NOT_FOUND_METHOD = Error(-32601)


def bad_params(path: str | None = None, msg_id: Any = 1) -> Error:
    return Error(-32602, msg_id, path)


CORPUS: list[Case] = [
    # -- frames that are not JSON (-32700, id null) -------------------------------------------
    case("not-json", "{not json", PARSE),
    case("empty-frame", "", PARSE),
    case("whitespace-only", "  \n\t ", PARSE),
    case("truncated-object", ping()[:-1], PARSE),
    case("truncated-in-string", ping()[:30], PARSE),
    case("trailing-garbage", ping() + " garbage", PARSE),
    case("two-messages-one-frame", ping() + ping(2), PARSE),
    case("nan-literal", '{"jsonrpc":"2.0","id":NaN,"method":"ping"}', PARSE),
    case(
        "infinity-literal",
        '{"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":Infinity}}',
        PARSE,
    ),
    case("minus-infinity", '{"jsonrpc":"2.0","id":-Infinity,"method":"ping"}', PARSE),
    case("number-overflow", '{"jsonrpc":"2.0","id":1e400,"method":"ping"}', PARSE),
    case("lone-surrogate", '{"jsonrpc":"2.0","id":"\\ud800","method":"ping"}', PARSE),
    case("byte-order-mark", "\ufeff" + ping(), PARSE),
    case("single-quotes", "{'jsonrpc':'2.0','id':1,'method':'ping'}", PARSE),
    case("deep-arrays-1e5", nested(100_000), PARSE),
    case(
        "deep-objects-1e5-in-params",
        '{"jsonrpc":"2.0","id":1,"method":"ping","params":'
        + '{"a":' * 100_000
        + "1"
        + "}" * 100_000
        + "}",
        PARSE,
    ),
    case(
        "nesting-200-beyond-echo-limit",
        '{"jsonrpc":"2.0","method":"dispatchAction","params":{"channel":"ahp-terminal:/t1",'
        '"clientSeq":1,"action":{"type":"x/y","deep":' + nested(200) + "}}}",
        PARSE,
    ),
    case("binary-invalid-utf8", b"\xff\xfe", PARSE),
    case(
        "binary-truncated-utf8", b'{"jsonrpc":"2.0","id":1,"method":"ping","x":"\xe2\x82"}', PARSE
    ),
    case("binary-overlong-utf8", b'{"jsonrpc":"2.0","id":1,"method":"\xc0\xaf"}', PARSE),
    case("binary-encoded-surrogate", b'{"jsonrpc":"2.0","id":1,"method":"\xed\xa0\x80"}', PARSE),
    # -- JSON that is not a request (-32600, id null) -----------------------------------------
    case("batch", f"[{ping()}]", INVALID),
    case("empty-batch", "[]", INVALID),
    case("scalar-string", '"ping"', INVALID),
    case("scalar-number", "42", INVALID),
    case("scalar-null", "null", INVALID),
    case("scalar-true", "true", INVALID),
    case("missing-jsonrpc", '{"id":1,"method":"ping"}', INVALID),
    case("jsonrpc-1.0", '{"jsonrpc":"1.0","id":1,"method":"ping"}', INVALID),
    case("jsonrpc-number", '{"jsonrpc":2.0,"id":1,"method":"ping"}', INVALID),
    case("jsonrpc-null", '{"jsonrpc":null,"id":1,"method":"ping"}', INVALID),
    case("no-method-no-result", '{"jsonrpc":"2.0","id":1}', INVALID),
    case("empty-object", "{}", INVALID),
    case("method-number", req(5), INVALID),
    case("method-null", req(None), INVALID),
    case("method-object", req({"name": "ping"}), INVALID),
    case("params-number", req("ping", 5), INVALID),
    case("params-string", req("ping", "ahp-root://"), INVALID),
    case("params-true", req("ping", True), INVALID),
    case("id-true", ping(True), INVALID),
    case("id-false", ping(False), INVALID),
    case("id-object", ping({"n": 1}), INVALID),
    case("id-array", ping([1]), INVALID),
    case("malformed-error-response", '{"jsonrpc":"2.0","id":1,"error":5}', INVALID),
    # -- ids of every valid type are echoed exactly -------------------------------------------
    case("id-string", ping("abc"), Result(None, "abc")),
    case("id-empty-string", ping(""), Result(None, "")),
    case("id-zero", ping(0), Result(None, 0)),
    case("id-negative", ping(-7), Result(None, -7)),
    case("id-float", ping(2.5), Result(None, 2.5)),
    case("id-2**53+1", ping(2**53 + 1), Result(None, 2**53 + 1)),
    case("id-2**64-1", ping(2**64 - 1), Result(None, 2**64 - 1)),
    case(
        "id-beyond-64-bits-read-as-double",
        '{"jsonrpc":"2.0","id":123456789012345678901234567890,"method":"ping"}',
        Result(None, 1.2345678901234568e29),
    ),
    case("id-null", ping(None), Result(None, None)),
    case(
        "duplicate-id-last-wins", '{"jsonrpc":"2.0","id":1,"id":2,"method":"ping"}', Result(None, 2)
    ),
    case(
        "duplicate-method-last-wins",
        '{"jsonrpc":"2.0","id":1,"method":"ping","method":"noSuchMethod"}',
        NOT_FOUND_METHOD,
    ),
    # -- methods ------------------------------------------------------------------------------
    case("unknown-method", req("noSuchMethod", {"channel": ROOT}), NOT_FOUND_METHOD),
    case("empty-method", req("", {}), NOT_FOUND_METHOD),
    case("rpc-discover", req("rpc.discover"), NOT_FOUND_METHOD),
    case("session-method", req("createSession", {"channel": ROOT}), NOT_FOUND_METHOD),
    case("huge-method-name", req("m" * MiB), NOT_FOUND_METHOD),
    case("client-result-ignored", '{"jsonrpc":"2.0","id":1,"result":5}'),
    case("client-error-ignored", '{"jsonrpc":"2.0","id":1,"error":{"code":1,"message":"x"}}'),
    case("unknown-notification-ignored", note("noSuchNotification", {"channel": ROOT})),
    # -- before initialize --------------------------------------------------------------------
    case(
        "subscribe-before-init", req("subscribe", {"channel": ROOT}), NOT_FOUND_METHOD, init=False
    ),
    case("create-before-init", create(), NOT_FOUND_METHOD, init=False),
    case(
        "dispose-before-init", req("disposeTerminal", {"channel": T1}), NOT_FOUND_METHOD, init=False
    ),
    case(
        "list-sessions-before-init",
        req("listSessions", {"channel": ROOT}),
        NOT_FOUND_METHOD,
        init=False,
    ),
    case("unknown-before-init", req("noSuchMethod"), NOT_FOUND_METHOD, init=False),
    case("dispatch-before-init-dropped", act({"type": "terminal/input", "data": "x"}), init=False),
    case("unsubscribe-before-init-dropped", note("unsubscribe", {"channel": T1}), init=False),
    case("ping-before-init", ping(), Result(None), init=False),
    case("parse-error-before-init", "{", PARSE, init=False),
    # -- initialize ---------------------------------------------------------------------------
    case("initialize-no-params", req("initialize"), bad_params(), init=False),
    case("initialize-params-array", req("initialize", [ROOT]), bad_params(), init=False),
    case(
        "initialize-no-client-id",
        req("initialize", {"channel": ROOT, "protocolVersions": ["0.5.0"]}),
        bad_params("$.params.clientId"),
        init=False,
    ),
    case(
        "initialize-client-id-number",
        req("initialize", init_params(clientId=5)),
        bad_params("$.params.clientId"),
        init=False,
    ),
    case(
        "initialize-channel-number",
        req("initialize", init_params(channel=5)),
        bad_params("$.params.channel"),
        init=False,
    ),
    case(
        "initialize-subscriptions-not-array",
        req("initialize", init_params(initialSubscriptions=ROOT)),
        bad_params("$.params.initialSubscriptions"),
        init=False,
    ),
    case(
        "initialize-subscription-number",
        req("initialize", init_params(initialSubscriptions=[5])),
        bad_params(),
        init=False,
    ),
    case(
        "initialize-locale-number",
        req("initialize", init_params(locale=5)),
        bad_params("$.params.locale"),
        init=False,
    ),
    case(
        "initialize-extra-keys-ignored",
        req(
            "initialize",
            init_params(
                _meta={"x": 1},
                clientInfo={"name": "n"},
                capabilities={"mcpApps": {}},
                future=[1, 2],
                initialSubscriptions=[ROOT, "ahp-terminal:/unknown", "javascript:alert(1)"],
            ),
        ),
        Result(check=lambda r: [s["resource"] for s in r["snapshots"]] == [ROOT]),
        init=False,
        initializes=True,
    ),
    case(
        "initialize-unsupported-version",
        req("initialize", init_params(protocolVersions=["2.0.0", "0.2.0"])),
        Error(-32005),
        init=False,
        closes=1002,
    ),
    case(
        "initialize-versions-not-array",
        req("initialize", init_params(protocolVersions="0.5.0")),
        Error(-32005),
        init=False,
        closes=1002,
    ),
    case(
        "initialize-versions-missing",
        req("initialize", {"channel": ROOT, "clientId": "a"}),
        Error(-32005),
        init=False,
        closes=1002,
    ),
    case("second-initialize", req("initialize", init_params()), NOT_FOUND_METHOD),
    # -- reconnect ----------------------------------------------------------------------------
    case(
        "reconnect-unknown-client",
        req(
            "reconnect",
            {"channel": ROOT, "clientId": "stranger", "lastSeenServerSeq": 0, "subscriptions": []},
        ),
        Error(-32008),
        init=False,
    ),
    case(
        "reconnect-no-seq",
        req("reconnect", {"channel": ROOT, "clientId": "b"}),
        bad_params("$.params.lastSeenServerSeq"),
        init=False,
    ),
    case(
        "reconnect-seq-string",
        req("reconnect", {"channel": ROOT, "clientId": "b", "lastSeenServerSeq": "5"}),
        bad_params("$.params.lastSeenServerSeq"),
        init=False,
    ),
    case(
        "reconnect-seq-1e300",
        req("reconnect", {"channel": ROOT, "clientId": "b", "lastSeenServerSeq": 1e300}),
        bad_params("$.params.lastSeenServerSeq"),
        init=False,
    ),
    case(
        "reconnect-subscriptions-string",
        req(
            "reconnect",
            {"channel": ROOT, "clientId": "b", "lastSeenServerSeq": 0, "subscriptions": T1},
        ),
        bad_params("$.params.subscriptions"),
        init=False,
    ),
    case(
        "reconnect-after-initialize",
        req("reconnect", {"channel": ROOT, "clientId": "a", "lastSeenServerSeq": 0}),
        NOT_FOUND_METHOD,
    ),
    # -- subscribe ----------------------------------------------------------------------------
    case("subscribe-no-params", req("subscribe"), bad_params("$.params.channel")),
    case(
        "subscribe-channel-number", req("subscribe", {"channel": 5}), bad_params("$.params.channel")
    ),
    case(
        "subscribe-channel-null",
        req("subscribe", {"channel": None}),
        bad_params("$.params.channel"),
    ),
    case("subscribe-params-array", req("subscribe", [T1]), bad_params()),
    case(
        "subscribe-unknown-terminal",
        req("subscribe", {"channel": "ahp-terminal:/nope"}),
        Error(-32008),
    ),
    case(
        "subscribe-odd-scheme", req("subscribe", {"channel": "javascript:alert(1)"}), Error(-32008)
    ),
    case(
        "subscribe-control-chars",
        req("subscribe", {"channel": "ahp-terminal:/t1\u0000"}),
        Error(-32008),
    ),
    case(
        "subscribe-extra-keys-ignored",
        req(
            "subscribe",
            {
                "channel": ROOT,
                "_meta": {},
                "delivery": {"maxLatencyMs": 0},
                "flowControl": {"receive": {}},
            },
        ),
        Result(check=lambda r: set(r) == {"snapshot"}),
    ),
    # -- createTerminal -----------------------------------------------------------------------
    case("create-twice", create(T1), Error(-32010)),
    case("create-no-params", req("createTerminal"), bad_params()),
    case("create-params-array", req("createTerminal", [T2]), bad_params()),
    case("create-no-claim", req("createTerminal", {"channel": T2}), bad_params("$.params.claim")),
    case(
        "create-no-channel",
        req("createTerminal", {"claim": {"kind": "client", "clientId": "a"}}),
        bad_params("$.params.channel"),
    ),
    case("create-channel-number", create(5), bad_params("$.params.channel")),
    case(
        "create-claim-string",
        req("createTerminal", {"channel": T2, "claim": "a"}),
        bad_params("$.params.claim"),
    ),
    case(
        "create-claim-unknown-kind",
        req("createTerminal", {"channel": T2, "claim": {"kind": "robot"}}),
        bad_params("$.params.claim"),
    ),
    case(
        "create-session-claim-no-session",
        req("createTerminal", {"channel": T2, "claim": {"kind": "session"}}),
        bad_params("$.params.claim.session"),
    ),
    case(
        "create-client-id-number",
        req("createTerminal", {"channel": T2, "claim": {"kind": "client", "clientId": 5}}),
        bad_params("$.params.claim.clientId"),
    ),
    case("create-name-number", create(T2, name=5), bad_params("$.params.name")),
    case("create-cols-string", create(T2, cols="80"), bad_params("$.params.cols")),
    case("create-cols-zero", create(T2, cols=0), bad_params("$.params.cols")),
    case("create-cols-negative", create(T2, cols=-1), bad_params("$.params.cols")),
    case("create-rows-zero", create(T2, rows=0), bad_params("$.params.rows")),
    case("create-rows-huge", create(T2, rows=65_536), bad_params("$.params.rows")),
    case("create-cols-2**63", create(T2, cols=2**63), bad_params("$.params.cols")),
    case("create-cols-1e300", create(T2, cols=1e300), bad_params("$.params.cols")),
    case("create-cols-fraction", create(T2, cols=80.5), bad_params("$.params.cols")),
    case("create-cols-bool", create(T2, cols=True), bad_params("$.params.cols")),
    case("create-other-scheme", create("file:///x"), bad_params("$.params.channel")),
    case("create-javascript-scheme", create("javascript:alert(1)"), bad_params("$.params.channel")),
    case("create-scheme-only", create("ahp-terminal:"), bad_params("$.params.channel")),
    case("create-uppercase-scheme", create("AHP-TERMINAL:/x"), bad_params("$.params.channel")),
    case("create-uri-nul", create("ahp-terminal:/a\u0000b"), bad_params("$.params.channel")),
    case("create-uri-escape", create("ahp-terminal:/a\u001b[2Jb"), bad_params("$.params.channel")),
    case("create-uri-newline", create("ahp-terminal:/a\nb"), bad_params("$.params.channel")),
    case("create-uri-c1", create("ahp-terminal:/a\u0085b"), bad_params("$.params.channel")),
    case("create-uri-del", create("ahp-terminal:/a\u007fb"), bad_params("$.params.channel")),
    case("create-cwd-relative", create(T2, cwd="tmp"), bad_params("$.params.cwd")),
    case("create-cwd-remote-host", create(T2, cwd="file://evil/tmp"), bad_params("$.params.cwd")),
    case("create-cwd-file-relative", create(T2, cwd="file:tmp"), bad_params("$.params.cwd")),
    case("create-cwd-file-no-path", create(T2, cwd="file://"), bad_params("$.params.cwd")),
    case(
        "create-cwd-javascript", create(T2, cwd="javascript:alert(1)"), bad_params("$.params.cwd")
    ),
    case("create-cwd-missing-dir", create(T2, cwd="/nonexistent/dir"), bad_params()),
    case("create-cwd-is-a-file", create(T2, cwd="/etc/passwd"), bad_params()),
    case("create-cwd-nul", create(T2, cwd="/tmp/\u0000x"), bad_params()),
    case("create-cwd-encoded-nul", create(T2, cwd="file:///tmp%00x"), bad_params()),
    case("create-cwd-number", create(T2, cwd=5), bad_params("$.params.cwd")),
    # -- disposeTerminal ----------------------------------------------------------------------
    case("dispose-no-params", req("disposeTerminal"), bad_params("$.params.channel")),
    case(
        "dispose-channel-number",
        req("disposeTerminal", {"channel": 5}),
        bad_params("$.params.channel"),
    ),
    case(
        "dispose-unknown", req("disposeTerminal", {"channel": "ahp-terminal:/nope"}), Error(-32008)
    ),
    case("dispose-root", req("disposeTerminal", {"channel": ROOT}), Error(-32008)),
    case(
        "dispose-twice",
        req("disposeTerminal", {"channel": T2}),
        Error(-32008),
        setup=_dispose_t2,
    ),
    # -- dispatchAction: malformed envelopes are dropped (no origin to echo to) ---------------
    case(
        "dispatch-no-client-seq",
        note("dispatchAction", {"channel": T1, "action": {"type": "terminal/cleared"}}),
    ),
    case("dispatch-client-seq-string", act({"type": "terminal/cleared"}, client_seq="1")),
    case(
        "dispatch-client-seq-1e300",
        act({"type": "terminal/titleChanged", "title": "x"}, client_seq=1e300),
    ),
    case("dispatch-client-seq-fraction", act({"type": "terminal/cleared"}, client_seq=1.5)),
    case("dispatch-no-action", note("dispatchAction", {"channel": T1, "clientSeq": 1})),
    case("dispatch-action-number", act(5)),
    case("dispatch-action-array", act([{"type": "terminal/cleared"}])),
    case(
        "dispatch-no-channel",
        note("dispatchAction", {"clientSeq": 1, "action": {"type": "terminal/cleared"}}),
    ),
    case("dispatch-params-array", note("dispatchAction", [T1, 1, {"type": "terminal/cleared"}])),
    case("dispatch-no-params", note("dispatchAction")),
    # An action without a string type: an echo of it would carry no discriminant for a
    # typed decoder (it was echoed so), so it is dropped as malformed.
    case("action-no-type", act({"data": "x"})),
    case("action-type-number", act({"type": 5})),
    # -- dispatchAction: rejected, echoed to the sender only ----------------------------------
    case("action-unknown-type", act({"type": "future/thing", "x": 1}), Rejected("future/thing")),
    case(
        "action-forged-data",
        act({"type": "terminal/data", "data": "forged"}),
        Rejected("terminal/data"),
    ),
    case(
        "action-forged-exit",
        act({"type": "terminal/exited", "exitCode": 0}),
        Rejected("terminal/exited"),
    ),
    case(
        "action-forged-cwd",
        act({"type": "terminal/cwdChanged", "cwd": "file:///etc"}),
        Rejected("terminal/cwdChanged", heal=True),
    ),
    case(
        "action-forged-command",
        act(
            {
                "type": "terminal/commandExecuted",
                "commandId": "c",
                "commandLine": "rm",
                "timestamp": 0,
            }
        ),
        Rejected("terminal/commandExecuted"),
    ),
    case(
        "action-forged-detection",
        act({"type": "terminal/commandDetectionAvailable"}),
        Rejected("terminal/commandDetectionAvailable"),
    ),
    case(
        "action-root-on-terminal",
        act({"type": "root/configChanged", "config": {}}),
        Rejected("root/configChanged"),
    ),
    case(
        "action-forged-catalogue",
        act({"type": "root/terminalsChanged", "terminals": []}, ROOT),
        Rejected("root/terminalsChanged", ROOT, heal=True),
    ),
    case(
        "action-terminal-on-root",
        act({"type": "terminal/input", "data": "x"}, ROOT),
        Rejected("terminal/input", ROOT),
    ),
    case(
        "action-config-not-object",
        act({"type": "root/configChanged", "config": 5}, ROOT),
        Rejected("root/configChanged", ROOT),
    ),
    case("input-no-data", act({"type": "terminal/input"}), Rejected("terminal/input")),
    case(
        "input-data-number", act({"type": "terminal/input", "data": 5}), Rejected("terminal/input")
    ),
    case(
        "resize-zero",
        act({"type": "terminal/resized", "cols": 0, "rows": 5}),
        Rejected("terminal/resized", heal=True),
    ),
    case(
        "resize-negative",
        act({"type": "terminal/resized", "cols": 80, "rows": -24}),
        Rejected("terminal/resized", heal=True),
    ),
    case(
        "resize-huge",
        act({"type": "terminal/resized", "cols": 100_000, "rows": 100_000}),
        Rejected("terminal/resized", heal=True),
    ),
    case(
        "resize-1e300",
        act({"type": "terminal/resized", "cols": 1e300, "rows": 5}),
        Rejected("terminal/resized"),
    ),
    case(
        "resize-string",
        act({"type": "terminal/resized", "cols": "80", "rows": 24}),
        Rejected("terminal/resized"),
    ),
    case(
        "resize-no-rows",
        act({"type": "terminal/resized", "cols": 80}),
        Rejected("terminal/resized"),
    ),
    case(
        "claim-held-by-another",
        act({"type": "terminal/claimed", "claim": {"kind": "client", "clientId": "a"}}),
        Rejected("terminal/claimed", heal=True),
    ),
    case(
        "claim-malformed",
        act({"type": "terminal/claimed", "claim": {"kind": "robot"}}),
        Rejected("terminal/claimed"),
    ),
    case(
        "title-null",
        act({"type": "terminal/titleChanged", "title": None}),
        Rejected("terminal/titleChanged"),
    ),
    # -- dispatchAction: unknown or disposed terminals: rejected to the sender (issue 25) -------
    case(
        "action-unknown-terminal",
        act({"type": "terminal/input", "data": "x"}, "ahp-terminal:/nope"),
        Rejected("terminal/input", channel="ahp-terminal:/nope"),
    ),
    case(
        "action-disposed-terminal",
        act({"type": "terminal/input", "data": "x"}, T2),
        Rejected("terminal/input", channel=T2),
        setup=_dispose_t2,
    ),
    case(
        "action-odd-scheme-channel",
        act({"type": "terminal/input", "data": "x"}, "javascript:alert(1)"),
        Rejected("terminal/input", channel="javascript:alert(1)"),
    ),
    case(
        "action-channel-control-chars",
        act({"type": "terminal/input", "data": "x"}, T1 + "\u0000"),
        Rejected("terminal/input", channel=T1 + "\u0000"),
    ),
    # -- unsubscribe --------------------------------------------------------------------------
    case("unsubscribe-no-channel", note("unsubscribe", {})),
    case("unsubscribe-unknown", note("unsubscribe", {"channel": "ahp-terminal:/nope"})),
    case("unsubscribe-params-array", note("unsubscribe", [T1])),
    # -- notification methods sent as requests are answered ------------------------------------
    case(
        "dispatch-as-request-malformed",
        req("dispatchAction", {"channel": T1}),
        bad_params("$.params.clientSeq"),
    ),
    case(
        "dispatch-as-request-unknown-channel",
        req(
            "dispatchAction",
            {"channel": "ahp-terminal:/nope", "clientSeq": 1, "action": {"type": "x"}},
        ),
        Rejected("x", channel="ahp-terminal:/nope"),
        Result(None),
    ),
    case(
        "unsubscribe-as-request-malformed", req("unsubscribe", {}), bad_params("$.params.channel")
    ),
    # -- size ---------------------------------------------------------------------------------
    case(
        "huge-string-7MB-in-params",
        req("ping", {"channel": ROOT, "pad": "x" * (7 * MiB)}),
        Result(None),
    ),
    case(
        "huge-channel-7MB",
        req("subscribe", {"channel": "ahp-terminal:/" + "x" * (7 * MiB)}),
        Error(-32008),
    ),
    case("huge-cwd-1MB", create(T2, cwd="/" + "d" * MiB), bad_params()),
    case("over-8MiB-closes-1009", "x" * (8 * MiB + 1), closes=1009),
]


def test_corpus_is_large_and_named_uniquely() -> None:
    names = [c.name for c in CORPUS]
    assert len(names) == len(set(names))
    assert len(CORPUS) >= 60


# -- the harness ----------------------------------------------------------------------------


async def _until(p: Peer, stop: Callable[[dict[str, Any]], bool]) -> list[dict[str, Any]]:
    """Messages received before the first one for which ``stop`` holds (that one is consumed)."""
    got: list[dict[str, Any]] = []
    while True:
        message = await p.recv()
        if stop(message):
            return got
        got.append(message)


def _title_echo(title: str, client_id: str) -> Callable[[dict[str, Any]], bool]:
    def stop(m: dict[str, Any]) -> bool:
        params = m.get("params", {})
        return (
            m.get("method") == "action"
            and params.get("channel") == T1
            and params.get("action") == {"type": "terminal/titleChanged", "title": title}
            and params.get("origin", {}).get("clientId") == client_id
        )

    return stop


async def _rename(p: Peer, title: str, client_id: str) -> list[dict[str, Any]]:
    """Rename T1 (a fence): everything received before its echo and catalogue update."""
    await p.dispatch(T1, {"type": "terminal/titleChanged", "title": title})
    got = await _until(p, _title_echo(title, client_id))
    return got + await _until(p, _catalogue_title(title))


async def _check_works(p: Peer, client_id: str, *, initialized: bool) -> None:
    """The connection answers ping and subscribe, and the server state is untouched."""
    assert (await p.call("ping", {"channel": ROOT}, msg_id="after"))["result"] is None
    if not initialized:
        await p.initialize(client_id)
    root = (await p.result("subscribe", {"channel": ROOT}))["snapshot"]["state"]
    assert [t["resource"] for t in root["terminals"]] == [T1]
    state = (await p.result("subscribe", {"channel": T1}))["snapshot"]["state"]
    assert state["claim"] == {"kind": "client", "clientId": "b"}
    assert (state["cols"], state["rows"], state["title"]) == (80, 24, "b-post")
    assert state["content"] == []  # no input ever reached the pty (cat would echo it)
    assert "exitCode" not in state


def _traceback_records(records: list[logging.LogRecord]) -> list[logging.LogRecord]:
    return [
        r
        for r in records
        if r.levelno >= logging.ERROR
        or (r.levelno >= logging.WARNING and r.exc_info)
        or "Traceback" in r.getMessage()
    ]


def _catalogue_title(title: str) -> Callable[[dict[str, Any]], bool]:
    """The catalogue update that follows a rename of T1 (T1 the only terminal)."""

    def stop(m: dict[str, Any]) -> bool:
        params = m.get("params", {})
        action = params.get("action", {})
        return (
            m.get("method") == "action"
            and params.get("channel") == ROOT
            and action.get("type") == "root/terminalsChanged"
            and [(t["resource"], t["title"]) for t in action["terminals"]] == [(T1, title)]
        )

    return stop


#: ``a``'s fence: empty input, through T1's reducer like every action of ``a`` on T1 (so
#: after their echoes), writing nothing; ``a`` does not hold T1, and input is the one
#: change open to it (the policy table, ``ahp.reducers.policy``).
_A_FENCE: Final = {"type": "terminal/input", "data": ""}


def _fence_echo(client_id: str) -> Callable[[dict[str, Any]], bool]:
    def stop(m: dict[str, Any]) -> bool:
        params = m.get("params", {})
        return (
            m.get("method") == "action"
            and params.get("channel") == T1
            and params.get("action") == _A_FENCE
            and params.get("origin", {}).get("clientId") == client_id
            and "rejectionReason" not in params
        )

    return stop


async def _fence(p: Peer, client_id: str) -> list[dict[str, Any]]:
    """Everything ``p`` (not T1's holder) received before the echo of its fence."""
    await p.dispatch(T1, _A_FENCE)
    return await _until(p, _fence_echo(client_id))


def _is_a_fence_noise(m: dict[str, Any]) -> bool:
    """``b``'s view of ``a``'s own fence (its echo)."""
    return _fence_echo("a")(m)


@pytest.mark.parametrize("c", [pytest.param(c, id=c.name, marks=c.marks) for c in CORPUS])
async def test_bad_input(c: Case, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="ahp")
    caplog.set_level(logging.INFO)
    with trio.fail_after(4 * TIMEOUT):
        async with running_server(shell="/bin/cat") as server, peer(server.url) as b:
            await b.initialize("b")
            assert (
                await b.result(
                    "createTerminal",
                    {"channel": T1, "claim": {"kind": "client", "clientId": "b"}},
                )
                is None
            )
            await b.result("subscribe", {"channel": T1})
            async with peer(server.url) as a:
                if c.init:
                    await a.initialize("a")
                    await a.result("subscribe", {"channel": T1})
                if c.setup is not None:
                    await c.setup(a)
                await _rename(b, "b-pre", "b")  # b has seen everything before the case
                if c.init:  # so has a: the rename's catalogue update comes last
                    await _until(a, _catalogue_title("b-pre"))
                await a.result("ping", {"channel": ROOT})
                a.notes.clear()

                for frame in c.frames:
                    try:
                        await a.send(frame)
                    except ConnectionClosed:
                        assert c.closes is not None  # closed while a frame was being sent

                if c.closes is not None:
                    got: list[dict[str, Any]] = []
                    with pytest.raises(ConnectionClosed) as closed:
                        while True:
                            got.append(await a.recv())
                    assert closed.value.reason is not None
                    assert closed.value.reason.code == c.closes
                elif c.init:
                    got = await _fence(a, "a")
                else:
                    await a.send(ping("fence"))
                    got = await _until(a, lambda m: m.get("id") == "fence" and "result" in m)
                expected = _expand(c.expect)
                assert len(got) == len(expected), (got, expected)
                for want, message in zip(expected, got, strict=True):
                    assert _matches(want, message, "a"), (want, message)

                seen = [m for m in await _rename(b, "b-post", "b") if not _is_a_fence_noise(m)]
                assert seen == [], f"another client saw something of a's mistake: {seen}"
                if c.closes is None:
                    await _check_works(a, "a", initialized=c.init or c.initializes)
            if c.closes is not None:
                async with peer(server.url) as fresh:
                    await _check_works(fresh, "fresh", initialized=False)
    assert not _traceback_records(caplog.records), [
        (r.levelname, r.getMessage()[:200]) for r in _traceback_records(caplog.records)
    ]


# -- generated messages at the dispatcher ---------------------------------------------------

_CHANNELS = [ROOT, T1, T2, T1 + "\u0000", "javascript:alert(1)", "", "ahp-terminal:"]
_METHODS = [
    "initialize",
    "reconnect",
    "ping",
    "subscribe",
    "unsubscribe",
    "createTerminal",
    "disposeTerminal",
    "dispatchAction",
    "listSessions",
]
_ACTION_TYPES = [
    "terminal/input",
    "terminal/resized",
    "terminal/claimed",
    "terminal/titleChanged",
    "terminal/cleared",
    "terminal/data",
    "terminal/exited",
    "terminal/cwdChanged",
    "terminal/commandExecuted",
    "terminal/commandFinished",
    "terminal/commandDetectionAvailable",
    "root/configChanged",
    "root/terminalsChanged",
    "future/unknown",
]


def _strategies() -> dict[str, Any]:
    """Hypothesis strategies for frames (built lazily: collection stays fast)."""
    import json

    from hypothesis import strategies as st

    scalars = (
        st.none()
        | st.booleans()
        | st.integers(-(2**70), 2**70)
        | st.floats()
        | st.text(max_size=12)
    )
    values = st.recursive(
        scalars,
        lambda inner: (
            st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
        ),
        max_leaves=8,
    )

    def mostly(valid: Any) -> Any:
        """Usually a well-typed value (so that requests get deep), sometimes anything."""
        return valid | valid | valid | values

    channels = mostly(st.sampled_from([T1, T1, T2, ROOT])) | st.sampled_from(_CHANNELS)
    dims = mostly(st.integers(-3, 5000))
    claims = mostly(
        st.fixed_dictionaries(
            {"kind": st.just("client"), "clientId": st.sampled_from(["fuzz", "other", ""])}
        )
        | st.fixed_dictionaries(
            {"kind": st.just("session"), "session": st.text(max_size=6)},
            optional={"turnId": st.text(max_size=4), "toolCallId": values},
        )
    )
    actions = mostly(
        st.fixed_dictionaries(
            {"type": st.sampled_from(_ACTION_TYPES)},
            optional={
                "data": mostly(st.text(max_size=16)),
                "cols": dims,
                "rows": dims,
                "title": mostly(st.text(max_size=8)),
                "claim": claims,
                "config": values,
                "exitCode": values,
                "commandId": values,
            },
        )
    )
    versions = mostly(st.just(["0.5.0"])) | st.lists(st.text(max_size=6), max_size=2)
    params_by_method = {
        "initialize": st.fixed_dictionaries(
            {"channel": channels, "clientId": mostly(st.sampled_from(["fuzz", "other"]))},
            optional={
                "protocolVersions": versions,
                "initialSubscriptions": mostly(st.lists(channels, max_size=3)),
                "locale": values,
            },
        ),
        "reconnect": st.fixed_dictionaries(
            {"channel": channels, "clientId": mostly(st.sampled_from(["fuzz", "other"]))},
            optional={
                "lastSeenServerSeq": mostly(st.integers(-5, 100)),
                "subscriptions": mostly(st.lists(channels, max_size=3)),
            },
        ),
        "createTerminal": st.fixed_dictionaries(
            {"channel": channels, "claim": claims},
            optional={
                "name": mostly(st.text(max_size=8)),
                "cwd": mostly(
                    st.sampled_from(["/tmp", "file:///tmp", "file://evil/tmp", "tmp", "file:"])
                ),
                "cols": dims,
                "rows": dims,
            },
        ),
        "dispatchAction": st.fixed_dictionaries(
            {
                "channel": channels,
                "clientSeq": mostly(st.integers(-5, 2**64)),
                "action": actions,
            }
        ),
    }
    generic = st.fixed_dictionaries({"channel": channels}) | values

    @st.composite
    def anything(draw: Any) -> str:
        """A message with any method, any jsonrpc, any id and any params."""
        method = draw(st.sampled_from(_METHODS) | st.text(max_size=8) | values)
        params = draw(params_by_method.get(method, generic) if isinstance(method, str) else generic)
        message = draw(
            st.fixed_dictionaries(
                {"jsonrpc": st.just("2.0") | values, "method": st.just(method)},
                optional={"id": st.integers(0, 99) | values, "params": st.just(params)},
            )
        )
        return json.dumps(message)  # (stdlib: big ints and NaN are fuzz too)

    @st.composite
    def plausible(draw: Any) -> str:
        """A well-formed request or notification of a real method, params as generated."""
        method = draw(st.sampled_from(_METHODS))
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        message["params"] = draw(params_by_method.get(method, generic))
        if method not in ("dispatchAction", "unsubscribe") or draw(st.booleans()):
            message["id"] = draw(st.integers(1, 99))
        return json.dumps(message)

    init = req("initialize", init_params(clientId="fuzz", initialSubscriptions=[ROOT]), 0)
    create_t1 = create(T1)
    subscribe_t1 = req("subscribe", {"channel": T1}, 0)
    # Well-formed envelopes around generated actions: these reach the terminal's reducer.
    dispatches = st.builds(
        lambda channel, seq, action: json.dumps(
            {
                "jsonrpc": "2.0",
                "method": "dispatchAction",
                "params": {"channel": channel, "clientSeq": seq, "action": action},
            }
        ),
        st.sampled_from([T1, T1, T1, T2, ROOT]),
        st.integers(0, 2**32),
        actions,
    )
    frames = st.lists(
        plausible()
        | plausible()
        | dispatches
        | dispatches
        | anything()
        | st.binary(max_size=40)
        | st.text(max_size=40)
        | values.map(json.dumps),
        min_size=4,
        max_size=16,
    )
    prelude = st.sampled_from([(), (init,)] + [(init, create_t1, subscribe_t1)] * 4)
    return {"frames": frames, "prelude": prelude}


_S = _strategies()


def _check_queued(outbox: Any, last_seq: list[int]) -> None:
    """Every queued frame is JSON, envelopes in strictly increasing serverSeq order."""
    from ahp.engine import Published

    for item in outbox.get_nowait():
        if isinstance(item, Published):
            assert item.seq > last_seq[0], "serverSeq must strictly increase"
            last_seq[0] = item.seq
            last_seq[1] += 1
            last_seq[2] += item.envelope.rejectionReason is not None
            orjson.loads(item.frame)
        else:
            message = orjson.loads(item)
            error = message.get("error")
            assert error is None or error["code"] != -32603, message  # no internal error


def _catalogue_matches(host: Any) -> bool:
    return [t.resource for t in host.list_terminals()] == list(host.terminals)


from hypothesis import HealthCheck, event, given, settings  # noqa: E402


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    database=None,
)
@given(prelude=_S["prelude"], frames=_S["frames"])
async def test_generated_frames_at_the_session(
    prelude: tuple[str, ...], frames: list[str | bytes]
) -> None:
    from ahp.engine import Outbox, open_host
    from ahp.server.session import ServerState, Session

    with trio.fail_after(4 * TIMEOUT):
        async with open_host(shell="/bin/cat") as host:
            outbox = Outbox(max_bytes=64 * MiB)
            session = Session(ServerState(host=host), outbox)
            last_seq = [0, 0, 0]  # last serverSeq, envelopes, rejections
            for frame in [*prelude, *frames]:
                await session.handle_frame(frame)
                await trio.testing.wait_all_tasks_blocked()
                _check_queued(outbox, last_seq)
                assert _catalogue_matches(host)
                if session.close_request is not None:
                    break  # the transport would close now
            session.disconnect()
            assert len(host.terminals) <= len(prelude) + len(frames)
            event(f"terminals created: {min(len(host.terminals), 2)}")
            event(f"envelopes: {min(last_seq[1], 5)}, rejections: {min(last_seq[2], 2)}")
