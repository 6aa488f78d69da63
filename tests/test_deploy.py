"""What can be checked of ``deploy/`` without a container engine.

No Docker or Kubernetes runs here, so the image is not built and no manifest is
applied. What is checked instead, for real: the entrypoint script run directly
(as an unprivileged user through ``setpriv`` when the tests run as root): its
refusals, the sidecar it starts (token from a file, not on any command line,
not printed), its health check, its drain on SIGTERM; and every manifest: it
parses, names the port the entrypoint serves on, probes paths the running
server answers (each probe path is fetched from the server the entrypoint
started), and takes the token from a Secret or secret file, never an argument.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio
import yaml

from ahp.server.drain import DEFAULT_DRAIN_TIMEOUT, GOODBYE_TIMEOUT
from ahp.server.http import health_routes
from tests.helpers import TIMEOUT, kill_and_reap

REPO = Path(__file__).resolve().parents[1]
DEPLOY = REPO / "deploy"
ENTRYPOINT = DEPLOY / "entrypoint.sh"
MANIFESTS = sorted([*DEPLOY.glob("*.yaml"), *DEPLOY.glob("kubernetes/*.yaml")])
#: The unprivileged user the entrypoint runs as when the tests run as root.
NOBODY = 65534


def _entrypoint_port() -> int:
    found = re.search(r'^port="\$\{AHP_PORT:-(\d+)\}"$', ENTRYPOINT.read_text(), re.M)
    assert found, "the entrypoint's default port"
    return int(found.group(1))


PORT = _entrypoint_port()


def _documents() -> Iterator[tuple[Path, dict[str, Any]]]:
    for path in MANIFESTS:
        for doc in yaml.safe_load_all(path.read_text()):
            assert isinstance(doc, dict), path
            yield path, doc


def _sidecar_containers() -> Iterator[tuple[Path, dict[str, Any], dict[str, Any]]]:
    """(manifest, pod spec, container) for every ahp-terminals container in Kubernetes."""
    for path, doc in _documents():
        if doc.get("kind") in ("Deployment", "DaemonSet", "StatefulSet", "Pod"):
            pod = doc["spec"] if doc["kind"] == "Pod" else doc["spec"]["template"]["spec"]
            for container in pod["containers"]:
                if container["name"] == "ahp-terminals":
                    yield path, pod, container


def probe_paths() -> set[str]:
    paths = set()
    for _, _, container in _sidecar_containers():
        for probe in ("readinessProbe", "livenessProbe"):
            paths.add(container[probe]["httpGet"]["path"])
    return paths


# -- manifests --------------------------------------------------------------------------------


def test_every_manifest_parses_and_the_expected_ones_exist() -> None:
    names = {p.relative_to(DEPLOY).as_posix() for p in MANIFESTS}
    assert {"compose.yaml", "kubernetes/sidecar.yaml", "kubernetes/daemonset.yaml"} <= names
    kinds = {doc["kind"] for _, doc in _documents() if "kind" in doc}
    assert {"Deployment", "DaemonSet", "Service"} <= kinds


def test_kubernetes_sidecars_probe_real_routes_on_the_served_port_with_a_secret_token() -> None:
    routes = health_routes(lambda: True)
    containers = list(_sidecar_containers())
    assert len(containers) == 2  # the sidecar example and the DaemonSet
    for path, pod, container in containers:
        env = {e["name"]: e.get("value") for e in container.get("env", [])}
        port = int(env.get("AHP_PORT") or PORT)
        assert port == PORT, path
        named = {p["name"]: p["containerPort"] for p in container["ports"]}
        assert port in named.values(), path
        assert container["readinessProbe"]["httpGet"]["path"] == "/readyz", path
        assert container["livenessProbe"]["httpGet"]["path"] == "/healthz", path
        for probe in ("readinessProbe", "livenessProbe"):
            get = container[probe]["httpGet"]
            assert routes.find(get["path"]) is not None, (path, get)
            assert named.get(get["port"], get["port"]) == port, (path, get)
        # The token: a file from a Secret volume, never an argument or a literal.
        assert "AHP_TOKEN" not in env, path
        token_dir = os.path.dirname(env["AHP_TOKEN_FILE"])
        mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
        volumes = {v["name"]: v for v in pod["volumes"]}
        assert "secret" in volumes[mounts[token_dir]], path
        assert not any("--token" in str(a) for a in container.get("args", [])), path
        # Non-root, and time enough for the drain before SIGKILL.
        assert pod["securityContext"]["runAsNonRoot"] is True, path
        assert pod["securityContext"]["runAsUser"] != 0, path
        assert pod["terminationGracePeriodSeconds"] > DEFAULT_DRAIN_TIMEOUT + GOODBYE_TIMEOUT
        # Terminals start in the workspace (probe M, finding 7: they started in $HOME).
        mount = env.get("AHP_CWD") or _dockerfile_workdir()
        assert mount in mounts and mounts[mount] == "workspace", path
    # The sidecar example shares the workspace with an agent container.
    (sidecar_pod,) = [pod for path, pod, _ in containers if path.name == "sidecar.yaml"]
    shared = [
        {m["name"] for m in c["volumeMounts"] if m["mountPath"] == "/workspace"}
        for c in sidecar_pod["containers"]
    ]
    assert len(shared) == 2 and shared[0] == shared[1] == {"workspace"}


def test_the_compose_file_maps_the_served_port_and_uses_a_secret_file() -> None:
    compose = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    service = compose["services"]["ahp-terminals"]
    assert service["build"]["dockerfile"] == "deploy/Dockerfile"
    assert (DEPLOY / service["build"]["context"] / service["build"]["dockerfile"]).is_file()
    container_ports = {int(str(p).rsplit(":", 1)[1]) for p in service["ports"]}
    assert container_ports == {PORT}
    assert int(service["environment"]["AHP_PORT"]) == PORT
    assert service["environment"]["AHP_TOKEN_FILE"] == "/run/secrets/ahp_token"
    assert service["secrets"] == ["ahp_token"] and "ahp_token" in compose["secrets"]
    assert service["healthcheck"]["test"] == ["CMD", "ahp-entrypoint", "healthcheck"]
    assert "AHP_TOKEN" not in service["environment"]
    # Terminals start in the volume the agent shares (probe M, finding 7).
    cwd = service["environment"].get("AHP_CWD") or _dockerfile_workdir()
    agent = compose["services"]["agent"]
    assert f"workspace:{cwd}" in service["volumes"] and f"workspace:{cwd}" in agent["volumes"]


def _dockerfile_workdir() -> str:
    """The image's last ``WORKDIR``: the entrypoint's default ``AHP_CWD``."""
    found = re.findall(r"^WORKDIR (\S+)$", (DEPLOY / "Dockerfile").read_text(), re.M)
    return str(found[-1])


def test_the_dockerfile_is_slim_non_root_has_the_shells_and_a_python_healthcheck() -> None:
    text = (DEPLOY / "Dockerfile").read_text()
    lines = [line.strip() for line in text.replace("\\\n", " ").splitlines()]
    instructions = [line for line in lines if line and not line.startswith("#")]
    (base,) = [line for line in instructions if line.startswith("FROM ")]
    assert re.fullmatch(r"FROM python:3\.\d+-slim", base)
    users = [line.split()[1] for line in instructions if line.startswith("USER ")]
    assert users and users[-1].split(":")[0] not in ("root", "0")
    install = next(line for line in instructions if "apt-get install" in line)
    assert {"bash", "zsh", "fish"} <= set(install.split())
    (health,) = [line for line in instructions if line.startswith("HEALTHCHECK ")]
    assert '["ahp-entrypoint", "healthcheck"]' in health and "curl" not in health
    assert f"EXPOSE {PORT}" in instructions
    assert f"AHP_PORT={PORT}" in text
    assert "--token" not in text
    # Every file it copies exists here.
    for line in instructions:
        if line.startswith("COPY "):
            for source in line.split()[1:-1]:
                assert (REPO / source).exists(), source


# -- the entrypoint, run for real -------------------------------------------------------------


def _world_reachable(path: str) -> bool:
    """Whether any user can reach and read ``path`` (every directory above searchable)."""
    real = Path(os.path.realpath(path))
    return all(os.stat(d).st_mode & 0o001 for d in real.parents) and bool(
        os.stat(real).st_mode & 0o005
    )


def _as_user() -> list[str]:
    """The command prefix that runs the entrypoint as an unprivileged user.

    When this interpreter lives where only root can reach it (a pyenv under
    ``/root``), the user keeps one capability, ``CAP_DAC_READ_SEARCH`` (read and
    search any file, nothing else): the image installs Python where every user
    reaches it, this machine does not, and the uid is what is under test.
    """
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("running as root and setpriv is missing: cannot drop to a user")
    prefix = [setpriv, f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
    if not _world_reachable(sys.executable):
        prefix += ["--inh-caps=+dac_read_search", "--ambient-caps=+dac_read_search"]
    return [*prefix, "--"]


@pytest.fixture
def scratch() -> Iterator[Path]:
    """A directory the unprivileged user can use (pytest's tmp_path is 0700 root's)."""
    path = Path(tempfile.mkdtemp(prefix="ahp-deploy-"))
    os.chmod(path, 0o755)
    if os.geteuid() == 0:
        os.chown(path, NOBODY, NOBODY)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _env(scratch: Path, **extra: str) -> dict[str, str]:
    drop = ("AHP_TOKEN", "AHP_TOKEN_FILE", "AHP_ALLOW_ROOT", "AHP_PORT", "AHP_HOST")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    path = f"{Path(sys.executable).parent}:{env.get('PATH', '/usr/bin:/bin')}"
    return {
        **env,
        "PATH": path,
        "PYTHONPATH": str(REPO),
        "PYTHONDONTWRITEBYTECODE": "1",
        "HOME": str(scratch),
        **extra,
    }


async def _entrypoint(
    args: list[str], env: dict[str, str], prefix: list[str] | None = None
) -> subprocess.CompletedProcess[str]:
    with trio.fail_after(TIMEOUT):
        done = await trio.run_process(
            [*(_as_user() if prefix is None else prefix), "sh", str(ENTRYPOINT), *args],
            stdin=subprocess.DEVNULL,
            capture_stdout=True,
            capture_stderr=True,
            check=False,
            env=env,
            cwd="/",
        )
    return subprocess.CompletedProcess(
        done.args, done.returncode, done.stdout.decode(), done.stderr.decode()
    )


def _one_line(done: subprocess.CompletedProcess[str], why: str) -> None:
    assert done.returncode == 2, done
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and why in lines[0], done.stderr


async def test_the_entrypoint_refuses_root_a_missing_token_and_a_token_argument(
    scratch: Path,
) -> None:
    token = scratch / "token"
    token.write_text("tok\n")
    if os.geteuid() == 0:
        done = await _entrypoint([], _env(scratch, AHP_TOKEN_FILE=str(token)), prefix=[])
        _one_line(done, "refusing to run as root")
    _one_line(await _entrypoint([], _env(scratch)), "no token")
    done = await _entrypoint(["serve", "--token", "x"], _env(scratch, AHP_TOKEN_FILE=str(token)))
    _one_line(done, "would show the token in ps")
    missing = scratch / "no-such-workspace"
    done = await _entrypoint([], _env(scratch, AHP_TOKEN_FILE=str(token), AHP_CWD=str(missing)))
    _one_line(done, f"AHP_CWD: no directory {missing}")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


@asynccontextmanager
async def entrypoint_server(
    scratch: Path, token: str, *, cwd: str = "/", **extra: str
) -> AsyncIterator[tuple[trio.Process, int]]:
    """The entrypoint serving on a free loopback port, as the unprivileged user, in
    the working directory ``cwd``, with ``extra`` in its environment."""
    token_file = scratch / "token"
    token_file.write_text(f"{token}\n")
    os.chmod(token_file, 0o644)
    port = _free_port()
    env = _env(scratch, AHP_TOKEN_FILE=str(token_file), AHP_PORT=str(port), AHP_HOST="127.0.0.1")
    proc = await trio.lowlevel.open_process(
        [*_as_user(), "sh", str(ENTRYPOINT)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env={**env, **extra},
        cwd=cwd,
    )
    try:
        assert proc.stdout is not None
        line = b""
        with trio.fail_after(TIMEOUT):
            while not line.endswith(b"\n"):
                chunk = await proc.stdout.receive_some(4096)
                assert chunk, "the entrypoint's server exited"
                line += chunk
        assert line.decode().strip() == f"ws://127.0.0.1:{port}/"  # no token printed
        yield proc, port
    finally:
        await kill_and_reap(proc)


async def _status(port: int, path: str) -> int:
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    try:
        await stream.send_all(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())
        reply = b""
        with trio.fail_after(TIMEOUT):
            while b"\r\n" not in reply and (chunk := await stream.receive_some(4096)):
                reply += chunk
    finally:
        await stream.aclose()
    return int(reply.split()[1])


async def test_the_entrypoint_serves_as_a_user_answers_every_probe_and_drains(
    scratch: Path,
) -> None:
    token = "entrypoint-token-42"
    async with entrypoint_server(scratch, token) as (proc, port):
        # exec: the server is the entrypoint's own process, a user's, token nowhere in ps.
        status = Path(f"/proc/{proc.pid}/status").read_text()  # noqa: ASYNC240
        uid = int(re.search(r"^Uid:\s+(\d+)", status, re.M).group(1))  # type: ignore[union-attr]
        assert uid == (NOBODY if os.geteuid() == 0 else os.geteuid())
        cmdline = Path(f"/proc/{proc.pid}/cmdline").read_bytes()  # noqa: ASYNC240
        assert b"-m\0ahp\0serve" in cmdline and token.encode() not in cmdline
        # Every path the manifests probe is answered 200 by this very server.
        for path in sorted(probe_paths()):
            assert await _status(port, path) == 200, path
        env = _env(scratch, AHP_PORT=str(port))
        assert (await _entrypoint(["healthcheck"], env)).returncode == 0
        proc.send_signal(signal.SIGTERM)
        with trio.fail_after(TIMEOUT):
            assert await proc.wait() == 0
        unhealthy = await _entrypoint(["healthcheck"], env)
        assert unhealthy.returncode == 1 and "healthcheck:" in unhealthy.stderr


async def test_the_entrypoint_s_terminals_start_in_its_working_directory(scratch: Path) -> None:
    """Probe M (findings 3 and 7): terminals started in ``$HOME`` (``/home/ahp`` in the
    image, not the shared ``/workspace``), and with ``HOME=/nonexistent`` (what ``su
    nobody`` gives) every ``run`` and ``exec`` was refused while ``/readyz`` said ready.
    The entrypoint starts them in its working directory (the image's ``WORKDIR``), or
    ``AHP_CWD``."""
    workspace = scratch / "workspace"
    workspace.mkdir()
    if os.geteuid() == 0:
        os.chown(workspace, NOBODY, NOBODY)
    token = "entrypoint-token-43"
    client_env = {**_env(scratch), "AHP_TOKEN": token}
    for cwd, extra in [(str(workspace), {}), ("/", {"AHP_CWD": str(workspace)})]:
        async with entrypoint_server(scratch, token, cwd=cwd, HOME="/nonexistent", **extra) as (
            _,
            port,
        ):
            assert await _status(port, "/readyz") == 200
            url = f"ws://127.0.0.1:{port}/"
            for command in (["run", url, "--", "pwd"], ["exec", url, "--", "pwd"]):
                with trio.fail_after(3 * TIMEOUT):
                    done = await trio.run_process(
                        [sys.executable, "-m", "ahp", *command],
                        stdin=subprocess.DEVNULL,
                        capture_stdout=True,
                        capture_stderr=True,
                        check=False,
                        env=client_env,
                    )
                assert done.returncode == 0, (command, done.stderr)
                assert done.stdout.decode() == f"{workspace}\n", command
