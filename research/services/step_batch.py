"""A batch of step records in one UPDATE: every counter, roll-up, state and event number.

Written one by one (research.services.steps), a model call takes its event numbers from the
root row, then adds its usage to the run and its ancestors; a tool call takes its numbers,
then moves the run to its next state: two UPDATEs a record. The writer's batch
(research.services.writer) adds up what all its records change, run by run, and sends it as
one `UPDATE runs ... FROM (VALUES ...)`: the roots' event numbers and counters, the other
runs' counters, roll-ups and states. On PostgreSQL that statement locks its rows before it
updates them, the roots first, then the others, each group in id order (`locked`): the root
row is the tree's lock (events.store.tree_lock), taken before any other row of its tree, and
in the same order in every process. Each record's usage event then carries the counters as
they were after that record, worked back from the rows RETURNING gives, and its events the
numbers reserved for it, in the order of the batch. Rows (ledger, steps, states,
checkpoints, events) are deferred and go in one INSERT per table
(research.sql.inserts_deferred).

A record whose run ended meanwhile raises steps' _RunEnded, which has the writer write the
batch again record by record; so does a batch holding an agent's end
(research.services.finish) followed by another record of the same run. An end after its
run's last records counts their tool steps with those already written. A tool call that
follows its run's model call in the batch has its state carried by the call's usage event
(_carriers): the tools finished before the call was written.
"""

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from decimal import Decimal
from functools import cache
from operator import attrgetter
from typing import Any, ClassVar

from django.db import DEFAULT_DB_ALIAS, connection, connections
from django.utils import timezone

from research.events import Payload, RunStateChanged, RunUsage
from research.events.delivery import expect
from research.events.payloads import money
from research.events.store import publish_all, trees_lock
from research.models import ACTIVE_STATUSES, Run, State
from research.selectors.runs import RunFacts
from research.services.locks import runs_ended
from research.sql import as_arrays, as_decimal, by_column, placeholders, row_lock, unnest

_RUNS = Run._meta.db_table
# Per run: steps, input and output tokens, cost; tree input, output tokens, tree cost; events.
_COUNTERS = (
    "steps",
    "input_tokens",
    "output_tokens",
    "cost_usd",
    "tree_input_tokens",
    "tree_output_tokens",
    "tree_cost_usd",
    "event_seq",
)
_MONEY = {"cost_usd", "tree_cost_usd"}


@dataclass
class Ending:
    """An agent's end in a batch (research.services.finish.run_end_record): its run ended
    with `status`, `report` and `error`, in one statement with the batch's other ends, which
    sets `now` and `run` (its row as written) before the part's rows are made."""

    run_id: int
    status: str
    report: str
    error: str
    now: datetime | None = None
    run: Run | None = None


@dataclass
class Part:
    """What one record changes: `usage` (cost, input, output tokens) for a model call, the
    state it goes on to, its rows (written by `rows`, deferred) and how its events are
    made from the counters after it (`events(counters)` -> payloads)."""

    facts: RunFacts
    usage: tuple[Decimal, int, int] | None
    next_state: str | None
    event_count: int
    rows: Callable[[], None]
    events: Callable[[dict[str, Any]], list[Payload]]
    result: Any = None
    ending: Ending | None = None  # the run's end (research.services.finish.run_end_record)
    tool_steps: int = 0  # the tool steps its rows add (steps.tool_call_record)
    # Its one event is the state a tool call moves its run to: it may ride on the usage
    # event of its run's model call before it in the batch (_carriers).
    rides: bool = False
    # An end's: the tool steps of its run's records before it in the batch, not yet in the
    # table when it counts the run's tool steps there (write_parts sets it).
    tool_steps_before: int = 0


