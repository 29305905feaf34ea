"""The REST API under /v1/gb/research: one thin view per operation.

Flow, top to bottom: authenticate → permit (IsAuthenticated) → check input → service or
selector (always scoped to the owner) → output serializer. Domain errors become HTTP answers
in `exception_handler`.
"""

from django.conf import settings
from django.core.exceptions import RequestDataTooBig, TooManyFieldsSent
from django.http import JsonResponse
from django.views import defaults
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import exceptions, status
from rest_framework.decorators import api_view, throttle_classes
from rest_framework.exceptions import ValidationError
from rest_framework.pagination import CursorPagination
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from research import selectors, services
from research.api_helpers import PAGE_PARAMETERS, checked, json_or_form
from research.errors import (
    Conflict,
    InvalidInput,
    NotFound,
    ResearchError,
    Throttled,
    TooManyRuns,
)
from research.ops.throttles import NotesThrottle
from research.serializers import (
    EventSerializer,
    EventsFilterSerializer,
    MessageSerializer,
    NoteSerializer,
    PlanApproveSerializer,
    PlanSerializer,
    RefusalSerializer,
    ReportSerializer,
    ResumeSerializer,
    RunChangeSerializer,
    RunInTreeSerializer,
    RunListFilterSerializer,
    RunOutputSerializer,
    RunPageSerializer,
    RunStartSerializer,
    RunStateSerializer,
    RunSummarySerializer,
)


def exception_handler(exc, context):
    if isinstance(exc, RequestDataTooBig):
        # Django's own answer is an HTML page; a client of this API reads JSON.
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        return Response(
            {"detail": f"The request body is larger than the {limit:,} bytes this API takes."},
            status=status.HTTP_413_REQUEST_ENTITY_TOO_LARGE,
        )
    if isinstance(exc, TooManyFieldsSent):
        limit = settings.DATA_UPLOAD_MAX_NUMBER_FIELDS
        return Response(
            {"detail": f"The request has more than the {limit:,} fields this API takes."},
            status=status.HTTP_400_BAD_REQUEST,
        )
    if isinstance(exc, Throttled):
        # DRF's own 429: its detail and Retry-After, as when its throttle classes refused.
        exc = exceptions.Throttled(exc.wait)
    elif isinstance(exc, InvalidInput):
        exc = ValidationError({exc.field or "non_field_errors": [exc.message]})
    elif isinstance(exc, NotFound):
        return Response({"detail": exc.message}, status=status.HTTP_404_NOT_FOUND)
    elif isinstance(exc, Conflict):
        return Response({"detail": exc.message}, status=status.HTTP_409_CONFLICT)
    elif isinstance(exc, TooManyRuns):
        return Response({"detail": exc.message}, status=status.HTTP_429_TOO_MANY_REQUESTS)
    elif isinstance(exc, ResearchError):
        return Response({"detail": exc.message}, status=status.HTTP_400_BAD_REQUEST)
    return drf_exception_handler(exc, context)


class RunCursorPagination(CursorPagination):
    """Newest first, by a cursor over (created_at, id): page 1,000 costs what page 1 does,
    and a run started meanwhile never shifts a page. `next` and `previous` are links."""

    ordering = ("-created_at", "-id")
    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 200

    def get_page_size(self, request: Request) -> int:
        """The page size asked for, or a 400: DRF's own answers 0, -5, "abc" or 1.5 with the
        default page and 500 with 200, where MCP refuses them (research.mcp_server)."""
        raw = request.query_params.get(self.page_size_query_param)
        if raw is None:
            return self.page_size
        whole = raw.isascii() and raw.isdigit() and len(raw) <= 4
        if not whole or not 1 <= int(raw) <= self.max_page_size:
            message = f"page_size must be from 1 to {self.max_page_size}, not {raw[:20]}."
            raise ValidationError({"page_size": [message]})
        return int(raw)


def _run(request: Request, run_id: int):
    return selectors.run_get(owner=request.user, run_id=run_id)


