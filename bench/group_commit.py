"""A prototype of group commit, not wired into the product: what a step's records would cost
if one writer per process wrote the records of all its agents in one transaction per batch.

    .venv/bin/python bench/group_commit.py --database postgres
    .venv/bin/python bench/group_commit.py --database sqlite

A step here is what one turn of an agent writes today (research/services/steps.py): a model
call (its ledger row, the run's counters, the roll-up to its root, its transcript step, the
state it goes on to, the usage and state events) and a tool call (its step, the next state,
its event). 120 agents in 20 trees (a root and 5 children each) hand over one step each per
round; the writer takes a batch of them and writes it:

- `per step`: today's shape through the driver alone (no Django): one transaction per model
  call and one per tool call, the statements of steps.py, each its own round trip;
- `batch N`: one transaction for N steps: one UPDATE ... FROM (VALUES ...) for every counter,
  roll-up, state and event number of the batch, RETURNING what the events carry, then one
  multi-row INSERT per table (ledger, steps, states, events), sent in psycopg's pipeline mode
  (PostgreSQL) so that the inserts and the COMMIT are one round trip: two round trips a batch.

It prints ms per step (wall time of the writer, one thread) and statements and commits per
step. The tables are the product's own (migrated in a fresh database); the values are what
the product would write.
"""

import argparse
import json
import os
import sqlite3
import sys
import tempfile
import time
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

PROJECT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT))

DATABASE = os.environ.get("BENCH_GROUP_DATABASE", "canopy_bench_group")
POSTGRES_URL = f"postgres://postgres@127.0.0.1:5432/{DATABASE}"
TREES, CHILDREN = 20, 5
RUNS, STEPS, STATES, CALLS, EVENTS = (
    "gb_agent_research_runs",
    "research_step",
    "gb_agent_research_states",
    "research_llmcall",
    "research_event",
)


def main() -> None:
    options = parse_args()
    with tempfile.TemporaryDirectory() as folder:
        sqlite_path = f"{folder}/group.sqlite3"
        prepare(options, sqlite_path)
        agents = make_tree_runs()
        print(f"database: {options.database}, {len(agents)} agents in {TREES} trees")
        print("| writer | ms per step | statements per step | commits per step |")
        print("| --- | --- | --- | --- |")
        for batch in [0, *options.batches]:
            db = Database(options.database, sqlite_path)
            figures = measure(db, agents, batch=batch, rounds=options.rounds)
            db.close()
            label = "per step (today's shape)" if not batch else f"batch {batch}"
            print(
                f"| {label} | {figures['ms']:.3f} | {figures['statements']:.2f} | "
                f"{figures['commits']:.3f} |"
            )


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--rounds", type=int, default=10, help="steps per agent (10)")
    parser.add_argument("--batches", type=int, nargs="*", default=[8, 32, 120])
    return parser.parse_args()


def prepare(options: argparse.Namespace, sqlite_path: str) -> None:
    url = POSTGRES_URL if options.database == "postgres" else f"sqlite:///{sqlite_path}"
    os.environ.update(DJANGO_SETTINGS_MODULE="research.settings", DATABASE_URL=url)
    os.environ.pop("REDIS_URL", None)
    if options.database == "postgres":
        import psycopg

        with psycopg.connect("postgres://postgres@127.0.0.1:5432/postgres", autocommit=True) as db:
            db.execute(f"DROP DATABASE IF EXISTS {DATABASE} WITH (FORCE)")
            db.execute(f"CREATE DATABASE {DATABASE}")
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)


def make_tree_runs(
    trees: int = TREES, owner: str = "group-commit"
) -> list[tuple[int, int, int | None, int]]:
    """(run id, root id, parent id, depth) of every agent of `trees` new trees, working:
    roots and their children, of a new user named `owner`."""
    from django.contrib.auth.models import User

    from research.models import Run

    user = User.objects.create(username=owner)
    agents = []
    for tree in range(trees):
        root = Run.objects.create(owner=user, topic=f"tree {tree}", model="scripted")
        Run.objects.filter(pk=root.pk).update(root=root, status="working")
        agents.append((root.pk, root.pk, None, 0))
        for child in range(CHILDREN):
            run = Run.objects.create(
                owner=user,
                parent=root,
                root=root,
                depth=1,
                name=f"c{child}",
                topic=f"tree {tree} child {child}",
                model="scripted",
                status="working",
            )
            agents.append((run.pk, root.pk, root.pk, 1))
    from django.db import connection

    connection.close()
    return agents


