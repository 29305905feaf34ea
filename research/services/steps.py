"""An agent's hot path: what one model call and one tool call write, each in one transaction.

A model call writes its ledger row, the run's counters, the cost and tokens rolled up to every
ancestor (the root's row holds the tree's totals), the transcript step, the state the agent
goes on to (the first tool's, say) and their events. A tool call writes its step and the next
state. Each transaction starts by taking its events' sequence numbers from the root row,
which is the tree's lock (see events.tree_lock), and the run's fixed facts (root, lineage,
model) come from the caller, read once per agent: no write reads them again.
"""

from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import F

from research import pricing
from research.events import Payload, RunStateChanged, RunUsage
from research.events.payloads import money
from research.events.store import allocate_seqs, publish_all
from research.models import ACTIVE_STATUSES, LLMCall, Run, RunState, Step
from research.selectors.runs import RunFacts, run_facts

_RUNS = Run._meta.db_table
_SET_STATE = f"UPDATE {_RUNS} SET state = %s WHERE id = %s AND status IN (%s, %s) RETURNING status"


@dataclass(frozen=True)
class NextState:
    """The state an agent goes on to once a write is recorded, with its detail."""

    state: str
    detail: str = ""


class _RunEnded(Exception):
    """The run ended meanwhile (a sweep, a deletion): its state stays as it is."""


def _set_state(facts: RunFacts, next_state: NextState) -> Payload:
    detail = next_state.detail[:500]
    with connection.cursor() as cursor:
        cursor.execute(_SET_STATE, [next_state.state, facts.run_id, *ACTIVE_STATUSES])
        row = cursor.fetchone()
    if row is None:
        raise _RunEnded
    RunState.objects.create(run_id=facts.run_id, state=next_state.state, detail=detail)
    return RunStateChanged(status=row[0], state=next_state.state, detail=detail)


def state_record(*, facts: RunFacts, state: str, detail: str = "") -> None:
    """Move a working run to `state` (a row of its timeline and an event); nothing when the
    run has ended meanwhile."""
    try:
        with transaction.atomic():
            seq = allocate_seqs(root_id=facts.root_id, count=1)
            payload = _set_state(facts, NextState(state, detail))
            publish_all(root_id=facts.root_id, events=[(facts.run_id, payload)], first_seq=seq)
    except _RunEnded:
        pass


def _step(run_id: int, *, output: str = "", **fields: Any) -> Step:
    """A transcript row, its output cut to RESEARCH_STEP_RESULT_MAX_CHARS with a note."""
    limit = settings.RESEARCH_STEP_RESULT_MAX_CHARS
    if len(output) > limit:
        output = output[:limit] + f"\n[… truncated: {len(output) - limit} more characters]"
    return Step(run_id=run_id, output=output, **fields)


def _add_usage(facts: RunFacts, cost: Decimal, input_tokens: int, output_tokens: int) -> Payload:
    """Count the call on the run and roll it up the lineage; the usage event from the rows."""
    Run.objects.filter(pk=facts.run_id).update(
        steps=F("steps") + 1,
        input_tokens=F("input_tokens") + input_tokens,
        output_tokens=F("output_tokens") + output_tokens,
        cost_usd=F("cost_usd") + cost,
    )
    Run.objects.filter(pk__in=facts.lineage).update(
        tree_cost_usd=F("tree_cost_usd") + cost,
        tree_input_tokens=F("tree_input_tokens") + input_tokens,
        tree_output_tokens=F("tree_output_tokens") + output_tokens,
    )
    # One read of the two rows the event describes (the run and its root), by primary key.
    rows = {
        row[0]: row
        for row in Run.objects.filter(pk__in={facts.run_id, facts.root_id}).values_list(
            "pk",
            "steps",
            "input_tokens",
            "output_tokens",
            "cost_usd",
            "tree_cost_usd",
            "tree_input_tokens",
            "tree_output_tokens",
        )
    }
    own, root = rows[facts.run_id], rows[facts.root_id]
    return RunUsage(
        steps=own[1],
        input_tokens=own[2],
        output_tokens=own[3],
        cost_usd=money(own[4]),
        tree_cost_usd=money(own[5]),
        root_tree_cost_usd=money(root[5]),
        root_tree_input_tokens=root[6],
        root_tree_output_tokens=root[7],
    )


def model_call_record(
    *,
    facts: RunFacts,
    input_tokens: int,
    output_tokens: int,
    latency_ms: int,
    step: dict[str, Any] | None = None,
    next_state: NextState | None = None,
) -> Decimal:
    """Record one model call in one transaction: the ledger row, the run's steps, tokens and
    cost, the cost and tokens rolled up to every ancestor, the transcript `step` (fields of
    Step: kind, input, output) and `next_state`, with their events. Returns the call's cost."""
    cost = pricing.cost(facts.model, input_tokens, output_tokens)
    try:
        with transaction.atomic():
            first = allocate_seqs(root_id=facts.root_id, count=1 + (next_state is not None))
            LLMCall.objects.create(
                run_id=facts.run_id,
                parent_run_id=facts.parent_id,
                depth=facts.depth,
                model=facts.model,
                input_tokens=input_tokens,
                output_tokens=output_tokens,
                cost_usd=cost,
                latency_ms=latency_ms,
            )
            events = [(facts.run_id, _add_usage(facts, cost, input_tokens, output_tokens))]
            if step is not None:
                _step(facts.run_id, **step).save(force_insert=True)
            if next_state is not None:
                events.append((facts.run_id, _set_state(facts, next_state)))
            publish_all(root_id=facts.root_id, events=events, first_seq=first)
    except _RunEnded:
        # The usage is real all the same: record it without the state.
        return model_call_record(
            facts=facts,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            latency_ms=latency_ms,
            step=step,
        )
    return cost


def tool_call_record(
    *, facts: RunFacts, step: dict[str, Any], next_state: NextState | None = None
) -> None:
    """Record one tool call's transcript step and the state the agent goes on to, at once."""
    if next_state is None:
        _step(facts.run_id, **step).save(force_insert=True)
        return
    try:
        with transaction.atomic():
            seq = allocate_seqs(root_id=facts.root_id, count=1)
            _step(facts.run_id, **step).save(force_insert=True)
            payload = _set_state(facts, next_state)
            publish_all(root_id=facts.root_id, events=[(facts.run_id, payload)], first_seq=seq)
    except _RunEnded:
        _step(facts.run_id, **step).save(force_insert=True)


def usage_add(*, run_id: int, input_tokens: int, output_tokens: int, latency_ms: int) -> Decimal:
    """Record one model call of a run that is not an agent's own (facts read here)."""
    facts = run_facts(run=Run.objects.get(pk=run_id))
    return model_call_record(
        facts=facts, input_tokens=input_tokens, output_tokens=output_tokens, latency_ms=latency_ms
    )


def step_record(
    *,
    run_id: int,
    kind: str,
    tool: str = "",
    input: dict[str, Any] | None = None,
    output: str = "",
    is_error: bool = False,
) -> Step:
    """Record one transcript step alone (the agents record theirs with their calls)."""
    step = _step(run_id, kind=kind, tool=tool, input=input or {}, output=output, is_error=is_error)
    step.save(force_insert=True)
    return step