@extend_schema(
    methods=["GET"],
    parameters=[
        RunListFilterSerializer,
        OpenApiParameter("cursor", str, description="from the `next` or `previous` link"),
        OpenApiParameter(
            "page_size",
            int,
            description=f"runs per page, at most {RunCursorPagination.max_page_size}",
        ),
    ],
    responses=RunPageSerializer,
)
@extend_schema(
    methods=["POST"],
    request=json_or_form(RunStartSerializer),
    responses={201: RunOutputSerializer},
)
@api_view(["GET", "POST"])
def runs(request: Request) -> Response:
    """GET: the user's runs, newest first, sub-agents too unless filtered (root_id,
    parent_id); `q`, `status`, `ending`, `since` and `until` narrow them as the runs page
    does. POST: start a research (counted against THROTTLE_RESEARCH_START by the start
    service, research.services.start)."""
    if request.method == "POST":
        return run_start(request)
    filters = checked(RunListFilterSerializer, request.query_params, also=PAGE_PARAMETERS)
    queryset = selectors.run_summaries(
        selectors.run_list(owner=request.user, **filters),
        report_chars=settings.RESEARCH_LIST_REPORT_CHARS,
    )
    paginator = RunCursorPagination()
    page = paginator.paginate_queryset(queryset, request)
    return paginator.get_paginated_response(RunSummarySerializer(page, many=True).data)


def run_start(request: Request) -> Response:
    data = checked(RunStartSerializer, request.data)
    run = services.run_start(
        owner=request.user,
        topic=data["topic"],
        max_steps=data.get("max_steps"),
        model=data.get("model") or None,
        dataset_id=data.get("dataset"),
        review_plan=data.get("review_plan", False),
        clarify=data.get("clarify", False),
        callback_url=data.get("callback_url") or "",
        follows_id=data.get("follows"),
    )
    return Response(RunOutputSerializer(run).data, status=status.HTTP_201_CREATED)


@extend_schema(methods=["GET"], responses=RunOutputSerializer)
@extend_schema(methods=["PATCH"], request=RunChangeSerializer, responses=RunOutputSerializer)
@extend_schema(methods=["DELETE"], responses={204: None, 409: RefusalSerializer})
@api_view(["GET", "PATCH", "DELETE"])
def run_detail(request: Request, run_id: int) -> Response:
    """GET: the run. PATCH: star its research or take the star off (`starred`). DELETE: the
    research and everything under it (409 for a sub-agent: a research is deleted whole)."""
    run = _run(request, run_id)
    if request.method == "DELETE":
        services.run_delete(run=run)
        return Response(status=status.HTTP_204_NO_CONTENT)
    if request.method == "PATCH":
        run = services.run_star(
            run=run, starred=checked(RunChangeSerializer, request.data)["starred"]
        )
    return Response(RunOutputSerializer(run).data)


@extend_schema(request=None, responses={202: RunOutputSerializer, 409: RefusalSerializer})
@api_view(["POST"])
def run_cancel(request: Request, run_id: int) -> Response:
    """Ask a working research (or one sub-agent) and its sub-agents to stop: 202 with the run
    as it is right after. 409 for a run that has already ended."""
    run = _run(request, run_id)
    services.run_cancel_asked(run=run)
    run.refresh_from_db()
    return Response(RunOutputSerializer(run).data, status=status.HTTP_202_ACCEPTED)


@extend_schema(request=None, responses={202: ResumeSerializer, 409: RefusalSerializer})
@api_view(["POST"])
def run_resume(request: Request, run_id: int) -> Response:
    """Resume a research that was interrupted (its worker lost, the server stopped, its model
    endpoint failing): every agent that had not ended goes on from its last completed step,
    and no completed step's model call is made again. 409 for a research that ended done,
    was cancelled, or still works."""
    run = _run(request, run_id)
    resume = services.research_resume(run=run)
    run.refresh_from_db()
    data = {
        "research": run,
        "resumed_run_ids": resume.run_ids,
        "ended_with": resume.ended_with,
        "spend": services.spend_by_attempt(root_id=run.pk),
    }
    return Response(ResumeSerializer(data).data, status=status.HTTP_202_ACCEPTED)


