"""The team tools of seed 000: spawn, wait for and cancel sub-agents; list siblings and message
them. Who may message whom is decided here; the messenger only carries what it is given. The
limits and the record of a spawn are in research.services.subagent_spawn, the tree's
lifecycle (ending sub-agents, refusing an early answer) in agents.runtime.tree.
"""

import json
import re
import time
from collections.abc import Callable
from contextlib import suppress
from functools import partial
from typing import Any

from django.conf import settings
from django.utils import timezone

from agents import kinds
from agents.messages import InboxFull, InboxMessage, NoInbox, get_messenger, send_message
from agents.runtime import resilience
from agents.runtime.context import AgentContext
from agents.runtime.tree import (
    CANCELLED_BY_PARENT,
    RECHECK_SECONDS,
    cancel_child,
    child_deadline,
    note_waiting,
    wait_for_change,
    wait_result,
    yielded,
)
from agents.tools.base import Tool, ToolError, object_schema
from agents.tools.plan import plan_item_text
from research import endings, services
from research.errors import ResearchError
from research.models import ACTIVE_STATUSES, Run, State, Status
from research.selectors import team as team_reads
from research.text import content_words

NAME_PATTERN = re.compile(r"^[A-Za-z0-9_-]{1,40}$")


# --- which tools an agent gets ----------------------------------------------------------------


def tools_for(ctx: AgentContext) -> list[Tool]:
    tools = []
    if may_spawn(ctx):
        catalog = kinds.catalog()
        tools += [
            spawn_subagent_tool(catalog, plan=ctx.is_root),
            spawn_subagents_tool(catalog, plan=ctx.is_root),
            WAIT_SUBAGENTS,
            INSPECT_SUBAGENT,
            CANCEL_SUBAGENT,
        ]
    if not ctx.is_root:
        tools += [LIST_SIBLINGS, SEND_MESSAGE, READ_MESSAGES]
    return tools


def may_spawn(ctx: AgentContext) -> bool:
    """Sub-agents are on unless the server or the user turned them off; the last generation
    does not get the tool at all (it never sees it, rather than being refused)."""
    if not settings.RESEARCH_SUBAGENTS_ENABLED:
        return False
    if ctx.depth >= settings.RESEARCH_MAX_SUBAGENT_DEPTH:
        return False
    return team_reads.subagents_allowed_for(owner_id=ctx.owner_id)


# --- spawn_subagent and spawn_subagents -------------------------------------------------------


def _launch(ctx: AgentContext, args: dict[str, Any], catalog: kinds.Catalog) -> services.Launch:
    """What the parent asked for, resolved: the kind's tools that the parent has, the model
    of the tier (never a name the parent writes), the budget clipped to the kind's range."""
    name, reason, task = args["name"], args.get("reason", "").strip(), args["task"].strip()
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
    kind_name = args.get("kind") or kinds.DEFAULT_KIND
    if kind_name not in catalog.kinds:  # the schema's enum says so first; this is the backstop
        raise ToolError(f"unknown kind {kind_name!r}; the kinds are: {', '.join(catalog.kinds)}")
    tier = args.get("tier") or ""
    if tier and tier not in catalog.tiers:
        valid = ", ".join(catalog.tiers) or "none are configured"
        raise ToolError(f"unknown tier {tier!r}; the tiers are: {valid}")
    kind = catalog.kind(kind_name)
    tier, model = catalog.model_for(kind=kind, tier=tier, parent_model=ctx.model)
    plan_item = plan_item_text(ctx, args.get("plan_item"))
    return services.Launch(
        name=name,
        reason=reason,
        task=task,
        max_steps=kind.clip_steps(args.get("max_steps")),
        kind=kind.name,
        tier=tier,
        model=model,
        # Its kind's research tools that its parent has, and the remote tools its parent is
        # offered (the servers' allowed kinds then choose among those).
        tools=kind.tools_for(ctx.research_tools) + sorted(ctx.remote_tools),
        plan_item=plan_item,
    )


