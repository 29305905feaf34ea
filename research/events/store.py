"""Storing events: a per-tree sequence number, the row, and the push after commit.

The database is the source of truth; the websocket only tells browsers what changed, and a
browser that missed something asks for the events after the last number it saw.
"""

from collections.abc import Sequence
from functools import cache

from django.db import connection, transaction
from django.utils import timezone

from research.events.delivery import broadcast, expect
from research.events.payloads import Payload, envelope
from research.models import Event, Run
from research.sql import Insert, one, placeholders, row_lock

_ALLOCATE = (
    f"UPDATE {Run._meta.db_table} SET event_seq = event_seq + %s WHERE id = %s RETURNING event_seq"
)


_ROOT_OF = f"SELECT root_id FROM {Run._meta.db_table} WHERE id = %s"


def root_id_of(run_id: int) -> int | None:
    """The root of a run's tree; None when the run is gone. Every finish and many writes
    read it: the statement is built once, not by the ORM."""
    row = one(_ROOT_OF, [run_id])
    return None if row is None else row[0]


def tree_lock(*, root_id: int) -> None:
    """Take the tree's write lock (its root row) until the caller's transaction ends.

    Every write of a tree ends in publish(), which updates the root's counter. A service that
    also updates other rows of the tree (the run, its ancestors' costs) must lock the root
    first: otherwise a grandchild's usage (its row, then the root, then its parent) and its
    parent's state change (its row, then the root) take the same locks in opposite orders,
    and PostgreSQL kills one of them as a deadlock. FOR NO KEY UPDATE is the lock a plain
    UPDATE takes, so it does not block inserts that reference the run (states, steps, calls).

    A service that publishes first (`allocate_seqs` as its first statement) needs no other
    lock: that UPDATE is the same lock.
    """
    one(_tree_lock_sql(), [root_id])


@cache
def _tree_lock_sql() -> str:
    return f"SELECT id FROM {Run._meta.db_table} WHERE id = %s{row_lock()}"


def trees_lock(*, root_ids: list[int]) -> None:
    """`tree_lock` of several trees in one statement, in id order (the order every writer
    takes them in, so that two never wait for each other). Nothing to do where there are no
    row locks (SQLite: its transaction holds the database's)."""
    if root_ids and row_lock():
        one(_trees_lock_sql(len(root_ids)), sorted(root_ids))


@cache
def _trees_lock_sql(count: int) -> str:
    return (
        f"SELECT COUNT(*) FROM (SELECT id FROM {Run._meta.db_table} "
        f"WHERE id IN ({placeholders(count)}) ORDER BY id{row_lock()}) locked"
    )


def allocate_seqs(*, root_id: int, count: int) -> int:
    """Reserve `count` sequence numbers of the tree in one statement; returns the first.

    The UPDATE locks the root row until the transaction ends (the tree lock), so numbers are
    committed in the order they are given, and a rollback gives them back: no gap.
    """
    (last,) = one(_ALLOCATE, [count, root_id])
    first = last - count + 1
    expect(root_id, first, count)
    return first


# What a statement built with `reserve_clause` returns for the last number it reserved.
RESERVED_LAST = "(SELECT event_seq FROM reserved)"


def reserve_clause(*, root_id: int, count: int) -> tuple[str, list[int]] | None:
    """`allocate_seqs` folded into the caller's next statement, where the database allows
    it: on PostgreSQL the WITH clause (and its parameters) of that statement, an UPDATE named
    `reserved` that takes `count` numbers of the tree and its lock, the last number then read
    in the statement's RETURNING as RESERVED_LAST; `reserved_first` gives the first. None on
    SQLite, which has no UPDATE inside WITH: the caller calls allocate_seqs. One round trip
    where there were two (a spawn's INSERT and its numbers, issue 25)."""
    if connection.vendor != "postgresql":
        return None
    return f"WITH reserved AS ({_ALLOCATE}) ", [count, root_id]


def reserved_first(*, root_id: int, count: int, last: int | None) -> int:
    """The first of the `count` numbers a `reserve_clause` statement reserved, from `last`,
    what it returned as RESERVED_LAST; told to the sequencer, as allocate_seqs tells it."""
    if last is None:  # the UPDATE found no root: the tree is gone
        raise Run.DoesNotExist(f"no tree {root_id} to number events in")
    first = last - count + 1
    expect(root_id, first, count)
    return first


def first_seqs(*, root_id: int, count: int) -> int:
    """`allocate_seqs` for a root inserted by the caller's transaction with `event_seq`
    already `count`: the tree's first numbers, 1 to `count`, reserved by its INSERT. No
    UPDATE: nobody else sees the tree before the commit. Returns the first, 1."""
    expect(root_id, 1, count)
    return 1


def reserve_seqs_of(*, run_id: int, count: int) -> tuple[int, int] | None:
    """`allocate_seqs` for a caller that knows only a run (a claim, a finish): the root found
    from the run, its row locked (the tree lock) and `count` numbers reserved, in one
    statement; (the root's id, the first number), or None when the run is gone.

    Unlike allocate_seqs it does not tell the sequencer: the caller calls `expect` once it
    knows it will publish them, and rolls its transaction back when it will not (the run had
    ended), which gives the numbers back. Told at once, the sequencer would hold the tree's
    later events for HOLD_SECONDS waiting for numbers that never come."""
    row = one(_reserve_sql(), [count, run_id])
    return None if row is None else (row[0], row[1] - count + 1)


@cache
def _reserve_sql() -> str:
    runs = Run._meta.db_table
    return (
        f"UPDATE {runs} SET event_seq = event_seq + %s "
        f"WHERE id = (SELECT root_id FROM {runs} WHERE id = %s) RETURNING id, event_seq"
    )


def publish_all(*, root_id: int, events: Sequence[tuple[int, Payload]], first_seq: int) -> None:
    """Store events (run id, payload) numbered from `first_seq` in one insert, and push them
    in that order once the transaction commits."""
    at = timezone.now()
    rows = [
        envelope(seq=first_seq + offset, run_id=run_id, at=at, payload=payload)
        for offset, (run_id, payload) in enumerate(events)
    ]
    _event_insert().rows([(root_id, row["seq"], row["type"], row, at) for row in rows])
    transaction.on_commit(lambda: broadcast(root_id, rows))


@cache
def _event_insert() -> Insert:
    return Insert(Event, ["root", "seq", "type", "payload", "at"])


def publish(*, root_id: int, run_id: int, payload: Payload) -> None:
    """Store one event of the tree and push it to the tree's group once the transaction
    commits (publish_all of one). Its number comes from the root row's counter, in the
    caller's transaction: no savepoint of its own (two round trips), since every caller's
    transaction fails with it. Its row is written as publish_all's are: inside an
    inserts_deferred block, at the block's end, so call it in a transaction that holds the
    block (as every service does)."""
    with transaction.atomic(savepoint=False):
        first = allocate_seqs(root_id=root_id, count=1)
        publish_all(root_id=root_id, events=[(run_id, payload)], first_seq=first)
