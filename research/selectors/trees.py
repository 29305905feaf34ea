"""Reads of a whole tree or subtree: the snapshot a page starts from, one agent's panel, and
the usage, transcript and timeline of a subtree (the terminal's show and export)."""

from dataclasses import dataclass
from decimal import Decimal
from functools import cache
from typing import Any

from django.db.models import Count, QuerySet, Sum

from research.events.payloads import message_fields, run_fields
from research.models import ACTIVE_STATUSES, Citation, LLMCall, Message, Run, RunState, Step
from research.selectors.citations import citations_for
from research.selectors.runs import run_messages, run_states, run_subtree
from research.sql import Instances, one

# The transcript panel shows the latest steps; a long run's first ones are on the API.
TRANSCRIPT_LIMIT = 200


def tree_runs(*, root_id: int) -> list[dict[str, Any]]:
    """Every run of the tree as run.created describes it, plus the detail of its state."""
    runs = _tree_runs().all(_tree_runs_sql(), [root_id])
    return [{**run_fields(run, whole_topic=False), "detail": run.detail or ""} for run in runs]


def tree_snapshot(*, root: Run) -> dict[str, Any]:
    """All runs and messages of the tree and the number of the last event they include.

    The number is read first: rows read afterwards may already hold later changes, whose
    events the browser then applies again. Events carry absolute values, so that is harmless,
    while the opposite order could hide a change behind a number the browser skips.

    Every page load and every socket's (re)connection reads it: its statements are built
    once, not by the ORM, whose compiling was three quarters of its 3.4 ms of CPU for a tree
    of six (issue 25, round fourteen).
    """
    (seq,) = one(_SEQ_SQL, [root.pk])
    messages = _tree_messages().all(_tree_messages_sql(), [root.pk])
    return {
        "type": "snapshot",
        "root": root.pk,
        "seq": seq,
        "runs": tree_runs(root_id=root.pk),
        "messages": [
            message_fields(message, from_name=message.from_name, to_name=message.to_name)
            for message in messages
        ],
    }


_RUNS, _STATES, _MESSAGES = Run._meta.db_table, RunState._meta.db_table, Message._meta.db_table
_SEQ_SQL = f"SELECT event_seq FROM {_RUNS} WHERE id = %s"


@cache
def _tree_runs() -> Instances:
    return Instances(Run, alias="r", extra=["detail"])


@cache
def _tree_runs_sql() -> str:
    # The detail of each run's latest state, as the page shows it beside the state.
    detail = f"SELECT s.detail FROM {_STATES} s WHERE s.run_id = r.id ORDER BY s.id DESC LIMIT 1"
    return (
        f"SELECT {_tree_runs().columns}, ({detail}) FROM {_RUNS} r "
        "WHERE r.root_id = %s ORDER BY r.depth, r.id"
    )


@cache
def _tree_messages() -> Instances:
    return Instances(Message, alias="m", extra=["from_name", "to_name"])


@cache
def _tree_messages_sql() -> str:
    # Every message of the tree, the analyst's notes (no sending run) included, as
    # selectors.run_messages reads a root's.
    return (
        f"SELECT {_tree_messages().columns}, f.name, t.name FROM {_MESSAGES} m "
        f"JOIN {_RUNS} t ON t.id = m.to_run_id LEFT JOIN {_RUNS} f ON f.id = m.from_run_id "
        "WHERE t.root_id = %s ORDER BY m.id"
    )


@dataclass
class AgentPanel:
    run: Run
    states: list[RunState]
    steps: list[Step]
    steps_total: int
    messages: list[Message]
    citations: list[Citation]


def agent_panel(*, run: Run) -> AgentPanel:
    steps = Step.objects.filter(run=run).order_by("-id")
    return AgentPanel(
        run=run,
        states=list(run_states(run=run)),
        steps=list(reversed(steps[:TRANSCRIPT_LIMIT])),
        steps_total=steps.count(),
        messages=list(run_messages(run=run)),
        citations=list(citations_for(run_id=run.pk)),
    )


# --- A subtree, for the terminal: each takes a run already scoped to its owner -------------


def subtree_runs(*, run: Run) -> list[Run]:
    return list(run_subtree(run=run))


def subtree_active(*, run: Run) -> bool:
    return run_subtree(run=run).filter(status__in=ACTIVE_STATUSES).exists()


def subtree_llm_calls(*, run: Run) -> QuerySet[LLMCall]:
    return LLMCall.objects.filter(run__in=run_subtree(run=run)).order_by("id")


def subtree_usage_by_model(*, run: Run) -> list[dict]:
    """One row per model of the subtree: calls, tokens and cost from the ledger."""
    rows = (
        subtree_llm_calls(run=run)
        .order_by()
        .values("model")
        .annotate(
            calls=Count("id"),
            input_tokens=Sum("input_tokens"),
            output_tokens=Sum("output_tokens"),
            cost_usd=Sum("cost_usd"),
        )
        .order_by("model")
    )
    return [{**row, "cost_usd": row["cost_usd"] or Decimal(0)} for row in rows]


def subtree_steps(*, run: Run) -> QuerySet[Step]:
    return Step.objects.filter(run__in=run_subtree(run=run)).order_by("id")


def subtree_states(*, run: Run) -> QuerySet[RunState]:
    return RunState.objects.filter(run__in=run_subtree(run=run)).order_by("id")