def _spawn(ctx: AgentContext, entries: list[dict[str, Any]], *, batch: bool) -> list[Run]:
    """Resolve and check every entry, record them all in one transaction, then start them
    together: all or none (seed 001), so children of one batch see each other from their
    first step."""
    catalog = kinds.catalog()
    launches = []
    for number, args in enumerate(entries, start=1):
        try:
            launch = _launch(ctx, args, catalog)
            _refuse_repeated_task(ctx, launch.task, launches)
        except ToolError as error:
            if not batch:
                raise
            raise ToolError(f'entry {number} ("{args.get("name", "")}"): {error}') from None
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


def spawn_subagent(ctx: AgentContext, args: dict[str, Any]) -> str:
    (child,) = _spawn(ctx, [args], batch=False)
    if not ({"kind", "tier"} & args.keys()):  # seed 000's exact text
        return (
            f'started sub-agent "{child.name}" (run {child.pk}): it works in the background on '
            "its task; call wait_subagents to collect its report."
        )
    return (
        f'started sub-agent "{child.name}" (run {child.pk}, {_profile(child)}): it works in '
        "the background; its report comes to you when it ends (or call wait_subagents)."
    )


def spawn_subagents(ctx: AgentContext, args: dict[str, Any]) -> str:
    children = _spawn(ctx, args["subagents"], batch=True)
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
    words = content_words(task)
    working = team_reads.children_of(run_id=ctx.run_id).filter(status__in=ACTIVE_STATUSES)
    others = [(f'working sub-agent "{run.name}" (run {run.pk})', run.topic) for run in working]
    others += [(f'entry "{launch.name}" of this batch', launch.task) for launch in batch]
    for label, other_task in others:
        other = content_words(other_task)
        similarity = len(words & other) / len(words | other) if words | other else 1.0
        if similarity >= threshold:
            raise ToolError(
                f"refused: this task nearly repeats the task of your {label}. "
                "Wait for its report, or give a different task."
            )


def _launch_properties(catalog: kinds.Catalog, *, plan: bool) -> dict[str, Any]:
    properties: dict[str, Any] = {
        "name": {
            "type": "string",
            "description": "1-40 letters, digits, - or _; unique among your sub-agents",
        },
        "reason": {
            "type": "string",
            "maxLength": 300,
            "description": "why this sub-agent has to exist, in one sentence",
        },
        "task": {"type": "string", "maxLength": 2000, "description": "what it has to do"},
        "kind": {
            "type": "string",
            "enum": list(catalog.kinds),
            "description": "which kind of sub-agent (see your instructions); default researcher",
        },
        "max_steps": {
            "type": "integer",
            "description": "its step budget; clipped to the kind's range, default the kind's",
        },
    }
    if plan:
        properties["plan_item"] = {
            "type": "integer",
            "minimum": 1,
            "description": "the number of the plan item it covers (see write_plan)",
        }
    if catalog.tiers:
        properties["tier"] = {
            "type": "string",
            "enum": list(catalog.tiers),
            "description": "the model tier it runs on; default the kind's, else your model",
        }
    return properties


def spawn_subagent_tool(catalog: kinds.Catalog, *, plan: bool = False) -> Tool:
    return Tool(
        name="spawn_subagent",
        description=(
            "Start a sub-agent: another agent that works in the background on a self-contained "
            "task and reports back. Returns at once. It knows nothing of your conversation, so "
            "the task must say everything it needs and what to bring back."
        ),
        parameters=object_schema(_launch_properties(catalog, plan=plan), required=["name", "task"]),
        state=State.SPAWNING,
        handler=spawn_subagent,
        detail=lambda args: str(args.get("name", "")),
    )


