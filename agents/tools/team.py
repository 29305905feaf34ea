"""The team tools of seed 000: spawn, wait for and cancel sub-agents; list siblings and message
them. Who may message whom is decided here; the messenger only carries what it is given. The
limits and the record of a spawn are in research.services.subagent_spawn, the tree's
lifecycle (ending sub-agents, refusing an early answer) in agents.team.
"""

import re
import time
from collections.abc import Callable
from contextlib import suppress
from functools import partial
from typing import Any

from django.conf import settings

from agents import resilience
from agents.context import AgentContext
from agents.messages import InboxFull, InboxMessage, NoInbox, get_messenger, send_message
from agents.team import (
    CANCELLED_BY_PARENT,
    RECHECK_SECONDS,
    cancel_child,
    wait_for_change,
    yielded,
)
from agents.tools.base import Tool, ToolError, object_schema
from research import services
from research.errors import ResearchError
from research.models import ACTIVE_STATUSES, Run, State, Status
from research.selectors import team as team_reads
from research.text import content_words

NAME_PATTERN = re.compile(r"^[A-Za-z0-9_-]{1,40}$")


# --- which tools an agent gets ----------------------------------------------------------------


def tools_for(ctx: AgentContext) -> list[Tool]:
    tools = []
    if may_spawn(ctx):
        tools += [SPAWN_SUBAGENT, WAIT_SUBAGENTS, CANCEL_SUBAGENT]
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


# --- spawn_subagent -------------------------------------------------------------------------


def spawn_subagent(ctx: AgentContext, args: dict[str, Any]) -> str:
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
    _refuse_repeated_task(ctx, task)
    if ctx.pool is None:
        raise ToolError("sub-agents cannot run here: this agent has no pool")
    try:
        child = services.subagent_spawn(
            parent_id=ctx.run_id,
            name=name,
            reason=reason,
            task=task,
            max_steps=args.get("max_steps"),
        )
    except ResearchError as error:
        raise ToolError(error.message) from None
    start = partial(_start_child, ctx, child.pk, name)
    # Redis unreachable: the child still starts, and reopens its inbox when it does; it
    # loses its messages meanwhile, not its work.
    resilience.cleanup(
        f"opening the inbox of run {child.pk}", lambda: get_messenger().open(child.pk)
    )
    if ctx.start_later is None:
        start()
    else:
        ctx.start_later.append(partial(_start_quietly, start))
    return (
        f'started sub-agent "{name}" (run {child.pk}): it works in the background on its task; '
        "call wait_subagents to collect its report."
    )


def _start_child(ctx: AgentContext, run_id: int, name: str) -> None:
    try:
        ctx.pool.submit(run_id, timeout_seconds=settings.RESEARCH_SUBAGENT_TIMEOUT_SECONDS)
    except Exception as error:
        _not_started(run_id, name, error)


def _not_started(run_id: int, name: str, error: Exception) -> None:
    services.run_finish(run_id=run_id, error=f"could not start: {error}")
    raise ToolError(f'sub-agent "{name}" (run {run_id}) could not start: {error}') from None


def _start_quietly(start: Callable[[], None]) -> None:
    """A start deferred past its tool call: a failure is already in the child's run (failed,
    "could not start"), which the parent reads when it waits."""
    with suppress(ToolError):
        start()


def _refuse_repeated_task(ctx: AgentContext, task: str) -> None:
    """Two agents on nearly the same task make the same searches twice: refuse the second.

    Near is measured on the sets of content words (Jaccard), so a task that says the same
    thing in other order or with a few more small words is caught, while two tasks that
    share instructions but differ in their subject are not.
    """
    threshold = settings.RESEARCH_DUPLICATE_TASK_SIMILARITY
    words = content_words(task)
    working = team_reads.children_of(run_id=ctx.run_id).filter(status__in=ACTIVE_STATUSES)
    for run in working.only("pk", "name", "topic"):
        other = content_words(run.topic)
        similarity = len(words & other) / len(words | other) if words | other else 1.0
        if similarity >= threshold:
            raise ToolError(
                f"refused: this task nearly repeats the task of your working sub-agent "
                f'"{run.name}" (run {run.pk}). Wait for its report, or give a different task.'
            )


SPAWN_SUBAGENT = Tool(
    name="spawn_subagent",
    description=(
        "Start a sub-agent: another research agent that works in the background on a "
        "self-contained task and reports back. Returns at once. It knows nothing of your "
        "conversation, so the task must say everything it needs and what to bring back."
    ),
    parameters=object_schema(
        {
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
            # The range is the server's (RESEARCH_MAX_STEPS_LIMIT), checked by the service.
            "max_steps": {"type": "integer", "description": "default 10"},
        },
        required=["name", "task"],
    ),
    state=State.SPAWNING,
    handler=spawn_subagent,
    detail=lambda args: str(args.get("name", "")),
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
    with yielded(ctx):
        while working := team_reads.working_children_ids(run_id=ctx.run_id, among=targets):
            if time.monotonic() >= deadline:
                break
            # Woken when one of those still working leaves the pool, not by every agent of
            # the pool that ends.
            left = max(0.0, deadline - time.monotonic())
            wait_for_change(ctx, min(RECHECK_SECONDS, left), run_ids=working)
    runs = team_reads.runs_by_ids(run_ids=targets)
    blocks = []
    for run in runs:
        if run.status in ACTIVE_STATUSES:
            blocks.append(f"## {run.name} (run {run.pk}): still working")
            continue
        ctx.collected.add(run.pk)
        body = run.report if run.status == Status.DONE else f"error: {run.error}"
        blocks.append(f"## {run.name} (run {run.pk}): {run.status}\n\n{body}")
    if any(run.status in ACTIVE_STATUSES for run in runs):
        blocks.append("Some sub-agents are still working: call wait_subagents again to wait.")
    return "\n\n".join(blocks)


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
            messages = messenger.receive(ctx.run_id, wait, cancelled=ctx.cancel.is_set)
        ctx.cancel.check()
    if not messages:
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
