"""The command line: ``python -m ahp <subcommand>``.

Why a thin module: every subcommand lives next to the layer it drives; this file
only parses arguments and hands over, so ``--help`` stays fast and never imports
the server or the engine.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from ahp import __version__


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m ahp",
        description="Host terminals for AI agents over the Agent Host Protocol (AHP).",
    )
    parser.add_argument("--version", action="version", version=f"ahp-terminals {__version__}")
    parser.add_subparsers(dest="command", metavar="COMMAND")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    return 0
