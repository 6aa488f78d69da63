"""Peer text shown safely (``ahp.printable``): on a terminal and in the log."""

from __future__ import annotations

import io
import logging

from ahp.printable import OneLineFormatter, printable


def test_printable_escapes_every_control_character() -> None:
    assert printable("plain text, é 世界") == "plain text, é 世界"
    assert printable("a\nb\rc\x1b[31m\x9b2J\x7f\t") == "a\\x0ab\\x0dc\\x1b[31m\\x9b2J\\x7f\\x09"


def test_a_log_record_stays_one_line_and_a_traceback_keeps_its_lines() -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(OneLineFormatter("%(levelname)s %(message)s"))
    log = logging.Logger("t")
    log.addHandler(handler)
    log.warning("client %s left", "x\nERROR forged")
    try:
        int("boom")
    except ValueError:
        log.exception("failed")
    lines = stream.getvalue().splitlines()
    assert lines[0] == "WARNING client x\\x0aERROR forged left"
    assert lines[1] == "ERROR failed"
    assert lines[2] == "Traceback (most recent call last):"
    assert lines[-1].startswith("ValueError: invalid literal")
