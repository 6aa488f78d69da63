"""The independent client: ``wsclient.c``, compiled here, run as a child process.

Why a second client: every other figure of the end-to-end and echo sections is
taken by the benchmark's Python client (:mod:`ahp.bench.rawws`), which runs in
the benchmark process and shares the two cores with the server under test. Its
per-frame work (a Trio task, wsproto, orjson) is part of what the figure shows,
and it shapes how a server batches (a slow reader lets a server's writes pile
up into larger ones). The C client does almost nothing per frame, so the rows
it produces ("independent C client") belong to the server; comparing both
clients on the same server shows how much the client weighs.

Building: ``wsclient.c`` (next to this module) is compiled with ``cc -O2`` (or
``$CC``) into a per-user cache directory, once per source version (the file name
carries a hash of the source). Without a C compiler the rows are skipped with
the reason (:func:`client_missing`). Running: one child process per run; its
single JSON line is parsed into :class:`CStreamRun` or a list of echo samples.
The child is killed and reaped when the caller is cancelled or it times out.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any, Final

import attrs
import orjson
import trio

from ahp.bench.procfs import MachineCpu

__all__ = [
    "CClientError",
    "CStreamRun",
    "SOURCE",
    "build_client",
    "c_echo",
    "c_stream",
    "client_missing",
]

SOURCE: Final = Path(__file__).with_name("wsclient.c")
#: Seconds the client waits on a silent server before giving up (its SO_RCVTIMEO).
CLIENT_TIMEOUT: Final = 120.0
#: Largest stdout accepted from the client (an echo run's samples: ~12 bytes each).
MAX_OUTPUT: Final = 1024 * 1024
#: Seconds a compile may take.
COMPILE_TIMEOUT: Final = 120.0


class CClientError(RuntimeError):
    """The C client could not be built or a run failed (its stderr in the message)."""


@attrs.frozen
class CStreamRun:
    seconds: float
    chars: int
    #: UTF-8 bytes of the output text, once unescaped.
    text_bytes: int
    frames: int
    ended: bool
    close_code: int
    client_cpu_seconds: float
    machine_cores: float


def _compiler() -> str | None:
    cc = os.environ.get("CC")
    if cc:
        return shutil.which(cc)
    for name in ("cc", "gcc", "clang"):
        found = shutil.which(name)
        if found:
            return found
    return None


def client_missing() -> str | None:
    """Why the C client cannot be built here, or None."""
    if not SOURCE.is_file():
        return f"{SOURCE} is missing"
    if _compiler() is None:
        return "no C compiler (cc, gcc, clang or $CC) on PATH"
    return None


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "ahp-bench"


def build_client() -> Path:
    """The compiled client (built on first use); :class:`CClientError` if it cannot be."""
    why = client_missing()
    if why is not None:
        raise CClientError(why)
    source = SOURCE.read_bytes()
    digest = hashlib.sha256(source).hexdigest()[:16]
    target = _cache_dir() / f"wsclient-{digest}"
    if target.is_file() and os.access(target, os.X_OK):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    cc = _compiler()
    assert cc is not None
    # Built under a temporary name and renamed: concurrent benchmarks never run a
    # half-written binary.
    fd, tmp = tempfile.mkstemp(prefix="wsclient-", dir=target.parent)
    os.close(fd)
    try:
        result = subprocess.run(
            [cc, "-O2", "-std=c11", "-o", tmp, str(SOURCE)],
            capture_output=True,
            text=True,
            timeout=COMPILE_TIMEOUT,
            check=False,
        )
        if result.returncode != 0:
            raise CClientError(f"{cc} failed: {result.stderr.strip()[-2000:]}")
        os.chmod(tmp, 0o755)
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return target


async def _run(argv: list[str]) -> dict[str, Any]:
    with trio.fail_after(CLIENT_TIMEOUT + 30):
        result = await trio.run_process(argv, capture_stdout=True, capture_stderr=True, check=False)
    if result.returncode != 0:
        raise CClientError(
            f"wsclient exited with {result.returncode}: {result.stderr.decode(errors='replace')}"
        )
    out = result.stdout[:MAX_OUTPUT]
    parsed: dict[str, Any] = orjson.loads(out.splitlines()[0] if out else b"null")
    return parsed


def _dialect_args(dialect: str, channel: str | None, expect_chars: int | None) -> list[str]:
    if dialect == "ttyd":
        expect = [] if expect_chars is None else [f"--expect-chars={expect_chars}"]
        return ["--dialect=ttyd", *expect]
    if dialect == "ahp":
        if channel is None:
            raise ValueError("the AHP dialect needs the terminal's channel")
        return ["--dialect=ahp", f"--channel={channel}"]
    if dialect == "terminado":
        return ["--dialect=terminado"]
    raise ValueError(f"unknown dialect {dialect!r}")


async def c_stream(
    binary: Path,
    url: str,
    dialect: str,
    channel: str | None,
    *,
    release: str = "\r",
    ready: str | None = None,
    expect_chars: int | None = None,
) -> CStreamRun:
    """Follow a gated terminal with the C client: type ``release``, time until the end
    (first waiting for output holding ``ready``, e.g. a shell's prompt, when given).

    ``expect_chars`` (the ttyd dialect): the end is that many characters of output.
    """
    machine = MachineCpu()
    out = await _run(
        [
            str(binary),
            *_dialect_args(dialect, channel, expect_chars),
            f"--release={release}",
            *([f"--ready={ready}"] if ready is not None else []),
            f"--timeout={CLIENT_TIMEOUT}",
            url,
            "stream",
        ]
    )
    machine.stop()
    return CStreamRun(
        seconds=float(out["seconds"]),
        chars=int(out["chars"]),
        text_bytes=int(out["bytes"]),
        frames=int(out["frames"]),
        ended=bool(out["ended"]),
        close_code=int(out["close_code"]),
        client_cpu_seconds=float(out["cpu_seconds"]),
        machine_cores=machine.busy_cores,
    )


async def c_echo(
    binary: Path,
    url: str,
    dialect: str,
    channel: str | None,
    count: int,
    *,
    warmup: int,
    pause: float = 0.0,
) -> list[float]:
    """Seconds per keystroke round trip, measured by the C client."""
    out = await _run(
        [
            str(binary),
            *_dialect_args(dialect, channel, None),
            f"--count={count}",
            f"--warmup={warmup}",
            f"--pause={pause!r}",
            f"--timeout={CLIENT_TIMEOUT}",
            url,
            "echo",
        ]
    )
    samples = [float(s) for s in out["samples"]]
    if len(samples) != count:
        raise CClientError(f"wsclient returned {len(samples)} samples, expected {count}")
    return samples
