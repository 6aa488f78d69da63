"""Smoke test of ``python -m ahp bench``: tiny sizes, every section present in the JSON.

The figures themselves are not checked (shared machines are noisy; the targets
are reported by the command, never asserted); only that every section ran and
produced well-formed results, quickly.
"""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

import pytest

from ahp.bench.cclient import client_missing
from ahp.cli import main

SECTIONS = (
    "machine",
    "config",
    "workload",
    "ceiling",
    "engine",
    "end_to_end",
    "echo",
    "memory",
    "many",
    "append",
    "peers",
    "scanner",
    "integration",
    "render",
    "screen",
    "targets",
    "chart",
)


def _is_figure(node: object) -> bool:
    return (
        isinstance(node, dict)
        and {"median", "min", "max", "runs", "unit"} <= node.keys()
        and node["min"] <= node["median"] <= node["max"]
    )


def test_bench_smoke(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        [
            "bench",
            "--size-mb",
            "2",
            "--runs",
            "1",
            "--echo-count",
            "50",
            "--idle-count",
            "3",
            "--terminals",
            "5",
            "--many",
            "3",
            "--scanner-mb",
            "0.5",
            "--no-chart",
            "--out",
            str(tmp_path),
        ]
    )
    assert code == 0

    files = list(tmp_path.glob("bench-*.json"))
    assert len(files) == 1
    results = json.loads(files[0].read_text())
    for section in SECTIONS:
        assert section in results, section
    for key in ("cores", "python", "kernel"):
        assert results["machine"][key]

    assert results["ceiling"]["complete"]
    assert _is_figure(results["ceiling"]["throughput"])
    for n in ("one", "ten"):
        assert results["engine"][n]["complete"], n
        assert _is_figure(results["engine"][n]["throughput"])
    e2e = results["end_to_end"]
    assert all(e2e["alone"]["complete"])
    for key in ("stalled_cost_ratio", "stalled_growth_mb"):
        assert _is_figure(e2e[key]), key
    for path in ("bare_pty", "engine", "sidecar"):
        assert _is_figure(results["echo"][path]["median_ms"])
        assert results["echo"][path]["round_trips"] == 50
    for path in ("bare_pty_idle", "sidecar_idle"):
        assert results["echo"][path]["round_trips"] == 3
    # The independent C client's rows, or the reason they are missing.
    c_e2e = results["end_to_end"]["c_client"]
    # Where the reader's thread spent the ceiling's run (ahp.bench.threads).
    assert _is_figure(results["ceiling"]["threads"]["main"]["ran"])
    if client_missing() is None:
        assert _is_figure(c_e2e["throughput"])
        assert _is_figure(c_e2e["threads"]["main"]["slept"])
        assert c_e2e["complete"] == [True]
        assert results["echo"]["sidecar_c"]["round_trips"] == 50
        assert _is_figure(results["echo"]["sidecar_c"]["server_cpu_us_per_keystroke"])
        assert results["echo"]["sidecar_c_idle"]["round_trips"] == 3
    else:
        assert c_e2e["skipped"] == client_missing()
    assert _is_figure(results["memory"]["per_terminal_kb"])
    assert _is_figure(results["memory"]["large_output"]["rss_after_mb"])
    assert results["append"]["ratio"] > 0
    assert results["append"]["commands_ratio"] > 0
    assert results["peers"] == {"skipped": "not requested (use --peers)"}
    assert "results" in results["scanner"] or "skipped" in results["scanner"]
    assert results["chart"] == {"skipped": "--no-chart"}
    keys = {t["key"] for t in results["targets"]}
    assert {
        "engine_vs_ceiling",
        "e2e_vs_ceiling",
        "echo_median",
        "echo_idle_vs_back_to_back",
        "append_scaling",
    } <= keys
    assert "append_commands_scaling" in keys

    many = results["many"]
    assert many["ours"]["terminals"] == 3 and many["ours"]["complete"]
    assert _is_figure(many["ours"]["threads"]["main"]["ran"])
    for key in ("aggregate_throughput", "fairness_min_over_max", "server_cpu_cores"):
        assert _is_figure(many["ours"][key]), key
    assert many["terminado"] == {"skipped": "not requested (use --peers)"}

    captured = capsys.readouterr()
    table = captured.out
    # One run per figure: the report says so.
    assert "NOTE: 1 run(s) per figure" in table
    assert "6 3 terminals at once" in table
    # The progress line never counts past its total ("[bench 8/7]" once).
    steps = re.findall(r"^\[bench (\d+)/(\d+) ", captured.err, re.MULTILINE)
    assert steps and all(int(n) <= int(total) for n, total in steps), steps
    assert int(steps[-1][0]) == int(steps[-1][1])
    assert "Throughput" in table
    assert "threads (share of the run): main thread ran" in table
    if client_missing() is None:
        assert re.search(r"sidecar -> independent C client .* server CPU \d+ µs", table)
    assert "The project's targets (reported, not asserted)" in table
    assert "issue" not in table
    if "results" in results["scanner"]:
        rows = table.split("8 scanner", 1)[1].split("\n\n", 1)[0].splitlines()[1:]
        assert rows and all(row.endswith(" MB/s") for row in rows), rows


