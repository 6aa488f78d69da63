"""Who gets through the upgrade: the token, ``Origin`` and ``Host`` checks.

Why a module of its own: these are the server's doors (``docs/threat-model.md``),
small rules that decide before any protocol work whether a peer may talk to the
host at all; they read the request and the :class:`~ahp.server.config.ServerConfig`
and nothing else (no I/O), so they can be read, and tested, apart from the
transport that calls them (:mod:`ahp.server.websocket` for an upgrade,
:mod:`ahp.server.plain` for a request without one).

A token is compared in constant time (:func:`hmac.compare_digest`, with both the
full and the read-only token whichever was offered) and never logged.
"""

from __future__ import annotations

import hmac
import re
from collections.abc import Sequence
from typing import Final
from urllib.parse import parse_qs, urlsplit

from ahp.server.config import ServerConfig
from ahp.server.upgrade import UpgradeRequest
from ahp.server.web import BEARER_PROTOCOL_PREFIX

__all__ = [
    "AUDIT_REASON",
    "LOOPBACK_NAMES",
    "admit_upgrade",
    "answer_protocol",
    "check_host",
    "check_upgrade",
    "offered_token",
]

#: An HTTP token (RFC 9110, ``tchar``): what a subprotocol's name must be.
_TOKEN: Final = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
#: Longest refusal reason written to the audit log (characters).
AUDIT_REASON: Final = 200
LOOPBACK_NAMES: Final = frozenset({"localhost", "127.0.0.1", "::1", "[::1]"})


def check_host(host: str | None, config: ServerConfig) -> str | None:
    """Why ``host`` (the request's ``Host``) is refused (DNS rebinding), or None."""
    if not config.allowed_hosts:
        return None
    if host is None:
        return "missing Host header"
    name, colon, port = host.rpartition(":") if not host.endswith("]") else ("", "", "")
    if not colon:
        name = host
    elif not (port.isascii() and port.isdigit() and int(port) <= 65535):
        return "unexpected Host header"  # (127.0.0.1:abc, :PORT@evil.test: not a port)
    if host.lower() not in config.allowed_hosts and name.lower() not in config.allowed_hosts:
        return "unexpected Host header"
    return None


def check_upgrade(request: UpgradeRequest, config: ServerConfig) -> str | None:
    """Why the upgrade must be refused, or None to accept it."""
    return admit_upgrade(request, config)[0]


def offered_token(request: UpgradeRequest) -> str:
    """The token the upgrade offers: ``Authorization: Bearer``, else a subprotocol offer
    ``ahp-terminals.bearer.<token>`` (what a browser page can send), else the ``tkn``
    query parameter; "" when none."""
    auth = request.header(b"authorization")
    if auth is not None and auth.lower().startswith("bearer "):
        return auth[7:].strip()
    for offer in request.subprotocols:
        if offer.startswith(BEARER_PROTOCOL_PREFIX):
            return offer[len(BEARER_PROTOCOL_PREFIX) :]
    query = parse_qs(urlsplit(request.target).query)
    return (query.get("tkn") or [""])[0]


def admit_upgrade(request: UpgradeRequest, config: ServerConfig) -> tuple[str | None, bool]:
    """(why the upgrade is refused or None, whether it is a read-only connection)."""
    origin = request.header(b"origin")
    if (
        origin is not None
        and origin not in config.allow_origins
        and origin not in config.own_origins
    ):
        return "origin not allowed", False
    refusal = check_host(request.host, config)
    if refusal is not None:
        return refusal, False
    if config.token is None:
        return None, False
    offered = offered_token(request).encode()
    # Both comparisons always run (constant time whichever token was offered).
    full = hmac.compare_digest(offered, config.token.encode())
    read = config.read_token is not None and hmac.compare_digest(
        offered, config.read_token.encode()
    )
    if full:
        return None, False
    if read:
        return None, True
    return "missing or wrong token", False


def answer_protocol(offers: Sequence[str]) -> str | None:
    """The subprotocol answered: the first offer that carries no token (AHP names none;
    clients may offer some and insist on one back) and is an HTTP token (an empty or
    malformed offer, ``,,, ;;``, is never answered)."""
    return next(
        (o for o in offers if not o.startswith(BEARER_PROTOCOL_PREFIX) and _TOKEN.fullmatch(o)),
        None,
    )
