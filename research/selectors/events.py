"""Reads of a tree's stored events: what a reconnecting browser or API client missed."""

from typing import Any

from django.db.models import QuerySet

from research.models import Event

# A reconnecting browser gets the events it missed one by one up to this many; further
# behind, a fresh snapshot is cheaper for both ends.
REPLAY_LIMIT = 1000


def tree_events(*, root_id: int, after: int = 0) -> QuerySet[Event]:
    return Event.objects.filter(root_id=root_id, seq__gt=after).order_by("seq")


def events_after(*, root_id: int, after: int) -> list[dict[str, Any]] | None:
    """The stored events after `after`, or None when there are more than REPLAY_LIMIT."""
    events = list(
        tree_events(root_id=root_id, after=after).values_list("payload", flat=True)[
            : REPLAY_LIMIT + 1
        ]
    )
    return None if len(events) > REPLAY_LIMIT else events
