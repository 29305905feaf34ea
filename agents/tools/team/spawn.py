"""spawn_subagent and spawn_subagents: a child (or a batch, all or none) with its name, reason,
kind, tier, task and budget, started after its record commits."""

import re
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass, replace
from functools import lru_cache, partial
from typing import Annotated, Any

from django.conf import settings
from pydantic import Field

from agents import kinds, prompts
from agents.messages import get_messenger
from agents.runtime import resilience
from agents.runtime.context import AgentContext
from agents.runtime.tree import (
    child_deadline,
)
from agents.tools.base import ToolError
from agents.tools.plan import plan_item_text
from agents.tools.tool import Tool, reshaped, tool
from research import endings, services
from research.errors import ResearchError
from research.models import Run, State
from research.selectors import team as team_reads
from research.text import content_words

NAME_PATTERN = re.compile(r"^[A-Za-z0-9_-]{1,40}$")

# The arguments of a spawn. The kinds, the tiers, the task's limit and whether a plan item can
# be named depend on the run: `_launch_arguments` sets them.
Name = Annotated[
    str, Field(description="1-40 letters, digits, - or _; unique among your sub-agents")
]
Reason = Annotated[
    str, Field(max_length=300, description="why this sub-agent has to exist, in one sentence")
]
Task = Annotated[str, Field(description="what it has to do")]
KindName = Annotated[
    str, Field(description="which kind of sub-agent (see your instructions); default researcher")
]
MaxSteps = Annotated[
    int, Field(description="its step budget; clipped to the kind's range, default the kind's")
]
PlanItem = Annotated[
    int, Field(ge=1, description="the number of the plan item it covers (see write_plan)")
]
Tier = Annotated[
    str, Field(description="the model tier it runs on; default the kind's, else your model")
]


@dataclass(frozen=True, kw_only=True)
class Subagent:
    # One entry of spawn_subagents: a sub-agent as its parent asks for it.
    name: Name
    reason: Reason
    task: Task
    kind: KindName | None = None
    max_steps: MaxSteps | None = None
    plan_item: PlanItem | None = None
    tier: Tier | None = None


# --- spawn_subagent and spawn_subagents -------------------------------------------------------


def _launch(ctx: AgentContext, entry: Subagent, catalog: kinds.Catalog) -> services.Launch:
    """What the parent asked for, resolved: the kind's tools that the parent has, the model
    of the tier (never a name the parent writes), the budget clipped to the kind's range."""
    name, reason, task = entry.name, entry.reason.strip(), entry.task.strip()
    if not NAME_PATTERN.fullmatch(name):
        raise ToolError(
            f"invalid name {name!r}: a name is 1 to 40 letters, digits, - or _ (no spaces)"
        )
    if not reason:
        raise ToolError(
            "a reason is required: say in a sentence why this sub-agent has to exist, what it "
            "covers that you cannot cover cheaply yourself. If you cannot, do not spawn it."
        )
    if not task:
        raise ToolError("a task is required: what the sub-agent has to do and bring back")
    kind_name = entry.kind or kinds.DEFAULT_KIND
    if kind_name not in catalog.kinds:  # the schema's enum says so first; this is the backstop
        raise ToolError(f"unknown kind {kind_name!r}; the kinds are: {', '.join(catalog.kinds)}")
    tier = entry.tier or ""
    if tier and tier not in catalog.tiers:
        valid = ", ".join(catalog.tiers) or "none are configured"
        raise ToolError(f"unknown tier {tier!r}; the tiers are: {valid}")
    kind = catalog.kind(kind_name)
    tier, model = catalog.model_for(kind=kind, tier=tier, parent_model=ctx.model)
    plan_item = plan_item_text(ctx, entry.plan_item)
    return services.Launch(
        name=name,
        reason=reason,
        task=task,
        max_steps=kind.clip_steps(entry.max_steps),
        kind=kind.name,
        tier=tier,
        model=model,
        # Its kind's research tools that its parent has, and the remote tools its parent is
        # offered (the servers' allowed kinds then choose among those).
        tools=kind.tools_for(ctx.research_tools) + sorted(ctx.remote_tools),
        plan_item=plan_item,
    )


def _spawn(ctx: AgentContext, entries: list[Subagent], *, batch: bool) -> list[Run]:
    """Resolve and check every entry, record them all in one transaction, then start them
    together: all or none (seed 001), so children of one batch see each other from their
    first step."""
    catalog = kinds.catalog()
    launches = []
    for number, entry in enumerate(entries, start=1):
        try:
            launch = _launch(ctx, entry, catalog)
            _refuse_repeated_task(ctx, launch.task, launches)
        except ToolError as error:
            if not batch:
                raise
            raise ToolError(f'entry {number} ("{entry.name}"): {error}') from None
        launches.append(launch)
    if ctx.pool is None:
        raise ToolError("sub-agents cannot run here: this agent has no pool")
    try:
        children = services.subagents_spawn(parent_id=ctx.run_id, launches=launches, batch=batch)
    except ResearchError as error:
        raise ToolError(error.message) from None
    deadline, deadline_reason = child_deadline(ctx)
    ctx.spawned.update(child.pk for child in children)
    for child in children:
        # Redis unreachable: the child still starts, and reopens its inbox when it does; it
        # loses its messages meanwhile, not its work.
        resilience.cleanup(
            f"opening the inbox of run {child.pk}",
            lambda child=child: get_messenger().open(child.pk),
        )
    starts = [
        partial(_start_child, ctx, child.pk, child.name, deadline, deadline_reason)
        for child in children
    ]
    if ctx.start_later is None:
        for start in starts:
            start()
    else:
        ctx.start_later.extend(partial(_start_quietly, start) for start in starts)
    return children


