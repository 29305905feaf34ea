"""An agent's end in the writer's batch (services.run_end_record): agents ending together are
one transaction, and each run ends exactly as run_finish ends it: its row, its last state,
its report's citations and its events."""

import threading
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from research import services
from research.models import Citation, Event, Run, RunState, Status, Step
from tests.conftest import wait_for
from tests.test_writer import (  # noqa: F401 (the fixtures agents and writer)
    _model_call,
    _one_step,
    _together,
    _tool_call,
    agents,
    held,
    writer,
)

pytestmark = pytest.mark.django_db(transaction=True)

REPORT = "Findings, as [the survey](https://example.org/survey) says."
# What differs between two ends made at two moments, or of two runs.
_OF_THE_MOMENT = {"run", "seq", "at", "finished_at", "duration_seconds"}


def _end(facts, **ending) -> bool:
    citations = services.citations_checked(
        run_id=facts.run_id, root_id=facts.root_id, report=ending.get("report", "")
    )
    return services.run_end_record(facts=facts, citations=citations, **ending)


def _ending_events(run_id: int) -> list[dict]:
    """The run's report and finish events, without what differs from one end to another."""
    events = Event.objects.filter(payload__run=run_id, type__in=["run.report", "run.finished"])
    return [
        {key: value for key, value in event.payload.items() if key not in _OF_THE_MOMENT}
        for event in events.order_by("seq")
    ]


def test_agents_ending_together_end_in_one_batch_as_run_finish_ends_them(writer, agents):  # noqa: F811
    alone, together = agents[0], agents[1:]
    for facts in agents:
        _one_step(facts)
    services.run_finish(
        run_id=alone.run_id,
        report=REPORT,
        citations=services.citations_checked(
            run_id=alone.run_id, root_id=alone.root_id, report=REPORT
        ),
    )
    retried = writer.retried

    results = {}

    def end(facts) -> None:
        results[facts.run_id] = _end(facts, report=REPORT)

    errors = _together(writer, [lambda facts=facts: end(facts) for facts in together])

    assert errors == {}
    assert writer.retried == retried  # no end fell back to a transaction of its own
    assert set(results.values()) == {True}
    expected = _ending_events(alone.run_id)
    assert [event["type"] for event in expected] == ["run.report", "run.finished"]
    assert expected[1]["tool_calls"] == 1 and expected[1]["input_tokens"] == 100
    for facts in together:
        run = Run.objects.get(pk=facts.run_id)
        assert (run.status, run.state, run.report) == ("done", "ended", REPORT)
        assert run.finished_at is not None
        last = RunState.objects.filter(run_id=facts.run_id).order_by("id").last()
        assert (last.state, last.at) == ("ended", run.finished_at)
        cited = Citation.objects.get(run_id=facts.run_id)
        assert (cited.url, cited.verified) == ("https://example.org/survey", False)
        assert _ending_events(facts.run_id) == expected
        finished = Event.objects.get(payload__run=facts.run_id, type="run.finished").payload
        assert finished["finished_at"] == run.finished_at.isoformat().replace("+00:00", "Z")
    _numbers_gapless(agents)


def _numbers_gapless(runs) -> None:
    """Each tree's events numbered 1, 2, ... and its counter at the last: no number given
    twice, none reserved and left unused."""
    for root_id in {facts.root_id for facts in runs}:
        seqs = list(Event.objects.filter(root_id=root_id).order_by("seq").values_list("seq"))
        assert [seq for (seq,) in seqs] == list(range(1, len(seqs) + 1))
        assert Run.objects.get(pk=root_id).event_seq == len(seqs)


