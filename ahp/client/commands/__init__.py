"""The client's subcommands for people: ``attach``, ``ls`` and ``run``.

Each module follows the :mod:`ahp.cli` contract (``add_parser(sub, help)`` and
``run(args) -> int``); :mod:`ahp.client.commands.common` holds what they share:
URL and token handling, a connect timeout, and the rule that every failure a
person can cause ends as one line on stderr and a non-zero exit status.
"""
