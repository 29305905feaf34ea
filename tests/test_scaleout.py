"""Scale-out: a web process that only enqueues, `runagents` workers that run the agents.

Everything is real: daphne and the workers are separate processes on this test's PostgreSQL
database and Redis, the agents talk to the scripted LLM over HTTP, the API is called over HTTP
with a token, and the live tree is read by a websocket client with a session cookie.
"""

import signal
import subprocess
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import httpx
import pytest
from django.contrib.auth.models import User
from django.db import connections
from django.utils import timezone
from rest_framework.authtoken.models import Token

from agents.llm.scripted import call, calls, reply, slow
from agents.messages import get_messenger
from agents.runtime.pool import AgentPool
from agents.runtime.tree import PARENT_ENDED
from research import services
from research.models import ACTIVE_STATUSES, Event, Run, Worker
from tests.conftest import (
    PROJECT,
    ServerProcess,
    process_env,
    receive_until_root_finished,
    start_daphne,
    wait_finished,
    wait_for,
    watch,
)

pytestmark = [pytest.mark.processes, pytest.mark.django_db(transaction=True)]

DEAD_SECONDS = 3.0
CLUSTER_ENV = {
    "RESEARCH_AGENTS_IN_WEB": "false",
    "RESEARCH_MAX_WORKING_ROOTS": "40",
    "RESEARCH_HEARTBEAT_SECONDS": "0.5",
    "RESEARCH_WORKER_DEAD_SECONDS": str(DEAD_SECONDS),
    "RESEARCH_CLAIM_POLL_SECONDS": "0.2",
    # The workers' cancel watches look only when told (NOTIFY): a cancel that reaches a
    # worker within seconds came through research/ops/wakeups.py.
    "RESEARCH_CANCEL_WATCH_SECONDS": "60",
}


# --- processes -----------------------------------------------------------------------------


def start_worker(settings, tmp_path, *, max_agents: int = 4) -> ServerProcess:
    log = tmp_path / f"worker-{uuid.uuid4().hex[:8]}.log"
    process = subprocess.Popen(
        [sys.executable, "manage.py", "runagents", "--max-agents", str(max_agents)],
        cwd=PROJECT,
        env=process_env(settings, **CLUSTER_ENV),
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
    )
    return ServerProcess(process, url="", log=log)


def worker_id_of(worker: ServerProcess) -> int:
    """The Worker row of a started worker process, once it has registered."""

    def registered() -> int | None:
        if worker.process.poll() is not None:
            raise AssertionError(f"the worker exited:\n{worker.output()}")
        return (
            Worker.objects.filter(pid=worker.process.pid, stopped_at__isnull=True)
            .values_list("pk", flat=True)
            .first()
        )

    return wait_for(registered, timeout=30, message="the worker did not register")


def stop_all(processes: list[ServerProcess]) -> None:
    for process in processes:
        if process.process.poll() is None:
            process.process.send_signal(signal.SIGTERM)
    for process in processes:
        process.stop()


@dataclass
class Cluster:
    """The processes of one test: a daphne that only enqueues (or none) and workers."""

    settings: object
    tmp_path: object
    owner: User
    web: ServerProcess | None = None
    api: httpx.Client | None = None
    workers: list[ServerProcess] = field(default_factory=list)
    worker_ids: list[int] = field(default_factory=list)

    def start(self, *, web: bool, workers: int) -> "Cluster":
        """Start them all at once (each takes seconds to import), then wait for each."""
        started = [self.add_worker(wait=False) for _ in range(workers)]
        if web:
            self.web = start_daphne(self.settings, self.tmp_path, **CLUSTER_ENV)
            self.api = api_client(self.web.url, self.owner)
        self.worker_ids += [worker_id_of(worker) for worker in started]
        return self

    def add_worker(self, *, wait: bool = True) -> ServerProcess:
        worker = start_worker(self.settings, self.tmp_path)
        self.workers.append(worker)
        if wait:
            self.worker_ids.append(worker_id_of(worker))
        return worker

    def stop(self) -> None:
        if self.api is not None:
            self.api.close()
        stop_all([*self.workers, *([self.web] if self.web else [])])

    def worker_running(self, run: Run) -> ServerProcess:
        run.refresh_from_db()
        return self.workers[self.worker_ids.index(run.worker_id)]

    def submit(self, topic: str, **fields) -> Run:
        """Start a root through the web process's REST API."""
        response = self.api.post("/v1/gb/research", json={"topic": topic, **fields})
        assert response.status_code == 201, response.text
        return Run.objects.get(pk=response.json()["id"])

    def logs(self) -> str:
        return "\n".join(worker.output() for worker in self.workers)


