"""Canopy's own cost per agent step: one agent, N turns of a cheap tool call, a model that
answers at once. What is left of the wall time once the model's own time is taken out is
Canopy's: the HTTP exchange and the model client, its writes (states, usage, steps, events),
its reads and the loop. The model's own time is the scripted server's, by its clock: each
request from its request line's arrival to its answer's last byte (its Python parsing the
conversation and writing the answer, 0.5 to 0.7 ms a call on this machine, which rounds one to
ten counted as Canopy's).

    .venv/bin/python bench/step_cost.py --database sqlite --turns 40
    .venv/bin/python bench/step_cost.py --database postgres --turns 40

The agent runs in this process's main thread and hands its step records to the process's
writer thread (research.services.writer) as it does in a pool; `--inline` writes them in the
agent's thread instead, as before group commit. The scripted model runs in a process of its
own, as a real model's endpoint is elsewhere: its Python does not take this process's GIL
while the agent waits on its answer. `--model-here` runs it in this process's threads, as
rounds one to nine of issue 25 measured. It prints, per step (medians of --repeat runs):
Canopy's milliseconds, the CPU of the agent's and the writer's threads together (the model
client included) and the whole process's, SQL statements and commits of every connection (each
transaction committed, and each statement run outside one, which the database commits on its
own), on either database. `--statements` lists the statements of the last run, grouped, most
frequent first.
"""

import argparse
import multiprocessing
import os
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

PROJECT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT))

from agents.llm.scripted import ScriptedLLM, call, reply  # noqa: E402  (no Django)

POSTGRES_DATABASE = os.environ.get("BENCH_STEP_DATABASE", "canopy_bench")
POSTGRES_URL = f"postgres://postgres@127.0.0.1:5432/{POSTGRES_DATABASE}"
# Each turn's arguments, by turn: a plan of new items each time, so that every turn writes.
TOOLS = {
    "cancel_subagent": lambda turn: {"name": "nobody"},
    "web_search": lambda turn: {"query": "nothing"},
    "write_plan": lambda turn: {"items": [f"item {turn}"]},
}


def main() -> None:
    options = parse_args()
    scripts = {
        topic(index, agent): [
            call(options.tool, **TOOLS[options.tool](turn)) for turn in range(options.turns)
        ]
        + [reply("done")]
        for index in range(options.repeat)
        for agent in range(options.agents)
    }
    model = ModelHere(scripts) if options.model_here else ModelProcess(scripts)
    with model, tempfile.TemporaryDirectory() as folder:
        configure(model.base_url, options, folder)
        import django

        django.setup()
        prepare_database()
        figures = [measure(options, index, model) for index in range(options.repeat)]
        report(options, figures)
        if options.statements:
            print_statements(figures[-1]["statements"], steps=options.turns + 1)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--turns", type=int, default=40, help="tool-call turns (40)")
    parser.add_argument("--repeat", type=int, default=5, help="runs measured (5)")
    parser.add_argument("--statements", action="store_true", help="list the statements")
    parser.add_argument("--inline", action="store_true", help="no writer thread (as before)")
    parser.add_argument("--agents", type=int, default=1, help="agents at once, each a thread (1)")
    parser.add_argument(
        "--model-here", action="store_true", help="the scripted model in this process's threads"
    )
    parser.add_argument(
        "--tool",
        choices=sorted(TOOLS),
        default="cancel_subagent",
        help="the cheap tool of each turn: cancel_subagent acts and refuses (no write: the "
        "agent does not wait for its records, since round thirteen; no read either since "
        "round eighteen, as the agent has never spawned), write_plan "
        "acts and writes (a plan version and its event, after the agent's records), "
        "web_search reads (no provider set: no query; the agent does not wait) "
        "(cancel_subagent)",
    )
    return parser.parse_args()


STARTED = time.time()


def topic(index: int, agent: int) -> str:
    return f"step cost {index}.{agent} {STARTED}"


class ModelHere:
    """The scripted model in this process's threads, serving `scripts` (task: turns)."""

    def __init__(self, scripts: dict[str, list]) -> None:
        self.llm = ScriptedLLM(keep_alive=True)
        for task, turns in scripts.items():
            self.llm.script(task, *turns)

    def __enter__(self) -> "ModelHere":
        self.base_url = self.llm.start().base_url
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.llm.stop()

    def answering_seconds(self) -> float:
        return self.llm.answering_seconds


class ModelProcess:
    """The scripted model in a child process, serving `scripts` (task: turns) until the
    block ends; `base_url` is its address."""

    def __init__(self, scripts: dict[str, list]) -> None:
        self.scripts = scripts

    def __enter__(self) -> "ModelProcess":
        context = multiprocessing.get_context("fork")  # before Django is set up
        ours, theirs = context.Pipe()
        self.process = context.Process(target=self._serve, args=(theirs,), daemon=True)
        self.process.start()
        self.base_url = ours.recv()
        self.pipe = ours
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.pipe.send("stop")
        self.process.join(5)

    def _serve(self, pipe) -> None:
        with ScriptedLLM(keep_alive=True) as llm:
            for task, turns in self.scripts.items():
                llm.script(task, *turns)
            pipe.send(llm.base_url)
            while pipe.recv() == "answering":
                pipe.send(llm.answering_seconds)

    def answering_seconds(self) -> float:
        self.pipe.send("answering")
        return self.pipe.recv()


