"""Who may change a terminal: one table, for both server modes (pure).

Why one table: the rules for typing, signalling, resizing, retitling, clearing,
claiming and disposing used to live in four places (the terminal core, the
process extension, the session's ``disposeTerminal``, nothing at all for some),
and a non-holder could dispose, resize, retitle or clear the holder's terminal
whatever the server's setting. Here they are one literal, :data:`POLICY`, that
the terminal core (:mod:`ahp.reducers.core`), the process extension's ``signal``
and the session's ``disposeTerminal`` consult through :func:`refusal`, that
``docs/threat-model.md`` quotes (a test checks the copy is this table,
:func:`policy_table`), and that a test exercises cell by cell through a real
server.

Who is asking (:class:`Actor`), decided from the terminal's claim and the
*connection's* identity (the ``clientId`` the server bound to that connection
at ``initialize``, never a field the peer sends later):

* ``holder`` — the client whose client claim holds the terminal;
* ``other`` — any other client, while some client holds the terminal;
* ``unheld`` — any client, while no client holds it (a session claim, an agent's
  terminal; or the empty client claim ``clientId: ""`` a terminal created
  without a claim gets);
* ``in-process`` — the library itself (no origin): the embedding agent and the
  MCP server, which own the host.

The two modes:

* **default** (cooperating clients, the design's decision 3): input and
  signals are open to every authenticated client — a person types into an
  agent's terminal and interrupts its command. What a viewer's UI does on its
  own (fit the pty to its window, clear its view, set a tab title, close the
  tab) must not change a terminal another client holds: resize, title, clear
  and dispose are the holder's, and so is the claim. Nothing here is an access
  control in this mode — any client may type ``stty cols 10`` or ``exit`` —
  the rules keep cooperating clients from undoing each other by accident.
* **holder-only** (``serve --holder-only-input``): only the holder of a client
  claim changes the terminal: it types, signals, resizes, retitles, clears and
  disposes. A terminal nobody holds (a session's, an unclaimed one) takes none
  of that from clients; a client that wants to act takes the claim first
  (allowed while no client holds it).

The library (in-process) may always act: it owns the host.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Final

from ahp.protocol.state import ClientClaim, TerminalClaim

__all__ = ["POLICY", "Actor", "Change", "actor_of", "allowed", "policy_table", "refusal"]


class Change(enum.Enum):
    """What a client asks to do to a terminal."""

    INPUT = "input"  # terminal/input
    SIGNAL = "signal"  # x-ahp-terminals/signal
    RESIZE = "resize"  # terminal/resized
    TITLE = "title"  # terminal/titleChanged
    CLEAR = "clear"  # terminal/cleared
    CLAIM = "claim"  # terminal/claimed
    DISPOSE = "dispose"  # disposeTerminal


class Actor(enum.Enum):
    """Who asks, relative to the terminal's claim (see the module docstring)."""

    HOLDER = "holder"
    OTHER = "other client"
    UNHELD = "session claim or unclaimed"
    IN_PROCESS = "in-process"


_H, _O, _U, _L = Actor.HOLDER, Actor.OTHER, Actor.UNHELD, Actor.IN_PROCESS


def _row(*allowed_to: Actor) -> frozenset[Actor]:
    return frozenset(allowed_to)


#: The one table: mode (``holder_only``) -> change -> the actors allowed. Everything
#: not listed is rejected (to the sender only, with :func:`refusal`'s reason).
POLICY: Final[Mapping[bool, Mapping[Change, frozenset[Actor]]]] = {
    False: {
        Change.INPUT: _row(_H, _O, _U, _L),
        Change.SIGNAL: _row(_H, _O, _U, _L),
        Change.RESIZE: _row(_H, _U, _L),
        Change.TITLE: _row(_H, _U, _L),
        Change.CLEAR: _row(_H, _U, _L),
        Change.CLAIM: _row(_H, _U, _L),
        Change.DISPOSE: _row(_H, _U, _L),
    },
    True: {
        Change.INPUT: _row(_H, _L),
        Change.SIGNAL: _row(_H, _L),
        Change.RESIZE: _row(_H, _L),
        Change.TITLE: _row(_H, _L),
        Change.CLEAR: _row(_H, _L),
        Change.CLAIM: _row(_H, _U, _L),
        Change.DISPOSE: _row(_H, _L),
    },
}


def actor_of(claim: TerminalClaim, client_id: str | None) -> Actor:
    """Who ``client_id`` (None: the library) is for a terminal claimed by ``claim``."""
    if client_id is None:
        return Actor.IN_PROCESS
    if isinstance(claim, ClientClaim) and claim.clientId:
        return Actor.HOLDER if claim.clientId == client_id else Actor.OTHER
    return Actor.UNHELD


def allowed(change: Change, actor: Actor, *, holder_only: bool) -> bool:
    return actor in POLICY[holder_only][change]


def refusal(
    change: Change, claim: TerminalClaim, client_id: str | None, *, holder_only: bool
) -> str | None:
    """Why ``client_id`` may not make ``change`` to a terminal claimed by ``claim``
    (None: it may). The reason names the rule and what to do."""
    actor = actor_of(claim, client_id)
    if allowed(change, actor, holder_only=holder_only):
        return None
    if actor is Actor.OTHER:
        assert isinstance(claim, ClientClaim)
        holder = claim.clientId if len(claim.clientId) <= 64 else claim.clientId[:64] + "…"
        return (
            f"{change.value}: the terminal is claimed by client {holder!r}; only it may "
            "(a client that has gone loses its claims when the server forgets it)"
        )
    # Only holder-only mode refuses an unheld terminal's changes (claim it first).
    return (
        f"{change.value}: this server takes changes only from the client holding the "
        "terminal's claim (serve --holder-only-input); claim it first"
    )


def policy_table() -> str:
    """:data:`POLICY` as the Markdown table ``docs/threat-model.md`` quotes."""
    actors = list(Actor)
    lines = [
        "| change | mode | " + " | ".join(a.value for a in actors) + " |",
        "| --- | --- | " + " | ".join("---" for _ in actors) + " |",
    ]
    for change in Change:
        for holder_only in (False, True):
            mode = "holder-only" if holder_only else "default"
            cells = ["yes" if allowed(change, a, holder_only=holder_only) else "no" for a in actors]
            lines.append(f"| {change.value} | {mode} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
