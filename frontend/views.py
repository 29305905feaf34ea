"""Pages: the user's researches with the start form, the live run page, and an agent's panel.

Every query is scoped to the signed-in user; another user's run is a 404, never a 403.
"""

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods

from frontend import knowledge, library, passages
from frontend.forms import STARTER, StartResearchForm
from frontend.lines import step_line
from frontend.progress import header_tiles, worked_text
from frontend.rendering import sentence, steps_text
from frontend.reports import report_parts
from frontend.throttled import retry_message, throttled
from research import endings, selectors, services
from research.endings import ending_of
from research.errors import InvalidInput, NotFound, Throttled, TooManyRuns
from research.events.payloads import listed_topic
from research.models import Run
from research.pricing import DEMO_MODEL
from research.selectors.followups import thread_of
from research.services.starter import starter_dataset_load


def run_or_404(request: HttpRequest, run_id: int) -> Run:
    try:
        return selectors.run_get(owner=request.user, run_id=run_id)
    except NotFound as error:
        raise Http404(error.message) from None


@login_required
@require_http_methods(["GET", "POST"])
def runs(request: HttpRequest) -> HttpResponse:
    initial = knowledge.start_initial(request)
    form = StartResearchForm(request.POST or None, owner=request.user, initial=initial)
    if request.method == "POST" and form.is_valid():
        run = _start(request, form)
        if run is not None:
            return redirect("run", run_id=run.pk)
    response = render(request, "runs.html", {"form": form, **library.listing(request)})
    wait = getattr(request, "throttle_wait", None)
    return throttled(response, wait) if wait else response


def _start(request: HttpRequest, form: StartResearchForm) -> Run | None:
    """Start the research; a refusal becomes an error on the form (None)."""
    data = form.cleaned_data
    try:
        return services.run_start(
            owner=request.user,
            topic=data["topic"],
            model=data["model"],
            max_steps=data["max_steps"],
            dataset_id=_dataset_id(request, data),
            review_plan=data["review_plan"],
            clarify=data["clarify"],
        )
    except Throttled as error:
        form.add_error(None, retry_message("researches started", error.wait))
        request.throttle_wait = error.wait
    except TooManyRuns as error:
        form.add_error(None, error.message)
    except InvalidInput as error:
        field = error.field if error.field in form.fields else None
        form.add_error(field, sentence(error.message, field))
    return None


def _dataset_id(request: HttpRequest, data: dict) -> int | None:
    """The dataset chosen; the starter one, not loaded yet, is loaded for a real model (for the
    demo model, run_start loads it in its own transaction)."""
    if data["dataset"] != STARTER:
        return int(data["dataset"]) if data["dataset"] else None
    if data["model"] == DEMO_MODEL:
        return None
    return starter_dataset_load(owner=request.user)[0].pk


@login_required
@require_GET
def run(request: HttpRequest, run_id: int) -> HttpResponse:
    run = run_or_404(request, run_id)
    if not run.is_root:
        return redirect(f"{reverse('run', args=[run.root_id])}?agent={run.pk}")
    return run_page(request, run)


def run_page(
    request: HttpRequest, run: Run, *, followup: dict | None = None, status: int = 200
) -> HttpResponse:
    """The live page of a root; `followup` is a follow-up question refused, with its error
    (frontend.followups), shown under the report."""
    snapshot = selectors.tree_snapshot(root=run)
    config = {
        "root": run.pk,
        "page": reverse("run", args=[run.pk]),  # the address bar's, when answered elsewhere
        "selected": _selected(request, snapshot),
        "snapshot": snapshot,
        "socket": f"/ws/runs/{run.pk}/",
        "panel": reverse("agent-panel", args=[run.pk, 0]),
        "cancel": reverse("api:run-cancel", args=[0]),
        "plan": reverse("api:run-plan", args=[run.pk]),
        "approve": reverse("api:run-plan-approve", args=[run.pk]),
        "clarify": reverse("api:run-clarify", args=[run.pk]),
        "notes": reverse("api:run-notes", args=[0]),
        "events": reverse("api:run-events", args=[run.pk]),
        "report": reverse("run-report", args=[run.pk]),
        "resume": reverse("api:run-resume", args=[run.pk]),
        "resumable": endings.resumable(status=run.status, error=run.error),
        "resumed": selectors.resumed_run_ids(root_id=run.pk),
        # A passage a message names, by its document's heading (the feed's script).
        "documents": passages.dataset_headings(dataset_id=run.dataset_id, owner_id=run.owner_id),
    }
    context = {
        "run": run,
        # The badge as the script draws it (static/page/tiles.js), so it never changes words
        # when the script runs: its label, and its colour while active or after it ended.
        "status_label": library.status_label(run),
        "ending": ending_of(status=run.status, error=run.error),
        "config": config,
        "demo": run.model == DEMO_MODEL,
        "tiles": header_tiles(snapshot),
        "thread": thread_of(run),
        "followup": followup or {},
        **_stage(run),
    }
    return render(request, "run.html", context, status=status)


def _stage(run: Run) -> dict:
    """The report on stage once the research ended: the Report tab's content."""
    if run.is_active or not run.report:
        return {"report_html": ""}
    parts = report_parts(run, heading_offset=1)
    return {"parts": parts, "report_html": parts.html}


@login_required
@require_GET
def run_report(request: HttpRequest, run_id: int) -> HttpResponse:
    """The Report tab of an ended research (HTML), which the page loads when it ends."""
    run = run_or_404(request, run_id)
    if not run.is_root or run.is_active or not run.report:
        raise Http404("this research has no report yet.")
    return render(request, "report_stage.html", {"run": run, **_stage(run)})


def _selected(request: HttpRequest, snapshot: dict) -> int:
    wanted = request.GET.get("agent", "")
    ids = {run["id"] for run in snapshot["runs"]}
    return int(wanted) if wanted.isdigit() and int(wanted) in ids else snapshot["root"]


@login_required
@require_GET
def agent_panel(request: HttpRequest, root_id: int, run_id: int) -> HttpResponse:
    """One agent of a tree: reason, task, timeline, transcript, messages, report (HTML)."""
    run = run_or_404(request, run_id)
    if run.root_id != root_id:
        raise Http404("no such agent in this research.")
    panel = selectors.agent_panel(run=run)
    for step in panel.steps:
        step.line = step_line(step)
    ending = ending_of(status=run.status, error=run.error)
    context = {
        "panel": panel,
        "run": run,
        "ending": ending,
        "ending_word": ending.replace("_", " "),
        "status_label": library.status_label(run),
        "error_sentence": sentence(run.error),
        "task": listed_topic(run),
        "worked": worked_text(run),
        "steps": steps_text(run.steps, run.max_steps),
        # Its headings under the panel's own; the root's report is also on stage.
        "parts": report_parts(run, citations=panel.citations, heading_offset=3)
        if run.report
        else None,
    }
    return render(request, "agent_panel.html", context)
