"""The agent's hot path: a model call and a tool call, each recorded in one transaction."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from research import selectors, services
from research.models import Event, LLMCall, Run, RunState, Step
from research.services import NextState


def _events(root: Run) -> list[Event]:
    return list(Event.objects.filter(root=root).order_by("seq"))


@pytest.fixture
def working_child(tree_factory):
    root = tree_factory(children=("tides",), grandchildren=())
    child = root.children.get(name="tides")
    services.run_claim(run_id=root.pk)
    services.run_claim(run_id=child.pk)
    return child


@pytest.mark.django_db
def test_a_model_call_records_usage_step_and_next_state_in_one_event(working_child):
    facts = selectors.run_facts(run=working_child)
    before = _events(working_child.root)[-1].seq

    services.model_call_record(
        facts=facts,
        input_tokens=1000,
        output_tokens=200,
        latency_ms=12,
        step={"kind": "model", "input": {"tool_calls": [["web_search", "{}"]]}, "output": ""},
        next_state=NextState("searching", "moon tides"),
    )

    child = Run.objects.get(pk=working_child.pk)
    assert (child.steps, child.state, child.input_tokens) == (1, "searching", 1000)
    assert LLMCall.objects.filter(run=child).count() == 1
    assert Step.objects.get(run=child).kind == "model"
    assert RunState.objects.filter(run=child).last().detail == "moon tides"
    # One event: the usage, carrying the state the call moved the agent to.
    (usage,) = [event for event in _events(child.root) if event.seq > before]
    assert (usage.seq, usage.type) == (before + 1, "run.usage")
    assert (usage.payload["steps"], usage.payload["input_tokens"]) == (1, 1000)
    assert (usage.payload["status"], usage.payload["state"]) == ("working", "searching")
    assert usage.payload["detail"] == "moon tides"


@pytest.mark.django_db
def test_usage_reaches_the_root_row_and_its_event_without_adding_up_the_tree(working_child):
    root = working_child.root
    facts = selectors.run_facts(run=working_child)
    services.model_call_record(facts=facts, input_tokens=1000, output_tokens=200, latency_ms=1)
    services.usage_add(run_id=root.pk, input_tokens=10, output_tokens=2, latency_ms=1)

    root.refresh_from_db()
    assert (root.tree_input_tokens, root.tree_output_tokens) == (1010, 202)
    last = _events(root)[-1].payload
    assert (last["root_tree_input_tokens"], last["root_tree_output_tokens"]) == (1010, 202)
    assert last["root_tree_cost_usd"] == f"{root.tree_cost_usd:.8f}"


@pytest.mark.django_db
def test_a_record_for_a_run_ended_meanwhile_keeps_the_usage_and_leaves_no_gap(working_child):
    facts = selectors.run_facts(run=working_child)
    services.run_finish(run_id=working_child.pk, error="interrupted: the server stopped")

    services.model_call_record(
        facts=facts,
        input_tokens=50,
        output_tokens=5,
        latency_ms=1,
        next_state=NextState("thinking"),
    )
    services.tool_call_record(
        facts=facts,
        step={"kind": "tool", "tool": "web_search", "output": "late"},
        next_state=NextState("thinking"),
    )

    child = Run.objects.get(pk=working_child.pk)
    assert (child.status, child.state, child.input_tokens) == ("failed", "ended", 50)
    assert Step.objects.filter(run=child, tool="web_search").exists()
    seqs = [event.seq for event in _events(child.root)]
    assert seqs == list(range(1, len(seqs) + 1))
    assert _events(child.root)[-1].type == "run.usage"


@pytest.mark.django_db
def test_a_model_call_and_a_tool_call_cost_a_fixed_number_of_statements(working_child):
    facts = selectors.run_facts(run=working_child)
    with CaptureQueriesContext(connection) as model_call:
        services.model_call_record(
            facts=facts,
            input_tokens=10,
            output_tokens=2,
            latency_ms=1,
            step={"kind": "model", "output": ""},
            next_state=NextState("searching", "q"),
        )
    with CaptureQueriesContext(connection) as tool_call:
        services.tool_call_record(
            facts=facts,
            step={"kind": "tool", "tool": "web_search", "output": "results"},
            next_state=NextState("thinking"),
        )

    # Seqs, the run's counters and state with the lineage roll-up (one UPDATE), then the
    # rows: ledger row, step, state row, events. Then seqs, state, and the rows: step, state
    # row, event. On PostgreSQL a record's rows go in one statement (research.sql). (pytest-
    # django's test transaction makes each `atomic` a savepoint: two statements more each.)
    one_statement = connection.vendor == "postgresql"
    assert len(model_call) == 2 + (1 if one_statement else 4) + 2
    assert len(tool_call) == 2 + (1 if one_statement else 3) + 2


@pytest.mark.django_db
def test_an_agents_end_costs_three_statements_and_a_paused_runs_two_more(working_child):
    with CaptureQueriesContext(connection) as ended:
        assert services.run_finish(run_id=working_child.pk, report="tides turn twice a day")
    Run.objects.filter(pk=working_child.root_id).update(status="paused", paused_at=timezone.now())
    with CaptureQueriesContext(connection) as paused:
        assert services.run_finish(run_id=working_child.root_id, error="cancelled by the analyst")

    # The tree lock and the events' numbers, the run ended and read back in one UPDATE, then
    # its rows (its state, its events). For a paused run (rare: a cancel during its review)
    # that UPDATE finds nothing, and the run is read, then written: two more.
    # (The test transaction makes the finish's `atomic` a savepoint: two statements more.)
    one_statement = connection.vendor == "postgresql"
    rows = 1 if one_statement else 2
    assert len(ended) == 2 + 2 + rows
    assert len(paused) == 2 + 4 + rows
    child = Run.objects.get(pk=working_child.pk)
    assert (child.status, child.state, child.report) == ("done", "ended", "tides turn twice a day")
    finished = Event.objects.get(type="run.finished", payload__run=child.pk)
    assert finished.payload["status"] == "done" and finished.payload["tool_calls"] == 0
