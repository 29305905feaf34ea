"""What a spawn costs the spawning agent: one turn's `spawn_subagents` of five children,
recorded as the tool records it, the pool having a seat for each.

    .venv/bin/python bench/spawn_cost.py                      # PostgreSQL, 300 spawns, 3 rounds
    .venv/bin/python bench/spawn_cost.py --database sqlite
    .venv/bin/python bench/spawn_cost.py --children 1         # a verifier's size
    .venv/bin/python bench/spawn_cost.py --seats 0            # the children queued, unseated
    .venv/bin/python bench/spawn_cost.py --statements         # the statements of one spawn
    .venv/bin/python bench/spawn_cost.py --in-batch           # as the writer's batch writes it
    .venv/bin/python bench/spawn_cost.py --profile            # where 300 spawns spend, by function

Every tree pays this on its critical path, between the root's spawning call and its
children's first steps (bench/tree_timeline.py's "spawns"); twenty trees at once pay it in
the same instant. This runs `services.subagents_spawn_each` in this process, as
agents.tools.team.spawn records a turn: the tree locked, the parent's children and the
tree's size read, the checks, the runs inserted (seated ones working), their first states
and events numbered and stored, one transaction. Each spawn is under a new root, claimed,
so the tree's limits never refuse one. With `--in-batch` it goes as the step writer writes
an agent's spawn (research.services.step_batch.write_parts): its root locked first, then
the spawn's reads in one statement under that lock, where alone it locks and reads in two
(round thirty-eight); the lock is counted, though in a batch with records it comes with the
batch's own UPDATE. It prints the calling thread's CPU
(`time.thread_time`) and the wall time per spawn, the medians of each round and their
median, and the statements of one spawn (its BEGIN and COMMIT counted).
"""

import argparse
import cProfile
import statistics
import sys
import time
from pathlib import Path

PROJECT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT))
sys.path.insert(0, str(PROJECT / "bench"))

from step_cost import (  # noqa: E402
    django_in_process,
    medians_by_round,
    print_profile,
    statements_of,
)

TASKS = (
    "the history of the steam engine in Britain",
    "solar panel prices in Germany since 2010",
    "coral reef bleaching in Australia",
    "the economics of container shipping",
    "what causes honey bee colonies to collapse",
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database", choices=("sqlite", "postgres"), default="postgres")
    parser.add_argument("--children", type=int, default=5, choices=range(1, len(TASKS) + 1))
    parser.add_argument("--seats", type=int, default=None, help="seated children (all)")
    parser.add_argument("--spawns", type=int, default=300, help="spawns per round (300)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--statements", action="store_true", help="list one spawn's statements")
    parser.add_argument("--profile", action="store_true", help="cProfile 300 spawns")
    parser.add_argument("--in-batch", action="store_true", help="as the writer's batch does")
    options = parser.parse_args()
    environment = {"RESEARCH_MAX_WORKING_ROOTS": "1000000", "THROTTLE_RESEARCH_START": "off"}
    with django_in_process(options.database, **environment):
        measure(options)


def measure(options: argparse.Namespace) -> None:
    from django.contrib.auth.models import User

    from research import services
    from research.models import Run, Status

    owner = User.objects.create(username=f"bench-spawn-{time.time()}")
    seats = options.children if options.seats is None else options.seats
    calls = [
        services.SpawnCall(
            [
                services.Launch(name=f"facet{index}", reason="one facet", task=task, max_steps=10)
                for index, task in enumerate(TASKS[: options.children])
            ]
        )
    ]

    def spawn(parent: int) -> None:
        if not options.in_batch:
            services.subagents_spawn_each(parent_id=parent, calls=calls, seat=seats)
            return
        from django.db import transaction

        from research.services.step_batch import Action, write_parts
        from research.services.subagents import _spawn_each
        from research.sql import inserts_deferred

        def act() -> object:
            return _spawn_each(
                parent_id=parent, calls=calls, seat=seats, worker_id=None, locked=True
            )

        with transaction.atomic(), inserts_deferred():
            write_parts([Action(parent, act)])

    def root() -> int:
        run = services.run_start(owner=owner, topic=f"spawn {time.time()}", throttle=False)
        services.run_claim(run_id=run.pk)
        return run.pk

    def spawned(profile: cProfile.Profile | None = None) -> tuple[float, float]:
        """CPU and wall milliseconds of one spawn (its root's start and end left out)."""
        parent = root()
        cpu, wall = time.thread_time(), time.perf_counter()
        if profile is not None:
            profile.enable()
        spawn(parent)
        if profile is not None:
            profile.disable()
        cpu, wall = time.thread_time() - cpu, time.perf_counter() - wall
        Run.objects.filter(root_id=parent).update(status=Status.DONE)
        return cpu * 1000, wall * 1000

    rounds = medians_by_round(spawned, rounds=options.rounds, per_round=options.spawns)
    parent = root()
    statements = statements_of(lambda: spawn(parent))
    print(
        f"a spawn of {options.children} ({seats} seated, {options.database}, "
        f"{'in a batch, ' if options.in_batch else ''}"
        f"{options.rounds} rounds of {options.spawns}): "
        f"CPU {', '.join(f'{r[0]:.2f}' for r in rounds)} ms "
        f"(median {statistics.median(r[0] for r in rounds):.2f}), "
        f"wall {', '.join(f'{r[1]:.2f}' for r in rounds)} ms "
        f"(median {statistics.median(r[1] for r in rounds):.2f}), "
        f"{len(statements)} statements"
    )
    if options.statements:
        print("\n".join(f"   {sql}" for sql in statements))
    if options.profile:
        profile = cProfile.Profile()
        for _ in range(300):
            spawned(profile)
        print_profile(profile)


if __name__ == "__main__":
    main()
