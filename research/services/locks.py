"""The claims and the reads under the tree lock that return their row, in one statement each.

The tree lock itself, taken from a run's id with the caller's event numbers, is
`research.events.store.reserve_seqs_of`. Built once, like the step's statements.
"""

from collections.abc import Sequence
from datetime import datetime
from functools import cache

from django.db import connection

from research.models import ACTIVE_STATUSES, Profile, RemoteServer, Run, Status, Step
from research.selectors.team import Child
from research.sql import Instances, one, placeholders, row_lock

_RUNS = Run._meta.db_table


def claim_queued(*, run_id: int, worker_id: int | None, now, state: str) -> Run | None:
    """Mark a queued run working, in `state`, in one statement that returns its row; None
    when it is no longer queued. Its start keeps the time it first started (a root resumed
    after review)."""
    started = connection.ops.adapt_datetimefield_value(now)
    worker = [worker_id] if worker_id is not None else []
    params = [Status.WORKING.value, state, started, *worker, run_id, Status.QUEUED.value]
    return _claimed().first(_claim_sql(worker_id is not None), params)


@cache
def _claim_sql(with_worker: bool) -> str:
    worker = ", worker_id = %s" if with_worker else ""
    return (
        f"UPDATE {_RUNS} SET status = %s, state = %s, started_at = COALESCE(started_at, %s)"
        f"{worker} "
        f"WHERE id = %s AND status = %s RETURNING {_claimed_columns()}"
    )


def claim_new_root(*, run_id: int, worker_id: int, now, state: str) -> Run:
    """A root just inserted by its start, claimed for `worker_id` as its start sets its root
    id, in one statement that returns its row (research.services.seats)."""
    started = connection.ops.adapt_datetimefield_value(now)
    params = [Status.WORKING.value, state, started, worker_id, run_id]
    return _claimed().get(_claim_new_sql(), params)


@cache
def _claim_new_sql() -> str:
    return (
        f"UPDATE {_RUNS} SET root_id = id, status = %s, state = %s, started_at = %s, "
        f"worker_id = %s WHERE id = %s RETURNING {_claimed_columns()}"
    )


@cache
def _claimed() -> Instances:
    """A claimed run's row, with what its agent would otherwise read (claim_annotations)."""
    return Instances(Run, extra=[name for name, _ in claim_annotations()])


@cache
def claim_annotations() -> tuple[tuple[str, str], ...]:
    """What a claimed run's row comes with, each (name, SQL expression of the run's row), read
    as its agent starts instead: its owner's sub-agent switch (Profile.subagents_enabled, on
    without a profile) as `owner_allows_subagents` (agents.tools.team.may_spawn); whether it
    has sub-agents already as `has_children`, read as it ends (agents.runtime.tree.
    end_subagents); whether any remote MCP server is enabled as `remote_servers_enabled`
    (agents.tools.remote). Only its own agent spawns under a run, so the second holds until
    that agent tries a spawn. A child seated at its spawn is inserted with them
    (research.services.runs.subagents_insert)."""
    profiles = Profile._meta.db_table
    switch = (
        f"COALESCE((SELECT p.subagents_enabled FROM {profiles} p "
        f"WHERE p.user_id = {_RUNS}.owner_id), TRUE)"
    )
    children = f"EXISTS (SELECT 1 FROM {_RUNS} c WHERE c.parent_id = {_RUNS}.id)"
    servers = f"EXISTS (SELECT 1 FROM {RemoteServer._meta.db_table} s WHERE s.enabled)"
    return (
        ("owner_allows_subagents", switch),
        ("has_children", children),
        ("remote_servers_enabled", servers),
    )


@cache
def _claimed_columns() -> str:
    return ", ".join([_claimed().columns, *(sql for _, sql in claim_annotations())])


