"""The terminal engine on real ptys and real processes."""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path

import pytest
import trio

from ahp.engine import Host, Terminal, TerminalExists, open_host
from ahp.engine.outbox import Outbox
from ahp.protocol import (
    ActionEnvelope,
    ClientClaim,
    Snapshot,
    TerminalData,
    TerminalExited,
    TerminalResized,
    TerminalState,
    TerminalTitleChanged,
)
from ahp.pty import SpawnError
from tests.helpers import TIMEOUT, children, open_fds, wait_for_state, wait_for_text, zombies


async def collect_until_exit(terminal: Terminal) -> tuple[str, list[ActionEnvelope]]:
    """The text already in the subscription's snapshot (the terminal's tasks may have
    read and published output before the caller subscribed), and every envelope after
    it up to ``terminal/exited``."""
    envelopes: list[ActionEnvelope] = []
    before = ""
    with trio.fail_after(TIMEOUT):
        async with terminal.subscribe(max_bytes=1 << 30) as sub:
            async for item in sub:
                if isinstance(item, Snapshot):
                    assert isinstance(item.state, TerminalState)
                    before = item.state.text()
                elif isinstance(item, ActionEnvelope):
                    envelopes.append(item)
                    if isinstance(item.action, TerminalExited):
                        return before, envelopes
    raise AssertionError("no exit")


async def test_echo_then_exit_code() -> None:
    async with open_host() as host:
        term = await host.create_terminal(argv=["sh", "-c", "echo hello; exit 3"])
        assert await term.wait_exited() == 3
        assert term.state.text() == "hello\r\n"
        assert term.state.exitCode == 3
        assert term.state.isPty is True
        assert host.list_terminals()[0].exitCode == 3


async def test_exit_while_a_background_job_holds_the_output_open(tmp_path: Path) -> None:
    # The process exits while its job keeps its output pipes open (no pty: nothing
    # hangs them up): each reader, waiting for output, is woken by the exit, lingers
    # EXIT_LINGER, and the terminal exits long before the job would close the pipes
    # (30 s), with everything the job printed (the process exits only once it has).
    done = tmp_path / "printed"
    script = (
        f"(echo late; echo late2 >&2; touch {done}; sleep 30) & "
        f"while [ ! -e {done} ]; do sleep 0.01; done; exit 4"
    )
    async with open_host() as host:
        term = await host.create_terminal(argv=["sh", "-c", script], use_pty=False)
        with trio.fail_after(10):
            assert await term.wait_exited() == 4
        text = term.state.text()
        assert "late" in text
        assert "late2" in text


@pytest.mark.parametrize("detached", [False, True])
async def test_exit_while_a_background_job_keeps_printing_to_the_pty(detached: bool) -> None:
    # A job printing more often than every EXIT_LINGER (here every 20 ms) kept the pty
    # from ever being quiet after the shell exited: the terminal never reported its
    # exit (an agent's command never ended). Reading stops EXIT_READ_LIMIT after the
    # exit. ``detached``: the job left the terminal's session (setsid), so no signal
    # to the session reaches it; it ends once its writes fail after the disposal.
    job = "while echo tick; do sleep 0.02; done"
    start = f"setsid sh -c '{job}' &" if detached else f"({job}) &"
    async with open_host() as host:
        term = await host.create_terminal(argv=["sh", "-c", f"{start} sleep 0.2; exit 4"])
        with trio.fail_after(10):
            assert await term.wait_exited() == 4
        assert "tick" in term.state.text()
        assert term.state.exitCode == 4


async def test_exit_while_the_reader_is_busy() -> None:
    # The process ends right after a burst while its job keeps the output open (the
    # reader may still be reading when the exit is seen): nothing printed is lost, and
    # the terminal still ends.
    async with open_host() as host:
        term = await host.create_terminal(
            argv=[
                "sh",
                "-c",
                "(sleep 30) & i=0; while [ $i -lt 3000 ]; do echo l$i; i=$((i+1)); done",
            ],
            use_pty=False,
        )
        with trio.fail_after(20):
            await term.wait_exited()
        assert term.state.text().endswith("l2999\n")


async def test_all_output_before_exited() -> None:
    async with open_host() as host:
        term = await host.create_terminal(
            argv=["sh", "-c", "i=0; while [ $i -lt 2000 ]; do echo line$i; i=$((i+1)); done"]
        )
        before, envelopes = await collect_until_exit(term)
        text = before + "".join(
            e.action.data for e in envelopes if isinstance(e.action, TerminalData)
        )
        assert text.endswith("line1999\r\n")
        assert text.count("\r\n") == 2000
        assert isinstance(envelopes[-1].action, TerminalExited)
        seqs = [e.serverSeq for e in envelopes]
        assert seqs == sorted(set(seqs))


