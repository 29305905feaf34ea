"""An agent's checkpoints (research.models_checkpoints): written with each step it records,
read back when its research is resumed, so that it goes on from its last completed step with
the same conversation and sends no completed step's request again.

Each checkpoint holds the messages the step added to the conversation since the last one
(the round's delivered reports and notes, then the model's answer; or one tool result,
whole) and the agent's state after it. A resumed agent rebuilds its conversation from them
in order; the tool calls of its last answer that have no result yet run then, and the
sub-agents of it that go on start again in its process (a tree runs in one).
"""

from dataclasses import dataclass
from typing import Any

from agents.llm.base import ToolCall
from agents.runtime import tree
from agents.runtime.context import AgentContext
from research import endings
from research.models import Checkpoint, Run, RunState, State, Status


@dataclass
class Restored:
    messages: list[dict[str, Any]]
    answers_refused: int


class Checkpoints:
    """The checkpoints of one agent: the next number, and how much of its conversation the
    last one covers."""

    def __init__(self) -> None:
        self.number = 0
        self.saved = 0

    def restore(self, ctx: AgentContext) -> Restored | None:
        """The conversation and state of a run its resume queued again; None for one that
        starts afresh (new, or queued again after its plan review)."""
        last = Checkpoint.objects.filter(run_id=ctx.run_id).order_by("-number").first()
        if last is None:
            return None
        self.number = last.number
        if not _resumed(ctx.run_id):
            return None
        # From the last fresh start on: a root whose plan was approved started again then.
        start = (
            Checkpoint.objects.filter(run_id=ctx.run_id, state__fresh=True)
            .order_by("-number")
            .values_list("number", flat=True)
            .first()
        )
        rows = Checkpoint.objects.filter(run_id=ctx.run_id, number__gte=start or 0)
        messages = [message for row in rows.order_by("number") for message in row.messages()]
        state = last.state
        ctx.spawned.update(state.get("spawned", []))
        ctx.collected.update(state.get("collected", []))
        self.saved = len(messages)
        return Restored(messages, int(state.get("answers_refused", 0)))

    def next(
        self,
        ctx: AgentContext,
        conversation: list[dict[str, Any]],
        added: dict[str, Any],
        *,
        answers_refused: int,
    ) -> dict[str, Any]:
        """The checkpoint of a step that adds `added` to the conversation (not yet in it)."""
        return {
            "number": self.number + 1,
            "messages": [*conversation[self.saved :], added],
            "state": {
                "spawned": sorted(ctx.spawned),
                "collected": sorted(ctx.collected),
                "answers_refused": answers_refused,
                # The first of a conversation: a resume rebuilds it from here on.
                "fresh": self.saved == 0,
            },
        }

    def written(self, conversation_length: int) -> None:
        """The step is recorded; the conversation, with its message, is that long."""
        self.number += 1
        self.saved = conversation_length


def _resumed(run_id: int) -> bool:
    """Whether the run was last queued by a resume (not created, nor queued after its plan
    review): the timeline's last `queued` entry says so."""
    detail = (
        RunState.objects.filter(run_id=run_id, state=State.QUEUED)
        .order_by("-id")
        .values_list("detail", flat=True)
        .first()
    )
    return detail == endings.RESUMED


def pending_calls(messages: list[dict[str, Any]]) -> list[ToolCall] | None:
    """The tool calls of the conversation's last answer that have no result yet, when the
    last answer called tools; None when the conversation does not end in a tool turn."""
    last = max(
        (i for i, message in enumerate(messages) if message["role"] == "assistant"), default=None
    )
    if last is None or not messages[last].get("tool_calls"):
        return None
    answered = {m.get("tool_call_id") for m in messages[last + 1 :] if m["role"] == "tool"}
    return [
        ToolCall(call["id"], call["function"]["name"], call["function"]["arguments"])
        for call in messages[last]["tool_calls"]
        if call["id"] not in answered
    ]


def final_answer(messages: list[dict[str, Any]]) -> str | None:
    """The answer the conversation ends with (the model's text without tool calls), when it
    ends so: the agent had answered when its process stopped."""
    if not messages or messages[-1]["role"] != "assistant" or messages[-1].get("tool_calls"):
        return None
    return messages[-1].get("content") or ""


def restart_children(ctx: AgentContext) -> list[int]:
    """Start the sub-agents of this agent that its resume queued again, with the deadlines
    a spawn gives them. Returns their ids."""
    queued = list(
        Run.objects.filter(parent_id=ctx.run_id, status=Status.QUEUED)
        .order_by("id")
        .values_list("pk", flat=True)
    )
    if ctx.pool is None:
        return []
    for run_id in queued:
        deadline, reason = tree.child_deadline(ctx)
        ctx.spawned.add(run_id)
        ctx.pool.submit(run_id, parent_id=ctx.run_id, deadline=deadline, deadline_reason=reason)
    return queued