def spawn_subagents_tool(catalog: kinds.Catalog, *, plan: bool = False) -> Tool:
    entry = object_schema(
        _launch_properties(catalog, plan=plan), required=["name", "reason", "task"]
    )
    return Tool(
        name="spawn_subagents",
        description=(
            "Start several sub-agents at once (each as in spawn_subagent). All start or none: "
            "if one entry is invalid, nothing starts and the error names the entry. They see "
            "each other as siblings from their first step."
        ),
        parameters=object_schema(
            {"subagents": {"type": "array", "items": entry, "minItems": 1}},
            required=["subagents"],
        ),
        state=State.SPAWNING,
        handler=spawn_subagents,
        detail=lambda args: ", ".join(
            str(entry.get("name", ""))
            for entry in args.get("subagents") or []
            if isinstance(entry, dict)
        ),
    )


# --- wait_subagents / cancel_subagent ---------------------------------------------------------


def _named_children(
    ctx: AgentContext, names: list[str] | None, *, action: str = "wait for"
) -> list[Run]:
    children = list(team_reads.children_of(run_id=ctx.run_id).only("pk", "name"))
    if not children:
        raise ToolError(f"you have no sub-agents to {action}")
    if not names:
        return children
    by_name = {child.name: child for child in children}
    unknown = [name for name in names if name not in by_name]
    if unknown:
        raise ToolError(
            f"no sub-agent named {', '.join(repr(name) for name in unknown)}; your "
            f"sub-agents are: {', '.join(by_name)}"
        )
    return [by_name[name] for name in dict.fromkeys(names)]


def wait_subagents(ctx: AgentContext, args: dict[str, Any]) -> str:
    targets = [child.pk for child in _named_children(ctx, args.get("names"))]
    deadline = time.monotonic() + settings.RESEARCH_WAIT_SLICE_SECONDS
    noted = False
    with yielded(ctx):
        while working := team_reads.working_children_ids(run_id=ctx.run_id, among=targets):
            # A note from the analyst ends the wait at once: it is read first (seed 001).
            noted = note_waiting(ctx)
            if noted or time.monotonic() >= deadline:
                break
            # Woken when one of those still working leaves the pool, not by every agent of
            # the pool that ends.
            left = max(0.0, deadline - time.monotonic())
            wait_for_change(ctx, min(RECHECK_SECONDS, left), run_ids=working)
    return wait_result(ctx, team_reads.runs_by_ids(run_ids=targets), noted=noted)


WAIT_SUBAGENTS = Tool(
    name="wait_subagents",
    description=(
        "Wait until your sub-agents have ended and read their reports (or errors). Without "
        "names, waits for all of them. Returns after a while with 'still working' lines if "
        "some are not done: call it again then."
    ),
    parameters=object_schema(
        {"names": {"type": "array", "items": {"type": "string"}, "description": "optional"}}
    ),
    state=State.WAITING,
    handler=wait_subagents,
    detail=lambda args: ", ".join(args.get("names") or []) or "all sub-agents",
)


def cancel_subagent(ctx: AgentContext, args: dict[str, Any]) -> str:
    (child,) = _named_children(ctx, [args["name"]], action="cancel")
    child = team_reads.run_by_id(run_id=child.pk)
    if child.status not in ACTIVE_STATUSES:
        raise ToolError(f'sub-agent "{child.name}" (run {child.pk}) has already ended')
    cancel_child(ctx, child.pk, CANCELLED_BY_PARENT)
    return f'cancelled sub-agent "{child.name}" (run {child.pk}); it ends at its next step.'


CANCEL_SUBAGENT = Tool(
    name="cancel_subagent",
    description="Cancel one of your working sub-agents, when its work is no longer needed.",
    parameters=object_schema({"name": {"type": "string"}}, required=["name"]),
    state=State.SPAWNING,
    handler=cancel_subagent,
    detail=lambda args: f"cancel {args.get('name', '')}",
)


# --- inspect_subagent (seed 002's query_agent) --------------------------------------------------

INSPECT_ENTRY_CHARS = 400


