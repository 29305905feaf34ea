"""Canopy's own cost per agent step: one agent, N turns of a cheap tool call, a model that
answers at once. What is left of the wall time once the model calls are taken out is
Canopy's: its writes (states, usage, steps, events), its reads and the loop.

    .venv/bin/python bench/step_cost.py --database sqlite --turns 40
    .venv/bin/python bench/step_cost.py --database postgres --turns 40

The agent runs in this process's main thread, so the query log sees every statement it
makes. It prints, per step: Canopy's milliseconds (median of --repeat runs), SQL queries and
transactions.
"""

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

PROJECT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT))

from agents.llm.scripted import ScriptedLLM, call, reply  # noqa: E402  (no Django)

POSTGRES_URL = "postgres://postgres@127.0.0.1:5432/canopy_bench"


def main() -> None:
    options = parse_args()
    with ScriptedLLM() as llm, tempfile.TemporaryDirectory() as folder:
        configure(llm, options, folder)
        import django

        django.setup()
        prepare_database()
        figures = [measure(llm, options, index) for index in range(options.repeat)]
        report(options, figures)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--turns", type=int, default=40, help="tool-call turns (40)")
    parser.add_argument("--repeat", type=int, default=5, help="runs measured (5)")
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
        if not db.execute("SELECT 1 FROM pg_database WHERE datname = 'canopy_bench'").fetchone():
            db.execute("CREATE DATABASE canopy_bench")


class QueryCounter:
    """Counts the statements of this thread's connection."""

    def __init__(self) -> None:
        self.queries = 0

    def __call__(self, execute, sql, params, many, context):
        self.queries += 1
        return execute(sql, params, many, context)


def measure(llm: ScriptedLLM, options: argparse.Namespace, index: int) -> dict[str, float]:
    from django.contrib.auth.models import User
    from django.db import connection

    from agents.loop.agent import run_agent
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
    counter = QueryCounter()
    commits_before = _commits(connection)
    started = time.perf_counter()
    with connection.execute_wrapper(counter):
        run_agent(run_id=run.pk, token=CancelToken(run.pk), pool=None)
    wall = time.perf_counter() - started
    commits = _commits(connection) - commits_before
    model_ms = sum(LLMCall.objects.filter(run=run).values_list("latency_ms", flat=True))
    steps = options.turns + 1
    return {
        "canopy_ms": (wall * 1000 - model_ms) / steps,
        "model_ms": model_ms / steps,
        "queries": counter.queries / steps,
        "commits": commits / steps,
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
    print(f"canopy ms per step (median): {median('canopy_ms'):.2f}  (goal < 3)")
    print(f"model ms per step (median): {median('model_ms'):.2f}")
    print(f"queries per step: {median('queries'):.1f}")
    if options.database == "postgres":
        print(f"commits per step (whole server, approx.): {median('commits'):.1f}")


if __name__ == "__main__":
    main()
