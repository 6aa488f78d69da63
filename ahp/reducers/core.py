"""The terminal core: the reducer stage's state and rules, sans I/O.

Why: the reducer task of a terminal (:mod:`ahp.engine.reduce`) is the only
writer of its state, but *what* it writes — which client action is accepted,
which is rejected and with which healing value, how scrollback is bounded,
when the root catalogue must be told — is policy that must be testable without
a pty, a clock or Trio. A :class:`TerminalCore` holds the state and applies
those rules; the task drives it and carries out the effects it returns:

* :meth:`TerminalCore.apply` — an action the server itself produced (parsed
  output, the exit) or one already accepted: the state moves (reducer plus
  scrollback), and :attr:`TerminalCore.info_changed` records whether the
  catalogue entry (title, claim, exit) changed;
* :meth:`TerminalCore.decide` — a client or library action: :class:`Accepted`
  (with the input to write and the window size to set, if any) or
  :class:`Rejected` (the reason, and the action that heals a mirror that
  applied the rejected echo anyway). Deciding changes nothing; the task applies
  an accepted action once its effects were carried out.

Who may change the terminal (``terminal/input``, ``resized``, ``titleChanged``,
``cleared``, ``claimed``; signals and dispose are asked of the core by the
server through :meth:`TerminalCore.refusal`) is the one table of
:mod:`ahp.reducers.policy`, in the mode :attr:`TerminalCore.holder_only_input`
selects (a claim is taken when the current one is the sender's own, a session's,
or released: the client claim of nobody, ``clientId: ""``). Beyond it, a claim
must be well formed, input is rejected once the process has exited or while too
much is pending; sizes and titles have bounds. Everything else is not for
clients to dispatch.
"""

from __future__ import annotations

from typing import Final, NamedTuple

from attrs import evolve

from ahp.protocol.actions import (
    ActionOrigin,
    StateAction,
    TerminalClaimed,
    TerminalCleared,
    TerminalCwdChanged,
    TerminalData,
    TerminalExited,
    TerminalInput,
    TerminalResized,
    TerminalTitleChanged,
    action_type,
)
from ahp.protocol.parts import Parts
from ahp.protocol.rope import Rope
from ahp.protocol.state import (
    ClientClaim,
    CommandPart,
    ContentPart,
    TerminalClaim,
    TerminalInfo,
    TerminalState,
    UnclassifiedPart,
)
from ahp.reducers.policy import Change, refusal
from ahp.reducers.scrollback import MAX_PARTS, Scrollback
from ahp.reducers.terminal import reduce_terminal

__all__ = [
    "MAX_CLAIM_ID",
    "MAX_CLIENT_ID",
    "MAX_DIMENSION",
    "MAX_PENDING_INPUT",
    "MAX_TITLE",
    "MAX_URI",
    "Accepted",
    "Rejected",
    "TerminalCore",
    "Verdict",
    "claim_problem",
    "heal_terminal",
    "normal_title",
    "rejected_echo",
    "trim_marker",
]

#: Longest title (characters) a terminal accepts from a client (``terminal/titleChanged``,
#: ``createTerminal.name``), like the shell's OSC 0/2 titles, which the scanner bounds at
#: ``MAX_PENDING_ESCAPE`` (4096) bytes. Longer ones are rejected.
MAX_TITLE: Final = 4096
#: Longest ``clientId`` (characters) a client may introduce itself with: it is quoted in
#: every echo of that client's actions, in a client claim and in the catalogue entry of a
#: terminal it holds (a UUID is 36; a 1 MB id made every keystroke echo a 1 MB frame).
MAX_CLIENT_ID: Final = 256
#: Longest URI (characters) accepted from a client where it is kept or repeated: a
#: terminal's channel, a session claim's ``session`` and ``chat``.
#: Why input to a terminal whose program's stdin is closed is rejected.
STDIN_CLOSED: Final = "this terminal takes no input (its program's standard input is closed)"
MAX_URI: Final = 2048
#: Longest ``turnId`` / ``toolCallId`` of a session claim (characters).
MAX_CLAIM_ID: Final = 256
#: Window size bounds accepted from clients.
MAX_DIMENSION: Final = 4096
#: Input accepted but not yet written to the pty; beyond it input is rejected.
MAX_PENDING_INPUT: Final = 16 * 1024 * 1024


