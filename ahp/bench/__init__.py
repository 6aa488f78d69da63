"""``python -m ahp bench``: throughput, latency and memory, as ratios taken in one run.

Why a package of its own: the figures people choose a terminal server by
(MB/s of a big ``cat``, keystroke echo latency, memory per terminal and under a
stalled viewer) are only meaningful beside a baseline measured on the same
machine at the same time — the bare pty and a peer server. Each module here
measures one thing; :mod:`ahp.bench.command` runs them in order and
:mod:`ahp.bench.report` prints and saves the results. Nothing here is imported
by the engine or the server.
"""
