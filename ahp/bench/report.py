"""The results as a table on stdout and as JSON on disk.

Why both: the table is for the person who ran the command (figures, ratios and
targets side by side); the JSON is for tracking across versions (every run's
raw values, the machine and the command that produced them).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Final

import orjson

from ahp.bench.folded import FOLDED
from ahp.bench.stats import Figure
from ahp.bench.targets import Target

__all__ = ["folded_unit", "render_table", "result_stem", "stalled_outcome", "write_json"]

#: Fewer runs per figure than this and the report says its figures are noisy.
NOISY_RUNS = 3


def _fig(node: Any, digits: int = 1) -> str:
    if not isinstance(node, dict) or "median" not in node:
        return "n/a"
    fig = Figure(node["median"], node["min"], node["max"], tuple(node["runs"]), node["unit"])
    return fig.text(digits)


def _med(node: Any) -> float | None:
    return float(node["median"]) if isinstance(node, dict) and "median" in node else None


def _ratio(a: Any, b: Any) -> str:
    x, y = _med(a), _med(b)
    return "n/a" if x is None or not y else f"{x / y:.2f}x"


def stalled_outcome(entries: list[dict[str, Any]]) -> str:
    """How the server treated the stalled client, summarised over the runs."""
    groups: dict[str, list[float]] = {}
    for e in entries:
        held = float(e.get("held_stalled_after_run_seconds") or 0.0)
        if e.get("server_1013_closes_before_resuming"):
            key = "cut off (1013 or dropped) while stalled, {held} after the cat ended"
        elif e.get("close_code") == 1013:
            key = "closed with 1013 only once it read again (still open {held} after the cat)"
        elif e.get("output_end_reached_it"):
            key = "not cut off: all the output reached it once it read again"
        elif e.get("still_open_after_drain"):
            key = "still open after draining, output incomplete"
        else:
            key = f"closed with code {e.get('close_code')}"
        groups.setdefault(key, []).append(held)
    parts = []
    for key, helds in groups.items():
        span = f"{min(helds):.1f}-{max(helds):.1f} s" if len(helds) > 1 else f"{helds[0]:.1f} s"
        parts.append(f"{key.format(held=span)} ({len(helds)}/{len(entries)} runs)")
    return "; ".join(parts)


def _peer_nodes(results: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """The peers that were measured (name, results), in the order of the run."""
    peers = results.get("peers", {})
    return [
        (name, node) for name, node in peers.items() if isinstance(node, dict) and "alone" in node
    ]


def _row(label: str, value: str, extra: str = "") -> str:
    return f"  {label:<52} {value:<28} {extra}".rstrip()


#: How :func:`_threads_line` names the parts of :mod:`ahp.bench.threads`' budget.
_THREAD_PARTS: Final = (
    ("main", "main thread"),
    ("busiest", "busiest other thread"),
    ("program", "cat"),
)


def _threads_line(node: Any, program: str = "cat", *, several: bool = False) -> list[str]:
    """Where a run's server threads and ``cat`` spent it (medians of shares), as a line
    under the run's row; none when not measured. ``program`` names the program's part;
    ``several``: it is several processes, whose shares add up (a share over 100 % is
    more than one CPU's time), and their sleep says nothing."""
    if not isinstance(node, dict) or "main" not in node:
        return []
    parts = []
    for key, name in _THREAD_PARTS:
        part = node.get(key)
        if isinstance(part, dict):
            ran, waited, slept = (_med(part.get(k)) or 0.0 for k in ("ran", "waited", "slept"))
            if key == "program":
                text = f"{program} ran {ran:.0%} waited {waited:.0%}"
                parts.append(text if several else f"{text} slept {slept:.0%}")
            else:
                parts.append(f"{name} ran {ran:.0%} waited {waited:.0%} slept {slept:.0%}")
    return ["      threads (share of the run): " + "; ".join(parts)]


def render_table(results: dict[str, Any], targets: list[Target]) -> str:
    r = results
    lines: list[str] = []
    mach = r["machine"]
    wl = r["workload"]
    cfg = r["config"]
    load = mach.get("loadavg", [0])[0]
    load_end = mach.get("loadavg_end", [load])[0]
    lines += [
        f"ahp bench, {r['date']}: {r['command']}",
        f"machine: {mach['cores']} cores ({mach['cpu']}), Python {mach['python']}, "
        f"{mach['system']} {mach['kernel']}; load average {load:.2f} at start, "
        f"{load_end:.2f} at end (shared machine: figures are noisy, compare ratios)",
        f"workload: cat of {wl['file_bytes'] / 1e6:.1f} MB of text ({wl['lines']:,} lines, "
        f"mean {wl['mean_line_bytes']:.0f} B/line, some multi-byte UTF-8) = "
        f"{wl['pty_bytes'] / 1e6:.1f} MB out of the pty; {cfg['runs']} runs per figure, "
        "median (min-max); MB = 10^6 bytes",
    ]
    if cfg["runs"] < NOISY_RUNS:
        lines.append(
            f"NOTE: {cfg['runs']} run(s) per figure: a single run is noisy on a shared machine; "
            "compare figures from --runs 5 (the default)"
        )
    lines += [
        "",
        "Throughput",
    ]
    ceiling = r["ceiling"]["throughput"]
    one = r["engine"]["one"]
    ten = r["engine"]["ten"]
    e2e = r["end_to_end"]
    cores = mach["cores"]

    def cpu(node: dict[str, Any], own: str, label: str) -> str:
        parts = [f"{label} {_med(node.get(own)) or 0:.2f}"]
        if "client_cpu_cores" in node:
            parts.append(f"client {_med(node['client_cpu_cores']) or 0:.2f}")
        parts.append(f"machine {_med(node.get('machine_busy_cores')) or 0:.1f}/{cores}")
        return "; cpu " + ", ".join(parts)

    lines += [
        _row(
            "1 bare Trio pty reader (the ceiling)",
            _fig(ceiling),
            "1.00x ceiling" + cpu(r["ceiling"], "reader_cpu_cores", "reader"),
        ),
        *_threads_line(r["ceiling"].get("threads")),
        _row(
            "2 engine in-process, 1 subscriber",
            _fig(one["throughput"]),
            f"{_ratio(one['throughput'], ceiling)} ceiling" + cpu(one, "cpu_cores", "engine"),
        ),
        _row(
            "  engine in-process, 10 subscribers",
            _fig(ten["throughput"]),
            f"{_ratio(ten['throughput'], one['throughput'])} 1 subscriber"
            + cpu(ten, "cpu_cores", "engine"),
        ),
        _row(
            "  batching: bytes per published data action",
            _fig(one["bytes_per_batch"], 0),
            f"{_med(one['read_batches']) or 0:.0f} actions per run; "
            f"{_med(one['data_envelopes_per_subscriber']) or 0:.0f} envelopes delivered "
            f"(ceiling reads {_med(r['ceiling']['bytes_per_read']) or 0:.0f} B at a time)",
        ),
        _row(
            "3 sidecar -> WebSocket -> 1 client",
            _fig(e2e["alone"]["throughput"]),
            f"{_ratio(e2e['alone']['throughput'], ceiling)} ceiling"
            + cpu(e2e["alone"], "server_cpu_cores", "server"),
        ),
        _row(
            "  same, beside a stalled client",
            _fig(e2e["with_stalled"]["throughput"]),
            f"{_fig(e2e['stalled_cost_ratio'], 2)} of alone (paired)"
            + cpu(e2e["with_stalled"], "server_cpu_cores", "server"),
        ),
        _row(
            "  frames per run / bytes per frame",
            f"{_med(e2e['alone']['frames']) or 0:.0f}",
            _fig(e2e["alone"]["bytes_per_frame"], 0),
        ),
    ]
    complete = {
        "ceiling": r["ceiling"]["complete"],
        "engine": one["complete"] and ten["complete"],
        "end to end": all(e2e["alone"]["complete"]) and all(e2e["with_stalled"]["complete"]),
    }
    c_ours = e2e.get("c_client", {})
    if "throughput" in c_ours:
        lines.append(
            _row(
                "3 sidecar -> independent C client",
                _fig(c_ours["throughput"]),
                f"{_ratio(c_ours['throughput'], ceiling)} ceiling; server "
                f"{_med(c_ours['server_cpu_s_per_100mb']) or 0:.2f} CPU-s per 100 MB"
                + cpu(c_ours, "server_cpu_cores", "server"),
            )
        )
        lines += _threads_line(c_ours.get("threads"))
        complete["C client"] = all(c_ours["complete"])
    else:
        lines.append(f"  3 independent C client: skipped: {c_ours.get('skipped', 'not run')}")
    broken = [k for k, ok in complete.items() if not ok]
    if broken:
        lines.append(f"  WARNING: incomplete output in: {', '.join(broken)} (see JSON)")
    peers = r.get("peers", {})
    measured = _peer_nodes(r)
    for name, node in measured:
        lines.append(
            _row(
                f"7 {name} {node['version']} -> WebSocket -> 1 client",
                _fig(node["alone"]["throughput"]),
                f"ours {_ratio(e2e['alone']['throughput'], node['alone']['throughput'])} {name}"
                + cpu(node["alone"], "server_cpu_cores", "server"),
            )
        )
        if "throughput" in node["with_stalled"]:
            lines.append(
                _row(
                    f"  {name}, beside a stalled client",
                    _fig(node["with_stalled"]["throughput"]),
                    f"{_fig(node['stalled_cost_ratio'], 2)} of alone"
                    + cpu(node["with_stalled"], "server_cpu_cores", "server"),
                )
            )
        else:
            why = node["with_stalled"]["skipped"]
            lines.append(f"  {name}, beside a stalled client: n/a: {why}")
        c_peer = node.get("c_client", {})
        if "throughput" in c_peer and "throughput" in c_ours:
            lines.append(
                _row(
                    f"7 {name} -> independent C client",
                    _fig(c_peer["throughput"]),
                    f"ours {_ratio(c_ours['throughput'], c_peer['throughput'])} {name}; server "
                    f"{_med(c_peer['server_cpu_s_per_100mb']) or 0:.2f} CPU-s per 100 MB"
                    + cpu(c_peer, "server_cpu_cores", "server"),
                )
            )
            lines += _threads_line(c_peer.get("threads"))
    if "skipped" in peers:
        lines.append(f"  7 peers: skipped: {peers['skipped']}")
    for name, node in peers.items():
        if isinstance(node, dict) and "skipped" in node:
            lines.append(f"  7 {name}: not measured: {node['skipped']}")

    many = r.get("many", {})
    if "ours" in many:
        mine = many["ours"]
        label = f"6 {mine['terminals']} terminals at once (x {many['mb_per_terminal']:g} MB)"
        lines.append(
            _row(
                label,
                _fig(mine["aggregate_throughput"]),
                f"aggregate; fairness {_fig(mine['fairness_min_over_max'], 2)} min/max; "
                f"server {_med(mine['server_cpu_cores']) or 0:.2f} cores, "
                f"{_med(mine['server_cpu_s_per_100mb']) or 0:.2f} CPU-s per 100 MB; "
                f"machine {_med(mine['machine_busy_cores']) or 0:.1f}/{cores} ({many['client']})",
            )
        )
        many_cats = f"the {mine['terminals']} cats together"
        lines += _threads_line(mine.get("threads"), many_cats, several=True)
        if "server_rss_kept_mb" in mine:
            lines.append(
                _row(
                    "  server RSS kept after the terminals were disposed",
                    _fig(mine["server_rss_kept_mb"]),
                )
            )
        for name, theirs in many.items():
            if not isinstance(theirs, dict) or "aggregate_throughput" not in theirs:
                continue
            if name == "ours":
                continue
            kept = theirs.get("server_rss_kept_mb")
            lines.append(
                _row(
                    f"  {name}, same",
                    _fig(theirs["aggregate_throughput"]),
                    f"ours {many[f'ours_over_{name}']:.2f}x {name}; fairness "
                    f"{_fig(theirs['fairness_min_over_max'], 2)}; server "
                    f"{_med(theirs['server_cpu_cores']) or 0:.2f} cores"
                    + (f", RSS kept {_fig(kept)}" if kept else ""),
                )
            )
            lines += _threads_line(theirs.get("threads"), many_cats, several=True)
        if not mine["complete"]:
            lines.append("  WARNING: incomplete output in the many-terminals runs (see JSON)")
    elif many:
        lines.append(f"  6 many terminals: skipped: {many.get('skipped', 'not run')}")

    echo = r["echo"]
    lines += ["", f"Echo latency ({cfg['echo_count']} keystrokes per run; median, p99 in ms)"]
    rows = [
        ("bare pty (write a byte, read the echo)", echo["bare_pty"]),
        ("engine in-process (send_input -> subscriber)", echo["engine"]),
        ("sidecar -> WebSocket client", echo["sidecar"]),
    ]
    for name, node in measured:
        if "echo" in node:
            rows.append((f"{name} -> WebSocket client", node["echo"]))
    if "sidecar_idle" in echo:
        idle = f"after {echo['idle_pause_s']} s idle"
        rows += [
            (f"bare pty, {idle}", echo["bare_pty_idle"]),
            (f"sidecar, {idle}", echo["sidecar_idle"]),
        ]
        for name, node in measured:
            if "echo_idle" in node:
                rows.append((f"{name}, {idle}", node["echo_idle"]))
    if "median_ms" in echo.get("sidecar_c", {}):
        idle = f"after {echo['idle_pause_s']} s idle"
        rows += [
            ("sidecar -> independent C client", echo["sidecar_c"]),
            (f"sidecar -> C client, {idle}", echo["sidecar_c_idle"]),
        ]
        for name, node in measured:
            if "echo_c" in node:
                rows.append((f"{name} -> independent C client", node["echo_c"]))
            if "echo_c_idle" in node:
                rows.append((f"{name} -> C client, {idle}", node["echo_c_idle"]))
    for label, node in rows:
        extra = f"p99 {_fig(node['p99_ms'], 3)}"
        if "server_cpu_us_per_keystroke" in node:
            extra += f"; server CPU {_fig(node['server_cpu_us_per_keystroke'], 0)} a keystroke"
        lines.append(_row(f"4 {label}", _fig(node["median_ms"], 3), extra))

    mem = r["memory"]
    big = mem["large_output"]
    lines += [
        "",
        "Memory (server process RSS)",
        _row("5 sidecar idle", _fig(mem["idle_mb"])),
        _row(
            f"  per idle terminal ({mem['terminals']} cat terminals)",
            _fig(mem["per_terminal_kb"], 0),
        ),
        _row(
            "  after one cat to a WebSocket client (steady state)",
            _fig(e2e["alone"]["server_rss_start_mb"]),
        ),
        _row(
            "  growth while a client stalls beside the cat",
            _fig(e2e["stalled_growth_mb"]),
            f"(same cat alone: {_fig(e2e['alone_growth_mb'])})",
        ),
        _row(
            "  growth left after holding it stalled",
            _fig(e2e["stalled_growth_after_hold_mb"]),
        ),
        f"    stalled client: {stalled_outcome(e2e['stalled_client'])}",
    ]
    for name, node in measured:
        if "stalled_growth_mb" in node:
            lines += [
                _row(f"  {name}: growth while a client stalls", _fig(node["stalled_growth_mb"])),
                f"    stalled client: {stalled_outcome(node['stalled_client'])}",
            ]
        else:
            lines.append(
                _row(
                    f"  {name}: after one cat to a client / growth during it",
                    _fig(node["alone"]["server_rss_start_mb"]),
                    f"growth {_fig(node['alone_growth_mb'])}",
                )
            )
    lines += [
        _row(
            f"  after cat of {big['output_mb']:.0f} MB in-process, RSS",
            _fig(big["rss_after_mb"]),
            f"growth {_fig(big['growth_mb'])}; peak {_fig(big['peak_mb'])}",
        ),
    ]
    ap = r["append"]
    lines += [
        "",
        f"6 Append scaling (reducer, 4 KiB chunks, 8 states kept): {ap['small_mb']:g} MB "
        f"{_fig(ap['small_seconds'], 3)}, {ap['large_mb']:g} MB {_fig(ap['large_seconds'], 3)}: "
        f"{ap['ratio']:.1f}x for 10x the data",
    ]
    if "commands_ratio" in ap:
        lines.append(
            f"  commands: {ap['few_commands']} {_fig(ap['few_commands_seconds'], 3)}, "
            f"{ap['many_commands']} {_fig(ap['many_commands_seconds'], 3)}: "
            f"{ap['commands_ratio']:.1f}x for 10x the commands"
        )
    for name in FOLDED:
        node = r.get(name, {})
        lines.append("")
        if "skipped" in node:
            lines.append(f"8 {name}: skipped: {node['skipped']}")
            continue
        lines.append(
            f"8 {name} (benchmarks/bench_{name}.py, {node.get('size_mb', 0):g} MB of input)"
        )
        res = node.get("results")
        if isinstance(res, dict):
            for key, value in res.items():
                if isinstance(value, float):
                    shown = f"{value:.2f}" if abs(value) < 10 else f"{value:.1f}"
                else:
                    shown = str(value)
                lines.append(_row(f"  {key}", f"{shown} {folded_unit(key)}"))
        else:
            lines.append(f"  {res}")

    lines += ["", "The project's targets (reported, not asserted)"]
    for t in targets:
        if t.value is None:
            verdict = "n/a   "
            shown = f"not measured: {t.why_missing}" if t.why_missing else "not measured"
        else:
            verdict = "met   " if t.met else "MISSED"
            shown = f"{_value(t, t.value)} (target {t.op} {_value(t, t.limit, '{:g}')})"
        lines.append(f"  [{verdict}] {t.description}: {shown}")
        if t.floors:
            lines.append(f"           {_floors_text(t)}")
        if t.bound:
            lines.append(f"           {t.bound}")
    return "\n".join(lines)


def _value(t: Target, value: float, form: str | None = None) -> str:
    """``value`` in ``t``'s unit: ratios to 3 places, the rest to 2 (or ``form``)."""
    unit = "x" if t.unit == "x" else f" {t.unit}"
    if form is None:
        form = "{:.3f}" if t.unit == "x" else "{:.2f}"
    return form.format(value) + unit


def _floors_text(t: Target) -> str:
    """What the floors scored on ``t``'s figure: a goal a floor misses too is bounded by
    what that floor does (:mod:`ahp.bench.floors`: the shape bare, with the protocol's
    least, with the contract's work)."""
    parts = [
        f"{name} not measured"
        if value is None
        else f"{name} {_value(t, value)} ({'meets' if t.meets(value) else 'misses'} it)"
        for name, value in t.floors
    ]
    return "floors: " + ", ".join(parts)


def folded_unit(key: str) -> str:
    """The unit of a scanner or integration figure, by its name."""
    if key.endswith("_ratio"):
        return "x"  # integrated / plain
    if key.endswith("_cpu"):
        return "MB per CPU second"
    if key.endswith("_ms"):
        return "ms"  # the render section's run() and screen() costs
    if key.endswith("_us"):
        return "µs"  # the screen section's screen() read
    if key.endswith("_pct"):
        return "%"  # the screen section's rows agreeing with the reference
    if key.endswith("_count"):
        return "recordings"  # the screen section's per-recording counts
    return "MB/s"


def result_stem(when: float | None = None) -> str:
    """``bench-<date>-<time>``: a second run the same day does not overwrite the first."""
    return "bench-" + time.strftime("%Y-%m-%d-%H%M%S", time.localtime(when))


def write_json(results: dict[str, Any], out_dir: Path, stem: str | None = None) -> Path:
    """``out_dir/<stem>.json`` (default :func:`result_stem`); returns the path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{stem or result_stem()}.json"
    path.write_bytes(orjson.dumps(results, option=orjson.OPT_INDENT_2) + b"\n")
    return path
