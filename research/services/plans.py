"""A root's plan (seed 001's lead writes one before it launches researchers), its review by
the analyst, and the analyst's notes to the agents of a running research.

The plan is versioned: every write, revision and edit is a new `Plan` row, the latest is the
plan. A research started with `review_plan` pauses after its first plan: the root's thread
ends, the run is `paused` with no worker (a restart finds nothing to fail), and approving it
queues the root again, which resumes from the approved plan.

A note is a `Message` with an author and no sending run. The run's `notes_pending` flag is
what the agent pool's watch reads with the cancel flag, so an agent hears of a note within a
quarter second without a query of its own; it takes its notes at its next round.
"""

from django.conf import settings
from django.db import transaction
from django.db.models import F, Max
from django.utils import timezone

from research.clean import strip_controls, visible
from research.errors import Conflict, InvalidInput
from research.events import RunMessage, RunPlan, RunStateChanged, publish, tree_lock
from research.events.payloads import ANALYST
from research.models import ACTIVE_STATUSES, Message, Plan, Run, RunState, State, Status
from research.services.announce import roots_queued, runs_flagged
from research.services.texts import validate_texts
from research.standing import said

PLAN_ITEM_MAX_CHARS = Run._meta.get_field("plan_item").max_length
REVIEW_DETAIL = "waiting for the analyst to approve the plan"


def validate_plan_items(items: object, *, field: str = "items") -> list[str]:
    cleaned = validate_texts(
        items,
        field=field,
        noun="plan item",
        most=settings.RESEARCH_PLAN_MAX_ITEMS,
        max_chars=PLAN_ITEM_MAX_CHARS,
        count_text="a plan has 1 to {most} items, not {count}.",
    )
    repeated = next((item for item in cleaned if cleaned.count(item) > 1), None)
    if repeated is not None:
        raise InvalidInput(f"plan item {repeated!r} appears twice.", field=field)
    return cleaned


def current_plan(*, root_id: int) -> Plan | None:
    return Plan.objects.filter(root_id=root_id).order_by("-version").first()


@transaction.atomic
def plan_write(*, root_id: int, items: object, author: str = Plan.Author.AGENT) -> Plan:
    """Store a new version of the root's plan and tell the page."""
    items = validate_plan_items(items)
    tree_lock(root_id=root_id)
    current = current_plan(root_id=root_id)
    if current is not None and current.items == items:
        return current  # the same items again: no new version (an approved one stays so)
    latest = Plan.objects.filter(root_id=root_id).aggregate(latest=Max("version"))["latest"]
    plan = Plan.objects.create(
        root_id=root_id, version=(latest or 0) + 1, items=items, author=author
    )
    _publish(plan)
    return plan


def _publish(plan: Plan) -> None:
    publish(
        root_id=plan.root_id,
        run_id=plan.root_id,
        payload=RunPlan(
            version=plan.version,
            items=plan.items,
            author=plan.author,
            approved=plan.approved_at is not None,
        ),
    )


def plan_needs_review(*, root_id: int) -> bool:
    """Whether a root started with `review_plan` has a plan the analyst has not approved: its
    first, or a revision of the approved one (the analyst's approval binds: a lead that
    changes the plan waits for the analyst again)."""
    if not Run.objects.filter(pk=root_id, review_plan=True).exists():
        return False
    plan = current_plan(root_id=root_id)
    return plan is not None and plan.approved_at is None


@transaction.atomic
def plan_pause(*, root_id: int, state: str = State.REVIEWING, detail: str = REVIEW_DETAIL) -> bool:
    """The root waits for the analyst: paused, no worker, no thread (the caller's ends).
    False when it cannot pause: it ended, or a cancel came first (the caller must stop).
    `state` says what it waits for: its plan's review, or answers to its questions."""
    tree_lock(root_id=root_id)
    paused = Run.objects.filter(pk=root_id, status=Status.WORKING, cancel_requested=False).update(
        status=Status.PAUSED, state=state, worker=None, paused_at=timezone.now()
    )
    if paused:
        run = Run.objects.only("started_at", "finished_at", "paused_at", "paused_seconds").get(
            pk=root_id
        )
        worked = run.worked_seconds() or 0
        _clock_state(
            run_id=root_id, status=Status.PAUSED, state=state, detail=detail, worked=worked
        )
    return bool(paused)


