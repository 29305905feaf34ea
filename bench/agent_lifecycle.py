"""What one agent's start and end cost, phase by phase: the part of an agent that does not
depend on how many model calls it makes.

    .venv/bin/python bench/agent_lifecycle.py --database postgres
    .venv/bin/python bench/agent_lifecycle.py --database sqlite --agents 200

A default research has under three model calls per agent, so what an agent costs to start
and to end weighs as much as its steps (bench/research_cpu.py --threads). This runs
`--agents` sub-agents of one root, one after the other, each through the pool's path (claim,
then agents.loop.lifetime.run_agent) with a model that answers at once and a report citing
one URL, and times each phase on the agent's thread: its CPU (the thread's own clock), SQL
statements and commits. The phases are the functions the agent calls, wrapped here; the
model call is shown apart. No writer thread: the step record is written in the agent's thread,
and counted under "the model call and its record".
"""

import argparse
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

PROJECT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT))
sys.path.insert(0, str(PROJECT / "bench"))

from step_cost import QueryCounter, configure, prepare_database  # noqa: E402

from agents.llm.scripted import ScriptedLLM, reply  # noqa: E402  (no Django)

# (label, module, function): wrapped in this order; a phase inside another counts once, in
# the outer one. A function this version does not have is skipped (so that one checkout's
# script measures another's code: bench/alternate.py).
PHASES = (
    ("claim", "research.services", "run_claim"),
    ("context and inbox", "agents.runtime.context.AgentContext", "of"),
    ("the agent's set-up (prompt, tools, checkpoints)", "agents.loop.agent.Agent", "__init__"),
    ("the model call and its record", "agents.loop.agent.Agent", "_call_model"),
    ("its answer accepted", "agents.loop.agent.Agent", "_accepted"),
    ("ending its sub-agents (none)", "agents.runtime.tree", "end_subagents"),
    ("closing its inbox", "agents.runtime.tree", "close_inbox"),
    ("checking its citations", "agents.loop.lifetime", "_check"),  # before round seven
    ("checking its citations", "agents.loop.lifetime", "_checked"),
    ("its finish", "agents.runtime.resilience", "record_end"),
)


# Each sub-agent's report cites one URL no agent saw: the check reads the tree's sources.
REPORT = "A short report. Sources: https://example.org/a-page-nobody-read"


def main() -> None:
    options = parse_args()
    with ScriptedLLM(keep_alive=True) as llm, tempfile.TemporaryDirectory() as folder:
        shape = argparse.Namespace(database=options.database, turns=1, agents=1)
        configure(llm.base_url, shape, folder)
        import django

        django.setup()
        prepare_database()
        measured = measure(llm, options)
    report(options, measured)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database", choices=["sqlite", "postgres"], default="postgres")
    parser.add_argument("--agents", type=int, default=100, help="sub-agents measured (100)")
    return parser.parse_args()


class Phases:
    """Each wrapped function's thread CPU, statements and commits, per call."""

    def __init__(self, counter: QueryCounter) -> None:
        self.counter = counter
        self.cpu: dict[str, list[float]] = defaultdict(list)
        self.queries: dict[str, list[int]] = defaultdict(list)
        self.commits: dict[str, list[int]] = defaultdict(list)
        self.inside = False

    def wrap(self, label: str, owner: object, name: str) -> None:
        raw = vars(owner).get(name) if isinstance(owner, type) else None
        original = raw.__func__ if isinstance(raw, classmethod) else getattr(owner, name)
        phases = self

        def timed(*args, **kwargs):
            if phases.inside:  # a phase inside another is the outer one's
                return original(*args, **kwargs)
            phases.inside = True
            queries, commits = phases.counter.queries, phases.counter.commits
            started = time.thread_time()
            try:
                return original(*args, **kwargs)
            finally:
                phases.cpu[label].append(time.thread_time() - started)
                phases.queries[label].append(phases.counter.queries - queries)
                phases.commits[label].append(phases.counter.commits - commits)
                phases.inside = False

        setattr(owner, name, classmethod(timed) if isinstance(raw, classmethod) else timed)


def _owner(path: str) -> object:
    import importlib

    try:
        return importlib.import_module(path)
    except ModuleNotFoundError:
        module, _, attribute = path.rpartition(".")
        return getattr(importlib.import_module(module), attribute)


def measure(llm: ScriptedLLM, options: argparse.Namespace) -> dict:
    from django.contrib.auth.models import User

    from agents.loop.lifetime import run_agent
    from agents.runtime.context import CancelToken
    from research import services
    from research.services.launch import Launch

    owner = User.objects.create(username=f"bench-lifecycle-{time.time()}")
    root = services.run_start(owner=owner, topic=f"lifecycle {time.time()}", throttle=False)
    services.run_claim(run_id=root.pk)
    tasks = [f"lifecycle task {index} {time.time()}" for index in range(options.agents + 1)]
    for task in tasks:
        llm.script(task, reply(REPORT))
    children = [
        services.subagent_create(
            parent_id=root.pk,
            # Its tools as a spawn records them: its kind's research tools that its parent
            # has, and the remote tools its parent is offered (none here).
            launch=Launch(
                name=f"part{index}",
                reason="measured",
                task=task,
                max_steps=3,
                kind="researcher",
                tools=["web_search", "read_page"],
            ),
        ).pk
        for index, task in enumerate(tasks)
    ]
    counter = QueryCounter()
    phases = Phases(counter)
    for label, path, name in PHASES:
        owner = _owner(path)
        if hasattr(owner, name):
            phases.wrap(label, owner, name)
    totals: list[float] = []
    total_queries: list[int] = []
    total_commits: list[int] = []
    with counter.counting():
        for index, run_id in enumerate(children):
            queries, commits = counter.queries, counter.commits
            started = time.thread_time()
            claimed = services.run_claim(run_id=run_id)
            # As in a pool, whose cancel watch reads the flags of all its agents at once.
            token = CancelToken(run_id, watched=True)
            run_agent(run_id=run_id, token=token, pool=None, run=claimed)
            if index == 0:  # the first warms the process up (statements prepared, imports)
                phases.cpu.clear()
                phases.queries.clear()
                phases.commits.clear()
                continue
            totals.append(time.thread_time() - started)
            total_queries.append(counter.queries - queries)
            total_commits.append(counter.commits - commits)
    services.run_finish(run_id=root.pk, report="measured")
    return {
        "phases": phases,
        "total_cpu": totals,
        "total_queries": total_queries,
        "total_commits": total_commits,
    }


def report(options: argparse.Namespace, measured: dict) -> None:
    phases: Phases = measured["phases"]
    print(
        f"one sub-agent's life on {options.database}, one model call, median of "
        f"{len(measured['total_cpu'])} (CPU of its thread, statements, commits):"
    )
    for label in dict.fromkeys(label for label, _, _ in PHASES):
        if label not in phases.cpu:
            continue
        print(
            f"  {statistics.median(phases.cpu[label]) * 1000:6.2f} ms"
            f"  {statistics.mean(phases.queries[label]):5.1f} statements"
            f"  {statistics.mean(phases.commits[label]):4.1f} commits  {label}"
        )
    print(
        f"  {statistics.median(measured['total_cpu']) * 1000:6.2f} ms"
        f"  {statistics.mean(measured['total_queries']):5.1f} statements"
        f"  {statistics.mean(measured['total_commits']):4.1f} commits  the whole agent"
    )


if __name__ == "__main__":
    main()
