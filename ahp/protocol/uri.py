"""``file:`` URIs <-> absolute POSIX paths.

Why in the protocol layer: AHP carries working directories as URIs
(``TerminalState.cwd``, ``createTerminal.cwd``) while shells report plain paths
(``633;P;Cwd=``) or ``file://host/path`` URIs (OSC 7). The scanner, the engine
and the server all need one canonical spelling of the wire's ``cwd``, so that
"did the cwd change?" is a string comparison; it is part of the wire model.

The canonical form is ``file://`` + the path percent-encoded as VS Code does:
every byte except the unreserved characters (``A-Z a-z 0-9 - . _ ~``) and ``/``
is written ``%XX`` (UTF-8). Paths that are not valid UTF-8 (``os.fsdecode``
yields lone surrogates for such bytes) round-trip byte for byte, thanks to
``surrogateescape`` in both directions. Pure: no filesystem access.
"""

from __future__ import annotations

import ipaddress
from urllib.parse import quote, unquote

__all__ = ["file_uri_to_path", "local_file_uri_to_path", "names_this_machine", "path_to_file_uri"]


def path_to_file_uri(path: str) -> str:
    """Turn an absolute POSIX path into a canonical ``file:///`` URI.

    Args:
        path: An absolute path (starts with ``/``); not normalised (``..`` stays).

    Returns:
        ``file://`` followed by the percent-encoded path, e.g.
        ``/home/a b`` -> ``file:///home/a%20b``.

    Raises:
        ValueError: ``path`` is not absolute.
    """
    if not path.startswith("/"):
        raise ValueError(f"not an absolute path: {path!r}")
    return "file://" + quote(path, safe="/", encoding="utf-8", errors="surrogateescape")


def file_uri_to_path(uri: str) -> str:
    """Turn a ``file:`` URI back into an absolute path.

    Accepts ``file:///p``, ``file://host/p`` (the host is ignored: the shell and
    this host share the machine) and ``file:/p``. Everything after the authority
    is the path: ``?`` and ``#`` are not treated as query or fragment, because
    shells that write OSC 7 by hand do not always encode them.

    Args:
        uri: A ``file:`` URI (scheme case-insensitive).

    Returns:
        The percent-decoded path; invalid UTF-8 escapes become lone surrogates
        (``os.fsencode`` restores the original bytes).

    Raises:
        ValueError: not a ``file:`` URI, or it has no absolute path.
    """
    if uri[:5].lower() != "file:":
        raise ValueError(f"not a file: URI: {uri!r}")
    rest = uri[5:]
    if rest.startswith("//"):
        slash = rest.find("/", 2)
        if slash < 0:
            raise ValueError(f"file: URI without a path: {uri!r}")
        rest = rest[slash:]
    if not rest.startswith("/"):
        raise ValueError(f"file: URI without an absolute path: {uri!r}")
    return unquote(rest, encoding="utf-8", errors="surrogateescape")


def names_this_machine(authority: str, hostname: str) -> bool:
    """Whether a ``file:`` URI's authority (lower-cased) is this machine: empty,
    ``localhost``, ``hostname`` or a loopback address (``127.x.y.z``, ``[::1]``)."""
    if authority in ("", "localhost", hostname.lower()):
        return True
    literal = authority[1:-1] if authority.startswith("[") and authority.endswith("]") else None
    try:
        if literal is not None:
            return ipaddress.IPv6Address(literal).is_loopback
        return ipaddress.IPv4Address(authority).is_loopback
    except ValueError:
        return False


def local_file_uri_to_path(uri: str, hostname: str) -> str:
    """:func:`file_uri_to_path` for a URI that must name this machine: no host,
    ``localhost``, ``hostname`` (``socket.gethostname()``, passed in to keep this
    module free of I/O) or a loopback address (``127.0.0.1``, ``[::1]``): a cwd
    asked for, rather than reported.

    Stricter than :func:`file_uri_to_path`, which reads what shells write: a
    ``?`` or ``#`` (a query or fragment, encoded ``%3F`` / ``%23`` when they are
    part of a name) is refused rather than taken into the path.

    Raises:
        ValueError: another host, a query or fragment, or no absolute path.
    """
    if "?" in uri or "#" in uri:
        raise ValueError("a file: URI for a cwd must have no query or fragment")
    if uri[:7].lower() == "file://":
        authority = uri[7:].split("/", 1)[0].lower()
        if not names_this_machine(authority, hostname):
            raise ValueError(f"it names another host ({authority!r})")
    return file_uri_to_path(uri)
