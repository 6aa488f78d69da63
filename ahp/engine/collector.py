"""Keeping the cyclic garbage collector's full passes short in a long-running server.

Why: CPython's collector scans every tracked object of the oldest generation in a
full pass, and it runs that pass in whatever task allocates at the moment, on the
event loop: no client is served meanwhile. Most of those objects are the program
itself — modules, classes, functions, the tables of the libraries imported at
start-up (about 37,000 objects for ``serve``) — and never die. ``gc.freeze()``
moves everything alive at the time to a permanent generation that no pass scans,
so a full pass costs what the server created since (connections, terminals,
their state) and nothing for the program. Measured here on ``serve``'s imports:
a full pass 18-30 ms before, 0 ms after (under load; ``benchmarks/README.md``,
session 6). What is frozen is never collected: call it once, after start-up and
before serving, when what is alive is the program.

Process-wide; the server calls :func:`freeze_startup_objects` once, a library user
may too.
"""

from __future__ import annotations

import gc

__all__ = ["freeze_startup_objects"]


def freeze_startup_objects() -> int:
    """Collect once, then move every object alive to the permanent generation;
    return how many are frozen. Blocking (one full pass), idempotent."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()