class Database:
    """A raw driver connection and the placeholders it takes; counts statements and commits."""

    def __init__(self, vendor: str, sqlite_path: str):
        self.vendor = vendor
        self.statements = 0
        self.commits = 0
        if vendor == "postgres":
            import psycopg

            self.connection = psycopg.connect(POSTGRES_URL)
        else:
            self.connection = sqlite3.connect(sqlite_path, isolation_level=None)
            self.connection.execute("PRAGMA journal_mode=WAL")
            self.connection.execute("PRAGMA synchronous=NORMAL")

    def sql(self, text: str) -> str:
        return text if self.vendor == "postgres" else text.replace("%s", "?")

    def begin(self) -> None:
        if self.vendor == "sqlite":
            self.execute("BEGIN IMMEDIATE")
            self.statements -= 1  # counted as its commit, as on PostgreSQL

    def execute(self, text: str, params=()) -> list[tuple]:
        self.statements += 1
        cursor = self.connection.execute(self.sql(text), params)
        return cursor.fetchall() if cursor.description else []

    def commit(self) -> None:
        self.commits += 1
        if self.vendor == "sqlite":
            self.execute("COMMIT")
            self.statements -= 1
        else:
            self.connection.commit()

    def close(self) -> None:
        self.connection.close()


def now() -> str:
    return datetime.now(UTC).isoformat()


def usage_payload(seq, run_id, steps, tokens_in, tokens_out, cost, tree_cost) -> str:
    return json.dumps(
        {
            "seq": seq,
            "type": "run.usage",
            "run": run_id,
            "at": now(),
            "steps": steps,
            "input_tokens": tokens_in,
            "output_tokens": tokens_out,
            "cost_usd": str(cost),
            "tree_cost_usd": str(tree_cost),
        }
    )


def state_payload(seq, run_id, state) -> str:
    return json.dumps({"seq": seq, "type": "run.state", "run": run_id, "at": now(), "state": state})


COST = Decimal("0.000120")