def inspect_subagent(ctx: AgentContext, args: dict[str, Any]) -> str:
    """A look inside a child without waiting for it: its status, steps, elapsed time and a
    page of its transcript, newest last; `offset` pages back from the newest entry."""
    (child,) = _named_children(ctx, [args["name"]], action="inspect")
    run = team_reads.run_by_id(run_id=child.pk)
    last, offset = args.get("last", 10), args.get("offset", 0)
    total, entries = team_reads.transcript_page(run_id=run.pk, last=last, offset=offset)
    status = f"{run.status}, {run.state}" if run.status in ACTIVE_STATUSES else run.status
    tier = f", tier {run.tier}" if run.tier else ""
    lines = [
        f"## {run.name} (run {run.pk}): {status}",
        f"{run.kind or 'researcher'}{tier}, {run.model}; steps {run.steps} of {run.max_steps}; "
        f"{_elapsed(run)}",
    ]
    if run.error:
        lines.append(f"error: {run.error}")
    if not entries:
        lines.append("No transcript entries here." if total else "No transcript entries yet.")
    else:
        first = total - offset - len(entries) + 1
        lines.append(f"Transcript entries {first}-{first + len(entries) - 1} of {total}:")
        lines += [_entry(number, step) for number, step in enumerate(entries, start=first)]
        if first > 1:
            older = offset + len(entries)
            lines.append(f"Older entries: call inspect_subagent with offset={older}.")
    return "\n".join(lines)


def _elapsed(run: Run) -> str:
    if run.started_at is None:
        return "not started yet"
    end = run.finished_at or timezone.now()
    return f"{(end - run.started_at).total_seconds():.0f} s elapsed"


def _entry(number: int, step) -> str:
    if step.kind == "model":
        called = step.input.get("tool_calls") or []
        text = step.output or ""
        if called:
            text = (
                (text + " " if text else "")
                + "calls "
                + ", ".join(f"{name} {arguments}" for name, arguments in called)
            )
        body = f"model: {text or '(no text)'}"
    else:
        arguments = json.dumps(step.input, ensure_ascii=False)
        marker = " (error)" if step.is_error else ""
        body = f"{step.tool} {arguments}{marker} -> {step.output}"
    body = " ".join(body.split())
    if len(body) > INSPECT_ENTRY_CHARS:
        cut = len(body) - INSPECT_ENTRY_CHARS
        body = f"{body[:INSPECT_ENTRY_CHARS]} [… {cut} more characters]"
    return f"[{number}] {body}"


INSPECT_SUBAGENT = Tool(
    name="inspect_subagent",
    description=(
        "Look inside one of your sub-agents without waiting for it: its status, steps used, "
        "elapsed time and its latest transcript entries (tool calls and results, cut short). "
        "Use offset to page back to older entries."
    ),
    parameters=object_schema(
        {
            "name": {"type": "string"},
            "last": {"type": "integer", "minimum": 1, "maximum": 50, "default": 10},
            "offset": {"type": "integer", "minimum": 0, "default": 0},
        },
        required=["name"],
    ),
    state=State.WAITING,
    handler=inspect_subagent,
    detail=lambda args: f"inspect {args.get('name', '')}",
)


# --- siblings and messages --------------------------------------------------------------------


def _siblings(ctx: AgentContext) -> list[Run]:
    return team_reads.siblings_of(run_id=ctx.run_id, parent_id=ctx.parent_id)


def _sibling_names(siblings: list[Run]) -> str:
    if not siblings:
        return "you have no siblings now"
    return "your siblings are: " + ", ".join(sibling.name for sibling in siblings)


def list_siblings(ctx: AgentContext, args: dict[str, Any]) -> str:
    siblings = _siblings(ctx)
    if not siblings:
        return "You have no siblings now (your parent may still spawn some)."
    lines = []
    for sibling in siblings:
        if sibling.status in ACTIVE_STATUSES:
            label = "working"
        else:
            label = "ended" if sibling.status == Status.DONE else "ended, failed"
        lines.append(f"- {sibling.name} [{label}]: {sibling.reason}")
    return "\n".join(lines)


