"""Reads of citations: each with its source and the agent that found it."""

from collections.abc import Iterable

from django.db.models import F, QuerySet

from research.models import Citation, Run
from research.selectors.runs import run_subtree


def citations_for(
    *, run_id: int | None = None, run_ids: Iterable[int] | QuerySet | None = None
) -> QuerySet[Citation]:
    """The citations of a run (or of several: `run_ids`, parents first), each in report order
    with its source and `found_by`: the name of the agent whose source verified it ("" for
    the root agent, None when flagged); `carried` when that source came from the research
    this one follows up."""
    citations = (
        Citation.objects.filter(run_id=run_id)
        if run_ids is None
        else Citation.objects.filter(run_id__in=run_ids)
    )
    return (
        citations.select_related("source")
        .annotate(
            found_by=F("source__run__name"),
            found_by_id=F("source__run_id"),
            carried=F("source__carried"),
        )
        .order_by("run__depth", "run_id", "id")
    )


def report_of(*, run: Run) -> dict:
    """A run's report with the URLs it cites, as `ReportSerializer` takes it: the REST API's
    GET .../report and MCP's get_report show the same thing."""
    return {
        "id": run.pk,
        "status": run.status,
        "report": run.report,
        "citations": citations_for(run_id=run.pk),
        "flagged_claims": run.flagged_claims,
    }


def subtree_citations(*, run: Run, subtree: bool = True) -> list[Citation]:
    """The citations of the run's report, and of its sub-agents' reports with `subtree`."""
    members = run_subtree(run=run).values("pk") if subtree else [run.pk]
    return list(citations_for(run_ids=members))
