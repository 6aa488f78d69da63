"""Every line an MCP client sends gets the answer JSON-RPC 2.0 owes it (``ahp.mcp.screen``).

The real ``python -m ahp mcp`` runs as a subprocess and is spoken to in raw JSON
lines, as a client would write them (``json.dumps`` keeps a lone surrogate as
``\\udcff``). Each bad line is followed by a ``ping``: the server answers a line
before it reads the next, so the lines that arrive before the ping's answer are
exactly the bad line's answers (the SDK of mcp 2.3 gave none: the client waited
forever). Each test ends with a tool call that works, and the server's stderr
must hold no traceback.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Final

import pydantic
import pytest
import trio

from ahp.mcp.screen import MAX_DEPTH, MAX_INT_DIGITS, too_long
from ahp.mcp.stdio import TOO_LONG, ScreenedLines
from tests.helpers import kill_and_reap

ROOT = Path(__file__).resolve().parents[1]
#: Seconds allowed for one answer (the server answers at once; generous for a loaded machine).
ANSWER_TIMEOUT = 20.0
#: ``initialize``'s params, as a client sends them.
INIT: Final = {
    "protocolVersion": "2025-06-18",
    "capabilities": {},
    "clientInfo": {"name": "test", "version": "1"},
}


class RawClient:
    """JSON lines to and from a ``python -m ahp mcp`` subprocess."""

    def __init__(self, proc: trio.Process) -> None:
        self._proc = proc
        self._buffer = b""
        self._ping = 1000

    async def send(self, line: bytes) -> None:
        assert self._proc.stdin is not None
        await self._proc.stdin.send_all(line + b"\n")

    async def request(self, message: dict[str, Any]) -> dict[str, Any]:
        """Send ``message``; its answer (a tool call runs beside a ping: no ping here)."""
        await self.send(json.dumps(message).encode())
        with trio.fail_after(ANSWER_TIMEOUT):
            while True:
                answer = await self._message()
                if answer.get("id") == message["id"]:
                    return answer
                assert "id" not in answer, answer  # notifications (progress) only

    async def initialize(self) -> None:
        """The handshake: ``initialize`` (answered), then ``notifications/initialized``."""
        await self.request({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": INIT})
        await self.send(b'{"jsonrpc": "2.0", "method": "notifications/initialized"}')

    async def answers_before_ping(self) -> list[dict[str, Any]]:
        """Send a ping; every message that arrives before its answer."""
        self._ping += 1
        await self.send(json.dumps({"jsonrpc": "2.0", "id": self._ping, "method": "ping"}).encode())
        before: list[dict[str, Any]] = []
        with trio.fail_after(ANSWER_TIMEOUT):
            while True:
                message = await self._message()
                if message.get("id") == self._ping and "result" in message:
                    return before
                before.append(message)

    async def _message(self) -> dict[str, Any]:
        assert self._proc.stdout is not None
        while b"\n" not in self._buffer:
            chunk = await self._proc.stdout.receive_some()
            assert chunk, "the server closed stdout"
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        message = json.loads(line)  # one JSON message per line: the SDK's framing
        assert isinstance(message, dict)
        return message


@asynccontextmanager
async def raw_mcp(tmp_path: Path, *, initialize: bool = True) -> AsyncIterator[RawClient]:
    """An initialized ``python -m ahp mcp`` (``initialize``: else the test does it);
    checks it exits cleanly when stdin closes."""
    stderr = tmp_path / "mcp-stderr.log"
    with stderr.open("wb") as errlog:
        proc = await trio.lowlevel.open_process(
            [sys.executable, "-m", "ahp", "mcp"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=errlog,
            env={**os.environ, "PYTHONPATH": str(ROOT), "SHELL": "/bin/bash"},
            cwd=str(tmp_path),
        )
    try:
        client = RawClient(proc)
        if initialize:
            await client.initialize()
        yield client
        # Still serving: a tool call works after everything the test sent.
        answer = await client.request(_call(2, "run_command", command="echo still-$((6*7))"))
        assert not answer["result"]["isError"] and "still-42" in _text(answer), answer
        assert proc.stdin is not None
        await proc.stdin.aclose()
        with trio.fail_after(ANSWER_TIMEOUT):
            assert await proc.wait() == 0
    finally:
        await kill_and_reap(proc)
        log = stderr.read_text()
        assert "Traceback" not in log, log


def _call(request_id: int, tool: str, **arguments: Any) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "tools/call",
        "params": {"name": tool, "arguments": arguments},
    }


def _text(answer: dict[str, Any]) -> str:
    return " ".join(part["text"] for part in answer["result"]["content"])


def _error(answers: list[dict[str, Any]]) -> tuple[Any, int, str]:
    """The id, code and message of the one answer, an error."""
    assert len(answers) == 1, answers
    (answer,) = answers
    assert answer["jsonrpc"] == "2.0" and "result" not in answer, answer
    return answer["id"], answer["error"]["code"], answer["error"]["message"]


async def test_lines_that_are_not_requests_are_answered(tmp_path: Path) -> None:
    """-32700 with id null for a line that is not JSON (even one with a readable id);
    -32600 for JSON that is not a valid request, with its id when it has one."""
    cut = json.dumps(_call(78, "run_command", command="echo hi"))[:-2].encode()
    cases: list[tuple[bytes, Any, int, str]] = [
        (cut, None, -32700, "Parse error"),
        (b"hello", None, -32700, "Parse error"),
        (b'{"id": 3, "method": "ping"}', 3, -32600, "jsonrpc"),
        (b'{"jsonrpc": "2.0", "id": "s", "method": "ping", "params": [1]}', "s", -32600, "params"),
        (b"[]", None, -32600, "batch"),
        (b"42", None, -32600, "not an integer"),
        (b'{"jsonrpc": "2.0", "id": true, "method": "ping"}', None, -32600, "boolean"),
        (b'{"jsonrpc": "2.0", "id": 1.5, "method": "ping"}', None, -32600, "fraction"),
        (b'{"jsonrpc": "2.0", "id": null, "method": "ping"}', None, -32600, "the id is null"),
    ]
    async with raw_mcp(tmp_path) as client:
        for line, request_id, code, words in cases:
            await client.send(line)
            answered = _error(await client.answers_before_ping())
            assert answered[:2] == (request_id, code), (line, answered)
            assert words in answered[2], (line, answered)
        # Notifications get no answer, valid or not; nor do blank lines.
        for line in (
            b'{"jsonrpc": "2.0", "method": "notifications/nothing"}',
            b'{"jsonrpc": "2.0", "method": "notifications/x", "params": [1]}',
            b"",
            b"  \r",
        ):
            await client.send(line)
            assert await client.answers_before_ping() == [], line


async def test_refused_requests_say_what_is_wrong(tmp_path: Path) -> None:
    """Probe J: a request before ``initialize``, and one whose params the SDK could not
    validate, were answered -32602 "Invalid request parameters" with ``data: ""``, the
    same for every cause. The code stays; the message and data say the cause."""

    async def refused(request_id: int, method: str, params: Any) -> str:
        message = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params is not None:
            message["params"] = params
        answer = await client.request(message)
        error = answer["error"]
        assert error["code"] == -32602, answer
        assert error["message"] == f"Invalid request parameters: {error['data']}", answer
        reason: str = error["data"]
        return reason

    async with raw_mcp(tmp_path, initialize=False) as client:
        call: dict[str, Any] = {"name": "run_command", "arguments": {"command": "true"}}
        for method in ("tools/list", "tools/call"):
            reason = await refused(10, method, call if method == "tools/call" else None)
            assert reason.startswith(f"the session is not initialized: {method!r} needs an ")
        reason = await refused(11, "initialize", {**INIT, "protocolVersion": 5})
        assert reason == "params.protocolVersion: Input should be a valid string"
        await client.initialize()
        cases: list[tuple[Any, str]] = [
            (None, "params: Field required"),
            ({"name": "run_command", "arguments": "echo x"}, "params.arguments: Input should be"),
            ({"name": "run_command", "arguments": [1]}, "params.arguments: Input should be"),
            ({"name": 123, "arguments": {}}, "params.name: Input should be a valid string"),
            (
                {"name": "list_terminals", "_meta": {"progressToken": {"x": 1}}},
                "params._meta.progressToken",
            ),
        ]
        for params, expected in cases:
            reason = await refused(12, "tools/call", params)
            assert reason.startswith(expected), (params, reason)


async def test_a_lone_surrogate_is_a_tool_error_and_nothing_runs(tmp_path: Path) -> None:
    """``"\\udcff"`` (a string cut inside an emoji): in a tool's arguments a tool error
    naming the argument, with the request's id, and the command is not run; elsewhere
    -32602 (params) or -32600 naming where it is; in a notification nothing."""
    ran = tmp_path / "ran"
    async with raw_mcp(tmp_path) as client:
        calls = [
            (_call(10, "run_command", command=f"touch {ran}; echo \udcff"), "'command'"),
            (_call(11, "run_command", command=f"touch {ran}", terminal="a\ud800"), "'terminal'"),
            (_call(12, "send_input", terminal="main", text="\ud83d"), "'text'"),
            (_call(13, "send_input", terminal="main", keys=["enter", "\udcff"]), "'keys[1]'"),
        ]
        for message, argument in calls:
            await client.send(json.dumps(message).encode())
            (answer,) = await client.answers_before_ping()
            assert answer["id"] == message["id"] and answer["result"]["isError"] is True, answer
            text = _text(answer)
            assert f"argument {argument} holds a lone surrogate (\\u" in text, text
            assert "nothing was run; send valid Unicode" in text, text
        assert not ran.exists()
        others: list[tuple[dict[str, Any], Any, int, str]] = [
            ({"jsonrpc": "2.0", "id": 20, "method": "ping\udcff"}, 20, -32600, "$.method"),
            (
                {"jsonrpc": "2.0", "id": 21, "method": "tools/call", "params": {"name": "x\udcff"}},
                21,
                -32602,
                "$.params.name holds a lone surrogate (\\udcff); send valid Unicode",
            ),
            ({"jsonrpc": "2.0", "id": "a\udcff", "method": "ping"}, None, -32600, "the id"),
        ]
        for message, request_id, code, words in others:
            await client.send(json.dumps(message).encode())
            answered = _error(await client.answers_before_ping())
            assert answered[:2] == (request_id, code) and words in answered[2], answered
        await client.send(
            json.dumps(
                {"jsonrpc": "2.0", "method": "notifications/x", "params": {"a": "\udcff"}}
            ).encode()
        )
        assert await client.answers_before_ping() == []


async def test_bytes_that_are_not_utf8_are_refused_and_nothing_runs(tmp_path: Path) -> None:
    """A raw byte that is not UTF-8 (0xff, or a character cut after its first byte) is
    never replaced by U+FFFD and run: in a tool's arguments a tool error naming the
    argument and the byte; in the id -32600; outside any string -32700; in a
    notification nothing."""
    ran = tmp_path / "ran"
    async with raw_mcp(tmp_path) as client:
        for request_id, raw, byte in [(30, b"\xff", "0xff"), (31, b"caf\xc3", "0xc3")]:
            message = json.dumps(_call(request_id, "run_command", command=f"touch {ran}; echo X"))
            await client.send(message.encode().replace(b"X", raw))
            (answer,) = await client.answers_before_ping()
            assert answer["id"] == request_id and answer["result"]["isError"] is True, answer
            text = _text(answer)
            assert f"argument 'command' holds a byte that is not UTF-8 ({byte})" in text, text
            assert "nothing was run; send UTF-8" in text, text
        assert not ran.exists()
        await client.send(b'{"jsonrpc": "2.0", "id": "a\xfe", "method": "ping"}')
        answered = _error(await client.answers_before_ping())
        assert answered == (
            None,
            -32600,
            "Invalid Request: the id holds a byte that is not UTF-8 (0xfe); send UTF-8",
        )
        await client.send(b'\x80{"jsonrpc": "2.0", "id": 32, "method": "ping"}')
        answered = _error(await client.answers_before_ping())
        assert answered == (
            None,
            -32700,
            "Parse error: a byte that is not UTF-8 (0x80) at character 0",
        )
        await client.send(
            b'{"jsonrpc": "2.0", "method": "notifications/x", "params": {"a": "\xff"}}'
        )
        assert await client.answers_before_ping() == []
        answer = await client.request(_call(33, "run_command", command="echo caf\u00e9"))
        assert "café" in _text(answer) and not answer["result"].get("isError"), answer


async def test_huge_ids_and_deep_nesting_are_answered(tmp_path: Path) -> None:
    """Past the SDK parser's bounds (an integer of 5,000 digits, 3,000 levels of
    nesting, which Python's parser cannot read either): an error, with the id when
    it comes before the deep part."""
    deep = "[" * 3000 + "]" * 3000
    cases: list[tuple[str, Any, int, str]] = [
        (
            '{"jsonrpc":"2.0","id":' + "9" * 5000 + ',"method":"tools/list"}',
            None,
            -32600,
            "5000 digits",
        ),
        (
            f'{{"jsonrpc":"2.0","id":79,"method":"tools/list","params":{deep}}}',
            79,
            -32600,
            "nested",
        ),
        (
            f'{{"jsonrpc":"2.0","params":{{"a":{deep}}},"id":80,"method":"x"}}',
            None,
            -32600,
            "nested",
        ),
        (
            '{"jsonrpc":"2.0","id":81,"method":"x","params":{"a":' + "[" * 250 + "]" * 250 + "}}",
            81,
            -32600,
            f"nested 252 levels deep; at most {MAX_DEPTH}",
        ),
        (
            '{"jsonrpc":"2.0","id":82,"method":"x","params":{"n":-' + "9" * 5000 + "}}",
            82,
            -32602,
            f"$.params.n is an integer of 5000 digits; send at most {MAX_INT_DIGITS} digits",
        ),
    ]
    async with raw_mcp(tmp_path) as client:
        for line, request_id, code, words in cases:
            await client.send(line.encode())
            answered = _error(await client.answers_before_ping())
            assert answered[:2] == (request_id, code) and words in answered[2], answered
        message = json.dumps(_call(83, "run_command", command="echo x", timeout=0))
        await client.send(message.replace('"timeout": 0', '"timeout": 1' + "0" * 4400).encode())
        (answer,) = await client.answers_before_ping()
        assert answer["id"] == 83 and answer["result"]["isError"] is True, answer
        assert "argument 'timeout' is an integer of 4401 digits" in _text(answer)


def test_the_bounds_are_the_sdk_parsers() -> None:
    """MAX_DEPTH and MAX_INT_DIGITS are where the SDK's parser (mcp_types' adapter,
    jiter) stops: at the bound it takes a message, one past it refuses it."""
    import mcp_types

    def takes(params: str) -> bool:
        line = '{"jsonrpc":"2.0","id":1,"method":"x","params":' + params + "}"
        try:
            mcp_types.jsonrpc_message_adapter.validate_json(line, by_name=False)
        except pydantic.ValidationError:
            return False
        return True

    def nested(depth: int) -> str:  # the message is level 1, params level 2
        return '{"a":' + "[" * (depth - 2) + "]" * (depth - 2) + "}"

    assert takes(nested(MAX_DEPTH)) and not takes(nested(MAX_DEPTH + 1))
    assert takes('{"n":' + "9" * MAX_INT_DIGITS + "}")
    assert not takes('{"n":' + "9" * (MAX_INT_DIGITS + 1) + "}")


class _Sink:
    """An answer stream as the SDK's write stream looks to :class:`ScreenedLines`."""

    def __init__(self) -> None:
        self.sent: list[Any] = []
        self.closed = False

    async def send(self, item: Any, /) -> None:
        self.sent.append(item.message)

    def close(self) -> None:
        self.closed = True


