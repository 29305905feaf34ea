"""PostgreSQL's connection pool and Canopy's check of it (research.postgresql): an idle
connection is handed out without a round trip, a dead one is replaced, and a server that ended
them all costs one failed check, not one per connection; a statement a connection runs often is
prepared. Against the real server."""

import os
import subprocess
import sys
import threading

import pytest
from django.db import connection

from research.models import Run
from tests.conftest import PROJECT, wait_for
from tests.test_resilience import connections_in_use, terminate_backends

pytestmark = pytest.mark.django_db(transaction=True)


def postgres_only() -> None:
    if connection.vendor != "postgresql":
        pytest.skip("the connection pool is PostgreSQL's")


def last_query_of(pid: int) -> str | None:
    """What the server last ran for backend `pid`; None once the backend is gone."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT query FROM pg_stat_activity WHERE pid = %s", [pid])
        row = cursor.fetchone()
    return row[0] if row else None


def test_the_pool_hands_out_an_idle_connection_without_a_round_trip_and_replaces_a_dead_one():
    """The pool's check (research.postgresql.checks) sends nothing for a connection idle in
    the pool, and one the server ended while it sat there is replaced: the next getconn works."""
    postgres_only()
    from psycopg_pool import ConnectionPool

    from research.postgresql.checks import IdleConnectionCheck

    with ConnectionPool(
        _conninfo(),
        min_size=1,
        max_size=1,
        check=IdleConnectionCheck(),
        kwargs={"autocommit": True},
    ) as pool:
        with pool.connection() as conn:
            pid = conn.execute("SELECT pg_backend_pid() /* canopy-marker */").fetchone()[0]
        with pool.connection() as conn:
            assert conn.info.backend_pid == pid  # the same connection, given out again
            # The server saw nothing from the check: its last query is still the marker.
            assert "canopy-marker" in last_query_of(pid)
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_terminate_backend(%s)", [pid])
        wait_for(lambda: last_query_of(pid) is None, timeout=5)
        with pool.connection(timeout=10) as conn:
            assert conn.info.backend_pid != pid
            assert conn.execute("SELECT 1").fetchone() == (1,)


def _conninfo() -> str:
    db = connection.settings_dict
    return f"host={db['HOST']} port={db['PORT']} user={db['USER']} dbname={db['NAME']}"


def test_one_dead_idle_connection_found_has_the_pool_drop_every_other_the_server_ended():
    """A restart ends every idle connection: the first getconn that meets a dead one has the
    others checked and replaced at once, rather than each costing a later getconn another of
    the pool's growing backoff sleeps (seven dead ones held a thread about 30 s)."""
    postgres_only()
    from psycopg_pool import ConnectionPool

    from research.postgresql.checks import IdleConnectionCheck

    failed: list[int] = []  # the getconn sleeps the pool's backoff after each of these

    class Counted(IdleConnectionCheck):
        def __call__(self, conn) -> None:
            try:
                super().__call__(conn)
            except Exception:
                failed.append(conn.info.backend_pid)
                raise

    check = Counted()
    with ConnectionPool(
        _conninfo(), min_size=4, max_size=4, check=check, kwargs={"autocommit": True}
    ) as pool:
        check.pool = pool
        pool.wait()
        held = [pool.getconn() for _ in range(4)]
        pids = [conn.info.backend_pid for conn in held]
        for conn in held:
            pool.putconn(conn)
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_terminate_backend(pid) FROM unnest(%s::int[]) AS pid", [pids])
        wait_for(lambda: all(last_query_of(pid) is None for pid in pids), timeout=10)

        with pool.connection(timeout=10) as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
            # The one it met failed its check, and the other three went with it.
            assert len(failed) == 1
            assert pool.get_stats()["connections_lost"] == 4
            assert conn.info.backend_pid not in pids
        pool.wait()
        again = [pool.getconn(timeout=10) for _ in range(4)]
        assert not {conn.info.backend_pid for conn in again} & set(pids)
        for conn in again:
            pool.putconn(conn)