def test_folded_figures_have_units() -> None:
    from ahp.bench.report import folded_unit

    assert folded_unit("plain_4k") == "MB/s"
    assert folded_unit("bash_integrated") == "MB/s"
    assert folded_unit("bash_plain_cpu") == "MB per CPU second"
    assert folded_unit("integrated_ratio") == "x"
    assert folded_unit("run_true_ms") == "ms"
    assert folded_unit("screen_ms") == "ms"
    assert folded_unit("ghostty_read_us") == "µs"
    assert folded_unit("ghostty_agree_pct") == "%"
    assert folded_unit("pyte_raw_raised_count") == "recordings"


def test_the_wheel_carries_the_folded_benchmarks() -> None:
    """An installed package runs the whole bench: every folded file is force-included
    beside ``ahp/bench/folded.py``, where :func:`benchmarks_dir` looks outside a checkout."""
    from ahp.bench.folded import FOLDED, benchmarks_dir

    root = Path(__file__).resolve().parents[1]
    config = tomllib.loads((root / "pyproject.toml").read_text())
    included = config["tool"]["hatch"]["build"]["targets"]["wheel"]["force-include"]
    for name in FOLDED.values():
        assert included[f"benchmarks/{name}"] == f"ahp/bench/_benchmarks/{name}"
        assert (root / "benchmarks" / name).exists()
    assert benchmarks_dir() == root / "benchmarks"


def test_results_of_two_runs_the_same_day_do_not_collide() -> None:
    from ahp.bench.report import result_stem

    assert result_stem(0) != result_stem(1)
    assert re.fullmatch(r"bench-\d{4}-\d{2}-\d{2}-\d{6}", result_stem())


def _figure(value: float) -> dict[str, object]:
    return {"median": value, "min": value, "max": value, "runs": [value], "unit": "x"}


def test_issue_23_targets_carry_what_the_floors_scored_on_the_same_figure() -> None:
    """Each of issue 23's goals is evaluated for ours and for each floor (bare Trio in
    terminado's shape and the card's) from the same run's figures, and the report says
    beside the goal whether each floor meets it; a floor not measured says so."""
    from ahp.bench.report import _floors_text
    from ahp.bench.suite import PEERS
    from ahp.bench.targets import FLOORS, evaluate

    assert [p.name for p in PEERS][-len(FLOORS) :] == list(FLOORS)

    def side(mb_s: float, cpu: float, echo: float, idle: float) -> dict[str, object]:
        return {
            "alone": {},
            "c_client": {
                "throughput": _figure(mb_s),
                "server_cpu_s_per_100mb": _figure(cpu),
            },
            "echo_c": {"median_ms": _figure(echo)},
            "echo_c_idle": {"median_ms": _figure(idle)},
        }

    results = {
        "ceiling": {"throughput": _figure(50.0)},
        "end_to_end": {
            "c_client": {"throughput": _figure(40.0), "server_cpu_s_per_100mb": _figure(1.3)}
        },
        "echo": {
            "sidecar_c": {"median_ms": _figure(0.4)},
            "sidecar_c_idle": {"median_ms": _figure(1.2)},
        },
        "many": {"ours": {"aggregate_throughput": _figure(30.0)}},
        "peers": {
            "terminado": side(30.0, 1.9, 0.3, 1.0),
            "ttyd": side(50.0, 0.8, 0.1, 0.25),
            "floor-card": side(40.0, 1.2, 0.27, 0.7),
            "floor-ahp": side(38.0, 1.3, 0.33, 0.8),
        },
    }
    targets = {t.key: t for t in evaluate(results)}
    echo = targets["echo_vs_terminado_c"]
    assert echo.value == pytest.approx(0.4 / 0.3) and echo.met is False
    assert dict(echo.floors) == {
        "floor-2": None,
        "floor-card": pytest.approx(0.9),
        "floor-ahp": pytest.approx(1.1),
        "floor-state": None,
    }
    assert _floors_text(echo) == (
        "floors: floor-2 not measured, floor-card 0.900x (meets it), "
        "floor-ahp 1.100x (misses it), floor-state not measured"
    )
    cpu = targets["server_cpu_per_100mb_c"]
    assert dict(cpu.floors)["floor-card"] == pytest.approx(1.2)
    assert cpu.to_json()["floors"]["floor-card"] == {"value": 1.2, "met": False}
    assert "misses it" in _floors_text(cpu)
    idle = targets["echo_idle_vs_terminado_c"]
    assert dict(idle.floors)["floor-card"] == pytest.approx(0.7)
    assert dict(targets["e2e_vs_ceiling_c"].floors)["floor-card"] == pytest.approx(0.8)
    # Targets outside issue 23's goals carry no floors.
    assert targets["append_scaling"].floors == ()
    assert "floors" not in targets["append_scaling"].to_json()


