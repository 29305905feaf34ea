"""Runs: start, claim, state, finish, cancel, delete. Every write of a run goes through here."""

from collections.abc import Callable

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.db.models import Q, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from research import endings, pricing
from research.clean import cut, strip_controls
from research.endings import ending_of
from research.errors import InvalidInput, TooManyRuns
from research.events import (
    RunCreated,
    RunFinished,
    RunReport,
    RunStateChanged,
    publish,
    root_id_of,
    tree_lock,
)
from research.events.payloads import iso
from research.events.store import allocate_seqs, publish_all
from research.models import ACTIVE_STATUSES, Dataset, Run, RunState, State, Status, Step
from research.pricing import DEMO_MODEL
from research.selectors.runs import RunFacts, run_facts
from research.services.callbacks import callback_register, callback_url_check
from research.services.followups import followed_research, followup_sources_carry
from research.services.launch import Launch
from research.services.starter import starter_dataset_load
from research.services.steps import state_record

INTERRUPTED = endings.SERVER_STOPPED
CANCELLED_BY_USER = endings.CANCELLED_BY_USER
DELETED = endings.DELETED

# Set by the agent runtime of this process (agents.runtime.pool) so a new root starts at once;
# without it a queued root waits for a worker to claim it.
_on_root_queued: list[Callable[[int], None]] = []


def on_root_queued(callback: Callable[[int], None]) -> Callable[[], None]:
    """Call `callback(run_id)` after a root is queued; returns the function that stops it."""
    _on_root_queued.append(callback)
    return lambda: _on_root_queued.remove(callback)


def validate_max_steps(max_steps: int | None, *, field: str = "max_steps") -> int:
    if max_steps is None:
        return settings.RESEARCH_DEFAULT_MAX_STEPS
    limit = settings.RESEARCH_MAX_STEPS_LIMIT
    if isinstance(max_steps, bool) or not isinstance(max_steps, int):
        raise InvalidInput(f"{field} must be an integer from 1 to {limit}.", field=field)
    if not 1 <= max_steps <= limit:
        raise InvalidInput(f"{field} must be from 1 to {limit}, not {max_steps}.", field=field)
    return max_steps


def validate_topic(topic: str, *, field: str = "topic") -> str:
    topic = strip_controls(topic or "").strip()
    limit = settings.RESEARCH_TOPIC_MAX_CHARS
    if not topic:
        raise InvalidInput(f"{field} must not be empty.", field=field)
    if len(topic) > limit:
        raise InvalidInput(
            f"{field} is {len(topic)} characters long; the limit is {limit}.", field=field
        )
    return topic


def validate_model(model: str | None) -> str:
    model = model or settings.RESEARCH_MODEL
    if not pricing.is_known(model):
        raise InvalidInput(
            f"unknown model {model!r}: a model needs a known price "
            f"(set RESEARCH_MODEL_PRICES). Known models: {', '.join(pricing.known_models())}.",
            field="model",
        )
    if not pricing.can_run(model):
        raise InvalidInput(
            f"model {model!r} cannot run here: no LLM endpoint is configured (set "
            "OPENAI_API_KEY, or OPENAI_BASE_URL for a compatible server); the demo model runs "
            "offline.",
            field="model",
        )
    return model


@transaction.atomic
def run_start(
    *,
    owner: AbstractBaseUser,
    topic: str,
    max_steps: int | None = None,
    model: str | None = None,
    dataset_id: int | None = None,
    review_plan: bool = False,
    clarify: bool = False,
    callback_url: str = "",
    follows_id: int | None = None,
) -> Run:
    """Create a root run, queued; the agent runtime picks it up after commit. With
    `review_plan`, it pauses after its first plan until the analyst approves it; with `clarify`,
    its lead may first ask the analyst questions (research.services.clarify); with a
    `callback_url`, its end is posted there (research.services.callbacks); with `follows_id`,
    it follows up that done research (research.services.followups), on its dataset by default.

    Every edge starts a research here (the API, the page, MCP, the CLI): the checks, the
    working limit and the callback are one transaction, so a research is queued (its agents
    may start) only with everything it was started with."""
    topic = validate_topic(topic)
    if callback_url:
        callback_url = callback_url_check(callback_url)
    max_steps = validate_max_steps(max_steps)
    model = validate_model(model)
    follows = followed_research(owner=owner, run_id=follows_id)
    if follows is not None and dataset_id is None:
        dataset_id = follows.dataset_id
    dataset = None
    if dataset_id is not None:
        dataset = Dataset.objects.filter(owner=owner, pk=dataset_id).first()
        if dataset is None:
            raise InvalidInput(f"no dataset with id {dataset_id}.", field="dataset")
    elif model == DEMO_MODEL:
        # The offline demo model can only quote a knowledge base: give it the owner's starter
        # one, loaded on their first demo run (a second or two, once).
        dataset, _, _ = starter_dataset_load(owner=owner)

    working_roots_check(owner=owner)
    run = Run.objects.create(
        owner=owner,
        topic=topic,
        model=model,
        max_steps=max_steps,
        dataset=dataset,
        review_plan=bool(review_plan),
        clarify=bool(clarify),
        follows=follows,
    )
    run.root = run
    run.save(update_fields=["root"])
    RunState.objects.create(run=run, state=State.QUEUED)
    followup_sources_carry(run=run, follows=follows)
    if callback_url:
        callback_register(run_id=run.pk, url=callback_url)
    _publish_created(run)
    root_queued(run.pk)
    return run


