"""The project's targets, evaluated on one run's results: reported, never asserted.

Why a table of targets: the figures alone do not say whether the project does
what it promised (for the engine, the server and the benchmark); each target is a
ratio or a bound computed from figures of the same run, and the report marks
it met or missed. CI does not fail on them: shared machines are too noisy.

Issue 23's goals (measured with the independent C client) also carry what the floors
scored on the same figure in the same run (:mod:`ahp.bench.floors`: bare Trio servers
in terminado's shape and in the card's, with none of the project's work, the card's
speaking the protocol's least, ``floor-ahp``, and that doing the terminal contract's
work with the engine's pure cores, ``floor-state``). A goal that the card's shape
misses even bare is bounded by that shape on this machine; one that ``floor-ahp``
misses, by the shape and the protocol; one that ``floor-state`` misses, by the shape
and the contract's work; one all meet is left to the engine's machinery. The
many-terminals goal also carries the machine's budget at its rate
(:func:`many_terminals_room`): what the rest of the run leaves a server of the two
cores, as CPU-seconds per 100 MB, beside what each server measured costs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

import attrs

from ahp.bench.floors import SHAPES

__all__ = ["FLOORS", "Target", "evaluate", "many_terminals_room"]

#: The floors' peer names, in the order reported.
FLOORS: Final = tuple(SHAPES)


@attrs.frozen
class Target:
    key: str
    description: str
    op: str  # ">=" or "<="
    limit: float
    value: float | None
    unit: str = "x"
    why_missing: str | None = None
    #: The same figure for each floor (name, value; None: not measured).
    floors: tuple[tuple[str, float | None], ...] = ()
    #: What bounds the goal on this machine, measured in the same run (None: not worked
    #: out for this goal, or not measurable in this run).
    bound: str | None = None

    def meets(self, value: float) -> bool:
        return value >= self.limit if self.op == ">=" else value <= self.limit

    @property
    def met(self) -> bool | None:
        return None if self.value is None else self.meets(self.value)

    def to_json(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "description": self.description,
            "op": self.op,
            "limit": self.limit,
            "value": self.value,
            "unit": self.unit,
            "met": self.met,
            **({"why_missing": self.why_missing} if self.why_missing else {}),
            **({"bound": self.bound} if self.bound else {}),
            **(
                {
                    "floors": {
                        name: {"value": value, "met": None if value is None else self.meets(value)}
                        for name, value in self.floors
                    }
                }
                if self.floors
                else {}
            ),
        }


def _get(results: dict[str, Any], *path: str) -> Any:
    node: Any = results
    for key in path:
        if not isinstance(node, dict) or key not in node:
            return None
        node = node[key]
    return node


def _median(results: dict[str, Any], *path: str) -> float | None:
    node = _get(results, *path)
    return float(node["median"]) if isinstance(node, dict) and "median" in node else None


def _div(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None or b == 0 else a / b


def _sub(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a - b


@attrs.frozen
class _Side:
    """One server's figures behind issue 23's goals, all with the independent C client
    (None: not measured): one terminal's MB/s and server CPU-s per 100 MB, the many
    terminals' aggregate MB/s, the echo median back to back and after the pause (ms)."""

    mb_s: float | None
    cpu: float | None
    many: float | None
    echo: float | None
    idle: float | None

    @classmethod
    def of(cls, results: dict[str, Any], name: str) -> _Side:
        """``ours`` (the sidecar) or a peer's name."""
        c: tuple[str, ...]
        echo: tuple[str, ...]
        idle: tuple[str, ...]
        if name == "ours":
            c, many, echo = ("end_to_end", "c_client"), ("many", "ours"), ("echo", "sidecar_c")
            idle = ("echo", "sidecar_c_idle")
        else:
            c, many = ("peers", name, "c_client"), ("many", name)
            echo, idle = ("peers", name, "echo_c"), ("peers", name, "echo_c_idle")
        return cls(
            _median(results, *c, "throughput"),
            _median(results, *c, "server_cpu_s_per_100mb"),
            _median(results, *many, "aggregate_throughput"),
            _median(results, *echo, "median_ms"),
            _median(results, *idle, "median_ms"),
        )


