"""What VS Code does when it connects to a remote agent host, done against ``serve``.

VS Code's ``chat.remoteAgentHosts`` entries carry an ``address`` (``host:port``, no
scheme: ``ws://`` is assumed; ``wss://`` when written) and a ``connectionToken``.
Its WebSocket transport builds the URL with the WHATWG URL parser and sets the
token as the query parameter ``tkn`` (``connectionTokenQueryName``), so the upgrade
is ``GET /?tkn=TOKEN`` with ``Host: host:port``; it sends no ``Authorization``
header. It negotiates 0.9 here: this client offers only ``["0.9.0"]`` and must get
the 1.x shape (``lifecycle``, ``chat`` in session claims, ``serverInfo``) through
every step: initialize, create, subscribe, output, a detected command, claims,
exit, and reconnect (both forms). Not tested: VS Code itself (no VS Code here);
see ``docs/vscode.md``.
"""

from __future__ import annotations

import signal
from typing import Any
from urllib.parse import urlencode, urlsplit

import trio

from tests.helpers import TIMEOUT
from tests.test_compat import collect, init, of_type, text_of, until_text
from tests.test_faults import serve_process
from tests.wire import peer, upgrade_status_line

ROOT = "ahp-root://"
T1 = "ahp-terminal:/vs1"
VSCODE = ["0.9.0"]
RUNNING = {"status": "running"}
#: A token with characters the WHATWG URL encoder escapes in a query.
TOKEN = "vs+code/token=42"


def vscode_url(address: str, token: str) -> str:
    """The URL VS Code's transport connects to for a settings entry: ``ws://`` unless
    the address has a scheme; ``tkn`` set in the query (application/x-www-form-urlencoded,
    as ``URLSearchParams`` writes it); the path ``/`` the URL parser adds."""
    value = address if address.startswith(("ws://", "wss://")) else f"ws://{address}"
    parts = urlsplit(value)
    return f"{parts.scheme}://{parts.netloc}{parts.path or '/'}?{urlencode({'tkn': token})}"


async def test_a_0_9_client_gets_the_1x_shape_through_every_step() -> None:
    session_claim = {
        "kind": "session",
        "session": "copilot:/vs",
        "chat": "ahp-chat:/vs/c1",
        "turnId": "t-1",
    }
    async with serve_process("--token", TOKEN) as (proc, printed, err):
        address = urlsplit(printed).netloc  # what a person pastes as the entry's address
        url = vscode_url(address, TOKEN)
        port = int(address.rsplit(":", 1)[1])
        # The token arrives the way VS Code sends it; a wrong or missing one is refused.
        assert (await upgrade_status_line(port, "/?tkn=vs%2Bcode%2Ftoken%3D42", {})).startswith(
            b"HTTP/1.1 101"
        )
        assert (await upgrade_status_line(port, "/?tkn=vs+code/token=42", {})).startswith(
            b"HTTP/1.1 403"  # an unencoded '+' is a space in a query: not the token
        )
        assert (await upgrade_status_line(port, "/", {})).startswith(b"HTTP/1.1 403")

        async with peer(url) as p:
            result = await init(p, "vscode-window", VSCODE, clientInfo={"name": "vscode"})
            assert result["protocolVersion"] == "0.9.0"
            assert result["serverInfo"]["name"] == "ahp-terminals"
            assert result["snapshots"][0]["state"] == {"agents": [], "terminals": []}

            assert await p.result("createTerminal", {"channel": T1, "claim": session_claim}) is None
            listed = await p.action(of_type("root/terminalsChanged"))
            (entry,) = listed["action"]["terminals"]
            assert entry["lifecycle"] == RUNNING and entry["claim"] == session_claim
            assert "exitCode" not in entry

            state = (await p.result("subscribe", {"channel": T1}))["snapshot"]["state"]
            assert state["lifecycle"] == RUNNING and state["claim"] == session_claim
            assert "exitCode" not in state

            # output, and a detected command with its exit code
            await p.dispatch(T1, {"type": "terminal/input", "data": "echo vs-$((6*7))\r"})
            seen = await collect(p, T1, of_type("terminal/commandFinished"))
            assert "vs-42" in text_of(seen)
            started = [e for e in seen if e["action"]["type"] == "terminal/commandExecuted"]
            assert started[-1]["action"]["commandLine"] == "echo vs-$((6*7))"
            assert seen[-1]["action"]["exitCode"] == 0

            # claims: a client claim, then a session claim again (chat kept)
            mine = {"kind": "client", "clientId": "vscode-window"}
            await p.dispatch(T1, {"type": "terminal/claimed", "claim": mine})
            assert (await p.action(of_type("terminal/claimed")))["action"]["claim"] == mine
            await p.dispatch(T1, {"type": "terminal/claimed", "claim": session_claim})
            back = await p.action(of_type("terminal/claimed"))
            assert back["action"]["claim"] == session_claim
            listed = await p.action(of_type("root/terminalsChanged"))
            assert listed["action"]["terminals"][0]["claim"] == session_claim
            last_seen = listed["serverSeq"]
            await p.dispatch(T1, {"type": "terminal/input", "data": "sleep 0.2; echo away\r"})

        # reconnect (form A): what happened meanwhile is replayed in the 1.x shape
        async with peer(url) as q:
            replay = await q.result(
                "reconnect",
                {
                    "channel": ROOT,
                    "clientId": "vscode-window",
                    "lastSeenServerSeq": last_seen,
                    "subscriptions": [ROOT, T1],
                },
            )
            assert replay["type"] == "replay" and replay["missing"] == []
            text = text_of(replay["actions"])
            if "away" not in text:
                text += text_of(await collect(q, T1, until_text("away")))
            assert "away" in text
            # exit: lifecycle with the code
            await q.dispatch(T1, {"type": "terminal/input", "data": "exit 5\r"})
            exited = await collect(q, T1, of_type("terminal/exited"))
            assert exited[-1]["action"] == {"type": "terminal/exited", "exitCode": 5}
            listed = await q.action(of_type("root/terminalsChanged"))
            assert listed["action"]["terminals"][0]["lifecycle"] == {
                "status": "exited",
                "exitCode": 5,
            }
            cursor = listed["serverSeq"]

        # reconnect (form B): a snapshot in the 1.x shape
        async with peer(url) as r:
            recovered: Any = await r.result(
                "reconnect",
                {
                    "channel": ROOT,
                    "clientId": "vscode-window",
                    "subscriptions": [
                        {"channel": ROOT, "lastSeenServerSeq": cursor},
                        {"channel": T1, "lastSeenServerSeq": 0},
                    ],
                },
            )
            kinds = {c["channel"]: c["kind"] for c in recovered["channels"]}
            assert kinds == {ROOT: "replay", T1: "snapshot"}
            (snap,) = [c["snapshot"] for c in recovered["channels"] if c["kind"] == "snapshot"]
            assert snap["state"]["lifecycle"] == {"status": "exited", "exitCode": 5}
            assert "exitCode" not in snap["state"]
            assert snap["state"]["claim"] == session_claim
        proc.send_signal(signal.SIGTERM)
        with trio.fail_after(TIMEOUT):
            assert await proc.wait() == 0
    logs = b"".join(err).decode(errors="replace")
    assert "Traceback" not in logs and TOKEN not in logs, logs