def test_django_queries_after_the_servers_end_every_pooled_connection_still_work():
    """Every idle connection of this process's pool is terminated by the server: threads that
    then take one from Django's pool each get a working connection (the check sees the dead
    ones' sockets and the pool replaces them), and give it back."""
    postgres_only()
    from research.postgresql.checks import IdleConnectionCheck

    # Django's pool runs Canopy's check, which knows its pool.
    assert isinstance(connection.pool._check, IdleConnectionCheck)
    assert connection.pool._check.pool is connection.pool
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        (mine,) = cursor.fetchone()
    answers, errors = [], []

    def query() -> None:
        try:
            answers.append(Run.objects.count())
        except Exception as error:  # noqa: BLE001 - the assertion below shows it
            errors.append(repr(error))
        finally:
            connection.close()

    warm = [threading.Thread(target=query) for _ in range(4)]
    for thread in warm:
        thread.start()
    for thread in warm:
        thread.join()
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT array_agg(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> %s",
            [mine],
        )
        (pids,) = cursor.fetchone()
    assert terminate_backends(sparing=mine) > 0
    # Ended while they sat in the pool: the server is done with them before any is taken.
    wait_for(lambda: all(last_query_of(pid) is None for pid in pids), timeout=10)
    threads = [threading.Thread(target=query) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert errors == []
    assert answers == [0] * 8
    # The test's own, and nothing leaked (the replacements of the dead ones join the pool
    # from its worker threads, so the count settles a moment later).
    wait_for(lambda: connections_in_use() == 1, timeout=5, message="a connection leaked")


PREPARED_RUNS = """
import django
django.setup()
from django.db import connection
for _ in range(8):
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM gb_agent_research_runs WHERE id > %s", [0])
with connection.cursor() as cursor:
    cursor.execute(
        "SELECT count(*) FROM pg_prepared_statements WHERE statement LIKE %s",
        ["%gb_agent_research_runs WHERE id >%"],
    )
    print(cursor.fetchone()[0])
"""


@pytest.mark.parametrize(("binding", "prepared"), [("true", "1"), ("false", "0")])
def test_a_statement_a_connection_runs_often_is_prepared_unless_binding_is_off(binding, prepared):
    """With server-side binding (the default), the server parses and plans a statement a
    connection keeps running once, not on every run; DATABASE_SERVER_SIDE_BINDING=false, for
    a pooler that cannot keep prepared statements, prepares none."""
    postgres_only()
    db = connection.settings_dict
    result = subprocess.run(
        [sys.executable, "-c", PREPARED_RUNS],
        cwd=PROJECT,
        env={
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "tests.settings",
            "DATABASE_URL": f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}",
            "DATABASE_SERVER_SIDE_BINDING": binding,
        },
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == prepared


def test_a_thread_that_waits_gives_its_connection_back_once_and_never_inside_a_transaction():
    """What an agent does around every model call and tool turn (research.sql): its
    connection goes back to the pool, a second give-back with none taken is nothing, its
    next query takes one again, and a thread inside a transaction keeps its own."""
    from django.db import connections, transaction

    from research.sql import give_back_connection

    postgres_only()
    seen: dict[str, int] = {}
    failures: list[str] = []

    def waits() -> None:
        db = connections["default"]
        close = db.close
        closes: list[int] = []

        def counted_close() -> None:
            closes.append(1)
            close()

        db.close = counted_close  # this thread's wrapper only
        try:
            baseline = connections_in_use()
            Run.objects.count()
            seen["working"] = connections_in_use() - baseline
            give_back_connection()
            seen["waiting"] = connections_in_use() - baseline
            give_back_connection()
            seen["again"] = connections_in_use() - baseline
            seen["closes"] = len(closes)  # the second found none to give back
            Run.objects.count()
            seen["next query"] = connections_in_use() - baseline
            with transaction.atomic():
                Run.objects.count()
                give_back_connection()
                seen["in a transaction"] = connections_in_use() - baseline
                Run.objects.count()
        except Exception as error:  # noqa: BLE001 - the assertion below shows it
            failures.append(repr(error))
        finally:
            db.close = close
            connection.close()

    thread = threading.Thread(target=waits)
    thread.start()
    thread.join(30)
    assert failures == []
    assert seen == {
        "working": 1,
        "waiting": 0,
        "again": 0,
        "closes": 1,
        "next query": 1,
        "in a transaction": 1,
    }
