"""Agent processes: registration, heartbeats, claiming queued roots, and failing the runs of
processes that died (crashed, killed, machine lost) so no run stays `working` for ever."""

import os
import socket
from datetime import timedelta

from django.db import transaction
from django.utils import timezone

from research.models import ACTIVE_STATUSES, Run, Status, Worker
from research.services.runs import INTERRUPTED, runs_fail

WORKER_LOST = "interrupted: the worker running it stopped responding"


def worker_register() -> Worker:
    now = timezone.now()
    return Worker.objects.create(hostname=socket.gethostname(), pid=os.getpid(), heartbeat_at=now)


def worker_heartbeat(*, worker_id: int) -> None:
    Worker.objects.filter(pk=worker_id).update(heartbeat_at=timezone.now())


def worker_stop(*, worker_id: int, error: str = INTERRUPTED) -> int:
    """A clean stop: fail what the worker still runs, then mark it stopped."""
    failed = _fail_runs_of(worker_id, error)
    Worker.objects.filter(pk=worker_id).update(stopped_at=timezone.now())
    return failed


def workers_sweep(*, dead_after_seconds: float) -> int:
    """Fail the runs of workers that stopped heartbeating, or that were on this machine and
    whose process is gone (so a restarted server cleans up at once). Returns runs failed."""
    now = timezone.now()
    live = Worker.objects.filter(stopped_at__isnull=True)
    stale = list(live.filter(heartbeat_at__lt=now - timedelta(seconds=dead_after_seconds)))
    hostname = socket.gethostname()
    stale += [
        worker
        for worker in live.filter(hostname=hostname).exclude(pk__in=[w.pk for w in stale])
        if not _pid_alive(worker.pid)
    ]
    failed = 0
    for worker in stale:
        error = INTERRUPTED if worker.hostname == hostname else WORKER_LOST
        failed += _fail_runs_of(worker.pk, error)
        Worker.objects.filter(pk=worker.pk).update(stopped_at=now)
    return failed


def _fail_runs_of(worker_id: int, error: str) -> int:
    run_ids = list(
        Run.objects.filter(worker_id=worker_id, status__in=ACTIVE_STATUSES).values_list(
            "pk", flat=True
        )
    )
    return runs_fail(run_ids=run_ids, error=error)


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@transaction.atomic
def root_claim_next(*, worker_id: int) -> int | None:
    """Take the oldest unclaimed queued root for this worker. SKIP LOCKED lets many workers
    claim at once without waiting on each other or taking the same run twice."""
    run = (
        Run.objects.select_for_update(skip_locked=True, no_key=True)
        .filter(status=Status.QUEUED, parent__isnull=True, worker__isnull=True)
        .order_by("created_at", "id")
        .only("pk")
        .first()
    )
    if run is None:
        return None
    Run.objects.filter(pk=run.pk).update(worker_id=worker_id)
    return run.pk


def root_claim(*, run_id: int, worker_id: int) -> bool:
    """Take one given queued root for this worker (the CLI runs a tree it started itself)."""
    return bool(
        Run.objects.filter(
            pk=run_id, status=Status.QUEUED, parent__isnull=True, worker__isnull=True
        ).update(worker_id=worker_id)
    )