def working_roots_check(*, owner: AbstractBaseUser) -> None:
    """Refuse a root that would put the owner over RESEARCH_MAX_WORKING_ROOTS (a start, or a
    resume by the analyst); call it inside the transaction that queues the root."""
    # Lock the owner's row so two starts at once cannot both pass the limit. NO KEY UPDATE
    # still lets the owner's agents insert sub-agents (which reference the row) meanwhile.
    owner._meta.model.objects.select_for_update(no_key=True).filter(pk=owner.pk).first()
    # A root paused for the analyst's review holds no slot and no thread: it does not count.
    limit = settings.RESEARCH_MAX_WORKING_ROOTS
    working = Run.objects.filter(
        owner=owner, parent__isnull=True, status__in=(Status.QUEUED, Status.WORKING)
    ).count()
    if working >= limit:
        raise TooManyRuns(
            f"You already have {working} researches working; the limit is {limit}. "
            "Wait for one to end or cancel one (researches waiting for your review do not "
            "count)."
        )


def root_queued(run_id: int) -> None:
    """Tell the agent pools a root waits in the queue, once the transaction commits."""
    for callback in _on_root_queued:
        transaction.on_commit(lambda callback=callback: callback(run_id))


def _publish_created(run: Run) -> None:
    publish(root_id=run.root_id, run_id=run.pk, payload=RunCreated.of(run))


@transaction.atomic
def subagent_create(
    *,
    parent_id: int,
    name: str,
    reason: str,
    task: str,
    max_steps: int,
    kind: str = "",
    tier: str = "",
    model: str | None = None,
    tools: list[str] | None = None,
    plan_item: str = "",
) -> Run:
    """Record a sub-agent of `parent_id`: same owner, dataset and worker (seed 001), the
    parent's model unless its tier names another, the research tools its kind allows.

    The caller (subagent_spawn) has checked the input and the limits; the unique constraint
    on (parent, name) is the last word on names.
    """
    parent = Run.objects.get(pk=parent_id)
    tree_lock(root_id=parent.root_id)
    launch = Launch(
        name=name,
        reason=reason,
        task=task,
        max_steps=max_steps,
        kind=kind,
        tier=tier,
        model=model,
        tools=tools,
        plan_item=plan_item,
    )
    return subagent_record(parent=parent, launch=launch)


def subagent_record(*, parent: Run, launch: Launch) -> Run:
    """The row of a checked launch under `parent`, read and locked by the caller (a batch
    reads its parent once, not once per child)."""
    run = Run.objects.create(
        owner_id=parent.owner_id,
        parent=parent,
        root_id=parent.root_id,
        depth=parent.depth + 1,
        name=strip_controls(launch.name),
        reason=strip_controls(launch.reason),
        kind=launch.kind,
        tier=launch.tier,
        topic=strip_controls(launch.task),
        model=launch.model or parent.model,
        tools=launch.tools,
        plan_item=launch.plan_item,
        dataset_id=parent.dataset_id,
        max_steps=launch.max_steps,
        worker_id=parent.worker_id,
    )
    RunState.objects.create(run=run, state=State.QUEUED)
    _publish_created(run)
    return run


@transaction.atomic
def run_claim(*, run_id: int, worker_id: int | None = None) -> bool:
    """Mark a queued run working. False when it is no longer queued (cancelled, claimed)."""
    root_id = root_id_of(run_id)
    if root_id is None:
        return False
    tree_lock(root_id=root_id)
    # A root resumed after its plan review keeps the time it first started.
    fields = {"status": Status.WORKING, "started_at": Coalesce("started_at", Value(timezone.now()))}
    if worker_id is not None:
        fields["worker_id"] = worker_id
    claimed = Run.objects.filter(pk=run_id, status=Status.QUEUED).update(**fields)
    if not claimed:
        return False
    run = Run.objects.get(pk=run_id)
    publish(
        root_id=run.root_id,
        run_id=run.pk,
        payload=RunStateChanged(
            status=run.status,
            state=run.state,
            detail="",
            started_at=iso(run.started_at),
            worked_seconds=round(run.worked_seconds() or 0, 3),  # its clock starts (or resumes)
        ),
    )
    return True


