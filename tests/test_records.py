"""An agent's records on their way (agents.loop.records): the agent goes on to its next
model call while its records wait for the database, and waits for them where it must."""

import threading
import time
from contextlib import nullcontext
from functools import partial

import pytest
from django.db import connection

from agents.llm.scripted import call, reply
from agents.loop.lifetime import run_agent
from agents.loop.records import Records
from agents.runtime.context import CancelToken
from research import selectors, services
from research.models import Event, Plan, Run, RunState, Step
from research.services import step_writer
from tests.conftest import wait_for
from tests.test_writer import held

pytestmark = pytest.mark.django_db(transaction=True)

LIFETIME = "agents.loop.lifetime"


@pytest.fixture
def held_writer(settings):
    """The process's writer, held busy by a record that waits for `release()`: what agents
    hand over meanwhile queues, uncommitted."""
    settings.SEARCH_PROVIDER = ""  # web_search answers at once, without a query
    owner = object()
    step_writer.start(owner)
    release = held(step_writer)
    yield release
    release()
    step_writer.stop(owner)


def _agent_in_thread(run: Run) -> threading.Thread:
    def work() -> None:
        try:
            services.run_claim(run_id=run.pk)
            run_agent(run_id=run.pk, token=CancelToken(run.pk), pool=None)
        finally:
            connection.close()

    thread = threading.Thread(target=work)
    thread.start()
    return thread


def test_an_agent_goes_on_to_its_next_model_call_while_its_records_wait(
    held_writer, scripted_llm, run_factory
):
    run = run_factory(topic="records on their way")
    searches = [call("web_search", query=f"query {number}") for number in range(3)]
    scripted_llm.script("records on their way", *searches, reply("The report."))

    agent = _agent_in_thread(run)
    # Every model call is made although none of the steps before it is committed yet.
    wait_for(lambda: len(scripted_llm.requests_for("records on their way")) == 4)
    assert Run.objects.get(pk=run.pk).steps == 0
    assert not Step.objects.filter(run_id=run.pk).exists()
    held_writer()
    agent.join(20)

    run.refresh_from_db()
    assert (run.status, run.steps, run.report) == ("done", 4, "The report.")
    kinds = list(Step.objects.filter(run_id=run.pk).order_by("id").values_list("kind", "tool"))
    assert kinds == [("model", ""), ("tool", "web_search")] * 3 + [("model", "")]
    events = list(Event.objects.filter(root_id=run.pk).order_by("seq"))
    assert [event.seq for event in events] == list(range(1, len(events) + 1))
    assert events[-1].type == "run.finished"  # its end follows every record
    assert events[-2].type == "run.report"
    # Each search finished before its call's record was written: they went in one batch, and
    # each call's usage event shows the state its search moved the agent to (thinking, its
    # next call), with no run.state of its own. The timeline keeps every state.
    moves = [(event.type, event.payload.get("state")) for event in events]
    moves = [(kind, state) for kind, state in moves if kind in ("run.state", "run.usage")]
    assert moves == [("run.state", "thinking")] + [("run.usage", "thinking")] * 3 + [
        ("run.usage", None)
    ]
    timeline = list(RunState.objects.filter(run=run).values_list("state", flat=True))
    # Claimed thinking (its first act is a model call), never recorded twice in a row; its
    # report and its checked citations come with its finish, with no state between.
    assert timeline == ["queued", *["thinking", "searching"] * 3, "thinking", "ended"]


def test_a_tool_that_acts_writes_after_the_agents_records(held_writer, scripted_llm, run_factory):
    """The lead's plan (a tool that acts and writes) waits for the model call's record that
    asked for it; its event follows that call's."""
    run = run_factory(topic="acting waits")
    scripted_llm.script("acting waits", call("write_plan", items=["the one item"]), reply("Done."))

    agent = _agent_in_thread(run)
    wait_for(lambda: len(scripted_llm.requests_for("acting waits")) == 1)
    agent.join(0.5)  # the plan's write waits for the first record, which the writer holds
    assert agent.is_alive()
    assert len(scripted_llm.requests_for("acting waits")) == 1
    assert not Plan.objects.filter(root_id=run.pk).exists()
    held_writer()
    agent.join(20)

    run.refresh_from_db()
    assert (run.status, run.steps) == ("done", 2)
    assert Plan.objects.get(root_id=run.pk).items == ["the one item"]
    types = list(
        Event.objects.filter(root_id=run.pk).order_by("seq").values_list("type", flat=True)
    )
    assert types.index("run.usage") < types.index("run.plan")


