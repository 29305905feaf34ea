"""The MCP tools of a research's plan: read it (`get_plan`) and approve it, as it is or
edited (`approve_plan`), as GET and POST /v1/gb/research/<id>/plan[/approve] do.

A research started with review_plan pauses once its lead has written a plan; without these
tools an assistant that started it could only tell the user to go to Canopy. The answers are
the REST API's (`PlanSerializer`) and so are the refusals: another user's research is not
found, a sub-agent's plan is its root's, and a research that does not wait for a review
cannot be approved.
"""

import json
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Annotated, Any

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from mcp.server.mcpserver import Context, MCPServer
from mcp.types import CallToolResult, ToolAnnotations
from pydantic import Field

from research import selectors, services
from research.errors import NotFound
from research.models import Run
from research.serializers import PlanSerializer

# How a tool runs `work(owner)` as the client's user and turns its answer or refusal into a
# tool result (`Tools.call`).
Call = Callable[[Context, Callable[[AbstractBaseUser], Any]], Awaitable[CallToolResult]]

RootId = Annotated[
    int, Field(description="The id of a research (its lead agent), as start_research gave it.")
]
PlanItems = Annotated[
    list[str] | None,
    Field(
        description="The plan as the user edited it, one string per item (1 to "
        f"{settings.RESEARCH_PLAN_MAX_ITEMS} items, each short and distinct). Omit to approve "
        "the plan as get_plan shows it."
    ),
]


class PlanTools:
    def __init__(self, *, call: Call, on_started: Callable[[int], None] | None) -> None:
        self.call = call
        self.on_started = on_started

    def register(self, server: MCPServer, *, reads: ToolAnnotations) -> None:
        server.add_tool(self.get_plan, name="get_plan", annotations=reads)
        server.add_tool(
            self.approve_plan,
            name="approve_plan",
            annotations=ToolAnnotations(destructive_hint=False, idempotent_hint=False),
        )

    async def get_plan(self, research_id: RootId, ctx: Context) -> CallToolResult:
        """The lead agent's plan of a research: its items, each with the status its
        sub-agents give it (open, working, covered, failed, gap), `awaiting_review` (true
        while the research is paused for the user to approve the plan), `approved`, and every
        version in `history`. Show the items to the user before calling approve_plan."""
        return await self.call(ctx, partial(_plan, research_id=research_id))

    async def approve_plan(
        self, research_id: RootId, ctx: Context, items: PlanItems = None
    ) -> CallToolResult:
        """Approve the plan of a research waiting for its review (get_plan:
        `awaiting_review` true), as it is or with the user's edits in `items` (a new
        version). The research resumes from the approved plan: follow it with
        follow_research. Only approve what the user agreed to. Returns the plan as get_plan
        does; a research that is not waiting for a review is refused."""

        def approve(owner: AbstractBaseUser) -> dict:
            run = _root(owner, research_id)
            services.plan_approve(run=run, items=items)
            if self.on_started is not None:
                self.on_started(run.pk)
            run.refresh_from_db()
            return _serialized(run)

        return await self.call(ctx, approve)


def _root(owner: AbstractBaseUser, research_id: int) -> Run:
    run = selectors.run_get(owner=owner, run_id=research_id)
    if not run.is_root:
        raise NotFound(f"run {run.pk} is a sub-agent: the plan is its root's (run {run.root_id}).")
    return run


def _plan(owner: AbstractBaseUser, *, research_id: int) -> dict:
    return _serialized(_root(owner, research_id))


def _serialized(root: Run) -> dict:
    return json.loads(json.dumps(PlanSerializer(selectors.plan_view(root=root)).data))
