"""Spawning a sub-agent under the limits of seed 000, atomically for the whole tree."""

from django.conf import settings
from django.db import transaction

from research.errors import InvalidInput, LimitReached
from research.events import tree_lock
from research.models import Run
from research.services.runs import subagent_create, validate_max_steps, validate_topic


@transaction.atomic
def subagent_spawn(
    *, parent_id: int, name: str, reason: str, task: str, max_steps: int | None = None
) -> Run:
    """Check the task, the name and the limits and record the sub-agent (its task is its run's
    topic), holding the root's row lock so that agents of one tree spawning at once cannot
    pass the tree limit together."""
    task = validate_topic(task, field="task")
    max_steps = validate_max_steps(max_steps)
    parent = Run.objects.only("root_id", "depth").get(pk=parent_id)
    tree_lock(root_id=parent.root_id)
    siblings = list(
        Run.objects.filter(parent_id=parent_id).order_by("id").values_list("name", "pk")
    )
    names = ", ".join(existing for existing, _ in siblings)
    for existing, pk in siblings:
        if existing == name:
            raise InvalidInput(
                f'you already have a sub-agent named "{name}" (run {pk}); names must be '
                f"unique among your sub-agents ({names}). Pick another name.",
                field="name",
            )
    per_agent = settings.RESEARCH_MAX_SUBAGENTS_PER_AGENT
    if len(siblings) >= per_agent:
        raise LimitReached(
            f"limit reached: an agent may spawn at most {per_agent} sub-agents and you have "
            f"{len(siblings)} ({names}). Do the rest yourself or wait for them."
        )
    per_tree = settings.RESEARCH_MAX_SUBAGENTS_PER_TREE
    in_tree = Run.objects.filter(root_id=parent.root_id, parent__isnull=False).count()
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
    return subagent_create(
        parent_id=parent_id, name=name, reason=reason, task=task, max_steps=max_steps
    )
