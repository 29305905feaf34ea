"""Runs: claim, state, finish, cancel, delete (a start: research.services.start). Every write of
a run goes through here or there."""

from collections.abc import Sequence
from copy import copy
from functools import cache

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.db import connection, transaction
from django.db.models import Q
from django.utils import timezone

from research import endings
from research.clean import strip_controls, visible
from research.errors import Conflict, InvalidInput, TooManyRuns
from research.events import (
    Payload,
    RunCreated,
    RunStateChanged,
    tree_lock,
)
from research.events.delivery import expect
from research.events.payloads import iso
from research.events.store import (
    RESERVED_LAST,
    allocate_seqs,
    publish_all,
    reserve_clause,
    reserve_seqs_of,
    reserved_first,
)
from research.models import ACTIVE_STATUSES, Run, State, Status
from research.selectors.runs import RunFacts, run_facts
from research.services.announce import runs_flagged
from research.services.finish import run_finish
from research.services.launch import Launch
from research.services.locks import claim_annotations, claim_queued
from research.services.steps import state_record, step_inserts
from research.sql import Insert, Update, inserts_deferred, one, row_lock
from research.standing import said

INTERRUPTED = endings.SERVER_STOPPED
CANCELLED_BY_USER = endings.CANCELLED_BY_USER
DELETED = endings.DELETED


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
    if not visible(topic):
        raise InvalidInput(f"{field} must not be empty.", field=field)
    if len(topic) > limit:
        raise InvalidInput(
            f"{field} is {len(topic)} characters long; the limit is {limit}.", field=field
        )
    return topic


def working_roots_check(*, owner: AbstractBaseUser, starting: int = 0) -> None:
    """Refuse a root that would put the owner over RESEARCH_MAX_WORKING_ROOTS (a start, or a
    resume by the analyst); call it inside the transaction that queues the root. Every start
    runs it: its two statements are built once. A start calls it last, the root `starting`
    already inserted (and left out of the count): the owner's lock is then held for the
    count and the commit only, and the starts of one owner wait on one another that much."""
    # Lock the owner's row so two starts at once cannot both pass the limit. NO KEY UPDATE
    # still lets the owner's agents insert sub-agents (which reference the row) meanwhile.
    # The count is a statement of its own, after the lock: on PostgreSQL a statement's
    # snapshot is taken before its lock is granted, so a count in the same statement could
    # miss a start that committed meanwhile.
    one(_owner_lock_sql(), [owner.pk])
    # A root paused for the analyst's review holds no slot and no thread: it does not count.
    limit = settings.RESEARCH_MAX_WORKING_ROOTS
    params = [owner.pk, Status.QUEUED, Status.WORKING, starting]
    (working,) = one(_working_roots_sql(), params)
    if working >= limit:
        raise TooManyRuns(
            f"You already have {working} researches working; the limit is {limit}. "
            "Wait for one to end or cancel one (researches waiting for your review do not "
            "count)."
        )


@cache
def _owner_lock_sql() -> str:
    opts = get_user_model()._meta
    key = connection.ops.quote_name(opts.pk.column)
    return (
        f"SELECT {key} FROM {connection.ops.quote_name(opts.db_table)} WHERE {key} = %s{row_lock()}"
    )


@cache
def _working_roots_sql() -> str:
    return (
        f"SELECT COUNT(*) FROM {Run._meta.db_table} "
        "WHERE owner_id = %s AND parent_id IS NULL AND status IN (%s, %s) AND id <> %s"
    )


@transaction.atomic
def subagent_create(*, parent_id: int, launch: Launch) -> Run:
    """Record `launch` under `parent_id` without the spawn's checks (fixtures, the admin's
    tests): same owner, dataset and worker (seed 001), the parent's model unless the launch
    names another. Agents spawn through subagents_spawn, which checks the input and the
    limits first; the unique constraint on (parent, name) is the last word on names."""
    parent = Run.objects.get(pk=parent_id)
    tree_lock(root_id=parent.root_id)
    return subagents_record(parent=parent, launches=[launch])[0]


@inserts_deferred()
def subagents_record(
    *,
    parent: Run,
    launches: Sequence[Launch],
    seat: int = 0,
    worker_id: int | None = None,
    before: Sequence[tuple[int, Payload]] = (),
) -> list[Run]:
    """The rows of checked launches under `parent`, read and locked by the caller, in the
    caller's transaction: the runs in one INSERT, the first `seat` of them seated for
    `worker_id` (subagents_insert), then their first states and their `run.created` events
    in one round trip (inserts_deferred), numbered after the caller's events `before` them
    (subagents_announce). On PostgreSQL the INSERT takes the numbers too (events.store.
    reserve_clause): one round trip for the runs and their numbers."""
    runs, numbers = _insert(parent, launches, seat, worker_id, events_before=len(before))
    return subagents_announce(parent=parent, runs=runs, before=before, numbers=numbers)


