"""Counting the real size (issue 26, item 4): a flood costs its sender, never a reader
who keeps up.

Every byte of an envelope as sent counts in the outbox and replay bounds (payload,
channel, origin, rejection reason: :attr:`ahp.engine.envelopes.Published.size`),
and a client whose actions fill the outboxes of a channel's readers waits before
its next frame is read (the flood rule, :meth:`ahp.engine.hub.Hub.wait_readers`).
The end-to-end tests run ``python -m ahp serve`` in a subprocess, with clients
that read promptly in this one.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Final

import orjson
import pytest
import trio

from ahp.engine import Outbox, open_host
from ahp.engine.envelopes import ENVELOPE_OVERHEAD, Published, ReplayLog, identity_size
from ahp.engine.hub import FLOOD_BYTES, FLOOD_PATIENCE, FLOOD_WINDOW, Hub
from ahp.engine.input_write import INPUT_PACE, INPUT_STALL
from ahp.protocol.actions import ActionEnvelope, ActionOrigin, TerminalInput
from ahp.protocol.processes import TTY_STATUS
from ahp.server.websocket import OUTBOX_BYTES, ServerConfig
from ahp.ws import ConnectionClosed
from tests.helpers import TIMEOUT, wait_for_text
from tests.test_edges import REPO, _serve
from tests.test_faults import eventually, sidecar
from tests.wire import TOKEN, Peer, SlowReader, masked_text_frame, peer, running_server, slow_stream

ROOT = "ahp-root://"
T1 = "ahp-terminal:/flooded"
#: The issue's input flood: 24 frames of 1 MiB, 24 MiB in all (past OUTBOX_BYTES).
FLOOD_FRAMES: Final = 24
MIB: Final = 1024 * 1024


def _echo(client_id: str, data: str = "x", channel: str = T1) -> Published:
    return Published(
        ActionEnvelope(
            channel=channel,
            action=TerminalInput(data=data),
            serverSeq=1,
            origin=ActionOrigin(clientId=client_id, clientSeq=1),
        )
    )


def test_an_echo_counts_its_origin_and_channel() -> None:
    """A 1-byte keystroke of a 1 MB clientId is a 1 MB frame: it counts as one."""
    small, big = _echo("c"), _echo("c" * MIB)
    assert big.size - small.size == MIB - 1
    assert big.size >= len(big.frame)  # at least what is sent
    assert small.size >= ENVELOPE_OVERHEAD
    long_channel = _echo("c", channel="ahp-terminal:/" + "u" * 4096)
    assert long_channel.size >= 4096 + ENVELOPE_OVERHEAD
    assert identity_size(_echo("\u00e9" * 10).envelope) >= 20  # UTF-8: counted generously


def test_the_replay_log_bounds_echoes_by_their_real_size() -> None:
    log = ReplayLog(max_envelopes=1000, max_bytes=4 * MIB)
    for _ in range(10):
        log.append(_echo("c" * MIB))  # counted 225 bytes each before: all ten kept
    assert log.size <= log.max_bytes and len(log) <= 4


def test_an_outbox_overflows_on_the_real_size() -> None:
    outbox = Outbox(max_bytes=4 * MIB)
    accepted = sum(outbox.put(_echo("c" * MIB)) for _ in range(10))
    assert outbox.overflowed and accepted <= 4


async def test_the_flood_rule_waits_for_a_reader_that_keeps_taking() -> None:
    """``Hub.flooded``: a subscriber past FLOOD_BYTES that made progress within
    FLOOD_WINDOW is waited for; one under the bound, or one that stopped taking, is not;
    the wait ends when it takes."""
    hub = Hub()
    reader = Outbox(max_bytes=OUTBOX_BYTES)
    hub.subscribe(T1, reader)
    assert hub.flooded(T1) is None
    reader.get_nowait()  # it reads: progress now
    while reader.pending_bytes <= FLOOD_BYTES:
        reader.put(_echo("c", "x" * 65536))
    assert hub.flooded(T1) is reader
    async with trio.open_nursery() as nursery:
        waited = trio.Event()

        async def sender() -> None:
            await hub.wait_readers(T1)
            waited.set()

        nursery.start_soon(sender)
        await trio.testing.wait_all_tasks_blocked()
        assert not waited.is_set() and hub.flood_waits == 1
        reader.get_nowait()  # takes everything: not behind any more
        with trio.fail_after(TIMEOUT):
            await waited.wait()
    # A reader that made no progress for FLOOD_WINDOW is not waited for.
    while reader.pending_bytes <= FLOOD_BYTES:
        reader.put(_echo("c", "x" * 65536))
    reader.progress_at = trio.current_time() - FLOOD_WINDOW - 1
    assert hub.flooded(T1) is None


@pytest.mark.parametrize("track_in_flight", [False, True], ids=["in-process", "connection"])
async def test_the_flood_rule_waits_for_a_reader_only_until_its_patience_ends(
    track_in_flight: bool,
) -> None:
    """A reader behind for FLOOD_PATIENCE is no longer waited for, however steadily it
    takes; once what it holds falls back to the bound (a take, or a batch written),
    it is waited for again."""
    hub = Hub()
    reader = Outbox(max_bytes=OUTBOX_BYTES, track_in_flight=track_in_flight)
    hub.subscribe(T1, reader)

    def fill() -> None:
        while reader.pending_bytes <= FLOOD_BYTES:
            reader.put(_echo("c", "x" * 65536))

    def catch_up() -> None:
        reader.get_nowait()
        reader.sent()  # (nothing to do for an in-process consumer)

    def behind() -> float | None:
        return reader.behind_since

    fill()
    reader.progress_at = trio.current_time()
    assert hub.flooded(T1) is reader
    since = behind()
    assert since is not None
    reader.behind_since = since - FLOOD_PATIENCE  # behind that long, still taking
    assert hub.flooded(T1) is None
    catch_up()
    assert behind() is None
    fill()
    assert hub.flooded(T1) is reader  # waited for again
    # A sender's wait ends with the patience, before FLOOD_WINDOW.
    reader.behind_since = trio.current_time() - FLOOD_PATIENCE + 0.1
    with trio.fail_after(FLOOD_WINDOW - 0.5):
        await hub.wait_readers(T1)
    assert hub.flooded(T1) is None and behind() is not None
    catch_up()
    assert behind() is None


async def test_a_slow_watcher_does_not_hold_a_typists_connection() -> None:
    """Probe G's H2, scaled down: a read-only viewer reads ~80 KB/s, steadily; a typist
    pastes 4 x 1 MiB into ``cat > /dev/null``. The typist's connection waited (read
    nothing: a Ctrl-C or a dispose would have waited as long) until the viewer was
    back under FLOOD_BYTES, ~25 s here; now at most FLOOD_PATIENCE. The viewer is not
    closed for being slow: what it holds is within its own bound."""
    read_token = "read-only-token"
    async with sidecar(ServerConfig(token=TOKEN, read_token=read_token)) as (state, url):
        port = int(url.rsplit(":", 1)[1].split("/")[0])
        argv = ["sh", "-c", "exec cat > /dev/null"]
        await state.host.create_terminal(T1, argv=argv, use_pty=False)
        async with (
            slow_stream(port, read_token, receive_buffer=8192) as stream,
            trio.open_nursery() as nursery,
        ):
            init = {
                "channel": ROOT,
                "protocolVersions": ["0.5.0"],
                "clientId": "watcher",
                "initialSubscriptions": [T1],
            }
            message = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": init}
            await stream.send_all(masked_text_frame(orjson.dumps(message)))
            watcher = SlowReader(stream, chunk=8192, pause=0.1)
            nursery.start_soon(watcher.run)
            await eventually(lambda: len(state.host.hub.subscribers(T1)) == 1)
            async with peer(url) as typist:
                await typist.initialize("typist", [])
                with trio.fail_after(15):  # (before: ~25 s)
                    for _ in range(4):
                        await typist.dispatch(T1, {"type": "terminal/input", "data": "p" * MIB})
                    assert (await typist.call("ping", {}))["result"] is None
                assert state.host.hub.flood_waits > 0  # (it did wait, for a while)
            assert state.clients._records["watcher"].connections == 1
            assert watcher.got > 0 and not watcher.closed.is_set()
            nursery.cancel_scope.cancel()


async def _reader_task(p: Peer, seen: dict[str, Any], done: trio.Event, marker: str) -> None:
    """Read every frame as it comes (a reader who keeps up), until ``marker`` is echoed."""
    try:
        while True:
            frame = await p.ws.get_message()
            seen["bytes"] = seen.get("bytes", 0) + len(frame)
            if marker in frame:
                done.set()
                return
    except ConnectionClosed as exc:
        seen["closed"] = exc.reason
        done.set()


#: The flooder, in a process of its own (as an attacker is): types FLOOD_FRAMES x 1 MiB,
#: then its marker until the server takes it (input past MAX_PENDING_INPUT is refused
#: to it while the pty still holds the flood), and prints how many were refused.
_FLOODER: Final = """
import sys, orjson, trio
from ahp.ws import open_websocket_url