async def test_death_by_signal_has_no_exit_code() -> None:
    async with open_host() as host:
        term = await host.create_terminal(argv=["sh", "-c", "kill -9 $$"])
        assert await term.wait_exited() is None
        assert term.state.exitCode is None
        assert term.exited.is_set()


async def test_ctrl_c_interrupts_foreground_job() -> None:
    async with open_host() as host:
        term = await host.create_terminal(argv=["sh", "-c", "echo ready; sleep 30; echo after"])
        await wait_for_text(term, "ready")
        # Until the forked child has exec'd sleep it still has the shell's SIGINT
        # handler, and a ^C landing in that window is lost (a race of the test, not
        # of the engine): type it once sleep runs.
        children = Path(f"/proc/{term.pid}/task/{term.pid}/children")

        def sleep_runs() -> bool:
            for pid in children.read_text().split():
                with contextlib.suppress(OSError):
                    if Path(f"/proc/{pid}/cmdline").read_bytes().startswith(b"sleep\0"):
                        return True
            return False

        with trio.fail_after(TIMEOUT):
            while not sleep_runs():  # noqa: ASYNC110 (nothing to wait on)
                await trio.sleep(0.005)
        await term.send_input("\x03")
        with trio.fail_after(TIMEOUT):
            assert await term.wait_exited() is None  # killed by SIGINT
        assert "after" not in term.state.text()


async def test_resize_reaches_the_child() -> None:
    async with open_host() as host:
        term = await host.create_terminal(
            argv=["sh", "-c", "stty size; read x; stty size"], cols=100, rows=30
        )
        await wait_for_text(term, "30 100")
        await term.resize(132, 43)
        await wait_for_state(term, lambda s: s.cols == 132)
        await term.send_input("\r")
        await wait_for_text(term, "43 132")
        assert (term.state.cols, term.state.rows) == (132, 43)


async def test_default_size_and_term() -> None:
    async with open_host() as host:
        term = await host.create_terminal(argv=["sh", "-c", "stty size; echo $TERM"])
        await term.wait_exited()
        assert term.state.text() == "24 80\r\nxterm-256color\r\n"


async def test_cwd_and_env(tmp_path: Path) -> None:
    async with open_host() as host:
        term = await host.create_terminal(
            argv=["sh", "-c", "pwd; echo $GREETING"], cwd=tmp_path.as_uri(), env={"GREETING": "hi"}
        )
        await term.wait_exited()
        assert term.state.text() == f"{tmp_path}\r\nhi\r\n"
        assert term.state.cwd == tmp_path.as_uri()


async def test_spawn_errors_are_clear_and_leave_nothing(tmp_path: Path) -> None:
    async with open_host() as host:
        fds = open_fds()
        with pytest.raises(SpawnError, match=r"not a directory|does not exist|No such"):
            await host.create_terminal(argv=["sh"], cwd=str(tmp_path / "missing"))
        with pytest.raises(SpawnError, match="not found"):
            await host.create_terminal(argv=["no-such-shell-xyz"])
        with pytest.raises(SpawnError):
            await host.create_terminal(shell="/nonexistent/shell")
        for cwd in ("relative/dir", "file:relative", "file://elsewhere.example/tmp"):
            with pytest.raises(SpawnError, match="cwd"):
                await host.create_terminal(argv=["sh"], cwd=cwd)
        assert host.list_terminals() == ()
        assert open_fds() == fds
        assert children() == []


async def test_duplicate_uri_refused() -> None:
    async with open_host() as host:
        await host.create_terminal("ahp-terminal:/a", argv=["cat"])
        with pytest.raises(TerminalExists):
            await host.create_terminal("ahp-terminal:/a", argv=["cat"])
        assert len(host.list_terminals()) == 1


async def test_title_and_cwd_from_osc() -> None:
    async with open_host() as host:
        term = await host.create_terminal(
            argv=["printf", "\\033]0;my title\\007\\033]7;file://localhost/tmp/a%%20b\\007done"]
        )
        await term.wait_exited()
        assert term.state.title == "my title"
        assert term.state.cwd == "file:///tmp/a%20b"
        assert host.list_terminals()[0].title == "my title"
        # Titles pass through the data byte for byte.
        assert "\x1b]0;my title\x07" in term.state.text()


