"""The agent pool: bounded slots that waiting parents give back, shutdown and restart recovery."""

import os
import signal
import subprocess
import sys
import threading
import time
from datetime import datetime

import httpx
import pytest
from django.db import transaction
from django.utils import timezone

from agents.llm.scripted import call, reply, slow
from agents.runtime.pool import AgentPool
from research import services
from research.models import Run, Worker
from tests.conftest import wait_finished, wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def test_parents_waiting_on_children_never_starve_them_of_slots(scripted_llm, alice, settings):
    """Two slots, two roots that each spawn two children and wait: if a waiting parent kept
    its slot, no child could ever run and both trees would hang."""
    settings.RESEARCH_MAX_WORKING_ROOTS = 10
    for tree in ("oak", "elm"):
        scripted_llm.script(
            f"{tree} research",
            call("spawn_subagent", name="left", reason="one half", task=f"{tree} left half"),
            call("spawn_subagent", name="right", reason="other half", task=f"{tree} right half"),
            call("wait_subagents"),
            reply(f"{tree} report"),
        )
        scripted_llm.script(f"{tree} left half", reply("left done"))
        scripted_llm.script(f"{tree} right half", reply("right done"))
    pool = AgentPool(max_active=2).start()
    try:
        roots = [
            services.run_start(owner=alice, topic=f"{tree} research") for tree in ("oak", "elm")
        ]
        roots = [wait_finished(root, timeout=30) for root in roots]
    finally:
        pool.shutdown()
    for root in roots:
        assert root.status == "done", root.error
        children = Run.objects.filter(parent=root)
        assert sorted(children.values_list("status", flat=True)) == ["done", "done"]
    assert pool.active == 0


def test_a_child_the_pool_can_seat_starts_with_its_spawn_the_other_waits_its_slot(
    scripted_llm, alice
):
    """Two slots, the root holding one: of the two children of its spawn, the first is
    seated (claimed in the spawn's transaction, its claim right after the spawn's events),
    the second is queued and claims its run once the root gives its slot back to wait."""
    told_to_wait: list[datetime] = []

    def wait(messages: list[dict]):
        told_to_wait.append(timezone.now())
        return call("wait_subagents")

    scripted_llm.script(
        "fir research",
        call(
            "spawn_subagents",
            subagents=[
                {"name": "left", "reason": "one half", "task": "fir left half"},
                {"name": "right", "reason": "other half", "task": "fir right half"},
            ],
        ),
        wait,
        reply("fir report"),
    )

    def left_done(messages: list[dict]):
        # The seated child ends only once the root is told to wait: had it ended first, its
        # own slot, not the root's, would have let the other child in (a slow machine did).
        deadline = time.monotonic() + 20
        while not told_to_wait and time.monotonic() < deadline:
            time.sleep(0.01)
        return reply("left done")

    scripted_llm.script("fir left half", left_done)
    scripted_llm.script("fir right half", reply("right done"))
    pool = AgentPool(max_active=2).start()
    try:
        root = wait_finished(services.run_start(owner=alice, topic="fir research"), timeout=30)
    finally:
        pool.shutdown()
    assert root.status == "done", root.error
    left, right = Run.objects.filter(parent=root).order_by("pk")
    assert (left.status, right.status) == ("done", "done")
    events = [
        (kind, p["run"], p.get("status"), p["at"])
        for kind, p in root.events.order_by("seq").values_list("type", "payload")
    ]
    last_created = next(i for i, e in enumerate(events) if e[:2] == ("run.created", right.pk))
    spawned_at = events[last_created][3]
    after = events[last_created + 1 :]
    # Seated: claimed in the spawn's transaction, its claim published with the spawn's events.
    assert after[0] == ("run.state", left.pk, "working", spawned_at)
    (claimed,) = [i for i, event in enumerate(after) if event[1:3] == (right.pk, "working")]
    assert after[claimed][3] != spawned_at
    # The root gave its slot back only once told to wait. (Its own events of that wait may
    # commit after the claim: the writer batches them, while a claim commits at once.)
    assert datetime.fromisoformat(after[claimed][3]) > told_to_wait[0]
    assert pool.active == 0