def test_an_end_the_batch_cannot_write_goes_through_run_finish_which_decides(writer, agents):  # noqa: F811
    """A run paused for its plan ends (a cancel), its pause counted; a run a sweep ended keeps
    its end; the others of the batch end as they would have."""
    paused, swept, others = agents[0], agents[1], agents[2:]
    Run.objects.filter(pk=paused.run_id).update(
        status=Status.PAUSED, paused_at=timezone.now() - timedelta(seconds=30)
    )
    services.run_finish(run_id=swept.run_id, error="interrupted: the server stopped")
    retried = writer.retried
    results = {}

    def end(facts, **ending) -> None:
        results[facts.run_id] = _end(facts, **ending)

    errors = _together(
        writer,
        [
            lambda: end(paused, error="cancelled by the user"),
            lambda: end(swept, report=REPORT),
            *[lambda facts=facts: end(facts, report=REPORT) for facts in others],
        ],
    )

    assert errors == {}
    assert writer.retried > retried  # the batch was written again, record by record
    assert results == {paused.run_id: True, swept.run_id: False} | {
        facts.run_id: True for facts in others
    }
    run = Run.objects.get(pk=paused.run_id)
    assert (run.status, run.error, run.paused_at) == ("failed", "cancelled by the user", None)
    assert run.paused_seconds >= 30
    run = Run.objects.get(pk=swept.run_id)
    assert (run.status, run.report, run.error) == ("failed", "", "interrupted: the server stopped")
    assert not Citation.objects.filter(run_id=swept.run_id).exists()
    assert Event.objects.filter(payload__run=swept.run_id, type="run.finished").count() == 1
    for facts in others:
        assert Run.objects.get(pk=facts.run_id).status == "done"
        assert [event["type"] for event in _ending_events(facts.run_id)] == [
            "run.report",
            "run.finished",
        ]
    _numbers_gapless(agents)


def test_an_end_behind_its_own_unwritten_records_counts_them_and_nothing_follows_it(
    writer,  # noqa: F811
    agents,  # noqa: F811
):
    """An end in the same batch as its run's tool step, and a state handed over after it:
    the batch goes record by record for the state that follows the end. The step is counted
    (its row written before the end), and the late state is not recorded."""
    facts, other = agents[1], agents[2]
    retried = writer.retried
    release = held(writer)
    try:
        handed = [
            _tool_call(facts, wait=False),
            services.run_end_record(facts=facts, report=REPORT, wait=False),
            services.state_record(facts=facts, state="writing", wait=False),
            _tool_call(other, wait=False),
        ]
        assert writer.queued() == len(handed)
    finally:
        release()
    results = [pending.wait() for pending in handed]

    assert results[1] is True
    assert writer.retried > retried
    run = Run.objects.get(pk=facts.run_id)
    assert (run.status, run.state) == ("done", "ended")
    finished = Event.objects.get(payload__run=facts.run_id, type="run.finished").payload
    assert finished["tool_calls"] == 1
    last = Event.objects.filter(payload__run=facts.run_id).order_by("seq").last().payload
    assert last["type"] == "run.finished"
    assert RunState.objects.filter(run_id=facts.run_id).order_by("id").last().state == "ended"
    assert Step.objects.filter(run_id=other.run_id, kind="tool").count() == 1
    _numbers_gapless(agents)


def test_without_a_writer_an_end_is_written_at_once(agents):  # noqa: F811
    facts = agents[1]
    assert services.step_writer.thread is None

    assert _end(facts, report=REPORT) is True
    assert _end(facts, error="too late") is False

    run = Run.objects.get(pk=facts.run_id)
    assert (run.status, run.report, run.error) == ("done", REPORT, "")


def test_an_end_after_its_last_records_is_written_in_their_batch_counting_them(writer, agents):  # noqa: F811
    facts = agents[1]
    _one_step(facts)  # a tool step written before
    retried = writer.retried
    release = held(writer)
    try:
        records = (_tool_call(facts, wait=False), _model_call(facts, wait=False))
        ended = services.run_end_record(facts=facts, report=REPORT, wait=False, after=records)
        batches = writer.batches
    finally:
        release()

    assert ended.wait() is True
    assert (writer.batches, writer.retried) == (batches + 1, retried)
    run = Run.objects.get(pk=facts.run_id)
    assert (run.status, run.state, run.steps) == ("done", "ended", 2)
    events = [event.payload for event in Event.objects.filter(payload__run=facts.run_id)]
    events.sort(key=lambda payload: payload["seq"])
    types = [payload["type"] for payload in events]
    assert types[-4:] == ["run.state", "run.usage", "run.report", "run.finished"]
    assert events[-1]["tool_calls"] == 2  # the one written before, and the one alongside
    assert events[-1]["input_tokens"] == 200
    assert RunState.objects.filter(run_id=facts.run_id).order_by("id").last().state == "ended"
    _numbers_gapless(agents)


