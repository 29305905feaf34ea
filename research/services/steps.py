"""An agent's hot path: what one model call and one tool call write, each in one transaction.

A model call writes its ledger row, the run's counters, the cost and tokens rolled up to every
ancestor (the root's row holds the tree's totals), the transcript step, the state the agent
goes on to (the first tool's, say) and its usage event, which carries that state: one event,
not a usage and a state. A tool call writes its step and the next state. Each transaction
starts by taking its events' sequence numbers from the root row, which is the tree's lock
(see events.tree_lock), and the run's fixed facts (root, lineage, model) come from the
caller, read once per agent: no write reads them again. The statements are built once
(research.sql): six for a model call (the run's counters, its state and the roll-up are one
UPDATE), five for a tool call, and one more for the agent's checkpoint of the step
(research.models_checkpoints), in the same transaction.

An agent's records go to the process's writer (research.services.writer), which writes the
records of all its agents in one transaction per batch: each record hands it a `Part` (what
it changes; research.services.step_batch merges the batch's UPDATEs) and `alone`, the record
in a transaction of its own as above, for a batch that fails and for callers already inside
an atomic block.
"""

from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from functools import cache
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from research import pricing
from research.clean import strip_controls
from research.events import Payload, RunStateChanged, RunUsage
from research.events.store import allocate_seqs, publish_all
from research.models import ACTIVE_STATUSES, Checkpoint, LLMCall, Run, RunState, Step
from research.models_checkpoints import pack
from research.selectors.runs import RunFacts, run_facts
from research.services.step_batch import Part, usage_event
from research.services.writer import step_writer
from research.sql import Insert, as_decimal, inserts_deferred, one, placeholders

_RUNS = Run._meta.db_table
_COST = Run._meta.get_field("cost_usd")
_ACTIVE = placeholders(len(ACTIVE_STATUSES))


@dataclass(frozen=True)
class NextState:
    """The state an agent goes on to once a write is recorded, with its detail."""

    state: str
    detail: str = ""


class _RunEnded(Exception):
    """The run ended meanwhile (a sweep, a deletion): its state stays as it is."""


@cache
def step_inserts() -> dict[str, Insert]:
    """The rows a step writes, one Insert per table ("call", "step", "state", "checkpoint"),
    built once; a run's start and end write their state rows through the same one."""
    return {
        "call": Insert(
            LLMCall,
            [
                "run",
                "parent_run",
                "depth",
                "model",
                "input_tokens",
                "output_tokens",
                "cost_usd",
                "latency_ms",
                "at",
            ],
        ),
        "step": Insert(Step, ["run", "kind", "tool", "input", "output", "is_error", "at"]),
        "state": Insert(RunState, ["run", "state", "detail", "at"]),
        "checkpoint": Insert(Checkpoint, ["run", "number", "body", "compressed", "state", "at"]),
    }


def _insert_checkpoint(run_id: int, checkpoint: dict[str, Any] | None) -> None:
    """The agent's checkpoint of this step (research.models_checkpoints), in the step's
    transaction: `number`, the `messages` the step added and the agent's `state`."""
    if checkpoint is None:
        return
    body, compressed = pack(checkpoint["messages"])
    step_inserts()["checkpoint"].row(
        run_id, checkpoint["number"], body, compressed, checkpoint["state"], timezone.now()
    )


def _set_state(facts: RunFacts, next_state: NextState) -> Payload:
    payload = state_moved(run_id=facts.run_id, next_state=next_state)
    if payload is None:
        raise _RunEnded
    return payload


def state_moved(*, run_id: int, next_state: NextState) -> Payload | None:
    """Move an active run (queued or working) to `next_state` in the caller's transaction (its
    timeline row with the caller's rows): its event, for the caller to number and publish;
    None when the run has ended."""
    row = one(
        f"UPDATE {_RUNS} SET state = %s WHERE id = %s AND status IN ({_ACTIVE}) RETURNING status",
        [next_state.state, run_id, *ACTIVE_STATUSES],
    )
    return None if row is None else _state_row(run_id, next_state, status=row[0])


def _state_row(run_id: int, next_state: NextState, *, status: str) -> Payload:
    """The timeline row of a state the run's row already has, and its event."""
    # A detail often echoes what the model wrote (a query, a name): no escape reaches a
    # terminal or the admin from it.
    detail = strip_controls(next_state.detail)[:500]
    step_inserts()["state"].row(run_id, next_state.state, detail, timezone.now())
    return RunStateChanged(status=status, state=next_state.state, detail=detail)