def step_today(db: Database, agent: tuple[int, int, int | None, int]) -> None:
    """The statements of model_call_record and tool_call_record, one transaction each."""
    run_id, root_id, parent_id, depth = agent
    lineage = [run_id] if run_id == root_id else [run_id, root_id]
    ids = ", ".join(["%s"] * len(lineage))
    db.begin()
    (last,) = db.execute(
        f"UPDATE {RUNS} SET event_seq = event_seq + 2 WHERE id = %s RETURNING event_seq",
        [root_id],
    )[0]
    db.execute(
        f"INSERT INTO {CALLS} (run_id, parent_run_id, depth, model, input_tokens, "
        "output_tokens, cost_usd, latency_ms, at) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)",
        [run_id, parent_id, depth, "scripted", 100, 20, str(COST), 1, now()],
    )
    rows = db.execute(
        f"UPDATE {RUNS} SET tree_cost_usd = tree_cost_usd + %s, tree_input_tokens = "
        "tree_input_tokens + %s, tree_output_tokens = tree_output_tokens + %s, "
        "steps = CASE WHEN id = %s THEN steps + 1 ELSE steps END, "
        "input_tokens = CASE WHEN id = %s THEN input_tokens + %s ELSE input_tokens END, "
        "output_tokens = CASE WHEN id = %s THEN output_tokens + %s ELSE output_tokens END, "
        "cost_usd = CASE WHEN id = %s THEN cost_usd + %s ELSE cost_usd END, "
        "state = CASE WHEN id = %s THEN %s ELSE state END "
        f"WHERE id IN ({ids}) RETURNING id, steps, input_tokens, output_tokens, cost_usd, "
        "tree_cost_usd",
        [str(COST), 100, 20, run_id, run_id, 100, run_id, 20, run_id, str(COST)]
        + [run_id, "searching", *lineage],
    )
    own = next(row for row in rows if row[0] == run_id)
    db.execute(
        f"INSERT INTO {STEPS} (run_id, kind, tool, input, output, is_error, at) "
        "VALUES (%s, %s, %s, %s, %s, %s, %s)",
        [run_id, "model", "", '{"tool_calls": [["web_search", "{}"]]}', "", False, now()],
    )
    db.execute(
        f"INSERT INTO {STATES} (run_id, state, detail, at) VALUES (%s, %s, %s, %s)",
        [run_id, "searching", "a query", now()],
    )
    usage = usage_payload(last - 1, run_id, own[1], own[2], own[3], own[4], own[5])
    db.execute(
        f"INSERT INTO {EVENTS} (root_id, seq, type, payload, at) VALUES "
        "(%s, %s, %s, %s, %s), (%s, %s, %s, %s, %s)",
        [root_id, last - 1, "run.usage", usage, now()]
        + [root_id, last, "run.state", state_payload(last, run_id, "searching"), now()],
    )
    db.commit()
    db.begin()
    (seq,) = db.execute(
        f"UPDATE {RUNS} SET event_seq = event_seq + 1 WHERE id = %s RETURNING event_seq",
        [root_id],
    )[0]
    db.execute(
        f"INSERT INTO {STEPS} (run_id, kind, tool, input, output, is_error, at) "
        "VALUES (%s, %s, %s, %s, %s, %s, %s)",
        [run_id, "tool", "web_search", '{"query": "q"}', "results " * 50, False, now()],
    )
    db.execute(
        f"UPDATE {RUNS} SET state = %s WHERE id = %s AND status IN (%s, %s, %s) RETURNING status",
        ["thinking", run_id, "queued", "working", "paused"],
    )
    db.execute(
        f"INSERT INTO {STATES} (run_id, state, detail, at) VALUES (%s, %s, %s, %s)",
        [run_id, "thinking", "", now()],
    )
    db.execute(
        f"INSERT INTO {EVENTS} (root_id, seq, type, payload, at) VALUES (%s, %s, %s, %s, %s)",
        [root_id, seq, "run.state", state_payload(seq, run_id, "thinking"), now()],
    )
    db.commit()


