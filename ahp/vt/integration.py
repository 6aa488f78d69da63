"""Command tracking: scanner events plus clock readings in, AHP terminal actions out.

Why a separate, clock-free object: the rules that turn shell-integration marks
into ``terminal/command*`` actions (which command line to trust, ids, durations)
are protocol policy, not I/O. Keeping them here, with the wall clock and the
monotonic clock passed in by the caller, makes every rule testable with plain
numbers. The behaviour follows the reference agent host (the AHP wire specification, §8.4):

* the first shell-integration event of any kind (``A B C D E P``, from OSC 633
  or OSC 133) yields ``terminal/commandDetectionAvailable``, once — except for
  a shell we injected (the tracker knows its nonce): there the announcement
  waits for the end of the first prompt (``B``, or a command's ``E``/``C``),
  because the shell reports a finish, its cwd and the prompt start before its
  line editor runs, and
  a command typed then is echoed twice (by the kernel, then by the editor). A
  client may type as soon as detection is announced;
* OSC 133 marks count only while no OSC 633 has been seen, and never when the
  tracker is told ``osc133=False`` (our own 633 integration was injected). A
  shell or prompt theme with its own integration (fish 4, kitty's or iTerm2's
  scripts loaded from an rc file) sends 133 marks around the same command our
  hooks mark with 633; counting both would start every command twice. Ignored
  marks are still removed from the text by the scanner, they just yield nothing;
* ``E`` remembers its command line only when its nonce equals the terminal's
  nonce (never when the tracker has no nonce): program output can print a forged
  ``633;E``, but it cannot know the nonce;
* in a shell we injected (the tracker has a nonce), the same holds for every mark
  that moves the state: ``C``, ``D``, ``E`` and ``P`` (cwd, properties) count only
  when signed with the nonce, and cwd reports come only from our ``P`` (OSC 7 and
  OSC 1337 are ignored there). Before, ``cat`` of a file holding
  ``633;D;0`` and ``633;C`` finished the running command with exit code 0 and
  started a phantom one (a black-box probe, session 19). ``A`` and ``B`` are not
  signed (they live in the prompt string, which a user's rc may export to every
  child); they only announce detection;
* ``C`` starts ``cmd-<n>`` (a per-tracker counter from 1) with the remembered
  line (or ``""``) and consumes that line; a second ``C`` while one runs leaves
  the first one incomplete forever, like the reference;
* ``D`` finishes the running command (if any) with ``durationMs`` measured on
  the monotonic clock; a ``D`` with nothing running yields nothing;
* cwd and title reports become ``terminal/cwdChanged`` / ``terminal/titleChanged``
  unless they repeat the previous report. A cwd whose path holds a control
  character (a directory named with a newline; the URI has it as ``%0A``) counts
  only from our signed ``P``: the scanner lets it through only there, and a
  terminal with no nonce (its marks come from anyone) takes none.

:class:`~ahp.vt.events.Text` is not an action of the tracker's: the engine turns
it into ``terminal/data`` (see :func:`events_to_actions` for the whole fold).
"""

from __future__ import annotations

from collections.abc import Iterable

from ahp.protocol.actions import (
    TerminalAction,
    TerminalCommandDetectionAvailable,
    TerminalCommandExecuted,
    TerminalCommandFinished,
    TerminalCwdChanged,
    TerminalData,
    TerminalTitleChanged,
)
from ahp.vt.events import (
    CommandFinished,
    CommandLine,
    CommandStart,
    CwdReported,
    Event,
    PromptEnd,
    PromptStart,
    Property,
    Text,
    TitleChanged,
)
from ahp.vt.scanner import has_control

__all__ = ["CommandTracker", "events_to_actions"]

#: The marks both OSC 633 and OSC 133 carry (``OscFamily`` tells them apart).
_MARKS = (PromptStart, PromptEnd, CommandStart, CommandFinished)
#: Events that count in a shell we injected only when signed with its nonce.
_SIGNED = (CommandStart, CommandFinished, CommandLine, Property)
#: Marks a shell sends once its line editor reads input (see the module doc); before
#: its first prompt it also reports a cwd, properties and the end of "no command" (D).
_EDITOR_READING = (PromptEnd, CommandLine, CommandStart)