def configure(base_url: str, options: argparse.Namespace, folder: str) -> None:
    database = f"sqlite:///{folder}/bench.sqlite3" if options.database == "sqlite" else POSTGRES_URL
    os.environ.update(
        DJANGO_SETTINGS_MODULE="research.settings",
        DATABASE_URL=database,
        OPENAI_BASE_URL=base_url,
        OPENAI_API_KEY="bench",
        RESEARCH_MODEL="scripted",
        RESEARCH_MODEL_PRICES='{"scripted": [1.0, 2.0]}',
        RESEARCH_AGENTS_IN_WEB="false",
        RESEARCH_MAX_STEPS_LIMIT=str(max(40, options.turns + 1)),
        RESEARCH_MAX_WORKING_ROOTS=str(max(3, options.agents)),
        SEARCH_PROVIDER="",
    )
    os.environ.pop("REDIS_URL", None)


@contextmanager
def django_in_process(database: str, **environment: str) -> Iterator[None]:
    """Django set up in this process on `database` ("postgres" or "sqlite", in a folder of
    its own), the bench's database migrated, no model to call, `environment` on top: for the
    benchmarks that time one service in process (start_cost, spawn_cost, writer_batch)."""
    with tempfile.TemporaryDirectory() as folder:
        shape = argparse.Namespace(database=database, turns=1, agents=1)
        configure("http://127.0.0.1:9/v1", shape, folder)  # nothing listens: no model is called
        os.environ.update(environment)
        import django

        django.setup()
        prepare_database()
        yield


