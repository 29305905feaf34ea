"""list_siblings, send_message and read_messages: siblings talk to each other (seed 000)."""

from typing import Any

from django.conf import settings

from agents.messages import InboxFull, InboxMessage, NoInbox, get_messenger, send_message
from agents.runtime.context import AgentContext
from agents.runtime.tree import (
    note_waiting,
    yielded,
)
from agents.tools.base import Tool, ToolError, object_schema
from research import services
from research.models import ACTIVE_STATUSES, Run, State, Status
from research.selectors import team as team_reads

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