async def test_pipes_mode_merges_stderr() -> None:
    async with open_host() as host:
        term = await host.create_terminal(
            argv=["sh", "-c", "echo out; echo err >&2; exit 4"], use_pty=False
        )
        assert await term.wait_exited() == 4
        assert term.state.isPty is False
        assert sorted(term.state.text().splitlines()) == ["err", "out"]
        assert term.state.cols is None


async def test_invalid_utf8_is_replaced() -> None:
    async with open_host() as host:
        term = await host.create_terminal(argv=["printf", "a\\377b\\342\\202\\254"])
        await term.wait_exited()
        assert term.state.text() == "a\ufffdb\u20ac"


async def test_big_paste_does_not_block_other_terminals() -> None:
    async with open_host() as host:
        sink = await host.create_terminal(argv=["sh", "-c", "stty raw -echo; cat >/dev/null"])
        other = await host.create_terminal(argv=["cat"])
        await wait_for_state(sink, lambda s: True)
        await sink.send_input("x" * (10 * 1024 * 1024))
        # While the 10 MB drain, another terminal still echoes promptly.
        await other.send_input("ping\r")
        await wait_for_text(other, "ping")


async def test_batching_under_sustained_output(tmp_path: Path) -> None:
    big = tmp_path / "big.txt"
    big.write_text(("x" * 99 + "\n") * 100_000)  # 10 MB
    async with open_host() as host:
        term = await host.create_terminal(argv=["cat", str(big)])
        before, envelopes = await collect_until_exit(term)
        datas = [e.action for e in envelopes if isinstance(e.action, TerminalData)]
        total = len(before) + sum(len(a.data) for a in datas)
        assert total == 10_100_000  # ONLCR: \n -> \r\n
        # Kernel reads are ~4 KiB; batching must make actions much larger on average.
        assert len(datas) < total / 8192, (len(datas), term.read_batches)


async def test_scrollback_is_bounded(tmp_path: Path) -> None:
    big = tmp_path / "big.txt"
    big.write_text("".join(f"{i:09d}\n" for i in range(200_000)))  # 2 MB
    async with open_host(scrollback=64 * 1024) as host:
        term = await host.create_terminal(argv=["cat", str(big)])
        await term.wait_exited()
        text = term.state.text()
        assert len(text) <= 64 * 1024
        assert text.endswith("000199999\r\n")


async def test_stalled_subscriber_is_resynced_and_never_blocks(tmp_path: Path) -> None:
    big = tmp_path / "big.txt"
    big.write_text(("y" * 999 + "\n") * 50_000)  # 50 MB
    async with open_host() as host:
        term = await host.create_terminal(argv=["sh", "-c", f"read x; cat {big}"])
        stalled = term.subscribe(max_bytes=1024 * 1024)
        first = await stalled.__anext__()
        assert isinstance(first, Snapshot)
        received = 0
        peak = 0
        with trio.fail_after(120):
            async with term.subscribe(max_bytes=1 << 30) as active:
                await term.send_input("\r")
                async for item in active:
                    peak = max(peak, stalled.outbox.queued_bytes)
                    if isinstance(item, ActionEnvelope):
                        if isinstance(item.action, TerminalData):
                            received += len(item.action.data)
                        if isinstance(item.action, TerminalExited):
                            break
        assert received == 2 + 50_050_000  # the echoed "\r\n", then the file with ONLCR
        assert stalled.outbox.overflowed
        assert peak <= 1024 * 1024 + 70_000
        # The stalled subscriber now catches up from a fresh snapshot, not a gap.
        item = await stalled.__anext__()
        assert isinstance(item, Snapshot) and isinstance(item.state, TerminalState)
        assert stalled.resyncs == 1
        assert item.state.exitCode == 0
        await stalled.aclose()


async def test_client_actions_rules() -> None:
    async with open_host() as host:
        term = await host.create_terminal(argv=["cat"], claim=ClientClaim("alice"))
        await term.dispatch(TerminalResized(cols=0, rows=10))
        await term.dispatch(TerminalTitleChanged(title="renamed"))
        await wait_for_state(term, lambda s: s.title == "renamed")
        assert term.state.cols == 80
        assert host.list_terminals()[0].title == "renamed"