def many_terminals_room(results: dict[str, Any], goal: float) -> str | None:
    """The machine's budget at the many-terminals goal (``goal`` times ttyd's aggregate),
    from the run's own figures; None when a figure is missing.

    Every server's many-terminals run measures the whole machine's busy cores and the
    server's own: the rest (the programs writing into their ptys — the kernel's tty work on
    the writer's side —, the clients reading their sockets, the kernel's network work) costs
    ``(busy - server) / rate`` CPU-seconds per MB. At the goal's rate the least of those
    (the cheapest run) leaves ``cores - rest * rate`` cores, so a server reaches the goal
    only if it costs at most ``that / rate`` CPU-seconds per MB; each server measured is
    named with its cost and whether it fits."""
    cores = _get(results, "machine", "cores_usable") or _get(results, "machine", "cores")
    ttyd = _median(results, "many", "ttyd", "aggregate_throughput")
    if not isinstance(cores, int | float) or ttyd is None:
        return None
    rest: list[float] = []
    costs: list[tuple[float, str]] = []
    for name in _get(results, "many") or {}:
        rate = _median(results, "many", name, "aggregate_throughput")
        busy = _median(results, "many", name, "machine_busy_cores")
        server = _median(results, "many", name, "server_cpu_cores")
        if not rate or busy is None or server is None:
            continue
        rest.append((busy - server) / rate)
        costs.append((server / rate, name))
    if not rest:
        return None
    rate = goal * ttyd
    room = max(cores - min(rest) * rate, 0.0) / rate
    named = ", ".join(
        f"{name} {100 * cost:.2f} ({'fits' if cost <= room else 'over'})"
        for cost, name in sorted(costs)
    )
    return (
        f"machine budget: at the goal's {rate:.1f} MB/s the rest of the run (the programs' "
        f"pty writes, the clients, the kernel) takes at least {100 * min(rest):.2f} CPU-s "
        f"per 100 MB (the least of {len(rest)} runs) = {min(rest) * rate:.2f} of {cores:g} "
        f"cores: a server may cost {100 * room:.2f} CPU-s per 100 MB at most; measured: {named}"
    )