class CommandTracker:
    """Per-terminal state of shell-integration command detection.

    Args:
        nonce: The secret passed to the shell (``VSCODE_NONCE``); ``None`` means
            no command line is ever trusted.
        osc133: Whether OSC 133 marks may start and finish commands at all (until
            the first OSC 633 event, which always turns them off). Pass False when
            OSC 633 hooks were injected into the shell.
    """

    def __init__(self, *, nonce: str | None, osc133: bool = True) -> None:
        self.nonce = nonce
        self._osc133 = osc133
        self._detection_announced = False
        self._command_line: str | None = None
        self._counter = 0
        self._running_id: str | None = None
        self._running_since = 0.0
        self._last_cwd: str | None = None
        self._last_title: str | None = None
        #: Prompt starts seen (marks of the kind trusted here): a drain tells from it
        #: whether a line typed into the shell has been taken up yet
        #: (:attr:`ahp.engine.Terminal.line_pending`).
        self.prompts = 0

    @property
    def detection_available(self) -> bool:
        """Whether shell integration has been seen on this terminal."""
        return self._detection_announced

    @property
    def running_command(self) -> str | None:
        """The id of the command started and not yet finished, if any."""
        return self._running_id

    def handle(self, event: Event, *, wall_ms: int, mono_ms: float) -> list[TerminalAction]:
        """Apply one scanner event.

        Args:
            event: The event, in stream order.
            wall_ms: Wall-clock time in ms since the epoch (``commandExecuted.timestamp``).
            mono_ms: Monotonic time in ms (durations only; any origin).

        Returns:
            The actions to dispatch, in order (often none). ``Text`` yields none.
        """
        match event:
            case Text():
                return []
            case TitleChanged(title=title):
                if title == self._last_title:
                    return []
                self._last_title = title
                return [TerminalTitleChanged(title=title)]
            case CwdReported(uri=uri, shell_integration=via_633):
                if self.nonce and (not via_633 or event.nonce != self.nonce):
                    return []  # our shell reports its cwd itself, signed
                if not self.nonce and via_633 and has_control(uri):
                    return []  # a newline in a cwd is believed only from our own shell
                actions: list[TerminalAction] = []
                if via_633:
                    self._osc133 = False
                    actions = self._announce(event)
                if uri != self._last_cwd:
                    self._last_cwd = uri
                    actions.append(TerminalCwdChanged(cwd=uri))
                return actions
        if isinstance(event, _MARKS) and event.osc == 133:
            if not self._osc133:
                return []  # the same command is (or will be) reported with OSC 633
        elif self.nonce and isinstance(event, _SIGNED) and event.nonce != self.nonce:
            return []  # printed by a program, not by our shell: it moves nothing
        else:
            self._osc133 = False  # everything else here came from an OSC 633 sequence
        actions = self._announce(event)
        match event:
            case CommandLine(command_line=line, nonce=nonce):
                if self.nonce and nonce == self.nonce:  # (never trusted without a nonce)
                    self._command_line = line
            case CommandStart():
                self._counter += 1
                self._running_id = f"cmd-{self._counter}"
                self._running_since = mono_ms
                actions.append(
                    TerminalCommandExecuted(
                        commandId=self._running_id,
                        commandLine=self._command_line or "",
                        timestamp=wall_ms,
                    )
                )
                self._command_line = None
            case PromptStart():
                self.prompts += 1
            case CommandFinished(exit_code=code):
                if self._running_id is not None:
                    duration = max(0, round(mono_ms - self._running_since))
                    actions.append(
                        TerminalCommandFinished(
                            commandId=self._running_id, exitCode=code, durationMs=duration
                        )
                    )
                    self._running_id = None
            case _:
                pass  # PromptEnd, Property: detection only
        return actions

    def _announce(self, event: Event) -> list[TerminalAction]:
        if self._detection_announced:
            return []
        if self.nonce is not None and not isinstance(event, _EDITOR_READING):
            return []  # our own shell: wait for the end of its first prompt
        self._detection_announced = True
        return [TerminalCommandDetectionAvailable()]


def events_to_actions(
    tracker: CommandTracker, events: Iterable[Event], *, wall_ms: int, mono_ms: float
) -> list[TerminalAction]:
    """Fold a batch of scanner events into actions, text included.

    Text becomes ``terminal/data``; consecutive text (also across events that
    yield no action) is merged into one ``terminal/data``, and text is always
    placed before the actions of the events that follow it, so output printed
    before ``D`` lands in the command that ``D`` finishes.

    Args:
        tracker: The terminal's tracker (mutated).
        events: Events from :meth:`ahp.vt.scanner.Scanner.feed` / ``close``.
        wall_ms: Wall-clock ms for every event of the batch.
        mono_ms: Monotonic ms for every event of the batch.

    Returns:
        The actions, in order.
    """
    actions: list[TerminalAction] = []
    text: list[str] = []
    for event in events:
        if isinstance(event, Text):
            if event.data:
                text.append(event.data)
            continue
        produced = tracker.handle(event, wall_ms=wall_ms, mono_ms=mono_ms)
        if produced:
            if text:
                actions.append(TerminalData(data="".join(text)))
                text.clear()
            actions.extend(produced)
    if text:
        actions.append(TerminalData(data="".join(text)))
    return actions
