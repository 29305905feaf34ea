"""Where one tree's time goes beyond its model calls: its critical path, segment by segment.

    .venv/bin/python bench/tree_timeline.py                 # 5 trees at 50 ms a call
    .venv/bin/python bench/tree_timeline.py --delay 0 --trees 10
    .venv/bin/python bench/tree_timeline.py --together 20 --delay 0.2   # 20 trees at once
    .venv/bin/python bench/tree_timeline.py --layer redis     # channel layer and messenger on Redis
    BENCH_CHILDREN=1 .venv/bin/python bench/tree_timeline.py   # a root and one child

The tree of bench/served.py (a root spawns 5 children in one turn, waits and answers; each
child makes 6 cheap tool calls and answers; the verifier checks the draft) runs in daphne
with the agents in its process, on PostgreSQL, with the in-memory channel layer. The
scripted model, in this process, notes when each call arrives and answers it after the
delay (the verifier's call, unscripted, at once); the runs' rows give when each agent was
created and finished. The tree's wall time is then cut along its critical path, which is
made of the model calls and of what Canopy does between them; each segment is the median
over the trees, after one that warms the process up:

- root start: the root created by the API to its first call (its claim, its set-up), and
  of which to its claim (its run's `started_at`);
- spawns: the root's spawning call answered to its last child created;
- child start: the last child created to the first call of the child that ends last, and
  of which to that child's claim;
- child steps: that child's six steps, each a call answered to its next call;
- child end: its last call answered to its run finished;
- root wake: that child finished to the root's draft call;
- verifier spawn, start, end: the draft answered to the verifier created, to its call, to
  its run finished;
- root end: the verifier finished to the root's run finished (the coverage, the finish).

With BENCH_CHILDREN=1 (bench/served.py) the root spawns one child instead of five: the same
chain of hand-overs, without five children's Python on one GIL in the same instants, which
tells one cost from the other. With `--together N`, N trees start at once, as bench/gil.py's
load does (20 trees are 120 agents), and the segments are each tree's, the medians over the N
trees of one load: where a tree's time goes when its starts, spawns and ends fall in the same
instants as the others'.
"""

import argparse
import asyncio
import os
import statistics
import sys
import threading
import time
from pathlib import Path

PROJECT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT))
sys.path.insert(0, str(PROJECT / "bench"))

import served  # noqa: E402
from served import CHILDREN, CRITICAL_PATH_CALLS, Client, Server  # noqa: E402

from agents.llm.scripted import ScriptedLLM, task_of  # noqa: E402

DATABASE = os.environ.get("BENCH_TIMELINE_DATABASE", "canopy_bench_timeline")
SEGMENTS = (
    "root start",
    "  of which to its claim",
    "spawns",
    "child start",
    "  of which to the child's claim",
    "child steps",
    "child end",
    "root wake",
    "verifier spawn",
    "verifier start",
    "verifier end",
    "root end",
    "over the ideal",
)


def main() -> None:
    options = parse_args()
    served.prepare(DATABASE, options)
    with ScriptedLLM(keep_alive=True) as llm:
        arrivals = note_arrivals(llm)
        with Server(llm, layer=options.layer) as server:
            client = Client(server, "bench")
            warm = one_tree(llm, client, arrivals, options.delay)
            if options.together:
                trees = together(llm, client, server, arrivals, options)
            else:
                trees = [warm] + [
                    one_tree(llm, client, arrivals, options.delay) for _ in range(options.trees)
                ]
                trees = trees[1:]
    report(options, trees)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--delay", type=float, default=0.05, help="seconds a call (0.05)")
    parser.add_argument("--trees", type=int, default=5, help="trees measured, one at a time (5)")
    parser.add_argument("--verbose", action="store_true", help="print every tree's segments")
    parser.add_argument("--together", type=int, default=0, help="N trees started at once")
    parser.add_argument(
        "--layer",
        choices=["memory", "redis"],
        default="memory",
        help="the channel layer; with redis, the messenger is Redis too (memory)",
    )
    return parser.parse_args()


def note_arrivals(llm: ScriptedLLM) -> list[tuple[float, str]]:
    """(time, task) of each call the scripted model receives, in order."""
    arrivals: list[tuple[float, str]] = []
    lock = threading.Lock()
    taken = llm._taken  # every request, on the threaded server and on the loop

    def noted(body):
        with lock:
            arrivals.append((time.time(), task_of(body.get("messages") or [])))
        return taken(body)

    llm._taken = noted
    return arrivals


def one_tree(llm, client: Client, arrivals: list, delay: float) -> dict[str, float]:
    topic = f"timeline {delay} {time.time()}"
    served.script_tree(llm, topic, delay)
    first = len(arrivals)

    async def run() -> int:
        async with client.api() as api:
            root_id = await served.start_tree(api, topic)
            watcher = asyncio.ensure_future(served.watch(client, root_id, []))
            await served.wait_trees(api, [watcher], [root_id], timeout=120)
            return root_id

    root_id = asyncio.run(run())
    return segments(root_id, arrivals[first:], delay)


