"""What a peer can cause the audit log and the wire log to hold, through a real server
(port 0) and real WebSocket clients (probe K): a budget per connection and event, one
for every read-only connection together, with what was left out counted; refused
read-only requests audited; long strings cut with their length; both tokens scrubbed
from both logs in every escaped form; credentials the server echoes redacted."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import orjson
import trio

from ahp.protocol.processes import EXEC, SIGNAL
from ahp.record.audit import (
    AUDIT_PEER_BURST,
    AUDIT_READ_ONLY_BURST,
    AUDIT_READ_ONLY_BYTES_PER_SECOND,
    MAX_AUDIT_STRING,
)
from ahp.record.sink import REDACTED
from ahp.server import ServeOptions
from ahp.server.dispatch import READ_ONLY_REFUSAL
from tests.helpers import wait_for_text
from tests.test_audit_wire import claim, drained, listing, read_lines, wait_lines
from tests.wire import TOKEN, peer, running_server

ROOT = "ahp-root://"
T1 = "ahp-terminal:/t1"
READ = "read-only-secret-4242"


def audit_of(server: Any) -> Any:
    audit = server.state.audit
    assert audit is not None
    return audit


async def test_a_read_only_flood_cannot_rotate_the_audit_away(tmp_path: Path) -> None:
    """Probe K, t9: two read-only connections send refused take-overs with 8000-character
    session and chat strings. Before: one line of ~4.6 KB each, unlimited (19,000 of
    them rotated every earlier event out of the five files in 14 s)."""
    log = tmp_path / "audit.log"
    options = ServeOptions(port=0, token=TOKEN, read_token=READ, audit_log=str(log))
    async with running_server(options) as server:
        async with peer(server.url) as owner:
            await owner.initialize("owner")
            assert (
                await owner.result("createTerminal", {"channel": T1, "claim": claim("owner")})
                is None
            )
        started = trio.current_time()
        big = {"kind": "session", "session": "ahp-session:/" + "S" * 8000, "chat": "C" * 8000}
        flood = 600
        watcher_url = server.url.replace(TOKEN, READ)
        async with peer(watcher_url) as w1, peer(watcher_url) as w2:
            await w1.initialize("ro-" + "Z" * 250)
            await w2.initialize("ro-2")
            for _ in range(flood):
                for w in (w1, w2):
                    await w.dispatch(T1, {"type": "terminal/claimed", "claim": big})
            await w1.result("ping", {})  # (everything before it was handled)
            await w2.result("ping", {})
            elapsed = trio.current_time() - started
            await drained(audit_of(server).sink)
            size = log.stat().st_size
        # Everything the two read-only connections caused together: one shared budget
        # (before: 1,200 lines of 4.6 KB).
        bound = AUDIT_READ_ONLY_BURST + AUDIT_READ_ONLY_BYTES_PER_SECOND * elapsed + 8192
        assert size < bound, (size, elapsed)
        await wait_lines([log], lambda ls: any(x["event"] == "leftOut" for x in ls))
    lines = read_lines([log])
    assert any(x["event"] == "terminal.created" and x["by"] == "owner" for x in lines)
    taken = [x for x in lines if x["event"] == "claim" and x.get("reason") == "read-only"]
    assert 0 < len(taken) < flood
    # Long strings a client chose are cut, their length noted.
    session = taken[0]["claim"]["session"]
    assert session == "ahp-session:/" + "S" * (MAX_AUDIT_STRING - 13) + "…[8013 characters]"
    assert all(len(orjson.dumps(x)) < 4 * MAX_AUDIT_STRING for x in taken)
    # What was left out is counted (the first connection to leave says so at once).
    left = [x for x in lines if x["event"] == "leftOut"]
    assert left and all(x["readOnly"] is True for x in left)
    assert sum(x["lines"].get("claim (refused)", 0) for x in left) > 0
    assert all(x["count"] == sum(x["lines"].values()) for x in left)
    assert {x["by"] for x in left} <= {"ro-2", "ro-" + "Z" * 250}
    assert all(x["peer"].startswith("127.0.0.1:") for x in left)


async def test_a_full_access_connection_is_bounded_per_event_and_counted(
    tmp_path: Path,
) -> None:
    """Input with ``--audit-input`` (4 KiB lines) past the connection's budget for input
    is counted, not written; its exec after the flood is written (a budget per event),
    and so is another client's event; the counts add up to what was typed."""
    log = tmp_path / "audit.log"
    options = ServeOptions(port=0, token=TOKEN, audit_log=str(log), audit_input=True)
    async with running_server(options, shell="/bin/bash") as server:
        async with peer(server.url) as typist, peer(server.url) as other:
            await typist.initialize("typist")
            await other.initialize("other")
            assert (
                await typist.result("createTerminal", {"channel": T1, "claim": claim("typist")})
                is None
            )
            terminal = server.state.host.get(T1)
            await typist.dispatch(
                T1,
                {
                    "type": "terminal/input",
                    "data": "stty raw -echo; echo re''ady; exec cat >/dev/null\n",
                },
            )
            await wait_for_text(terminal, "ready")
            chunk = "x" * 4000
            flood = 4 * AUDIT_PEER_BURST // len(chunk)
            for _ in range(flood):
                await typist.dispatch(T1, {"type": "terminal/input", "data": chunk})
            ran = await typist.result(EXEC, {"argv": ["true"]})
            t2 = "ahp-terminal:/t2"
            assert (
                await other.result("createTerminal", {"channel": t2, "claim": claim("other")})
                is None
            )
        lines = await wait_lines(
            [log], lambda ls: sum(x["event"] == "disconnected" for x in ls) == 2
        )
    typed = [x for x in lines if x["event"] == "input" and x["by"] == "typist"]
    chunks = [x for x in typed if x.get("text") == chunk]
    assert 0 < len(chunks) < flood
    left = [x for x in lines if x["event"] == "leftOut" and x["by"] == "typist"]
    assert left and "readOnly" not in left[0]
    assert sum(x["lines"].get("input", 0) for x in left) == flood - len(chunks)
    assert sum(x.get("inputBytes", 0) for x in left) == (flood - len(chunks)) * len(chunk)
    assert [x["terminal"] for x in lines if x["event"] == "exec"] == [ran["channel"]]
    assert any(x["event"] == "terminal.created" and x["terminal"] == t2 for x in lines)