def test_a_tool_that_acts_and_writes_nothing_does_not_wait_for_the_agents_records(
    held_writer, scripted_llm, run_factory
):
    """cancel_subagent of a name that is no sub-agent reads and refuses: the agent's next
    model call goes while its records still wait for the writer."""
    run = run_factory(topic="refusing goes on")
    scripted_llm.script("refusing goes on", call("cancel_subagent", name="nobody"), reply("Done."))

    agent = _agent_in_thread(run)
    wait_for(lambda: len(scripted_llm.requests_for("refusing goes on")) == 2)
    assert Run.objects.get(pk=run.pk).steps == 0  # nothing committed yet
    held_writer()
    agent.join(20)

    run.refresh_from_db()
    assert (run.status, run.steps) == ("done", 2)
    [result] = scripted_llm.tool_results("refusing goes on", name="cancel_subagent")
    assert result["content"] == "error: you have no sub-agents to cancel"


def _sub_agent(run_factory, subagent_factory, task: str) -> Run:
    """A sub-agent whose lead is working: its agent is run alone (run_agent, no pool)."""
    root = run_factory(topic=f"the lead of: {task}")
    services.run_claim(run_id=root.pk)
    return subagent_factory(root, "facet", topic=task)


def test_an_agents_end_goes_in_the_batch_of_its_last_records(
    held_writer, scripted_llm, run_factory, subagent_factory
):
    """Its report's model call and its end commit together: the end is handed over behind
    the records, not after waiting for them (one commit, not two one after the other)."""
    child = _sub_agent(run_factory, subagent_factory, "ending with its records")
    scripted_llm.script(
        "ending with its records", call("web_search", query="one"), reply("The facet's report.")
    )

    agent = _agent_in_thread(child)
    # Two model calls, the search's record and the end: all queued behind the held record.
    wait_for(lambda: step_writer.queued() == 4, message="the end never queued")
    batches, retried = step_writer.batches, step_writer.retried
    held_writer()
    agent.join(20)

    assert (step_writer.batches, step_writer.retried) == (batches + 1, retried)
    child.refresh_from_db()
    assert (child.status, child.state, child.steps) == ("done", "ended", 2)
    assert child.report == "The facet's report."
    events = list(Event.objects.filter(payload__run=child.pk).order_by("seq"))
    assert [event.type for event in events][-3:] == ["run.usage", "run.report", "run.finished"]
    assert events[-1].payload["tool_calls"] == 1  # its search's step, written alongside
    assert events[-1].payload["input_tokens"] == child.input_tokens > 0


def test_an_end_behind_a_record_the_database_refuses_is_not_written(
    refused_step, scripted_llm, run_factory, subagent_factory, settings
):
    """The record of its report's model call fails: the agent fails as it did when it waited
    for its records before its end. The end handed over behind that record is not written;
    the run ends failed, with the database's error, once."""
    owner = object()
    step_writer.start(owner)
    try:
        child = _sub_agent(run_factory, subagent_factory, "a refused report")
        scripted_llm.script("a refused report", call("web_search", query="one"), reply("REFUSED"))
        _agent_in_thread(child).join(20)
    finally:
        step_writer.stop(owner)

    child.refresh_from_db()
    assert (child.status, child.state, child.report) == ("failed", "ended", "")
    assert child.error.startswith("internal error: ") and "this step is refused" in child.error
    assert child.steps == 1  # the refused call's usage went with its record
    types = list(
        Event.objects.filter(payload__run=child.pk).order_by("seq").values_list("type", flat=True)
    )
    assert types.count("run.finished") == 1 and "run.report" not in types
    assert types[-1] == "run.finished"


def test_an_end_behind_a_record_already_failed_is_not_handed_over(run_factory, subagent_factory):
    """A record that failed before the agent's end: the end is not handed over at all (the
    writer would only fail it), and the record's error is the agent's."""
    owner = object()
    step_writer.start(owner)
    try:
        child = _sub_agent(run_factory, subagent_factory, "an end after a failure")
        services.run_claim(run_id=child.pk)
        facts = selectors.run_facts(run=Run.objects.get(pk=child.pk))
        records = Records(nullcontext)
        step = {"kind": "tool", "tool": "web_search", "input": {"q": object()}, "output": ""}
        records.hand_over(
            "recording a tool call", partial(services.tool_call_record, facts=facts, step=step)
        )
        wait_for(lambda: step_writer.queued() == 0 and records._unwritten[0][1].done.is_set())
        handed = step_writer.records

        with pytest.raises(TypeError):
            records.end(partial(services.run_end_record, facts=facts, report="The report."))

        # Nothing more reaches the writer (which lingers at most a few milliseconds).
        time.sleep(0.2)
        assert (step_writer.queued(), step_writer.records) == (0, handed)
    finally:
        step_writer.stop(owner)
    assert Run.objects.get(pk=child.pk).status == "working"


