"""Idle agent processes wake when a research is queued anywhere, and their cancel watches
look when a run is cancelled or given a note anywhere, instead of polling.

What a commit announces (research.services.announce: a root queued, a run flagged) is told
to every other process with PostgreSQL's `NOTIFY <channel>, '<run id>:<origin>'`, sent after
the commit; every agent process LISTENs on a connection of its own and wakes its pools at
once: their claim loops for a root, their cancel watches for a flag. The notification comes
back to the process that sent it too, whose pools the announcement woke already: it drops
those of its own origin, which would cost a claim statement, or a read of every agent's
flags, for nothing. (A pool of this process that subscribes between an announcement and
its commit is not woken by it: its poll finds the root.) The pools still look every
RESEARCH_CLAIM_POLL_SECONDS and RESEARCH_CANCEL_WATCH_SECONDS for what no notification
announced (a root handed back by a dead worker, a notification lost while a listener
reconnected).

PostgreSQL rather than Redis: the database is already the queue, and a NOTIFY is delivered
only by the commit that makes the root claimable (or the flag readable), never before it.
SQLite runs everything in one process, where the announcements wake the pool directly.
"""

import functools
import logging
import os
import select
import threading
import time
import uuid

from django.db import connection, connections

from research.services.announce import Announcement, roots_queued, runs_flagged

log = logging.getLogger(__name__)

ANNOUNCEMENTS = {told.channel: told for told in (roots_queued, runs_flagged)}
RECONNECT_SECONDS = 2.0
CHECK_SECONDS = 1.0  # how often the listener checks that a pool still wants waking

_listener: threading.Thread | None = None
_listener_lock = threading.Lock()


def _postgresql() -> bool:
    return connections["default"].vendor == "postgresql"


# This process among all that listen: a forked child (a new pid) is another origin.
_BOOT = uuid.uuid4().hex[:12]


def _origin() -> str:
    return f"{_BOOT}.{os.getpid()}"


def _tell(channel: str, run_id: int) -> None:
    """Tell every agent process (called after the commit)."""
    if not _postgresql():
        return
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_notify(%s, %s)", [channel, f"{run_id}:{_origin()}"])
    except Exception:  # the pools' polls still find it: a lost wake-up only delays it
        log.warning("could not tell the agent processes of run %s (%s)", run_id, channel)


_TELLERS = {channel: functools.partial(_tell, channel) for channel in ANNOUNCEMENTS}


def install() -> None:
    """Tell the other processes of every announcement made in this one (once per process)."""
    for channel, announcement in ANNOUNCEMENTS.items():
        if _TELLERS[channel] not in announcement.callbacks:
            announcement.subscribe(_TELLERS[channel])


def wake_local(announcement: Announcement, run_id: int) -> None:
    """Wake this process's pools as if it had been announced here; never tell it again."""
    for callback in list(announcement.callbacks):
        if callback is not _TELLERS[announcement.channel]:
            callback(run_id)


def listen() -> None:
    """Start this process's listener thread, once; a no-op without PostgreSQL."""
    global _listener
    if not _postgresql():
        return
    with _listener_lock:
        if _listener is None or not _listener.is_alive():
            _listener = threading.Thread(target=_listen_forever, name="wakeups", daemon=True)
            _listener.start()


def _wakers() -> bool:
    """Whether this process still has a pool to wake (pools unsubscribe when they stop)."""
    teller = _TELLERS[roots_queued.channel]
    return any(callback is not teller for callback in roots_queued.callbacks)


def _listen_forever() -> None:
    """Listen while this process has pools; then close the connection and end, so no
    connection outlives them (a test database could not be dropped under it)."""
    import psycopg

    params = connections["default"].get_connection_params()
    while _wakers():
        try:
            with psycopg.connect(**params, autocommit=True) as listener:
                for channel in ANNOUNCEMENTS:
                    listener.execute(f"LISTEN {channel}")
                # Anything announced while (re)connecting: the pools look once now.
                for announcement in ANNOUNCEMENTS.values():
                    wake_local(announcement, 0)
                while _wakers():
                    # Waits in select(), not in notifies(timeout=...): psycopg's own wait
                    # wakes ten times a second to look for Ctrl-C, which was the most of
                    # this thread's CPU in an idle process.
                    readable, _, _ = select.select([listener.fileno()], [], [], CHECK_SECONDS)
                    if not readable:
                        continue
                    origin = _origin()
                    for notify in listener.notifies(timeout=0):  # what came, no waiting
                        run, _, told_by = notify.payload.partition(":")
                        if told_by == origin:
                            continue  # announced here: the pools were woken then
                        wake_local(ANNOUNCEMENTS[notify.channel], int(run) if run.isdigit() else 0)
        except Exception as error:
            log.warning("wake-up listener: %s; reconnecting", type(error).__name__)
            time.sleep(RECONNECT_SECONDS)