def run_set_state(
    *, run_id: int, state: str, detail: str = "", facts: RunFacts | None = None
) -> None:
    """Move a working run to `state`; nothing when it has ended (a sweep may have ended it).
    An agent passes the `facts` it read once; anyone else lets them be read here."""
    if facts is None:
        run = Run.objects.filter(pk=run_id).first()
        if run is None:
            return
        facts = run_facts(run=run)
    state_record(facts=facts, state=state, detail=detail)


@transaction.atomic
def run_finish(*, run_id: int, report: str = "", error: str = "") -> None:
    """End a run: done with its report, or failed with its error. A finished run stays so."""
    root_id = root_id_of(run_id)
    if root_id is None:
        return
    tree_lock(root_id=root_id)
    # No first(): its ORDER BY is compiled for nothing on a primary key.
    run = next(iter(Run.objects.select_for_update(no_key=True).filter(pk=run_id)), None)
    if run is None or run.status not in ACTIVE_STATUSES:
        return
    now = timezone.now()
    report = capped_report(report)
    error = strip_controls(error)  # it may quote an endpoint's or a model's words
    run.status = Status.FAILED if error else Status.DONE
    run.state = State.ENDED
    run.report = report
    run.error = error
    run.finished_at = now
    if run.paused_at is not None:  # ended while it waited for the analyst (a cancel)
        run.paused_seconds += (now - run.paused_at).total_seconds()
        run.paused_at = None
    run.save(
        update_fields=[
            "status",
            "state",
            "report",
            "error",
            "finished_at",
            "paused_at",
            "paused_seconds",
        ]
    )
    RunState.objects.create(run=run, state=State.ENDED, detail=error[:500])
    events = [(run.pk, RunReport(report=report))] if report else []
    duration = run.worked_seconds()
    finished = RunFinished(
        status=run.status,
        ending=ending_of(status=run.status, error=error),
        state=run.state,
        error=error,
        finished_at=iso(now),
        duration_seconds=None if duration is None else round(duration, 3),
        tool_calls=Step.objects.filter(run_id=run.pk, kind=Step.Kind.TOOL).count(),
        input_tokens=run.input_tokens,
        output_tokens=run.output_tokens,
        resumable=(run.is_root and endings.resumable(status=run.status, error=error)) or None,
    )
    events.append((run.pk, finished))
    # The report and the finish: numbers reserved and rows stored in one statement each.
    first = allocate_seqs(root_id=run.root_id, count=len(events))
    publish_all(root_id=run.root_id, events=events, first_seq=first)


def report_flags_set(*, run_id: int, claims: list[dict[str, str]]) -> None:
    """The claims of a root's report its verifier could not support (the page marks them)."""
    Run.objects.filter(pk=run_id).update(flagged_claims=claims)


def capped_report(report: str) -> str:
    """A report as stored: no control characters, at most RESEARCH_REPORT_MAX_CHARS."""
    limit = settings.RESEARCH_REPORT_MAX_CHARS
    return cut(strip_controls(report), limit, what="report", setting="RESEARCH_REPORT_MAX_CHARS")


def run_cancel(*, run: Run, reason: str = CANCELLED_BY_USER) -> None:
    """Ask a run and its sub-agents to stop. The agent runtime sees the flag within a second.

    A run no process has claimed yet (a queued root, a root paused for its plan review) has
    no agent to see it: it ends here, its plan and what was covered kept.
    """
    with transaction.atomic():
        tree_lock(root_id=run.root_id)
        Run.objects.filter(pk=run.pk, status__in=ACTIVE_STATUSES).update(
            cancel_requested=True, cancel_reason=reason
        )
        unclaimed = Run.objects.filter(
            Q(pk=run.pk) | Q(root_id=run.pk),
            status__in=[Status.QUEUED, Status.PAUSED],
            worker__isnull=True,
        ).values_list("pk", flat=True)
        for run_id in unclaimed:
            run_finish(run_id=run_id, error=reason)


@transaction.atomic
def run_delete(*, run: Run) -> None:
    """Delete a run and its sub-agents (ON DELETE CASCADE), cancelling them first.

    The tree lock comes first here too: the cascade locks every row of the subtree, and an
    agent still writing (its cancel not yet seen) must not hold one of them while it waits
    for the root.
    """
    tree_lock(root_id=run.root_id)
    if run.is_active:
        run_cancel(run=run, reason=DELETED)
    Run.objects.filter(pk=run.pk).delete()


def runs_fail(*, run_ids: list[int], error: str) -> int:
    """Fail runs no agent will finish (their process died), children before parents."""
    runs = Run.objects.filter(pk__in=run_ids, status__in=ACTIVE_STATUSES).order_by("-depth")
    count = 0
    for run_id in runs.values_list("pk", flat=True):
        run_finish(run_id=run_id, error=error)
        count += 1
    return count
