"""list_siblings, send_message and read_messages: siblings talk to each other (seed 000)."""

from typing import Annotated

from django.conf import settings
from pydantic import Field

from agents import prompts
from agents.messages import InboxFull, InboxMessage, NoInbox, get_messenger
from agents.messages import send_message as deliver
from agents.runtime import resilience
from agents.runtime.context import AgentContext
from agents.runtime.tree import (
    note_waiting,
    yielded,
)
from agents.tools.base import ToolError
from agents.tools.tool import Tool, tool
from research import services
from research.clean import visible
from research.models import ACTIVE_STATUSES, Run, State, Status
from research.selectors import team as team_reads

# --- siblings and messages --------------------------------------------------------------------


def _siblings(ctx: AgentContext) -> list[Run]:
    return team_reads.siblings_of(run_id=ctx.run_id, parent_id=ctx.parent_id)


def _sibling_names(siblings: list[Run]) -> str:
    if not siblings:
        return "you have no siblings now"
    return "your siblings are: " + ", ".join(sibling.name for sibling in siblings)


@tool(state=State.MESSAGING, prompt=prompts.load("messaging"), after_identity=True, reads=True)
def list_siblings(ctx: AgentContext) -> str:
    """List your siblings (the other sub-agents of your parent): the agents you can message,
    with whether they are working and why they were spawned."""
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


def _within_the_limit(ctx: AgentContext, tool: Tool) -> Tool:
    return tool.with_arguments(text={"maxLength": settings.RESEARCH_MESSAGE_MAX_CHARS})


def _withdraw(record) -> None:
    """A message not delivered leaves no row: on a fresh connection if this one was lost
    meanwhile (a row with no event would be a message the page never shows)."""
    resilience.retrying("withdrawing a message", lambda: services.message_withdraw(message=record))


@tool(
    state=State.MESSAGING, detail=lambda args: f"to {args.get('to', '')}", prepare=_within_the_limit
)
def send_message(ctx: AgentContext, to: str, text: str) -> str:
    """Send a short message to a sibling (by name). Returns at once; it never waits for the
    sibling to read it."""
    limit = settings.RESEARCH_MESSAGE_MAX_CHARS
    if not visible(text):
        raise ToolError("the message text is empty")
    if len(text) > limit:  # the schema says so first; this holds for calls that skip it
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
        deliver(
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
        _withdraw(record)
        raise ToolError(
            f'"{to}" has ended: its inbox is gone and the message was not delivered'
        ) from None
    except InboxFull:
        _withdraw(record)
        raise ToolError(
            f'the inbox of "{to}" is full ({settings.RESEARCH_INBOX_SIZE} unread messages): '
            "the message was not delivered"
        ) from None
    except Exception:
        # The messenger failed (Redis down): not delivered, so not in the transcript either.
        _withdraw(record)
        raise
    # Delivered: its event must follow, on a fresh connection if this one was lost meanwhile
    # (the page would never show a message the sibling did read).
    resilience.retrying("publishing a message", lambda: services.message_publish(message=record))
    return f'message sent to "{to}" (run {recipient.pk}).'


@tool(state=State.MESSAGING)
def read_messages(ctx: AgentContext, wait_seconds: Annotated[float, Field(ge=0, le=60)] = 0) -> str:
    """Read the messages your siblings sent you since your last read, oldest first. With
    wait_seconds and no message yet, waits up to that long for one."""
    wait = float(wait_seconds)
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
