"""What /proc shows of a process waiting in poll/select/epoll (issue 20, item 3).

Test rules: real child processes (python3 sleeping in each call on a pipe it
made), read through :mod:`ahp.pty.procfs`; every wait under a deadline.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import trio

from ahp.pty import procfs
from tests.helpers import TIMEOUT

#: Each program makes a pipe, says its read end's fd, then waits on it for ever.
PROGRAMS = {
    "select": (
        "import os, select; r, w = os.pipe(); print(r, flush=True); select.select([r], [], [])"
    ),
    "poll": (
        "import os, select; r, w = os.pipe(); p = select.poll(); p.register(r); "
        "print(r, flush=True); p.poll()"
    ),
    "epoll": (
        "import os, select; r, w = os.pipe(); e = select.epoll(); e.register(r); "
        "print(r, flush=True); e.poll()"
    ),
    # More fds than MAX_POLL_READ lets be read: the set is "unseen", not guessed.
    "huge_poll": (
        "import os, select, resource; hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]; "
        "resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard)); "
        "p = select.poll(); fds = [os.pipe()[0] for _ in range({n})]; "
        "[p.register(fd) for fd in fds]; print(fds[0], flush=True); p.poll()"
    ),
}


@contextmanager
def waiting(kind: str) -> Iterator[tuple[int, int]]:
    """A child sleeping in ``kind``: (its pid, the fd it waits on)."""
    code = PROGRAMS[kind].format(n=procfs.MAX_POLL_READ // 8 + 1)
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        fd = int(proc.stdout.readline())
        yield proc.pid, fd
    finally:
        proc.kill()
        proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


async def _asleep(pid: int) -> procfs.ProcessInfo:
    """The process once it sleeps in a multiplexing call."""
    with trio.fail_after(TIMEOUT):
        while True:
            info = procfs.process_info(pid)
            assert info is not None
            if procfs.polls(info):
                return info
            await trio.sleep(0.01)


@pytest.mark.parametrize("kind", ["select", "poll", "epoll"])
async def test_the_fds_a_process_waits_on_are_seen(kind: str) -> None:
    with waiting(kind) as (pid, fd):
        info = await _asleep(pid)
        assert procfs.polled_fds(pid) == {fd}
        # A pipe is not its terminal (it has none here): not a poll of the terminal.
        assert procfs.polls_tty(info) is False


async def test_a_poll_set_beyond_the_bound_is_unseen() -> None:
    with waiting("huge_poll") as (pid, _):
        await _asleep(pid)
        assert procfs.polled_fds(pid) is None


def test_a_process_not_in_a_multiplexing_call_has_no_poll_set() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert procfs.polled_fds(proc.pid) is None
    finally:
        proc.kill()
        proc.wait()