def test_an_end_after_a_call_and_its_tool_in_its_batch_follows_their_one_event(writer, agents):  # noqa: F811
    """The call's usage event carries its tool's state (step_batch._carriers); the end that
    follows them in the batch counts the tool and comes right after that one event."""
    facts = agents[1]
    _one_step(facts)  # a tool step written before
    release = held(writer)
    try:
        records = (_model_call(facts, wait=False), _tool_call(facts, wait=False))
        ended = services.run_end_record(facts=facts, report=REPORT, wait=False, after=records)
        writer.largest, retried = 0, writer.retried
    finally:
        release()

    assert ended.wait() is True
    assert (writer.largest, writer.retried) == (3, retried)  # the three in one transaction
    events = [event.payload for event in Event.objects.filter(payload__run=facts.run_id)]
    events.sort(key=lambda payload: payload["seq"])
    assert [(payload["type"], payload.get("state")) for payload in events[-4:]] == [
        ("run.state", "thinking"),  # the tool written before
        ("run.usage", "thinking"),  # the call, carrying its tool's state
        ("run.report", None),
        ("run.finished", "ended"),
    ]
    assert events[-1]["tool_calls"] == 2
    timeline = RunState.objects.filter(run_id=facts.run_id).order_by("id")
    assert list(timeline.values_list("state", flat=True))[-3:] == ["searching", "thinking", "ended"]
    _numbers_gapless(agents)


@pytest.mark.parametrize("where", ["in its batch", "in an earlier batch"])
def test_an_end_after_a_record_that_failed_is_not_written(writer, agents, where):  # noqa: F811
    """The end fails with its record's error, unwritten, and the batch's other records are
    written: together when the record failed in an earlier batch (one publish for their
    tree, at one time), record by record when it fails in theirs."""
    facts, others = agents[1], (agents[2], agents[0])  # one tree
    if where == "in an earlier batch":
        refused = _tool_call(facts, wait=False, query=object())  # not JSON: it fails alone
        with pytest.raises(TypeError):
            refused.wait()
    release = held(writer)
    try:
        if where == "in its batch":
            refused = _tool_call(facts, wait=False, query=object())
        ended = services.run_end_record(facts=facts, report=REPORT, wait=False, after=(refused,))
        written = [_tool_call(other, wait=False) for other in others]
    finally:
        release()

    with pytest.raises(TypeError) as failed:
        ended.wait()
    assert failed.value is refused.error
    for pending in written:  # the batch's other agents are written
        pending.wait()
    run = Run.objects.get(pk=facts.run_id)
    assert (run.status, run.report) == ("working", "")
    assert not Event.objects.filter(payload__run=facts.run_id, type="run.finished").exists()
    for other in others:
        assert Step.objects.filter(run_id=other.run_id, kind="tool").count() == 1
    times = {
        Event.objects.filter(payload__run=other.run_id).order_by("seq").last().payload["at"]
        for other in others
    }
    assert len(times) == (1 if where == "in an earlier batch" else 2)
    _numbers_gapless(agents)


def test_an_end_handed_over_while_the_writer_stops_is_written_after_its_records(agents):  # noqa: F811
    """The writer stops with a record still queued; an end handed over behind that record
    meanwhile is written inline (the writer's thread is gone from the queue's view), but only
    once the stopping writer has written the record: its tool step is counted, and the run's
    last event is its finish."""
    facts = agents[1]
    owner = object()
    services.step_writer.start(owner)
    release = held(services.step_writer)
    record = _tool_call(facts, wait=False)
    stopping = threading.Thread(target=services.step_writer.stop, args=(owner,))
    stopping.start()
    wait_for(lambda: services.step_writer.thread is None, message="the writer never stopped")
    ended = {}

    def end() -> None:
        try:
            ended["pending"] = services.run_end_record(
                facts=facts, report=REPORT, wait=False, after=(record,)
            )
        finally:
            connection.close()

    ending = threading.Thread(target=end)
    ending.start()
    ending.join(0.5)
    try:
        assert ending.is_alive()  # it waits for the record the stopping writer holds
    finally:
        release()
        ending.join(20)
        stopping.join(20)

    assert ended["pending"].wait() is True
    events = list(Event.objects.filter(root_id=facts.root_id).order_by("seq"))
    mine = [event.payload for event in events if event.payload["run"] == facts.run_id]
    assert [payload["type"] for payload in mine][-3:] == ["run.state", "run.report", "run.finished"]
    assert mine[-1]["tool_calls"] == 1
    _numbers_gapless(agents)
