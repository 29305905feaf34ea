"""Spawning sub-agents under the limits of seed 000, atomically for the whole tree.

One spawn or a batch (seed 001): a batch starts all or none, so the checks run over every
entry before anything is recorded, and a refusal names the entry it is about. The spawn
calls of one model turn are recorded together (subagents_spawn_each): each is checked as if
made after the ones before it, and all of them go in one transaction, under one tree lock.
"""

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import TypeVar

from django.conf import settings
from django.db import transaction

from research.clean import strip_controls
from research.errors import InvalidInput, LimitReached, ResearchError
from research.models import ACTIVE_STATUSES, Run
from research.selectors import team as team_reads
from research.selectors.team import Child
from research.services.launch import Launch
from research.services.locks import parent_for_spawn, spawn_reads
from research.services.runs import (
    subagents_announce,
    subagents_insert,
    subagents_record,
    validate_max_steps,
    validate_topic,
)
from research.services.step_batch import Action
from research.services.steps import NextState, state_moved
from research.services.writer import Pending, step_writer
from research.sql import inserts_deferred
from research.text import content_words


@dataclass(frozen=True)
class SpawnCall:
    """One spawn call: its launches, recorded all or none. In a `batch` (spawn_subagents) a
    refusal starts with the entry it is about."""

    launches: Sequence[Launch]
    batch: bool = True


def subagent_spawn(
    *, parent_id: int, name: str, reason: str, task: str, max_steps: int | None = None, **more
) -> Run:
    """One sub-agent (seed 000's spawn_subagent); see subagents_spawn."""
    launch = Launch(name=name, reason=reason, task=task, max_steps=max_steps, **more)
    return subagents_spawn(parent_id=parent_id, launches=[launch], batch=False)[0]


def subagents_spawn(*, parent_id: int, launches: Sequence[Launch], batch: bool = True) -> list[Run]:
    """Check every launch against the limits and record them all, or raise and record none."""
    (outcome,) = subagents_spawn_each(parent_id=parent_id, calls=[SpawnCall(launches, batch)])
    if isinstance(outcome, ResearchError):
        raise outcome
    return outcome


T = TypeVar("T")

# A run checked but not yet written: its id is unknown (never shown; see subagents_spawn_each).
UNWRITTEN = 0


def subagents_spawn_each(
    *,
    parent_id: int,
    calls: Sequence[SpawnCall],
    seat: int = 0,
    worker_id: int | None = None,
    root_id: int | None = None,
) -> list[list[Run] | ResearchError]:
    """Record the spawn calls of one turn: for each, its runs, or the refusal that recorded
    none of them. Each call is checked as if made after the ones before it (their names are
    taken, their tasks are working sub-agents' tasks), and all of them are recorded in one
    transaction: the tree locked and its counts read once, the turn's runs in one INSERT,
    then every first state and `run.created` event in one round trip.

    The first `seat` runs recorded are seated for `worker_id` (subagents_insert): inserted
    working, as if claimed in the same transaction; the others queued.

    Holds the root's row lock, so that agents of one tree spawning at once cannot pass the
    tree limit together. With `root_id` (an agent spawning: its tree's root), the
    transaction is the writer's batch behind the records its agent handed over (_recorded)."""
    return _recorded(
        root_id,
        lambda tree_locked: _spawn_each(
            parent_id=parent_id, calls=calls, seat=seat, worker_id=worker_id, locked=tree_locked
        ),
    )


def _recorded(
    root_id: int | None, write: Callable[[bool], T], after: tuple[Pending, ...] = ()
) -> T:
    """`write`'s statements in one transaction. An agent's spawn (`root_id` given) hands them
    to the process's writer behind the records its agent handed over, as one more part of
    their batch (step_batch.Action): one commit for the step that spawned and its spawn, where
    the spawn waited for that step's commit, then committed again (issue 25); `after` those
    records, it is not written when one of them failed (Writer.hand_over). Without a writer
    running, or inside a transaction, it is written here, as before. `write` is told whether
    its tree's root is locked already: the batch locks it before its actions run."""

    def alone() -> T:
        with transaction.atomic(), inserts_deferred():
            return write(False)

    if root_id is None:
        return alone()
    return step_writer.write(Action(root_id, lambda: write(True)), alone, after=after)


