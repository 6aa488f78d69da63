"""The error a caller's ``async with`` block raised, given back as it was raised.

Why: a context manager that runs tasks for the length of its block (``open_host``,
``ahp.client.connect``) yields from inside a Trio nursery, and a nursery raises what
went wrong as an :class:`ExceptionGroup` (Trio's strict mode). An error raised by
the caller's own block would then leave the ``async with`` wrapped: a plain
``except ValueError:`` or ``except KeyboardInterrupt:`` around the block missed it,
and Ctrl-C came out as ``BaseExceptionGroup[KeyboardInterrupt]``. When the group
holds nothing but the block's own error and cancellations (the tasks were cancelled
because of it, or by a cancel scope around the block, and said nothing else), that
error is raised bare, with its traceback, cause and context
as they were; when a task failed too, the whole group propagates, as Trio raises it.

Usage::

    with BlockError.unwrapped() as block:
        async with trio.open_nursery() as nursery:
            ...
            with block.watching():
                yield value

No I/O, no tasks.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import trio

__all__ = ["BlockError", "leaves"]


def leaves(exc: BaseException) -> list[BaseException]:
    """The exceptions inside (nested) exception groups, or ``[exc]``."""
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in leaves(inner)]
    return [exc]


def _only(group: BaseExceptionGroup, error: BaseException) -> bool:
    """Whether ``group`` is ``error`` and, at most, the cancellations of the tasks
    it ended (or of an outer cancel scope that ended them all)."""
    found = False
    for leaf in leaves(group):
        if leaf is error:
            found = True
        elif not isinstance(leaf, trio.Cancelled):
            return False
    return found


class BlockError:
    """What the caller's block raised (see the module docstring)."""

    def __init__(self) -> None:
        self.error: BaseException | None = None

    @classmethod
    @contextmanager
    def unwrapped(cls) -> Iterator[BlockError]:
        """Around the nursery: a group holding only the block's error becomes that error."""
        block = cls()
        try:
            yield block
        except BaseExceptionGroup as group:
            error = block.error
            if error is None or not _only(group, error):
                raise
            context, suppress = error.__context__, error.__suppress_context__
            try:
                raise error
            finally:
                # Raising inside this handler made the group the error's context.
                error.__context__, error.__suppress_context__ = context, suppress
                del error, group

    @contextmanager
    def watching(self) -> Iterator[None]:
        """Around the ``yield``: remember what the caller's block raised."""
        try:
            yield
        except BaseException as exc:
            self.error = exc
            raise