def state_record(*, facts: RunFacts, state: str, detail: str = "", wait: bool | None = None) -> Any:
    """Move a working run to `state` (a row of its timeline and an event); nothing when the
    run has ended meanwhile. Written at once in a transaction of its own; with `wait`, by the
    process's writer in its batch as a step record is (True: and waited for; False: its
    Pending returned at once)."""
    next_state = NextState(state, detail)

    def alone() -> None:
        try:
            with transaction.atomic():
                seq = allocate_seqs(root_id=facts.root_id, count=1)
                payload = _set_state(facts, next_state)
                publish_all(root_id=facts.root_id, events=[(facts.run_id, payload)], first_seq=seq)
        except _RunEnded:
            pass

    if wait is None:
        return alone()

    def events(counters: dict[str, Any]) -> list[Payload]:
        return [_state_row(facts.run_id, next_state, status=counters["own"]["status"])]

    part = Part(facts, None, state, 1, lambda: None, events)
    return step_writer.record(part, alone, wait=wait)


def _truncated(output: str) -> str:
    limit = settings.RESEARCH_STEP_RESULT_MAX_CHARS
    if len(output) > limit:
        return output[:limit] + f"\n[… truncated: {len(output) - limit} more characters]"
    return output


def _insert_step(
    run_id: int,
    *,
    kind: str,
    tool: str = "",
    input: dict[str, Any] | None = None,
    output: str = "",
    is_error: bool = False,
) -> None:
    values = (run_id, kind, tool, input or {}, _truncated(output), is_error, timezone.now())
    step_inserts()["step"].row(*values)


def _add_usage(
    facts: RunFacts,
    cost: Decimal,
    input_tokens: int,
    output_tokens: int,
    next_state: NextState | None,
) -> RunUsage:
    """Count the call on the run, roll it up the lineage and move the run to `next_state`,
    in one UPDATE; the usage event, carrying the state, from the rows it returns."""
    money_param = _money_param(cost)
    run_id = facts.run_id
    params = [money_param, input_tokens, output_tokens, run_id, run_id, input_tokens]
    params += [run_id, output_tokens, run_id, money_param]
    if next_state is not None:
        params += [run_id, *ACTIVE_STATUSES, next_state.state]
    with connection.cursor() as cursor:
        cursor.execute(
            _usage_sql(len(facts.lineage), next_state is not None), params + [*facts.lineage]
        )
        rows = {pk: rest for pk, *rest in cursor.fetchall()}
    steps, own_in, own_out, own_cost, status = rows[run_id][3:]
    if next_state is not None and status not in ACTIVE_STATUSES:
        raise _RunEnded
    root_cost, root_in, root_out = rows[facts.root_id][:3]
    counters = {
        "own": {
            "steps": steps,
            "input_tokens": own_in,
            "output_tokens": own_out,
            "cost_usd": as_decimal(own_cost),
            "tree_cost_usd": as_decimal(rows[run_id][0]),
        },
        "root": {
            "tree_cost_usd": as_decimal(root_cost),
            "tree_input_tokens": root_in,
            "tree_output_tokens": root_out,
        },
    }
    moved = None if next_state is None else _state_row(facts.run_id, next_state, status=status)
    return usage_event(counters, moved)


def _money_param(value: Decimal) -> Any:
    return _COST.get_db_prep_save(value, connection)


@cache
def _usage_sql(generations: int, with_state: bool) -> str:
    """The call added to the tree totals of the run and its ancestors, and to the run's own
    counters (and state): one statement where there were three."""
    ids = placeholders(generations)
    state = f", state = CASE WHEN id = %s AND status IN ({_ACTIVE}) THEN %s ELSE state END"
    return (
        f"UPDATE {_RUNS} SET tree_cost_usd = tree_cost_usd + %s, "
        "tree_input_tokens = tree_input_tokens + %s, tree_output_tokens = tree_output_tokens + %s, "
        "steps = CASE WHEN id = %s THEN steps + 1 ELSE steps END, "
        "input_tokens = CASE WHEN id = %s THEN input_tokens + %s ELSE input_tokens END, "
        "output_tokens = CASE WHEN id = %s THEN output_tokens + %s ELSE output_tokens END, "
        "cost_usd = CASE WHEN id = %s THEN cost_usd + %s ELSE cost_usd END"
        + (state if with_state else "")
        + f" WHERE id IN ({ids}) RETURNING id, tree_cost_usd, tree_input_tokens, "
        "tree_output_tokens, steps, input_tokens, output_tokens, cost_usd, status"
    )


