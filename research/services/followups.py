"""Follow-ups: a research that continues a done one, in a thread (issue 27).

A follow-up is a root like any other, started through `run_start` with `follows_id`. Its tree
starts with the verified sources of the report it follows, carried over as they were stored
(not fetched again), so its report may cite them and its citations verify against them; its
lead is told the earlier report, plan and sources (research.selectors.followups).
"""

from django.contrib.auth.models import AbstractBaseUser

from research.errors import InvalidInput
from research.models import Citation, Run, Source, Status
from research.standing import said

FIELD = "follows"


def followed_research(*, owner: AbstractBaseUser, run_id: object) -> Run | None:
    """The owner's done research that a new one follows up (None without one); any other id
    is refused with an error naming the `follows` field."""
    if run_id is None:
        return None
    if isinstance(run_id, bool) or not isinstance(run_id, int):
        raise InvalidInput(f"{FIELD} must be the id of one of your researches.", field=FIELD)
    # Another owner's research is "no research" here, as anywhere else.
    run = Run.objects.filter(owner=owner, pk=run_id).first()
    if run is None:
        raise InvalidInput(f"no research with id {run_id}.", field=FIELD)
    if not run.is_root:
        raise InvalidInput(
            f"run {run_id} is a sub-agent: follow up its research (run {run.root_id}) instead.",
            field=FIELD,
        )
    if run.status != Status.DONE or not run.report:
        state = "is done without a report" if run.status == Status.DONE else said(run)
        raise InvalidInput(
            f"research {run_id} {state}: only a done research with a report can be followed up.",
            field=FIELD,
        )
    return run


def followup_sources_carry(*, run: Run, follows: Run | None) -> list[Source]:
    """Give the new root `run` the sources behind the verified citations of the report it
    follows, as stored there: they count as seen by this tree, so citing them verifies."""
    if follows is None:
        return []
    cited = Citation.objects.filter(run_id=follows.pk, verified=True, source__isnull=False)
    source_ids = list(dict.fromkeys(cited.order_by("id").values_list("source_id", flat=True)))
    earlier = Source.objects.in_bulk(source_ids)
    rows = [
        Source(
            run_id=run.pk,
            root_id=run.pk,
            kind=source.kind,
            url=source.url,
            final_url=source.final_url,
            title=source.title,
            snippet=source.snippet,
            text=source.text,
            sha256=source.sha256,
            carried=True,
        )
        for source in (earlier[pk] for pk in source_ids if pk in earlier)
    ]
    return Source.objects.bulk_create(rows)
