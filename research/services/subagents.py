"""Spawning sub-agents under the limits of seed 000, atomically for the whole tree.

One spawn or a batch (seed 001): a batch starts all or none, so the checks run over every
entry before anything is recorded, and a refusal names the entry it is about.
"""

from collections.abc import Sequence
from dataclasses import replace

from django.conf import settings
from django.db import transaction

from research.errors import InvalidInput, LimitReached, ResearchError
from research.models import Run
from research.selectors import team as team_reads
from research.services.launch import Launch
from research.services.locks import parent_for_spawn
from research.services.runs import (
    subagents_record,
    validate_max_steps,
    validate_topic,
)


def subagent_spawn(
    *, parent_id: int, name: str, reason: str, task: str, max_steps: int | None = None, **more
) -> Run:
    """One sub-agent (seed 000's spawn_subagent); see subagents_spawn."""
    launch = Launch(name=name, reason=reason, task=task, max_steps=max_steps, **more)
    return subagents_spawn(parent_id=parent_id, launches=[launch], batch=False)[0]


@transaction.atomic
def subagents_spawn(*, parent_id: int, launches: Sequence[Launch], batch: bool = True) -> list[Run]:
    """Check every launch against the limits and record them all, or raise and record none.

    Holds the root's row lock, so that agents of one tree spawning at once cannot pass the
    tree limit together. In a batch, a refusal starts with the entry it is about."""
    parent = parent_for_spawn(parent_id)  # read, its tree locked, once for the whole batch
    taken: dict[str, int | None] = {
        child.name: child.pk for child in team_reads.children_named(run_id=parent_id)
    }
    in_tree = team_reads.subagents_in_tree(root_id=parent.root_id)
    checked = []
    for number, launch in enumerate(launches, start=1):
        try:
            checked.append(_check(launch, parent, taken, in_tree))
        except ResearchError as error:
            if batch:
                error.message = f'entry {number} ("{launch.name}"): {error.message}'
                error.args = (error.message,)
            raise
        taken[launch.name] = None
        in_tree += 1
    return subagents_record(parent=parent, launches=checked)


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


@transaction.atomic
def verifier_spawn(*, parent_id: int, name: str, **fields) -> Run:
    """Record the verifier the runtime starts on a root's draft (issue 14). The runtime, not
    the model, asks for it: seed 000's limits and the task's length do not apply, and the
    name gets a number if the model already used it."""
    parent = parent_for_spawn(parent_id)
    taken = {child.name for child in team_reads.children_named(run_id=parent_id)}
    unique, number = name, 1
    while unique in taken:
        number += 1
        unique = f"{name}-{number}"
    return subagents_record(parent=parent, launches=[Launch(name=unique, **fields)])[0]