def together(llm, client: Client, server: Server, arrivals: list, options) -> list[dict]:
    """The segments of each of `options.together` trees started at once."""
    from research.models import Run

    first = len(arrivals)
    asyncio.run(served.many_trees(llm, client, server, options.together, options.delay, "at once"))
    roots = Run.objects.filter(parent=None, topic__startswith="at once tree").order_by("-id")
    trees = []
    for root in roots[: options.together]:
        topics = list(Run.objects.filter(root_id=root.pk).values_list("topic", flat=True))
        own = [(at, task) for at, task in arrivals[first:] if any(t in task for t in topics)]
        trees.append(segments(root.pk, own, options.delay))
    return trees


def segments(root_id: int, arrivals: list[tuple[float, str]], delay: float) -> dict[str, float]:
    """The tree's wall time cut along its critical path, in milliseconds: the segments
    and the model calls on it add up to the wall time."""
    from research.models import Run

    runs = list(Run.objects.filter(root_id=root_id).order_by("id"))
    calls: dict[int, list[float]] = {run.pk: [] for run in runs}
    for at, task in arrivals:
        # The run whose topic is the longest found in the call's first user message.
        owner = max((run for run in runs if run.topic in task), key=lambda run: len(run.topic))
        calls[owner.pk].append(at)
    root = next(run for run in runs if run.pk == root_id)
    verifier = next(run for run in runs if run.kind == "verifier")
    children = [run for run in runs if run.parent_id == root_id and run.pk != verifier.pk]
    assert len(children) == CHILDREN, f"tree {root_id} has {len(children)} children"
    # The child that ended last is the one on the critical path.
    last = max(children, key=lambda run: run.finished_at)
    own = calls[last.pk]
    at = {
        "root created": root.created_at.timestamp(),
        "root claimed": root.started_at.timestamp(),
        "root's first call": calls[root_id][0],
        "children created": max(child.created_at for child in children).timestamp(),
        "child claimed": last.started_at.timestamp(),
        "child's first call": own[0],
        "child's last call": own[-1],
        "child finished": last.finished_at.timestamp(),
        "root's draft call": next(a for a in calls[root_id] if a > own[-1]),
        "verifier created": verifier.created_at.timestamp(),
        "verifier's call": calls[verifier.pk][0],
        "verifier finished": verifier.finished_at.timestamp(),
        "root finished": root.finished_at.timestamp(),
    }
    # The root may wake on its child's end before that end commits (agents.runtime.pool): the
    # child's end on the critical path ends there, or at its commit if that came first.
    woken = min(at["child finished"], at["root's draft call"])
    steps = [later - (earlier + delay) for earlier, later in zip(own, own[1:], strict=False)]
    ms = {
        "root start": at["root's first call"] - at["root created"],
        "  of which to its claim": at["root claimed"] - at["root created"],
        "spawns": at["children created"] - (at["root's first call"] + delay),
        "child start": at["child's first call"] - at["children created"],
        "  of which to the child's claim": at["child claimed"] - at["children created"],
        "child steps": sum(steps),
        "child end": woken - (at["child's last call"] + delay),
        "root wake": at["root's draft call"] - woken,
        "verifier spawn": at["verifier created"] - (at["root's draft call"] + delay),
        "verifier start": at["verifier's call"] - at["verifier created"],
        "verifier end": at["verifier finished"] - at["verifier's call"],
        "root end": at["root finished"] - at["verifier finished"],
        "wall": at["root finished"] - at["root created"],
    }
    ms["over the ideal"] = ms["wall"] - CRITICAL_PATH_CALLS * delay
    return {name: value * 1000 for name, value in ms.items()}


def report(options: argparse.Namespace, trees: list[dict[str, float]]) -> None:
    ideal = CRITICAL_PATH_CALLS * options.delay * 1000
    wall = statistics.median(tree["wall"] for tree in trees)
    what = f"{len(trees)} trees at once" if options.together else "one tree"
    print(
        f"{what} at {options.delay * 1000:.0f} ms a call, {len(trees)} trees: wall "
        f"{wall:.0f} ms, ideal {ideal:.0f} ms, over {wall / ideal - 1:+.0%}"
        if ideal
        else f"one tree at 0 ms a call, {len(trees)} trees: wall {wall:.0f} ms"
    )
    print("| segment (ms, median over the trees) | median | min | max |")
    print("| --- | --- | --- | --- |")
    for name in SEGMENTS:
        values = [tree[name] for tree in trees]
        print(
            f"| {name} | {statistics.median(values):.1f} | {min(values):.1f} | {max(values):.1f} |"
        )
    print("(the segments, not counting the 'of which' rows, add up to the time over the ideal)")
    if options.verbose:
        for tree in trees:
            print({name: round(value, 1) for name, value in tree.items()})


if __name__ == "__main__":
    main()