async def _lines(*lines: str) -> AsyncIterator[str]:
    for line in lines:
        yield line


async def test_screened_lines_answer_an_over_long_line_and_close_at_the_end() -> None:
    """The reader's dropped line is answered -32600 naming the bound; valid lines go on
    unchanged; the answer stream is closed at end of input (the SDK's writer ends)."""
    valid = '{"jsonrpc": "2.0", "id": 1, "method": "ping"}\n'
    screened = ScreenedLines(_lines(TOO_LONG, valid), max_line_bytes=1234)
    sink = _Sink()
    screened.answer_into(sink)
    assert [line async for line in screened] == [valid]
    assert sink.sent == [too_long(1234).answer] and sink.closed
    assert "1234 bytes" in sink.sent[0].error.message and sink.sent[0].id is None


@pytest.mark.parametrize("close_first", [False, True])
async def test_screened_lines_wait_for_their_answer_stream(close_first: bool) -> None:
    """An answer due before :meth:`answer_into` waits for it (the SDK's reader task may
    run first); after :meth:`close` a stream handed in is closed at once."""
    screened = ScreenedLines(_lines("nope\n"))
    sink = _Sink()
    if close_first:
        screened.close()
        screened.answer_into(sink)
        assert sink.closed
        return
    async with trio.open_nursery() as nursery:
        results: list[list[str]] = []

        async def read() -> None:
            results.append([line async for line in screened])

        nursery.start_soon(read)
        await trio.testing.wait_all_tasks_blocked()
        assert not results and not sink.sent
        screened.answer_into(sink)
    assert results == [[]] and len(sink.sent) == 1 and sink.sent[0].error.code == -32700
