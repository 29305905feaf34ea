"""What an agent is told before its first round: its system prompt (the sections its tools
and its kind bring) and its task."""

from agents import kinds, prompts
from agents.runtime.context import AgentContext
from agents.tools import Tool
from research.models import Run
from research.selectors.followups import followup_of
from research.services.clarify import clarified_task


def system_prompt(ctx: AgentContext, run: Run, tools: dict[str, Tool]) -> str:
    """The research prompt, then the sections the tools bring (`Tool.prompt`), in the tools'
    order; a sub-agent's own sections (who it is, what its kind does) come before those of the
    tools that say whom it may reach (`Tool.after_identity`: its siblings, remote servers)."""
    parts = [prompts.load("research")]
    parts += [tool.prompt for tool in tools.values() if not tool.after_identity]
    if not ctx.is_root:
        parts.append(prompts.render("subagent", name=run.name, reason=run.reason))
        kind = kinds.catalog().kinds.get(run.kind or kinds.DEFAULT_KIND)
        if kind is not None:
            parts.append(kind.instructions)
    parts += [tool.prompt for tool in tools.values() if tool.after_identity]
    return prompts.join(*parts)


def task_message(ctx: AgentContext, run: Run) -> str:
    """The agent's task; a sub-agent's ends with the step budget it got, as one line (seed
    001: the clipped number is the one it relies on); a root's, with the analyst's answers to
    its clarifying questions, and a follow-up's lead's with the research it follows after them
    (research.selectors.followups)."""
    if ctx.is_root:
        task = clarified_task(topic=run.topic, clarification=run.clarification)
        followup = followup_of(run)
        if followup is None:
            return task
        intro = prompts.render(
            "followup", id=str(followup.earlier_id), topic=followup.earlier_topic
        )
        return prompts.join(task, followup.text(intro))
    return (
        f"{run.topic}\n\nYour step budget: {run.max_steps} model calls; the last one writes "
        "your report."
    )
