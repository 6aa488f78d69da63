"""Lazy package exports: a package's public names, each imported on first use.

Why: ``import ahp.vt`` (pure), ``python -m ahp --help`` or the pure modules of
``ahp.agent``, ``ahp.client`` and ``ahp.record`` must not load Trio through
their package's ``__init__``; so a package names its exports and the module
that defines each, and :func:`lazy_exports` gives it the module ``__getattr__``
(PEP 562) that imports one when it is first asked for. Nothing is imported
until then; a name once imported is cached in the package's namespace.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, MutableMapping
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(
    package: str, exports: Mapping[str, str], namespace: MutableMapping[str, Any]
) -> Callable[[str], Any]:
    """The ``__getattr__`` of ``package``: ``exports`` maps a public name to the module
    that defines it; ``namespace`` is the package's ``globals()`` (the cache)."""

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    return __getattr__
