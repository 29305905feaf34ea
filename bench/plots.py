"""The two pictures of docs/performance.md, from the figures bench/served.py wrote.

    .venv/bin/python bench/plots.py bench-results.json docs/

`throughput.png`: trees' wall time against their ideal (the ratio) by number of agents, for
each channel layer. `event-latency.png`: event commit to websocket client, p50/p95/p99, idle
and loaded, for each channel layer.
"""

import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # no screen: files only
import matplotlib.pyplot as plt  # noqa: E402

LAYERS = {"memory": "in-memory layer", "redis": "Redis layer"}


def main() -> None:
    results = json.loads(Path(sys.argv[1]).read_text())
    folder = Path(sys.argv[2])
    throughput(results, folder / "throughput.png")
    event_latency(results, folder / "event-latency.png")
    print(f"wrote {folder / 'throughput.png'} and {folder / 'event-latency.png'}")


def throughput(results: dict, path: Path) -> None:
    figure, axes = plt.subplots(figsize=(6.4, 4))
    for layer, label in LAYERS.items():
        runs = sorted(results[layer]["concurrency"].values(), key=lambda load: load["agents"])
        axes.plot(
            [load["agents"] for load in runs],
            [100 * load["ratio"] for load in runs],
            marker="o",
            label=label,
        )
    axes.axhline(90, color="grey", linestyle="--", linewidth=1, label="goal (90%)")
    axes.set_xlabel("agents working at once (trees of 6, 200 ms per model call)")
    axes.set_ylabel("ideal wall time / measured (%)")
    axes.set_ylim(0, 100)
    axes.set_title("Canopy's throughput against its ideal, one web process")
    axes.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=120)


def event_latency(results: dict, path: Path) -> None:
    """Each event's delay from its commit (bench/commit_settings.py); from the stamp it
    carries, set before its commit, for figures written before round thirty-nine."""
    key = "commit_latency" if "commit_latency" in results[next(iter(LAYERS))] else "event_latency"
    figure, axes = plt.subplots(figsize=(6.4, 4))
    groups = [(layer, state) for layer in LAYERS for state in ("idle", "loaded")]
    groups = [group for group in groups if results[group[0]][key][group[1]].get("n")]
    width = 0.25
    for offset, percentile in enumerate(("p50", "p95", "p99")):
        axes.bar(
            [index + (offset - 1) * width for index in range(len(groups))],
            [1000 * results[layer][key][state][percentile] for layer, state in groups],
            width,
            label=percentile,
        )
    axes.axhline(50, color="grey", linestyle="--", linewidth=1, label="goal for p99 (50 ms)")
    axes.set_xticks(range(len(groups)))
    axes.set_xticklabels([f"{LAYERS[layer]}\n{state}" for layer, state in groups])
    since = "commit" if key == "commit_latency" else "stamp, before its commit,"
    axes.set_ylabel(f"event from its {since} to a websocket client (ms)")
    axes.set_title("Event latency")
    axes.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=120)


if __name__ == "__main__":
    main()
