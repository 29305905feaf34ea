"""Two checkouts of Canopy measured by turns with bench/research_cpu.py: the CPU per model call
of a whole research, before and after a change, on a machine whose speed drifts.

    git worktree add ../before <commit>
    .venv/bin/python bench/alternate.py ../before .          # 8 pairs of 10 researches
    .venv/bin/python bench/alternate.py ../before . --pairs 4 --repeat 5
    .venv/bin/python bench/alternate.py ../before . -- --delay 0.02    # research_cpu.py's options

On a shared machine the same code measured anywhere from 17 to 24 ms a call within an hour
(issue 25, round six): one run of each side says little. This runs the two sides in turns
(before, after, before, after, ...), each a fresh daphne measuring `--repeat` researches
(its mean CPU per call: see `run`), and prints each side's median and range, and the median
of the per-pair ratios after / before, which the drift moves least. Both sides run with
this interpreter (the same .venv), each with its own bench/research_cpu.py.
"""

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("before", type=Path, help="the checkout measured first in each pair")
    parser.add_argument("after", type=Path, help="the other checkout")
    parser.add_argument("--pairs", type=int, default=8, help="runs of each side (8)")
    parser.add_argument("--repeat", type=int, default=10, help="researches a run (10)")
    # What follows `--` goes to bench/research_cpu.py on both sides (--delay 0.02).
    ours, theirs = sys.argv[1:], []
    if "--" in ours:
        at = ours.index("--")
        ours, theirs = ours[:at], ours[at + 1 :]
    options = parser.parse_args(ours)
    options.options = theirs
    figures: dict[str, list[float]] = {"before": [], "after": []}
    for pair in range(1, options.pairs + 1):
        for side in ("before", "after"):
            figure = run(getattr(options, side), options.repeat, options.options)
            figures[side].append(figure)
            print(f"pair {pair}, {side}: {figure:.1f} ms a call", flush=True)
    report(figures)


def run(checkout: Path, repeat: int, options: list[str]) -> float:
    """One research_cpu.py run in `checkout`: its CPU ms per model call over all its
    researches (the mean). The process's CPU is read from /proc in ticks of 10 ms, about
    0.6 ms a call for one research: the median of ten researches stays on one tick or the
    next, and hid a 5% change in round seven; the mean over the run is ten times finer."""
    with tempfile.NamedTemporaryFile(suffix=".json") as output:
        subprocess.run(
            [
                sys.executable,
                "bench/research_cpu.py",
                "--repeat",
                str(repeat),
                "--json",
                output.name,
                *options,
            ],
            cwd=checkout,
            check=True,
            stdout=subprocess.DEVNULL,
        )
        return json.loads(Path(output.name).read_text())["cpu_ms_per_model_call_mean"]


def report(figures: dict[str, list[float]]) -> None:
    before, after = figures["before"], figures["after"]
    for side, values in figures.items():
        print(
            f"{side}: median {statistics.median(values):.1f} ms a call "
            f"({min(values):.1f} to {max(values):.1f}, {len(values)} runs)"
        )
    ratios = [later / first for first, later in zip(before, after, strict=True)]
    print(
        f"after / before, by pair: {', '.join(f'{ratio:.2f}' for ratio in ratios)}; "
        f"median {statistics.median(ratios):.2f}"
    )


if __name__ == "__main__":
    main()
