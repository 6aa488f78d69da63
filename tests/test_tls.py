"""``wss://``: the sidecar with a TLS certificate, and the client verifying it.

Certificates come from trustme (a throwaway CA per test), so nothing here
touches the system's trust store. The client must verify by default: an
untrusted certificate is one clear :class:`ClientError`, and a plain ``ws://``
client knocking on the TLS port changes nothing for the others.
"""

from __future__ import annotations

import os
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
REPO = Path(__file__).resolve().parents[1]


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
        # The commands take the wss:// URL serve printed (they refused it as a malformed
        # URL), verified against $SSL_CERT_FILE as docs/cli.md says.
        ca_file = tmp_path / "ca.pem"
        ca.cert_pem.write_to_path(str(ca_file))
        with trio.fail_after(3 * TIMEOUT):
            done = await trio.run_process(
                [sys.executable, "-m", "ahp", "ls", url],
                capture_stdout=True,
                capture_stderr=True,
                stdin=subprocess.DEVNULL,
                env={**os.environ, "PYTHONPATH": str(REPO), "SSL_CERT_FILE": str(ca_file)},
                check=False,
            )
        assert done.returncode == 0, done.stderr
        assert T1 in done.stdout.decode()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--tls-key", "k.pem"], "--tls-key needs --tls-cert"),
        (["--tls-cert", "missing.pem"], "cannot load the TLS certificate"),
        (["--tls-cert", "c.pem", "--unix", "s.sock"], "--tls-cert is for TCP"),
    ],
)
def test_serve_tls_option_errors(args: list[str], message: str, tmp_path: Path) -> None:
    done = _serve_refused(args, tmp_path)
    assert done.returncode == 2 and message in done.stderr, done.stderr


def _serve_refused(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """``serve --port 0 ARGS`` run from ``cwd`` with this checkout's package, to its end
    (a start-up it refuses ends at once)."""
    return subprocess.run(
        [sys.executable, "-m", "ahp", "serve", "--port", "0", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=TIMEOUT,
        stdin=subprocess.DEVNULL,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        check=False,
    )


def test_a_certificate_that_cannot_be_loaded_is_named_with_the_reason(
    ca: trustme.CA, tmp_path: Path
) -> None:
    """Probe P: a missing file was "cannot load the TLS certificate: [Errno 2] No such
    file or directory" (which file?), a file without its key "[SSL] PEM lib (_ssl.c:3905)";
    an encrypted key made OpenSSL prompt for its password on the terminal."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    issued = ca.issue_cert("127.0.0.1")
    cert, key, other_key = tmp_path / "cert.pem", tmp_path / "key.pem", tmp_path / "other.pem"
    issued.cert_chain_pems[0].write_to_path(str(cert))
    issued.private_key_pem.write_to_path(str(key))
    ca.issue_cert("other").private_key_pem.write_to_path(str(other_key))
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate\n")
    encrypted = tmp_path / "encrypted.pem"
    encrypted.write_bytes(
        ec.generate_private_key(ec.SECP256R1()).private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"password"),
        )
    )
    missing = tmp_path / "missing.pem"
    cases = [
        ([missing], f"cannot load the TLS certificate '{missing}': No such file or directory"),
        ([tmp_path], f"cannot load the TLS certificate '{tmp_path}': Is a directory"),
        ([junk], f"cannot load the TLS certificate '{junk}': no PEM certificate in it"),
        (
            [cert],
            f"cannot load the TLS certificate '{cert}': no PEM private key in it (add the key "
            "to the file, or give its file with --tls-key)",
        ),
        ([cert, missing], f"cannot load the TLS key '{missing}': No such file or directory"),
        ([cert, junk], f"cannot load the TLS key '{junk}': no PEM private key in it"),
        (
            [cert, other_key],
            f"the TLS key '{other_key}' is not the key of the certificate '{cert}'",
        ),
        (
            [cert, encrypted],
            f"the TLS key '{encrypted}' is encrypted: give it unencrypted (readable by this "
            "user only)",
        ),
    ]
    for files, message in cases:
        args = ["--tls-cert", str(files[0])] + (["--tls-key", str(files[1])] if files[1:] else [])
        done = _serve_refused(args, tmp_path)
        assert (done.returncode, done.stdout) == (2, ""), done
        assert done.stderr.splitlines() == [f"ahp-terminals serve: {message}"], done.stderr
