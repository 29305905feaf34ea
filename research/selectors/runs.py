"""Reads of runs: one run for its owner, lists with their filters, a subtree, a timeline."""

import operator
import re
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta
from functools import cache, reduce

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.contrib.postgres.search import SearchQuery, SearchVector
from django.db import connection
from django.db.models import Count, Func, OuterRef, Q, QuerySet, Subquery, TextField, Value
from django.db.models.functions import Coalesce, Concat, Length, Substr
from django.utils import timezone

from research.endings import _OPENING_WORDS, Ending
from research.errors import NotFound
from research.fulltext import FTS_CONFIG, question_words
from research.models import Message, Run, RunState, Status
from research.sql import whole


def runs_for(*, owner: AbstractBaseUser) -> QuerySet[Run]:
    return Run.objects.filter(owner=owner)


def run_get(*, owner: AbstractBaseUser, run_id: int) -> Run:
    """One run of its owner's (NotFound for anyone else's). Every API call on a run and every
    viewer's socket reads it first: the statement is built once (the ORM's filter and first()
    cost 0.8 ms of CPU a call, this 0.14)."""
    run = whole(Run).first(_run_get_sql(), [int(run_id), owner.pk])
    if run is None:
        raise NotFound(f"no research with id {run_id}.")
    return run


@cache
def _run_get_sql() -> str:
    return f"SELECT {whole(Run).columns} FROM {Run._meta.db_table} WHERE id = %s AND owner_id = %s"


def run_list(
    *,
    owner: AbstractBaseUser,
    parent_id: int | None = None,
    root_id: int | None = None,
    status: str | tuple[str, ...] | None = None,
    ending: str | tuple[str, ...] | None = None,
    q: str = "",
    since: date | None = None,
    until: date | None = None,
    roots_only: bool = False,
    starred: bool | None = None,
) -> QuerySet[Run]:
    """The owner's runs: of a `status` (stored) or an `ending` (how they ended, as the run's
    JSON says it), whose topic or report matches `q`, started from `since` to `until`
    (whole days, the server's time zone), starred or not. Ordering and paging are the
    caller's."""
    runs = runs_for(owner=owner)
    if parent_id is not None:
        runs = runs.filter(parent_id=parent_id)
    if root_id is not None:
        runs = runs.filter(root_id=root_id)
    if status:
        runs = runs.filter(status__in=(status,) if isinstance(status, str) else status)
    if ending:
        endings = (ending,) if isinstance(ending, str) else ending
        runs = runs.filter(reduce(operator.or_, map(ending_condition, endings)))
    if since is not None:
        runs = runs.filter(created_at__gte=_day_start(since))
    if until is not None and until < date.max:  # the calendar's last day bounds nothing
        runs = runs.filter(created_at__lt=_day_start(until + timedelta(days=1)))
    if roots_only:
        runs = runs.filter(parent__isnull=True)
    if starred is not None:
        runs = runs.filter(starred=starred)
    return text_matching(runs, q) if q else runs


def ending_condition(ending: str) -> Q:
    """The runs that ended this way: `research.endings.ending_of` as a query, from the same
    opening words, so a filter and the JSON's `ending` never disagree."""
    failed = Q(status=Status.FAILED)
    if ending == Ending.DONE:
        return Q(status=Status.DONE)
    if ending == Ending.FAILED:  # failed, and no opening words of another kind
        return reduce(
            operator.and_, (~Q(error__startswith=words) for words, _ in _OPENING_WORDS), failed
        )
    openings = [Q(error__startswith=words) for words, kind in _OPENING_WORDS if kind == ending]
    if not openings:
        raise ValueError(f"no ending {ending!r}")
    return failed & reduce(operator.or_, openings)


# A dot between letters or digits ("functools.wraps", "os.path", "example.com"): PostgreSQL's
# parser reads such a word as one token (a host name), so "wraps" did not find a report about
# "functools.wraps". The runs' text and the question are searched with that dot as a space.
DOTTED_SQL = r"([[:alnum:]])\.(?=[[:alnum:]])"
DOTTED = re.compile(r"([^\W_])\.(?=[^\W_])")
DOTTED_WORD = re.compile(r"[^\W_]+(?:\.[^\W_]+)+")


def undotted_question(text: str) -> str:
    """The question as the runs' text is searched: outside quotes a dotted word becomes a
    phrase of its parts ("-os.path" excludes "os path", not every "os"); inside quotes its
    dot is a space."""

    def spaced(text: str) -> str:
        return DOTTED.sub(r"\1 ", text)

    parts = text.split('"')
    for index, part in enumerate(parts):
        if index % 2:
            parts[index] = spaced(part)
        else:
            parts[index] = DOTTED_WORD.sub(lambda word: '"' + spaced(word[0]) + '"', part)
    return '"'.join(parts)


# The first characters of a run's task that its search reads: twice the topic an analyst may
# write by default (RESEARCH_TOPIC_MAX_CHARS). Only a verifier's task runs longer (the draft
# and what its sources say, up to about 31 KB), and PostgreSQL computes the index's
# expression at every insert: the whole of such a task took 4 to 5 ms more of the writer's
# batch than without the index (issue 25, round thirty-six), and the root's report has the
# draft.
SEARCHED_TASK_CHARS = 4000