@extend_schema(responses=RunInTreeSerializer(many=True))
@api_view(["GET"])
def run_tree(request: Request, run_id: int) -> Response:
    """The run and all its sub-agents, parents first: build the tree from parent_id. A task
    longer than a topic may be (the verifier's) is cut; GET research/<id> has it whole."""
    run = _run(request, run_id)
    return Response(RunInTreeSerializer(selectors.run_subtree(run=run), many=True).data)


@extend_schema(responses=RunStateSerializer(many=True))
@api_view(["GET"])
def run_states(request: Request, run_id: int) -> Response:
    run = _run(request, run_id)
    return Response(RunStateSerializer(selectors.run_states(run=run), many=True).data)


@extend_schema(responses=MessageSerializer(many=True))
@api_view(["GET"])
def run_messages(request: Request, run_id: int) -> Response:
    run = _run(request, run_id)
    return Response(MessageSerializer(selectors.run_messages(run=run), many=True).data)


@extend_schema(responses=ReportSerializer)
@api_view(["GET"])
def run_report(request: Request, run_id: int) -> Response:
    """The report with each URL it cites, verified (an agent of the tree saw it) or flagged."""
    run = _run(request, run_id)
    return Response(ReportSerializer(selectors.report_of(run=run)).data)


@extend_schema(responses=PlanSerializer)
@api_view(["GET"])
def run_plan(request: Request, run_id: int) -> Response:
    """The lead's plan: each item with the status its sub-agents give it (open, working,
    covered, failed, gap), whether it waits for the analyst's review, and its history."""
    run = _run(request, run_id)
    if not run.is_root:
        raise NotFound(f"run {run.pk} is a sub-agent: the plan is its root's (run {run.root_id}).")
    return Response(PlanSerializer(selectors.plan_view(root=run)).data)


@extend_schema(
    request=json_or_form(PlanApproveSerializer),
    responses={200: PlanSerializer, 409: RefusalSerializer},
)
@api_view(["POST"])
def run_plan_approve(request: Request, run_id: int) -> Response:
    """Approve a paused research's plan, as it is or edited (`items`): it resumes from it."""
    run = _run(request, run_id)
    data = checked(PlanApproveSerializer, request.data)
    services.plan_approve(run=run, items=data.get("items"))
    run.refresh_from_db()
    return Response(PlanSerializer(selectors.plan_view(root=run)).data)


@extend_schema(
    request=json_or_form(NoteSerializer),
    responses={201: MessageSerializer, 409: RefusalSerializer},
)
@api_view(["POST"])
@throttle_classes([NotesThrottle])
def run_notes(request: Request, run_id: int) -> Response:
    """Send a note to an agent of your research (the root or any agent still working): it
    reads it at its next round, and a wait for sub-agents or messages ends at once."""
    run = _run(request, run_id)
    data = checked(NoteSerializer, request.data)
    note = services.note_send(run=run, author_id=request.user.pk, text=data["text"])
    return Response(MessageSerializer(note).data, status=status.HTTP_201_CREATED)


@extend_schema(
    parameters=[OpenApiParameter("after", int, description="the last seq seen")],
    responses=EventSerializer(many=True),
)
@api_view(["GET"])
def run_events(request: Request, run_id: int) -> Response:
    """The tree's stored events after `after`, in order: what a reconnecting client missed.

    All of them, never a first slice: a client that asks for the events after N must miss
    none (DESIGN), and a tree's events are bounded by the sub-agent and step limits.
    """
    run = _run(request, run_id)
    after = checked(EventsFilterSerializer, request.query_params, also=("format",))["after"]
    events = selectors.tree_events(root_id=run.root_id, after=after)
    return Response(EventSerializer(events, many=True).data)


def server_error(request):
    """Django's 500: JSON under the API, so a script reads a JSON body on every answer, and
    the site's page elsewhere."""
    if request.path.startswith("/v1/"):
        return JsonResponse(
            {"detail": "A server error occurred; it was logged for the team. Try again later."},
            status=500,
        )
    return defaults.server_error(request)


def not_found(request, exception=None):
    """Django's 404 for a path no view matches (`/v1/gb/research/abc`): JSON under the API,
    as every other API answer, and the site's page elsewhere."""
    if request.path.startswith("/v1/"):
        return JsonResponse({"detail": f"no such API path: {request.path}"}, status=404)
    return defaults.page_not_found(request, exception)
