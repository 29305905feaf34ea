"""Reads of a research the shared selectors do not offer yet: its usage ledger, transcript and
citations. Each takes a run already fetched through selectors.run_get (so scoped to its
owner) and reads only that run's subtree."""

from datetime import timedelta
from decimal import Decimal

from django.conf import settings
from django.db.models import Count, QuerySet, Sum
from django.utils import timezone

from research import selectors
from research.models import ACTIVE_STATUSES, Citation, LLMCall, Run, RunState, Step, Worker
from research.services.citations import citations_for


def subtree(run: Run) -> list[Run]:
    return list(selectors.run_subtree(run=run))


def subtree_active(run: Run) -> bool:
    return selectors.run_subtree(run=run).filter(status__in=ACTIVE_STATUSES).exists()


def llm_calls(run: Run) -> QuerySet[LLMCall]:
    return LLMCall.objects.filter(run__in=selectors.run_subtree(run=run)).order_by("id")


def usage_by_model(run: Run) -> list[dict]:
    """One row per model of the subtree: calls, tokens and cost from the ledger."""
    rows = (
        llm_calls(run)
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


def steps(run: Run) -> QuerySet[Step]:
    return Step.objects.filter(run__in=selectors.run_subtree(run=run)).order_by("id")


def states(run: Run) -> QuerySet[RunState]:
    return RunState.objects.filter(run__in=selectors.run_subtree(run=run)).order_by("id")


def citations(run: Run, *, subtree: bool = True) -> list[Citation]:
    """The citations of the run's report, and of its sub-agents' reports with `subtree`."""
    members = selectors.run_subtree(run=run).values("pk") if subtree else [run.pk]
    return list(citations_for(run_ids=members))


def agent_process_alive() -> bool:
    """Whether some process runs agents (a web server or a runagents worker): one that has
    not stopped and has heartbeated recently."""
    recent = timezone.now() - timedelta(seconds=settings.RESEARCH_WORKER_DEAD_SECONDS)
    return Worker.objects.filter(stopped_at__isnull=True, heartbeat_at__gte=recent).exists()