async def test_task_failure_ends_only_that_terminal() -> None:
    class Exploding(Exception):
        pass

    async with open_host() as host:
        good = await host.create_terminal(argv=["cat"])
        bad = await host.create_terminal(argv=["cat"])

        def explode(*args: object, **kwargs: object) -> None:
            raise Exploding("boom")

        bad._reducer._apply = explode  # type: ignore[method-assign]
        await bad.send_input("x")
        with trio.fail_after(TIMEOUT):
            await bad.closed.wait()
        assert bad.failure is not None
        await good.send_input("still alive\r")
        await wait_for_text(good, "still alive")


@pytest.mark.parametrize("count", [300])
async def test_create_dispose_many_leaves_nothing(count: int) -> None:
    fds = open_fds()
    assert children() == []
    async with open_host() as host:
        terms = []
        for i in range(count):
            kind = i % 3
            if kind == 0:
                # A few print flat out; the rest of this third are idle readers.
                argv = ["yes", "busy"] if i % 30 == 0 else ["cat"]
            elif kind == 1:
                argv = ["sleep", "600"]  # stopped with SIGSTOP below
            else:
                argv = ["true"]  # already exited when disposed
            terms.append(await host.create_terminal(argv=argv, grace=0.5))
        for term in terms[1::3]:
            assert term.pid is not None
            os.kill(term.pid, signal.SIGSTOP)
        for term in terms[2::3]:
            await term.wait_exited()
        async with trio.open_nursery() as nursery:
            for term in terms:
                nursery.start_soon(host.dispose, term.uri)
        assert host.list_terminals() == ()
    assert children() == []
    assert zombies() == []
    assert open_fds() == fds


async def test_dispose_stops_envelopes_and_ends_subscriptions() -> None:
    async with open_host() as host:
        term = await host.create_terminal(argv=["sh", "-c", "while :; do echo x; sleep 0.01; done"])
        sub = term.subscribe()
        await host.dispose(term.uri)
        with trio.fail_after(TIMEOUT):
            items = [item async for item in sub]
        assert isinstance(items[0], Snapshot)
        assert term.uri not in host
        assert host.hub.subscribers(term.uri) == []


async def test_host_exit_reaps_everything() -> None:
    fds = open_fds()
    host: Host
    async with open_host() as host:
        for _ in range(5):
            await host.create_terminal(argv=["sh", "-c", "trap '' HUP; sleep 60"], grace=0.2)
    assert children() == []
    assert open_fds() == fds


async def test_outbox_merges_consecutive_data() -> None:
    """A batch taken for a socket carries each run of one channel's consecutive
    output as one envelope (the run's last serverSeq), never merged past another
    channel; an in-process subscriber takes the very envelopes published."""
    from ahp.engine.envelopes import Published

    def fill(box: Outbox) -> list[Published]:
        items = [Published(ActionEnvelope("t", TerminalData(f"{seq}"), seq)) for seq in (1, 2, 3)]
        items.append(Published(ActionEnvelope("u", TerminalData("other"), 4)))
        items.append(Published(ActionEnvelope("t", TerminalData("5"), 5)))
        for item in items:
            assert box.put(item)
        return items

    box = Outbox(max_bytes=10_000)
    fill(box)
    batch = box.get_nowait()
    assert [(p.channel, p.envelope.action, p.seq) for p in batch] == [  # type: ignore[union-attr]
        ("t", TerminalData("123"), 3),
        ("u", TerminalData("other"), 4),
        ("t", TerminalData("5"), 5),
    ]
    assert box.merged == 2 and len(box) == 0

    box = Outbox(max_bytes=10_000)
    items = fill(box)
    assert box.get_nowait(coalesce=False) == items  # the same objects: no copy


