"""``dispatchAction``: a client's actions, checked and applied or rejected.

Why a module of its own: this is the connection's hot path (every keystroke
comes through it) and the place where the policy is applied to a client's
actions: the origin is always the connection's own ``clientId``; a read-only
connection's actions are all rejected to it; an oversized
``root/configChanged`` is refused; a rejection is followed by the true value
(a heal) so a mirror that applied it optimistically recovers; privileged
actions get their audit line.

Flow control (the flood rule, :meth:`ahp.engine.hub.Hub.wait_readers`): after
dispatching to a channel, the sender's next frame waits while a reader of that
channel is behind on what was sent, for at most
:data:`~ahp.engine.hub.FLOOD_PATIENCE` per reader until it catches up; the wait ends
with the connection's cancellation. A 0.5 client's session claim for the session that already holds
the terminal keeps that claim's ``chat`` (a 0.5 client narrowing a 1.x chat's
claim does not lose the chat for 1.x viewers).
"""

from __future__ import annotations

from typing import Any, Final

import attrs

from ahp.engine import Terminal
from ahp.keystroke import enabled
from ahp.protocol.actions import (
    ActionOrigin,
    RootConfigChanged,
    StateAction,
    TerminalClaimed,
    TerminalInput,
    UnknownAction,
    action_type,
)
from ahp.protocol.chunked import json_size_over
from ahp.protocol.codec import ProtocolError, structure, structure_action, unstructure
from ahp.protocol.commands import DispatchActionParams
from ahp.protocol.dialect import Dialect
from ahp.protocol.state import ROOT_URI, SessionClaim, TerminalClaim
from ahp.record.audit import AuditLog
from ahp.reducers import heal_root
from ahp.reducers.core import heal_terminal, rejected_echo
from ahp.server.connection import Connection
from ahp.server.errors import short

__all__ = ["MAX_CONFIG_BYTES", "READ_ONLY_REFUSAL", "dispatch_action"]

#: Largest ``root/configChanged`` action accepted (encoded JSON bytes): it is broadcast to
#: every root subscriber, so a bigger one is rejected to its sender.
MAX_CONFIG_BYTES: Final = 64 * 1024
#: Configuration keys named at most in one audit line.
_AUDIT_KEYS: Final = 64
#: Why a read-only connection's dispatch or request is refused.
READ_ONLY_REFUSAL: Final = "this connection is read-only (it was admitted with the read-only token)"
#: Whether the reader's input dispatch takes a checkpoint (keystroke trick ``no_checkpoint``).
_DISPATCH_CHECKPOINT: Final = not enabled("no_checkpoint")


async def dispatch_action(conn: Connection, params: Any) -> None:
    assert conn.record is not None
    if conn.read_only:
        _refuse_read_only(conn, params)
        return
    # Keystrokes are the hot, latency-bound case: when the params are exactly what
    # structuring would accept for a terminal/input, build the action directly
    # (the same values the converter would produce; extra keys are ignored by both).
    if (
        type(params) is dict
        and type(channel := params.get("channel")) is str
        and type(client_seq := params.get("clientSeq")) is int
        and type(raw := params.get("action")) is dict
        and raw.get("type") == "terminal/input"
        and type(data := raw.get("data")) is str
        and channel != ROOT_URI
        and channel in conn.host
    ):
        origin = ActionOrigin(clientId=conn.record.client_id, clientSeq=client_seq)
        terminal = conn.host.get(channel)
        if (audit := conn.server.audit) is not None:
            refused = terminal.input_refused(origin.clientId)
            audit.input(channel, origin.clientId, data, refused=refused)
        # (The connection's reader checkpoints when it waits for the next frame.)
        await terminal.dispatch(
            TerminalInput(data=data),
            origin=origin,
            sender=conn.outbox,
            checkpoint=_DISPATCH_CHECKPOINT,
        )
        if conn.host.hub.flooded(channel) is not None:
            await conn.host.hub.wait_readers(channel)  # (the flood rule: the sender pays)
        return
    p = structure(params, DispatchActionParams)
    if not isinstance(p.action.get("type"), str):
        # No discriminant: nothing to echo that a typed decoder (Go, Rust unions) can
        # read, so it is dropped like any malformed notification (logged at debug).
        raise ProtocolError("an action needs a string 'type'")
    origin = ActionOrigin(clientId=conn.record.client_id, clientSeq=p.clientSeq)
    channel = p.channel
    try:
        action: StateAction = structure_action(p.action)
        problem = None
    except ProtocolError as exc:
        action = UnknownAction(raw=p.action)
        problem = f"malformed action: {exc.message}"
    hub = conn.host.hub
    if channel == ROOT_URI:
        if isinstance(action, RootConfigChanged) and json_size_over(p.action, MAX_CONFIG_BYTES):
            # Refused, and echoed without its config: the sender has it, and a
            # rejection need not cost the size of what it refuses.
            action = RootConfigChanged(config={}, replace=action.replace)
            problem = f"root/configChanged larger than {MAX_CONFIG_BYTES} bytes (not echoed)"
        if isinstance(action, RootConfigChanged) and (audit := conn.server.audit):
            audit.event(
                "config",
                by=origin.clientId,
                keys=sorted(str(k) for k in action.config)[:_AUDIT_KEYS],
                replace=action.replace,
                accepted=problem is None,
            )
        if problem is None and isinstance(action, RootConfigChanged):
            # A terminal host has no config: the merge is a no-op, echoed as applied.
            hub.publish(ROOT_URI, action, origin)
        else:
            hub.reject(
                conn.outbox,
                channel,
                action,
                origin,
                problem or f"{action_type(action)!r} cannot be dispatched by a client",
            )
            # Mirrors that apply rejected envelopes too (the upstream TS one) get
            # the true value back, as after a terminal rejection.
            if (heal := heal_root(conn.host.root_state, action)) is not None:
                hub.send_to(conn.outbox, ROOT_URI, heal)
        await _pay_for(conn, ROOT_URI)
        return
    if channel not in conn.host:
        # Unknown (never created, or disposed): rejected to the sender, whose
        # client may be waiting for the echo (the reference sends nothing at all).
        hub.reject(
            conn.outbox,
            channel,
            rejected_echo(action),
            origin,
            f"no terminal {short(channel)!r} on this server (never created, or disposed)",
        )
        return
    if problem is not None:
        hub.reject(conn.outbox, channel, action, origin, problem)
        return
    terminal = conn.host.get(channel)
    if (
        conn.dialect is Dialect.V05
        and isinstance(action, TerminalClaimed)
        and isinstance(claim := action.claim, SessionClaim)
        and claim.chat is None
        and isinstance(current := terminal.state.claim, SessionClaim)
        and current.session == claim.session
        and current.chat is not None
    ):
        action = TerminalClaimed(claim=attrs.evolve(claim, chat=current.chat))
    audit = conn.server.audit
    if audit is not None and isinstance(action, TerminalClaimed | TerminalInput):
        await _audited_dispatch(conn, audit, terminal, action, origin)
        return
    await terminal.dispatch(action, origin=origin, sender=conn.outbox)
    await _pay_for(conn, channel)


