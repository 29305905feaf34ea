"""write_plan: the lead's plan (seed 001), the items it means to cover, one researcher each.

The plan is stored in versions (research.services.plans); a spawn names the item its child
covers (`plan_item`), and each item's status follows its sub-agents. A research started with
plan review pauses after its first plan until the analyst approves it.
"""

from typing import Annotated, NoReturn

from django.conf import settings
from pydantic import Field

from agents import prompts
from agents.runtime.context import AgentContext, Paused
from agents.runtime.tree import end_subagents
from agents.tools.base import ToolError
from agents.tools.tool import Tool, tool
from research import endings, services
from research.errors import ResearchError
from research.models import State
from research.selectors import team as team_reads
from research.services.plans import PLAN_ITEM_MAX_CHARS

PAUSED_FOR_REVIEW = endings.PAUSED_FOR_REVIEW
PlanItem = Annotated[str, Field(max_length=PLAN_ITEM_MAX_CHARS)]


def _for_the_lead(ctx: AgentContext, tool: Tool) -> Tool | None:
    """The lead's tool, as long a plan as the settings allow (RESEARCH_PLAN_MAX_ITEMS)."""
    if not ctx.is_root:
        return None
    return tool.with_arguments(items={"maxItems": settings.RESEARCH_PLAN_MAX_ITEMS})


@tool(
    state=State.PLANNING,
    detail=lambda args: f"{len(args.get('items') or [])} items",
    prompt=prompts.load("plan"),
    prepare=_for_the_lead,
)
def write_plan(
    ctx: AgentContext,
    items: Annotated[list[PlanItem], Field(min_length=1, description="the plan's items, in order")],
) -> str:
    """Write (or revise) your research plan: a short list of the items the report must cover,
    one line each. The analyst sees it as a checklist; each sub-agent you start names the item
    it covers, and items nobody covered are reported as gaps."""
    try:
        plan = services.plan_write(root_id=ctx.run_id, items=items)
    except ResearchError as error:
        raise ToolError(error.message) from None
    if services.plan_needs_review(root_id=ctx.run_id):
        # The analyst reviews the plan before any work on it: nothing may run meanwhile.
        end_subagents(ctx, reason=PAUSED_FOR_REVIEW)
        paused = services.plan_pause(root_id=ctx.run_id)
        wait_for_analyst(
            ctx, paused, "the research could not pause for review: it is no longer working"
        )
    items = "\n".join(f"{number}. {item}" for number, item in enumerate(plan.items, start=1))
    return (
        f"plan saved (version {plan.version}):\n{items}\n"
        "Give each sub-agent the number of the item it covers (plan_item). Call write_plan "
        "again to revise the plan; a sub-agent stays linked to the text of its item, so an "
        "item you reword is a new item."
    )


def wait_for_analyst(ctx: AgentContext, paused: bool, refusal: str) -> NoReturn:
    """End the lead's thread once its root is `paused` for the analyst (a plan's review, its
    questions); a root that could not pause was cancelled meanwhile (or ended by a sweep):
    stop as a cancel does, or else tell the model `refusal`."""
    if paused:
        raise Paused()
    ctx.cancel.apply(team_reads.cancel_flags(run_id=ctx.run_id))
    ctx.cancel.check()
    raise ToolError(refusal)


def plan_item_text(ctx: AgentContext, number: int | None) -> str:
    """The text of the root's current plan item `number` (what a spawn's `plan_item` names)."""
    if number is None:
        return ""
    plan = services.current_plan(root_id=ctx.root_id)
    if plan is None:
        raise ToolError("you have no plan yet: call write_plan before naming a plan_item")
    if not 1 <= number <= len(plan.items):
        raise ToolError(
            f"plan item {number} does not exist: your plan has items 1 to {len(plan.items)}"
        )
    return plan.items[number - 1]


WRITE_PLAN = write_plan  # the name other modules import