def _spawn_each(
    *,
    parent_id: int,
    calls: Sequence[SpawnCall],
    seat: int,
    worker_id: int | None,
    locked: bool = False,
) -> list[list[Run] | ResearchError]:
    """subagents_spawn_each's statements, in the caller's transaction; `locked`: the caller
    holds the tree's lock already."""
    parent, children, in_tree = _spawn_reads(parent_id, locked=locked)  # once for the turn
    taken: dict[str, int | None] = {child.name: child.pk for child, _ in children}
    # [how a refusal names it, its task] of each working sub-agent, this turn's included.
    working = [
        [_working(child.name, child.pk), task]
        for child, task in children
        if child.status in ACTIVE_STATUSES
    ]
    # The turn's runs go in one INSERT once every call is checked (a turn of five spawns is
    # one statement, not five). Until then a run checked has no id, which only a refusal
    # would show ("run N"): a call refused while some are unwritten is checked again after
    # they are written, so that its refusal names them as the model will find them.
    unwritten: list[tuple[Launch, list[str]]] = []
    recorded: list[Run] = []

    def write_unwritten() -> None:
        seated = max(0, min(seat - len(recorded), len(unwritten)))  # the first `seat` recorded
        launches = [launch for launch, _ in unwritten]
        runs = subagents_insert(parent=parent, launches=launches, seat=seated, worker_id=worker_id)
        for run, (_, labelled) in zip(runs, unwritten, strict=True):
            taken[run.name] = run.pk
            labelled[0] = _working(run.name, run.pk)
        recorded.extend(runs)
        unwritten.clear()

    def checked_or_refused(call: SpawnCall) -> list[Launch] | ResearchError:
        try:
            return _checked_call(call, parent, taken, in_tree, working)
        except ResearchError as error:
            return error

    outcomes: list[int | ResearchError] = []  # each call's number of runs, or its refusal
    for call in calls:
        checked = checked_or_refused(call)
        if isinstance(checked, ResearchError) and unwritten:
            write_unwritten()  # its refusal may name them: it is found again with their ids
            checked = checked_or_refused(call)
        if isinstance(checked, ResearchError):
            outcomes.append(checked)
            continue
        for launch in checked:
            taken[launch.name] = UNWRITTEN
            # Its task as its run will store it (the topic), as later calls compare it.
            labelled = [_working(launch.name, UNWRITTEN), strip_controls(launch.task)]
            working.append(labelled)
            unwritten.append((launch, labelled))
        in_tree += len(checked)
        outcomes.append(len(checked))
    if not recorded and unwritten:  # the usual turn: its runs and their numbers at once
        seated = min(seat, len(unwritten))
        launches = [launch for launch, _ in unwritten]
        recorded = subagents_record(
            parent=parent, launches=launches, seat=seated, worker_id=worker_id
        )
    elif recorded:  # some were written for a refusal to name them
        if unwritten:
            write_unwritten()
        subagents_announce(parent=parent, runs=recorded)
    runs = iter(recorded)  # in the calls' order
    return [
        outcome if isinstance(outcome, ResearchError) else [next(runs) for _ in range(outcome)]
        for outcome in outcomes
    ]


def _spawn_reads(parent_id: int, *, locked: bool) -> tuple[Run, list[tuple[Child, str]], int]:
    """The parent, its sub-agents with their tasks, and the tree's count of sub-agents: in
    one statement when the caller holds the tree's lock (the writer's batch), else the lock
    and the parent first, then the rest (a count read with the lock could miss a spawn that
    committed while it waited: locks.parent_for_spawn)."""
    if locked:
        return spawn_reads(parent_id)
    parent = parent_for_spawn(parent_id)
    children, in_tree = team_reads.children_and_tree_size(run_id=parent_id, root_id=parent.root_id)
    return parent, children, in_tree


def _working(name: str, pk: int) -> str:
    """How a duplicate-task refusal names a working sub-agent."""
    return f'working sub-agent "{name}" (run {pk})'


def _checked_call(
    call: SpawnCall,
    parent: Run,
    taken: dict[str, int | None],
    in_tree: int,
    working: list[tuple[str, str]],
) -> list[Launch]:
    """The call's launches, checked (and their tasks cleaned), or the first refusal."""
    taken, checked = dict(taken), []
    for number, launch in enumerate(call.launches, start=1):
        try:
            earlier = [(f'entry "{other.name}" of this batch', other.task) for other in checked]
            _refuse_repeated_task(launch.task, working + earlier)
            checked.append(_check(launch, parent, taken, in_tree))
        except ResearchError as error:
            if call.batch:
                error.message = f'entry {number} ("{launch.name}"): {error.message}'
                error.args = (error.message,)
            raise
        taken[launch.name] = None
        in_tree += 1
    return checked


