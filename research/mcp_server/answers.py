"""How the MCP tools answer: a domain refusal as a tool error, results as JSON text, a
research as a listing or in full with its progress line (research.mcp_server.tools declares
the tools; these are what they share)."""

import json
from collections.abc import Callable
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.db import close_old_connections
from mcp.types import CallToolResult, TextContent

from research import selectors
from research.errors import InvalidInput, NotFound
from research.events.payloads import run_fields
from research.models import ACTIVE_STATUSES, Run

# Fields of a run that a listing leaves out: the report is read with get_report.
LISTED_WITHOUT = ("report",)
AGENT_FIELDS = (
    "id",
    "parent_id",
    "depth",
    "name",
    "reason",
    "status",
    "state",
    "steps",
    "max_steps",
    "cost_usd",
    "tree_cost_usd",
    "error",
)


class Refused(Exception):
    """A call the domain refused; its text is what the client reads."""


def as_owner(work: Callable[[AbstractBaseUser], Any], owner_id: int) -> Any:
    # Like an agent thread: connections that went stale are closed (pooled ones given back).
    close_old_connections()
    try:
        return work(get_user_model().objects.get(pk=owner_id))
    finally:
        close_old_connections()


def cursor_run(owner: AbstractBaseUser, cursor: str) -> Run:
    prefix, _, number = cursor.partition("-")
    try:
        if prefix == "before" and number.isdigit():
            return selectors.run_get(owner=owner, run_id=int(number))
    except NotFound:
        pass
    raise InvalidInput(
        f"cursor {cursor!r} is not a next_cursor that list_research gave.", field="cursor"
    )


def listed(run: Run) -> dict:
    fields = run_fields(run)
    return {k: v for k, v in fields.items() if k not in LISTED_WITHOUT} | {
        "has_report": bool(run.report)
    }


def research_of(owner: AbstractBaseUser, *, research_id: int) -> dict:
    run = selectors.run_get(owner=owner, run_id=research_id)
    latest = selectors.run_states(run=run).order_by("-id").first()
    agents = [agent for agent in selectors.subtree_runs(run=run) if agent.pk != run.pk]
    return {
        **listed(run),
        "detail": latest.detail if latest else "",
        "agents": [
            {key: value for key, value in run_fields(agent).items() if key in AGENT_FIELDS}
            for agent in agents
        ],
    }


def progress_line(research: dict) -> str:
    """One line saying where a research is: what a client shows while it waits."""
    agents = research["agents"]
    working = sum(agent["status"] in ACTIVE_STATUSES for agent in agents)
    steps = research["steps"] + sum(agent["steps"] for agent in agents)
    doing = research["state"] + (f" ({research['detail']})" if research["detail"] else "")
    team = f", {len(agents)} sub-agents ({working} working)" if agents else ""
    return (
        f"research {research['id']} {research['status']}: {doing}{team}, {steps} steps, "
        f"${research['tree_cost_usd']}"
    )


def validation_text(detail: Any) -> str:
    """DRF's field errors as one line: `field: message` for each."""
    if isinstance(detail, dict):
        return " ".join(
            f"{field}: {' '.join(str(m) for m in messages)}" for field, messages in detail.items()
        )
    return " ".join(str(message) for message in detail)


def result_of(data: Any) -> CallToolResult:
    return CallToolResult(
        content=[TextContent(type="text", text=json.dumps(data, indent=1))],
        structured_content=data,
    )


def error_result(text: str) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=text)], is_error=True)
