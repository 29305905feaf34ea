"""The OpenAPI schema says what the API does (issue 16: schemathesis found 32 disagreements).

`CanopyAutoSchema` adds the error answers every view can give, in the shape the exception
handler gives them: 400 where there is input, 413 where there is a body, 401 and 403
everywhere, 404 where the path names a run or a dataset, 429 where a research starts.
`add_bounds` (a postprocessing hook) writes the limits the services enforce (settings) into
the schema: they are checked in the service, so the API, the CLI and the page say the same
thing, and documented here.
"""

from typing import Any

from django.conf import settings
from drf_spectacular.openapi import AutoSchema

DETAIL = {
    "type": "object",
    "properties": {"detail": {"type": "string"}},
    "required": ["detail"],
}
# A 400 names each bad field (a list of messages per field) or, for a body that is not
# JSON, says so in `detail`.
FIELD_ERRORS = {
    "type": "object",
    "additionalProperties": {
        "oneOf": [{"type": "array", "items": {"type": "string"}}, {"type": "string"}]
    },
}


def _error(description: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


class CanopyAutoSchema(AutoSchema):
    def _get_response_bodies(self, direction: str = "response") -> dict[str, Any]:
        responses = super()._get_response_bodies(direction)
        if direction != "response":
            return responses
        method = self.method.upper()
        query = {
            parameter["name"]
            for parameter in self._get_parameters()
            if parameter.get("in") == "query"
        }
        if method in ("POST", "PUT", "PATCH") or query:
            responses.setdefault(
                "400", _error("the input is invalid: each bad field is named", FIELD_ERRORS)
            )
        if method in ("POST", "PUT", "PATCH"):
            responses.setdefault("413", _error("the body is larger than the API takes", DETAIL))
        responses.setdefault("401", _error("not signed in", DETAIL))
        responses.setdefault("403", _error("signed in, but not allowed", DETAIL))
        if "{" in self.path or query & {"cursor", "page"}:
            responses.setdefault("404", _error("no such run, dataset or page of yours", DETAIL))
        if method == "POST" and self.path.rstrip("/").endswith("/research"):
            responses.setdefault(
                "429", _error("too many researches working: wait for one to end", DETAIL)
            )
        if getattr(self.view, "throttle_classes", None):  # research/ops/throttles.py
            responses.setdefault(
                "429", _error("too many requests: Retry-After says when to try again", DETAIL)
            )
        return responses


def add_bounds(result: dict[str, Any], generator, request, public) -> dict[str, Any]:
    """Write the limits of settings into the request schemas and query parameters."""
    components = result.get("components", {}).get("schemas", {})
    start = components.get("RunStartRequest", {}).get("properties", {})
    if "topic" in start:
        start["topic"].update(minLength=1, maxLength=settings.RESEARCH_TOPIC_MAX_CHARS)
    if "max_steps" in start:
        start["max_steps"].update(minimum=1, maximum=settings.RESEARCH_MAX_STEPS_LIMIT)
    for path in result.get("paths", {}).values():
        for operation in path.values():
            for parameter in operation.get("parameters", []):
                if parameter.get("in") == "path" and parameter["schema"].get("type") == "integer":
                    parameter["schema"].setdefault("minimum", 1)
                if parameter.get("name") == "page_size":
                    parameter["schema"].update(minimum=1)
    return result