class Accepted(NamedTuple):
    """Apply ``action`` (publish it with its origin) once these effects are done."""

    action: StateAction
    #: Bytes for the pty (``terminal/input``), in order after earlier input.
    write: bytes | None = None
    #: New window size for the pty (``terminal/resized``).
    resize: tuple[int, int] | None = None


class Rejected(NamedTuple):
    """Echo the action to its sender only, with ``reason``; then send ``heal`` to it."""

    reason: str
    heal: StateAction | None = None


Verdict = Accepted | Rejected


#: C0 and C1 control characters and DEL, replaced in titles (see :func:`normal_title`).
_TITLE_CONTROLS: Final = {c: " " for c in (*range(0x20), *range(0x7F, 0xA0))}


#: How far into the first part a trimmed snapshot looks for the end of the line the trim
#: cut (characters); a longer line is shown from the cut.
TRIM_LINE_SEARCH: Final = 64 * 1024


def trim_marker(dropped: int) -> str:
    """The text of the part a trimmed snapshot starts with."""
    return f"[ahp-terminals: {dropped} earlier characters trimmed from the scrollback]\r\n"


def normal_title(title: str) -> str:
    """``title`` with every control character (C0, DEL, C1) replaced by a space, done
    once where a title enters the state (a client's ``terminal/titleChanged``, a shell's
    OSC title): nobody can render them, and each would cost 6 bytes (``\\u0001``) in
    every catalogue sent to every root subscriber."""
    if title.isprintable():  # (the common case: one C-speed scan)
        return title
    return title.translate(_TITLE_CONTROLS)


def claim_problem(claim: TerminalClaim) -> tuple[str, str] | None:
    """``(field, message)`` when a claim's strings pass their bounds (a claim is kept in
    the state and repeated in every catalogue), else None."""
    if isinstance(claim, ClientClaim):
        if len(claim.clientId) > MAX_CLIENT_ID:
            return "clientId", f"a clientId is at most {MAX_CLIENT_ID} characters"
        return None
    for name, value, bound in (
        ("session", claim.session, MAX_URI),
        ("chat", claim.chat, MAX_URI),
        ("turnId", claim.turnId, MAX_CLAIM_ID),
        ("toolCallId", claim.toolCallId, MAX_CLAIM_ID),
    ):
        if value is not None and len(value) > bound:
            return name, f"a session claim's {name} is at most {bound} characters"
    return None


def rejected_echo(action: StateAction) -> StateAction:
    """What a rejected client action is echoed as: the action itself, except
    ``terminal/data``, echoed with empty data — a mirror that applies rejected echoes
    (the upstream ones do) must not show text the terminal never printed."""
    if action.__class__ is TerminalData:
        return TerminalData(data="")
    return action


