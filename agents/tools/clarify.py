"""ask_clarifying_questions: the lead of a research started with `clarify` asks the analyst
up to three short questions before it starts (issue 27). Asking pauses the root as a plan
review does: its thread ends here, and the analyst's answers (or a skip) queue it again with
the answers in its task (research.services.clarify)."""

from typing import Annotated

from pydantic import Field

from agents import prompts
from agents.runtime.context import AgentContext
from agents.tools.base import ToolError
from agents.tools.plan import wait_for_analyst
from agents.tools.tool import Tool, tool
from research import services
from research.errors import ResearchError
from research.models import State
from research.services.clarify import MAX_QUESTIONS, QUESTION_MAX_CHARS

Question = Annotated[str, Field(max_length=QUESTION_MAX_CHARS)]


def _before_the_research(ctx: AgentContext, tool: Tool) -> Tool | None:
    """Offered to a lead started with `clarify` that has not asked yet."""
    if not ctx.may_clarify:  # from its run's row, as its claim returned it
        return None
    return tool


@tool(
    state=State.CLARIFYING,
    detail=lambda args: f"{len(args.get('questions') or [])} questions",
    prompt=prompts.load("clarify"),
    prepare=_before_the_research,
)
def ask_clarifying_questions(
    ctx: AgentContext,
    questions: Annotated[
        list[Question],
        Field(min_length=1, max_length=MAX_QUESTIONS, description="one short question each"),
    ],
) -> str:
    """Ask the analyst up to three short questions before you start, when the topic is
    ambiguous. The research waits for the answers, then starts again with them in your task.
    Only in your first step: once you have started, go on with the topic as it is."""
    try:
        asked = services.clarify_ask(root_id=ctx.run_id, questions=questions)
    except ResearchError as error:
        raise ToolError(error.message) from None
    wait_for_analyst(
        ctx, asked, "the research could not wait for the analyst: go on with the topic as it is"
    )
