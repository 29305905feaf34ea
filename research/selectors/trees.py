"""Reads of a whole tree or subtree: the snapshot a page starts from, one agent's panel, and
the usage, transcript and timeline of a subtree (the terminal's show and export)."""

from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from django.db.models import Count, OuterRef, QuerySet, Subquery, Sum

from research.events.payloads import message_fields, run_fields
from research.models import ACTIVE_STATUSES, Citation, LLMCall, Message, Run, RunState, Step
from research.selectors.citations import citations_for
from research.selectors.runs import run_messages, run_states, run_subtree

# The transcript panel shows the latest steps; a long run's first ones are on the API.
TRANSCRIPT_LIMIT = 200


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
    return [{**run_fields(run, whole_topic=False), "detail": run.detail or ""} for run in runs]


def tree_snapshot(*, root: Run) -> dict[str, Any]:
    """All runs and messages of the tree and the number of the last event they include.

    The number is read first: rows read afterwards may already hold later changes, whose
    events the browser then applies again. Events carry absolute values, so that is harmless,
    while the opposite order could hide a change behind a number the browser skips.
    """
    seq = Run.objects.values_list("event_seq", flat=True).get(pk=root.pk)
    return {
        "type": "snapshot",
        "root": root.pk,
        "seq": seq,
        "runs": tree_runs(root_id=root.pk),
        "messages": [message_fields(message) for message in run_messages(run=root)],
    }


@dataclass
class AgentPanel:
    run: Run
    states: list[RunState]
    steps: list[Step]
    steps_total: int
    messages: list[Message]
    citations: list[Citation]


def agent_panel(*, run: Run) -> AgentPanel:
    steps = Step.objects.filter(run=run).order_by("-id")
    return AgentPanel(
        run=run,
        states=list(run_states(run=run)),
        steps=list(reversed(steps[:TRANSCRIPT_LIMIT])),
        steps_total=steps.count(),
        messages=list(run_messages(run=run)),
        citations=list(citations_for(run_id=run.pk)),
    )


# --- A subtree, for the terminal: each takes a run already scoped to its owner -------------


def subtree_runs(*, run: Run) -> list[Run]:
    return list(run_subtree(run=run))


def subtree_active(*, run: Run) -> bool:
    return run_subtree(run=run).filter(status__in=ACTIVE_STATUSES).exists()


def subtree_llm_calls(*, run: Run) -> QuerySet[LLMCall]:
    return LLMCall.objects.filter(run__in=run_subtree(run=run)).order_by("id")


def subtree_usage_by_model(*, run: Run) -> list[dict]:
    """One row per model of the subtree: calls, tokens and cost from the ledger."""
    rows = (
        subtree_llm_calls(run=run)
        .order_by()
        .values("model")
        .annotate(
            calls=Count("id"),
            input_tokens=Sum("input_tokens"),
            output_tokens=Sum("output_tokens"),
            cost_usd=Sum("cost_usd"),
        )
        .order_by("model")
    )
    return [{**row, "cost_usd": row["cost_usd"] or Decimal(0)} for row in rows]


def subtree_steps(*, run: Run) -> QuerySet[Step]:
    return Step.objects.filter(run__in=run_subtree(run=run)).order_by("id")


def subtree_states(*, run: Run) -> QuerySet[RunState]:
    return RunState.objects.filter(run__in=run_subtree(run=run)).order_by("id")
