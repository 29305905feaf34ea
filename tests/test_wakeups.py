"""Wake-ups across processes (research.ops.wakeups) on PostgreSQL: a root queued in another
process wakes this one's pools through NOTIFY, and this process's own announcement wakes
them once, not a second time when its NOTIFY comes back to its listener."""

import threading

import psycopg
import pytest
from django.db import connection, connections, transaction  # noqa: F401 (skipif)

from research.ops import wakeups
from research.services.announce import roots_queued
from tests.conftest import wait_for

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif("connection.vendor != 'postgresql'"),
]


@pytest.fixture
def woken():
    """The run ids this process's roots_queued wakes, as a pool's claim loop hears them,
    once the listener hears notifications (a probe from another origin came through)."""
    heard: list[int] = []
    lock = threading.Lock()

    def hear(run_id: int) -> None:
        with lock:
            heard.append(run_id)

    unsubscribe = roots_queued.subscribe(hear)
    wakeups.listen()
    try:
        _heard_from_elsewhere(heard, 9001)
        yield heard
    finally:
        unsubscribe()  # the listener ends with the last pool to wake


def _heard_from_elsewhere(heard: list[int], run_id: int) -> None:
    """NOTIFY `run_id` from another connection, under another origin, until this process's
    listener wakes the pools with it (the first ones may come before it listens). PostgreSQL
    delivers notifications in the order their transactions committed: one sent after an
    announcement's commit comes after that announcement's own."""
    params = connections["default"].get_connection_params()
    with psycopg.connect(**params, autocommit=True) as other:

        def came() -> bool:
            if run_id not in heard:
                payload = f"{run_id}:elsewhere.1"
                other.execute("SELECT pg_notify('canopy_root_queued', %s)", [payload])
            return run_id in heard

        wait_for(came, message="the listener never heard another process")


def test_a_root_queued_here_wakes_the_pools_once(woken):
    with transaction.atomic():
        roots_queued.announce(4242)
    # Its own NOTIFY, had it come back, would come before this one.
    _heard_from_elsewhere(woken, 4243)
    assert woken.count(4242) == 1


def test_a_root_queued_by_another_process_wakes_the_pools(woken):
    params = connections["default"].get_connection_params()
    with psycopg.connect(**params, autocommit=True) as other:
        other.execute("SELECT pg_notify('canopy_root_queued', '4343:another-process.1')")
        other.execute("SELECT pg_notify('canopy_root_queued', '4444')")  # an older process's
    _heard_from_elsewhere(woken, 4445)
    assert (woken.count(4343), woken.count(4444)) == (1, 1)