def api_client(url: str, user: User) -> httpx.Client:
    token, _ = Token.objects.get_or_create(user=user)
    return httpx.Client(base_url=url, headers={"Authorization": f"Token {token.key}"}, timeout=10)


@pytest.fixture
def cluster(transactional_db, scripted_llm, settings, tmp_path, alice):
    """An empty cluster on this test's database and scripted LLM: a test starts what it
    needs; everything it started is stopped before the tables are flushed."""
    cluster = Cluster(settings, tmp_path, alice)
    try:
        yield cluster
    finally:
        cluster.stop()


# --- scripts -------------------------------------------------------------------------------


def endless(scripted_llm, task: str) -> None:
    """An agent that searches until it is stopped (one model turn every 0.2 s)."""
    scripted_llm.script(task, *[slow(0.2, call("web_search", query=f"q{i}")) for i in range(300)])


def parent_of_endless_child(scripted_llm, topic: str, child_task: str) -> None:
    scripted_llm.script(
        topic,
        call("spawn_subagent", name="digger", reason="digs deeper", task=child_task),
        call("wait_subagents"),
        reply("the parent's report"),
    )
    endless(scripted_llm, child_task)


def tree_of(root: Run) -> list[Run]:
    return list(Run.objects.filter(root_id=root.pk).order_by("depth", "id"))


def child_working(root: Run) -> bool:
    return Run.objects.filter(parent=root, status="working", steps__gte=1).exists()


def tree_active(root: Run) -> bool:
    return Run.objects.filter(root_id=root.pk, status__in=ACTIVE_STATUSES).exists()


# --- the tests -----------------------------------------------------------------------------


def test_twenty_roots_submitted_at_once_are_each_run_once_by_one_of_two_workers(
    cluster, scripted_llm
):
    tasks = [f"Batch task {i:02d}: survey one corner of the field" for i in range(20)]
    for i, task in enumerate(tasks):
        scripted_llm.script(
            task,
            slow(0.1, call("web_search", query=f"corner {i}")),
            slow(0.1, reply(f"report {i:02d}")),
        )

    cluster.start(web=True, workers=2)

    def submit_from_a_thread(task: str) -> Run:
        try:
            return cluster.submit(task)
        finally:
            connections.close_all()  # give the thread's connection back to the pool

    with ThreadPoolExecutor(max_workers=20) as submit:
        roots = list(submit.map(submit_from_a_thread, tasks))

    for root in roots:
        wait_finished(root, timeout=40)
    by_worker: dict[int, int] = {}
    for i, root in enumerate(roots):
        root.refresh_from_db()
        assert (root.status, root.report, root.error) == ("done", f"report {i:02d}", "")
        assert root.worker_id in cluster.worker_ids
        by_worker[root.worker_id] = by_worker.get(root.worker_id, 0) + 1
        # Two scripted turns: a run claimed twice would have asked a third time.
        assert len(scripted_llm.requests_for(tasks[i])) == 2, tasks[i]
    assert sorted(by_worker) == sorted(cluster.worker_ids), by_worker
    assert scripted_llm.unscripted == []
    logs = cluster.logs()
    for root in roots:
        assert logs.count(f"claimed research {root.pk}\n") == 1
        assert logs.count(f"research {root.pk} ended: done\n") == 1


def test_a_browser_connected_to_the_web_process_gets_every_event_of_a_tree_run_on_a_worker(
    cluster, scripted_llm
):
    """The socket is caught up before any worker exists, so every event of the run has to come
    live from the worker through the Redis channel layer."""
    topic = "Map the forest canopy from two sides"
    scripted_llm.script(
        topic,
        calls(
            call("spawn_subagent", name="left", reason="the left side", task="the left half"),
            call("spawn_subagent", name="right", reason="the right side", task="the right half"),
        ),
        call("wait_subagents"),
        reply("the tree report"),
    )
    scripted_llm.script(
        "the left half",
        slow(0.5, call("send_message", to="right", text="the oaks lean east")),
        reply("left done"),
    )
    scripted_llm.script(
        "the right half", call("read_messages", wait_seconds=10), reply("right done")
    )
    web = cluster.start(web=True, workers=0).web
    root_id = cluster.submit(topic).pk
    after = Event.objects.filter(root_id=root_id).count()
    with watch(web, root_id, after=after) as socket:
        cluster.add_worker(wait=False)
        received = receive_until_root_finished(socket, root_id)

    rows = list(Event.objects.filter(root_id=root_id).order_by("seq"))
    assert [row.seq for row in rows] == list(range(1, len(rows) + 1))  # the tree's order, whole
    live = [row.payload for row in rows if row.seq > after]
    # Every event once, as stored. Events of several agent threads can pass each other on
    # the way (27 after 28): the page orders them by seq, so the test does too.
    assert sorted(received, key=lambda event: event["seq"]) == live
    types = {event["type"] for event in received}
    assert types == {
        "run.created",
        "run.state",
        "run.usage",
        "run.message",
        "run.report",
        "run.finished",
    }
    root = Run.objects.get(pk=root_id)
    assert (root.status, root.report) == ("done", "the tree report")


