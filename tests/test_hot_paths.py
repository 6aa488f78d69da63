"""Hot-path shortcuts behave exactly like the general paths they bypass.

* ``dispatchAction`` of a ``terminal/input`` skips the converter when the params
  have exactly the accepted shape: the result must be what structuring gives.
* A WebSocket client that reads nothing is cut off promptly once its outbox
  overflows, even while the writer is blocked in a send.
"""

from __future__ import annotations

from typing import Any

import orjson
import trio
import trio.testing

from ahp.engine import Outbox, Published, open_host
from ahp.server.session import ServerState, Session
from tests.helpers import TIMEOUT

ROOT = "ahp-root://"


def _frame(method: str, params: dict[str, Any], msg_id: int | None = None) -> str:
    message: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "params": params}
    if msg_id is not None:
        message["id"] = msg_id
    return orjson.dumps(message).decode()


def _envelopes(outbox: Outbox) -> list[dict[str, Any]]:
    """The queued echoes of client actions (the terminal's own output left out)."""
    envelopes = [
        orjson.loads(item.frame)["params"]
        for item in outbox.get_nowait(coalesce=False)
        if isinstance(item, Published)
    ]
    return [e for e in envelopes if "origin" in e]


async def test_input_fast_path_matches_structuring() -> None:
    async with open_host() as host:
        term = await host.create_terminal(argv=["sh", "-c", "stty -echo; cat >/dev/null"])
        uri = term.uri
        outbox = Outbox()
        session = Session(ServerState(host=host), outbox)
        init = {
            "channel": ROOT,
            "protocolVersions": ["0.5.0"],
            "clientId": "c",
            "initialSubscriptions": [uri],
        }
        await session.handle_frame(_frame("initialize", init, 1))
        outbox.get_nowait()
        cases: list[tuple[dict[str, Any], bool]] = [
            # (params, accepted as terminal/input)
            (
                {"channel": uri, "clientSeq": 1, "action": {"type": "terminal/input", "data": "a"}},
                True,
            ),
            # extra keys are ignored by the converter too
            (
                {
                    "channel": uri,
                    "clientSeq": 2,
                    "extra": 1,
                    "action": {"type": "terminal/input", "data": "b", "more": [1]},
                },
                True,
            ),
            # an integral float clientSeq is accepted (slow path)
            (
                {
                    "channel": uri,
                    "clientSeq": 3.0,
                    "action": {"type": "terminal/input", "data": "c"},
                },
                True,
            ),
            # a boolean clientSeq is malformed params: ignored
            (
                {
                    "channel": uri,
                    "clientSeq": True,
                    "action": {"type": "terminal/input", "data": "d"},
                },
                False,
            ),
            # data must be a string: rejected to the sender
            (
                {"channel": uri, "clientSeq": 5, "action": {"type": "terminal/input", "data": 5}},
                False,
            ),
        ]
        for params, accepted in cases:
            await session.handle_frame(_frame("dispatchAction", params))
            # The terminal's reducer task decides; wait until it has (cat is blocked).
            await trio.testing.wait_all_tasks_blocked()
            envelopes = _envelopes(outbox)
            if params["clientSeq"] is True:
                assert envelopes == []
                continue
            (envelope,) = envelopes
            assert envelope["channel"] == uri
            assert envelope["origin"] == {"clientId": "c", "clientSeq": int(params["clientSeq"])}
            if accepted:
                assert envelope["action"] == {
                    "type": "terminal/input",
                    "data": params["action"]["data"],
                }
                assert "rejectionReason" not in envelope
            else:
                assert "rejectionReason" in envelope
        # On the root channel a terminal/input is rejected, not routed.
        params = {
            "channel": ROOT,
            "clientSeq": 6,
            "action": {"type": "terminal/input", "data": "x"},
        }
        await session.handle_frame(_frame("dispatchAction", params))
        (envelope,) = _envelopes(outbox)
        assert envelope["channel"] == ROOT and "rejectionReason" in envelope
        # An unknown channel is rejected to the sender (issue 25: never dropped).
        params = {"channel": "ahp-terminal:/nope", "clientSeq": 7, "action": params["action"]}
        await session.handle_frame(_frame("dispatchAction", params))
        (envelope,) = _envelopes(outbox)
        assert (
            envelope["channel"] == "ahp-terminal:/nope"
            and "no terminal" in (envelope["rejectionReason"])
        )
        session.disconnect()


async def test_overflowed_client_is_cut_off_promptly() -> None:
    """The writer is blocked in a send to a client that reads nothing: the overflow
    ends the connection within the stall grace, not after a watchdog's 10 s."""
    import socket

    from ahp.server.listeners import open_listeners
    from ahp.server.websocket import ServerConfig, serve_connections
    from tests.test_faults import eventually, raw_ws, rpc, ws_frame
    from tests.wire import TOKEN

    bound = 1024 * 1024
    config = ServerConfig(token=TOKEN, outbox_bytes=bound, stall_grace=0.5)
    async with open_host() as host, trio.open_nursery() as nursery:
        listeners = await open_listeners(host="127.0.0.1", port=0, unix=None)
        port = listeners[0].socket.getsockname()[1]
        state = ServerState(host=host)
        await nursery.start(serve_connections, state, config, listeners)
        term = await host.create_terminal(argv=["sh", "-c", "read x; yes zzzzzzzzzzzzzzzzzzzz"])
        async with raw_ws(port) as lazy:
            lazy.socket.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 * 1024)
            init = {
                "channel": ROOT,
                "protocolVersions": ["0.5.0"],
                "clientId": "lazy",
                "initialSubscriptions": [term.uri],
            }
            await lazy.send_all(ws_frame(rpc("initialize", init)))
            await eventually(lambda: len(host.hub.subscribers(term.uri)) == 1)
            (outbox,) = host.hub.subscribers(term.uri)
            await term.send_input("\r")
            with trio.fail_after(TIMEOUT):
                await outbox.wait_overflowed()
            start = trio.current_time()
            await eventually(lambda: state.clients._records["lazy"].connections == 0)
            # Well before a 10 s watchdog (the stall grace is 0.5 s; the margin is for
            # a loaded machine, where the 1 s this said once failed).
            assert trio.current_time() - start < 5.0
            assert host.hub.subscribers(term.uri) == []
        nursery.cancel_scope.cancel()