def evaluate(results: dict[str, Any]) -> list[Target]:
    """Every target of the project, with its value from ``results`` (None: not measured)."""
    m: Callable[..., float | None] = lambda *p: _median(results, *p)  # noqa: E731
    ceiling = m("ceiling", "throughput")
    e2e = m("end_to_end", "alone", "throughput")
    terminado = m("peers", "terminado", "alone", "throughput")
    peers_missing = _get(results, "peers", "skipped") or _get(
        results, "peers", "terminado", "skipped"
    )
    ttyd_missing = _get(results, "peers", "skipped") or _get(results, "peers", "ttyd", "skipped")
    c_skipped = _get(results, "end_to_end", "c_client", "skipped")
    c_ttyd_missing = c_skipped or ttyd_missing
    many_ttyd_missing = _get(results, "many", "skipped") or _get(results, "many", "ttyd", "skipped")
    bare_med = m("echo", "bare_pty", "median_ms")
    bare_p99 = m("echo", "bare_pty", "p99_ms")
    ours_med = m("echo", "sidecar", "median_ms")
    ours_p99 = m("echo", "sidecar", "p99_ms")
    their_med = m("peers", "terminado", "echo", "median_ms")
    their_p99 = m("peers", "terminado", "echo", "p99_ms")
    idle_med = m("echo", "sidecar_idle", "median_ms")
    c_ours_p99 = m("echo", "sidecar_c", "p99_ms")
    c_their_p99 = m("peers", "terminado", "echo_c", "p99_ms")
    c_missing = c_skipped or peers_missing
    # The C client's figures of each server (issue 23's goals are measured with it).
    ours, c_terminado, c_ttyd = (_Side.of(results, n) for n in ("ours", "terminado", "ttyd"))
    floors = [(name, _Side.of(results, name)) for name in FLOORS]

    def bounded(  # noqa: PLR0917 (Target's own fields, in Target's order)
        key: str,
        description: str,
        op: str,
        limit: float,
        figure: Callable[[_Side], float | None],
        unit: str = "x",
        why_missing: str | None = None,
    ) -> Target:
        """An issue-23 target: ``figure`` of ours, and of each floor beside it."""
        return Target(
            key,
            description,
            op,
            limit,
            figure(ours),
            unit,
            why_missing,
            tuple((name, figure(side)) for name, side in floors),
        )

    return [
        Target(
            "engine_vs_ceiling",
            "in-process engine (1 subscriber) / bare reader",
            ">=",
            0.9,
            _div(m("engine", "one", "throughput"), ceiling),
        ),
        Target(
            "ten_vs_one",
            "engine, 10 subscribers / 1 subscriber",
            ">=",
            0.8,
            _div(m("engine", "ten", "throughput"), m("engine", "one", "throughput")),
        ),
        Target(
            "e2e_vs_ceiling", "end to end (WebSocket) / bare reader", ">=", 0.75, _div(e2e, ceiling)
        ),
        Target(
            "e2e_vs_terminado",
            "end to end / terminado end to end",
            ">=",
            1.3,
            _div(e2e, terminado),
            why_missing=peers_missing,
        ),
        Target(
            "stalled_cost",
            "active client's throughput beside a stalled one / alone (cost <= 10%)",
            ">=",
            0.9,
            m("end_to_end", "stalled_cost_ratio"),
        ),
        Target(
            "stalled_growth",
            "server RSS growth while a client stalls beside the cat",
            "<=",
            32.0,
            m("end_to_end", "stalled_growth_mb"),
            unit="MB",
        ),
        Target(
            "echo_median",
            "echo latency median - bare pty median",
            "<=",
            0.5,
            _sub(ours_med, bare_med),
            unit="ms",
        ),
        Target(
            "echo_p99",
            "echo latency p99 - bare pty p99",
            "<=",
            2.0,
            _sub(ours_p99, bare_p99),
            unit="ms",
        ),
        Target(
            "echo_vs_terminado",
            "echo latency median / terminado's median",
            "<=",
            1.0,
            _div(ours_med, their_med),
            why_missing=peers_missing,
        ),
        Target(
            "echo_vs_terminado_aim",
            "echo latency median / terminado's median (the further aim)",
            "<=",
            0.7,
            _div(ours_med, their_med),
            why_missing=peers_missing,
        ),
        Target(
            "echo_p99_vs_terminado",
            "echo latency p99 / terminado's p99",
            "<=",
            1.0,
            _div(ours_p99, their_p99),
            why_missing=peers_missing,
        ),
        Target(
            "echo_idle_vs_back_to_back",
            "echo median after 150 ms idle / back-to-back echo median",
            "<=",
            1.5,
            _div(idle_med, ours_med),
        ),
        bounded(
            "e2e_vs_ceiling_c",
            "end to end, independent C client / bare reader",
            ">=",
            0.75,
            lambda s: _div(s.mb_s, ceiling),
            why_missing=_get(results, "end_to_end", "c_client", "skipped"),
        ),
        bounded(
            "server_cpu_per_100mb_c",
            "sidecar CPU per 100 MB, independent C client",
            "<=",
            0.9,
            lambda s: s.cpu,
            unit="s",
            why_missing=_get(results, "end_to_end", "c_client", "skipped"),
        ),
        bounded(
            "e2e_vs_terminado_c",
            "end to end / terminado's, both with the independent C client",
            ">=",
            1.3,
            lambda s: _div(s.mb_s, c_terminado.mb_s),
            why_missing=c_missing,
        ),
        bounded(
            "echo_vs_terminado_c",
            "echo median / terminado's, both with the independent C client",
            "<=",
            1.0,
            lambda s: _div(s.echo, c_terminado.echo),
            why_missing=c_missing,
        ),
        Target(
            "echo_p99_vs_terminado_c",
            "echo p99 / terminado's, both with the independent C client",
            "<=",
            1.0,
            _div(c_ours_p99, c_their_p99),
            why_missing=c_missing,
        ),
        Target(
            "echo_idle_vs_back_to_back_c",
            "echo median after 150 ms idle / back-to-back, independent C client",
            "<=",
            1.5,
            _div(ours.idle, ours.echo),
            why_missing=_get(results, "end_to_end", "c_client", "skipped"),
        ),
        bounded(
            "echo_idle_vs_terminado_c",
            "echo median after 150 ms idle / terminado's, independent C client",
            "<=",
            1.0,
            lambda s: _div(s.idle, c_terminado.idle),
            why_missing=c_missing,
        ),
        # Issue 23's goals against ttyd (the C peer, :mod:`ahp.bench.ttyd`), every one
        # measured with the independent C client, as the table was.
        bounded(
            "e2e_vs_ttyd_c",
            "one terminal, end to end / ttyd's, independent C client",
            ">=",
            1.25,
            lambda s: _div(s.mb_s, c_ttyd.mb_s),
            why_missing=c_ttyd_missing,
        ),
        Target(
            "e2e_vs_ttyd",
            "one terminal, end to end / ttyd's, Python client",
            ">=",
            1.25,
            _div(e2e, m("peers", "ttyd", "alone", "throughput")),
            why_missing=ttyd_missing,
        ),
        attrs.evolve(
            bounded(
                "many_vs_ttyd",
                "many terminals at once, aggregate / ttyd's aggregate",
                ">=",
                1.5,
                lambda s: _div(s.many, c_ttyd.many),
                why_missing=many_ttyd_missing,
            ),
            bound=many_terminals_room(results, 1.5),
        ),
        bounded(
            "server_cpu_vs_ttyd_c",
            "server CPU per 100 MB / ttyd's, independent C client (0.75 s against ttyd's 0.83)",
            "<=",
            0.9,
            lambda s: _div(s.cpu, c_ttyd.cpu),
            why_missing=c_ttyd_missing,
        ),
        bounded(
            "echo_vs_ttyd_c",
            "echo median / ttyd's, independent C client (the moonshot)",
            "<=",
            2.0,
            lambda s: _div(s.echo, c_ttyd.echo),
            why_missing=c_ttyd_missing,
        ),
        bounded(
            "echo_idle_vs_ttyd_c",
            "echo median after 150 ms idle / ttyd's, independent C client (as the moonshot)",
            "<=",
            2.0,
            lambda s: _div(s.idle, c_ttyd.idle),
            why_missing=c_ttyd_missing,
        ),
        Target(
            "many_rss_kept",
            "sidecar RSS kept after the many-terminals run, terminals disposed",
            "<=",
            16.0,
            m("many", "ours", "server_rss_kept_mb"),
            unit="MB",
            why_missing=_get(results, "many", "skipped"),
        ),
        Target(
            "idle_per_terminal",
            "sidecar RSS per idle terminal (its program excluded)",
            "<=",
            256.0,
            m("memory", "per_terminal_kb"),
            unit="KB",
        ),
        Target(
            "integration_ratio",
            "engine with shell integration / without (benchmarks/bench_integration.py)",
            ">=",
            0.9,
            _get(results, "integration", "results", "integrated_ratio"),
            why_missing=_get(results, "integration", "skipped"),
        ),
        Target(
            "append_scaling",
            "reducer: appending 10x the output costs at most 12x the time",
            "<=",
            12.0,
            _get(results, "append", "ratio"),
        ),
        Target(
            "append_commands_scaling",
            "reducer: 10x the commands (short, scrollback kept) cost at most 12x the time",
            "<=",
            12.0,
            _get(results, "append", "commands_ratio"),
        ),
    ]
