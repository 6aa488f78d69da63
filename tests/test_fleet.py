"""Many hosts from one client: ``connect_many``, ``ls --host``, ``attach HOST/NAME``, MCP.

Several real sidecars at once on loopback: in-process hosts served on free ports,
and one ``python -m ahp serve`` subprocess that the test kills (SIGKILL) and
starts again on the same port while the others keep working; and, where the
machine lets the test make one (root, ``ip netns``), a sidecar in a network
namespace of its own, reached over a veth pair, beside one on loopback (skipped
with the reason otherwise). Every host has a terminal with the same URI
(``ahp-terminal:/t1``): the collision the (host, URI) addressing exists for.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path

import pytest
import trio

from ahp.client import connect_many
from ahp.client.fleet import (
    HOST_RETRY_DELAYS,
    MAX_HOSTS,
    host_label,
    retry_delay,
    select_host,
    split_hosts,
)
from ahp.engine import Host, open_host
from ahp.server import ServeOptions, Sidecar, serve_host
from tests.helpers import TIMEOUT, kill_and_reap, wait_for_text

REPO = Path(__file__).resolve().parents[1]
TOKEN = "fleet-token"
T1 = "ahp-terminal:/t1"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


@asynccontextmanager
async def in_process_hosts(count: int) -> AsyncIterator[list[tuple[Host, Sidecar]]]:
    """``count`` hosts, each served on a free loopback port, each with ``t1``."""
    async with AsyncExitStack() as stack:
        nursery = await stack.enter_async_context(trio.open_nursery())
        out = []
        for _ in range(count):
            host = await stack.enter_async_context(open_host(shell="/bin/bash"))
            sidecar = await nursery.start(serve_host, host, ServeOptions(port=0, token=TOKEN))
            await host.create_terminal(T1)
            out.append((host, sidecar))
        try:
            yield out
        finally:
            nursery.cancel_scope.cancel()


async def start_serve(port: int) -> trio.Process:
    """``python -m ahp serve`` on ``port``; returns once it listens."""
    env = {k: v for k, v in os.environ.items() if k not in ("AHP_TOKEN", "AHP_TOKEN_FILE")}
    proc = await trio.lowlevel.open_process(
        [sys.executable, "-m", "ahp", "serve", "--port", str(port), "--shell", "bash"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env={**env, "PYTHONPATH": str(REPO), "AHP_TOKEN": TOKEN},
        cwd=str(REPO),
    )
    assert proc.stdout is not None
    line = b""
    with trio.fail_after(TIMEOUT):
        while not line.endswith(b"\n"):
            chunk = await proc.stdout.receive_some(4096)
            assert chunk, "serve exited"
            line += chunk
    return proc


async def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k not in ("AHP_TOKEN", "AHP_HOSTS")}
    with trio.fail_after(TIMEOUT):
        done = await trio.run_process(
            [sys.executable, "-m", "ahp", *args],
            stdin=subprocess.DEVNULL,
            capture_stdout=True,
            capture_stderr=True,
            check=False,
            env={**base, "PYTHONPATH": str(REPO), **(env or {})},
            cwd=str(REPO),
        )
    return subprocess.CompletedProcess(
        done.args, done.returncode, done.stdout.decode(), done.stderr.decode()
    )


# -- the pure parts ---------------------------------------------------------------------------


def test_labels_hosts_selection_and_bounds() -> None:
    assert host_label("ws://127.0.0.1:8765/?tkn=x") == "127.0.0.1:8765"
    assert host_label("ws://[::1]:9/") == "[::1]:9"
    assert host_label("ws+unix:///run/ahp.sock:/") == "/run/ahp.sock"
    assert split_hosts("ws://a:1/, ws://b:2/\nws://c:3/") == ["ws://a:1/", "ws://b:2/", "ws://c:3/"]
    urls = ["ws://node-a:8765/", "ws://node-b:8765/", "ws://node-b:9000/"]
    assert select_host(urls, "node-a") == urls[0]  # a host name only one URL has
    assert select_host(urls, "node-b:9000") == urls[2]
    with pytest.raises(LookupError, match="names several hosts"):
        select_host(urls, "node-b")
    with pytest.raises(LookupError, match="is not one of the hosts"):
        select_host(urls, "node-c")
    assert retry_delay(1) == HOST_RETRY_DELAYS[0]
    assert retry_delay(10_000) == HOST_RETRY_DELAYS[-1]


async def test_more_hosts_than_the_bound_or_a_label_twice_are_refused() -> None:
    too_many = [f"ws://127.0.0.1:{1000 + i}/" for i in range(MAX_HOSTS + 1)]
    with pytest.raises(ValueError, match=f"at most {MAX_HOSTS}"):
        async with connect_many(too_many):
            pass
    with pytest.raises(ValueError, match="two URLs name the host"):
        async with connect_many(["ws://127.0.0.1:1/", "ws://127.0.0.1:1/?tkn=x"]):
            pass


# -- several sidecars -------------------------------------------------------------------------


async def test_one_host_killed_and_restarted_while_the_others_keep_working() -> None:
    port = free_port()
    proc = await start_serve(port)
    try:
        async with in_process_hosts(2) as hosts:
            urls = [s.url for _, s in hosts] + [f"ws://127.0.0.1:{port}/"]
            async with connect_many(urls, token=TOKEN) as fleet:
                labels = list(fleet.hosts)
                assert labels == [host_label(u) for u in urls] and fleet.down() == {}
                restarted = labels[2]
                # The subprocess has no terminal yet: give it its t1 too.
                await fleet.client(restarted).create_terminal(T1)
                await fleet.wait_for(lambda: len(fleet.terminals()) == 3, timeout=TIMEOUT)
                # Same URI on every host; (host, URI) tells them apart.
                assert {t.uri for t in fleet.terminals()} == {T1}
                for label in labels:
                    term = await fleet.terminal(label, T1)
                    result = await term.run(f"echo on-{label}", timeout=TIMEOUT)
                    assert result.output.strip() == f"on-{label}"
                proc.kill()
                await proc.wait()
                await fleet.wait_for(lambda: restarted in fleet.down(), timeout=TIMEOUT)
                # The others keep working while it is down.
                assert set(fleet.down()) == {restarted}
                for label in labels[:2]:
                    term = await fleet.terminal(label, T1)
                    result = await term.run("echo still-here", timeout=TIMEOUT)
                    assert result.output.strip() == "still-here"
                assert {t.host for t in fleet.terminals()} == set(labels[:2])
                # Back on the same port (a new process: it forgot this client).
                proc = await start_serve(port)
                await fleet.wait_for(lambda: fleet.down() == {}, timeout=TIMEOUT)
                client = fleet.client(restarted)
                await client.create_terminal(T1)
                term = await fleet.terminal(restarted, T1)
                result = await term.run("echo back-again", timeout=TIMEOUT)
                assert result.output.strip() == "back-again"
                await fleet.wait_for(lambda: len(fleet.terminals()) == 3, timeout=TIMEOUT)
    finally:
        await kill_and_reap(proc)


async def test_a_host_down_at_start_is_reported_not_fatal() -> None:
    nowhere = f"ws://127.0.0.1:{free_port()}/"
    async with in_process_hosts(1) as hosts, connect_many([hosts[0][1].url, nowhere]) as fleet:
        assert set(fleet.down()) == {host_label(nowhere)}
        assert "cannot connect" in fleet.down()[host_label(nowhere)]
        assert [t.host for t in fleet.terminals()] == [host_label(hosts[0][1].url)]


async def test_ls_lists_several_hosts_and_reports_the_one_down() -> None:
    nowhere = f"ws://127.0.0.1:{free_port()}/"
    async with in_process_hosts(2) as hosts:
        bare = [s.url.split("?", 1)[0] for _, s in hosts]
        labels = [host_label(u) for u in bare]
        args = ["ls", "--token", TOKEN]
        for url in [*bare, nowhere]:
            args += ["--host", url]
        done = await cli(*args)
        assert done.returncode == 1, done
        lines = done.stdout.strip().splitlines()
        assert lines[0].split() == ["HOST", "URI", "TITLE", "CLAIM", "STATUS"]
        assert sorted(line.split()[0] for line in lines[1:]) == sorted(labels)
        assert all(line.split()[1] == T1 for line in lines[1:])
        (problem,) = done.stderr.strip().splitlines()
        assert problem.startswith(f"ahp-terminals ls: {host_label(nowhere)}: cannot connect")
        # $AHP_HOSTS, JSON: every row says its host; all up, so status 0.
        done = await cli("ls", "--json", env={"AHP_HOSTS": ",".join(bare), "AHP_TOKEN": TOKEN})
        assert done.returncode == 0, done
        rows = json.loads(done.stdout)
        assert sorted((r["host"], r["uri"]) for r in rows) == sorted((h, T1) for h in labels)
        # The same host twice: the same URL is listed once; two URLs of one host are
        # refused in one line (it was a traceback).
        done = await cli("ls", "--token", TOKEN, "--host", bare[0], "--host", bare[0])
        assert done.returncode == 0 and len(done.stdout.strip().splitlines()) == 2, done
        done = await cli("ls", "--host", bare[0] + "?tkn=a", "--host", bare[0] + "?tkn=b")
        assert done.returncode != 0 and "Traceback" not in done.stderr, done
        (line,) = done.stderr.strip().splitlines()
        assert (
            line == f"ahp-terminals ls: two URLs name the host {labels[0]}: give each host once"
        ), line


async def test_attach_host_slash_name_picks_the_host() -> None:
    async with in_process_hosts(2) as hosts:
        bare = [s.url.split("?", 1)[0] for _, s in hosts]
        second = hosts[1][0]
        await second.get(T1).send_input("echo marker-on-the-second\r")
        await wait_for_text(second.get(T1), "marker-on-the-second")
        label = host_label(bare[1])
        # stdin is /dev/null: attach shows the history, then the end of input detaches.
        done = await cli(
            "attach", f"{label}/t1", "--host", bare[0], "--host", bare[1], env={"AHP_TOKEN": TOKEN}
        )
        assert "marker-on-the-second" in done.stdout, done
        wrong = await cli("attach", "nowhere:1/t1", "--host", bare[0], env={"AHP_TOKEN": TOKEN})
        assert wrong.returncode == 1
        assert "is not one of the hosts" in wrong.stderr and "Traceback" not in wrong.stderr


async def test_attach_a_name_alone_is_found_among_the_hosts() -> None:
    """Probe P: ``attach --host URL demo`` said "'demo' is not HOST/NAME", though
    docs/cli.md says ``--host`` finds the terminal. A name alone is the only host's, or
    the one host's of several that has it; when several or none have it, one line says
    which hosts and what to type, and nothing is created."""
    async with in_process_hosts(2) as hosts:
        (first, first_car), (second, second_car) = hosts
        bare = [first_car.url.split("?", 1)[0], second_car.url.split("?", 1)[0]]
        labels = [host_label(u) for u in bare]
        await second.get(T1).send_input("echo marker-in-t1\r")
        await wait_for_text(second.get(T1), "marker-in-t1")
        solo = await second.create_terminal("ahp-terminal:/solo")
        await solo.send_input("echo marker-in-solo\r")
        await wait_for_text(solo, "marker-in-solo")
        token = {"AHP_TOKEN": TOKEN}
        both = ("--host", bare[0], "--host", bare[1])
        # stdin is /dev/null: attach shows the history, then the end of input detaches.
        done = {
            "one host": await cli("attach", "--host", bare[1], "t1", env=token),
            "one host, a URI": await cli("attach", "--host", bare[1], T1, env=token),
            "the one that has it": await cli("attach", *both, "solo", env=token),
            "$AHP_HOSTS": await cli("attach", "solo", env={**token, "AHP_HOSTS": ",".join(bare)}),
            "several have it": await cli("attach", *both, "t1", env=token),
            "none has it": await cli("attach", *both, "nope", env=token),
            "none, --create": await cli("attach", *both, "nope", "--create", env=token),
            "no hosts": await cli("attach", "t1", env=token),
        }
        assert set(first.terminals) == {T1}  # nothing was created
        assert set(second.terminals) == {T1, "ahp-terminal:/solo"}
    for name, marker in [
        ("one host", "marker-in-t1"),
        ("one host, a URI", "marker-in-t1"),
        ("the one that has it", "marker-in-solo"),
        ("$AHP_HOSTS", "marker-in-solo"),
    ]:
        assert done[name].returncode == 0 and marker in done[name].stdout, (name, done[name])
    expected = {
        "several have it": (
            f"ahp-terminal:/t1 is on several hosts ({labels[0]}, {labels[1]}): say which, as "
            f"HOST/NAME: {labels[0]}/t1"
        ),
        "none has it": f"no terminal ahp-terminal:/nope on the hosts ({labels[0]}, {labels[1]})",
        "none, --create": (
            f"no terminal ahp-terminal:/nope on the hosts ({labels[0]}, {labels[1]}); --create "
            f"needs the host: HOST/nope (hosts: {labels[0]}, {labels[1]})"
        ),
        "no hosts": (
            "no URL given: attach URL t1 (the URL `ahp-terminals serve` prints first), or give "
            "the hosts with --host URL or $AHP_HOSTS"
        ),
    }
    for name, message in expected.items():
        result = done[name]
        assert result.returncode == 1 and "Traceback" not in result.stderr, (name, result)
        assert result.stderr.splitlines() == [f"ahp-terminals attach: {message}"], (
            name,
            result.stderr,
        )


async def test_mcp_over_two_hosts(tmp_path: Path) -> None:
    from tests.test_mcp import _text, mcp_session, terminal_rows

    async with in_process_hosts(2) as hosts:
        (first, first_car), (second, second_car) = hosts
        other = host_label(second_car.url)
        async with mcp_session(
            tmp_path, "--connect", first_car.url, "--connect", second_car.url
        ) as session:
            listed = await session.call_tool("list_terminals", {})
            assert sorted(terminal_rows(listed)) == sorted(["t1", f"ahp-terminal:/{other}/t1"])
            ran = await session.call_tool(
                "run_command",
                {"terminal": f"ahp-terminal:/{other}/t1", "command": "echo two-$((1+1))"},
            )
            assert not ran.is_error and "two-2" in _text(ran), _text(ran)
            ran = await session.call_tool("run_command", {"terminal": "t1", "command": "echo one"})
            assert not ran.is_error and "one" in _text(ran), _text(ran)
            created = await session.call_tool(
                "create_terminal", {"terminal": f"ahp-terminal:/{other}/build"}
            )
            assert not created.is_error, _text(created)
            assert "ahp-terminal:/build" in second and "ahp-terminal:/build" not in first
            await wait_for_text(second.get(T1), "two-2")


# -- a host in a network namespace of its own -------------------------------------------------


async def _ip(*args: str) -> subprocess.CompletedProcess[bytes]:
    with trio.fail_after(TIMEOUT):
        return await trio.run_process(
            ["ip", *args], capture_stdout=True, capture_stderr=True, check=False
        )


@asynccontextmanager
async def network_namespace() -> AsyncIterator[tuple[str, str]]:
    """A network namespace joined to this one by a veth pair: (its name, its address).
    Skips when this machine does not let the test make one (not root, no ``ip``)."""
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("network namespaces need root and the ip command")
    tag = os.getpid() % 10_000
    name, outside, inside = f"ahp-fleet-{tag}", f"ahpo{tag}", f"ahpi{tag}"
    net = f"10.231.{tag % 250}"
    made = await _ip("netns", "add", name)
    if made.returncode != 0:
        pytest.skip(f"ip netns add is not permitted here: {made.stderr.decode().strip()}")
    try:
        steps = [
            ("link", "add", outside, "type", "veth", "peer", "name", inside),
            ("link", "set", inside, "netns", name),
            ("addr", "add", f"{net}.1/30", "dev", outside),
            ("link", "set", outside, "up"),
            ("-n", name, "addr", "add", f"{net}.2/30", "dev", inside),
            ("-n", name, "link", "set", inside, "up"),
            ("-n", name, "link", "set", "lo", "up"),
        ]
        for step in steps:
            done = await _ip(*step)
            assert done.returncode == 0, (step, done.stderr)
        yield name, f"{net}.2"
    finally:
        await _ip("link", "del", outside)  # (both ends of the pair)
        await _ip("netns", "del", name)


async def test_a_host_in_a_network_namespace_beside_one_on_loopback() -> None:
    async with network_namespace() as (namespace, address), in_process_hosts(1) as hosts:
        env = {k: v for k, v in os.environ.items() if k not in ("AHP_TOKEN", "AHP_TOKEN_FILE")}
        cmd = ["ip", "netns", "exec", namespace, sys.executable, "-m", "ahp", "serve"]
        proc = await trio.lowlevel.open_process(
            [*cmd, "--host", address, "--port", "8765", "--shell", "bash"],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env={**env, "PYTHONPATH": str(REPO), "AHP_TOKEN": TOKEN},
            cwd=str(REPO),
        )
        try:
            assert proc.stdout is not None
            with trio.fail_after(TIMEOUT):
                assert (await proc.stdout.receive_some(4096)).startswith(b"ws://")
            remote = f"ws://{address}:8765/"
            async with connect_many([hosts[0][1].url, remote], token=TOKEN) as fleet:
                assert fleet.down() == {}
                label = host_label(remote)
                await fleet.client(label).create_terminal(T1)
                here = await (await fleet.terminal(host_label(hosts[0][1].url), T1)).run(
                    "readlink /proc/self/ns/net", timeout=TIMEOUT
                )
                there = await (await fleet.terminal(label, T1)).run(
                    "readlink /proc/self/ns/net", timeout=TIMEOUT
                )
                # Two hosts, two network stacks: the terminal runs where its sidecar does.
                assert here.output.strip().startswith("net:[")
                assert there.output.strip().startswith("net:[")
                assert here.output.strip() != there.output.strip()
        finally:
            await kill_and_reap(proc)
