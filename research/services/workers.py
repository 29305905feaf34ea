"""Agent processes: registration, heartbeats, claiming queued roots, and failing the runs of
processes that died (crashed, killed, machine lost) so no run stays `working` for ever."""

import os
import socket
from datetime import timedelta

from django.db.models.functions import Now
from django.utils import timezone

from research.endings import SERVER_STOPPED as INTERRUPTED
from research.endings import WORKER_LOST
from research.models import ACTIVE_STATUSES, Run, Status, Worker
from research.services.announce import roots_queued
from research.services.locks import claim_next_root
from research.services.resume import roots_resume_interrupted
from research.services.runs import runs_fail


def worker_register(*, claims_roots: bool = True) -> Worker:
    # The database's clock from the first heartbeat on, like every later one (see below).
    worker = Worker.objects.create(
        hostname=socket.gethostname(),
        pid=os.getpid(),
        heartbeat_at=Now(),
        claims_roots=claims_roots,
    )
    worker.refresh_from_db(fields=["heartbeat_at"])
    return worker


def worker_heartbeat(*, worker_id: int) -> bool:
    """Beat; False when another process's sweep declared this worker dead (or its row was
    deleted), and nothing was written."""
    # The database's clock, not this machine's: a worker whose clock runs ahead must not
    # make healthy workers look dead to the others.
    live = Worker.objects.filter(pk=worker_id, stopped_at__isnull=True)
    return live.update(heartbeat_at=Now()) == 1


def worker_stop(*, worker_id: int, error: str = INTERRUPTED) -> int:
    """A clean stop: fail what the worker still runs, then mark it stopped."""
    failed = _end_runs_of(worker_id, error)
    Worker.objects.filter(pk=worker_id).update(stopped_at=timezone.now())
    _resume_interrupted(worker_id, error)
    return failed


def workers_sweep(*, dead_after_seconds: float) -> int:
    """End the runs of dead workers: on this machine, those whose process is gone (so a
    restarted server cleans up at once); anywhere, those that stopped heartbeating. Returns
    the number of runs failed."""
    live = Worker.objects.filter(stopped_at__isnull=True)
    dead: dict[int, str] = {
        worker.pk: INTERRUPTED
        for worker in live.filter(hostname=socket.gethostname())
        if not _process_alive(worker)
    }
    silent = live.filter(heartbeat_at__lt=Now() - timedelta(seconds=dead_after_seconds))
    for worker_id in silent.exclude(pk__in=dead).values_list("pk", flat=True):
        dead[worker_id] = WORKER_LOST
    failed = 0
    for worker_id, error in dead.items():
        failed += _end_runs_of(worker_id, error)
        Worker.objects.filter(pk=worker_id).update(stopped_at=timezone.now())
        _resume_interrupted(worker_id, error)
    return failed


def _resume_interrupted(worker_id: int, error: str) -> None:
    """With RESEARCH_RESUME_INTERRUPTED, the trees this worker's stop interrupted go back to
    the queue from their checkpoints, for any worker to take up (research.services.resume).
    Its agents ended with `error` themselves (a clean stop) or were failed with it here."""
    roots = Run.objects.filter(worker_id=worker_id, status=Status.FAILED, error=error)
    roots_resume_interrupted(root_ids=set(roots.values_list("root_id", flat=True)))


def _end_runs_of(worker_id: int, error: str) -> int:
    """Fail the runs a worker was running. A root it claimed but never started goes back to
    the queue instead: nothing of it ran, so any other worker may take it."""
    runs = Run.objects.filter(worker_id=worker_id, status__in=ACTIVE_STATUSES)
    unstarted = runs.filter(parent__isnull=True, status=Status.QUEUED, cancel_requested=False)
    requeued = list(unstarted.values_list("pk", flat=True))
    if requeued and unstarted.filter(pk__in=requeued).update(worker=None):
        for run_id in requeued:
            roots_queued.announce(run_id)  # wakes the claim loops, here and (NOTIFY) elsewhere
    run_ids = list(runs.values_list("pk", flat=True))  # re-read: without the requeued
    return runs_fail(run_ids=run_ids, error=error)


# Rows with this process's pid registered before it started are a dead process's: a
# restarted container often gets the same pid again.
_PROCESS_STARTED = timezone.now()


def _process_alive(worker: Worker) -> bool:
    """Whether the process of a worker of this machine still runs."""
    if worker.pid == os.getpid():
        return worker.started_at >= _PROCESS_STARTED
    try:
        os.kill(worker.pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def root_claim_next(*, worker_id: int) -> int | None:
    """Take the oldest unclaimed queued root for this worker: one statement (SKIP LOCKED on
    PostgreSQL, so many workers claim at once without waiting on each other or taking the
    same run twice)."""
    return claim_next_root(worker_id=worker_id)


def roots_ended(*, run_ids: list[int]) -> set[int]:
    """Those of `run_ids` that have ended (or were deleted)."""
    active = set(
        Run.objects.filter(pk__in=run_ids, status__in=ACTIVE_STATUSES).values_list("pk", flat=True)
    )
    return set(run_ids) - active


def root_claim(*, run_id: int, worker_id: int) -> bool:
    """Take one given queued root for this worker (the CLI runs a tree it started itself)."""
    return bool(
        Run.objects.filter(
            pk=run_id, status=Status.QUEUED, parent__isnull=True, worker__isnull=True
        ).update(worker_id=worker_id)
    )