def _refuse_repeated_task(task: str, others: list[tuple[str, str]]) -> None:
    """Two agents on nearly the same task make the same searches twice: refuse the second.

    Near is measured on the sets of content words (Jaccard), so a task that says the same
    thing in other order or with a few more small words is caught, while two tasks that
    share instructions but differ in their subject are not. Compared with the parent's
    working sub-agents (`others`: who, task) and the entries of the same batch before it.
    """
    threshold = settings.RESEARCH_DUPLICATE_TASK_SIMILARITY
    words = _task_words(task)
    for label, other_task in others:
        other = _task_words(other_task)
        similarity = len(words & other) / len(words | other) if words | other else 1.0
        if similarity >= threshold:
            raise ResearchError(
                f"refused: this task nearly repeats the task of your {label}. "
                "Wait for its report, or give a different task.",
                field="task",
            )


@lru_cache(maxsize=256)
def _task_words(task: str) -> frozenset[str]:
    # A parent compares each new task with all its working sub-agents' tasks: each task's
    # words are found once, not at every spawn.
    return frozenset(content_words(task))


def _check(launch: Launch, parent: Run, taken: dict[str, int | None], in_tree: int) -> Launch:
    task = validate_topic(launch.task, field="task")
    max_steps = validate_max_steps(launch.max_steps)
    name = launch.name
    names = ", ".join(taken)
    if name in taken:
        pk = taken[name]
        where = f" (run {pk})" if pk else " earlier in this batch"
        raise InvalidInput(
            f'you already have a sub-agent named "{name}"{where}; names must be '
            f"unique among your sub-agents ({names}). Pick another name.",
            field="name",
        )
    per_agent = settings.RESEARCH_MAX_SUBAGENTS_PER_AGENT
    if len(taken) >= per_agent:
        raise LimitReached(
            f"limit reached: an agent may spawn at most {per_agent} sub-agents and you have "
            f"{len(taken)} ({names}). Do the rest yourself or wait for them."
        )
    per_tree = settings.RESEARCH_MAX_SUBAGENTS_PER_TREE
    if in_tree >= per_tree:
        raise LimitReached(
            f"limit reached: a research may have at most {per_tree} sub-agents in its whole "
            f"tree and this one has {in_tree}. Do the rest yourself."
        )
    if parent.depth >= settings.RESEARCH_MAX_SUBAGENT_DEPTH:
        raise LimitReached(
            f"limit reached: sub-agents go at most {settings.RESEARCH_MAX_SUBAGENT_DEPTH} "
            "generations deep, and yours would be one more."
        )
    return replace(launch, task=task, max_steps=max_steps)


def verifier_spawn(
    *,
    parent_id: int,
    name: str,
    seated: bool = False,
    worker_id: int | None = None,
    parent_state: NextState | None = None,
    root_id: int | None = None,
    after: tuple[Pending, ...] = (),
    **fields,
) -> Run:
    """Record the verifier the runtime starts on a root's draft (issue 14). The runtime, not
    the model, asks for it: seed 000's limits and the task's length do not apply, and the
    name gets a number if the model already used it. `seated`: claimed for `worker_id` with
    its spawn (subagents_announce). The root goes on to `parent_state` (waiting for it) in
    the same transaction, its event before the verifier's: one commit, not two in a row.
    With `root_id` (agents.loop.review.spawn_with_draft), in the writer's batch behind the
    root's records, the draft's among them, and not written when those `after` failed
    (_recorded)."""
    return _recorded(
        root_id,
        after=after,
        write=lambda tree_locked: _verifier(
            parent_id=parent_id,
            locked=tree_locked,
            name=name,
            seated=seated,
            worker_id=worker_id,
            parent_state=parent_state,
            **fields,
        ),
    )


def _verifier(
    *,
    parent_id: int,
    name: str,
    seated: bool,
    worker_id: int | None,
    parent_state: NextState | None,
    locked: bool = False,
    **fields,
) -> Run:
    """verifier_spawn's statements, in the caller's transaction; `locked`: the caller holds
    the tree's lock already (_spawn_reads)."""
    parent, children, _ = _spawn_reads(parent_id, locked=locked)
    moved = None if parent_state is None else state_moved(run_id=parent_id, next_state=parent_state)
    taken = {child.name for child, _ in children}
    unique, number = name, 1
    while unique in taken:
        number += 1
        unique = f"{name}-{number}"
    launches = [Launch(name=unique, **fields)]
    before = [] if moved is None else [(parent_id, moved)]
    return subagents_record(
        parent=parent, launches=launches, seat=int(seated), worker_id=worker_id, before=before
    )[0]