def subagents_insert(
    *, parent: Run, launches: Sequence[Launch], seat: int = 0, worker_id: int | None = None
) -> list[Run]:
    """The runs of checked launches under `parent`, in one INSERT built once (a spawn turn's
    and every verifier's: the ORM's bulk_create compiled it anew, about half the statement's
    CPU); subagents_announce then records their first states and events (a turn's spawns
    announce theirs together).

    The first `seat` go in seated: working, thinking and started, for `worker_id`, with what
    a claim returns beside the row (locks.claim_annotations), as if claimed at once. Their
    pool had a place and a slot for each (AgentPool.seat): their threads start on their first
    step, without a claim. An UPDATE claimed them after the INSERT until round twenty-seven
    of issue 25: a statement and five rows read back a spawn of five."""
    return _insert(parent, launches, seat, worker_id, events_before=None)[0]


def _insert(
    parent: Run,
    launches: Sequence[Launch],
    seat: int,
    worker_id: int | None,
    *,
    events_before: int | None,
) -> tuple[list[Run], tuple[int, int] | None]:
    """subagents_insert; with `events_before` (a number of events the caller announces
    before theirs), the tree's numbers for the runs' announcement taken by the same
    statement where the database can (events.store.reserve_clause): the runs, and the first
    number and how many, or None when the caller has to take them."""
    now = timezone.now()
    runs = [
        Run(
            owner_id=parent.owner_id,
            parent_id=parent.pk,
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
        for launch in launches
    ]
    for run in runs[:seat]:
        run.status, run.state, run.started_at = Status.WORKING, State.THINKING, now
        if worker_id is not None:
            run.worker_id = worker_id
    annotate = claim_annotations() if seat else ()
    count = None if events_before is None else events_before + len(runs) + min(seat, len(runs))
    clause = None if count is None else reserve_clause(root_id=parent.root_id, count=count)
    if clause is None or not runs:
        _run_insert().create(runs, annotate=annotate)
        return runs, None
    _run_insert().create(runs, annotate=(*annotate, ("reserved_seq", RESERVED_LAST)), prefix=clause)
    first = reserved_first(root_id=parent.root_id, count=count, last=runs[0].reserved_seq)
    return runs, (first, count)


def runs_create(runs: Sequence[Run]) -> None:
    """Save new runs in one INSERT built once (Insert.create): a root at its start (a turn's
    spawns: subagents_insert). Through the ORM (create, bulk_create) its compilation cost
    about as much as the statement."""
    _run_insert().create(runs)


@cache
def _run_insert() -> Insert:
    return Insert.every(Run)


def subagents_announce(
    *,
    parent: Run,
    runs: Sequence[Run],
    before: Sequence[tuple[int, Payload]] = (),
    numbers: tuple[int, int] | None = None,
) -> list[Run]:
    """The first state (queued) of new sub-agents of `parent` and their `run.created`
    events, numbered in one statement; in the caller's transaction, with its tree lock.
    Events of the caller's (run id, payload) come `before` them, numbered with them.

    A child seated at its insert (subagents_insert) was created queued and claimed at once,
    and says so as a claim would: `run.created` shows it queued, then its state (thinking)
    and its claim's event follow every `run.created`, as its thread's claim would have.
    Their numbers are taken here, unless their INSERT took them (`numbers`: the first and
    how many, _insert). Returns the runs."""
    seated = [run for run in runs if run.status == Status.WORKING]
    step_inserts()["state"].rows(
        [(run.pk, State.QUEUED, "", run.created_at) for run in runs]
        + [(run.pk, run.state, "", run.started_at) for run in seated]
    )
    events = [
        *before,
        *[(run.pk, RunCreated.of(_created(run))) for run in runs],
        *[(run.pk, claimed_payload(run)) for run in seated],
    ]
    if numbers is None:
        first = allocate_seqs(root_id=parent.root_id, count=len(events))
    else:
        first, count = numbers
        if count != len(events):
            raise RuntimeError(f"a spawn took {count} event numbers for {len(events)} events")
    publish_all(root_id=parent.root_id, events=events, first_seq=first)
    return list(runs)


def _created(run: Run) -> Run:
    """The run as it was created: a seated one before its seat (queued, not started)."""
    if run.status == Status.QUEUED:
        return run
    created = copy(run)
    created.status, created.state, created.started_at = Status.QUEUED, State.QUEUED, None
    return created


@transaction.atomic
@inserts_deferred()
def run_claim(*, run_id: int, worker_id: int | None = None) -> Run | None:
    """Mark a queued run working and return its row (the agent starts from it, no re-read);
    None when it is no longer queued (cancelled, claimed). The tree lock and the event's
    number in one statement, the claim and the row in another. The agent's first act is a
    model call: the run is claimed thinking (its timeline row and its event say so), so the
    agent need not record that state again (agents.loop.agent)."""
    reserved = reserve_seqs_of(run_id=run_id, count=1)
    if reserved is None:
        return None
    now = timezone.now()
    run = claim_queued(run_id=run_id, worker_id=worker_id, now=now, state=State.THINKING)
    if run is None:
        transaction.set_rollback(True)  # its event number goes back
        return None
    root_id, seq = reserved
    expect(root_id, seq, 1)
    step_inserts()["state"].row(run.pk, run.state, "", now)
    publish_all(root_id=root_id, events=[(run.pk, claimed_payload(run))], first_seq=seq)
    return run


def claimed_payload(run: Run) -> RunStateChanged:
    """The event of a run just claimed: working, and its clock starts (or resumes)."""
    return RunStateChanged(
        status=run.status,
        state=run.state,
        detail="",
        started_at=iso(run.started_at),
        worked_seconds=round(run.worked_seconds() or 0, 3),
    )


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


def report_flags_set(*, run_id: int, claims: list[dict[str, str]]) -> None:
    """The claims of a root's report its verifier could not support (the page marks them);
    every verified root sets them as it ends."""
    _flags_update().row(run_id, claims)


@cache
def _flags_update() -> Update:
    return Update(Run, ["flagged_claims"])


def run_cancel(*, run: Run, reason: str = CANCELLED_BY_USER) -> None:
    """Ask a run and its sub-agents to stop. The flag is announced once it commits, and the
    agent pool running them reads it at once (research.services.announce).

    A run no process has claimed yet (a queued root, a root paused for its plan review) has
    no agent to see it: it ends here, its plan and what was covered kept.
    """
    with transaction.atomic():
        tree_lock(root_id=run.root_id)
        Run.objects.filter(pk=run.pk, status__in=ACTIVE_STATUSES).update(
            cancel_requested=True, cancel_reason=reason
        )
        runs_flagged.announce(run.pk)  # its agents' pool looks at once, not at its next look
        unclaimed = Run.objects.filter(
            Q(pk=run.pk) | Q(root_id=run.pk),
            status__in=[Status.QUEUED, Status.PAUSED],
            worker__isnull=True,
        ).values_list("pk", flat=True)
        for run_id in unclaimed:
            run_finish(run_id=run_id, error=reason)


@transaction.atomic
def run_cancel_asked(*, run: Run) -> None:
    """The analyst's cancel (the REST API, MCP): `run_cancel`, refused for a run that has
    already ended, which a cancel would leave as it is. Its status is read under the tree's
    lock: a run that ends meanwhile is refused, not answered 202."""
    tree_lock(root_id=run.root_id)
    run.refresh_from_db(fields=["status", "state", "error"])
    if run.status not in ACTIVE_STATUSES:
        what = "research" if run.is_root else "sub-agent"
        raise Conflict(f"{what} {run.pk} {said(run)}: nothing to cancel.")
    run_cancel(run=run)


@transaction.atomic
def run_delete(*, run: Run) -> None:
    """Delete a research and its sub-agents (ON DELETE CASCADE), cancelling them first. A
    sub-agent alone is refused: its research's report, figures and plan would name an agent
    that is gone (a research's record is deleted whole).

    The tree lock comes first here too: the cascade locks every row of the subtree, and an
    agent still writing (its cancel not yet seen) must not hold one of them while it waits
    for the root.
    """
    if not run.is_root:
        raise Conflict(
            f"run {run.pk} is a sub-agent of research {run.root_id}, which is deleted whole "
            f"(with its sub-agents); a working sub-agent can be cancelled."
        )
    tree_lock(root_id=run.root_id)
    if run.is_active:
        run_cancel(run=run, reason=DELETED)
    Run.objects.filter(pk=run.pk).delete()


def runs_fail(*, run_ids: list[int], error: str) -> int:
    """Fail runs no agent will finish (their process died), children before parents."""
    runs = Run.objects.filter(pk__in=run_ids, status__in=ACTIVE_STATUSES).order_by("-depth")
    count = 0
    for run_id in runs.values_list("pk", flat=True):
        count += run_finish(run_id=run_id, error=error)  # not one another ended meanwhile
    return count