def claim_next_root(*, worker_id: int) -> int | None:
    """Take the oldest unclaimed queued root for this worker in one statement. SKIP LOCKED
    lets many workers claim at once without waiting on each other or taking the same run
    twice; SQLite's one writer does the same."""
    row = one(_claim_next_sql(), [worker_id, Status.QUEUED.value])
    return None if row is None else row[0]


@cache
def _claim_next_sql() -> str:
    lock = ""
    if connection.features.has_select_for_update_skip_locked:
        lock = " FOR NO KEY UPDATE SKIP LOCKED"
    return (
        f"UPDATE {_RUNS} SET worker_id = %s WHERE id = (SELECT id FROM {_RUNS} "
        "WHERE status = %s AND parent_id IS NULL AND worker_id IS NULL "
        f"ORDER BY created_at, id LIMIT 1{lock}) RETURNING id"
    )


# What a finish reads of the run: not its topic, report or JSON columns, which it overwrites
# or does not need (a model instance built from them costs more than the statement).
FINISH_FIELDS = (
    "id",
    "parent_id",
    "root_id",
    "status",
    "state",
    "input_tokens",
    "output_tokens",
    "started_at",
    "finished_at",
    "paused_at",
    "paused_seconds",
)


def run_for_finish(run_id: int) -> Run | None:
    """The run's row, locked, with `tool_calls` (its tool steps) counted in the same
    statement: what a finish reads (FINISH_FIELDS), once. Take the tree lock first
    (research.events.store.reserve_seqs_of)."""
    return _finishing().first(_finish_sql(), [Step.Kind.TOOL.value, run_id])


@cache
def _finishing() -> Instances:
    return Instances(Run, FINISH_FIELDS, alias="r", extra=["tool_calls"])


def run_ended(
    run_id: int, *, status: str, state: str, report: str, error: str, now: datetime
) -> Run | None:
    """An active run (queued or working) that is not paused, such as an agent's as it ends,
    ended in one statement that locks its row and returns it as written, with the fields and
    the tool steps run_for_finish reads: one round trip under the tree lock where there were
    two. None for any other run (ended, gone, or paused: a pause's time is counted from what
    run_for_finish reads). Take the tree lock first."""
    ended = runs_ended([(run_id, status, report, error)], state=state, now=now)
    return ended.get(run_id)


def runs_ended(
    ends: Sequence[tuple[int, str, str, str]], *, state: str, now: datetime
) -> dict[int, Run]:
    """run_ended for several runs in one statement (the ends in one batch of the step
    writer: research.services.step_batch): each (run id, status, report, error) ended in
    `state` at `now`. The rows of those it ended, by id; a run it did not end is missing."""
    db = connection
    prepared = [
        [pk, _STATUS.get_db_prep_save(status, db), report, error]
        for pk, status, report, error in ends
    ]
    finished = _FINISHED_AT.get_db_prep_save(now, db)
    params = [state, finished, *(value for row in prepared for value in row)]
    params += [*ACTIVE_STATUSES, Step.Kind.TOOL.value]
    return {run.pk: run for run in _ending().all(_ended_sql(len(ends)), params)}


_STATUS = Run._meta.get_field("status")
_FINISHED_AT = Run._meta.get_field("finished_at")


@cache
def _ending() -> Instances:
    # No alias: SQLite's RETURNING does not see one (its columns are the table's own).
    return Instances(Run, FINISH_FIELDS, extra=["tool_calls"])