def test_an_agent_whose_run_is_deleted_meanwhile_ends_without_an_error(
    held_writer, scripted_llm, run_factory, subagent_factory, caplog
):
    """Its run deleted while its last records wait: they fail, and so does its end behind
    them, and the agent says the run was deleted (as when it waited for them), not that it
    failed."""
    child = _sub_agent(run_factory, subagent_factory, "a deleted run")
    scripted_llm.script("a deleted run", call("web_search", query="one"), reply("The report."))

    agent = _agent_in_thread(child)
    wait_for(lambda: step_writer.queued() == 4, message="the end never queued")
    Run.objects.filter(pk=child.pk).delete()
    with caplog.at_level("INFO", logger=LIFETIME):
        held_writer()
        agent.join(20)

    lines = [
        (r.levelname, r.getMessage()) for r in caplog.records if r.name == "agents.loop.lifetime"
    ]
    assert ("INFO", f"run {child.pk} was deleted while its agent worked") in lines
    assert not [line for line in lines if line[0] == "ERROR"]
    assert not Run.objects.filter(pk=child.pk).exists()


def _thinking(facts, records: Records, detail: str, *, held: bool = False) -> None:
    """Hand over a state record ("thinking", `detail`), as Agent._show does."""
    state = partial(services.state_record, facts=facts, state="thinking", detail=detail)
    records.hand_over(f"recording {detail}", state, held=held)


def _shown(run_id: int) -> list[str]:
    """The details of the run's "thinking" states, in the order they were written."""
    rows = RunState.objects.filter(run_id=run_id, state="thinking").order_by("id")
    return [detail for detail in rows.values_list("detail", flat=True) if detail]


def test_a_held_record_waits_for_its_release_or_the_agents_next_move(run_factory):
    """A root's draft is held back so that its verifier's spawn goes right behind it
    (agents.loop.review.verify): nothing is written until it is released, the wait for the
    records before the round leaves it held, and any other move (a hand-over, a wait, a
    tool that acts, a round, the end) hands it over first, so the records keep their order.
    Without a writer, each record is written as it is handed."""
    run = run_factory(topic="held records")
    services.run_claim(run_id=run.pk)
    facts = selectors.run_facts(run=Run.objects.get(pk=run.pk))
    records = Records(nullcontext)

    _thinking(facts, records, "before the round")
    records.round_begins()
    _thinking(facts, records, "the draft", held=True)
    records.written(before_round=True)
    assert _shown(run.pk) == ["before the round"]
    assert records.release() is not None and records.release() is None
    assert _shown(run.pk) == ["before the round", "the draft"]

    def a_tool_that_acts() -> None:
        with records.writes_after():
            pass

    for move in (
        lambda: _thinking(facts, records, "the next one"),
        records.written,
        records.round_begins,
        a_tool_that_acts,
    ):
        _thinking(facts, records, "held", held=True)
        before = len(_shown(run.pk))
        move()
        assert _shown(run.pk)[before] == "held"
    _thinking(facts, records, "held at the end", held=True)
    ended = records.end(partial(services.run_end_record, facts=facts, report="The report."))
    assert ended.wait() is True
    assert _shown(run.pk)[-1] == "held at the end"
    timeline = RunState.objects.filter(run_id=run.pk).order_by("id")
    assert list(timeline.values_list("state", flat=True))[-2:] == ["thinking", "ended"]


def test_the_wait_for_the_records_before_a_round_leaves_the_rounds_own(held_writer, run_factory):
    """With the writer busy, a root's wait before its review waits for the records of the
    rounds before its draft, and returns once they are written, its held draft still not
    handed over: it goes with the verifier's spawn."""
    run = run_factory(topic="records before the round")
    services.run_claim(run_id=run.pk)
    facts = selectors.run_facts(run=Run.objects.get(pk=run.pk))
    records = Records(nullcontext)
    _thinking(facts, records, "before the round")  # queued behind the busy writer
    records.round_begins()
    _thinking(facts, records, "the draft", held=True)

    waiting = threading.Thread(target=records.written, kwargs={"before_round": True})
    waiting.start()
    waiting.join(0.3)
    assert waiting.is_alive(), "it did not wait for the record before the round"
    held_writer()  # the writer goes on
    waiting.join(5)
    assert not waiting.is_alive()
    assert _shown(run.pk) == ["before the round"]
    assert step_writer.queued() == 0  # the draft never reached the writer

    records.release().wait()
    assert _shown(run.pk) == ["before the round", "the draft"]