def _has_surrogates(text: str) -> bool:
    """Whether ``text`` holds lone surrogates (it cannot be encoded as UTF-8)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


class TerminalCore:
    """One terminal's state and rules; see the module docstring.

    Args:
        state: the initial state.
        uri: the terminal's URI (for its catalogue entry).
        scrollback: characters retained (output and command lines).
        use_pty: whether the terminal is a pty (pipes cannot be resized).
        max_parts: parts retained.
    """

    def __init__(
        self,
        state: TerminalState,
        *,
        uri: str,
        scrollback: int,
        use_pty: bool,
        max_parts: int = MAX_PARTS,
        takes_input: bool = True,
    ) -> None:
        self.state = state
        self.uri = uri
        self.use_pty = use_pty
        #: False when the program's stdin is closed (an exec's: ``/dev/null``): input,
        #: going nowhere, is rejected (:data:`STDIN_CLOSED`).
        self.takes_input = takes_input
        self.scrollback = Scrollback(scrollback, max_parts=max_parts, state=state)
        #: Whether the process has exited (``terminal/exited`` was applied).
        self.exited = False
        #: Characters of ``terminal/data`` applied so far (only grows; a clear or the
        #: scrollback bound does not lower it): a consumer that counts what it saw
        #: knows how much of a resync snapshot's tail it missed.
        self.output_chars = 0
        #: Whether clients' input is taken only from the holder of a client claim (the
        #: library's own input, without an origin, always is).
        self.holder_only_input = False
        #: Set when the catalogue entry (title, claim, exit) changed; the driver
        #: clears it once it told the catalogue (at most once per batch).
        self.info_changed = False
        self._info: TerminalInfo | None = None

    # -- applying ------------------------------------------------------------------------------

    def apply(self, action: StateAction) -> StateAction:
        """Apply a server action (or an accepted one); returns the action as applied,
        the one to publish (a title with control characters is normalised first:
        :func:`normal_title`)."""
        if action.__class__ is TerminalInput:
            return action  # the keystroke's path: input changes nothing in the state
        if action.__class__ is TerminalTitleChanged:
            assert isinstance(action, TerminalTitleChanged)
            title = normal_title(action.title)
            if title is not action.title:
                action = TerminalTitleChanged(title=title)
        before = self.state
        state = self.scrollback.account(reduce_terminal(before, action), action)
        self.state = state
        if action.__class__ is TerminalData:  # the hot path: output changes no entry
            self.output_chars += len(action.data)
            return action
        if isinstance(action, TerminalExited):
            self.exited = True
            self.info_changed = True
            self._info = None
        elif (
            state.title != before.title
            or state.claim != before.claim
            or state.exitCode != before.exitCode
        ):
            self.info_changed = True
            self._info = None
        return action

    def snapshot_state(self) -> TerminalState:
        """The state as a snapshot shows it: once scrollback was trimmed, starting at a
        line boundary (a head part cut mid-line loses the rest of that line, looked for
        within :data:`TRIM_LINE_SEARCH` characters) behind a first part that says how
        many characters were dropped (:func:`trim_marker`). The state itself is not
        changed (live subscribers' mirrors trim on their own). O(parts) when trimmed."""
        state = self.state
        scrollback = self.scrollback
        dropped = scrollback.dropped
        content = state.content
        if not dropped or not content:
            return state
        parts: list[ContentPart] = list(content)
        head = parts[0]
        if scrollback.sliced:
            text = head.output if isinstance(head, CommandPart) else head.value
            newline = text.head(TRIM_LINE_SEARCH).find("\n")
            if newline >= 0:
                cut = newline + 1
                dropped += cut
                if isinstance(head, CommandPart):
                    parts[0] = evolve(head, output=head.output.drop_prefix(cut))
                else:
                    parts[0] = evolve(head, value=head.value.drop_prefix(cut))
        parts.insert(0, UnclassifiedPart(value=Rope(trim_marker(dropped))))
        return evolve(state, content=Parts.of(parts))

    def info(self) -> TerminalInfo:
        """The catalogue entry (cached until it changes)."""
        info = self._info
        if info is None:
            s = self.state
            info = TerminalInfo(
                resource=self.uri,
                title=s.title,
                claim=s.claim,
                exitCode=s.exitCode,
                exited=s.exited,
            )
            self._info = info
        return info

    def take_info_changed(self) -> bool:
        """Whether the catalogue entry changed since the last call."""
        changed = self.info_changed
        self.info_changed = False
        return changed

    # -- deciding ------------------------------------------------------------------------------

    def decide(
        self, action: StateAction, origin: ActionOrigin | None, *, pending_input: int = 0
    ) -> Verdict:
        """The verdict on a client (``origin``) or library (``origin=None``) action.

        Args:
            pending_input: bytes accepted earlier but not yet written to the pty.
        """
        reason = self._rejection(action, origin, pending_input)
        if reason is not None:
            return Rejected(reason, self._heal(action))
        match action:
            case TerminalInput(data=text):
                data = text.encode("utf-8", "surrogateescape")
                if not text.isascii() and _has_surrogates(text):
                    # Bytes that are not UTF-8 (``send_input(b"\xff")``) go to the pty as
                    # they are; the echo must be valid Unicode to be sent anywhere.
                    action = TerminalInput(data=data.decode("utf-8", "replace"))
                return Accepted(action, write=data or None)
            case TerminalResized(cols=cols, rows=rows) if not self.exited:
                return Accepted(action, resize=(cols, rows))
            case _:
                return Accepted(action)

    def refusal(self, change: Change, client_id: str | None) -> str | None:
        """Why ``client_id`` (the connection's identity; None: the library) may not make
        ``change`` now, or None: :func:`ahp.reducers.policy.refusal` on the current claim
        in this terminal's mode."""
        return refusal(change, self.state.claim, client_id, holder_only=self.holder_only_input)

    def input_refused(self, client_id: str | None) -> str | None:
        """Why a client's input is refused by the claim rules, or None when it is taken."""
        return self.refusal(Change.INPUT, client_id)

    def _rejection(
        self, action: StateAction, origin: ActionOrigin | None, pending_input: int
    ) -> str | None:
        client_id = origin.clientId if origin is not None else None
        match action:
            case TerminalInput(data=data):
                if self.exited:
                    return "the terminal's process has exited"
                if not self.takes_input:
                    return STDIN_CLOSED
                if origin is not None and (why := self.refusal(Change.INPUT, client_id)):
                    return why
                if pending_input + len(data) > MAX_PENDING_INPUT:
                    return f"input buffer full ({MAX_PENDING_INPUT} bytes pending)"
                return None
            case TerminalResized(cols=cols, rows=rows):
                if why := self.refusal(Change.RESIZE, client_id):
                    return why
                if not self.use_pty:
                    return "not a pty: it cannot be resized"
                if not (1 <= cols <= MAX_DIMENSION and 1 <= rows <= MAX_DIMENSION):
                    return f"cols and rows must be between 1 and {MAX_DIMENSION}"
                return None
            case TerminalClaimed(claim=claim):
                if (problem := claim_problem(claim)) is not None:
                    return problem[1]
                return self.refusal(Change.CLAIM, client_id)
            case TerminalTitleChanged(title=title):
                if why := self.refusal(Change.TITLE, client_id):
                    return why
                if len(title) > MAX_TITLE:
                    return f"a title is at most {MAX_TITLE} characters"
                return None
            case TerminalCleared():
                return self.refusal(Change.CLEAR, client_id)
            case _:
                return f"{action_type(action)!r} cannot be dispatched by a client"

    def _heal(self, action: StateAction) -> StateAction | None:
        """The true value for a mirror that applied a rejected state-setting action."""
        return heal_terminal(self.state, action)


def heal_terminal(state: TerminalState, action: StateAction) -> StateAction | None:
    """The action that restores ``state``'s value for a mirror that applied the rejected
    state-setting ``action`` anyway (claim, size, title, cwd), or None."""
    if isinstance(action, TerminalResized):
        if state.cols is not None and state.rows is not None:
            return TerminalResized(cols=state.cols, rows=state.rows)
        return None
    if isinstance(action, TerminalClaimed):
        return TerminalClaimed(claim=state.claim)
    if isinstance(action, TerminalTitleChanged):
        return TerminalTitleChanged(title=state.title)
    if isinstance(action, TerminalCwdChanged) and state.cwd is not None:
        return TerminalCwdChanged(cwd=state.cwd)
    return None
