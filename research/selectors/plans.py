"""A root's plan as the page, the API and the final report read it: the items of its latest
version, each with the status its sub-agents give it, and the history of versions.

An item's identity is its text: a sub-agent names the item it covers (`Run.plan_item`), so an
item reworded by the lead or the analyst is a new item that needs its own research, never one
"covered" by work on the old words. A sub-agent covers its item when it ended done with a
report that cites at least one source it saw itself, or its own sub-agents saw (a verified
citation of a URL they read, searched or queried): one that ended done having found nothing
("No passage of the knowledge base matches ...") leaves its item a gap, and so does one
that only passes on a sibling's finding (a message quoting another agent's source), so
that the plan and the report's coverage section never call covered what nothing it found
supports. An item no sub-agent took is the lead's own: covered when the lead ended done after
research of its own (a search, a page or a knowledge-base query), a gap otherwise.
"""

from functools import cache
from typing import Any

from research.events.payloads import iso
from research.models import ACTIVE_STATUSES, Citation, Plan, Run, Source, State, Status, Step
from research.sql import Instances, one, placeholders

# An item's status, from the sub-agents that name it (seed 001: coverage and gaps).
OPEN, WORKING, COVERED, FAILED, GAP = "open", "working", "covered", "failed", "gap"


def item_status(agents: list[Run], *, reported: bool) -> str:
    """`agents` carry `cites`: whether the agent's report cites a source its tree saw.
    `reported`: the research wrote its report (it is writing it, or ended done), so what
    nobody covered is a gap in it; a research cancelled or failed before that leaves an
    item nobody took open, and one whose agents failed, failed. The page's script follows
    this rule live (static/page/plan.js, `live`), and words a failed item whose agents were
    all stopped (cancelled, interrupted, out of time) by how they ended."""
    if any(agent.status in ACTIVE_STATUSES for agent in agents):
        return WORKING
    if any(agent.status == Status.DONE and agent.cites for agent in agents):
        return COVERED
    if reported or any(agent.status == Status.DONE for agent in agents):
        return GAP  # nobody covered it, or its agents found nothing to cite
    return FAILED if agents else OPEN


def plan_items(*, root: Run, ending: bool = False) -> list[dict[str, Any]] | None:
    """The latest plan's items with their status and agents; None when there is no plan.
    `ending`: the root is writing its report, so what is not covered now is a gap. The page
    and the API read it with the plan: its statements are built once."""
    return _plan_items(root.pk, reported=ending or root.status == Status.DONE)


def plan_items_at_end(*, root_id: int) -> list[dict[str, Any]] | None:
    """plan_items as a root reads them while it ends: from its id, without its row."""
    return _plan_items(root_id, reported=True)


def _plan_items(root_id: int, *, reported: bool) -> list[dict[str, Any]] | None:
    plan = _latest().first(_latest_sql(), [root_id])
    if plan is None:
        return None
    agents: dict[str, list[Run]] = {item: [] for item in plan.items}
    # The tree's agents that name an item, oldest first (an older version's words left out).
    for agent in _covering().all(_covering_sql(), [root_id]):
        if agent.plan_item in agents:
            agents[agent.plan_item].append(agent)
    lead_covers = reported and _lead_researched(root_id)
    return [
        _item(number, item, agents[item], reported=reported, lead=root_id if lead_covers else None)
        for number, item in enumerate(plan.items, start=1)
    ]


# The tools that find things: a lead that used one researched something itself.
RESEARCH_TOOLS = ("web_search", "read_page", "query")


def _lead_researched(root_id: int) -> bool:
    return one(_researched_sql(), [root_id, Step.Kind.TOOL, *RESEARCH_TOOLS, False]) is not None


@cache
def _latest() -> Instances:
    return Instances(Plan, ["id", "items"])


@cache
def _latest_sql() -> str:
    return (
        f"SELECT {_latest().columns} FROM {Plan._meta.db_table} WHERE root_id = %s "
        "ORDER BY version DESC LIMIT 1"
    )


@cache
def _covering() -> Instances:
    return Instances(Run, ["id", "name", "status", "plan_item"], alias="r", extra=["cites"])


@cache
def _covering_sql() -> str:
    # Each agent's citations are stored with its finish (research.services.run_finish). A
    # citation's source is the tree's best for its URL (a page before a search result, of
    # any agent): the agent saw it itself when one of its own sources, or its sub-agents',
    # has that URL as asked or as fetched. Its sub-agents one level down: under the default
    # depth limit (RESEARCH_MAX_SUBAGENT_DEPTH, 2) an item's agent has no deeper ones.
    runs, sources = Run._meta.db_table, Source._meta.db_table
    own = (
        f"SELECT 1 FROM {sources} o WHERE o.root_id = r.root_id "
        "AND (o.run_id = r.id "
        f"OR o.run_id IN (SELECT k.id FROM {runs} k WHERE k.parent_id = r.id)) "
        "AND (o.url IN (s.url, s.final_url) "
        "OR (o.final_url <> '' AND o.final_url IN (s.url, s.final_url)))"
    )
    return (
        f"SELECT {_covering().columns}, EXISTS (SELECT 1 FROM {Citation._meta.db_table} c "
        f"JOIN {sources} s ON s.id = c.source_id WHERE c.run_id = r.id AND c.verified "
        f"AND EXISTS ({own})) "
        f"FROM {runs} r WHERE r.root_id = %s AND r.plan_item <> '' ORDER BY r.id"
    )


@cache
def _researched_sql() -> str:
    return (
        f"SELECT 1 FROM {Step._meta.db_table} WHERE run_id = %s AND kind = %s "
        f"AND tool IN ({placeholders(len(RESEARCH_TOOLS))}) AND is_error = %s LIMIT 1"
    )


def _item(number: int, text: str, agents: list[Run], *, reported: bool, lead: int | None) -> dict:
    if not agents and lead is not None:  # the lead's own item, researched by the lead
        return {
            "number": number,
            "text": text,
            "status": COVERED,
            # Named as the tree names the root agent (static/page/format.js agentName).
            "agents": [{"id": lead, "name": "root", "status": Status.DONE}],
        }
    return {
        "number": number,
        "text": text,
        "status": item_status(agents, reported=reported),
        "agents": [
            {"id": agent.pk, "name": agent.name, "status": agent.status} for agent in agents
        ],
    }


def _changes(versions: list[Plan]) -> dict[str, Any] | None:
    """What the latest version changed since the last one the analyst approved, when it is
    not approved itself: what the analyst reviews again."""
    if not versions or versions[-1].approved_at is not None:
        return None
    approved = next((plan for plan in reversed(versions) if plan.approved_at), None)
    if approved is None:
        return None
    latest = versions[-1]
    return {
        "since_version": approved.version,
        "added": [item for item in latest.items if item not in approved.items],
        "removed": [item for item in approved.items if item not in latest.items],
    }


def plan_view(*, root: Run) -> dict[str, Any]:
    """GET /v1/gb/research/<id>/plan: the plan, its review, its history."""
    versions = list(Plan.objects.filter(root_id=root.pk).order_by("version"))
    latest = versions[-1] if versions else None
    return {
        "research": root.pk,
        "review_plan": root.review_plan,
        # Paused for its plan, not for the answers to its lead's questions (the clarify step).
        "awaiting_review": root.status == Status.PAUSED and root.state != State.CLARIFYING,
        "changes": _changes(versions),
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
