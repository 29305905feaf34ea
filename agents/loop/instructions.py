"""What an agent is told before its first round: its system prompt (the sections its tools
and its kind bring) and its task."""

from agents import kinds, prompts
from agents.runtime.context import AgentContext
from agents.tools import Tool
from research.models import Run


def system_prompt(ctx: AgentContext, run: Run, tools: dict[str, Tool]) -> str:
    catalog = kinds.catalog()
    parts = [prompts.load("research")]
    if "query" in tools:
        parts.append(prompts.load("knowledge"))
    if "write_plan" in tools:
        parts.append(prompts.load("plan"))
    if "spawn_subagent" in tools:
        parts.append(prompts.load("spawn"))
        parts.append(kinds_section(catalog, model=ctx.model))
    if not ctx.is_root:
        parts.append(prompts.render("subagent", name=run.name, reason=run.reason))
        kind = catalog.kinds.get(run.kind or kinds.DEFAULT_KIND)
        if kind is not None:
            parts.append(kind.instructions)
        parts.append(prompts.load("messaging"))
    parts += [tool.prompt for tool in tools.values()]  # sections tools bring (remote tools)
    return prompts.join(*parts)


def kinds_section(catalog: kinds.Catalog, *, model: str) -> str:
    """The kinds (and tiers) a parent may pick from, one line each (seed 002's capabilities)."""
    lines = ["Kinds of sub-agent (the `kind` of spawn_subagent; default researcher):"]
    for kind in catalog.kinds.values():
        lines.append(
            f"- {kind.name}: {kind.description} "
            f"(steps {kind.min_steps}-{kind.max_steps}, default {kind.default_steps})"
        )
    if catalog.tiers:
        lines.append(
            f"Model tiers (the `tier`; without one a sub-agent runs on your model, {model}):"
        )
        lines += [f"- {tier}: {name}" for tier, name in catalog.tiers.items()]
    lines.append(
        "Use spawn_subagents to start several at once. Each report comes to you when its "
        "sub-agent ends; wait_subagents blocks until they do, inspect_subagent looks inside "
        "one that works."
    )
    return "\n".join(lines)


def task_message(ctx: AgentContext, run: Run) -> str:
    """The agent's task; a sub-agent's ends with the step budget it got, as one line (seed
    001: the clipped number is the one it relies on)."""
    if ctx.is_root:
        return run.topic
    return (
        f"{run.topic}\n\nYour step budget: {run.max_steps} model calls; the last one writes "
        "your report."
    )
