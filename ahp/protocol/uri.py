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

from urllib.parse import quote, unquote

__all__ = ["file_uri_to_path", "local_file_uri_to_path", "path_to_file_uri"]


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


def local_file_uri_to_path(uri: str, hostname: str) -> str:
    """:func:`file_uri_to_path` for a URI that must name this machine: no host,
    ``localhost`` or ``hostname`` (``socket.gethostname()``, passed in to keep this
    module free of I/O): a cwd asked for, rather than reported.

    Raises:
        ValueError: another host, or no absolute path.
    """
    if uri.startswith("file://"):
        authority = uri[7:].split("/", 1)[0].lower()
        if authority not in ("", "localhost", hostname.lower()):
            raise ValueError(f"it names another host ({authority!r})")
    return file_uri_to_path(uri)