def text_vector() -> SearchVector:
    """The runs' searchable text, the start of the topic then the report: the expression of
    the GIN index run_text_search. Migration 0018 keeps a frozen copy of it (a migration
    must not change with the code); tests/test_library.py holds the planner to using the
    index, which it stops doing the day the two differ."""
    joined = Concat(
        Substr(Coalesce("topic", Value(""), output_field=TextField()), 1, SEARCHED_TASK_CHARS),
        Value(" "),
        Coalesce("report", Value(""), output_field=TextField()),
        output_field=TextField(),
    )
    undotted = Func(
        joined,
        Value(DOTTED_SQL),
        Value("\\1 "),
        Value("g"),
        function="regexp_replace",
        output_field=TextField(),
    )
    return SearchVector(undotted, config=FTS_CONFIG)


def text_matching(runs: QuerySet[Run], text: str) -> QuerySet[Run]:
    """The runs whose topic (its first SEARCHED_TASK_CHARS) or report holds every word of
    `text`. PostgreSQL reads it as a web search (`websearch_to_tsquery`: stems, "quoted
    phrases", -excluded words); SQLite, which has no such parser, looks for each word in
    either field."""
    words = question_words(text)
    if not words:
        return runs
    if connection.vendor == "postgresql":
        query = SearchQuery(undotted_question(text), search_type="websearch", config=FTS_CONFIG)
        return runs.annotate(text_vector=text_vector()).filter(text_vector=query)
    runs = runs.annotate(searched_task=Substr("topic", 1, SEARCHED_TASK_CHARS))
    for word in words:
        runs = runs.filter(Q(searched_task__icontains=word) | Q(report__icontains=word))
    return runs


def _day_start(day: date) -> datetime:
    return timezone.make_aware(datetime.combine(day, time.min))


def runs_newer_than(runs: QuerySet[Run], *, run: Run) -> QuerySet[Run]:
    """The runs listed before `run` in newest-first order, nearest first (oldest first): the
    keyset of a "newer" page, which the caller reverses."""
    return runs.filter(
        Q(created_at__gt=run.created_at) | Q(created_at=run.created_at, pk__gt=run.pk)
    ).order_by("created_at", "id")


def runs_older_than(runs: QuerySet[Run], *, run: Run) -> QuerySet[Run]:
    """The runs listed after `run` in newest-first order (created_at, then id): a keyset, so
    the thousandth page costs what the first does."""
    return runs.filter(
        Q(created_at__lt=run.created_at) | Q(created_at=run.created_at, pk__lt=run.pk)
    ).order_by("-created_at", "-id")


def roots_for(*, owner: AbstractBaseUser, **filters) -> QuerySet[Run]:
    """The owner's researches (roots), newest first, each with its number of agents; the
    `filters` are run_list's."""
    agents = (
        Run.objects.filter(root_id=OuterRef("pk"))
        .order_by()
        .values("root_id")
        .annotate(count=Count("pk"))
        .values("count")
    )
    return run_list(owner=owner, roots_only=True, **filters).annotate(
        agent_count=Coalesce(Subquery(agents), 1)
    )


def run_subtree(*, run: Run) -> QuerySet[Run]:
    """The run and every descendant, parents before children.

    A root's subtree is its tree (one index lookup); below a root, one join per generation
    the settings allow under the run's depth.
    """
    if run.parent_id is None:
        return Run.objects.filter(root_id=run.pk).order_by("depth", "id")
    generations = max(settings.RESEARCH_MAX_SUBAGENT_DEPTH, 2) - run.depth
    condition = Q(pk=run.pk)
    lookup = "parent_id"
    for _ in range(generations):
        condition |= Q(**{lookup: run.pk})
        lookup = f"parent__{lookup}"
    return Run.objects.filter(condition, root_id=run.root_id).order_by("depth", "id")


def run_states(*, run: Run) -> QuerySet[RunState]:
    return RunState.objects.filter(run=run)


def run_messages(*, run: Run) -> QuerySet[Message]:
    """Messages sent or received by the run, or, for a root, every message of its tree, the
    analyst's notes included."""
    if run.parent_id is None:
        # Notes from the analyst have no sending run: the tree is the recipient's.
        messages = Message.objects.filter(to_run__root_id=run.pk)
    else:
        messages = Message.objects.filter(Q(from_run=run) | Q(to_run=run))
    return messages.select_related("from_run", "to_run").order_by("id")


@dataclass(frozen=True)
class RunFacts:
    """What never changes about a run once it exists: read once per agent, passed to every
    write of its hot path so none of them reads it again."""

    run_id: int
    root_id: int
    parent_id: int | None
    depth: int
    model: str
    # The run, its parent, ... up to its root: the rows a model call's cost rolls up to.
    lineage: tuple[int, ...]


def run_facts(*, run: Run) -> RunFacts:
    """The facts of a run already read: one query per generation above its parent."""
    lineage = [run.pk]
    parent_id = run.parent_id
    while parent_id is not None:
        lineage.append(parent_id)
        if parent_id == run.root_id:
            break
        parent_id = Run.objects.values_list("parent_id", flat=True).get(pk=parent_id)
    return RunFacts(
        run_id=run.pk,
        root_id=run.root_id,
        parent_id=run.parent_id,
        depth=run.depth,
        model=run.model,
        lineage=tuple(lineage),
    )


def run_summaries(runs: QuerySet[Run], *, report_chars: int) -> QuerySet[Run]:
    """The runs without their whole reports: each carries `report_excerpt` (its first
    `report_chars` characters) and `report_length`, read by the database, so a list of runs
    with megabyte reports stays small."""
    return runs.defer("report").annotate(
        report_excerpt=Substr("report", 1, report_chars), report_length=Length("report")
    )
