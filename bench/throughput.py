"""Throughput of `runagents` workers: research runs per second against the scripted LLM.

    createdb -h 127.0.0.1 -U postgres canopy_bench
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/canopy_bench \\
    REDIS_URL=redis://127.0.0.1:6379/15 \\
        .venv/bin/python bench/throughput.py --workers 2 --max-agents 8 --runs 200

Migrates the database if needed, starts a scripted OpenAI-compatible server in this process
(every model turn answers after --delay seconds), starts N workers, enqueues --runs roots at
once (each makes --turns tool calls, then answers), waits until all have ended, and prints
runs per second with the latency of a run. What it measures is Canopy's own overhead (claims,
heartbeats, events, the database): the model is as fast as --delay says.

Use a database of its own: the runs stay, as a look at the admin afterwards may help.
"""

import argparse
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

PROJECT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT))

from agents.llm.scripted import ScriptedLLM, call, reply, slow  # noqa: E402  (no Django)


def main() -> None:
    options = parse_args()
    if not os.environ.get("DATABASE_URL", "").startswith("postgres"):
        sys.exit("set DATABASE_URL to a PostgreSQL database of its own (see the docstring)")
    with ScriptedLLM(keep_alive=True) as llm:
        configure(llm, options)
        import django

        django.setup()
        run_benchmark(llm, options)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=2, help="runagents processes (2)")
    parser.add_argument("--max-agents", type=int, default=8, help="agents per worker (8)")
    parser.add_argument("--runs", type=int, default=100, help="roots enqueued at once (100)")
    parser.add_argument("--turns", type=int, default=2, help="tool calls per run (2)")
    parser.add_argument("--delay", type=float, default=0.05, help="seconds per model turn")
    return parser.parse_args()


def configure(llm: ScriptedLLM, options: argparse.Namespace) -> None:
    """Settings for this process and the workers, which inherit the environment."""
    os.environ.update(
        DJANGO_SETTINGS_MODULE="research.settings",
        OPENAI_BASE_URL=llm.base_url,
        OPENAI_API_KEY="bench",
        RESEARCH_MODEL="scripted",
        RESEARCH_MODEL_PRICES='{"scripted": [1.0, 2.0]}',
        RESEARCH_AGENTS_IN_WEB="false",
        RESEARCH_MAX_WORKING_ROOTS=str(options.runs),
        RESEARCH_CLAIM_POLL_SECONDS=os.environ.get("RESEARCH_CLAIM_POLL_SECONDS", "0.2"),
        LOG_LEVEL="WARNING",
    )


def run_benchmark(llm: ScriptedLLM, options: argparse.Namespace) -> None:
    from django.contrib.auth.models import User
    from django.core.management import call_command

    from research import services
    from research.models import ACTIVE_STATUSES, Run

    call_command("migrate", verbosity=0)
    user, _ = User.objects.get_or_create(username="bench")
    leftovers = Run.objects.filter(owner=user, status__in=ACTIVE_STATUSES)
    services.runs_fail(run_ids=list(leftovers.values_list("pk", flat=True)), error="bench reset")

    stamp = int(time.time())
    topics = [f"bench {stamp} run {i:05d}" for i in range(options.runs)]
    turns = [slow(options.delay, call("web_search", query="q")) for _ in range(options.turns)]
    for topic in topics:
        llm.script(topic, *turns, slow(options.delay, reply("bench report")))

    workers = start_workers(options)
    try:
        started = time.monotonic()
        run_ids = [
            services.run_start(owner=user, topic=topic, throttle=False).pk for topic in topics
        ]
        runs = Run.objects.filter(pk__in=run_ids)
        while runs.filter(status__in=ACTIVE_STATUSES).exists():
            time.sleep(0.1)
        elapsed = time.monotonic() - started
    finally:
        stop_workers(workers)
    report(options, runs, elapsed, requests=len(llm.requests))


def start_workers(options: argparse.Namespace) -> list[subprocess.Popen]:
    from research.models import Worker

    workers = [
        subprocess.Popen(
            [sys.executable, "manage.py", "runagents", "--max-agents", str(options.max_agents)],
            cwd=PROJECT,
        )
        for _ in range(options.workers)
    ]
    pids = [worker.pid for worker in workers]
    deadline = time.monotonic() + 60
    while Worker.objects.filter(pid__in=pids, stopped_at__isnull=True).count() < len(pids):
        if time.monotonic() > deadline or any(w.poll() is not None for w in workers):
            stop_workers(workers)
            sys.exit("the workers did not start")
        time.sleep(0.1)
    return workers


def stop_workers(workers: list[subprocess.Popen]) -> None:
    for worker in workers:
        if worker.poll() is None:
            worker.send_signal(signal.SIGTERM)
    for worker in workers:
        worker.wait(30)


def report(options: argparse.Namespace, runs, elapsed: float, *, requests: int) -> None:
    rows = list(runs.values("status", "worker_id", "created_at", "started_at", "finished_at"))
    done = [row for row in rows if row["status"] == "done"]
    total = [(row["finished_at"] - row["created_at"]).total_seconds() for row in done]
    queued = [(row["started_at"] - row["created_at"]).total_seconds() for row in done]
    per_worker: dict[int, int] = {}
    for row in rows:
        per_worker[row["worker_id"]] = per_worker.get(row["worker_id"], 0) + 1
    model_time = (options.turns + 1) * options.delay
    ceiling = options.workers * options.max_agents / model_time
    print(
        f"{options.workers} workers x {options.max_agents} agents, {options.runs} runs of "
        f"{options.turns + 1} model turns at {options.delay:g} s"
    )
    print(f"  done {len(done)}/{len(rows)} in {elapsed:.2f} s: {len(done) / elapsed:.1f} runs/s")
    print(f"  model requests: {requests / elapsed:.1f}/s")
    print(f"  ceiling if Canopy cost nothing: {ceiling:.1f} runs/s")
    if done:
        print(f"  run latency   p50 {pct(total, 50):.2f} s  p95 {pct(total, 95):.2f} s")
        print(f"  queued before start p50 {pct(queued, 50):.2f} s  p95 {pct(queued, 95):.2f} s")
    print(f"  runs per worker: {sorted(per_worker.values(), reverse=True)}")


def pct(values: list[float], percent: int) -> float:
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[percent - 1]


if __name__ == "__main__":
    main()