def test_one_agent_running_python_at_a_time_still_ends_every_tree(scripted_llm, alice, settings):
    """The gate on agents running Python is given back around model calls, tools and waits:
    with room for one, parents that wait, children that read pages at once and messages all
    still end, and two agents were seen waiting on their model at the same moment."""
    settings.RESEARCH_MAX_WORKING_ROOTS = 10
    settings.RESEARCH_AGENT_CPU_SLOTS = 1
    in_model = []

    def counted(turn):
        def answer(messages):
            in_model.append(sum(1 for run in Run.objects.filter(state="thinking")))
            return slow(0.2, turn)

        return answer

    for tree in ("ash", "yew"):
        scripted_llm.script(
            f"{tree} research",
            counted(call("spawn_subagent", name="left", reason="a half", task=f"{tree} left")),
            call("spawn_subagent", name="right", reason="other half", task=f"{tree} right"),
            call("wait_subagents"),
            reply(f"{tree} report"),
        )
        scripted_llm.script(f"{tree} left", counted(call("list_siblings")), reply("left done"))
        scripted_llm.script(f"{tree} right", counted(call("list_siblings")), reply("right done"))
    pool = AgentPool(max_active=8).start()
    try:
        roots = [
            services.run_start(owner=alice, topic=f"{tree} research") for tree in ("ash", "yew")
        ]
        roots = [wait_finished(root, timeout=30) for root in roots]
    finally:
        pool.shutdown()
    assert [root.status for root in roots] == ["done", "done"]
    assert Run.objects.filter(status="done").count() == 6
    assert max(in_model) >= 2  # the gate was not held while waiting on the model


def test_runs_left_by_a_dead_process_are_marked_failed_on_start(alice, subagent_factory):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    worker = Worker.objects.create(
        hostname=os.uname().nodename, pid=dead.pid, heartbeat_at=timezone.now()
    )
    root = services.run_start(owner=alice, topic="orphaned research")
    services.run_claim(run_id=root.pk, worker_id=worker.pk)
    child = subagent_factory(root, "child")
    unclaimed = services.run_start(owner=alice, topic="never claimed yet")

    pool = AgentPool(max_active=1, claim_roots=False).start()
    pool.shutdown()

    for run in (root, child):
        run.refresh_from_db()
        assert run.status == "failed"
        assert run.error == "interrupted: the server stopped while the agent worked"
    child.refresh_from_db()
    root.refresh_from_db()
    assert child.finished_at <= root.finished_at
    unclaimed.refresh_from_db()
    assert unclaimed.status == "queued"  # a root no process took is still there to be taken


def test_sigterm_to_daphne_interrupts_every_working_agent(scripted_llm, alice, settings, tmp_path):
    from tests.conftest import start_daphne

    scripted_llm.script(
        "endless", *[slow(0.2, call("web_search", query=f"q{i}")) for i in range(200)]
    )
    server = start_daphne(settings, tmp_path)
    try:
        run = services.run_start(owner=alice, topic="An endless research", max_steps=40)
        wait_for(lambda: Run.objects.get(pk=run.pk).steps >= 1, timeout=20)
        assert httpx.get(server.url + "/v1/gb/research", timeout=5).status_code == 401
    finally:
        returncode = server.stop(signal.SIGTERM)
    run.refresh_from_db()
    assert run.status == "failed", server.output()
    assert run.error == "interrupted: the server stopped while the agent worked"
    assert returncode == 0, server.output()


def test_a_root_a_dead_process_claimed_but_never_started_goes_back_to_the_queue(alice):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    worker = Worker.objects.create(
        hostname=os.uname().nodename, pid=dead.pid, heartbeat_at=timezone.now()
    )
    claimed = services.run_start(owner=alice, topic="claimed, never started")
    assert services.root_claim(run_id=claimed.pk, worker_id=worker.pk)
    announced = []
    stop_listening = services.roots_queued.subscribe(announced.append)

    try:
        assert services.workers_sweep(dead_after_seconds=30) == 0
    finally:
        stop_listening()

    claimed.refresh_from_db()
    assert (claimed.status, claimed.worker_id) == ("queued", None)
    assert announced == [claimed.pk]  # the claim loops wake for it, not at their next poll
    assert services.root_claim_next(worker_id=worker.pk) == claimed.pk


def test_a_worker_that_stopped_heartbeating_loses_its_runs(alice, settings):
    from datetime import timedelta

    worker = Worker.objects.create(
        hostname="another-machine", pid=1, heartbeat_at=timezone.now() - timedelta(seconds=60)
    )
    run = services.run_start(owner=alice, topic="on a lost machine")
    services.run_claim(run_id=run.pk, worker_id=worker.pk)

    assert services.workers_sweep(dead_after_seconds=30) == 1

    run.refresh_from_db()
    assert run.status == "failed"
    assert run.error == "interrupted: the worker running it stopped responding"


