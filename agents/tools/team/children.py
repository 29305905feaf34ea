"""wait_subagents, cancel_subagent and inspect_subagent: a parent's hold on its children."""

import json
import time
from typing import Annotated

from django.conf import settings
from django.utils import timezone
from pydantic import Field

from agents.runtime.context import AgentContext
from agents.runtime.tree import (
    CANCELLED_BY_PARENT,
    RECHECK_SECONDS,
    cancel_child,
    note_waiting,
    wait_for_change,
    wait_result,
    working_among,
    yielded,
)
from agents.tools.base import ToolError
from agents.tools.tool import tool
from research.models import ACTIVE_STATUSES, Run, State
from research.selectors import team as team_reads

# --- wait_subagents / cancel_subagent ---------------------------------------------------------


def _named_children(
    ctx: AgentContext, names: list[str] | None, *, action: str = "wait for"
) -> list[team_reads.Child]:
    children = [] if ctx.childless else team_reads.children_named(run_id=ctx.run_id)
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


@tool(
    state=State.WAITING,
    detail=lambda args: ", ".join(args.get("names") or []) or "all sub-agents",
    reads=True,
)
def wait_subagents(
    ctx: AgentContext, names: Annotated[list[str] | None, Field(description="optional")] = None
) -> str:
    """Wait until your sub-agents have ended and read their reports (or errors). Without names,
    waits for all of them. Returns after a while with 'still working' lines if some are not
    done: call it again then."""
    targets = [child.pk for child in _named_children(ctx, names)]
    deadline = time.monotonic() + settings.RESEARCH_WAIT_SLICE_SECONDS
    noted = False
    with yielded(ctx):
        # Their rows are read once none of them runs here any more (working_among).
        while (found := working_among(ctx, targets))[0]:
            # A note from the analyst ends the wait at once: it is read first (seed 001).
            noted = note_waiting(ctx)
            if noted or time.monotonic() >= deadline:
                break
            # Woken when one of those still working hands its end over or leaves the pool,
            # not by the ends of other agents.
            left = max(0.0, deadline - time.monotonic())
            wait_for_change(ctx, min(RECHECK_SECONDS, left), run_ids=found[0])
    runs = found[1] if found[1] is not None else team_reads.runs_by_ids(run_ids=targets)
    return wait_result(ctx, runs, noted=noted)


@tool(state=State.SPAWNING, detail=lambda args: f"cancel {args.get('name', '')}")
def cancel_subagent(ctx: AgentContext, name: str) -> str:
    """Cancel one of your working sub-agents, when its work is no longer needed."""
    (child,) = _named_children(ctx, [name], action="cancel")
    child = team_reads.run_by_id(run_id=child.pk)
    if child.status not in ACTIVE_STATUSES:
        raise ToolError(f'sub-agent "{child.name}" (run {child.pk}) has already ended')
    cancel_child(ctx, child.pk, CANCELLED_BY_PARENT)
    return f'cancelled sub-agent "{child.name}" (run {child.pk}); it ends at its next step.'


# --- inspect_subagent (seed 002's query_agent) --------------------------------------------------

INSPECT_ENTRY_CHARS = 400


@tool(state=State.WAITING, detail=lambda args: f"inspect {args.get('name', '')}", reads=True)
def inspect_subagent(
    ctx: AgentContext,
    name: str,
    last: Annotated[int, Field(ge=1, le=50)] = 10,
    offset: Annotated[int, Field(ge=0)] = 0,
) -> str:
    """Look inside one of your sub-agents without waiting for it: its status, steps used,
    elapsed time and its latest transcript entries (tool calls and results, cut short). Use
    offset to page back to older entries."""
    # A page of the child's transcript, newest last; `offset` pages back from the newest entry.
    (child,) = _named_children(ctx, [name], action="inspect")
    run = team_reads.run_by_id(run_id=child.pk)
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
