"""Shared test configuration.

Test rules (every test module follows them):
- Real ptys, real shells and real sockets; no mocks where the real thing runs.
- Every wait on real I/O sits under an absolute ``trio.fail_after`` with a generous
  bound; nothing synchronises on sleeps or on "silence".
- ``autojump_clock`` only for tests that wait on Trio primitives alone.
- Hypothesis runs without per-example deadlines (the "ahp" profile below).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

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