@dataclass
class Action:
    """A write that is no step record, handed over behind its agent's records (a spawn,
    research.services.subagents): `act` runs its statements in the batch's transaction
    after every record's, so that the records and it take one commit, not one each with a
    wait between them. Its tree's root is locked before `act` runs, with the batch's other
    rows in their order (`_update`), or alone with the other actions' roots (trees_lock), so
    `act` reads under that lock without taking it again. What `act` raises rolls the batch
    back, and each record is then written alone, in a transaction of its own: `alone` takes
    the lock itself (subagents._recorded). An action is written at most once: when the
    connection died under the batch's COMMIT (it may have gone through), it fails with that
    error instead (research.services.writer), as the spawn failed before group commit; its
    agent then reads the children it may have as it ends (agents.runtime.tree.end_subagents)."""

    root_id: int
    act: Callable[[], Any]
    at_most_once: ClassVar[bool] = True


class RunEnded(Exception):
    """A run of the batch ended meanwhile: the records go one by one."""


def write_parts(batch: Sequence[Part | Action]) -> list[Any]:
    """Write the records of a batch, in the writer's transaction, then run its actions;
    what each returns."""
    parts = [part for part in batch if isinstance(part, Part)]
    actions = [action for action in batch if isinstance(action, Action)]
    roots = sorted({action.root_id for action in actions})
    if parts:
        _write_records(parts, roots=roots)
    else:
        trees_lock(root_ids=roots)
    # Every act runs with its tree locked (its reads need no lock of their own), in their
    # roots' order (stable: one tree's acts keep theirs).
    done = {id(action): action.act() for action in sorted(actions, key=attrgetter("root_id"))}
    return [done[id(item)] if isinstance(item, Action) else item.result for item in batch]


def _write_records(parts: Sequence[Part], roots: list[int]) -> None:
    """The records' counters, states, rows and events; the `roots` of the batch's actions
    locked with their rows."""
    _ends_last(parts)
    carrier_of = _carriers(parts)
    counts = [0 if id(part) in carrier_of else part.event_count for part in parts]
    deltas: dict[int, list[Any]] = {}
    for part, count in zip(parts, counts, strict=True):
        for pk, change in _changes(part, count):
            row = deltas.setdefault(pk, [0, 0, 0, Decimal(0), 0, 0, Decimal(0), 0, None])
            for index, value in enumerate(change[:8]):
                row[index] += value
            if change[8] is not None:
                row[8] = change[8]
    for root_id in roots:
        deltas.setdefault(root_id, [0, 0, 0, Decimal(0), 0, 0, Decimal(0), 0, None])
    after = _update(sorted(deltas), deltas)
    for part in parts:
        if (
            part.next_state is not None
            and after[part.facts.run_id]["status"] not in ACTIVE_STATUSES
        ):
            raise RunEnded
    _end_runs([part.ending for part in parts if part.ending is not None])
    # Counters after each record: from the last record's back to the first.
    current = {pk: dict(row) for pk, row in after.items()}
    states: list[tuple[dict[str, Any], dict[str, Any]]] = []
    for part, count in zip(reversed(parts), reversed(counts), strict=True):
        states.append((dict(current[part.facts.run_id]), dict(current[part.facts.root_id])))
        for pk, change in _changes(part, count):
            for name, value in zip(_COUNTERS, change[:8], strict=True):
                current[pk][name] -= value
    # A tree's records in a batch have numbers one after another (counted back from its
    # counter above, in the records' order): their events go as one publish (one push after
    # the commit, one sequencer call), not one per record.
    trees: dict[int, tuple[int, list[tuple[int, Payload]]]] = {}
    usages: dict[int, int] = {}  # a carrier's usage event: its index among its tree's events
    for part, count, (own, root) in zip(parts, counts, reversed(states), strict=True):
        part.rows()
        carrier = carrier_of.get(id(part))
        if carrier is not None:
            # Its state (and its timeline row) is made as alone; the usage event shows it.
            (moved,) = part.events({"own": own, "root": root})
            events = trees[part.facts.root_id][1]
            index = usages[id(carrier)]
            run_id, usage = events[index]
            events[index] = (run_id, _carried(usage, moved))
            continue
        if not count:
            continue
        first = root["event_seq"] - count + 1
        _, events = trees.setdefault(part.facts.root_id, (first, []))
        payloads = part.events({"own": own, "root": root})
        events += [(part.facts.run_id, payload) for payload in payloads]
        if part.usage is not None:
            usages[id(part)] = len(events) - 1
    for root_id, (first, events) in trees.items():
        expect(root_id, first, len(events))
        publish_all(root_id=root_id, events=events, first_seq=first)


