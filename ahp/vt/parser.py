"""The parse stage's core: a terminal's output bytes in, AHP actions out.

Why one object: the engine's parse task should only move data — take the
batches the pty-read task queued, hand them here with the time, pass the
actions on. Everything between (incremental UTF-8 decoding, escape scanning
across chunk boundaries, stripping shell-integration sequences, command
tracking, titles and cwd reports) is state of this object, sans I/O, in the
way h11 splits a protocol from its transport: :meth:`OutputParser.feed` and
:meth:`OutputParser.close` are plain function calls, the clocks are arguments,
and the output for a given byte stream does not depend on how it was split.

A pty terminal gets the full scanner (:class:`~ahp.vt.scanner.Scanner` plus a
:class:`~ahp.vt.integration.CommandTracker`); a pipes terminal (``isPty:
false``) only decodes UTF-8: nothing there speaks escape sequences to us.

Buffering: at most the scanner's bound on a pending (unterminated) escape
sequence, plus an incomplete UTF-8 character. Ownership: one parser per
terminal, driven by that terminal's parse task only.
"""

from __future__ import annotations

import codecs
from collections.abc import Sequence

from ahp.protocol.actions import StateAction, TerminalData, TerminalTitleChanged
from ahp.vt.integration import CommandTracker, events_to_actions
from ahp.vt.scanner import Scanner

__all__ = ["OutputParser", "compact"]


def compact(actions: Sequence[StateAction], *, join: bool = False) -> Sequence[StateAction]:
    """``actions`` with every title change but the last left out, and the runs of
    ``terminal/data`` this leaves side by side joined: the same final state, in far
    fewer actions (issue 25: a shell retitling its terminal in a loop made 2000
    actions of every 14 KB read, each applied and published, and stalled every other
    client for hundreds of milliseconds). O(len(actions)); the list is returned as
    it is when it holds at most one title change, unless ``join`` (the actions of
    several feeds, whose data runs are joined whatever the titles)."""
    titles = 0
    last = -1
    for index, action in enumerate(actions):
        if action.__class__ is TerminalTitleChanged:
            titles += 1
            last = index
    if titles <= 1 and (not join or len(actions) <= 1):
        return actions
    out: list[StateAction] = []
    run: list[str] = []
    for index, action in enumerate(actions):
        cls = action.__class__
        if cls is TerminalTitleChanged and index != last:
            continue
        if cls is TerminalData:
            run.append(action.data)  # type: ignore[union-attr]
            continue
        if run:
            out.append(TerminalData(data="".join(run)))
            run = []
        out.append(action)
    if run:
        out.append(TerminalData(data="".join(run)))
    return out


class OutputParser:
    """Bytes in, actions out; see the module docstring.

    Args:
        use_pty: whether the output comes from a pty (escape sequences and shell
            integration are scanned) or from pipes (UTF-8 only).
        nonce: the terminal's shell-integration nonce when our hooks were injected
            (command lines are then trusted only with it); ``None`` otherwise.
        last_titles: of a run of title changes within one :meth:`feed`, report only
            the last (the scanner's ``last_titles``): the same text and the same final
            title for far less work when a program retitles its terminal on every
            line; the actions then depend on how the output was split, as
            :func:`compact`'s do. The engine's parse task sets it.
        hostname: this machine's name, for OSC 7 reports (the scanner's ``hostname``).
    """

    def __init__(
        self, *, use_pty: bool, nonce: str | None, last_titles: bool = False, hostname: str = ""
    ) -> None:
        self._decoder = None if use_pty else codecs.getincrementaldecoder("utf-8")("replace")
        self._scanner = Scanner(last_titles=last_titles, hostname=hostname)
        # Our own OSC 633 hooks are authoritative: a shell's OSC 133 (fish 4) must not
        # report every command a second time.
        self._tracker = CommandTracker(nonce=nonce, osc133=nonce is None)
        self.closed = False

    @property
    def prompts(self) -> int:
        """Prompt starts seen so far (shell-integration marks trusted here)."""
        return self._tracker.prompts

    def feed(self, data: bytes, *, wall_ms: int, mono_ms: float) -> Sequence[StateAction]:
        """The actions that ``data`` (the next bytes of output) completes, in order.

        Args:
            wall_ms: wall-clock milliseconds, stamped on commands started in ``data``.
            mono_ms: monotonic milliseconds, for the durations of commands ending in it.
        """
        decoder = self._decoder
        if decoder is not None:
            text = decoder.decode(data)
            return [TerminalData(data=text)] if text else []
        return events_to_actions(
            self._tracker, self._scanner.feed(data), wall_ms=wall_ms, mono_ms=mono_ms
        )

    def close(self, *, wall_ms: int, mono_ms: float) -> Sequence[StateAction]:
        """End of output: whatever was held back (an incomplete character or sequence)."""
        self.closed = True
        decoder = self._decoder
        if decoder is not None:
            text = decoder.decode(b"", final=True)
            return [TerminalData(data=text)] if text else []
        return events_to_actions(
            self._tracker, self._scanner.close(), wall_ms=wall_ms, mono_ms=mono_ms
        )
