"""Canopy's own cost per agent step: one agent, N turns of a cheap tool call, a model that
answers at once. What is left of the wall time once the model calls are taken out is
Canopy's: its writes (states, usage, steps, events), its reads and the loop.

    .venv/bin/python bench/step_cost.py --database sqlite --turns 40
    .venv/bin/python bench/step_cost.py --database postgres --turns 40

The agent runs in this process's main thread, so the query log sees every statement it
makes. It prints, per step (medians of --repeat runs): Canopy's milliseconds, the CPU of
the agent's thread (the model client included; the scripted model runs in other threads),
SQL statements and commits (each transaction committed, and each statement run outside
one, which the database commits on its own), on either database. `--statements` lists the
statements of the last run, grouped, most frequent first.
"""

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

PROJECT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT))

from agents.llm.scripted import ScriptedLLM, call, reply  # noqa: E402  (no Django)

POSTGRES_DATABASE = os.environ.get("BENCH_STEP_DATABASE", "canopy_bench")
POSTGRES_URL = f"postgres://postgres@127.0.0.1:5432/{POSTGRES_DATABASE}"


def main() -> None:
    options = parse_args()
    with ScriptedLLM() as llm, tempfile.TemporaryDirectory() as folder:
        configure(llm, options, folder)
        import django

        django.setup()
        prepare_database()
        figures = [measure(llm, options, index) for index in range(options.repeat)]
        report(options, figures)
        if options.statements:
            print_statements(figures[-1]["statements"], steps=options.turns + 1)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--turns", type=int, default=40, help="tool-call turns (40)")
    parser.add_argument("--repeat", type=int, default=5, help="runs measured (5)")
    parser.add_argument("--statements", action="store_true", help="list the statements")
    return parser.parse_args()


def configure(llm: ScriptedLLM, options: argparse.Namespace, folder: str) -> None:
    database = f"sqlite:///{folder}/bench.sqlite3" if options.database == "sqlite" else POSTGRES_URL
    os.environ.update(
        DJANGO_SETTINGS_MODULE="research.settings",
        DATABASE_URL=database,
        OPENAI_BASE_URL=llm.base_url,
        OPENAI_API_KEY="bench",
        RESEARCH_MODEL="scripted",
        RESEARCH_MODEL_PRICES='{"scripted": [1.0, 2.0]}',
        RESEARCH_AGENTS_IN_WEB="false",
        RESEARCH_MAX_STEPS_LIMIT=str(max(40, options.turns + 1)),
    )
    os.environ.pop("REDIS_URL", None)


def prepare_database() -> None:
    from django.conf import settings
    from django.core.management import call_command

    if settings.DATABASES["default"]["ENGINE"].endswith("postgresql"):
        create_postgres_database()
    call_command("migrate", verbosity=0)


def create_postgres_database() -> None:
    import psycopg

    with psycopg.connect("postgres://postgres@127.0.0.1:5432/postgres", autocommit=True) as db:
        exists = "SELECT 1 FROM pg_database WHERE datname = %s"
        if not db.execute(exists, [POSTGRES_DATABASE]).fetchone():
            db.execute(f"CREATE DATABASE {POSTGRES_DATABASE}")


class QueryCounter:
    """Counts the statements of this thread's connection, those run outside a transaction
    (each its own commit) and the commits of transactions."""

    def __init__(self, connection) -> None:
        self.queries = 0
        self.commits = 0
        self.statements: Counter[str] = Counter()
        self.connection = connection

    def __call__(self, execute, sql, params, many, context):
        self.queries += 1
        self.statements[" ".join(sql.split())[:110]] += 1
        # SQLite's BEGIN of an atomic block runs before the block counts as one.
        if not self.connection.in_atomic_block and not sql.startswith("BEGIN"):
            self.commits += 1
        return execute(sql, params, many, context)

    def counting_commits(self):
        """Count the connection's commits meanwhile (Django's commit of an atomic block)."""
        commit = self.connection.commit

        def counted() -> None:
            self.commits += 1
            commit()

        self.connection.commit = counted
        return self


def measure(llm: ScriptedLLM, options: argparse.Namespace, index: int) -> dict[str, float]:
    from django.contrib.auth.models import User
    from django.db import connection

    from agents.loop.lifetime import run_agent
    from agents.runtime.context import CancelToken
    from research import services
    from research.models import LLMCall

    owner, _ = User.objects.get_or_create(username="bench")
    topic = f"step cost {index} {time.time()}"
    llm.script(
        topic,
        *[call("cancel_subagent", name="nobody") for _ in range(options.turns)],
        reply("done"),
    )
    run = services.run_start(owner=owner, topic=topic, max_steps=options.turns + 1)
    services.run_claim(run_id=run.pk)
    counter = QueryCounter(connection).counting_commits()
    commits_before = _commits(connection)
    started, cpu_started = time.perf_counter(), time.thread_time()
    try:
        with connection.execute_wrapper(counter):
            run_agent(run_id=run.pk, token=CancelToken(run.pk), pool=None)
    finally:
        del connection.commit  # the class's own again
    wall = time.perf_counter() - started
    cpu = time.thread_time() - cpu_started
    server_commits = _commits(connection) - commits_before
    model_ms = sum(LLMCall.objects.filter(run=run).values_list("latency_ms", flat=True))
    steps = options.turns + 1
    return {
        "canopy_ms": (wall * 1000 - model_ms) / steps,
        "model_ms": model_ms / steps,
        "cpu_ms": cpu * 1000 / steps,
        "queries": counter.queries / steps,
        "commits": counter.commits / steps,
        "server_commits": server_commits / steps,
        "statements": counter.statements,
    }


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
    print(f"database: {options.database}, {runs}")
    print(f"canopy ms per step (median): {median('canopy_ms'):.2f}  (goal <= 2)")
    print(f"model ms per step (median): {median('model_ms'):.2f}")
    print(f"canopy CPU ms per step, model client included (median): {median('cpu_ms'):.2f}")
    print(f"statements per step: {median('queries'):.1f}")
    print(f"commits per step: {median('commits'):.1f}")
    if options.database == "postgres":
        print(f"commits per step (whole server, approx.): {median('server_commits'):.1f}")


def print_statements(statements: Counter[str], *, steps: int) -> None:
    print("statements per step, by statement:")
    for sql, count in statements.most_common():
        print(f"{count / steps:6.2f}  {sql}")


if __name__ == "__main__":
    main()
