"""The research library: the runs list's search, filters and keyset pages, how each research
reads in it, and its actions (star, delete with confirmation, run again).

Every query is scoped to the signed-in user; another user's research is a 404.
"""

from dataclasses import dataclass

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse, QueryDict
from django.shortcuts import redirect
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_POST

from frontend.forms import RunSearchForm, model_can_run, sentence
from frontend.rendering import duration_text
from frontend.throttled import retry_message
from research import selectors, services, standing
from research.endings import WORDS, Ending, ending_of
from research.errors import InvalidInput, NotFound, Throttled, TooManyRuns
from research.models import Run, Status
from research.selectors.followups import ThreadMark, thread_marks
from research.selectors.progress import TreeProgress, newest_root, trees_progress
from research.services.library import run_rerun

RUNS_PER_PAGE = 25

# The list's "status" filter, in the analyst's words, as the selector's filters: the REST
# list takes the same ones (status, ending).
STANDING_FILTERS: dict[str, dict] = {
    "working": {"status": (Status.QUEUED, Status.WORKING)},
    "waiting": {"status": Status.PAUSED},
    "done": {"ending": Ending.DONE},
    "cancelled": {"ending": Ending.CANCELLED},
    "failed": {"ending": (Ending.FAILED, Ending.INTERRUPTED, Ending.OUT_OF_TIME)},
}

# How an ended research reads (research.endings.WORDS), and the colour of its badge (runs.css).
ENDING_LABELS = {
    Ending.DONE: (WORDS[Ending.DONE], "done"),
    Ending.CANCELLED: (WORDS[Ending.CANCELLED], "cancelled"),
    Ending.INTERRUPTED: (WORDS[Ending.INTERRUPTED], "failed"),
    Ending.OUT_OF_TIME: (WORDS[Ending.OUT_OF_TIME], "failed"),
    Ending.FAILED: (WORDS[Ending.FAILED], "failed"),
}


def status_label(run: Run) -> str:
    """A research's badge in words, on the list and on its page (research.standing.label;
    static/page/tiles.js rootStatusText draws the same): what it waits for, its status while
    it works, else how it ended."""
    return standing.label(run)


def status_tone(run: Run) -> str:
    """The badge's colour beside status_label: its status while it works, else its ending's."""
    if run.is_active:
        return run.status
    return ENDING_LABELS[ending_of(status=run.status, error=run.error)][1]


@dataclass(frozen=True)
class Row:
    """A research as the list shows it."""

    run: Run
    label: str  # the badge's words
    tone: str  # the badge's colour: queued, working, paused, done, cancelled, failed
    worked_seconds: float | None
    progress: TreeProgress | None
    thread: ThreadMark | None = None  # the research it follows up, and its follow-ups

    @classmethod
    def of(cls, run: Run, progress: TreeProgress | None, thread: ThreadMark | None = None) -> "Row":
        return cls(run, status_label(run), status_tone(run), run.worked_seconds(), progress, thread)

    @property
    def duration(self) -> str:
        return duration_text(self.worked_seconds, none="")


@dataclass(frozen=True)
class Page:
    rows: list[Row]
    newer: str  # the query string of the newer page, "" when this is the newest
    older: str


def listing(request: HttpRequest) -> dict:
    """The runs list's context: its search form and one keyset page of the matching
    researches, each with the progress of the working ones."""
    # What the list's script asks about: researches started after it was drawn. Read first:
    # one started while the page is read is then announced, never neither listed nor told.
    newest = newest_root(owner=request.user)
    search = RunSearchForm(request.GET)
    filters = _filters(search.cleaned_data) if search.is_valid() else {}
    runs = selectors.roots_for(owner=request.user, **filters)
    found, newer, older = _keyset_page(request, runs)
    active = [run.pk for run in found if run.is_active]
    progress = trees_progress(owner=request.user, root_ids=active) if active else {}
    kept = _search_query(request)
    threads = thread_marks(found)
    page = Page(
        rows=[Row.of(run, progress.get(run.pk), threads.get(run.pk)) for run in found],
        newer=_with(kept, after=found[0].pk) if newer and found else "",
        older=_with(kept, before=found[-1].pk) if older and found else "",
    )
    return {"search": search, "page": page, "searching": bool(filters), "newest": newest}