async def test_outbox_merging_is_capped() -> None:
    from ahp.engine.envelopes import MERGE_LIMIT, Published

    box = Outbox(max_bytes=64 * MERGE_LIMIT)
    chunk = 10_000
    texts = [chr(ord("a") + i % 26) * chunk for i in range(3 * MERGE_LIMIT // chunk)]
    for seq, text in enumerate(texts, 1):
        assert box.put(Published(ActionEnvelope("t", TerminalData(text), seq)))
    batch = box.get_nowait()
    assert 3 <= len(batch) <= 4
    merged: list[str] = []
    seqs: list[int] = []
    for item in batch:
        assert isinstance(item, Published)
        data = item.envelope.action.data  # type: ignore[union-attr]
        assert len(data) <= MERGE_LIMIT
        merged.append(data)
        seqs.append(item.seq)
    assert "".join(merged) == "".join(texts)
    assert seqs == sorted(set(seqs)) and seqs[-1] == len(texts)


async def test_outbox_passes_big_envelopes_as_they_are() -> None:
    """An envelope of MERGE_ALONE characters or more is not merged (the same object, its
    frame shared with other subscribers); the small ones on either side of it still are,
    each run on its own side, so serverSeq stays in order."""
    from ahp.engine.envelopes import MERGE_ALONE, Published

    box = Outbox(max_bytes=64 * MERGE_ALONE)
    big = Published(ActionEnvelope("t", TerminalData("b" * MERGE_ALONE), 3))
    items = [
        Published(ActionEnvelope("t", TerminalData("1"), 1)),
        Published(ActionEnvelope("t", TerminalData("2"), 2)),
        big,
        Published(ActionEnvelope("t", TerminalData("4"), 4)),
        Published(ActionEnvelope("t", TerminalData("5"), 5)),
    ]
    for item in items:
        assert box.put(item)
    batch = box.get_nowait()
    assert len(batch) == 3 and batch[1] is big
    texts = [(p.envelope.action.data, p.seq) for p in batch]  # type: ignore[union-attr]
    assert texts == [("12", 2), ("b" * MERGE_ALONE, 3), ("45", 5)]
    just_under = Published(ActionEnvelope("t", TerminalData("u" * (MERGE_ALONE - 1)), 6))
    assert just_under.mergeable() and not big.mergeable()


async def test_bounds_count_memory_not_characters() -> None:
    """A string with one character outside the BMP holds 4 bytes per character."""
    from ahp.engine.envelopes import Published, ReplayLog

    ascii_text = "a" * 100_000
    wide_text = "a" * 99_999 + "\U0001f600"
    ascii_item = Published(ActionEnvelope("t", TerminalData(ascii_text), 1))
    wide_item = Published(ActionEnvelope("t", TerminalData(wide_text), 2))
    assert ascii_item.size < 101_000
    assert wide_item.size >= 4 * len(wide_text)
    box = Outbox(max_bytes=200_000)
    assert box.put(ascii_item)
    assert not box.put(wide_item)
    assert box.overflowed
    log = ReplayLog(max_bytes=300_000)
    for item in (ascii_item, wide_item, ascii_item):
        log.append(item)
    assert log.size <= 300_000 and len(log) == 1


async def test_replay_log_keeps_envelopes_not_frames() -> None:
    async with open_host() as host:
        item = host.hub.publish("t", TerminalData("x" * 1000))
        assert item.frame  # encoded for some subscriber
        logged = list(host.hub.log.after(0, ["t"]))
        assert logged == [item.envelope]
        assert all(isinstance(e, ActionEnvelope) for e in logged)


async def test_interrupt_right_after_create_reaches_the_program() -> None:
    """Input typed before the child's session owns the pty waits for it: a ^C sent at
    once must not be lost (it would signal nobody)."""
    async with open_host() as host:
        for _ in range(5):
            term = await host.create_terminal(argv=["cat"])
            await term.interrupt()
            with trio.fail_after(TIMEOUT):
                assert await term.wait_exited() is None  # killed by SIGINT
            await host.dispose(term.uri)


async def test_large_input_arrives_whole_and_in_order() -> None:
    """Input written directly and input queued behind it keep their order."""
    import hashlib

    payload = bytes(range(32, 127)) * 4000  # 380 KB: far beyond the pty's buffer
    pieces = [payload[i : i + 50_000] for i in range(0, len(payload), 50_000)]
    async with open_host() as host:
        term = await host.create_terminal(
            argv=["sh", "-c", f"stty raw -echo; echo ready; head -c {len(payload)} | md5sum"]
        )
        await wait_for_text(term, "ready")
        for piece in pieces:
            await term.send_input(piece.decode())
        await wait_for_text(term, hashlib.md5(payload).hexdigest())


async def test_an_error_of_the_block_leaves_open_host_as_it_was_raised() -> None:
    """It left wrapped in an ExceptionGroup (the host's nursery): ``except ValueError``
    around the block missed it, and Ctrl-C came out as a group."""

    class Boom(Exception):
        pass

    with pytest.raises(Boom) as info:
        async with open_host() as host:
            await host.create_terminal(argv=["cat"])
            try:
                int("why")
            except ValueError as exc:
                raise Boom("in the block") from exc
    assert isinstance(info.value.__cause__, ValueError)  # its cause and context kept
    assert not isinstance(info.value.__context__, BaseExceptionGroup)
    with pytest.raises(KeyboardInterrupt):
        async with open_host():
            raise KeyboardInterrupt