async def test_refused_read_only_requests_and_a_malformed_create_are_audited(
    tmp_path: Path,
) -> None:
    """Probe K, t10: every request refused to a read-only connection (-32009) was
    answered but left no line; a createTerminal without a claim neither."""
    log = tmp_path / "audit.log"
    options = ServeOptions(port=0, token=TOKEN, read_token=READ, audit_log=str(log))
    async with running_server(options) as server:
        async with peer(server.url) as owner:
            await owner.initialize("owner")
            assert (
                await owner.result("createTerminal", {"channel": T1, "claim": claim("owner")})
                is None
            )
            malformed = await owner.call("createTerminal", {"channel": "ahp-terminal:/nc"})
            assert malformed["error"]["code"] == -32602
        calls: list[tuple[str, dict[str, Any]]] = [
            ("createTerminal", {"channel": "ahp-terminal:/ro", "claim": claim("ro"), "name": "n"}),
            ("disposeTerminal", {"channel": T1}),
            (SIGNAL, {"channel": T1, "signal": "SIGINT"}),
            (EXEC, {"argv": ["rm", "-rf", "/tmp/x y"], "env": {"K": "secret-value"}}),
            ("x-ahp-terminals/execResult", {"channel": "ahp-terminal:/exec-1"}),
            ("x-ahp-terminals/ttyStatus", {"channel": T1}),
        ]
        async with peer(server.url.replace(TOKEN, READ)) as watcher:
            await watcher.initialize("ro")
            for method, params in calls:
                assert (await watcher.call(method, params))["error"]["code"] == -32009
        await drained(audit_of(server).sink)
    lines = read_lines([log])
    by_ro = {x["event"]: x for x in lines if x.get("by") == "ro"}
    assert set(by_ro) == {"terminal.created", "terminal.disposed", "signal", "exec", "request"}
    assert all(x["error"] == READ_ONLY_REFUSAL for x in by_ro.values())
    created = by_ro["terminal.created"]
    assert (created["terminal"], created["name"], created["claim"]) == (
        "ahp-terminal:/ro",
        "n",
        claim("ro"),
    )
    assert (by_ro["terminal.disposed"]["terminal"], by_ro["signal"]["signal"]) == (T1, "SIGINT")
    assert by_ro["exec"]["command"] == "rm -rf '/tmp/x y'" and by_ro["exec"]["env"] == ["K"]
    assert b"secret-value" not in log.read_bytes()
    requests = [x for x in lines if x["event"] == "request"]
    assert [x["method"] for x in requests] == [
        "x-ahp-terminals/execResult",
        "x-ahp-terminals/ttyStatus",
    ]
    [bad] = [
        x
        for x in lines
        if x["event"] == "terminal.created" and x.get("by") == "owner" and "error" in x
    ]
    assert bad["terminal"] == "ahp-terminal:/nc" and bad["error"].startswith("invalid params")