async def main(url, channel, frames, marker):
    async with open_websocket_url(url, max_message_size=1 << 26, message_queue_size=1 << 20) as ws:
        async def call(method, params, id_):
            await ws.send_message(orjson.dumps(
                {"jsonrpc": "2.0", "id": id_, "method": method, "params": params}).decode())
        await call("initialize", {"channel": "ahp-root://", "protocolVersions": ["0.5.0"],
                                  "clientId": "flooder", "initialSubscriptions": [channel]}, 1)
        line = "x" * 1023 + "\\n"
        seq = 0
        async def dispatch(data):
            nonlocal seq
            seq += 1
            await ws.send_message(orjson.dumps({"jsonrpc": "2.0", "method": "dispatchAction",
                "params": {"channel": channel, "clientSeq": seq,
                           "action": {"type": "terminal/input", "data": data}}}).decode())
            return seq
        for _ in range(frames):
            await dispatch(line * 1024)
        refused = 0
        while True:
            mine = await dispatch(marker)
            while True:
                message = orjson.loads(await ws.get_message())
                origin = message.get("params", {}).get("origin") or {}
                if origin.get("clientId") == "flooder" and origin.get("clientSeq") == mine:
                    break
            if "rejectionReason" not in message["params"]:
                print("refused", refused, flush=True)
                return
            refused += 1
            await trio.sleep(0.1)