def test_the_chart_labels_every_peer_on_two_short_lines() -> None:
    """The chart's bars (``ahp.bench.chart``, before matplotlib draws them): one per
    peer, a peer's stalled run beside it when it has one, and a hyphenated name on two
    lines (nine servers' labels ran into each other on one)."""
    from ahp.bench.chart import _bars

    run = _figure(1.0)
    echo = {"median_ms": run, "p99_ms": run}
    results = {
        "ceiling": {"throughput": run},
        "engine": {"one": {"throughput": run}, "ten": {"throughput": run}},
        "end_to_end": {"alone": {"throughput": run}, "with_stalled": {"throughput": run}},
        "echo": {"bare_pty": echo, "engine": echo, "sidecar": echo},
        "peers": {
            "terminado": {"alone": {"throughput": run}, "with_stalled": {"throughput": run}},
            "floor-state": {"alone": {"throughput": run}, "with_stalled": {}, "echo": echo},
            "ttyd": {"missing": "not requested"},
        },
    }
    throughput, latency = _bars(results)
    assert [name for name, _ in throughput][5:] == [
        "terminado",
        "terminado\n+stalled",
        "floor-\nstate",
    ]
    assert [name for name, _ in latency][3:] == ["floor-\nstate"]


def test_the_many_terminals_goal_carries_the_machines_budget() -> None:
    """The many-terminals goal says what the machine leaves a server at the goal's rate,
    from the run's own figures: the rest of the run's CPU per MB (busy cores minus the
    server's, over the rate; the least of every server's run), the cores that leaves at
    the goal's rate, hence the most a server may cost per 100 MB, and each server's cost
    beside it; a run without the figures carries none."""
    from ahp.bench.targets import evaluate

    def many(rate: float, busy: float, server: float) -> dict[str, object]:
        return {
            "aggregate_throughput": _figure(rate),
            "machine_busy_cores": _figure(busy),
            "server_cpu_cores": _figure(server),
        }

    results = {
        "machine": {"cores": 2, "cores_usable": 2},
        # ttyd: rest (1.8 - 0.3) / 60 = 2.5 CPU-s per 100 MB; ours: (1.4 - 0.6) / 40 = 2.0.
        "many": {"ours": many(40.0, 1.4, 0.6), "ttyd": many(60.0, 1.8, 0.3)},
    }
    target = {t.key: t for t in evaluate(results)}["many_vs_ttyd"]
    assert target.value == pytest.approx(40 / 60)
    # At 1.5 x 60 = 90 MB/s the rest takes 2.0 x 0.9 = 1.8 cores: 0.2 left, 0.22 per 100 MB.
    assert target.bound is not None
    assert "at the goal's 90.0 MB/s" in target.bound
    assert "at least 2.00 CPU-s per 100 MB (the least of 2 runs) = 1.80 of 2 cores" in target.bound
    assert "a server may cost 0.22 CPU-s per 100 MB at most" in target.bound
    assert target.bound.endswith("measured: ttyd 0.50 (over), ours 1.50 (over)")
    assert target.to_json()["bound"] == target.bound
    del results["machine"]
    assert {t.key: t for t in evaluate(results)}["many_vs_ttyd"].bound is None