async def test_the_wire_log_redacts_credentials_the_server_echoes(tmp_path: Path) -> None:
    """Probe K, t13: a root/configChanged's password and token were redacted in the
    client's message and logged verbatim in the server's broadcast of it; a rejected
    unknown action echoed to its sender too."""
    directory = tmp_path / "wire"
    options = ServeOptions(port=0, token=TOKEN, wire_log=str(directory))
    async with running_server(options) as server:
        async with peer(server.url) as p1, peer(server.url) as p2:
            await p1.initialize("c1")
            await p2.initialize("c2")  # (subscribed to the root: gets the broadcast too)
            config = {"password": "P4ss-secret-42", "nested": {"Token": "cfg-secret-tok-77"}}
            await p1.dispatch(ROOT, {"type": "root/configChanged", "config": config})
            await p2.action(lambda p: p["action"]["type"] == "root/configChanged")
            await p1.dispatch(ROOT, {"type": "x-mine", "secret": "echoed-secret-5"})
            await p1.action(lambda p: p["action"]["type"] == "x-mine")
            await p1.result("ping", {})
        wire = server.state.wire_log
        assert wire is not None
        await drained(wire.sink)
    [path] = listing(directory)
    raw = path.read_bytes()
    for secret in (b"P4ss-secret-42", b"cfg-secret-tok-77", b"echoed-secret-5"):
        assert secret not in raw, secret
    lines = read_lines([path])
    echoes = [
        x["params"]["action"]
        for x in lines
        if x["_ahpLog"]["dir"] == "s2c" and x.get("method") == "action"
    ]
    configs = [a["config"] for a in echoes if a["type"] == "root/configChanged"]
    assert len(configs) == 2  # (one frame for each subscriber)
    assert all(c == {"password": "<redacted>", "nested": {"Token": "<redacted>"}} for c in configs)
    assert any(a == {"type": "x-mine", "secret": "<redacted>"} for a in echoes)


async def test_both_tokens_are_scrubbed_in_every_escaped_form(tmp_path: Path) -> None:
    """Probe K, t11: a token holding ``"`` or ``\\`` appears escaped in a JSON line and
    was not found by the scrubber; the read-only token was never scrubbed."""
    token = 'Tok"en\\secret-9876'
    read = 'Re"ad\\only-5555'
    log = tmp_path / "audit.log"
    directory = tmp_path / "wire"
    options = ServeOptions(
        port=0,
        token=token,
        read_token=read,
        audit_log=str(log),
        audit_input=True,
        wire_log=str(directory),
    )
    async with running_server(options, shell="/bin/bash") as server:
        assert server.token == token
        async with peer(server.url) as p:
            await p.initialize("c1")
            assert await p.result("createTerminal", {"channel": T1, "claim": claim("c1")}) is None
            await p.result("subscribe", {"channel": T1})
            # No echo: the line typed is not split across output frames (a token in
            # pieces is a documented limit); the command's output is one write.
            await p.dispatch(T1, {"type": "terminal/input", "data": "stty -echo\n"})
            for secret in (token, read):
                typed = "printf '%s\\n' '" + secret.replace("'", "'\\''") + "'\n"
                await p.dispatch(T1, {"type": "terminal/input", "data": typed})
            await p.text_until(T1, "only-5555")
            # ... and in a frame that is not JSON (logged as a string: escaped twice).
            await p.send('{"not json" ' + orjson.dumps(token).decode())
            assert (await p.response(None))["error"]["code"] == -32700
        await wait_lines([log], lambda ls: any(x["event"] == "disconnected" for x in ls))
        wire = server.state.wire_log
        assert wire is not None
        await drained(wire.sink)
    blobs = [log.read_bytes(), *(f.read_bytes() for f in listing(directory))]
    for blob in blobs:
        assert b"secret-9876" not in blob and b"only-5555" not in blob
    assert REDACTED in blobs[0] and all(REDACTED in b for b in blobs[1:])


async def test_a_token_in_a_clients_ascii_escaping_is_scrubbed(tmp_path: Path) -> None:
    """Probe N, finding 9: a token holding other than ASCII letters, written in a frame
    that is not JSON the way most JSON encoders write it (``\\u00f6``, ``\\/``), was not
    found by the scrubber (it knew only orjson's escaping, which keeps ``ö`` and ``/``)."""
    token = "tök/en\u2028€-secret-7777"
    read = "rö/ad-secret-8888"
    directory = tmp_path / "wire"
    options = ServeOptions(port=0, token=token, read_token=read, wire_log=str(directory))
    async with running_server(options) as server:
        async with peer(server.url) as p:
            await p.initialize("c1")
            for secret in (token, read):
                escaped = json.dumps(secret)[1:-1]  # (ASCII only: \u00f6, \u2028 ...)
                for form in (escaped, escaped.replace("/", "\\/")):
                    await p.send('{"not json" "' + form + '"')
                    assert (await p.response(None))["error"]["code"] == -32700
        wire = server.state.wire_log
        assert wire is not None
        await drained(wire.sink)
    [path] = listing(directory)
    blob = path.read_bytes()
    assert b"secret-7777" not in blob and b"secret-8888" not in blob
    frames = [x for x in read_lines([path]) if x["_ahpLog"]["dir"] == "c2s"]
    assert sum(REDACTED.decode() in str(x) for x in frames) == 4
