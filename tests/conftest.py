"""Shared test configuration.

Test rules (every test module follows them):
- Real ptys, real shells and real sockets; no mocks where the real thing runs.
- Every wait on real I/O sits under an absolute ``trio.fail_after`` with a generous
  bound; nothing synchronises on sleeps or on "silence".
- ``autojump_clock`` only for tests that wait on Trio primitives alone.
- Hypothesis runs without per-example deadlines (the "ahp" profile below).
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

# A suite started under nohup or as a shell's background job inherits SIG_IGN for
# SIGHUP, SIGINT and SIGQUIT, and so would every process a test starts itself (the
# engine's own children get the defaults back: ahp.pty.launch). Tests that send
# those signals to a subprocess expect what a user's terminal gives it.
for _sig in (signal.SIGHUP, signal.SIGQUIT):
    if signal.getsignal(_sig) is signal.SIG_IGN:
        signal.signal(_sig, signal.SIG_DFL)
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# Property tests run on loaded 2-core machines too: no per-example deadline (a slow
# example is not a failure; the suite's own time is watched as a whole).
settings.register_profile("ahp", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("ahp")

# Vendored conformance vectors (tests/fixtures/README.md names the upstream source).
FIXTURES = Path(__file__).resolve().parent / "fixtures" / "ahp"
FIXTURES_1X = Path(__file__).resolve().parent / "fixtures" / "ahp-1x"


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    return FIXTURES


@pytest.fixture(autouse=True, scope="session")
def hermetic_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Shells in tests read our rc files, never the machine's (which may be slow or odd)."""
    home = tmp_path_factory.mktemp("home")
    (home / ".bashrc").write_text("PS1='$ '\n")
    (home / ".zshrc").write_text("PS1='%% '\n")
    patch = pytest.MonkeyPatch()
    patch.setenv("HOME", str(home))
    patch.setenv("SHELL", "/bin/bash")
    patch.delenv("ZDOTDIR", raising=False)
    patch.delenv("PROMPT_COMMAND", raising=False)
    yield
    patch.undo()
