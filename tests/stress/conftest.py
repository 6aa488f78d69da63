"""The ``stress`` nox session's tests: long, heavy, and not part of the normal run.

``nox -s stress`` runs ``pytest tests/stress --stress-run``; anywhere else (a bare
``pytest``) these tests are skipped. ``--flood-seconds N`` sets the duration of
the output flood (default 600, as the reliability issue asks), ``--cycles N`` the
number of create/run/dispose cycles (default 1000).
"""

from __future__ import annotations

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("stress", "ahp stress session")
    group.addoption("--stress-run", action="store_true", help="run the stress tests")
    group.addoption("--flood-seconds", type=float, default=600.0, help="output flood duration")
    group.addoption("--cycles", type=int, default=1000, help="create/run/dispose cycles")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    try:
        enabled = config.getoption("--stress-run")
    except ValueError:  # this conftest was not an initial one: a normal run
        enabled = False
    if enabled:
        return
    skip = pytest.mark.skip(reason="stress tests run in `nox -s stress` (--stress-run)")
    for item in items:
        if "tests/stress/" in str(item.path).replace("\\", "/"):
            item.add_marker(skip)
