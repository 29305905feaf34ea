"""Follow-ups from the page (issue 27): "Ask a follow-up" under a done research's report
starts a new research in its thread, on the same model, step budget and dataset, through the
one start service. A refusal is said beside the question, which is kept."""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from frontend.forms import model_can_run
from frontend.rendering import sentence
from frontend.throttled import retry_message, throttled
from frontend.views import run_or_404, run_page
from research import services
from research.errors import InvalidInput, Throttled, TooManyRuns
from research.models import Run

QUESTION = "The follow-up question"


@login_required
@require_POST
def run_followup(request: HttpRequest, run_id: int) -> HttpResponse:
    run = run_or_404(request, run_id)
    if not run.is_root:
        raise Http404("a sub-agent is followed up with its research.")
    question = request.POST.get("question", "")
    try:
        followup = _start(request, run, question)
    except Throttled as error:
        words = retry_message("researches started", error.wait)
        return throttled(run_page(request, run, followup=_said(question, words)), error.wait)
    except TooManyRuns as error:
        return run_page(request, run, followup=_said(question, error.message), status=429)
    except InvalidInput as error:
        if error.field == "follows":  # not done (any more): the page shows no form to say it
            messages.error(request, sentence(error.message))
            return redirect("run", run_id=run.pk)
        words = sentence(error.message, error.field)
        if error.field == "topic":
            words = sentence(QUESTION + error.message[len("topic") :])
        return run_page(request, run, followup=_said(question, words), status=400)
    return redirect("run", run_id=followup.pk)


def _start(request: HttpRequest, run: Run, question: str) -> Run:
    # A model this server can no longer run gives way to the default one.
    return services.run_start(
        owner=request.user,
        topic=question,
        model=run.model if model_can_run(run.model) else None,
        max_steps=run.max_steps,
        dataset_id=run.dataset_id,
        follows_id=run.pk,
    )


def _said(question: str, error: str) -> dict:
    return {"question": question, "error": error}
