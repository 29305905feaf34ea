"""Resuming a research from its checkpoints (issue 26): the tree is queued again, and every
agent that had not ended goes on from its last completed step (agents.loop.checkpoints).

What goes on: the root, and below it every sub-agent whose ending was an interruption (or
that ended only because the agent that spawned it did). A sub-agent that finished keeps its
report and is not run again; its parent's checkpoint already counts it as spawned, and as
collected once its report was read. Events go on from the tree's last sequence number (the
root row's counter), and a `Resume` row keeps what the tree had spent before, so the ledger
reads first attempt and resume apart while the cost cap counts both.
"""

from decimal import Decimal

from django.conf import settings
from django.db import transaction
from django.db.models import Sum
from django.utils import timezone

from research import endings
from research.errors import InvalidInput, NotResumable
from research.events import RunStateChanged, publish, tree_lock
from research.models import Checkpoint, LLMCall, Resume, Run, RunState, State, Status
from research.services.announce import roots_queued
from research.services.runs import working_roots_check


def resumable_runs(*, root: Run) -> list[Run]:
    """The runs of the tree that go on when it is resumed, parents first: the root, then each
    sub-agent that ended by an interruption under a run that goes on, unless that run had
    already read its end."""
    tree = list(
        Run.objects.filter(root_id=root.pk)
        .order_by("depth", "id")
        .only("pk", "parent_id", "status", "error")
    )
    going_on = {root.pk}
    chosen = [run for run in tree if run.pk == root.pk]
    read: dict[int, set[int]] = {}
    for run in tree:
        if run.pk == root.pk or run.parent_id not in going_on:
            continue
        if run.parent_id not in read:
            read[run.parent_id] = _collected_by(run.parent_id)
        # A failure its parent has read is part of the parent's conversation: it stays.
        if run.pk in read[run.parent_id]:
            continue
        if endings.resumable_with_parent(status=run.status, error=run.error):
            going_on.add(run.pk)
            chosen.append(run)
    return chosen


def _collected_by(run_id: int) -> set[int]:
    """The sub-agents whose ends the run had read at its last checkpoint."""
    state = (
        Checkpoint.objects.filter(run_id=run_id)
        .order_by("-number")
        .values_list("state", flat=True)
        .first()
    )
    return set((state or {}).get("collected", []))


@transaction.atomic
def research_resume(*, run: Run, by: str = Resume.By.ANALYST) -> Resume:
    """Queue an interrupted research again, from its checkpoints. Refused (NotResumable, a
    409) for a research that ended done, was cancelled, or still works."""
    if not run.is_root:
        raise InvalidInput(
            f"run {run.pk} is a sub-agent: resume its research (run {run.root_id}).", field="id"
        )
    tree_lock(root_id=run.pk)
    run.refresh_from_db(fields=["status", "error", "tree_cost_usd", "event_seq"])
    if not endings.resumable(status=run.status, error=run.error):
        why = endings.not_resumable_why(status=run.status, error=run.error)
        raise NotResumable(f"research {run.pk} cannot be resumed: {why}.")
    if by == Resume.By.ANALYST:  # a worker handing its trees back had them counted already
        working_roots_check(owner=run.owner)
    runs = resumable_runs(root=run)
    ids = [each.pk for each in runs]
    resume = Resume.objects.create(
        root=run,
        by=by,
        ended_with=run.error,
        run_ids=ids,
        cost_before_usd=run.tree_cost_usd,
        seq_before=run.event_seq,
    )
    _stop_clocks_while_down(ids)
    # No worker: the root is claimed as a new one is; its agent starts the sub-agents that go
    # on (agents.loop.checkpoints.restart_children), in the process that runs the tree.
    Run.objects.filter(pk__in=ids).update(
        status=Status.QUEUED,
        state=State.QUEUED,
        worker=None,
        error="",
        finished_at=None,
        cancel_requested=False,
        cancel_reason="",
    )
    RunState.objects.bulk_create(
        [RunState(run_id=pk, state=State.QUEUED, detail=endings.RESUMED) for pk in ids]
    )
    for pk in ids:
        publish(
            root_id=run.pk,
            run_id=pk,
            payload=RunStateChanged(
                status=Status.QUEUED, state=State.QUEUED, detail=endings.RESUMED, resumed=True
            ),
        )
    roots_queued.announce(run.pk)
    return resume


def roots_resume_interrupted(*, root_ids: set[int]) -> list[int]:
    """With RESEARCH_RESUME_INTERRUPTED, resume the researches a stopped or dead worker
    interrupted, each at most RESEARCH_RESUME_MAX_AUTOMATIC times (a research that brings its
    worker down every time must end). Returns the ids resumed."""
    if not settings.RESEARCH_RESUME_INTERRUPTED or not root_ids:
        return []
    resumed = []
    for root in Run.objects.filter(pk__in=root_ids, parent__isnull=True).order_by("id"):
        automatic = Resume.objects.filter(root=root, by=Resume.By.AUTOMATIC).count()
        if automatic >= settings.RESEARCH_RESUME_MAX_AUTOMATIC:
            continue
        try:
            research_resume(run=root, by=Resume.By.AUTOMATIC)
        except (NotResumable, InvalidInput):
            continue  # it ended otherwise meanwhile (done, cancelled)
        resumed.append(root.pk)
    return resumed


def spend_by_attempt(*, root_id: int) -> list[dict[str, object]]:
    """The tree's model spend split at each resume: the first attempt, then each resume, as
    the ledger (LLMCall rows) has it. Each: attempt (1, 2, ...), started_at (None for the
    first), calls, cost_usd."""
    starts = [None, *Resume.objects.filter(root_id=root_id).values_list("at", flat=True)]
    calls = LLMCall.objects.filter(run__root_id=root_id)
    attempts = []
    for number, (start, end) in enumerate(zip(starts, [*starts[1:], None], strict=True), start=1):
        span = calls
        if start is not None:
            span = span.filter(at__gte=start)
        if end is not None:
            span = span.filter(at__lt=end)
        totals = span.aggregate(cost=Sum("cost_usd"), input=Sum("input_tokens"))
        attempts.append(
            {
                "attempt": number,
                "started_at": start,
                "calls": span.count(),
                "cost_usd": totals["cost"] or Decimal(0),
            }
        )
    return attempts


def _stop_clocks_while_down(ids: list[int]) -> None:
    """The time between each run's interruption and now was not worked: it joins the run's
    paused time, or a research resumed after an hour's outage would say it worked an hour
    more (Run.worked_seconds counts from its start to its end, or to now once it goes on)."""
    now = timezone.now()
    runs = list(
        Run.objects.filter(pk__in=ids, started_at__isnull=False, finished_at__isnull=False).only(
            "pk", "finished_at", "paused_seconds"
        )
    )
    for run in runs:
        run.paused_seconds += max(0.0, (now - run.finished_at).total_seconds())
    Run.objects.bulk_update(runs, ["paused_seconds"])
