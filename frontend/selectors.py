"""Reads of the live page: the tree snapshot a browser starts from, and one agent's panel.

Read-only and owner-agnostic: the views and the consumer check ownership before calling these
(research.selectors.run_get). Candidates to move into research.selectors once they settle.
"""

from dataclasses import dataclass
from typing import Any

from django.db.models import Count, OuterRef, QuerySet, Subquery
from django.db.models.functions import Coalesce

from research import selectors
from research.models import Message, Run, RunState, Step
from research.serializers import RunOutputSerializer
from research.services.citations import citations_for

# The transcript panel shows the latest steps; a long run's first ones are on the API.
TRANSCRIPT_LIMIT = 200
# A reconnecting browser gets the events it missed one by one up to this many; further
# behind, a fresh snapshot is cheaper for both ends.
REPLAY_LIMIT = 1000


def roots_for(*, owner) -> QuerySet[Run]:
    """The owner's researches (roots), newest first, each with its number of agents."""
    agents = (
        Run.objects.filter(root_id=OuterRef("pk"))
        .order_by()
        .values("root_id")
        .annotate(count=Count("pk"))
        .values("count")
    )
    return selectors.run_list(owner=owner, roots_only=True).annotate(
        agent_count=Coalesce(Subquery(agents), 1)
    )


def message_json(message: Message) -> dict[str, Any]:
    """A message in the shape of its run.message event (`run` is the sender)."""
    return {
        "id": message.pk,
        "run": message.from_run_id,
        "to": message.to_run_id,
        "from_name": message.from_run.name,
        "to_name": message.to_run.name,
        "text": message.text,
        "sent_at": message.sent_at.isoformat(),
    }


def tree_runs(*, root_id: int) -> list[dict[str, Any]]:
    """Every run of the tree as run.created describes it, plus the detail of its state."""
    latest_detail = (
        RunState.objects.filter(run_id=OuterRef("pk")).order_by("-id").values("detail")[:1]
    )
    runs = (
        Run.objects.filter(root_id=root_id)
        .annotate(detail=Subquery(latest_detail))
        .order_by("depth", "id")
    )
    return [{**RunOutputSerializer(run).data, "detail": run.detail or ""} for run in runs]


def tree_snapshot(*, root: Run) -> dict[str, Any]:
    """All runs and messages of the tree and the number of the last event they include.

    The number is read first: rows read afterwards may already hold later changes, whose
    events the browser then applies again. Events carry absolute values, so that is harmless,
    while the opposite order could hide a change behind a number the browser skips.
    """
    seq = Run.objects.values_list("event_seq", flat=True).get(pk=root.pk)
    messages = selectors.run_messages(run=root)
    return {
        "type": "snapshot",
        "root": root.pk,
        "seq": seq,
        "runs": tree_runs(root_id=root.pk),
        "messages": [message_json(message) for message in messages],
    }


def events_after(*, root_id: int, after: int) -> list[dict[str, Any]] | None:
    """The stored events after `after`, or None when there are more than REPLAY_LIMIT."""
    events = list(
        selectors.tree_events(root_id=root_id, after=after).values_list("payload", flat=True)[
            : REPLAY_LIMIT + 1
        ]
    )
    return None if len(events) > REPLAY_LIMIT else events


@dataclass
class AgentPanel:
    run: Run
    states: list[RunState]
    steps: list[Step]
    steps_total: int
    messages: list[Message]
    citations: list[Any]


def agent_panel(*, run: Run) -> AgentPanel:
    steps = Step.objects.filter(run=run).order_by("-id")
    total = steps.count()
    return AgentPanel(
        run=run,
        states=list(selectors.run_states(run=run)),
        steps=list(reversed(steps[:TRANSCRIPT_LIMIT])),
        steps_total=total,
        messages=list(selectors.run_messages(run=run)),
        citations=list(citations_for(run_id=run.pk)),
    )