def _carriers(parts: Sequence[Part]) -> dict[int, Part]:
    """The model call whose usage event carries a tool call's state, by the tool call's id:
    for the tool calls that follow their run's model call in the batch, with nothing of that
    run between them but other tool calls. The call's tools finished before its record was
    written (within the writer's linger, a few milliseconds): the state the call moved the
    agent to lasted no longer, and its usage event says where the agent is now, one event
    instead of one more per tool. The timeline (research_state rows) keeps every state."""
    last_call: dict[int, Part] = {}  # by run
    carrier_of: dict[int, Part] = {}
    for part in parts:
        run_id = part.facts.run_id
        if part.usage is not None:
            last_call[run_id] = part  # its one event, a usage event (steps.model_call_record)
        elif part.rides and run_id in last_call:
            if part.event_count:
                carrier_of[id(part)] = last_call[run_id]
        else:
            last_call.pop(run_id, None)
    return carrier_of


def _carried(usage: RunUsage, moved: RunStateChanged) -> RunUsage:
    """A usage event that shows the state `moved` (a tool's run.state) instead of its own."""
    return replace(usage, status=moved.status, state=moved.state, detail=moved.detail)


def _ends_last(parts: Sequence[Part]) -> None:
    """An agent's end comes with its last records (agents.loop.records.Records.end): it
    counts their tool steps, whose rows go in after its count. A record of its run after it
    would follow the end (a state after it): RunEnded, and each is written as it is alone."""
    tool_steps: dict[int, int] = {}
    ended: set[int] = set()
    for part in parts:
        run_id = part.facts.run_id
        if run_id in ended:
            raise RunEnded
        if part.ending is not None:
            part.tool_steps_before = tool_steps.get(run_id, 0)
            ended.add(run_id)
        tool_steps[run_id] = tool_steps.get(run_id, 0) + part.tool_steps


def _end_runs(endings: list[Ending]) -> None:
    """The batch's ends in one statement (locks.runs_ended), not one a run: sub-agents ending
    together come in the same batch. A run it could not end (ended by a sweep, paused,
    gone) has the batch written again record by record, its end through run_finish."""
    if not endings:
        return
    now = timezone.now()
    ends = [(ending.run_id, ending.status, ending.report, ending.error) for ending in endings]
    ended = runs_ended(ends, state=State.ENDED, now=now)
    if len(ended) < len(endings):
        raise RunEnded
    for ending in endings:
        ending.now, ending.run = now, ended[ending.run_id]


def usage_event(counters: dict[str, Any], moved: RunStateChanged | None = None) -> RunUsage:
    """The usage event of a model call from the counters after it, carrying the state it
    moved the agent to (`moved`), if any."""
    own, root = counters["own"], counters["root"]
    moves = {}
    if moved is not None:
        moves = {"status": moved.status, "state": moved.state, "detail": moved.detail}
    return RunUsage(
        steps=own["steps"],
        input_tokens=own["input_tokens"],
        output_tokens=own["output_tokens"],
        cost_usd=money(own["cost_usd"]),
        tree_cost_usd=money(own["tree_cost_usd"]),
        root_tree_cost_usd=money(root["tree_cost_usd"]),
        root_tree_input_tokens=root["tree_input_tokens"],
        root_tree_output_tokens=root["tree_output_tokens"],
        **moves,
    )


def _changes(part: Part, event_count: int) -> list[tuple[int, tuple[Any, ...]]]:
    """(run id, deltas of _COUNTERS and the new state) of every row the record changes, with
    `event_count` numbers taken for its events."""
    facts = part.facts
    changes: dict[int, list[Any]] = {}

    def row(pk: int) -> list[Any]:
        return changes.setdefault(pk, [0, 0, 0, Decimal(0), 0, 0, Decimal(0), 0, None])

    if part.usage is not None:
        cost, input_tokens, output_tokens = part.usage
        own = row(facts.run_id)
        own[:4] = [1, input_tokens, output_tokens, cost]
        for pk in facts.lineage:
            row(pk)[4:7] = [input_tokens, output_tokens, cost]
    row(facts.run_id)[8] = part.next_state
    row(facts.root_id)[7] = event_count
    return [(pk, tuple(values)) for pk, values in changes.items()]