@cache
def _ended_sql(count: int) -> str:
    """The ends of `count` runs: their values (id, status, report, error) as VALUES rows,
    typed on PostgreSQL, whose parameters in VALUES are otherwise text."""
    postgres = connection.vendor == "postgresql"
    bigint, text = ("::bigint", "::text") if postgres else ("", "")
    steps = Step._meta.db_table
    values = ", ".join(["(%s, %s, %s, %s)"] * count)
    return (
        f"UPDATE {_RUNS} SET status = v.c2{text}, state = %s, report = v.c3{text}, "
        f"error = v.c4{text}, finished_at = %s "
        f"FROM (SELECT column1 AS c1, column2 AS c2, column3 AS c3, column4 AS c4 "
        f"FROM (VALUES {values}) AS vals) AS v "
        f"WHERE {_RUNS}.id = v.c1{bigint} "
        f"AND {_RUNS}.status IN ({placeholders(len(ACTIVE_STATUSES))}) "
        f"AND {_RUNS}.paused_at IS NULL "
        f"RETURNING {_ending().columns}, "
        f"(SELECT COUNT(*) FROM {steps} s WHERE s.run_id = {_RUNS}.id AND s.kind = %s)"
    )


@cache
def _finish_sql() -> str:
    lock = row_lock(of="r")
    steps = Step._meta.db_table
    return (
        f"SELECT {_finishing().columns}, "
        f"(SELECT COUNT(*) FROM {steps} s WHERE s.run_id = r.id AND s.kind = %s) "
        f"FROM {_RUNS} r WHERE r.id = %s{lock}"
    )


def parent_for_spawn(parent_id: int) -> Run:
    """The parent of a spawn, as a spawn needs it (owner, root, depth, model, dataset,
    worker), with its tree locked, in one statement: the root row is locked, the parent's
    row only read. Raises Run.DoesNotExist when it is gone, as Run.objects.get does.

    Counts that the lock guards (the tree's sub-agents) are read after it, in a statement
    of their own: on PostgreSQL a statement's snapshot is taken before its lock is granted,
    so a count in the same statement could miss a spawn that committed meanwhile."""
    return _spawning().get(_parent_sql(), [parent_id])


def spawn_reads(parent_id: int) -> tuple[Run, list[tuple[Child, str]], int]:
    """What a spawn reads, for a caller that holds its tree's lock already: the parent (as
    parent_for_spawn reads it), each of its sub-agents (id, name, status) with its task,
    oldest first, and how many sub-agents the tree has (selectors.team.
    children_and_tree_size), in one statement. The writer's batch locks the roots of its
    spawns before they run (step_batch.write_parts): the lock came in an earlier statement,
    so this one's snapshot sees every spawn that committed before it, and the spawn pays one
    round trip for its reads where it paid two (issue 25). Raises Run.DoesNotExist when the
    parent is gone."""
    with connection.cursor() as cursor:
        cursor.execute(_spawn_reads_sql(), [parent_id])
        rows = cursor.fetchall()
    if not rows:
        raise Run.DoesNotExist(f"no run {parent_id} to spawn under")
    width = len(_spawning().fields)
    parent = _spawning().instance(rows[0][:width])
    children = [
        (Child(pk, name, status), topic)
        for pk, name, status, topic, _ in (row[width:] for row in rows)
        if pk is not None
    ]
    return parent, children, rows[0][-1]


@cache
def _spawn_reads_sql() -> str:
    # The tree's count beside each child of the parent (a parent without children is its one
    # row): SQLite has no LATERAL, and a parent has a handful of children at most.
    return (
        f"SELECT {_spawning().columns}, c.id, c.name, c.status, c.topic, "
        f"(SELECT COUNT(*) FROM {_RUNS} t WHERE t.root_id = p.root_id "
        "AND t.parent_id IS NOT NULL) "
        f"FROM {_RUNS} p LEFT JOIN {_RUNS} c ON c.parent_id = p.id WHERE p.id = %s ORDER BY c.id"
    )


@cache
def _spawning() -> Instances:
    fields = ["id", "owner", "root", "depth", "model", "dataset", "worker"]
    return Instances(Run, fields, alias="p")


@cache
def _parent_sql() -> str:
    lock = row_lock(of="r")
    return (
        f"SELECT {_spawning().columns} FROM {_RUNS} p JOIN {_RUNS} r ON r.id = p.root_id "
        f"WHERE p.id = %s{lock}"
    )
