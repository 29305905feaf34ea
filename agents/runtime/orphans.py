"""The sweep of runs a live process can no longer record.

The dead-worker sweep (services.workers_sweep) ends the runs of processes that stopped. A
process that is alive but whose agent thread died without recording its run's end (its
database connection was lost, and a fresh one failed too) keeps heartbeating, so that sweep
never looks at its runs: they would stay working, holding their owner's slots, for the life
of the process. This one notices them: a run of this worker that is active in the database
but that no thread of the pool runs, on two sweeps in a row (a sub-agent is recorded a moment
before its thread starts), is failed.
"""

import logging

from research import endings, services
from research.models import ACTIVE_STATUSES, Run

log = logging.getLogger(__name__)

ORPHANED = endings.ORPHANED


class OrphanSweep:
    def __init__(self) -> None:
        self._suspects: set[int] = set()

    def sweep(self, *, worker_id: int | None, running: set[int]) -> int:
        """Fail this worker's active runs that no thread runs, seen so twice in a row.
        Returns how many were failed."""
        if worker_id is None:
            return 0
        active = set(
            Run.objects.filter(worker_id=worker_id, status__in=ACTIVE_STATUSES).values_list(
                "pk", flat=True
            )
        )
        orphans = active - running
        confirmed = orphans & self._suspects
        self._suspects = orphans - confirmed
        if not confirmed:
            return 0
        failed = services.runs_fail(run_ids=sorted(confirmed), error=ORPHANED)
        log.warning("worker %s: failed %d runs no agent of it could record", worker_id, failed)
        return failed