def _update(ids: list[int], deltas: dict[int, list[Any]]) -> dict[int, dict[str, Any]]:
    """Every run's counters, roll-ups and state of a batch in one statement; the rows after."""
    db = connections[DEFAULT_DB_ALIAS]
    runs = []
    for pk in ids:
        steps, tin, tout, cost, trin, trout, trcost, events, state = deltas[pk]
        cost, trcost = _money(cost, db), _money(trcost, db)
        runs.append([pk, steps, tin, tout, cost, trin, trout, trcost, events, state])
    # As research.sql.Insert: on PostgreSQL, many runs' values go as one array per column.
    if as_arrays(db, len(ids) * _WIDTH):
        sql, values = _update_sql(None), by_column(runs)
    else:
        sql, values = _update_sql(len(ids)), [value for run in runs for value in run]
    locked = [ids] if db.vendor == "postgresql" else []  # `locked` in _update_sql
    with db.cursor() as cursor:
        cursor.execute(sql, [*locked, *ACTIVE_STATUSES, *values])
        rows = cursor.fetchall()
    after = {}
    for pk, *values, status in rows:
        counters = dict(zip(_COUNTERS, values, strict=True))
        for name in _MONEY:
            counters[name] = as_decimal(counters[name])
        after[pk] = {**counters, "status": status}
    return after


def _money(value: Decimal, db: Any) -> Any:
    return Run._meta.get_field("cost_usd").get_db_prep_save(value, db)


# Each run's values: its id, _COUNTERS' deltas, its new state.
_WIDTH = 2 + len(_COUNTERS)


@cache
def _update_sql(count: int | None) -> str:
    """The batch's UPDATE for `count` runs, or (None, PostgreSQL) for any number of runs, their
    values as one array per column."""
    postgres = connection.vendor == "postgresql"
    numeric, text, bigint = ("::numeric", "::varchar", "::bigint") if postgres else ("", "", "")
    active = placeholders(len(ACTIVE_STATUSES))
    sets = ", ".join(
        f"{name} = {_RUNS}.{name} + v.c{index}{numeric if name in _MONEY else ''}"
        for index, name in enumerate(_COUNTERS, start=2)
    )
    names = [f"c{index}" for index in range(1, _WIDTH + 1)]
    if count is None:
        fields = [Run._meta.pk, *(Run._meta.get_field(name) for name in (*_COUNTERS, "state"))]
        source = f"{unnest(fields)} AS v({', '.join(names)})"
    else:
        columns = ", ".join(f"column{index} AS {name}" for index, name in enumerate(names, 1))
        values = ", ".join([f"({placeholders(_WIDTH)})"] * count)
        source = f"(SELECT {columns} FROM (VALUES {values}) AS vals) AS v"
    returning = ", ".join(f"{_RUNS}.{name}" for name in ("id", *_COUNTERS, "status"))
    locked, joined = "", ""
    if postgres:
        # The rows are locked before any is updated: the roots (no parent) first, each tree's
        # lock, then the others, each group in id order. An UPDATE alone would lock them in
        # whatever order its plan reads them; it updates only rows `locked` gave it.
        locked = (
            f"WITH locked AS MATERIALIZED (SELECT id FROM {_RUNS} WHERE id = ANY(%s::bigint[]) "
            f"ORDER BY parent_id IS NULL DESC, id{row_lock()}) "
        )
        joined = f" AND locked.id = {_RUNS}.id"
        source += ", locked"
    return (
        f"{locked}UPDATE {_RUNS} SET {sets}, state = CASE WHEN v.c10{text} IS NOT NULL AND "
        f"{_RUNS}.status IN ({active}) THEN v.c10{text} ELSE {_RUNS}.state END "
        f"FROM {source} WHERE {_RUNS}.id = v.c1{bigint}{joined} RETURNING {returning}"
    )
