"""A root's plan as the page, the API and the final report read it: the items of its latest
version, each with the status its sub-agents give it, and the history of versions."""

from typing import Any

from research.events.payloads import iso
from research.models import ACTIVE_STATUSES, Plan, Run, Status

# An item's status, from the sub-agents that name it (seed 001: coverage and gaps).
OPEN, WORKING, COVERED, FAILED, GAP = "open", "working", "covered", "failed", "gap"


def item_status(agents: list[Run], *, research_ended: bool) -> str:
    if any(agent.status in ACTIVE_STATUSES for agent in agents):
        return WORKING
    if any(agent.status == Status.DONE for agent in agents):
        return COVERED
    if research_ended:
        return GAP
    return FAILED if agents else OPEN


def plan_items(*, root: Run, ending: bool = False) -> list[dict[str, Any]] | None:
    """The latest plan's items with their status and agents; None when there is no plan.
    `ending`: the root is writing its report, so what is not covered now is a gap."""
    plan = Plan.objects.filter(root_id=root.pk).order_by("-version").first()
    if plan is None:
        return None
    agents: dict[str, list[Run]] = {item: [] for item in plan.items}
    covering = (
        Run.objects.filter(root_id=root.pk, plan_item__in=plan.items)
        .only("pk", "name", "status", "plan_item")
        .order_by("id")
    )
    for agent in covering:
        agents[agent.plan_item].append(agent)
    ended = ending or root.status not in ACTIVE_STATUSES
    return [
        {
            "number": number,
            "text": item,
            "status": item_status(agents[item], research_ended=ended),
            "agents": [
                {"id": agent.pk, "name": agent.name, "status": agent.status}
                for agent in agents[item]
            ],
        }
        for number, item in enumerate(plan.items, start=1)
    ]


def plan_view(*, root: Run) -> dict[str, Any]:
    """GET /v1/gb/research/<id>/plan: the plan, its review, its history."""
    versions = list(Plan.objects.filter(root_id=root.pk).order_by("version"))
    latest = versions[-1] if versions else None
    return {
        "research": root.pk,
        "review_plan": root.review_plan,
        "awaiting_review": root.status == Status.PAUSED,
        "version": latest.version if latest else None,
        "approved": bool(latest and latest.approved_at),
        "items": plan_items(root=root) or [],
        "history": [
            {
                "version": plan.version,
                "items": plan.items,
                "author": plan.author,
                "approved_at": iso(plan.approved_at),
                "created_at": iso(plan.created_at),
            }
            for plan in versions
        ],
    }
