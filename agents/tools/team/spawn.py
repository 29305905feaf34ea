"""spawn_subagent and spawn_subagents: a child (or a batch, all or none) with its name, reason,
kind, tier, task and budget, started after its record commits. The spawn calls of one model
turn are recorded together and their children started together (spawn_turn)."""

import json
import logging
import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Annotated, Any

from django.conf import settings
from pydantic import Field

from agents import kinds, prompts
from agents.messages import get_messenger
from agents.runtime import resilience
from agents.runtime.context import AgentContext
from agents.runtime.tree import child_deadline, is_seated, seats
from agents.tools.base import ToolError
from agents.tools.plan import plan_item_text
from agents.tools.tool import Tool, reshaped, tool
from research import endings, services
from research.errors import ResearchError
from research.models import Run, State

log = logging.getLogger(__name__)

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


@dataclass
class _Spawned:
    """A spawn call's children, and why those that could not start did not (by run id)."""

    children: list[Run]
    not_started: dict[int, str] = field(default_factory=dict)


def spawn_turn(
    ctx: AgentContext, calls: list[tuple[str, dict[str, Any]]]
) -> list[tuple[str, bool]]:
    """The spawn calls of one model turn (spawn_subagent, spawn_subagents: the tool's name and
    its checked arguments), as the agent loop runs them: each checked as if made after the
    ones before it, all recorded in one transaction, then every child started together, so
    that each child's first list_siblings shows them all. (text, is_error) of each call, in
    call order."""
    try:
        outcomes = _spawn(ctx, [_request(name, arguments) for name, arguments in calls])
    except Exception as error:  # the database failed before the commit: nothing was recorded
        log.exception("the spawns of run %s failed", ctx.run_id)
        return [(f"error: {name} failed: {error}", True) for name, _ in calls]
    results = []
    for (name, arguments), outcome in zip(calls, outcomes, strict=True):
        text, is_error = _result(name, arguments, outcome)
        results.append((f"error: {text}" if is_error else text, is_error))
    return results


def _one_call(ctx: AgentContext, name: str, arguments: dict[str, Any]) -> str:
    """A spawn tool called on its own (not by the loop): its text, or its ToolError."""
    (outcome,) = _spawn(ctx, [_request(name, arguments)])
    text, is_error = _result(name, arguments, outcome)
    if is_error:
        raise ToolError(text)
    return text


def _request(name: str, arguments: dict[str, Any]) -> tuple[list[Subagent], bool]:
    """A spawn call's entries, and whether it is a batch (all or none, refusals numbered)."""
    if name == "spawn_subagents":
        entries = arguments["subagents"]
        return [
            entry if isinstance(entry, Subagent) else Subagent(**entry) for entry in entries
        ], True
    given = {key: value for key, value in arguments.items() if value is not None}
    return [Subagent(**{"reason": "", **given})], False


def _spawn(
    ctx: AgentContext, requests: list[tuple[list[Subagent], bool]]
) -> list[_Spawned | ToolError]:
    """Resolve and check every entry of every request, record those that pass in one
    transaction (services.subagents_spawn_each), then start their children together: each
    request all or none (seed 001). For each request, its children or why it has none."""
    catalog = kinds.catalog()
    resolved: list[list[services.Launch] | ToolError] = []
    for entries, batch in requests:
        try:
            resolved.append(_launches(ctx, entries, batch, catalog))
        except ToolError as error:
            resolved.append(error)
    calls = [
        services.SpawnCall(launches, batch=batch)
        for launches, (_, batch) in zip(resolved, requests, strict=True)
        if isinstance(launches, list)
    ]
    if calls and ctx.pool is None:
        no_pool = ToolError("sub-agents cannot run here: this agent has no pool")
        return [outcome if isinstance(outcome, ToolError) else no_pool for outcome in resolved]
    deadline, reason = child_deadline(ctx)
    recorded = iter(_record(ctx, calls, deadline) if calls else [])
    outcomes = [
        outcome if isinstance(outcome, ToolError) else _spawned(next(recorded))
        for outcome in resolved
    ]
    started = [outcome for outcome in outcomes if isinstance(outcome, _Spawned)]
    _start(ctx, started, deadline, reason)
    return outcomes


def _record(
    ctx: AgentContext, calls: list[services.SpawnCall], deadline: float | None
) -> list[list[Run] | ResearchError]:
    """subagents_spawn_each, with each child the pool can seat now claimed in the same
    transaction (tree.seats): its thread then starts on its first step. The spawn goes in
    the writer's batch behind the records of the step that made it (one commit for both)."""
    ctx.spawning()
    with seats(ctx, sum(len(call.launches) for call in calls), deadline) as taken:
        recorded = services.subagents_spawn_each(
            parent_id=ctx.run_id,
            calls=calls,
            seat=taken.count,
            worker_id=ctx.pool.worker_id,
            root_id=ctx.root_id,
        )
        children = [run for runs in recorded if isinstance(runs, list) for run in runs]
        taken.used = sum(map(is_seated, children))
    ctx.spawned_known(child.pk for child in children)  # committed: the attempt is closed
    return recorded