def test_a_socket_on_a_quiet_tree_stays_open_past_the_channel_layers_blocking_read(
    cluster, scripted_llm
):
    """Nothing happens for longer than channels_redis's 5 s blocking receive (no worker yet):
    the socket stays open, and the tree's events still come once a worker runs it. With
    redis-py 8's 5 s socket timeout the web process tore such a socket down with 1011."""
    topic = "A research that waits for its worker"
    scripted_llm.script(topic, reply("the quiet report"))
    web = cluster.start(web=True, workers=0).web
    root_id = cluster.submit(topic).pk
    after = Event.objects.filter(root_id=root_id).count()
    with watch(web, root_id, after=after) as socket:
        with pytest.raises(TimeoutError):
            socket.recv(timeout=7)  # a closed socket raises ConnectionClosed instead
        cluster.add_worker(wait=False)
        received = receive_until_root_finished(socket, root_id)
    assert received[-1]["type"] == "run.finished"
    assert Run.objects.get(pk=root_id).report == "the quiet report"


def test_a_cancel_sent_to_the_web_process_stops_the_agents_on_a_worker(cluster, scripted_llm):
    topic = "Dig until someone says stop"
    parent_of_endless_child(scripted_llm, topic, "dig through every layer")
    root = cluster.start(web=True, workers=1).submit(topic)
    wait_for(lambda: child_working(root), timeout=20, message="the sub-agent did not start")

    started = time.monotonic()
    response = cluster.api.post(f"/v1/gb/research/{root.pk}/cancel")
    assert response.status_code == 202, response.text
    wait_for(lambda: not tree_active(root), timeout=5, message="the tree did not stop")
    assert time.monotonic() - started < 2.0

    root_run, child = tree_of(root)
    assert (root_run.status, root_run.error) == ("failed", services.CANCELLED_BY_USER)
    assert (child.status, child.error) == ("failed", PARENT_ENDED)
    asked = len(scripted_llm.requests_for("dig through every layer"))
    time.sleep(0.6)
    assert len(scripted_llm.requests_for("dig through every layer")) == asked


def test_a_killed_worker_leaves_no_run_working_and_the_other_worker_goes_on(
    cluster, scripted_llm, alice
):
    topic = "Research that loses its worker"
    parent_of_endless_child(scripted_llm, topic, "work until the machine dies")
    cluster.start(web=False, workers=2)
    root = services.run_start(owner=alice, topic=topic)
    wait_for(lambda: child_working(root), timeout=20, message="the sub-agent did not start")
    victim = cluster.worker_running(root)
    survivor_id = next(pk for pk in cluster.worker_ids if pk != root.worker_id)

    started = time.monotonic()
    victim.process.kill()
    victim.process.wait()  # reaped, as a supervisor would: a zombie's pid still answers
    victim_row = Worker.objects.filter(pk=root.worker_id)
    # The sweep fails the runs, then marks the worker stopped (a sweep cut short in between
    # does it all again): the test waits for both.
    wait_for(
        lambda: not tree_active(root) and victim_row.get().stopped_at is not None,
        timeout=DEAD_SECONDS + 5,
        message="the runs of the killed worker stayed working, or the worker was not stopped",
    )
    assert time.monotonic() - started < DEAD_SECONDS  # same machine, pid gone: the next sweep

    root_run, child = tree_of(root)
    for run in (root_run, child):
        assert (run.status, run.error) == ("failed", services.INTERRUPTED)
    assert child.finished_at <= root_run.finished_at
    # The killed sub-agent never closed its inbox (it expires): close it now, so a later test
    # database whose run gets the same id does not find it open.
    get_messenger().close(child.pk)

    scripted_llm.script("Research after the crash", reply("still standing"))
    after = services.run_start(owner=alice, topic="Research after the crash")
    after = wait_finished(after, timeout=20)
    assert (after.status, after.report, after.worker_id) == ("done", "still standing", survivor_id)


