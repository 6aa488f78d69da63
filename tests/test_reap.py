"""The sweep of a terminal's session (``ahp.pty.reap``) on real processes.

Why: what a disposed terminal leaves behind is killed in paced batches, so a
thousand leftovers do not exit at once and take both cores from the event loop
(issue 25). These tests check that pacing loses no process, that the pause is
taken between batches (a spy on the module's ``time.sleep``: the timing itself is
measured by ``benchmarks/bench_edges.py``, ``fork and dispose``), and that the
unpaced sweep (for a process about to exit) takes none.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator

import pytest

from ahp.pty import reap

LEFTOVERS = 2 * reap.KILL_BATCH + 5


@pytest.fixture
def session() -> Iterator[int]:
    """A session whose leader started LEFTOVERS sleeps and was then killed and reaped."""
    script = f"for i in $(seq {LEFTOVERS}); do sleep 300 & done; echo ready; exec sleep 300"
    leader = subprocess.Popen(
        ["/bin/sh", "-c", script], start_new_session=True, stdout=subprocess.PIPE
    )
    assert leader.stdout is not None
    assert leader.stdout.readline() == b"ready\n"
    deadline = time.monotonic() + 10
    while len(reap.session_members(leader.pid)) < LEFTOVERS + 1:
        assert time.monotonic() < deadline, "the sleeps never started"
        time.sleep(0.01)
    leader.kill()
    leader.wait()
    leader.stdout.close()
    try:
        yield leader.pid
    finally:
        reap.kill_session(leader.pid, paced=False)  # (a failed test leaves no orphans)


def _pauses(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    pauses: list[float] = []
    real_sleep = time.sleep

    def spy(seconds: float) -> None:
        pauses.append(seconds)
        real_sleep(seconds)

    monkeypatch.setattr("ahp.pty.reap.time.sleep", spy)
    return pauses


def test_a_paced_sweep_kills_every_leftover_pausing_between_batches(
    session: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    pauses = _pauses(monkeypatch)
    assert len(reap.session_members(session)) == LEFTOVERS
    assert reap.kill_session(session) == LEFTOVERS
    deadline = time.monotonic() + 10
    while reap.session_members(session):  # SIGKILLed: gone once the kernel is done
        assert time.monotonic() < deadline
        time.sleep(0.01)
    # One pause after each full batch but the last, in the first round (a second
    # round finds at most processes still exiting, fewer than a batch).
    assert pauses[:2] == [reap.KILL_PAUSE, reap.KILL_PAUSE]
    assert len(pauses) >= LEFTOVERS // reap.KILL_BATCH


def test_an_unpaced_sweep_takes_no_pause(session: int, monkeypatch: pytest.MonkeyPatch) -> None:
    pauses = _pauses(monkeypatch)
    assert reap.kill_session(session, paced=False) == LEFTOVERS
    assert pauses == []
