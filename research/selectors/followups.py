"""Reads of threads (issue 27): what a follow-up's lead is told of the research it follows,
and the researches of a thread as the page and the runs list show them."""

import re
from collections.abc import Iterable
from dataclasses import dataclass

from django.db.models import Count

from research.models import Plan, Run, Source

# What the lead is given of the earlier research: enough to build on, bounded so a long
# report or many sources cannot fill its context window.
REPORT_CHARS = 20_000
SOURCE_CHARS = 1_200
SOURCES_MAX = 30
# How far a thread is walked each way: a thread longer than this shows its nearest ones.
THREAD_MAX = 20
HEADING = "# The research this follows up"


@dataclass(frozen=True)
class Followup:
    """What a follow-up's lead is told of the research it follows, after its question."""

    earlier_id: int
    earlier_topic: str
    plan: list[str]
    report: str
    sources: list[str]  # each as the `query` tool lists a passage

    def text(self, intro: str) -> str:
        """The section the lead reads, with `intro` (prompts/followup.md) saying what it is."""
        parts = [HEADING, intro]
        if self.plan:
            parts += [
                "## Its plan",
                "\n".join(f"{n}. {item}" for n, item in enumerate(self.plan, 1)),
            ]
        parts += ["## Its report", self.report]
        parts += ["## Its verified sources", "\n\n".join(self.sources) or "(it cited none)"]
        return "\n\n".join(parts)


def followup_of(run: Run) -> Followup | None:
    """The earlier research's question, plan, report (cut to REPORT_CHARS) and the sources
    carried from it; None for a research that follows none (or whose earlier one is gone)."""
    if run.follows_id is None:
        return None
    earlier = Run.objects.filter(pk=run.follows_id).only("pk", "topic", "report").first()
    if earlier is None:
        return None
    plan = Plan.objects.filter(root_id=earlier.pk).order_by("-version").first()
    sources = Source.objects.filter(root_id=run.root_id, carried=True).order_by("id")
    report = earlier.report
    if len(report) > REPORT_CHARS:
        report = report[:REPORT_CHARS].rstrip() + "\n\n[the rest of the report is left out]"
    return Followup(
        earlier_id=earlier.pk,
        earlier_topic=earlier.topic[:300],
        plan=list(plan.items) if plan is not None else [],
        report=report,
        sources=[_source_block(n, source) for n, source in enumerate(sources[:SOURCES_MAX], 1)],
    )


def _source_block(number: int, source: Source) -> str:
    """One source as the `query` tool lists a passage: `[n] title (url)`, then its text."""
    excerpt = re.sub(r"\s+", " ", source.text or source.snippet).strip()
    if len(excerpt) > SOURCE_CHARS:
        excerpt = excerpt[:SOURCE_CHARS].rstrip() + "…"
    title = source.title or source.url
    return f"[{number}] {title} ({source.final_url or source.url})\n{excerpt}"


@dataclass(frozen=True)
class Thread:
    """The researches before and after one in its thread, oldest first."""

    earlier: list[Run]
    later: list[Run]

    def __bool__(self) -> bool:
        return bool(self.earlier or self.later)


def thread_of(run: Run) -> Thread:
    """The chain of researches `run` follows up, and every research that follows it up
    (follow-ups of follow-ups too), at most THREAD_MAX each way."""
    fields = ("pk", "topic", "status", "state", "error", "created_at", "follows_id", "owner_id")
    earlier: list[Run] = []
    follows_id = run.follows_id
    while follows_id is not None and len(earlier) < THREAD_MAX:
        found = Run.objects.filter(pk=follows_id, owner_id=run.owner_id).only(*fields).first()
        if found is None:
            break
        earlier.insert(0, found)
        follows_id = found.follows_id
    later: list[Run] = []
    level = [run.pk]
    while level and len(later) < THREAD_MAX:
        found = list(
            Run.objects.filter(follows_id__in=level, owner_id=run.owner_id)
            .only(*fields)
            .order_by("created_at", "id")[: THREAD_MAX - len(later)]
        )
        later += found
        level = [r.pk for r in found]
    return Thread(earlier=earlier, later=sorted(later, key=lambda r: (r.created_at, r.pk)))


@dataclass(frozen=True)
class ThreadMark:
    """How a research of the runs list sits in its thread."""

    follows: Run | None  # the research it follows up
    followups: int  # how many follow it up


def thread_marks(runs: Iterable[Run]) -> dict[int, ThreadMark]:
    """The thread of each research of a list page, in two queries for the whole page."""
    runs = list(runs)
    earlier_ids = {run.follows_id for run in runs if run.follows_id is not None}
    earlier = Run.objects.only("pk", "topic").in_bulk(earlier_ids) if earlier_ids else {}
    counts = dict(
        Run.objects.filter(follows_id__in=[run.pk for run in runs])
        .order_by()  # the model's ordering would split the groups
        .values("follows_id")
        .annotate(count=Count("id"))
        .values_list("follows_id", "count")
    )
    return {
        run.pk: ThreadMark(follows=earlier.get(run.follows_id), followups=counts.get(run.pk, 0))
        for run in runs
    }
