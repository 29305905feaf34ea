"""The OpenAPI schema says what the API does (issue 16: schemathesis found 32 disagreements).

`CanopyAutoSchema` adds the error answers every view can give, in the shape the exception
handler gives them: 400 where there is input, 413 where there is a body, 401 and 403
everywhere, 404 where the path names a run or a dataset, 429 where a research starts, 409
where one is resumed.
`add_bounds` (a postprocessing hook) writes the limits the services enforce (settings) into
the schema: they are checked in the service, so the API, the CLI and the page say the same
thing, and documented here.

Every operation is tagged with the resource it acts on (`RESOURCES`, by the path's segments)
and has an operationId of `OPERATION_IDS`: drf-spectacular's own would tag everything "gb"
(the path's first segment after /v1/) and number the ids it derives twice
(`gb_research_retrieve_2`), so the explorer was one long list and generated clients had
methods named by accident. A view's own `extend_schema(operation_id=...)` still wins.
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


PREFIX = "/v1/gb/"
# The tag of a path, from its last segment that names a resource (research is the default).
RESOURCES = {
    "plan": "plans",
    "notes": "notes",
    "events": "events",
    "export": "exports",
    "datasets": "datasets",
}
OPERATION_IDS = {
    ("research", "GET"): "research_list",
    ("research", "POST"): "research_start",
    ("research/{run_id}", "GET"): "research_get",
    ("research/{run_id}", "PATCH"): "research_star",
    ("research/{run_id}", "DELETE"): "research_delete",
    ("research/{run_id}/cancel", "POST"): "research_cancel",
    ("research/{run_id}/tree", "GET"): "research_tree",
    ("research/{run_id}/states", "GET"): "research_states",
    ("research/{run_id}/messages", "GET"): "research_messages",
    ("research/{run_id}/report", "GET"): "research_report",
    ("research/{run_id}/plan", "GET"): "plan_get",
    ("research/{run_id}/plan/approve", "POST"): "plan_approve",
    ("research/{run_id}/notes", "POST"): "note_send",
    ("research/{run_id}/clarify", "POST"): "research_clarify",
    ("research/{run_id}/events", "GET"): "events_list",
    ("datasets", "GET"): "dataset_list",
    ("datasets", "POST"): "dataset_create",
    ("datasets/{dataset_id}", "GET"): "dataset_get",
    ("datasets/{dataset_id}", "DELETE"): "dataset_delete",
    ("datasets/{dataset_id}/documents", "GET"): "document_list",
    ("datasets/{dataset_id}/documents", "POST"): "document_upload",
    ("datasets/{dataset_id}/documents/{document_id}", "GET"): "document_get",
    ("datasets/{dataset_id}/documents/{document_id}", "DELETE"): "document_delete",
    ("datasets/{dataset_id}/query", "GET"): "dataset_query",
}


def resource_of(path: str) -> str:
    segments = path.removeprefix(PREFIX).split("/")
    return next((RESOURCES[s] for s in reversed(segments) if s in RESOURCES), "research")


def _error(description: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


class CanopyAutoSchema(AutoSchema):
    def get_tags(self) -> list[str]:
        return [resource_of(self.path)]

    def get_operation_id(self) -> str:
        named = OPERATION_IDS.get((self.path.removeprefix(PREFIX), self.method.upper()))
        return named or super().get_operation_id()

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
        if method == "POST" and self.path.rstrip("/").endswith(("/research", "/resume")):
            responses.setdefault(
                "429", _error("too many researches working: wait for one to end", DETAIL)
            )
        if method == "POST" and self.path.rstrip("/").endswith("/resume"):
            responses.setdefault(
                "409", _error("the research ended done, was cancelled, or still works", DETAIL)
            )
        if getattr(self.view, "throttle_classes", None):  # research/ops/throttles.py
            responses.setdefault(
                "429", _error("too many requests: Retry-After says when to try again", DETAIL)
            )
        return responses


def add_bounds(result: dict[str, Any], generator, request, public) -> dict[str, Any]:
    """Write the limits of settings into the request schemas and query parameters."""
    components = result.get("components", {}).get("schemas", {})
    start = components.get("RunStart", {}).get("properties", {})
    if "topic" in start:
        start["topic"].update(minLength=1, maxLength=settings.RESEARCH_TOPIC_MAX_CHARS)
    if "max_steps" in start:
        start["max_steps"].update(minimum=1, maximum=settings.RESEARCH_MAX_STEPS_LIMIT)
    for path in result.get("paths", {}).values():
        for operation in path.values():
            # A body's field the request does not take is a 400 (research.api_helpers.checked).
            for body in operation.get("requestBody", {}).get("content", {}).values():
                name = body["schema"].get("$ref", "").rpartition("/")[2]
                if name in components:
                    components[name]["additionalProperties"] = False
            for parameter in operation.get("parameters", []):
                if parameter.get("in") == "path" and parameter["schema"].get("type") == "integer":
                    parameter["schema"].setdefault("minimum", 1)
                if parameter.get("name") == "page_size":
                    parameter["schema"].update(minimum=1)
    return result
