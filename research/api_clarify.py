"""The clarify step of the REST API (issue 27): answer the lead's questions, or skip them."""

from drf_spectacular.utils import extend_schema
from rest_framework.decorators import api_view
from rest_framework.request import Request
from rest_framework.response import Response

from research import selectors, services
from research.api_helpers import checked, json_or_form
from research.serializers import ClarifyAnswerSerializer, RefusalSerializer, RunOutputSerializer


@extend_schema(
    request=json_or_form(ClarifyAnswerSerializer),
    responses={200: RunOutputSerializer, 409: RefusalSerializer},
)
@api_view(["POST"])
def run_clarify(request: Request, run_id: int) -> Response:
    """Answer the questions a research started with `clarify` asked before it started
    (`answers`, one per question), or skip them (`skip`: true): it starts at once, with the
    answers in its lead's task."""
    run = selectors.run_get(owner=request.user, run_id=run_id)
    data = checked(ClarifyAnswerSerializer, request.data)
    services.clarify_answer(run=run, answers=data.get("answers"), skip=data["skip"])
    run.refresh_from_db()
    return Response(RunOutputSerializer(run).data)
