"""The audit log and the wire log, through a real server (port 0) and real WebSocket
clients: one line per privileged event of each kind, the wire log read back with
every line parsed, rotation at their bounds, the token never written (sent in the
query, in an ``Authorization`` header, even typed as input)."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest
import trio

from ahp.protocol.commands import RESUME_META
from ahp.protocol.processes import EXEC, SIGNAL
from ahp.record.asciicast import decode
from ahp.record.audit import (
    AUDIT_REFUSALS_PER_SECOND,
    MAX_AUDIT_ITEMS,
    MAX_AUDIT_TEXT,
    MAX_REFUSED_PATH,
    AuditLog,
)
from ahp.record.recorder import DISPOSED_MARKER, STOPPED_MARKER
from ahp.record.sink import REDACTED, make_private_dirs
from ahp.record.wirelog import WireLog
from ahp.server import ServeOptions
from tests.helpers import TIMEOUT, first_line, kill_and_reap, wait_for_text
from tests.wire import TOKEN, peer, running_server, upgrade_status_line

REPO = Path(__file__).resolve().parents[1]
ROOT = "ahp-root://"
T1 = "ahp-terminal:/t1"


def claim(client_id: str) -> dict[str, str]:
    return {"kind": "client", "clientId": client_id}


def listing(directory: Path) -> list[Path]:
    return sorted(directory.iterdir())


def read_lines(paths: list[Path]) -> list[dict[str, Any]]:
    """Every line of every file, parsed (a line that is not JSON fails the test)."""
    out: list[dict[str, Any]] = []
    for path in paths:
        for line in path.read_bytes().splitlines():
            value = orjson.loads(line)
            assert isinstance(value, dict)
            out.append(value)
    return out


async def wait_lines(paths: Any, predicate: Any, timeout: float = TIMEOUT) -> list[dict[str, Any]]:
    """Poll the files until ``predicate(lines)`` holds (the writer is a task of its own)."""
    with trio.fail_after(timeout):
        while True:  # (the server notices a client's close on its own: polled)
            files = paths() if callable(paths) else paths
            lines = read_lines([p for p in files if p.exists()])
            if predicate(lines):
                return lines
            await trio.sleep(0.02)


async def drained(sink: Any) -> None:
    """Wait until the writer has taken everything queued."""
    with trio.fail_after(TIMEOUT):
        await sink.wait_written()


async def test_the_audit_log_has_a_line_per_privileged_event_and_never_the_token(
    tmp_path: Path,
) -> None:
    log = tmp_path / "audit" / "audit.log"
    options = ServeOptions(
        port=0,
        token=TOKEN,
        audit_log=str(log),
        audit_input=True,
        allow_origins=frozenset({"http://good.example"}),
    )
    async with running_server(options, shell="/bin/bash") as server:
        base = server.url.split("?", 1)[0]
        port = server.port
        assert port is not None
        # Refused: a wrong token; the right token from a foreign Origin (in the query).
        assert b"403" in await upgrade_status_line(port, "/?tkn=wrong", {})
        refused = await upgrade_status_line(
            port, f"/x?tkn={TOKEN}", {"Origin": "http://evil.example"}
        )
        assert b"403" in refused
        # Refused: a malformed upgrade (400), the token in its target.
        assert b"400" in await upgrade_status_line(port, f"//[x/?tkn={TOKEN}", {})
        # Accepted: the token in the query (c1) and in an Authorization header (c2).
        async with (
            peer(server.url) as p1,
            peer(base, extra_headers=[(b"Authorization", f"Bearer {TOKEN}".encode())]) as p2,
        ):
            await p1.initialize("c1")
            await p2.initialize("c2")
            assert await p1.result("createTerminal", {"channel": T1, "claim": claim("c1")}) is None
            again = {"channel": T1, "claim": claim("c1")}
            assert (await p1.call("createTerminal", again))["error"]["code"] < 0
            terminal = server.state.host.get(T1)
            await p2.dispatch(T1, {"type": "terminal/claimed", "claim": claim("c2")})  # refused
            session = {"kind": "session", "session": "ahp-session:/s1"}
            await p1.dispatch(T1, {"type": "terminal/claimed", "claim": session})  # accepted
            await p1.dispatch(T1, {"type": "terminal/input", "data": f"echo {TOKEN}-typed\n"})
            await wait_for_text(terminal, f"{TOKEN}-typed\r\n")
            answer = await p2.result(SIGNAL, {"channel": T1, "signal": "SIGINT"})
            assert "groups" in answer
            await p2.dispatch(ROOT, {"type": "root/configChanged", "config": {"theme": "dark"}})
            ran = await p1.result(EXEC, {"argv": ["echo", "exec ran"], "env": {"MY_VAR": "v"}})
            assert await p2.result("disposeTerminal", {"channel": T1}) is None
            assert (await p2.call("disposeTerminal", {"channel": T1}))["error"]["code"] < 0
            # The library's own terminals are audited too, as in-process.
            host = server.state.host
            await host.create_terminal("ahp-terminal:/lib", name="lib")
            await host.dispose("ahp-terminal:/lib")
        lines = await wait_lines(
            [log], lambda ls: sum(x["event"] == "disconnected" for x in ls) == 2
        )

    assert TOKEN.encode() not in log.read_bytes()  # query, header, input: never written
    by_event: dict[str, list[dict[str, Any]]] = {}
    for line in lines:
        assert line["ts"].endswith("Z") and "T" in line["ts"]
        by_event.setdefault(line["event"], []).append(line)

    connections = by_event["connection"]
    assert [c["accepted"] for c in connections] == [False, False, False, True, True]
    assert connections[0]["reason"] == "missing or wrong token"
    assert connections[1]["reason"] == "origin not allowed"
    assert connections[1]["path"] == "/x"  # the path, never the query
    assert connections[2]["reason"].startswith("bad request: ")
    assert all(c["peer"].startswith("127.0.0.1:") for c in connections)

    assert [(i["clientId"], i["protocolVersion"]) for i in by_event["initialize"]] == [
        ("c1", "0.5.0"),
        ("c2", "0.5.0"),
    ]
    created = by_event["terminal.created"]
    assert len(created) == 3  # each once: the clients' two, the library's one
    assert created[0] == {**created[0], "terminal": T1, "by": "c1", "claim": claim("c1")}
    assert "error" not in created[0] and "already exists" in created[1]["error"]
    lib = {k: v for k, v in created[2].items() if k != "ts"}
    assert lib == {
        "event": "terminal.created",
        "terminal": "ahp-terminal:/lib",
        "name": "lib",
        "inProcess": True,
    }
    claims = by_event["claim"]
    assert [(c["by"], c["accepted"]) for c in claims] == [("c2", False), ("c1", True)]
    assert claims[0]["previous"] == claim("c1") and claims[1]["claim"] == session
    [typed] = by_event["input"]
    assert typed["by"] == "c1" and typed["terminal"] == T1
    assert typed["bytes"] == len(f"echo {TOKEN}-typed\n")
    assert typed["text"] == f"echo {REDACTED.decode()}-typed\n"
    [signal] = by_event["signal"]
    assert (signal["by"], signal["signal"], signal["terminal"]) == ("c2", "SIGINT", T1)
    [exec_line] = by_event["exec"]
    assert exec_line["by"] == "c1" and exec_line["terminal"] == ran["channel"]
    assert exec_line["command"] == "echo 'exec ran'" and exec_line["env"] == ["MY_VAR"]
    assert b'"v"' not in log.read_bytes()  # environment values are not logged
    [config] = by_event["config"]
    assert (config["by"], config["keys"], config["accepted"]) == ("c2", ["theme"], True)
    disposed = by_event["terminal.disposed"]
    assert disposed[0]["by"] == "c2" and "error" not in disposed[0]
    assert "no terminal" in disposed[1]["error"]
    assert disposed[2]["terminal"] == "ahp-terminal:/lib" and disposed[2]["inProcess"] is True
    assert len(disposed) == 3


async def test_input_text_is_not_audited_without_audit_input(tmp_path: Path) -> None:
    log = tmp_path / "audit.log"
    options = ServeOptions(port=0, token=TOKEN, audit_log=str(log))
    async with running_server(options, shell="/bin/bash") as server, peer(server.url) as p:
        await p.initialize("c1")
        assert await p.result("createTerminal", {"channel": T1, "claim": claim("c1")}) is None
        await p.dispatch(T1, {"type": "terminal/input", "data": "echo secret-words\n"})
        await wait_for_text(server.state.host.get(T1), "secret-words\r\n")
        lines = await wait_lines([log], lambda ls: any(x["event"] == "input" for x in ls))
    [typed] = [x for x in lines if x["event"] == "input"]
    assert typed["bytes"] == len("echo secret-words\n") and "text" not in typed
    assert b"secret-words" not in log.read_bytes()


async def test_the_audit_log_rotates_at_its_bound_and_counts_drops(tmp_path: Path) -> None:
    path = tmp_path / "audit.log"
    audit = AuditLog(path, max_file_bytes=2000, max_files=3, max_lines=50)
    async with trio.open_nursery() as nursery:
        await nursery.start(audit.run)
        for n in range(400):
            audit.event("input", terminal=T1, by="c1", bytes=n)
            if n % 40 == 39:
                await drained(audit.sink)  # (within the queue's bound: nothing dropped)
        assert audit.sink.dropped == 0
        for n in range(120):  # past the queue's bound at once: 70 dropped
            audit.event("burst", n=n)
        nursery.cancel_scope.cancel()
    files = [path, path.with_name("audit.log.1"), path.with_name("audit.log.2")]
    assert [p.name for p in listing(tmp_path)] == [p.name for p in files]
    assert all(p.stat().st_size <= 2000 for p in files)
    lines = read_lines(list(reversed(files)))
    assert audit.sink.dropped == 70
    assert [x["count"] for x in lines if x["event"] == "dropped"] == [70]  # said, not silent
    assert [x["n"] for x in lines if x["event"] == "burst"][-1] == 49  # the queue's 50


async def test_the_wire_log_holds_every_message_in_vs_codes_shape(tmp_path: Path) -> None:
    directory = tmp_path / "wire"
    options = ServeOptions(port=0, token=TOKEN, wire_log=str(directory))
    async with running_server(options, shell="/bin/bash") as server:
        wire = server.state.wire_log
        assert wire is not None
        async with peer(server.url) as p1, peer(server.url) as p2:
            await p1.initialize("c1")
            await p2.initialize("c2")
            assert await p1.result("createTerminal", {"channel": T1, "claim": claim("c1")}) is None
            await p1.result("subscribe", {"channel": T1})
            await p1.dispatch(T1, {"type": "terminal/input", "data": "echo wired\n"})
            await p1.text_until(T1, "wired\r\n")
            # A client sending credentials in a message: redacted.
            await p2.call("x-unknown", {"token": "client-secret", "also": TOKEN})
            # ...also in a frame that is not JSON (logged raw).
            await p2.send('{"method": "x", "params": {"Password": "raw-secret", "s": "\\udcff"}}')
            assert (await p2.recv())["error"]["code"] == -32700
            # The resume token, given to a client and presented back, is a credential too.
            meta: dict[str, Any] = {"channel": ROOT, "clientId": "c3"}
            meta["protocolVersions"] = ["0.5.0"]
            meta["_meta"] = {RESUME_META: ""}
            async with peer(server.url) as p3:
                resume = (await p3.result("initialize", meta))["_meta"][RESUME_META]
            meta["_meta"] = {RESUME_META: resume}
            async with peer(server.url) as p3:
                await p3.result("initialize", meta)
        await drained(wire.sink)  # everything up to the last answer was queued before it
    files = listing(directory)
    lines = read_lines(files)
    assert len(files) == 1 and files[0].name.startswith("ahp-") and files[0].suffix == ".jsonl"
    raw = files[0].read_bytes()
    assert TOKEN.encode() not in raw and b"client-secret" not in raw
    assert b"raw-secret" not in raw and resume.encode() not in raw
    assert b'\\"Password\\": \\"<redacted>\\"' in raw
    for line in lines:
        meta = line["_ahpLog"]
        assert set(meta) == {"ts", "dir", "connectionId", "transport", "byteLength"}
        assert meta["dir"] in ("c2s", "s2c") and meta["transport"] == "websocket"
        assert meta["ts"].endswith("Z") and meta["connectionId"] in ("1", "2", "3", "4")
        assert line.get("jsonrpc") == "2.0" or "_raw" in line
    c2s = [x for x in lines if x["_ahpLog"]["dir"] == "c2s"]
    s2c = [x for x in lines if x["_ahpLog"]["dir"] == "s2c"]
    assert [x["method"] for x in c2s if x["_ahpLog"]["connectionId"] == "1"][:3] == [
        "initialize",
        "createTerminal",
        "subscribe",
    ]
    [unknown] = [x for x in c2s if x.get("method") == "x-unknown"]
    assert unknown["params"] == {"token": "<redacted>", "also": "<redacted>"}
    answers = {(x["_ahpLog"]["connectionId"], x["id"]) for x in s2c if "id" in x}
    requests = {(x["_ahpLog"]["connectionId"], x["id"]) for x in c2s if "id" in x}
    assert requests <= answers  # every request's answer is logged too
    output = "".join(
        x["params"]["action"]["data"]
        for x in s2c
        if x.get("method") == "action" and x["params"]["action"]["type"] == "terminal/data"
    )
    assert "wired\r\n" in output
    assert wire.sink.dropped == 0


async def test_the_wire_log_rotates_like_vs_code_and_drops_when_full(tmp_path: Path) -> None:
    wire = WireLog(tmp_path, token=TOKEN, max_file_bytes=16384, max_files=5, max_lines=100)
    frame = orjson.dumps({"jsonrpc": "2.0", "method": "action", "params": {"x": "y" * 200}})
    async with trio.open_nursery() as nursery:
        await nursery.start(wire.run)
        for n in range(300):
            wire.s2c("1", frame)
            if n % 50 == 49:
                await drained(wire.sink)
        assert wire.sink.dropped == 0
        for _ in range(150):  # past the queue's bound at once
            wire.c2s("1", frame)
        nursery.cancel_scope.cancel()
    files = listing(tmp_path)
    assert len(files) == 5  # the newest five segments, VS Code's names
    stem = wire.path.name.removesuffix(".jsonl")
    assert all(f.name.startswith(stem + ".") and f.name.endswith(".jsonl") for f in files)
    assert not wire.path.exists()  # the first segment was rotated away
    assert all(f.stat().st_size <= 16384 for f in files)
    lines = read_lines(files)
    assert wire.sink.dropped == 50
    assert [x["_ahpLog"]["dropped"] for x in lines if "dropped" in x["_ahpLog"]] == [50]
    assert sum(1 for x in lines if x["_ahpLog"].get("dir") == "c2s") == 100  # the queue's bound


async def test_serve_flags_write_all_three(tmp_path: Path) -> None:
    """``python -m ahp serve --record --audit-log --wire-log`` with ``ahp run`` as the
    client, then SIGTERM: a recording, an audit log and a wire log, none with the token."""
    env = {
        **{k: v for k, v in os.environ.items() if k != "AHP_TOKEN"},
        "PYTHONPATH": str(REPO),
        "AHP_TOKEN": TOKEN,
    }
    args = ["--record", str(tmp_path / "casts"), "--audit-log", str(tmp_path / "audit.log")]
    args += ["--wire-log", str(tmp_path / "wire"), "--drain-timeout", "0"]
    proc = await trio.lowlevel.open_process(
        [sys.executable, "-m", "ahp", "serve", "--port", "0", "--shell", "/bin/bash", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    try:
        line = await first_line(proc, TIMEOUT)
        url = line.decode().strip()
        with trio.fail_after(TIMEOUT):
            done = await trio.run_process(
                [sys.executable, "-m", "ahp", "run", url, "--", "echo three-logs"],
                capture_stdout=True,
                check=False,
                env=env,
            )
        assert (done.returncode, done.stdout) == (0, b"three-logs\n")
        # A terminal still there when the server stops (``ahp run`` disposed its own).
        async with peer(url) as p:
            init = {"channel": ROOT, "clientId": "stays", "protocolVersions": ["0.5.0"]}
            await p.result("initialize", init)
            claim = {"kind": "client", "clientId": "stays"}
            await p.result("createTerminal", {"channel": "ahp-terminal:/stays", "claim": claim})
            proc.send_signal(signal.SIGTERM)
            with trio.fail_after(TIMEOUT):
                assert await proc.wait() == 0
    finally:
        await kill_and_reap(proc)
    casts = listing(tmp_path / "casts")
    [left] = [c for c in casts if "stays" in c.name]
    _, decoded = decode(left.read_bytes().splitlines())
    ends = [(e.code, e.data) for e in decoded][-2:]
    # The terminals are disposed before the recorders stop: the recording ends with
    # the terminal's end (its exit, or the disposal), not with the server's.
    assert ("m", STOPPED_MARKER) not in ends, ends
    assert ends[-1][0] == "x" or ends[-1] == ("m", DISPOSED_MARKER), ends
    [cast] = [c for c in casts if c is not left]
    header, decoded = decode(cast.read_bytes().splitlines())
    events = list(decoded)
    assert header.cols > 0
    assert "three-logs" in "".join(e.data for e in events if e.code == "o")
    audit = read_lines([tmp_path / "audit.log"])
    kinds = [x["event"] for x in audit]
    assert "terminal.disposed" in kinds, kinds
    for kind in ("connection", "initialize", "terminal.created", "input"):
        assert kind in kinds, kinds
    wire = read_lines(listing(tmp_path / "wire"))
    assert {x["_ahpLog"]["dir"] for x in wire} == {"c2s", "s2c"}
    assert any(x.get("method") == "createTerminal" for x in wire)
    for blob in (cast, tmp_path / "audit.log", *listing(tmp_path / "wire")):
        assert TOKEN.encode() not in blob.read_bytes()


@pytest.mark.parametrize("offered", [None, 5, True, "0.5.0", {"v": 1}])
async def test_an_initialize_without_a_list_of_versions_is_audited_and_refused(
    tmp_path: Path, offered: Any
) -> None:
    # (Audited before the version check, list(offered) raised: -32603 and a traceback.)
    log = tmp_path / "audit.log"
    options = ServeOptions(port=0, token=TOKEN, audit_log=str(log))
    async with running_server(options) as server, peer(server.url) as p:
        params: dict[str, Any] = {"channel": ROOT, "clientId": "c1"}
        if offered is not None:
            params["protocolVersions"] = offered
        answer = await p.call("initialize", params)
        assert answer["error"]["code"] == -32005, answer
        audit = server.state.audit
        assert audit is not None
        await drained(audit.sink)
    [line] = [x for x in read_lines([log]) if x["event"] == "initialize"]
    assert line.get("offered") == (None if offered is None else [offered])
    assert line.get("protocolVersion") is None and line["clientId"] == "c1"


async def test_an_audit_line_is_bounded_whatever_the_client_sends(tmp_path: Path) -> None:
    log = tmp_path / "audit.log"
    options = ServeOptions(port=0, token=TOKEN, audit_log=str(log))
    offered = [f"9.{n}.0" for n in range(5000)] + ["0.5.0"]
    async with running_server(options) as server, peer(server.url) as p:
        params = {"channel": ROOT, "clientId": "c1", "protocolVersions": offered}
        assert (await p.result("initialize", params))["protocolVersion"] == "0.5.0"
        audit = server.state.audit
        assert audit is not None
        await drained(audit.sink)
    [line] = [x for x in read_lines([log]) if x["event"] == "initialize"]
    assert line["offered"] == offered[:MAX_AUDIT_ITEMS]
    assert len(log.read_bytes()) < 2 * MAX_AUDIT_TEXT
    # Any field: strings cut, lists and objects shortened, depth bounded.
    audit = AuditLog(tmp_path / "unit.log")
    deep: Any = "leaf"
    for _ in range(10):
        deep = {"k": [deep]}
    audit.event("x", text="y" * (MAX_AUDIT_TEXT + 10), many=list(range(1000)), deep=deep)
    [queued] = list(audit.sink._items)
    value = orjson.loads(queued)
    assert value["text"] == "y" * MAX_AUDIT_TEXT + f"…[{MAX_AUDIT_TEXT + 10} characters]"
    assert value["many"] == list(range(MAX_AUDIT_ITEMS))
    assert len(queued) < 2 * MAX_AUDIT_TEXT


async def test_serve_refuses_unusable_log_options_in_one_line(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    cases = {
        "audit": (["--audit-log", str(blocker / "audit.log")], 1, "cannot create the audit log"),
        "wire": (["--wire-log", str(blocker / "wire")], 1, "cannot create the wire log"),
        "record": (["--record", str(blocker / "casts")], 1, "cannot create the recordings"),
        "bound": (["--record-max-bytes", "10"], 2, "size bound must be at least 1024"),
    }
    done: dict[str, subprocess.CompletedProcess[bytes]] = {}

    async def serve(name: str, args: list[str]) -> None:
        with trio.fail_after(TIMEOUT):
            done[name] = await trio.run_process(
                [sys.executable, "-m", "ahp", "serve", "--port", "0", *args],
                capture_stdout=True,
                capture_stderr=True,
                check=False,
                env=env,
            )

    async with trio.open_nursery() as nursery:
        for name, (args, _, _) in cases.items():
            nursery.start_soon(serve, name, args)
    for name, (_, code, message) in cases.items():
        result = done[name]
        lines = result.stderr.decode().strip().splitlines()
        assert result.returncode == code, (name, result)
        assert message in lines[-1] and lines[-1].startswith("ahp-terminals serve: "), (name, lines)
        assert "Traceback" not in result.stderr.decode(), name
        assert result.stdout == b"", name  # no URL printed: it never served


async def test_a_flood_of_refused_connections_cannot_rotate_the_audit_away(
    tmp_path: Path,
) -> None:
    """Anyone who can reach the port causes a refusal line (no token needed): at most
    AUDIT_REFUSALS_PER_SECOND of them a second are written, the rest counted into the
    next one's ``leftOut``, paths cut at MAX_REFUSED_PATH; other events are not limited.
    (Before: 32,000 wrong-token upgrades with 3,000-character paths rotated every
    earlier event out of the files in 17 s.)"""
    path = tmp_path / "audit.log"
    audit = AuditLog(path)
    async with trio.open_nursery() as nursery:
        await nursery.start(audit.run)
        audit.event("terminal.created", terminal=T1, by="c1")
        for _ in range(500):
            audit.connection("10.0.0.9:4000", accepted=False, reason="bad token", path="/" * 3000)
        audit.connection("127.0.0.1:5000", accepted=True, path="/")
        await trio.sleep(1.05)  # the next second: the count goes out with the next line
        audit.connection("10.0.0.9:4001", accepted=False, reason="bad token", path="/x")
        await drained(audit.sink)
        nursery.cancel_scope.cancel()
    lines = read_lines([path])
    refused = [x for x in lines if x["event"] == "connection" and not x["accepted"]]
    assert len(refused) == AUDIT_REFUSALS_PER_SECOND + 1
    assert all(len(x["path"]) <= MAX_REFUSED_PATH for x in refused)
    assert refused[-1]["leftOut"] == 500 - AUDIT_REFUSALS_PER_SECOND
    assert "leftOut" not in refused[0]
    assert [x["event"] for x in lines].count("terminal.created") == 1
    assert any(x["event"] == "connection" and x["accepted"] for x in lines)
    assert path.stat().st_size < 20_000


async def test_the_logs_create_their_directories_private(tmp_path: Path) -> None:
    """Every directory the audit log, the wire log and the recorder create is 0700, the
    missing parents too (``mkdir -p`` gave the parents the umask's 0755); an existing
    one is left as it is."""
    (tmp_path / "kept").mkdir(mode=0o755)
    path = tmp_path / "kept" / "a" / "b" / "audit.log"
    audit = AuditLog(path)
    async with trio.open_nursery() as nursery:
        await nursery.start(audit.run)
        audit.event("x")
        await drained(audit.sink)
        nursery.cancel_scope.cancel()
    make_private_dirs(tmp_path / "casts" / "deep")
    for directory in ("kept/a", "kept/a/b", "casts", "casts/deep"):
        assert stat.S_IMODE((tmp_path / directory).stat().st_mode) == 0o700, directory
    assert stat.S_IMODE((tmp_path / "kept").stat().st_mode) == 0o755
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


async def test_a_read_only_connections_refused_take_over_and_input_are_audited(
    tmp_path: Path,
) -> None:
    # A watch-only link used to take over or type left no line at all.
    log = tmp_path / "audit.log"
    read = "read-only-secret"
    options = ServeOptions(port=0, token=TOKEN, read_token=read, audit_log=str(log))
    async with running_server(options) as server:
        async with peer(server.url) as owner:
            await owner.initialize("owner")
            assert (
                await owner.result("createTerminal", {"channel": T1, "claim": claim("owner")})
                is None
            )
        async with peer(server.url.replace(TOKEN, read)) as watcher:
            await watcher.initialize("watcher")
            await watcher.dispatch(T1, {"type": "terminal/claimed", "claim": claim("watcher")})
            await watcher.dispatch(T1, {"type": "terminal/input", "data": "rm -rf /\r"})
            await watcher.action(lambda x: x["action"]["type"] == "terminal/input")
        audit = server.state.audit
        assert audit is not None
        await drained(audit.sink)
    lines = read_lines([log])
    [taken] = [x for x in lines if x["event"] == "claim" and x["by"] == "watcher"]
    assert taken["accepted"] is False and taken["reason"] == "read-only", taken
    [typed] = [x for x in lines if x["event"] == "input" and x["by"] == "watcher"]
    assert typed["refused"] == "read-only", typed
