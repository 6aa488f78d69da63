"""``wss://``: the sidecar with a TLS certificate, and the client verifying it.

Certificates come from trustme (a throwaway CA per test), so nothing here
touches the system's trust store. The client must verify by default: an
untrusted certificate is one clear :class:`ClientError`, and a plain ``ws://``
client knocking on the TLS port changes nothing for the others.
"""

from __future__ import annotations

import ssl
import subprocess
import sys
from pathlib import Path

import pytest
import trio
import trustme

from ahp.client import ClientError, connect
from ahp.server import ServeOptions
from tests.helpers import TIMEOUT
from tests.test_security import serve_subprocess
from tests.wire import TOKEN, running_server

T1 = "ahp-terminal:/t1"


@pytest.fixture
def ca() -> trustme.CA:
    return trustme.CA()


def _contexts(ca: trustme.CA) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1", "localhost").configure_cert(server)
    client = ssl.create_default_context()
    ca.configure_trust(client)
    return server, client


async def test_wss_end_to_end_and_refusals(ca: trustme.CA) -> None:
    server_ctx, client_ctx = _contexts(ca)
    async with running_server(ServeOptions(port=0, token=TOKEN, tls=server_ctx)) as server:
        assert server.url.startswith("wss://127.0.0.1:")
        async with connect(server.url, ssl_context=client_ctx) as client:
            await client.create_terminal(T1)
            with trio.fail_after(TIMEOUT):
                result = await client.run(T1, "echo secure; (exit 3)")
            assert (result.output, result.exit_code) == ("secure\n", 3)

            # Not trusted by default (the system's CAs): one clear error.
            with pytest.raises(ClientError, match="certificate"):
                async with connect(server.url):
                    pass
            # Plain WebSocket to the TLS port: refused (the server drops it, and
            # trio-websocket's client then waits: bounded by connect_timeout), and the
            # server carries on.
            with pytest.raises(ClientError):
                with trio.fail_after(TIMEOUT):
                    async with connect(server.url.replace("wss://", "ws://"), connect_timeout=1):
                        pass
            with trio.fail_after(TIMEOUT):
                result = await client.run(T1, "echo still")
            assert result.output == "still\n"


async def test_serve_command_with_a_certificate_file(ca: trustme.CA, tmp_path: Path) -> None:
    pem = tmp_path / "server.pem"
    ca.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(str(pem))
    _, client_ctx = _contexts(ca)
    async with serve_subprocess("--tls-cert", str(pem), env={"AHP_TOKEN": TOKEN}) as (_, url, _e):
        assert url.startswith("wss://127.0.0.1:")
        async with connect(url, ssl_context=client_ctx) as client:
            await client.create_terminal(T1)
            with trio.fail_after(TIMEOUT):
                assert (await client.run(T1, "echo ok")).output == "ok\n"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--tls-key", "k.pem"], "--tls-key needs --tls-cert"),
        (["--tls-cert", "missing.pem"], "cannot load the TLS certificate"),
        (["--tls-cert", "c.pem", "--unix", "s.sock"], "--tls-cert is for TCP"),
    ],
)
def test_serve_tls_option_errors(args: list[str], message: str, tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "ahp", "serve", "--port", "0", *args],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=TIMEOUT,
        check=False,
    )
    assert done.returncode == 2 and message in done.stderr, done.stderr
