"""Recording, audit and wire logs: what a host did, kept on disk.

- :mod:`ahp.record.asciicast`: the asciicast v3 format (pure encoder and decoder).
- :mod:`ahp.record.recorder`: a subscriber task per terminal writing one ``.cast``
  file (``serve --record DIR``, :func:`record_terminal`, :func:`record_host`).
- :mod:`ahp.record.play`: ``ahp-terminals play FILE``.
- :mod:`ahp.record.audit`: one JSON line per privileged event (``serve --audit-log``).
- :mod:`ahp.record.wirelog`: every JSON-RPC message in VS Code's ``_ahpLog`` JSONL
  shape (``serve --wire-log DIR``).
- :mod:`ahp.record.sink`: the bounded, rotated line writer the two logs share.

Nothing here is on a hot path unless enabled; every queue and file is bounded.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ahp.exports import lazy_exports

if TYPE_CHECKING:
    from ahp.record.recorder import (
        RECORD_MAX_BYTES,
        Recorder,
        RecordOptions,
        record_host,
        record_terminal,
        recording_name,
    )

#: Imported on first use, so that the pure ``ahp.record.asciicast`` loads no Trio.
_EXPORTS = {
    name: "ahp.record.recorder"
    for name in (
        "RECORD_MAX_BYTES",
        "RecordOptions",
        "Recorder",
        "record_host",
        "record_terminal",
        "recording_name",
    )
}


__getattr__ = lazy_exports("ahp.record", _EXPORTS, globals())


__all__ = [
    "RECORD_MAX_BYTES",
    "RecordOptions",
    "Recorder",
    "record_host",
    "record_terminal",
    "recording_name",
]
