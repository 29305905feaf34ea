"""The admin's run list at 100,000 runs, served in this process: its time, its statements, and
optionally where the time goes.

    .venv/bin/python bench/admin_list.py                  # 25 requests of the first page
    .venv/bin/python bench/admin_list.py --runs 20000     # a smaller table, quicker
    .venv/bin/python bench/admin_list.py --profile        # and pyinstrument's profile of one

The runs are bench/served.py's lists (its `populate`: finished roots, 60% for one user, the
rest over 999 others), in a database of their own, made once and kept between runs of this
bench (`--fresh` makes it again). The list is requested as a superuser through Django's test
client: the request's whole time in this process (middleware, the admin's queries, its
template), without the network and daphne that `bench/served.py` measures around it.
"""

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

PROJECT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PROJECT))
sys.path.insert(0, str(PROJECT / "bench"))

DATABASE = os.environ.get("BENCH_ADMIN_DATABASE", "canopy_bench_admin")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=100_000, help="runs in the table (100,000)")
    parser.add_argument("--requests", type=int, default=25, help="requests timed (25)")
    parser.add_argument("--fresh", action="store_true", help="make the database again")
    parser.add_argument("--profile", action="store_true", help="pyinstrument's profile of one")
    parser.add_argument("--all", action="store_true", help="every frame in the profile")
    parser.add_argument("--path", default="/admin/research/run/", help="the page requested")
    options = parser.parse_args()
    os.environ["DATABASE_URL"] = f"postgres://postgres@127.0.0.1:5432/{DATABASE}"
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "research.settings")
    os.environ.setdefault("SECRET_KEY", "bench-only-secret-key-not-for-anything-else-0123456789")
    os.environ.setdefault("DEBUG", "false")
    os.environ.setdefault("ALLOWED_HOSTS", "testserver")
    prepare(options)

    from django.contrib.auth.models import User
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    client = Client()
    client.force_login(User.objects.get(username="lister0000"))
    client.get(options.path)  # warm: templates, the first connection
    seconds, cpu = [], []
    for _ in range(options.requests):
        started, began = time.perf_counter(), time.thread_time()
        response = client.get(options.path)
        seconds.append(time.perf_counter() - started)
        cpu.append(time.thread_time() - began)
        assert response.status_code == 200, response.status_code
    with CaptureQueriesContext(connection) as queries:
        client.get(options.path)
    ordered = sorted(seconds)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    print(f"{options.path} at {options.runs:,} runs, {options.requests} requests:")
    print(
        f"  wall p50 {statistics.median(seconds) * 1000:.1f} ms, p95 {p95 * 1000:.1f} ms; "
        f"CPU p50 {statistics.median(cpu) * 1000:.1f} ms; {len(response.content):,} bytes"
    )
    print(f"  {len(queries)} statements:")
    for query in queries.captured_queries:
        print(f"    {float(query['time']) * 1000:6.1f} ms  {query['sql'][:150]}")
    if options.profile:
        from pyinstrument import Profiler

        with Profiler(interval=0.0005) as profiler:
            for _ in range(5):
                client.get(options.path)
        print(profiler.output_text(unicode=True, color=False, show_all=options.all))


def prepare(options: argparse.Namespace) -> None:
    """Django set up on the bench's database, with its runs inserted once."""
    import django
    import psycopg

    with psycopg.connect("postgres://postgres@127.0.0.1:5432/postgres", autocommit=True) as db:
        exists = db.execute("SELECT 1 FROM pg_database WHERE datname = %s", [DATABASE]).fetchone()
        if options.fresh or not exists:
            db.execute(f"DROP DATABASE IF EXISTS {DATABASE} WITH (FORCE)")
            db.execute(f"CREATE DATABASE {DATABASE}")
            exists = None
    django.setup()
    import served
    from django.contrib.auth.models import User
    from django.core.management import call_command

    from research.models import Run

    call_command("migrate", verbosity=0)  # a kept database gets the newer migrations too
    if exists:
        if Run.objects.count() == options.runs:
            return
        raise SystemExit(f"{DATABASE} holds another number of runs: run with --fresh")
    heavy = served.populate(total=options.runs)
    User.objects.filter(username=heavy).update(is_staff=True, is_superuser=True)
    # As autovacuum leaves a table at rest: its visibility map set, so a count reads the index.
    with psycopg.connect(os.environ["DATABASE_URL"], autocommit=True) as db:
        db.execute(f"VACUUM ANALYZE {Run._meta.db_table}")


if __name__ == "__main__":
    main()
