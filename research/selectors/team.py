"""The reads an agent makes about its team: its sub-agents, its siblings, its tree's cost.

Each takes identifiers (an agent thread knows its ids, never model instances) and reads only
the fields the team tools show. Those an agent makes in a research (a wait's reports, the
verifier's verdict, the siblings it messages) are statements built once: through the ORM each
cost about half a millisecond of Python before the database saw it (issue 25).
"""

from decimal import Decimal
from functools import cache
from typing import NamedTuple

from django.db import connection
from django.db.models import QuerySet

from research.models import ACTIVE_STATUSES, Message, Profile, Run, Step
from research.sql import Instances, as_decimal, one, placeholders, whole


def run_by_id(*, run_id: int) -> Run:
    """A run of the agent's own tree (no owner scoping: agents act only inside their tree).
    Raises Run.DoesNotExist when it is gone, as Run.objects.get does."""
    return whole(Run).get(_by_id_sql(), [run_id])


@cache
def _by_id_sql() -> str:
    return f"SELECT {whole(Run).columns} FROM {Run._meta.db_table} WHERE id = %s"


def status_and_error(*, run_id: int) -> tuple[str, str] | None:
    """(status, error) of a run; None when it is gone. A pool reads it for the log line of
    each root it ran, as the root ends."""
    return one(_status_sql(), [run_id])


@cache
def _status_sql() -> str:
    return f"SELECT status, error FROM {Run._meta.db_table} WHERE id = %s"


def children_of(*, run_id: int) -> QuerySet[Run]:
    """The run's sub-agents, oldest first."""
    return Run.objects.filter(parent_id=run_id).order_by("id")


class Child(NamedTuple):
    pk: int
    name: str
    status: str


def children_named(*, run_id: int) -> list[Child]:
    """(id, name, status) of the run's sub-agents, oldest first. The team tools that name a
    child (wait, cancel, inspect) and the answer check read it: built once, not by the ORM."""
    with connection.cursor() as cursor:
        cursor.execute(_children_sql(), [run_id])
        return [Child(*row) for row in cursor.fetchall()]


@cache
def _children_sql() -> str:
    return f"SELECT id, name, status FROM {Run._meta.db_table} WHERE parent_id = %s ORDER BY id"


def working_children_ids(*, run_id: int, among: list[int] | None = None) -> list[int]:
    """The ids of the run's working sub-agents (of those `among`), oldest first. Every
    agent reads them as it ends, and a wait for its children polls them: the statement is
    built once for each length of `among`."""
    if among is not None and not among:
        return []
    with connection.cursor() as cursor:
        cursor.execute(
            _working_ids_sql(None if among is None else len(among)),
            [run_id, *ACTIVE_STATUSES, *(among or ())],
        )
        return [pk for (pk,) in cursor.fetchall()]


@cache
def _working_ids_sql(among: int | None) -> str:
    statuses = placeholders(len(ACTIVE_STATUSES))
    ids = "" if among is None else f" AND id IN ({placeholders(among)})"
    return (
        f"SELECT id FROM {Run._meta.db_table} "
        f"WHERE parent_id = %s AND status IN ({statuses}){ids} ORDER BY id"
    )


def children_and_tree_size(*, run_id: int, root_id: int) -> tuple[list[tuple[Child, str]], int]:
    """Each sub-agent of the run (id, name, status) with its task, oldest first, and how many
    sub-agents its tree has, ended ones included (seed 000's tree limit): what a spawn checks
    names, tasks and the limit against. One statement, one round trip: under many trees at
    once each round trip of a spawn waits for the GIL back (issue 25, round twenty-six)."""
    with connection.cursor() as cursor:
        cursor.execute(_children_and_tree_size_sql(), [root_id, run_id])
        rows = cursor.fetchall()
    children = [(Child(pk, name, status), topic) for pk, name, status, topic, _ in rows if pk]
    return children, rows[0][4]


@cache
def _children_and_tree_size_sql() -> str:
    # The count's one row, joined to each child: a run without children is that row alone.
    runs = Run._meta.db_table
    return (
        f"SELECT c.id, c.name, c.status, c.topic, t.size FROM (SELECT COUNT(*) AS size FROM "
        f"{runs} WHERE root_id = %s AND parent_id IS NOT NULL) t "
        f"LEFT JOIN {runs} c ON c.parent_id = %s ORDER BY c.id"
    )


def runs_by_ids(*, run_ids: list[int]) -> list[Run]:
    """The runs of `run_ids` (of the agent's tree), oldest first."""
    if not run_ids:
        return []
    return whole(Run).all(_by_ids_sql(len(run_ids)), run_ids)


