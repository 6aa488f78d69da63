"""A token kept in a file (``$AHP_TOKEN_FILE``): read by one rule on both sides.

Why a module of its own: ``serve`` reads its token from the file a mounted secret
names, and the CLI clients read theirs from the same variable (one set-up serves
both); the rule — one line of printable text, bounded, its content never in a
message — belongs to neither layer, so the server and the client import it from
here (the client must not import the server). It reads one file, nothing else,
and only a regular file (a symbolic link to one is followed): it is opened without
blocking and refused otherwise, so a FIFO with no writer, a device or a socket cannot
hang ``serve`` or a client for ever (probe Q).
"""

from __future__ import annotations

import os
import stat
from collections.abc import MutableMapping
from typing import Final

__all__ = ["MAX_TOKEN_FILE", "TokenFileError", "environment_token", "read_token_file"]

#: Largest token file read (``$AHP_TOKEN_FILE``); a token is a line, not a document.
MAX_TOKEN_FILE: Final = 4096


class TokenFileError(Exception):
    """``$AHP_TOKEN_FILE`` names a file that cannot serve as the token (one line,
    without the file's content)."""


def read_token_file(path: str) -> str:
    """The token in ``path``: its content without surrounding whitespace. Raises
    :class:`TokenFileError` when it is unreadable, not a regular file, empty, larger than
    :data:`MAX_TOKEN_FILE` bytes, not UTF-8, or holds whitespace or control
    characters inside (a token travels in a URL query). The content is never
    part of a message."""
    try:
        # Non-blocking: opening a FIFO with no writer would wait for one for ever.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
        try:
            mode = os.fstat(fd).st_mode
            if not stat.S_ISREG(mode):
                raise TokenFileError(
                    f"cannot read AHP_TOKEN_FILE {path!r}: not a regular file ({_kind(mode)})"
                )
            with open(fd, "rb", closefd=False) as f:
                data = f.read(MAX_TOKEN_FILE + 1)
        finally:
            os.close(fd)
    except OSError as exc:
        raise TokenFileError(
            f"cannot read AHP_TOKEN_FILE {path!r}: {exc.strerror or exc}"
        ) from None
    if len(data) > MAX_TOKEN_FILE:
        raise TokenFileError(f"AHP_TOKEN_FILE {path!r} is larger than {MAX_TOKEN_FILE} bytes")
    try:
        token = data.decode("utf-8").strip()
    except UnicodeDecodeError:
        raise TokenFileError(f"AHP_TOKEN_FILE {path!r} is not UTF-8 text") from None
    if not token:
        raise TokenFileError(f"AHP_TOKEN_FILE {path!r} is empty")
    if any(c.isspace() or not c.isprintable() for c in token):
        raise TokenFileError(
            f"AHP_TOKEN_FILE {path!r} must hold one token: no spaces or control characters"
        )
    return token


def _kind(mode: int) -> str:
    """What a file that is not a regular one is, for a message."""
    kinds = [
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ]
    return next((name for test, name in kinds if test(mode)), "not a file")


def environment_token(environ: MutableMapping[str, str], *, take: bool = False) -> str | None:
    """The token in the file ``$AHP_TOKEN_FILE`` names, else ``$AHP_TOKEN``, else None:
    ``serve``'s order, and the clients'. Raises :class:`TokenFileError` when both are set
    or the file cannot serve. ``take``: both variables leave ``environ`` (also when it
    raises), so that the processes it starts do not inherit them."""
    path = environ.pop("AHP_TOKEN_FILE", None) if take else environ.get("AHP_TOKEN_FILE")
    token = (environ.pop("AHP_TOKEN", None) if take else environ.get("AHP_TOKEN")) or None
    if not path:
        return token
    if token is not None:
        raise TokenFileError("AHP_TOKEN and AHP_TOKEN_FILE are both set: set one")
    return read_token_file(path)
