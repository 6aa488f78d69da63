"""How a request's failure is shaped into its JSON-RPC error.

Why a module of its own: every request handler of the server (the handshake,
terminals, dispatch, the process extension) refuses with the same exception and
quotes the client's input the same bounded way, and the connection's request
loop turns that exception into the one error answer. Nothing here does I/O.
"""

from __future__ import annotations

import errno
import os
from typing import Any, Final

__all__ = ["EXHAUSTED", "QUOTE_LIMIT", "SERVER_LIMIT", "Fail", "out_of_resources", "short"]

#: JSON-RPC's implementation-defined server error (AHP assigns no code to this): a limit
#: of this server was reached (terminals, file descriptors); the message says which, and
#: the request may succeed later.
SERVER_LIMIT: Final = -32000
#: ``errno`` values meaning the machine or the process ran out of something.
EXHAUSTED: Final = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.EAGAIN})
#: Longest piece of client input quoted back in an error message.
QUOTE_LIMIT: Final = 200


class Fail(Exception):
    """A request answered with a JSON-RPC error (``code``, ``message``, ``data``).

    Raised by a handler; the connection's request loop answers it and goes on (a
    client's mistake never ends the connection)."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data


def short(text: str) -> str:
    """Client input as quoted in an error message: bounded (:data:`QUOTE_LIMIT`), so a
    10 MB URI is not echoed."""
    return text if len(text) <= QUOTE_LIMIT else text[:QUOTE_LIMIT] + "…"


def out_of_resources(exc: BaseException) -> Fail | None:
    """The answer to a start that failed for want of a resource (``exc`` or its cause an
    ``OSError`` of :data:`EXHAUSTED`: file descriptors, processes, memory), or None."""
    cause = exc if isinstance(exc, OSError) else exc.__cause__
    if not (isinstance(cause, OSError) and cause.errno in EXHAUSTED):
        return None
    return Fail(
        SERVER_LIMIT,
        f"the server is out of resources ({os.strerror(cause.errno or 0)}); try again later",
        {"errno": errno.errorcode.get(cause.errno or 0, "")},
    )
