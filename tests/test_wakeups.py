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
    """The run ids this process's roots_queued wakes, as a pool's claim loop hears them;
    with the listener connected (it wakes its pools once, with 0, when it is)."""
    heard: list[int] = []
    lock = threading.Lock()

    def hear(run_id: int) -> None:
        with lock:
            heard.append(run_id)

    _listener_gone()  # one left by an earlier pool would not wake this one on connecting
    unsubscribe = roots_queued.subscribe(hear)
    wakeups.listen()
    try:
        wait_for(lambda: 0 in heard, message="the listener never connected")
        yield heard
    finally:
        unsubscribe()  # the listener ends with the last pool to wake
        _listener_gone()


def _listener_gone() -> None:
    listener = wakeups._listener
    if listener is not None:
        listener.join(wakeups.CHECK_SECONDS + 5)
        assert not listener.is_alive(), "the listener outlived its pools"


def _settled(heard: list[int], run_id: int, count: int) -> None:
    """Wait until `run_id` was heard `count` times, then long enough for a NOTIFY's echo."""
    wait_for(lambda: heard.count(run_id) >= count, message=f"run {run_id} never woke the pool")
    threading.Event().wait(0.5)


def test_a_root_queued_here_wakes_the_pools_once(woken):
    with transaction.atomic():
        roots_queued.announce(4242)
    _settled(woken, 4242, 1)
    assert woken.count(4242) == 1


def test_a_root_queued_by_another_process_wakes_the_pools(woken):
    params = connections["default"].get_connection_params()
    with psycopg.connect(**params, autocommit=True) as other:
        other.execute("SELECT pg_notify('canopy_root_queued', '4343:another-process.1')")
        other.execute("SELECT pg_notify('canopy_root_queued', '4444')")  # an older process's
    _settled(woken, 4444, 1)
    assert (woken.count(4343), woken.count(4444)) == (1, 1)
