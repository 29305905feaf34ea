"""Idle agent processes wake when a research is queued anywhere, instead of polling.

A root queued in one process (the web process, the CLI) is announced, once its transaction
has committed, with PostgreSQL's `NOTIFY canopy_root_queued, '<run id>'`; every agent process
LISTENs on a connection of its own and wakes its pools' claim loops at once. The claim
loops still look every RESEARCH_CLAIM_POLL_SECONDS, for what no notification announces (a
root handed back by a dead worker, a notification lost while a listener reconnected).

PostgreSQL rather than Redis: the database is already the queue, and a NOTIFY is delivered
only by the commit that makes the root claimable, never before it. SQLite runs everything
in one process, where the in-process hook (`on_root_queued`) wakes the pool directly.
"""

import logging
import threading
import time

from django.db import connection, connections

from research.services import on_root_queued
from research.services import runs as runs_service

log = logging.getLogger(__name__)

CHANNEL = "canopy_root_queued"
RECONNECT_SECONDS = 2.0
CHECK_SECONDS = 1.0  # how often the listener checks that a pool still wants waking

_listener: threading.Thread | None = None
_listener_lock = threading.Lock()


def _postgresql() -> bool:
    return connections["default"].vendor == "postgresql"


def announce(run_id: int) -> None:
    """Tell every agent process a root was queued (called after the commit)."""
    if not _postgresql():
        return
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_notify(%s, %s)", [CHANNEL, str(run_id)])
    except Exception:  # the poll still finds it: a lost wake-up only delays the claim
        log.warning("could not announce research %s to the agent processes", run_id)


def install() -> None:
    """Announce every root queued by this process (once per process)."""
    if announce not in runs_service._on_root_queued:
        on_root_queued(announce)


def wake_local(run_id: int) -> None:
    """Wake this process's pools as if the root had been queued here; never re-announce."""
    for callback in list(runs_service._on_root_queued):
        if callback is not announce:
            callback(run_id)


def listen() -> None:
    """Start this process's listener thread, once; a no-op without PostgreSQL."""
    global _listener
    if not _postgresql():
        return
    with _listener_lock:
        if _listener is None or not _listener.is_alive():
            _listener = threading.Thread(target=_listen_forever, name="root-wakeup", daemon=True)
            _listener.start()


def _wakers() -> bool:
    """Whether this process still has a pool to wake (pools unregister when they stop)."""
    return any(callback is not announce for callback in runs_service._on_root_queued)


def _listen_forever() -> None:
    """Listen while this process has pools; then close the connection and end, so no
    connection outlives them (a test database could not be dropped under it)."""
    import psycopg

    params = connections["default"].get_connection_params()
    while _wakers():
        try:
            with psycopg.connect(**params, autocommit=True) as listener:
                listener.execute(f"LISTEN {CHANNEL}")
                # Anything queued while (re)connecting: the claim loops look once now.
                wake_local(0)
                while _wakers():
                    for notify in listener.notifies(timeout=CHECK_SECONDS):
                        wake_local(int(notify.payload) if notify.payload.isdigit() else 0)
        except Exception as error:
            log.warning("root wake-up listener: %s; reconnecting", type(error).__name__)
            time.sleep(RECONNECT_SECONDS)