def steps_batched(db: Database, batch: list[tuple[int, int, int | None, int]]) -> None:
    """One transaction for the whole batch: one UPDATE ... FROM (VALUES ...) and one insert
    per table; on PostgreSQL the inserts and the COMMIT go in one pipeline."""
    deltas: dict[
        int, list
    ] = {}  # id -> [steps, in, out, cost, tree_in, tree_out, tree_cost, events]
    for run_id, root_id, _, _ in batch:
        own = deltas.setdefault(run_id, [0, 0, 0, Decimal(0), 0, 0, Decimal(0), 0])
        own[:4] = [own[0] + 1, own[1] + 100, own[2] + 20, own[3] + COST]
        for pk in {run_id, root_id}:
            row = deltas.setdefault(pk, [0, 0, 0, Decimal(0), 0, 0, Decimal(0), 0])
            row[4:7] = [row[4] + 100, row[5] + 20, row[6] + COST]
        deltas[root_id][7] += 3  # usage + two states
    values = ", ".join(["(%s, %s, %s, %s, %s, %s, %s, %s, %s)"] * len(deltas))
    params = []
    for pk, (steps, tin, tout, cost, trin, trout, trcost, events) in deltas.items():
        params += [pk, steps, tin, tout, str(cost), trin, trout, str(trcost), events]
    cast = "::bigint" if db.vendor == "postgres" else ""
    money = "::numeric" if db.vendor == "postgres" else ""
    db.begin()
    rows = db.execute(
        f"UPDATE {RUNS} SET steps = {RUNS}.steps + v.steps, "
        f"input_tokens = {RUNS}.input_tokens + v.tin, output_tokens = {RUNS}.output_tokens + "
        f"v.tout, cost_usd = {RUNS}.cost_usd + v.cost{money}, tree_input_tokens = "
        f"{RUNS}.tree_input_tokens + v.trin, tree_output_tokens = {RUNS}.tree_output_tokens + "
        f"v.trout, tree_cost_usd = {RUNS}.tree_cost_usd + v.trcost{money}, "
        f"state = CASE WHEN v.steps > 0 THEN 'thinking' ELSE {RUNS}.state END, "
        f"event_seq = {RUNS}.event_seq + v.events FROM (SELECT column1 AS id, column2 AS steps, "
        "column3 AS tin, column4 AS tout, column5 AS cost, column6 AS trin, column7 AS trout, "
        f"column8 AS trcost, column9 AS events FROM (VALUES {values}) AS vals) AS v "
        f"WHERE {RUNS}.id = v.id{cast} RETURNING {RUNS}.id, {RUNS}.steps, {RUNS}.input_tokens, "
        f"{RUNS}.output_tokens, {RUNS}.cost_usd, {RUNS}.tree_cost_usd, {RUNS}.event_seq",
        params,
    )
    after = {row[0]: row[1:] for row in rows}
    next_seq = {
        pk: after[pk][5] - deltas[pk][7] + 1 for pk in deltas if deltas[pk][7] and pk in after
    }
    calls, steps, states, events = [], [], [], []
    for run_id, root_id, parent_id, depth in batch:
        at = now()
        calls += [run_id, parent_id, depth, "scripted", 100, 20, str(COST), 1, at]
        steps += [run_id, "model", "", '{"tool_calls": [["web_search", "{}"]]}', "", False, at]
        steps += [run_id, "tool", "web_search", '{"query": "q"}', "results " * 50, False, at]
        states += [run_id, "searching", "a query", at, run_id, "thinking", "", at]
        first = next_seq[root_id]
        next_seq[root_id] += 3
        steps_done, tin, tout, cost, tree_cost, _ = after[run_id]
        events += [root_id, first, "run.usage"]
        events += [usage_payload(first, run_id, steps_done, tin, tout, cost, tree_cost), at]
        events += [root_id, first + 1, "run.state"]
        events += [state_payload(first + 1, run_id, "searching"), at]
        events += [root_id, first + 2, "run.state"]
        events += [state_payload(first + 2, run_id, "thinking"), at]
    inserts = [
        (CALLS, "run_id, parent_run_id, depth, model, input_tokens, output_tokens, cost_usd, "
         "latency_ms, at", 9, calls),
        (STEPS, "run_id, kind, tool, input, output, is_error, at", 7, steps),
        (STATES, "run_id, state, detail, at", 4, states),
        (EVENTS, "root_id, seq, type, payload, at", 5, events),
    ]  # fmt: skip
    pipeline = db.connection.pipeline() if db.vendor == "postgres" else None
    if pipeline is not None:
        pipeline.__enter__()
    for table, columns, width, flat in inserts:
        group = "(" + ", ".join(["%s"] * width) + ")"
        db.statements += 1
        db.connection.execute(
            db.sql(
                f"INSERT INTO {table} ({columns}) VALUES "
                + ", ".join([group] * (len(flat) // width))
            ),
            flat,
        )
    db.commit()
    if pipeline is not None:
        pipeline.__exit__(None, None, None)


def measure(db: Database, agents, *, batch: int, rounds: int) -> dict[str, float]:
    records = [agent for _ in range(rounds) for agent in agents]
    started = time.perf_counter()
    if not batch:
        for agent in records:
            step_today(db, agent)
    else:
        for start in range(0, len(records), batch):
            steps_batched(db, records[start : start + batch])
    elapsed = time.perf_counter() - started
    count = len(records)
    return {
        "ms": elapsed * 1000 / count,
        "statements": db.statements / count,
        "commits": db.commits / count,
    }


if __name__ == "__main__":
    main()