def test_runs_of_a_worker_that_stopped_heartbeating_are_failed_by_a_live_worker(
    cluster, alice, subagent_factory
):
    """A worker on another machine stops heartbeating (its pid means nothing here): a live
    worker's sweep fails its runs once RESEARCH_WORKER_DEAD_SECONDS have passed, not before."""
    lost = Worker.objects.create(
        hostname="lost-machine.invalid", pid=1, heartbeat_at=timezone.now()
    )
    root = services.run_start(owner=alice, topic="research on a machine that vanished")
    services.run_claim(run_id=root.pk, worker_id=lost.pk)
    child = subagent_factory(root, "child")
    services.run_claim(run_id=child.pk)
    cluster.start(web=False, workers=1)
    wait_for(
        lambda: not tree_active(root),
        timeout=DEAD_SECONDS + 5,
        message="the lost worker's runs stayed working",
    )
    root.refresh_from_db()
    assert (root.finished_at - lost.heartbeat_at).total_seconds() >= DEAD_SECONDS
    for run in tree_of(root):
        assert (run.status, run.error) == ("failed", services.WORKER_LOST)
    assert Worker.objects.get(pk=lost.pk).stopped_at is not None


def test_sigterm_to_a_worker_interrupts_its_agents_and_exits_cleanly(cluster, scripted_llm):
    """...and the browsers watching see the runs end: the worker sends its last events
    before it exits."""
    topic = "Research that the operator stops"
    parent_of_endless_child(scripted_llm, topic, "work until the worker stops")
    cluster.start(web=True, workers=1)
    worker = cluster.workers[0]
    root = cluster.submit(topic)
    wait_for(lambda: child_working(root), timeout=20, message="the sub-agent did not start")

    with watch(cluster.web, root.pk, after=Event.objects.filter(root_id=root.pk).count()) as ws:
        returncode = worker.stop(signal.SIGTERM, timeout=20)
        received = receive_until_root_finished(ws, root.pk, timeout=10)

    assert returncode == 0, worker.output()
    finished = {
        event["run"]: event["error"] for event in received if event["type"] == "run.finished"
    }
    assert finished == {run.pk: services.INTERRUPTED for run in tree_of(root)}
    for run in tree_of(root):
        assert (run.status, run.error) == ("failed", services.INTERRUPTED), worker.output()
    assert Worker.objects.get(pk=cluster.worker_ids[0]).stopped_at is not None
    assert f"research {root.pk} ended: failed ({services.INTERRUPTED})" in worker.output()


def test_a_pool_declared_dead_stops_its_agents_and_goes_on_under_a_new_worker_id(
    scripted_llm, alice, settings
):
    """A process frozen (or cut off) longer than RESEARCH_WORKER_DEAD_SECONDS had its runs
    failed by another one. When it wakes up its agents must stop, and what it claims next
    must belong to a worker the sweeps still watch."""
    settings.RESEARCH_HEARTBEAT_SECONDS = 0.2
    settings.RESEARCH_CLAIM_POLL_SECONDS = 0.2
    endless(scripted_llm, "outlive the worker")
    scripted_llm.script("after the restart", reply("fresh report"))
    pool = AgentPool(max_active=2).start()
    try:
        run = services.run_start(owner=alice, topic="outlive the worker")
        wait_for(lambda: Run.objects.get(pk=run.pk).steps >= 1, timeout=20)
        old_id = pool.worker_id
        # What another process's sweep does to a worker whose heartbeat is stale.
        services.worker_stop(worker_id=old_id, error=services.WORKER_LOST)

        wait_for(lambda: pool.worker_id != old_id, timeout=3, message="no new worker id")
        wait_for(lambda: not pool.is_running(run.pk), timeout=3, message="the agent went on")
        asked = len(scripted_llm.requests_for("outlive the worker"))
        later = services.run_start(owner=alice, topic="after the restart")
        later = wait_finished(later, timeout=20)
    finally:
        pool.shutdown()
    run.refresh_from_db()
    assert (run.status, run.error) == ("failed", services.WORKER_LOST)
    assert len(scripted_llm.requests_for("outlive the worker")) == asked
    assert (later.status, later.worker_id) == ("done", pool.worker_id)
    assert later.worker_id != old_id


def test_a_worker_claims_no_more_roots_than_it_has_free_slots(scripted_llm, alice, settings):
    """Roots it cannot start yet stay unclaimed, for a worker that is free."""
    settings.RESEARCH_MAX_WORKING_ROOTS = 10
    settings.RESEARCH_CLAIM_POLL_SECONDS = 0.1
    roots = []
    for i in range(6):
        endless(scripted_llm, f"queued research number {i}")
        roots.append(services.run_start(owner=alice, topic=f"queued research number {i}"))
    pool = AgentPool(max_active=2).start()
    try:
        mine = Run.objects.filter(worker_id=pool.worker_id)
        wait_for(lambda: mine.filter(status="working").count() == 2, timeout=20)
        time.sleep(0.5)  # several claim rounds
        claimed = mine.count()
        unclaimed = Run.objects.filter(pk__in=[r.pk for r in roots], worker__isnull=True)
        assert (claimed, unclaimed.count()) == (2, 4)
    finally:
        pool.shutdown()
