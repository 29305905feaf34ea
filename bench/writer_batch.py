"""What the step writer's thread spends on one batch, by the number of agents' steps in it.

    .venv/bin/python bench/writer_batch.py                       # PostgreSQL, 1, 2, 4, 8, 16 steps
    .venv/bin/python bench/writer_batch.py --database sqlite --steps 1 4

A tree of a root and 5 sub-agents, all working. Each round hands the writer `--steps` steps
of these agents (a step: a model call's record with its transcript step, state and checkpoint,
then its tool's record with its state, as agents.loop.agent hands them over), waits for the
last, and reads the writer thread's own CPU clock. At 200 ms a call, 12 agents (bench/gil.py)
gave the writer about 1.5 steps a batch (round sixteen: 195 batches for 316 model calls), so
the small batches are what a lightly loaded process pays per step. Statements and commits are
counted on the writer's connection. Medians of `--rounds` batches after 20 that warm it up.
"""

import argparse
import itertools
import statistics
import sys
import threading
import time
from pathlib import Path

PROJECT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT))
sys.path.insert(0, str(PROJECT / "bench"))

from step_cost import QueryCounter, django_in_process  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database", choices=("postgres", "sqlite"), default="postgres")
    parser.add_argument("--steps", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    parser.add_argument("--rounds", type=int, default=200)
    options = parser.parse_args()
    environment = {"RESEARCH_WRITER_LINGER_MS": "1000", "RESEARCH_MAX_WORKING_ROOTS": "100000"}
    with django_in_process(options.database, **environment):
        agents = working_tree()
        print(f"The step writer's thread, one batch, on {options.database} (medians):")
        print("| steps in the batch | CPU ms a batch | CPU ms a step | statements | commits |")
        print("| --- | --- | --- | --- | --- |")
        for steps in options.steps:
            cpu, statements, commits = measure(agents, steps, options.rounds)
            print(
                f"| {steps} | {cpu * 1000:.3f} | {cpu * 1000 / steps:.3f} | "
                f"{statements:.1f} | {commits:.1f} |",
                flush=True,
            )


def working_tree() -> list:
    """A working root and 5 working sub-agents of a bench user: their RunFacts."""
    from django.contrib.auth.models import User

    from research import selectors, services
    from research.models import Run

    owner, _ = User.objects.get_or_create(username="writer-bench")
    root = services.run_start(owner=owner, topic=f"writer bench {time.time()}")
    runs = [root]
    for index in range(5):
        launch = services.Launch(
            name=f"facet{index}", reason="one facet", task=f"facet {index}", max_steps=10
        )
        runs.append(services.subagent_create(parent_id=root.pk, launch=launch))
    for run in runs:
        services.run_claim(run_id=run.pk)
    return [selectors.run_facts(run=Run.objects.get(pk=run.pk)) for run in runs]


def hand_over_step(facts, number: int):
    """One step's two records, as an agent hands them over; the tool's Pending."""
    from research.services import NextState, model_call_record, tool_call_record

    model_call_record(
        facts=facts,
        input_tokens=1200,
        output_tokens=80,
        latency_ms=200,
        step={"kind": "model", "input": {"tool_calls": [["cancel_subagent", '{"name": "x"}']]}},
        next_state=NextState("cancelling", "x"),
        checkpoint={"number": number, "messages": [{"role": "assistant"}], "state": {}},
        wait=False,
    )
    return tool_call_record(
        facts=facts,
        step={"kind": "tool", "tool": "cancel_subagent", "input": {"name": "x"}, "output": "no"},
        next_state=NextState("thinking"),
        wait=False,
    )


_NUMBERS = itertools.count(1)  # checkpoints' numbers, unique in a run


def measure(agents: list, steps: int, rounds: int) -> tuple[float, float, float]:
    from django.db import connection

    from research.services import step_writer

    owner = object()
    step_writer.start(owner)
    writer = step_writer.thread
    counter = QueryCounter()
    cpu, statements, commits = [], [], []
    try:
        with counter.counting():
            for index in range(20 + rounds):
                # The writer lingers (a long RESEARCH_WRITER_LINGER_MS here) until a record is
                # waited on: the whole batch is queued by then.
                before_cpu = thread_cpu(writer)
                before = (counter.queries, counter.commits)
                for step in range(steps):
                    facts = agents[(index * steps + step) % len(agents)]
                    last = hand_over_step(facts, next(_NUMBERS))
                last.settle()
                if index >= 20:
                    cpu.append(thread_cpu(writer) - before_cpu)
                    statements.append(counter.queries - before[0])
                    commits.append(counter.commits - before[1])
    finally:
        if step_writer.retried:
            print(f"  ({step_writer.retried} batches failed and were written record by record)")
        step_writer.stop(owner)
        connection.close()
    return statistics.median(cpu), statistics.median(statements), statistics.median(commits)


def thread_cpu(thread: threading.Thread) -> float:
    clock = time.pthread_getcpuclockid(thread.ident)
    return time.clock_gettime(clock)


if __name__ == "__main__":
    main()
