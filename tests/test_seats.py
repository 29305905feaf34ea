"""Roots seated at their start (research.services.seats): a root started in a process whose
agent pool has a slot free is claimed in its start's transaction, and its agent starts on its
first step; otherwise it waits in the queue for a claim loop, as before."""

import pytest
from django.db import transaction

from agents.llm.scripted import reply, slow
from agents.runtime.pool import AgentPool
from research import endings, services
from research.errors import TooManyRuns
from research.models import Event, Run, RunState
from tests.conftest import wait_finished, wait_for

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def pool(settings):
    settings.RESEARCH_MAX_WORKING_ROOTS = 10
    # Far longer than any test: a root that waited in the queue for a poll would time out.
    settings.RESEARCH_CLAIM_POLL_SECONDS = 30
    pool = AgentPool(max_active=2).start()
    yield pool
    pool.shutdown(timeout=10)


def settled(pool: AgentPool, scripted_llm, alice) -> None:
    """A first research run to its end: the pool's claim loop has looked at the queue and
    found it empty, so it may seat the roots started from now on."""
    scripted_llm.script("a first research", reply("first report"))
    first = services.run_start(owner=alice, topic="a first research")
    assert wait_finished(first, timeout=10).status == "done"
    # Its run reads done a moment before its thread gives its slot back.
    wait_for(lambda: pool.active == 0, timeout=5, message="the first agent kept its slot")


def test_a_root_started_where_a_pool_has_a_slot_is_working_from_its_start(
    pool, scripted_llm, alice
):
    settled(pool, scripted_llm, alice)
    # Its first call is slow: the test reads the run while its agent is in that call.
    scripted_llm.script("seated research", slow(1, reply("the seated report")))

    run = services.run_start(owner=alice, topic="seated research")

    # Committed with the start, before its agent took a step: claimed for this pool,
    # thinking, its clock running, and the two events saying so, numbered 1 and 2.
    started = Run.objects.get(pk=run.pk)
    assert (run.status, started.status, started.state) == ("working", "working", "thinking")
    assert started.worker_id == pool.worker_id and started.started_at is not None
    events = list(Event.objects.filter(root_id=run.pk, seq__lte=2).order_by("seq"))
    assert [(event.seq, event.type) for event in events] == [(1, "run.created"), (2, "run.state")]
    assert events[0].payload["data"]["status"] == "queued"
    assert (events[1].payload["status"], events[1].payload["state"]) == ("working", "thinking")
    assert events[1].payload["started_at"] is not None
    done = wait_finished(run, timeout=10)
    assert (done.status, done.report) == ("done", "the seated report")
    timeline = RunState.objects.filter(run_id=run.pk).order_by("pk")
    assert list(timeline.values_list("state", flat=True)[:2]) == ["queued", "thinking"]
    # Its events are the tree's whole story, gapless, as a viewer replays them.
    seqs = list(Event.objects.filter(root_id=run.pk).values_list("seq", flat=True))
    assert seqs == list(range(1, len(seqs) + 1))


def test_with_no_slot_free_a_root_waits_in_the_queue_and_runs_after(pool, scripted_llm, alice):
    settled(pool, scripted_llm, alice)
    for number in (1, 2):
        scripted_llm.script(f"busy research {number}", slow(1.5, reply(f"busy report {number}")))
    scripted_llm.script("third research", reply("third report"))
    busy = [services.run_start(owner=alice, topic=f"busy research {n}") for n in (1, 2)]
    assert [run.status for run in busy] == ["working", "working"]

    third = services.run_start(owner=alice, topic="third research")

    assert third.status == "queued"  # both slots are taken: the claim loop takes it later
    assert Run.objects.get(pk=third.pk).worker_id is None
    done = wait_finished(third, timeout=15)
    assert (done.status, done.report) == ("done", "third report")


def test_a_start_that_fails_gives_its_seat_back(pool, scripted_llm, alice, settings):
    settled(pool, scripted_llm, alice)
    settings.RESEARCH_MAX_WORKING_ROOTS = 1
    scripted_llm.script("the one allowed", slow(1.5, reply("allowed report")))
    allowed = services.run_start(owner=alice, topic="the one allowed")
    assert pool.active == 1

    with pytest.raises(TooManyRuns):
        services.run_start(owner=alice, topic="one too many")

    assert pool.active == 1  # the refused start's seat went back
    assert not Run.objects.filter(topic="one too many").exists()
    assert wait_finished(allowed, timeout=10).status == "done"
    wait_for(lambda: pool.active == 0, timeout=5, message="a slot was never given back")


def test_a_start_inside_a_callers_transaction_waits_in_the_queue(pool, scripted_llm, alice):
    """Its seat could not be given back if the caller rolled back: it is queued, and the
    claim loop takes it once the caller commits."""
    settled(pool, scripted_llm, alice)
    scripted_llm.script("inside a transaction", reply("queued report"))

    with transaction.atomic():
        run = services.run_start(owner=alice, topic="inside a transaction")
        assert run.status == "queued"
        assert pool.active == 0

    done = wait_finished(run, timeout=10)
    assert (done.status, done.report) == ("done", "queued report")


def claimed_root(alice, worker_id: int, topic: str, model: str) -> Run:
    """The row a start committed for a seat: a root claimed for `worker_id` (written here:
    no start announces it, so no claim loop takes it)."""
    run = Run.objects.create(
        owner=alice,
        topic=topic,
        model=model,
        status="working",
        state="thinking",
        worker_id=worker_id,
    )
    Run.objects.filter(pk=run.pk).update(root_id=run.pk)
    return Run.objects.get(pk=run.pk)


def test_a_seat_whose_pool_went_on_under_a_new_id_ends_its_root_unrun(
    pool, scripted_llm, alice, settings
):
    """The process was declared dead and went on under a new worker id (_start_over) while
    a start it had seated committed under the old one: nobody sweeps that id any more, so
    the root ends at once, failed, and no agent runs it; its slot goes back."""
    settled(pool, scripted_llm, alice)
    assert pool.seat_root() == pool.worker_id
    run = claimed_root(alice, pool.worker_id, "seated under the old id", settings.RESEARCH_MODEL)
    pool.worker_id = services.worker_register(claims_roots=True).pk  # as _start_over does

    pool.run_seated(run)

    ended = Run.objects.get(pk=run.pk)
    assert (ended.status, ended.error) == ("failed", endings.WORKER_LOST)
    assert pool.active == 0
    assert scripted_llm.requests_for("seated under the old id") == []


def test_a_seat_whose_pool_stopped_before_its_start_committed_ends_its_root(
    pool, scripted_llm, alice, settings
):
    """The process began to stop before the start's commit handed its root over: the root
    ends at once with the stop's reason, its slot given back."""
    settled(pool, scripted_llm, alice)
    assert pool.seat_root() == pool.worker_id
    run = claimed_root(alice, pool.worker_id, "seated while stopping", settings.RESEARCH_MODEL)
    pool.shutdown(timeout=5)

    pool.run_seated(run)

    ended = Run.objects.get(pk=run.pk)
    assert (ended.status, ended.error) == ("failed", endings.SERVER_STOPPED)
    assert pool.active == 0