LIST_SIBLINGS = Tool(
    name="list_siblings",
    description=(
        "List your siblings (the other sub-agents of your parent): the agents you can "
        "message, with whether they are working and why they were spawned."
    ),
    parameters=object_schema({}),
    state=State.MESSAGING,
    handler=list_siblings,
)


def send_message_tool(ctx: AgentContext, args: dict[str, Any]) -> str:
    to, text = args["to"], args["text"]
    limit = settings.RESEARCH_MESSAGE_MAX_CHARS
    if not text.strip():
        raise ToolError("the message text is empty")
    if len(text) > limit:
        raise ToolError(f"the message is {len(text)} characters; the limit is {limit}")
    siblings = _siblings(ctx)
    if to == ctx.name:
        raise ToolError(f"you cannot message yourself; {_sibling_names(siblings)}")
    recipient = next((sibling for sibling in siblings if sibling.name == to), None)
    if recipient is None:
        raise ToolError(
            f"no sibling named {to!r}: you can message only the other sub-agents of your "
            f"parent; {_sibling_names(siblings)}"
        )
    record = services.message_store(from_run_id=ctx.run_id, to_run_id=recipient.pk, text=text)
    try:
        send_message(
            get_messenger(),
            InboxMessage(
                from_id=ctx.run_id,
                from_name=ctx.name,
                to_id=recipient.pk,
                text=text,
                record_id=record.pk,
            ),
        )
    except NoInbox:
        services.message_withdraw(message=record)
        raise ToolError(
            f'"{to}" has ended: its inbox is gone and the message was not delivered'
        ) from None
    except InboxFull:
        services.message_withdraw(message=record)
        raise ToolError(
            f'the inbox of "{to}" is full ({settings.RESEARCH_INBOX_SIZE} unread messages): '
            "the message was not delivered"
        ) from None
    except Exception:
        # The messenger failed (Redis down): not delivered, so not in the transcript either.
        services.message_withdraw(message=record)
        raise
    services.message_publish(message=record)
    return f'message sent to "{to}" (run {recipient.pk}).'


SEND_MESSAGE = Tool(
    name="send_message",
    description=(
        "Send a short message to a sibling (by name). Returns at once; it never waits for "
        "the sibling to read it."
    ),
    parameters=object_schema(
        {"to": {"type": "string"}, "text": {"type": "string"}}, required=["to", "text"]
    ),
    state=State.MESSAGING,
    handler=send_message_tool,
    detail=lambda args: f"to {args.get('to', '')}",
)


def read_messages(ctx: AgentContext, args: dict[str, Any]) -> str:
    wait = float(args.get("wait_seconds", 0))
    messenger = get_messenger()
    messages = messenger.receive(ctx.run_id, 0)
    if not messages and wait > 0:
        services.run_set_state(run_id=ctx.run_id, state=State.WAITING, detail="for messages")
        with yielded(ctx):
            messages = messenger.receive(
                ctx.run_id, wait, cancelled=lambda: ctx.cancel.is_set() or note_waiting(ctx)
            )
        ctx.cancel.check()
    if not messages:
        if note_waiting(ctx):
            return "No new messages. A note from the analyst arrived; it follows."
        return "No new messages."
    services.messages_mark_read(message_ids=[m.record_id for m in messages if m.record_id])
    return "\n\n".join(
        f"From {message.from_name} (run {message.from_id}): {message.text}" for message in messages
    )


READ_MESSAGES = Tool(
    name="read_messages",
    description=(
        "Read the messages your siblings sent you since your last read, oldest first. With "
        "wait_seconds and no message yet, waits up to that long for one."
    ),
    parameters=object_schema(
        {"wait_seconds": {"type": "number", "minimum": 0, "maximum": 60, "default": 0}}
    ),
    state=State.MESSAGING,
    handler=read_messages,
)
