"""``python -m ahp``: the command line (see :mod:`ahp.cli`)."""

from ahp.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