@cache
def _by_ids_sql(count: int) -> str:
    return (
        f"SELECT {whole(Run).columns} FROM {Run._meta.db_table} "
        f"WHERE id IN ({placeholders(count)}) ORDER BY id"
    )


def siblings_of(*, run_id: int, parent_id: int | None) -> list[Run]:
    """The other sub-agents of the run's parent, with what list_siblings shows (pk, name,
    reason, status), oldest first. A root has none (not every other root)."""
    if parent_id is None:
        return []
    return _siblings().all(_siblings_sql(), [parent_id, run_id])


@cache
def _siblings() -> Instances:
    return Instances(Run, ["id", "name", "reason", "status"])


@cache
def _siblings_sql() -> str:
    return (
        f"SELECT {_siblings().columns} FROM {Run._meta.db_table} "
        "WHERE parent_id = %s AND id <> %s ORDER BY id"
    )


def tree_cost(*, root_id: int) -> Decimal:
    """The tree's cost so far. With a cost cap set, every agent reads it at every step."""
    row = one(_cost_sql(), [root_id])
    if row is None:
        raise Run.DoesNotExist(f"run {root_id} does not exist")
    return as_decimal(row[0]).quantize(_COST_PLACES)


# The tree's cost to its column's places, as the ORM reads it (SQLite hands back a float's
# digits).
_COST_PLACES = Decimal(1).scaleb(-Run._meta.get_field("tree_cost_usd").decimal_places)


@cache
def _cost_sql() -> str:
    return f"SELECT tree_cost_usd FROM {Run._meta.db_table} WHERE id = %s"


def subagents_allowed_for(*, owner_id: int) -> bool:
    """The per-user switch (admin, Profiles): on unless turned off. An agent reads it as it
    starts, unless its claim returned it (research.services.locks): the statement is built
    once."""
    row = one(_profile_sql(), [owner_id])
    return row is None or bool(row[0])


@cache
def _profile_sql() -> str:
    return f"SELECT subagents_enabled FROM {Profile._meta.db_table} WHERE user_id = %s"


def ended_among(*, run_ids: list[int]) -> list[Run]:
    """Those of `run_ids` that have ended, with what their parent reads of them (pk, name,
    status, report, error), in the order they ended."""
    if not run_ids:
        return []
    return _ended().all(_ended_sql(len(run_ids)), [*run_ids, *ACTIVE_STATUSES])


@cache
def _ended() -> Instances:
    return Instances(Run, ["id", "name", "status", "report", "error"])


@cache
def _ended_sql(count: int) -> str:
    return (
        f"SELECT {_ended().columns} FROM {Run._meta.db_table} "
        f"WHERE id IN ({placeholders(count)}) "
        f"AND status NOT IN ({placeholders(len(ACTIVE_STATUSES))}) ORDER BY finished_at, id"
    )


def transcript_page(*, run_id: int, last: int, offset: int) -> tuple[int, list[Step]]:
    """The run's transcript entries `offset` to `offset + last` counted from the newest, in
    the order they happened, and how many entries there are."""
    steps = Step.objects.filter(run_id=run_id)
    page = list(steps.order_by("-id")[offset : offset + last])
    return steps.count(), page[::-1]


def unread_notes_exist(*, run_id: int) -> bool:
    """Whether an analyst's note waits unread for the run."""
    return Message.objects.filter(
        to_run_id=run_id, from_run__isnull=True, read_at__isnull=True
    ).exists()


CancelFlags = tuple[bool, str, bool]


def cancel_flags(*, run_id: int) -> CancelFlags | None:
    """(cancel_requested, cancel_reason, notes_pending) of the run, as a CancelToken applies
    them; None when it was deleted."""
    return cancel_flags_of(run_ids=[run_id]).get(run_id)


def cancel_flags_of(*, run_ids: list[int]) -> dict[int, CancelFlags]:
    """The cancel flags of several runs in one query (a pool's cancel watch reads all its
    agents' at every announcement and every RESEARCH_CANCEL_WATCH_SECONDS, so the statement
    is built once per count of runs); a run deleted meanwhile is left out. The one place
    these flags are read."""
    if not run_ids:
        return {}
    with connection.cursor() as cursor:
        cursor.execute(_cancel_flags_sql(len(run_ids)), run_ids)
        rows = cursor.fetchall()
    # SQLite hands booleans back as 0 and 1.
    return {pk: (bool(requested), reason, bool(notes)) for pk, requested, reason, notes in rows}


@cache
def _cancel_flags_sql(count: int) -> str:
    runs = Run._meta.db_table
    return (
        f"SELECT id, cancel_requested, cancel_reason, notes_pending FROM {runs} "
        f"WHERE id IN ({placeholders(count)})"
    )
