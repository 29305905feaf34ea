"""Usage and transcript: the ledger row of each model call, and each step the agent took."""

from decimal import Decimal
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import F

from research import pricing
from research.events import RunUsage, publish, tree_lock
from research.models import LLMCall, Run, Step


@transaction.atomic
def usage_add(*, run_id: int, input_tokens: int, output_tokens: int, latency_ms: int) -> Decimal:
    """Record one model call: a ledger row, the run's steps, tokens and cost, and the cost
    rolled up on the run and every ancestor (tree_cost_usd). Returns the call's cost."""
    run = Run.objects.select_related("parent").get(pk=run_id)
    tree_lock(root_id=run.root_id)
    cost = pricing.cost(run.model, input_tokens, output_tokens)
    LLMCall.objects.create(
        run=run,
        parent_run_id=run.parent_id,
        depth=run.depth,
        model=run.model,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        cost_usd=cost,
        latency_ms=latency_ms,
    )
    Run.objects.filter(pk=run_id).update(
        steps=F("steps") + 1,
        input_tokens=F("input_tokens") + input_tokens,
        output_tokens=F("output_tokens") + output_tokens,
        cost_usd=F("cost_usd") + cost,
    )
    Run.objects.filter(pk__in=_lineage(run)).update(tree_cost_usd=F("tree_cost_usd") + cost)
    run = Run.objects.only(
        "steps", "input_tokens", "output_tokens", "cost_usd", "tree_cost_usd", "root_id"
    ).get(pk=run_id)
    root_cost, root_in, root_out = _tree_totals(run.root_id)
    publish(
        root_id=run.root_id,
        run_id=run_id,
        payload=RunUsage(
            steps=run.steps,
            input_tokens=run.input_tokens,
            output_tokens=run.output_tokens,
            cost_usd=str(run.cost_usd),
            tree_cost_usd=str(run.tree_cost_usd),
            root_tree_cost_usd=str(root_cost),
            root_tree_input_tokens=root_in,
            root_tree_output_tokens=root_out,
        ),
    )
    return cost


def _lineage(run: Run) -> list[int]:
    """The run and every ancestor up to its root. The parent came with the run; deeper
    trees (RESEARCH_MAX_SUBAGENT_DEPTH above 2) cost one query per further generation."""
    lineage = [run.pk]
    if run.parent is None:
        return lineage
    lineage.append(run.parent.pk)
    ancestor_id = run.parent.parent_id
    while ancestor_id is not None:
        lineage.append(ancestor_id)
        if len(lineage) > run.depth:  # depth counts the ancestors: all found
            break
        ancestor_id = Run.objects.values_list("parent_id", flat=True).get(pk=ancestor_id)
    return lineage


def _tree_totals(root_id: int) -> tuple[Decimal, int, int]:
    from django.db.models import Sum

    totals = Run.objects.filter(root_id=root_id).aggregate(
        i=Sum("input_tokens"), o=Sum("output_tokens")
    )
    cost = Run.objects.filter(pk=root_id).values_list("tree_cost_usd", flat=True).get()
    return cost, totals["i"] or 0, totals["o"] or 0


def step_record(
    *,
    run_id: int,
    kind: str,
    tool: str = "",
    input: dict[str, Any] | None = None,
    output: str = "",
    is_error: bool = False,
) -> Step:
    limit = settings.RESEARCH_STEP_RESULT_MAX_CHARS
    if len(output) > limit:
        output = output[:limit] + f"\n[… truncated: {len(output) - limit} more characters]"
    return Step.objects.create(
        run_id=run_id, kind=kind, tool=tool, input=input or {}, output=output, is_error=is_error
    )