def _spawned(recorded: list[Run] | ResearchError) -> _Spawned | ToolError:
    if isinstance(recorded, ResearchError):
        return ToolError(recorded.message)
    return _Spawned(recorded)


def _launches(
    ctx: AgentContext, entries: list[Subagent], batch: bool, catalog: kinds.Catalog
) -> list[services.Launch]:
    launches = []
    for number, entry in enumerate(entries, start=1):
        try:
            launches.append(_launch(ctx, entry, catalog))
        except ToolError as error:
            if not batch:
                raise
            raise ToolError(f'entry {number} ("{entry.name}"): {error}') from None
    return launches


def _start(ctx: AgentContext, spawned: list[_Spawned], deadline: float | None, reason: str) -> None:
    """Open the children's inboxes, then start them all; one that cannot start is failed
    with the reason, which its parent reads in the call's result and when it waits."""
    children = [child for outcome in spawned for child in outcome.children]
    if not children:
        return
    # One round trip for them all. Redis unreachable: each child still starts, and reopens
    # its inbox when it does; it loses its messages meanwhile, not its work.
    ids = [child.pk for child in children]
    resilience.cleanup(
        f"opening the inboxes of runs {', '.join(map(str, ids))}",
        lambda: get_messenger().open(*ids),
    )
    for outcome in spawned:
        for child in outcome.children:
            try:
                ctx.pool.submit(
                    child.pk,
                    parent_id=ctx.run_id,
                    deadline=deadline,
                    deadline_reason=reason,
                    seated=child if is_seated(child) else None,
                )
            except Exception as error:  # the others still start
                log.exception("sub-agent %s of run %s could not start", child.pk, ctx.run_id)
                outcome.not_started[child.pk] = str(error)
                # The database down too: its parent ends it as it ends (end_subagents).
                resilience.cleanup(
                    f"failing run {child.pk}",
                    lambda child=child, error=error: services.run_finish(
                        run_id=child.pk, error=endings.could_not_start(error)
                    ),
                )


def _result(
    name: str, arguments: dict[str, Any], outcome: _Spawned | ToolError
) -> tuple[str, bool]:
    """The text of a spawn call's result, and whether it is an error."""
    if isinstance(outcome, ToolError):
        return str(outcome), True
    failed = outcome.not_started
    if name == "spawn_subagents":
        lines = [
            f'- "{child.name}" (run {child.pk}, {_profile(child)})'
            + (f": could not start: {failed[child.pk]}" if child.pk in failed else "")
            for child in outcome.children
        ]
        return (
            f"started {len(outcome.children)} sub-agents:\n"
            + "\n".join(lines)
            + "\nThey work in the background; each report comes to you when it ends (or call "
            "wait_subagents).",
            False,
        )
    (child,) = outcome.children
    if child.pk in failed:
        return (
            f'sub-agent "{child.name}" (run {child.pk}) could not start: {failed[child.pk]}',
            True,
        )
    if arguments.get("kind") is None and arguments.get("tier") is None:  # seed 000's exact text
        return (
            f'started sub-agent "{child.name}" (run {child.pk}): it works in the background on '
            "its task; call wait_subagents to collect its report.",
            False,
        )
    return (
        f'started sub-agent "{child.name}" (run {child.pk}, {_profile(child)}): it works in '
        "the background; its report comes to you when it ends (or call wait_subagents).",
        False,
    )


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
    return tool.with_arguments(**_launch_arguments(ctx)).with_prompt(section)


def _batch(ctx: AgentContext, tool: Tool) -> Tool:
    return _batch_shaped(tool, json.dumps(_launch_arguments(ctx)))


@lru_cache(maxsize=64)
def _batch_shaped(tool: Tool, changes: str) -> Tool:
    """spawn_subagents with each launch's schema changed as spawn_subagent's is: built once
    per shape (Tool.with_arguments), not copied for every agent that may spawn."""
    entry = reshaped(tool.parameters["properties"]["subagents"]["items"], **json.loads(changes))
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
    arguments = {
        "name": name,
        "reason": reason,
        "task": task,
        "kind": kind,
        "max_steps": max_steps,
        "plan_item": plan_item,
        "tier": tier,
    }
    return _one_call(ctx, "spawn_subagent", arguments)


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
    return _one_call(ctx, "spawn_subagents", {"subagents": subagents})


def _profile(child: Run) -> str:
    tier = f", tier {child.tier}" if child.tier else ""
    return f"{child.kind}{tier}, {child.model}, {child.max_steps} steps"


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