def _launch_arguments(ctx: AgentContext) -> dict[str, dict[str, Any] | None]:
    """The run's side of a spawn's arguments: the kinds and tiers of the catalog, the task's
    limit (a task is checked like a topic), a plan item only for the lead, who has a plan."""
    catalog = kinds.catalog()
    return {
        "task": {"maxLength": settings.RESEARCH_TOPIC_MAX_CHARS},
        "kind": {"enum": list(catalog.kinds)},
        "plan_item": {} if ctx.is_root else None,
        "tier": {"enum": list(catalog.tiers)} if catalog.tiers else None,
    }


def _one(ctx: AgentContext, tool: Tool) -> Tool:
    section = prompts.join(prompts.load("spawn"), kinds_section(kinds.catalog(), model=ctx.model))
    return replace(tool.with_arguments(**_launch_arguments(ctx)), prompt=section)


def _batch(ctx: AgentContext, tool: Tool) -> Tool:
    entry = reshaped(tool.parameters["properties"]["subagents"]["items"], **_launch_arguments(ctx))
    return tool.with_arguments(subagents={"items": entry})


@tool(state=State.SPAWNING, detail=lambda args: str(args.get("name", "")), prepare=_one)
def spawn_subagent(
    ctx: AgentContext,
    *,
    name: Name,
    reason: Reason | None = None,
    task: Task,
    kind: KindName | None = None,
    max_steps: MaxSteps | None = None,
    plan_item: PlanItem | None = None,
    tier: Tier | None = None,
) -> str:
    """Start a sub-agent: another agent that works in the background on a self-contained task
    and reports back. Returns at once. It knows nothing of your conversation, so the task must
    say everything it needs and what to bring back."""
    entry = Subagent(
        name=name,
        reason=reason or "",
        task=task,
        kind=kind,
        max_steps=max_steps,
        plan_item=plan_item,
        tier=tier,
    )
    (child,) = _spawn(ctx, [entry], batch=False)
    if kind is None and tier is None:  # seed 000's exact text
        return (
            f'started sub-agent "{child.name}" (run {child.pk}): it works in the background on '
            "its task; call wait_subagents to collect its report."
        )
    return (
        f'started sub-agent "{child.name}" (run {child.pk}, {_profile(child)}): it works in '
        "the background; its report comes to you when it ends (or call wait_subagents)."
    )


def _names(args: dict[str, Any]) -> str:
    entries = args.get("subagents") or []
    return ", ".join(str(entry.get("name", "")) for entry in entries if isinstance(entry, dict))


@tool(state=State.SPAWNING, detail=_names, prepare=_batch)
def spawn_subagents(
    ctx: AgentContext, subagents: Annotated[list[Subagent], Field(min_length=1)]
) -> str:
    """Start several sub-agents at once (each as in spawn_subagent). All start or none: if one
    entry is invalid, nothing starts and the error names the entry. They see each other as
    siblings from their first step."""
    children = _spawn(ctx, subagents, batch=True)
    lines = [f'- "{child.name}" (run {child.pk}, {_profile(child)})' for child in children]
    return (
        f"started {len(children)} sub-agents:\n"
        + "\n".join(lines)
        + "\nThey work in the background; each report comes to you when it ends (or call "
        "wait_subagents)."
    )


def _profile(child: Run) -> str:
    tier = f", tier {child.tier}" if child.tier else ""
    return f"{child.kind}{tier}, {child.model}, {child.max_steps} steps"


def _start_child(
    ctx: AgentContext, run_id: int, name: str, deadline: float | None, deadline_reason: str
) -> None:
    try:
        ctx.pool.submit(
            run_id, parent_id=ctx.run_id, deadline=deadline, deadline_reason=deadline_reason
        )
    except Exception as error:
        _not_started(run_id, name, error)


def _not_started(run_id: int, name: str, error: Exception) -> None:
    services.run_finish(run_id=run_id, error=endings.could_not_start(error))
    raise ToolError(f'sub-agent "{name}" (run {run_id}) could not start: {error}') from None


def _start_quietly(start: Callable[[], None]) -> None:
    """A start deferred past its tool call: a failure is already in the child's run (failed,
    "could not start"), which the parent reads when it waits."""
    with suppress(ToolError):
        start()


def _refuse_repeated_task(ctx: AgentContext, task: str, batch: list[services.Launch] = ()) -> None:
    """Two agents on nearly the same task make the same searches twice: refuse the second.

    Near is measured on the sets of content words (Jaccard), so a task that says the same
    thing in other order or with a few more small words is caught, while two tasks that
    share instructions but differ in their subject are not. Compared with the working
    sub-agents and the entries of the same batch before it.
    """
    threshold = settings.RESEARCH_DUPLICATE_TASK_SIMILARITY
    words = _task_words(task)
    working = team_reads.working_children_tasks(run_id=ctx.run_id)
    others = [(f'working sub-agent "{name}" (run {pk})', topic) for pk, name, topic in working]
    others += [(f'entry "{launch.name}" of this batch', launch.task) for launch in batch]
    for label, other_task in others:
        other = _task_words(other_task)
        similarity = len(words & other) / len(words | other) if words | other else 1.0
        if similarity >= threshold:
            raise ToolError(
                f"refused: this task nearly repeats the task of your {label}. "
                "Wait for its report, or give a different task."
            )


@lru_cache(maxsize=256)
def _task_words(task: str) -> frozenset[str]:
    # A parent compares each new task with all its working sub-agents' tasks: each task's
    # words are found once, not at every spawn.
    return frozenset(content_words(task))


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
