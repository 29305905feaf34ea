"""`manage.py runagents`: an agent worker, the production way to run Canopy's agents.

Run the web process with RESEARCH_AGENTS_IN_WEB=false (it only enqueues) and any number of
these, on any number of machines sharing one PostgreSQL and one Redis. Each claims queued
roots (SELECT ... FOR UPDATE SKIP LOCKED: two workers never take the same run), runs every
tree it claimed inside itself, heartbeats, and fails the runs of workers that died.
"""

import logging
import signal
import threading
from types import FrameType

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connections

from agents import hosting
from research.services import INTERRUPTED

log = logging.getLogger(__name__)


class Command(BaseCommand):
    help = (
        "Run research agents in this process until SIGTERM or SIGINT: claim queued research "
        "runs from the database, run each tree here, heartbeat, and fail the runs of agent "
        "processes that died. On SIGTERM or SIGINT every working agent ends with the error "
        f'"{INTERRUPTED}" (with RESEARCH_RESUME_INTERRUPTED=true, after the step it is in, '
        "and its research is resumed by another worker) and the command exits 0. Start as "
        "many as you like, on any machine "
        "that reaches the database and Redis; set RESEARCH_AGENTS_IN_WEB=false on the web "
        "process so that it only enqueues."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--max-agents",
            type=int,
            default=None,
            help="Agents working at once in this process (default: RESEARCH_MAX_AGENTS, "
            f"{settings.RESEARCH_MAX_AGENTS}). An agent waiting for its sub-agents gives its "
            "slot back, so a tree never starves itself.",
        )
        parser.add_argument(
            "--shutdown-timeout",
            type=float,
            default=10.0,
            help="Seconds to let agents end after SIGTERM before their runs are failed anyway "
            "(an agent inside a model call sees the stop when the call returns). Default 10.",
        )

    def handle(self, *args: object, max_agents: int | None, shutdown_timeout: float, **options):
        if max_agents is not None and max_agents < 1:
            raise CommandError("--max-agents must be at least 1")
        stop = threading.Event()
        _on_stop_signals(stop)

        pool = hosting.serve_as_worker(max_agents=max_agents)
        log.info(
            "worker %s: running up to %d agents; SIGTERM or Ctrl-C stops it",
            pool.worker_id,
            pool.max_active,
        )
        try:
            # Short waits: the main thread must come back to Python for the handlers to run.
            while not stop.wait(0.5):
                pass
            log.info("worker %s: stopping; working agents are interrupted", pool.worker_id)
        finally:
            pool.shutdown(reason=INTERRUPTED, timeout=shutdown_timeout)
            _close_database()
        log.info("worker %s: stopped", pool.worker_id)


def _on_stop_signals(stop: threading.Event) -> None:
    def handler(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)


def _close_database() -> None:
    """Return this thread's connections, then close the connection pools, so the server sees
    the worker's sessions end now rather than when their sockets time out."""
    connections.close_all()
    for connection in connections.all(initialized_only=True):
        close_pool = getattr(connection, "close_pool", None)
        if close_pool is not None:
            close_pool()