def _clock_state(
    *, run_id: int, status: str, state: str, detail: str, worked: float | None
) -> None:
    """A root's move that stops or starts its clock (a pause for the analyst, its resume): the
    row of its timeline and its event, with the time it `worked` so far (the page's clock)."""
    RunState.objects.create(run_id=run_id, state=state, detail=detail)
    publish(
        root_id=run_id,
        run_id=run_id,
        payload=RunStateChanged(
            status=status,
            state=state,
            detail=detail,
            worked_seconds=None if worked is None else round(worked, 3),
        ),
    )


@transaction.atomic
def plan_approve(*, run: Run, items: object = None) -> Plan:
    """Approve the paused root's plan as it is, or as the analyst edited it (a new version),
    and queue the root again: any agent pool resumes it from the approved plan."""
    tree_lock(root_id=run.root_id)
    run.refresh_from_db(fields=["status", "state", "error"])
    if not run.is_root:
        raise Conflict(
            f"run {run.pk} is a sub-agent: only its research (run {run.root_id}) "
            "has a plan to review."
        )
    if run.status != Status.PAUSED or run.state == State.CLARIFYING:
        raise Conflict(f"research {run.pk} is not waiting for a plan review: it {said(run)}.")
    plan = current_plan(root_id=run.pk)
    if items is not None and validate_plan_items(items) != plan.items:
        plan = plan_write(root_id=run.pk, items=items, author=Plan.Author.ANALYST)
    plan.approved_at = timezone.now()
    plan.save(update_fields=["approved_at"])
    _publish(plan)
    root_resume(run=run, detail="plan approved")
    return plan


def root_resume(*, run: Run, detail: str) -> None:
    """Queue a paused root again (the caller holds the tree lock): any agent pool resumes it.
    The time it waited for the analyst is left out of its worked time."""
    run.refresh_from_db(fields=["started_at", "finished_at", "paused_at", "paused_seconds"])
    worked = run.worked_seconds()  # up to the pause: the time waiting for the analyst is left out
    resumed = timezone.now()
    paused_for = (resumed - run.paused_at).total_seconds() if run.paused_at else 0.0
    Run.objects.filter(pk=run.pk).update(
        status=Status.QUEUED,
        state=State.QUEUED,
        worker=None,
        paused_at=None,
        paused_seconds=F("paused_seconds") + paused_for,
    )
    _clock_state(
        run_id=run.pk, status=Status.QUEUED, state=State.QUEUED, detail=detail, worked=worked
    )
    roots_queued.announce(run.pk)


# --- notes from the analyst -----------------------------------------------------------------


@transaction.atomic
def note_send(*, run: Run, author_id: int, text: object) -> Message:
    """Store a note for a working agent, flag it for the agent's pool, publish it."""
    if not isinstance(text, str) or not visible(text):
        raise InvalidInput("text must not be empty.", field="text")
    text = strip_controls(text).strip()
    limit = settings.RESEARCH_MESSAGE_MAX_CHARS
    if len(text) > limit:
        raise InvalidInput(f"text is {len(text)} characters; the limit is {limit}.", field="text")
    tree_lock(root_id=run.root_id)
    run.refresh_from_db(fields=["status", "error"])
    if run.status not in ACTIVE_STATUSES:
        who = f'agent "{run.name}"' if run.name else "the root agent"
        raise Conflict(
            f"{who} (run {run.pk}) {said(run)}: a note reaches only an agent that is still working."
        )
    # Returned with its recipient loaded: what the API and MCP show of it needs no read.
    note = Message.objects.create(from_run=None, author_id=author_id, to_run=run, text=text)
    Run.objects.filter(pk=run.pk).update(notes_pending=True)
    runs_flagged.announce(run.pk)  # its agent's pool reads the flag at once
    publish(
        root_id=run.root_id,
        run_id=run.pk,
        payload=RunMessage.of(note, from_name=ANALYST, to_name=run.name),
    )
    return note


@transaction.atomic
def notes_take(*, run_id: int) -> list[Message]:
    """The notes waiting for an agent, oldest first, marked read; the flag cleared. The run's
    row is locked first: a note sent meanwhile sets the flag again after this commits, so
    it is taken next round rather than lost."""
    Run.objects.select_for_update(no_key=True).filter(pk=run_id).first()
    notes = list(
        Message.objects.select_for_update()
        .filter(to_run_id=run_id, from_run__isnull=True, read_at__isnull=True)
        .order_by("id")
    )
    Run.objects.filter(pk=run_id).update(notes_pending=False)
    if notes:
        Message.objects.filter(pk__in=[note.pk for note in notes]).update(read_at=timezone.now())
    return notes