def test_a_row_with_our_own_pid_from_before_this_process_started_is_a_dead_process(alice):
    """A restarted container often gets the same pid: its old row must not pass for alive."""
    from datetime import timedelta

    long_ago = timezone.now() - timedelta(days=1)
    worker = Worker.objects.create(
        hostname=os.uname().nodename, pid=os.getpid(), heartbeat_at=timezone.now()
    )
    Worker.objects.filter(pk=worker.pk).update(started_at=long_ago)
    run = services.run_start(owner=alice, topic="left by the previous container")
    services.run_claim(run_id=run.pk, worker_id=worker.pk)

    assert services.workers_sweep(dead_after_seconds=30) == 1
    run.refresh_from_db()
    assert run.error == "interrupted: the server stopped while the agent worked"


def test_a_queued_root_starts_as_soon_as_a_slot_frees(scripted_llm, alice, settings):
    """One slot and a claim poll far longer than the test: the second root can only start
    in time if the end of the first wakes the claim loop."""
    settings.RESEARCH_MAX_WORKING_ROOTS = 10
    settings.RESEARCH_CLAIM_POLL_SECONDS = 30
    scripted_llm.script("first in line", reply("first report"))
    scripted_llm.script("second in line", reply("second report"))
    pool = AgentPool(max_active=1).start()
    try:
        first = services.run_start(owner=alice, topic="first in line")
        second = services.run_start(owner=alice, topic="second in line")
        roots = [wait_finished(run, timeout=10) for run in (first, second)]
    finally:
        pool.shutdown()
    assert [root.status for root in roots] == ["done", "done"]


def test_an_agent_waiting_for_some_wakes_at_their_end_not_at_any_other(scripted_llm, alice):
    """A parent waits for its own sub-agents: another tree's end does not wake it (one
    condition for the whole pool woke every waiting parent at every end), the end of one it
    waits for does, at once; and one that no longer works here ends the wait before it
    starts."""
    released = threading.Event()  # the long root's model answers once the test says so

    def long_answer(messages: list) -> str:
        released.wait(30)
        return "long report"

    scripted_llm.script("the long one", long_answer)
    scripted_llm.script("the short one", reply("short report"))
    pool = AgentPool(max_active=4).start()
    woke: list[bool] = []
    try:
        long_root = services.run_start(owner=alice, topic="the long one")
        wait_for(lambda: pool.is_running(long_root.pk), timeout=5, message="never started")

        def wait() -> None:
            woke.append(pool.wait_changed(20, run_ids=[long_root.pk]))

        waiter = threading.Thread(target=wait, daemon=True)
        waiter.start()
        # The waiter waits before the other tree starts (the pool's waiters, looked at).
        wait_for(lambda: long_root.pk in pool._wakes._waiting, timeout=5, message="no wait")
        short_root = services.run_start(owner=alice, topic="the short one")
        assert wait_finished(short_root, timeout=10).status == "done"
        wait_for(lambda: not pool.is_running(short_root.pk), timeout=5, message="never left")
        time.sleep(0.3)  # a waiter woken by that end would have returned by now
        assert woke == []
        released.set()
        assert wait_finished(long_root, timeout=10).status == "done"
        waiter.join(timeout=5)
        assert woke == [True]  # woken at its end, not at the 20 s timeout
        started = time.monotonic()
        assert pool.wait_changed(20, run_ids=[long_root.pk]) is True
        assert time.monotonic() - started < 1
    finally:
        released.set()
        pool.shutdown()


def test_roots_queued_while_one_starts_are_claimed_without_waiting_for_an_end(
    scripted_llm, alice, settings
):
    """Three roots queued at once wake the claim loop once. It claims the first and stops
    while that one starts; the start must wake it again, or the other two wait for an
    agent's end (their model answers after 5 s) or the next poll (30 s)."""
    settings.RESEARCH_MAX_WORKING_ROOTS = 10
    settings.RESEARCH_CLAIM_POLL_SECONDS = 30
    topics = [f"slow start {number}" for number in range(3)]
    for topic in topics:
        scripted_llm.script(topic, slow(5, reply("late report")))
    pool = AgentPool(max_active=4).start()
    try:
        with transaction.atomic():  # their announcements go out together, at the commit
            roots = [services.run_start(owner=alice, topic=topic) for topic in topics]
        wait_for(
            lambda: len(scripted_llm.requests) == len(topics),
            timeout=3,
            message="a queued root waited for a wake that never came",
        )
        claimed = Run.objects.filter(pk__in=[root.pk for root in roots], status="working")
        assert claimed.count() == len(topics)
    finally:
        pool.shutdown()