async def _pay_for(conn: Connection, channel: str) -> None:
    """The flood rule (:meth:`ahp.engine.hub.Hub.wait_readers`): this connection's
    next frame waits while a reader of ``channel`` is behind on what was sent."""
    if conn.host.hub.flooded(channel) is not None:
        await conn.host.hub.wait_readers(channel)


def _refuse_read_only(conn: Connection, params: Any) -> None:
    """Every dispatch of a read-only connection: rejected to it (with the true value
    after it, as for any rejection), never applied."""
    assert conn.record is not None
    p = structure(params, DispatchActionParams)
    if not isinstance(p.action.get("type"), str):
        # No discriminant: nothing to echo that a typed decoder (Go, Rust unions) can
        # read, so it is dropped like any malformed notification (logged at debug).
        raise ProtocolError("an action needs a string 'type'")
    origin = ActionOrigin(clientId=conn.record.client_id, clientSeq=p.clientSeq)
    try:
        action: StateAction = structure_action(p.action)
    except ProtocolError:
        action = UnknownAction(raw=p.action)
    hub = conn.host.hub
    if p.channel == ROOT_URI:
        hub.reject(conn.outbox, ROOT_URI, action, origin, READ_ONLY_REFUSAL)
        if (heal := heal_root(conn.host.root_state, action)) is not None:
            hub.send_to(conn.outbox, ROOT_URI, heal)
    elif p.channel in conn.host:
        terminal = conn.host.get(p.channel)
        hub.reject(conn.outbox, p.channel, rejected_echo(action), origin, READ_ONLY_REFUSAL)
        if (audit := conn.server.audit) is not None:
            # (A watch-only link used to take over or type: what an auditor looks for.)
            if isinstance(action, TerminalInput):
                audit.input(p.channel, origin.clientId, action.data, refused="read-only")
            elif isinstance(action, TerminalClaimed):
                audit.event(
                    "claim",
                    terminal=p.channel,
                    by=origin.clientId,
                    claim=unstructure(action.claim, TerminalClaim),
                    previous=unstructure(terminal.state.claim, TerminalClaim),
                    accepted=False,
                    reason="read-only",
                )
        if (heal := heal_terminal(terminal.state, action)) is not None:
            hub.send_to(conn.outbox, p.channel, heal)


async def _audited_dispatch(
    conn: Connection,
    audit: AuditLog,
    terminal: Terminal,
    action: TerminalClaimed | TerminalInput,
    origin: ActionOrigin,
) -> None:
    """Dispatch a claim or input with its audit line: a claim is waited for, so
    the line says whether the terminal took it."""
    if isinstance(action, TerminalInput):
        refused = terminal.input_refused(origin.clientId)
        audit.input(terminal.uri, origin.clientId, action.data, refused=refused)
        await terminal.dispatch(action, origin=origin, sender=conn.outbox)
        return
    previous = terminal.state.claim
    await terminal.dispatch(action, origin=origin, sender=conn.outbox, wait=True)
    audit.event(
        "claim",
        terminal=terminal.uri,
        by=origin.clientId,
        claim=unstructure(action.claim, TerminalClaim),
        previous=unstructure(previous, TerminalClaim),
        accepted=terminal.state.claim == action.claim,
    )
