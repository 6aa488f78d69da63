"""The viewer page's protocol module (``ahp/web/static/ahp.mjs``) under node's test runner.

The module is pure (reducers, mirror, a client over an injected WebSocket), so its tests
(``tests/js/*.test.mjs``) run in node without a browser; this runs them from pytest and
checks that they ran and passed. The browser-level tests are ``tests/test_viewer.py``.
Skipped only when ``node`` is missing (``.ci/run`` installs it).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
NODE = shutil.which("node")


@pytest.mark.skipif(NODE is None, reason="node is not installed: apt-get install nodejs")
def test_the_page_protocol_module_passes_its_node_tests() -> None:
    assert NODE is not None
    done = subprocess.run(
        [NODE, "--test", "tests/js/"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    report = done.stdout + done.stderr
    assert done.returncode == 0, report
    passed = re.search(r"^# pass (\d+)$", report, re.MULTILINE)
    failed = re.search(r"^# fail (\d+)$", report, re.MULTILINE)
    assert passed is not None and failed is not None, report
    assert int(failed.group(1)) == 0 and int(passed.group(1)) >= 30, report
