"""What an agent does when the parts under it fail: Redis down, its database connection gone.

Two rules (issue 16). A failure in cleanup is logged and never replaces the run's outcome: a
report written is a report kept. And an agent whose database connection died records its end
through a fresh one; when even that fails, the pool's orphan sweep (agents.runtime.orphans) ends the
run later, so a live process never holds runs it can no longer record.
"""

import logging
import time
from collections.abc import Callable, Sequence

from django.db import DatabaseError, InterfaceError, OperationalError

from research import endings, services
from research.models import Citation, Run
from research.selectors.runs import RunFacts
from research.sql import drop_broken_connection

log = logging.getLogger(__name__)

CRASHED = endings.CRASHED
# A fresh connection after a terminated one usually works at once; a restarting server
# takes a few seconds.
RECORD_ATTEMPTS = 4
RECORD_BACKOFF_SECONDS = 0.5


def cleanup(what: str, step: Callable[[], object]) -> None:
    """Run one cleanup step; log its failure and go on (it must not replace the outcome)."""
    try:
        step()
    except Exception:
        log.exception("cleanup failed: %s", what)


def lost_connection(error: BaseException) -> bool:
    return isinstance(error, OperationalError | InterfaceError)


def retrying(what: str, action: Callable[[], object]) -> object:
    """Run a database action; when the connection was lost, again on a fresh one (a few
    times). Other errors, and the last failure, are raised."""
    for attempt in range(1, RECORD_ATTEMPTS + 1):
        try:
            return action()
        except DatabaseError as error:
            if not lost_connection(error) or attempt == RECORD_ATTEMPTS:
                raise
            log.warning("%s: the database connection was lost (%s); retrying", what, error)
            drop_broken_connection()
            time.sleep(RECORD_BACKOFF_SECONDS * (attempt - 1))
    raise AssertionError("unreachable")


def record_end(
    *,
    run_id: int,
    report: str = "",
    error: str = "",
    citations: Sequence[Citation] | None = None,
    replacing: bool = True,
    facts: RunFacts | None = None,
) -> None:
    """Finish the run (with its report's checked citations), through a fresh connection when
    the agent's own was lost. An agent gives its run's `facts`, its records written: its end
    then goes in the process writer's batch (services.run_end_record)."""
    ending = {"report": report, "error": error, "citations": citations, "replacing": replacing}

    def end() -> object:
        if facts is not None:
            return services.run_end_record(facts=facts, **ending)
        return services.run_finish(run_id=run_id, **ending)

    retrying(f"recording the end of run {run_id}", end)


def run_exists(run_id: int) -> bool:
    """Whether the run is still there (read on a fresh connection when the agent's was lost)."""
    drop_broken_connection()
    return bool(retrying(f"reading run {run_id}", lambda: Run.objects.filter(pk=run_id).exists()))


def record_crash(run_id: int) -> bool:
    """An agent crashed: fail its run (unless it was deleted meanwhile). False when even a
    fresh connection could not record it: the orphan sweep will."""
    log.exception("agent of run %s crashed", run_id)
    try:
        if not run_exists(run_id):
            log.info("run %s was deleted while its agent worked", run_id)
            return True
        record_end(run_id=run_id, error=CRASHED)
        return True
    except Exception:
        log.exception("could not record the end of run %s; the orphan sweep will", run_id)
        drop_broken_connection()
        return False
