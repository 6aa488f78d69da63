"""The package's version, in one place: the wheel's metadata is read from here
(``pyproject.toml``: ``[tool.hatch.version]``), and every module that names the
version (the handshake's ``serverInfo``, the client's ``clientInfo``, ``--version``)
imports it from here rather than from the package's ``__init__`` above them."""

__version__ = "0.1.0"