trio.run(main, sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4])
"""


async def test_an_input_flood_beside_a_prompt_reader() -> None:
    """The issue's finding: another client (its own process) types 24 x 1 MiB into a
    terminal running ``cat > /dev/null``; the watcher, which reads everything as it
    comes, stays connected and sees the flooder's marker; the flooder waited instead."""
    async with _serve(nofile=1024) as (url, err):
        async with peer(url) as owner:
            await owner.initialize("owner")
            claim = {"kind": "client", "clientId": "owner"}
            await owner.result("createTerminal", {"channel": T1, "claim": claim})
            await owner.result("subscribe", {"channel": T1})
            await owner.dispatch(T1, {"type": "terminal/input", "data": "cat > /dev/null\r"})
            with trio.fail_after(TIMEOUT):
                await owner.text_until(T1, "cat > /dev/null")
        async with peer(url) as watcher:
            await watcher.initialize("watcher", [T1])
            seen: dict[str, Any] = {}
            done = trio.Event()
            marker = "flood-marker-26"
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_reader_task, watcher, seen, done, marker)
                with trio.fail_after(TIMEOUT * 3):
                    flooder = await trio.run_process(
                        [sys.executable, "-c", _FLOODER, url, T1, str(FLOOD_FRAMES), marker],
                        capture_stdout=True,
                        capture_stderr=True,
                        env={**os.environ, "PYTHONPATH": str(REPO)},
                        check=False,
                    )
                    assert flooder.returncode == 0, flooder.stderr.decode()[-2000:]
                    await done.wait()
            assert "closed" not in seen, seen
            assert seen["bytes"] > FLOOD_FRAMES * MIB  # it got the flood's echoes
            assert (await watcher.call("ping", {"channel": ROOT}))["result"] is None
    assert "Traceback" not in b"".join(err).decode(errors="replace")


@pytest.mark.parametrize(
    ("client_id_size", "config_size", "messages"),
    [(MIB, 0, 40), (16, 60_000, 400)],
    ids=["1 MB clientId, tiny configs", "large configs"],
)
async def test_a_large_identity_or_config_costs_its_sender_not_root_subscribers(
    client_id_size: int, config_size: int, messages: int
) -> None:
    """``root/configChanged`` echoes go to every root subscriber: a 1 MB clientId sending
    tiny configs (the issue: 200 of them disconnected every root subscriber with 1013),
    or configs near MAX_CONFIG_BYTES, are 24 MB or more to each. Two root subscribers
    that read promptly stay connected and see the last echo."""
    async with (
        _serve(nofile=1024) as (url, err),
        peer(url) as a,
        peer(url) as b,
        peer(url) as sender,
    ):
        await a.initialize("root-a")
        await b.initialize("root-b")
        client_id = "i" * client_id_size
        answer = await sender.call(
            "initialize",
            {
                "channel": ROOT,
                "protocolVersions": ["0.5.0"],
                "clientId": client_id,
                "initialSubscriptions": [],
            },
        )
        if "error" in answer:
            # A host that bounds clientIds refuses this one outright (issue 25).
            assert answer["error"]["code"] == -32602, answer
            assert "clientId" in answer["error"]["message"]
            return
        marker = "config-marker-26"
        seen: list[dict[str, Any]] = [{}, {}]
        done = [trio.Event(), trio.Event()]
        async with trio.open_nursery() as nursery:
            for p, s, d in zip((a, b), seen, done, strict=True):
                nursery.start_soon(_reader_task, p, s, d, marker)
            with trio.fail_after(TIMEOUT * 3):
                for i in range(messages):
                    config = {"n": i, "pad": "p" * config_size}
                    await sender.dispatch(ROOT, {"type": "root/configChanged", "config": config})
                await sender.dispatch(
                    ROOT, {"type": "root/configChanged", "config": {"last": marker}}
                )
                for d in done:
                    await d.wait()
        for s in seen:
            assert "closed" not in s, s
            assert s["bytes"] > 16 * MIB
    assert "Traceback" not in b"".join(err).decode(errors="replace")


