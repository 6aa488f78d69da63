"""Developer sessions: ``nox -s tests``, ``lint``, ``typecheck``, ``bench``, ``stress``."""

import nox

nox.options.default_venv_backend = "venv"
nox.options.reuse_existing_virtualenvs = True
nox.options.sessions = ["tests", "lint", "typecheck"]

#: How the tests session spreads the suite (see ``tests``).
XDIST = ("-n", "3", "--dist", "loadfile")


@nox.session
def tests(session: nox.Session) -> None:
    """The whole test suite, warnings are errors (see pyproject).

    Three pytest-xdist workers, each taking whole files (``--dist loadfile``: a module's
    shared fixtures -- a Chromium, a compiled client -- are made once): most tests wait
    on real shells, servers and their graces, so even on a 2-core machine a third
    worker pays (there: 2149 tests in 299 s with three, 434 s with two, beside the
    same other work; 372 s with three beside two busy loops, all passing).
    ``-- -n 0`` runs it in one process.
    """
    session.install("-e", ".[test]")
    session.run("pytest", "--ignore=tests/stress", *XDIST, *session.posargs)


@nox.session
def lint(session: nox.Session) -> None:
    session.install("ruff")
    session.run("ruff", "check", "ahp", "tests", "benchmarks", "noxfile.py")
    session.run("ruff", "format", "--check", "ahp", "tests", "benchmarks", "noxfile.py")


@nox.session
def typecheck(session: nox.Session) -> None:
    session.install("-e", ".[test]", "mypy")
    session.run("mypy", "ahp")
    session.run("mypy", "tests")


@nox.session
def bench(session: nox.Session) -> None:
    """Throughput, latency and memory figures (see benchmarks/README.md).

    matplotlib (the chart) and terminado (the peer of ``--peers``) come from the
    ``[bench]`` extra: the package does not need them, so this session always passes
    ``--peers``. ttyd, the C peer, is not a Python package: it is measured when
    ``$AHP_BENCH_TTYD`` names it or ``ttyd`` is on PATH, else reported "not measured"
    (benchmarks/README.md, "Issue 23: ttyd as a peer", says how it was built here).
    More options go after ``--`` (``nox -s bench -- --size-mb 10 --runs 2``).
    """
    session.install("-e", ".[bench]")
    session.run("python", "-m", "ahp", "bench", "--peers", *session.posargs)


@nox.session
def stress(session: nox.Session) -> None:
    """Long load and fault runs with figures (``-- --flood-seconds 60 --cycles 1000``)."""
    session.install("-e", ".[test]")
    session.run("pytest", "tests/stress", "--stress-run", "-s", *session.posargs)