def _filters(data: dict) -> dict:
    filters = {key: data[key] for key in ("q", "since", "until", "starred") if data.get(key)}
    return {**filters, **STANDING_FILTERS.get(data.get("status") or "", {})}


def _keyset_page(request: HttpRequest, runs) -> tuple[list[Run], bool, bool]:
    """One page newest first, after the `before` or `after` research of the page it came
    from: a keyset, so the thousandth page costs what the first does. Returns the page and
    whether newer and older pages exist."""
    before, after = _anchor(request, "before"), _anchor(request, "after")
    if after is not None:
        found = list(selectors.runs_newer_than(runs, run=after)[: RUNS_PER_PAGE + 1])
        more = len(found) > RUNS_PER_PAGE
        return list(reversed(found[:RUNS_PER_PAGE])), more, True
    if before is not None:
        runs = selectors.runs_older_than(runs, run=before)
    found = list(runs.order_by("-created_at", "-id")[: RUNS_PER_PAGE + 1])
    return found[:RUNS_PER_PAGE], before is not None, len(found) > RUNS_PER_PAGE


def _anchor(request: HttpRequest, name: str) -> Run | None:
    value = request.GET.get(name, "")
    if not value.isdigit():
        return None
    return selectors.runs_for(owner=request.user).filter(pk=int(value)).only("created_at").first()


def _search_query(request: HttpRequest) -> QueryDict:
    kept = request.GET.copy()
    for name in ("before", "after"):
        kept.pop(name, None)
    return kept


def _with(query: QueryDict, **anchor: int) -> str:
    query = query.copy()
    for name, value in anchor.items():
        query[name] = str(value)
    return query.urlencode()


# --- Actions ------------------------------------------------------------------------------


def _root_or_404(request: HttpRequest, run_id: int) -> Run:
    try:
        run = selectors.run_get(owner=request.user, run_id=run_id)
    except NotFound as error:
        raise Http404(error.message) from None
    if not run.is_root:
        raise Http404("a sub-agent is deleted or run again with its research.")
    return run


def _back(request: HttpRequest) -> HttpResponse:
    """To the list the action was taken from (its search and page kept), else the list."""
    wanted = request.POST.get("next", "")
    if wanted and url_has_allowed_host_and_scheme(
        wanted, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        return redirect(wanted)
    return redirect("runs")


@login_required
@require_POST
def run_star(request: HttpRequest, run_id: int) -> HttpResponse:
    """Star a research, or take its star off (`starred` is "true" or "false")."""
    run = _root_or_404(request, run_id)
    services.run_star(run=run, starred=request.POST.get("starred") == "true")
    return _back(request)


@login_required
@require_POST
def run_delete(request: HttpRequest, run_id: int) -> HttpResponse:
    """Delete a research: its whole tree, with its events, sources and transcripts."""
    run = _root_or_404(request, run_id)
    topic = run.topic if len(run.topic) <= 80 else f"{run.topic[:79]}…"
    services.run_delete(run=run)
    messages.success(request, f"Deleted the research “{topic}”.")
    return _back(request)


@login_required
@require_POST
def run_again(request: HttpRequest, run_id: int) -> HttpResponse:
    """Start a new research with the settings of this one; a refusal is said on the list."""
    run = _root_or_404(request, run_id)
    if not model_can_run(run.model):
        messages.error(
            request,
            f"This research used {run.model}, which cannot run on this server: it has no "
            "LLM endpoint configured. Start a new research with the demo model instead.",
        )
        return _back(request)
    try:
        new = run_rerun(owner=request.user, run=run)
    except Throttled as error:
        messages.error(request, retry_message("researches started", error.wait))
    except TooManyRuns as error:
        messages.error(request, error.message)
    except InvalidInput as error:
        messages.error(request, sentence(error.message, error.field))
    else:
        return redirect("run", run_id=new.pk)
    return _back(request)
