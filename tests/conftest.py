"""Shared test configuration.

Test rules (every test module follows them):
- Real ptys, real shells and real sockets; no mocks where the real thing runs.
- Every wait on real I/O sits under an absolute ``trio.fail_after`` with a generous
  bound; nothing synchronises on sleeps or on "silence".
- ``autojump_clock`` only for tests that wait on Trio primitives alone.
"""

from __future__ import annotations

from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parents[1].parent / "shared" / "ahp-fixtures"


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    return FIXTURES