def statements_of(call: Callable[[], object]) -> list[str]:
    """The statements one `call` sends as Django's query log has them (a transaction's BEGIN
    and COMMIT among them), each cut to 150 characters to be listed."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as queries:
        call()
    return [query["sql"][:150] for query in queries.captured_queries]


def prepare_database() -> None:
    from django.conf import settings
    from django.core.management import call_command

    if settings.DATABASES["default"]["ENGINE"].endswith("postgresql"):
        create_postgres_database()
    call_command("migrate", verbosity=0)


def medians_by_round(
    measured: Callable[[], tuple[float, float]], *, rounds: int, per_round: int
) -> list[tuple[float, float]]:
    """(CPU, wall) medians of each of `rounds` rounds of `per_round` calls of `measured`,
    which returns one call's (CPU, wall), after 20 that warm the process up (imports,
    prepared statements). bench/start_cost.py and bench/spawn_cost.py."""
    for _ in range(20):
        measured()
    medians = []
    for _ in range(rounds):
        figures = [measured() for _ in range(per_round)]
        medians.append(
            (
                statistics.median(cpu for cpu, _ in figures),
                statistics.median(wall for _, wall in figures),
            )
        )
    return medians


def print_profile(profile) -> None:
    """A cProfile.Profile's 45 costliest functions with what they call, then 25 by their own
    time (bench/start_cost.py and bench/spawn_cost.py --profile)."""
    import pstats

    stats = pstats.Stats(profile)
    stats.sort_stats("cumulative").print_stats(45)
    stats.sort_stats("tottime").print_stats(25)


def create_postgres_database() -> None:
    import psycopg

    with psycopg.connect("postgres://postgres@127.0.0.1:5432/postgres", autocommit=True) as db:
        exists = "SELECT 1 FROM pg_database WHERE datname = %s"
        if not db.execute(exists, [POSTGRES_DATABASE]).fetchone():
            db.execute(f"CREATE DATABASE {POSTGRES_DATABASE}")


class QueryCounter:
    """Counts the statements of every thread's connection (the agent's and the writer's),
    those run outside a transaction (each its own commit) and the commits of transactions."""

    def __init__(self) -> None:
        self.queries = 0
        self.commits = 0
        self.statements: Counter[str] = Counter()

    @contextmanager
    def counting(self):
        from django.db.backends.base.base import BaseDatabaseWrapper
        from django.db.backends.utils import CursorWrapper

        execute, commit = CursorWrapper._execute_with_wrappers, BaseDatabaseWrapper.commit
        lock = threading.Lock()
        counter = self

        def counted_execute(cursor, sql, params, many, executor):
            with lock:
                counter.queries += 1
                counter.statements[" ".join(sql.split())[:110]] += 1
                # SQLite's BEGIN of an atomic block runs before the block counts as one.
                if not cursor.db.in_atomic_block and not sql.startswith("BEGIN"):
                    counter.commits += 1
            return execute(cursor, sql, params, many, executor)

        def counted_commit(connection):
            with lock:
                counter.commits += 1
            return commit(connection)

        CursorWrapper._execute_with_wrappers = counted_execute
        BaseDatabaseWrapper.commit = counted_commit
        try:
            yield self
        finally:
            CursorWrapper._execute_with_wrappers = execute
            BaseDatabaseWrapper.commit = commit


def thread_cpu(thread: threading.Thread | None) -> float:
    """Seconds of CPU a live thread has used so far (0 without one)."""
    if thread is None:
        return 0.0
    return time.clock_gettime(time.pthread_getcpuclockid(thread.ident))


def measure(
    options: argparse.Namespace, index: int, model: "ModelHere | ModelProcess"
) -> dict[str, float]:
    from django.contrib.auth.models import User
    from django.db import connection

    from research import services

    owner, _ = User.objects.get_or_create(username="bench")
    runs = []
    for agent in range(options.agents):
        run = services.run_start(
            owner=owner, topic=topic(index, agent), max_steps=options.turns + 1, throttle=False
        )
        services.run_claim(run_id=run.pk)
        runs.append(run.pk)
    writer = services.step_writer
    if not options.inline:
        writer.start(owner)
    counter = QueryCounter()
    commits_before = _commits(connection)
    batches_before = (writer.batches, writer.records)
    try:
        writer_cpu = thread_cpu(writer.thread)
        answering = model.answering_seconds()
        started, process_started = time.perf_counter(), time.process_time()
        with counter.counting():
            agents_cpu = run_agents(runs)
        wall = time.perf_counter() - started
        cpu = agents_cpu + thread_cpu(writer.thread) - writer_cpu
        process_cpu = time.process_time() - process_started
        answering = model.answering_seconds() - answering
    finally:
        writer.stop(owner)
    server_commits = _commits(connection) - commits_before
    model_ms = answering * 1000 / len(runs)  # one agent's, as they wait on theirs together
    steps = options.turns + 1
    every = steps * len(runs)
    batches, records = writer.batches - batches_before[0], writer.records - batches_before[1]
    return {
        "canopy_ms": (wall * 1000 - model_ms) / every,
        "wall_ms": wall * 1000 / every,
        "model_ms": model_ms / steps,
        "cpu_ms": cpu * 1000 / every,
        "process_cpu_ms": process_cpu * 1000 / every,
        "queries": counter.queries / every,
        "commits": counter.commits / every,
        "server_commits": server_commits / every,
        "batch": records / batches if batches else 0.0,
        "statements": counter.statements,
    }


def run_agents(runs: list[int]) -> float:
    """Run each agent to its end, the first in this thread and the others in threads of
    their own, all at once; the CPU seconds of their threads."""
    from django.db import connection

    from agents.loop.lifetime import run_agent
    from agents.runtime.context import CancelToken

    spent: list[float] = []

    def one(run_id: int) -> None:
        started = time.thread_time()
        try:
            run_agent(run_id=run_id, token=CancelToken(run_id), pool=None)
        finally:
            spent.append(time.thread_time() - started)
            if threading.current_thread() is not threading.main_thread():
                connection.close()

    others = [threading.Thread(target=one, args=(run_id,)) for run_id in runs[1:]]
    for thread in others:
        thread.start()
    one(runs[0])
    for thread in others:
        thread.join()
    return sum(spent)


def _commits(connection) -> int:
    """Transactions the server committed in this database so far (PostgreSQL; 0 on SQLite)."""
    if connection.vendor != "postgresql":
        return 0
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
        )
        return cursor.fetchone()[0]


def report(options: argparse.Namespace, figures: list[dict[str, float]]) -> None:
    def median(key: str) -> float:
        return statistics.median(figure[key] for figure in figures)

    runs = f"{options.turns} tool turns + 1 answer, {options.repeat} runs"
    if options.agents > 1:
        runs = f"{options.agents} agents at once, each {runs}"
    writer = "writes in the agent's thread" if options.inline else "writer thread"
    model = "the model in this process" if options.model_here else "the model in its own process"
    print(f"database: {options.database}, {runs} of {options.tool}, {writer}, {model}")
    # With agents at once: the wall time less one agent's model time, over all their steps.
    print(f"canopy ms per step (median): {median('canopy_ms'):.2f}  (goal <= 2)")
    print(f"model ms per step, the scripted server's own (median): {median('model_ms'):.2f}")
    print(f"wall ms per step, the model's included (median): {median('wall_ms'):.2f}")
    print(f"canopy CPU ms per step, model client included (median): {median('cpu_ms'):.2f}")
    print(f"  (agent and writer threads; whole process: {median('process_cpu_ms'):.2f})")
    print(f"statements per step: {median('queries'):.1f}")
    print(f"commits per step: {median('commits'):.2f}")
    if not options.inline:
        print(f"records per batch (median): {median('batch'):.1f}")
    if options.database == "postgres":
        print(f"commits per step (whole server, approx.): {median('server_commits'):.1f}")


def print_statements(statements: Counter[str], *, steps: int) -> None:
    print("statements per step, by statement:")
    for sql, count in statements.most_common():
        print(f"{count / steps:6.2f}  {sql}")


if __name__ == "__main__":
    main()
