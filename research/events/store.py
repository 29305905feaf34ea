"""Storing events: a per-tree sequence number, the row, and the push after commit.

The database is the source of truth; the websocket only tells browsers what changed, and a
browser that missed something asks for the events after the last number it saw.
"""

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from research.events.payloads import Payload, envelope
from research.events.transport import broadcast
from research.models import Event, Run


def root_id_of(run_id: int) -> int | None:
    """The root of a run's tree; None when the run is gone."""
    return Run.objects.filter(pk=run_id).values_list("root_id", flat=True).first()


def tree_lock(*, root_id: int) -> None:
    """Take the tree's write lock (its root row) until the caller's transaction ends.

    Every write of a tree ends in publish(), which updates the root's counter. A service that
    also updates other rows of the tree (the run, its ancestors' costs) must lock the root
    first: otherwise a grandchild's usage (its row, then the root, then its parent) and its
    parent's state change (its row, then the root) take the same locks in opposite orders,
    and PostgreSQL kills one of them as a deadlock. FOR NO KEY UPDATE is the lock a plain
    UPDATE takes, so it does not block inserts that reference the run (states, steps, calls).
    """
    Run.objects.select_for_update(no_key=True).filter(pk=root_id).values_list("pk").first()


def publish(*, root_id: int, run_id: int, payload: Payload) -> Event:
    """Store an event of the tree and push it to the tree's group once the transaction commits.

    The counter on the root row is incremented in the caller's transaction: on PostgreSQL the
    row lock orders concurrent publishers, so sequence numbers commit in order.
    """
    with transaction.atomic():
        Run.objects.filter(pk=root_id).update(event_seq=F("event_seq") + 1)
        seq = Run.objects.filter(pk=root_id).values_list("event_seq", flat=True).get()
        at = timezone.now()
        data = envelope(seq=seq, run_id=run_id, at=at, payload=payload)
        event = Event.objects.create(
            root_id=root_id, seq=seq, type=payload.type, payload=data, at=at
        )
        transaction.on_commit(lambda: broadcast(root_id, data))
    return event
