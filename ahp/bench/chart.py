"""The chart image: throughput bars and latency bars, with min-max whiskers.

Why optional: matplotlib is a large dependency that the package does not need
to run; ``nox -s bench`` installs it into the benchmark environment. Without
it the chart is skipped with a message, and the JSON holds everything anyway.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

__all__ = ["chart_unavailable", "write_chart"]

#: Bar colours of the peers (by name; the sidecar's bars are green).
PEER_COLOURS = {"terminado": "#d95f02", "ttyd": "#7570b3"}


def chart_unavailable() -> str | None:
    if importlib.util.find_spec("matplotlib") is None:
        return "matplotlib is not installed (pip install '.[bench]' in a checkout, or nox -s bench)"
    return None


def _bars(results: dict[str, Any]) -> tuple[list[tuple[str, dict[str, Any]]], list[Any]]:
    throughput = [
        ("bare pty\n(ceiling)", results["ceiling"]["throughput"]),
        ("engine\n1 sub", results["engine"]["one"]["throughput"]),
        ("engine\n10 subs", results["engine"]["ten"]["throughput"]),
        ("sidecar\nWebSocket", results["end_to_end"]["alone"]["throughput"]),
        ("sidecar\n+stalled", results["end_to_end"]["with_stalled"]["throughput"]),
    ]
    echo = results["echo"]
    latency: list[Any] = [
        ("bare pty", echo["bare_pty"]),
        ("engine\nin-process", echo["engine"]),
        ("sidecar\nWebSocket", echo["sidecar"]),
    ]
    for name, node in results.get("peers", {}).items():
        if not isinstance(node, dict) or "alone" not in node:
            continue
        label = name.replace("-", "-\n", 1)  # (floor-state: two short lines, not one long)
        throughput.append((label, node["alone"]["throughput"]))
        if "throughput" in node["with_stalled"]:
            throughput.append((f"{label}\n+stalled", node["with_stalled"]["throughput"]))
        if "echo" in node:
            latency.append((label, node["echo"]))
    return throughput, latency


def write_chart(results: dict[str, Any], path: Path) -> Path:
    """Write the PNG; raises ImportError when matplotlib is missing."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    throughput, latency = _bars(results)
    bars = len(throughput) + len(latency)
    fig, (left, right) = plt.subplots(
        1,
        2,
        figsize=(max(13.0, 0.75 * bars), 5),  # (room for each bar's label)
        gridspec_kw={"width_ratios": [len(throughput), len(latency)]},
    )
    names = [name for name, _ in throughput]
    medians = [node["median"] for _, node in throughput]
    errors = [
        [node["median"] - node["min"] for _, node in throughput],
        [node["max"] - node["median"] for _, node in throughput],
    ]
    colours = ["#888888", "#2b7bba", "#2b7bba", "#1a9850", "#1a9850"]
    colours += [PEER_COLOURS.get(n.split()[0], "#d95f02") for n in names[len(colours) :]]
    left.bar(names, medians, yerr=errors, capsize=4, color=colours[: len(names)])
    for index, (value, (_, node)) in enumerate(zip(medians, throughput, strict=True)):
        left.annotate(f"{value:.1f}", (index, node["max"]), ha="center", va="bottom",
                      fontsize=8, xytext=(0, 3), textcoords="offset points")  # fmt: skip
    left.set_ylabel("MB/s (median, min-max)")
    left.set_title(f"Throughput: cat of {results['workload']['pty_bytes'] / 1e6:.0f} MB")
    left.tick_params(axis="x", labelsize=8)

    width = 0.38
    for i, (_label, node) in enumerate(latency):
        for j, key in enumerate(("median_ms", "p99_ms")):
            fig_node = node[key]
            x = i + (j - 0.5) * width
            right.bar(
                x,
                fig_node["median"],
                width,
                yerr=[
                    [fig_node["median"] - fig_node["min"]],
                    [fig_node["max"] - fig_node["median"]],
                ],
                capsize=3,
                color="#4575b4" if j == 0 else "#fdae61",
                label=("median" if j == 0 else "p99") if i == 0 else None,
            )
    right.set_xticks(range(len(latency)), [label for label, _ in latency])
    right.tick_params(axis="x", labelsize=8)
    right.set_ylabel("ms per keystroke round trip")
    right.set_title("Echo latency")
    right.legend()
    machine = results["machine"]
    fig.suptitle(
        f"ahp bench {results['date']} - {machine['cores']} cores, Python {machine['python']}, "
        f"Linux {machine['kernel']}",
        fontsize=10,
    )
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