def model_call_record(
    *,
    facts: RunFacts,
    input_tokens: int,
    output_tokens: int,
    latency_ms: int,
    step: dict[str, Any] | None = None,
    next_state: NextState | None = None,
    checkpoint: dict[str, Any] | None = None,
    wait: bool = True,
) -> Any:
    """Record one model call in one transaction (the writer's batch, research.services.writer):
    the ledger row, the run's steps, tokens and cost, the cost and tokens rolled up to every
    ancestor, the transcript `step` (fields of Step: kind, input, output) and `next_state`,
    with their events. Returns the call's cost, or with `wait=False` at once the record's
    Pending, whose wait() returns it once committed."""
    cost = pricing.cost(facts.model, input_tokens, output_tokens)

    def rows() -> None:
        step_inserts()["call"].row(
            facts.run_id,
            facts.parent_id,
            facts.depth,
            facts.model,
            input_tokens,
            output_tokens,
            cost,
            latency_ms,
            timezone.now(),
        )
        if step is not None:
            _insert_step(facts.run_id, **step)
        _insert_checkpoint(facts.run_id, checkpoint)

    usage = (cost, input_tokens, output_tokens)

    def alone() -> Decimal:
        # The usage is real all the same when the run ended: recorded without the state.
        _unless_ended(lambda state: _model_call(facts, usage, rows, state), next_state)
        return cost

    def events(counters: dict[str, Any]) -> list[Payload]:
        if next_state is None:
            return [usage_event(counters)]
        moved = _state_row(facts.run_id, next_state, status=counters["own"]["status"])
        return [usage_event(counters, moved)]

    state = None if next_state is None else next_state.state
    part = Part(facts, usage, state, 1, rows, events, result=cost)
    return step_writer.record(part, alone, wait=wait)


def _unless_ended(write: Callable[[NextState | None], None], next_state: NextState | None) -> None:
    """`write` in a transaction of its own with `next_state`; when the run ended meanwhile
    (_RunEnded), again without it: the record is kept, the run's state is not moved."""
    try:
        with transaction.atomic():
            write(next_state)
    except _RunEnded:
        with transaction.atomic():
            write(None)


def _model_call(
    facts: RunFacts,
    usage: tuple[Decimal, int, int],
    rows: Callable[[], None],
    next_state: NextState | None,
) -> None:
    """A model call written alone, in the caller's transaction: its event numbers (the tree
    lock), its usage and state in one UPDATE, then its rows (`rows`) and events, deferred to
    one round trip (research.sql.inserts_deferred); _RunEnded when the run ended before its
    `next_state`."""
    with inserts_deferred():
        first = allocate_seqs(root_id=facts.root_id, count=1)
        rows()
        payload = _add_usage(facts, *usage, next_state)
        publish_all(root_id=facts.root_id, events=[(facts.run_id, payload)], first_seq=first)


def tool_call_record(
    *,
    facts: RunFacts,
    step: dict[str, Any],
    next_state: NextState | None = None,
    checkpoint: dict[str, Any] | None = None,
    wait: bool = True,
) -> Any:
    """Record one tool call's transcript step, its checkpoint and the state the agent goes on
    to, at once (in the writer's batch); with `wait=False`, the record's Pending at once."""

    def alone() -> None:
        if next_state is None and checkpoint is None:
            _insert_step(facts.run_id, **step)
            return
        _unless_ended(lambda state: _tool_call(facts, step, checkpoint, state), next_state)

    def rows() -> None:
        _insert_step(facts.run_id, **step)
        _insert_checkpoint(facts.run_id, checkpoint)

    def events(counters: dict[str, Any]) -> list[Payload]:
        return [_state_row(facts.run_id, next_state, status=counters["own"]["status"])]

    state = None if next_state is None else next_state.state
    count = int(next_state is not None)
    part = Part(facts, None, state, count, rows, events, tool_steps=1, rides=True)
    return step_writer.record(part, alone, wait=wait)


def _tool_call(
    facts: RunFacts,
    step: dict[str, Any],
    checkpoint: dict[str, Any] | None,
    next_state: NextState | None,
) -> None:
    """A tool call's statements, in the caller's transaction; _RunEnded when the run ended
    before its `next_state`. Its rows go in after the UPDATEs, as a model call's."""
    with inserts_deferred():
        _insert_step(facts.run_id, **step)
        _insert_checkpoint(facts.run_id, checkpoint)
        if next_state is not None:
            seq = allocate_seqs(root_id=facts.root_id, count=1)
            payload = _set_state(facts, next_state)
            publish_all(root_id=facts.root_id, events=[(facts.run_id, payload)], first_seq=seq)


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
    """Record one transcript step alone, through the ORM (the agents record theirs with their
    calls); returns the row."""
    return Step.objects.create(
        run_id=run_id,
        kind=kind,
        tool=tool,
        input=input or {},
        output=_truncated(output),
        is_error=is_error,
    )