#: A program that reads nothing (raw mode, no echo) until ``$1`` exists, then all of it.
#: One job that reads nothing until ``flag`` exists: a program of its own, never the
#: shell (a loop run by the interactive shell put the shell in the foreground between two
#: ``sleep``s, and a status taken then said so: failed CI once).
_DEAF_UNTIL: Final = (
    "stty raw -echo; printf 'DEAF-%s\\n' NOW; "
    "sh -c 'while [ ! -e {flag} ]; do sleep 0.05; done; exec cat > /dev/null'\r"
)


async def test_a_paste_into_a_program_that_reads_nothing_leaves_the_connection_usable(
    tmp_path: Any,
) -> None:
    """A client pastes 2.5 MiB into a raw-mode program that reads none of it: past
    INPUT_PACE its reader waits, but only until the pty has taken nothing for
    INPUT_STALL; then the same connection answers a ping and a request about the
    terminal (it could signal or dispose it), and
    input past the pace is rejected to it with the reason (bounded memory, nothing
    silently dropped). Once the program reads, input is taken again. Before the stall
    rule the connection answered nothing until the program read (19 s for a
    ``sleep 20``)."""
    flag = tmp_path / "read-now"
    chunk = "x" * (64 * 1024)
    async with running_server() as side, peer(side.url) as a:
        await a.initialize("paster")
        claim = {"kind": "client", "clientId": "paster"}
        await a.result("createTerminal", {"channel": T1, "claim": claim})
        await a.result("subscribe", {"channel": T1})
        terminal = side.state.host.get(T1)
        await a.dispatch(T1, {"type": "terminal/input", "data": _DEAF_UNTIL.format(flag=flag)})
        with trio.fail_after(TIMEOUT):
            await a.text_until(T1, "DEAF-NOW")
        seqs = []
        with trio.fail_after(TIMEOUT + INPUT_STALL):
            for _ in range(40):  # 2.5 MiB: the reader waits at INPUT_PACE, then goes on
                seqs.append(await a.dispatch(T1, {"type": "terminal/input", "data": chunk}))
            assert (await a.call("ping", {"channel": ROOT}))["result"] is None
            status = (await a.result(TTY_STATUS, {"channel": T1}))["status"]
        assert not status["shellForeground"]  # the program still runs, reading nothing
        assert not status["echo"]  # (raw mode, -echo: our program)
        assert not flag.exists()
        echoes: dict[int, dict[str, Any]] = {}
        with trio.fail_after(TIMEOUT):
            while len(echoes) < len(seqs):
                envelope = await a.action(lambda p: p.get("origin") is not None)
                echoes[envelope["origin"]["clientSeq"]] = envelope
        refused = [seq for seq in seqs if "rejectionReason" in echoes[seq]]
        assert refused, "input past the pace was taken while the program read nothing"
        assert "has not read its input" in echoes[refused[0]]["rejectionReason"]
        taken = len(seqs) - len(refused)
        assert taken * len(chunk) <= INPUT_PACE + 4 * len(chunk)  # memory: about the pace
        flag.touch()  # the program reads: everything pending goes, input is taken again
        with trio.fail_after(TIMEOUT):
            while True:
                seq = await a.dispatch(T1, {"type": "terminal/input", "data": "y"})
                echo = await a.action(
                    lambda p, seq=seq: (p.get("origin") or {}).get("clientSeq") == seq
                )
                if "rejectionReason" not in echo:
                    break
                await trio.sleep(0.05)
        assert terminal.running


async def test_the_librarys_paste_into_a_program_that_reads_nothing_waits(tmp_path: Any) -> None:
    """The stall rule is for clients (whose connection must stay usable): the library's
    input past INPUT_PACE waits on while the program reads nothing — nothing it sends
    is refused — and its caller's cancel scope ends the wait."""
    flag = tmp_path / "read-now"
    script = _DEAF_UNTIL.format(flag=flag).rstrip("\r")
    async with open_host() as host:
        terminal = await host.create_terminal(argv=["sh", "-c", script])
        await wait_for_text(terminal, "DEAF-NOW")
        with trio.move_on_after(INPUT_STALL + 1) as waited:
            for _ in range(40):
                await terminal.send_input("x" * (64 * 1024))
        assert waited.cancelled_caught  # still waiting: not taken as stalled
        flag.touch()
        with trio.fail_after(TIMEOUT):  # the program reads: the library's input goes on
            await terminal.send_input("x" * (2 * INPUT_PACE))
