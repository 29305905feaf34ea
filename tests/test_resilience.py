"""Hostile conditions (issue 16): Redis stopping and PostgreSQL connections terminated in the
middle of a run. Finished work is kept, every agent thread gives its connection back, and no
run stays working for the life of a process that can no longer record it."""

import shutil
import threading

import psycopg
import pytest
from django.db import connection

from agents.llm.scripted import call, reply, slow
from agents.messages import factory
from agents.messages.redis import RedisMessenger
from agents.runtime.orphans import ORPHANED
from agents.runtime.pool import AgentPool
from research import services
from research.models import Event, Message, Run
from tests.conftest import wait_finished, wait_for
from tests.servers import RedisServer

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs redis-server"),
]


@pytest.fixture
def own_redis(monkeypatch):
    """The process's messenger on a Redis server of this test's own."""
    with RedisServer() as server:  # of this test alone: the test stops and starts it
        monkeypatch.setattr(factory, "_messenger", RedisMessenger.from_url(server.url))
        yield server


def connections_in_use() -> int:
    """Connections taken out of this process's PostgreSQL pool and not given back."""
    stats = connection.pool.get_stats()
    return stats["pool_size"] - stats["pool_available"]


def test_a_redis_outage_after_the_final_answer_keeps_the_report(scripted_llm, alice, own_redis):
    """The sub-agent writes its answer; Redis stops before it closes its inbox. The answer is
    its report (done), the cleanup error is only logged, and every agent thread leaves the
    pool and gives its database connection back."""
    connection.ensure_connection()
    baseline = connections_in_use()

    def redis_goes_down(messages):
        own_redis.stop()
        return reply("The child's finished report.")

    scripted_llm.script(
        "outage root",
        call("spawn_subagent", name="facet", reason="one facet", task="outage child task"),
        call("wait_subagents"),
        reply("The root's report."),
    )
    scripted_llm.script("outage child task", redis_goes_down)
    pool = AgentPool(max_active=4).start()
    try:
        root = wait_finished(services.run_start(owner=alice, topic="outage root"), timeout=30)
        child = Run.objects.get(parent=root)
        assert (child.status, child.error) == ("done", "")
        assert child.report == "The child's finished report."
        assert (root.status, root.report) == ("done", "The root's report.")
        wait_for(lambda: not pool.is_running(child.pk), timeout=5, message="thread never left")
        wait_for(
            lambda: connections_in_use() <= baseline,
            timeout=5,
            message=f"agent threads kept connections: {connections_in_use()} > {baseline}",
        )
    finally:
        pool.shutdown()


def test_a_worker_keeps_working_through_redis_outages(scripted_llm, alice, own_redis, settings):
    """Sub-agents that end while Redis is down still leave the pool and give their
    connections back: after two outages, the same pool still claims and finishes roots."""
    settings.RESEARCH_MAX_WORKING_ROOTS = 10

    def redis_goes_down(text, both_answering):
        def answer(messages):
            both_answering.wait(10)  # both children have started: Redis goes down now
            own_redis.stop()
            return reply(text)

        return answer

    for round_ in range(3):
        scripted_llm.script(
            f"round {round_} root",
            call("spawn_subagent", name="a", reason="a facet", task=f"round {round_} a"),
            call("spawn_subagent", name="b", reason="b facet", task=f"round {round_} b"),
            call("wait_subagents"),
            reply(f"round {round_} report"),
        )
        both_answering = threading.Barrier(2)
        for name in "ab":
            final = (
                reply(f"{name} done")
                if round_ == 2
                else redis_goes_down(f"{name} done", both_answering)
            )
            scripted_llm.script(f"round {round_} {name}", final)
    pool = AgentPool(max_active=4).start()
    try:
        connection.ensure_connection()
        baseline = connections_in_use()
        for round_ in range(3):
            root = services.run_start(owner=alice, topic=f"round {round_} root")
            root = wait_finished(root, timeout=30)
            own_redis.start()
            assert root.status == "done", root.error
            children = Run.objects.filter(parent=root)
            assert sorted(children.values_list("report", flat=True)) == ["a done", "b done"]
        assert pool.active == 0
        wait_for(lambda: connections_in_use() <= baseline, timeout=5, message="leaked")
    finally:
        pool.shutdown()


TERMINATOR = "canopy-test-terminator"


def terminate_backends(*, sparing: int) -> int:
    """pg_terminate_backend every connection of this database but `sparing` (the test's)."""
    # Two trees' answers may terminate at once: neither ends the other's connection.
    return len(
        _as_terminator(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> %s AND application_name <> %s",
            [sparing, TERMINATOR],
        )
    )


def terminate_backend(pid: int) -> None:
    """pg_terminate_backend one connection of this database's server."""
    _as_terminator("SELECT pg_terminate_backend(%s)", [pid])


def _as_terminator(sql: str, params: list) -> list:
    """A statement's rows, through a connection of its own (not the pool's, not a thread's
    Django connection), named so that terminations spare it."""
    db = connection.settings_dict
    with psycopg.connect(
        host=db["HOST"],
        port=db["PORT"],
        user=db["USER"],
        dbname=db["NAME"],
        autocommit=True,
        application_name=TERMINATOR,
    ) as other:
        return other.execute(sql, params).fetchall()


def test_agents_whose_connections_are_terminated_go_on_and_end_done(scripted_llm, alice, settings):
    """Mid-run, while they wait on their model, every PostgreSQL backend of the agents is
    terminated (twice). Each agent writes on through a fresh connection: every run ends done
    with its report (a lost connection once failed the agent), and the slots free."""
    settings.RESEARCH_MAX_WORKING_ROOTS = 10
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        (mine,) = cursor.fetchone()
    terminated = []

    def terminate(turn):
        def answer(messages):
            terminated.append(terminate_backends(sparing=mine))
            return turn

        return answer

    for tree in ("pine", "fir"):
        scripted_llm.script(
            f"{tree} research",
            call("spawn_subagent", name="left", reason="one half", task=f"{tree} left half"),
            terminate(call("wait_subagents")),
            terminate(call("wait_subagents")),
            reply(f"{tree} report"),
        )
        scripted_llm.script(f"{tree} left half", terminate(call("list_siblings")), reply("left"))
    pool = AgentPool(max_active=6).start()
    try:
        roots = [services.run_start(owner=alice, topic=f"{t} research") for t in ("pine", "fir")]
        for root in roots:
            wait_finished(root, timeout=40)
        assert sum(terminated) > 0
        assert set(Run.objects.values_list("status", "error")) == {("done", "")}
        assert {root.report for root in Run.objects.filter(parent=None)} == {
            "pine report",
            "fir report",
        }
        # The slots are free: a new root starts and ends.
        scripted_llm.script("after the storm", reply("calm"))
        after = wait_finished(services.run_start(owner=alice, topic="after the storm"))
        assert (after.status, after.error, after.report) == ("done", "", "calm")
    finally:
        pool.shutdown()


def test_the_reports_coverage_is_read_again_when_its_connection_ends_between_its_reads(
    alice, monkeypatch
):
    """The Coverage and gaps section reads the plan, its items' agents, then whether the lead
    researched itself. A connection the server ends between those reads (a restart does not
    wait for a model call; in the test above another tree's agent ended it) costs a second
    try on a fresh connection, not the section: the report once ended "could not be
    verified: ... terminating connection"."""
    from agents.loop import review
    from agents.runtime.context import AgentContext, CancelToken
    from research.selectors import plans

    root = services.run_start(owner=alice, topic="the tides and the moon", throttle=False)
    services.plan_write(root_id=root.pk, items=["Tides", "The moon"])
    ctx = AgentContext.of(Run.objects.get(pk=root.pk), CancelToken(root.pk))
    read_lead = plans._lead_researched
    ended = []

    def lose_the_connection_then_read(root_id):
        if not ended:  # every backend of the database, this thread's among them
            ended.append(terminate_backends(sparing=-1))
        return read_lead(root_id)

    monkeypatch.setattr(plans, "_lead_researched", lose_the_connection_then_read)

    section = review.coverage(ctx, None)

    assert ended[0] >= 1
    assert "Plan items not covered:" in section
    assert "- Item 1: Tides" in section and "- Item 2: The moon" in section


def test_a_run_no_thread_can_record_is_ended_by_the_orphan_sweep(alice, settings):
    """A run of a live worker that no agent thread runs (its thread died without recording
    its end) is failed by that worker's own heartbeat, not held for the life of the process."""
    settings.RESEARCH_HEARTBEAT_SECONDS = 0.2
    pool = AgentPool(max_active=2, claim_roots=False).start()
    try:
        root = services.run_start(owner=alice, topic="a root whose agent thread died")
        services.run_claim(run_id=root.pk, worker_id=pool.worker_id)  # no thread runs it
        root = wait_finished(root, timeout=10)
        assert (root.status, root.error) == ("failed", ORPHANED)
    finally:
        pool.shutdown()


def test_a_message_redis_could_not_deliver_is_not_left_in_the_transcript(
    scripted_llm, alice, own_redis
):
    both_started = threading.Barrier(2)

    def redis_down_then_send(messages):
        both_started.wait(10)
        own_redis.stop()
        return call("send_message", to="listener", text="are you there?")

    def listening(messages):
        both_started.wait(10)
        return slow(0.5, reply("listener done"))

    root = _talker_and_listener(
        scripted_llm, alice, (redis_down_then_send, reply("talker done")), (listening,)
    )

    (result,) = scripted_llm.tool_results("undelivered talker", name="send_message")
    assert result["content"].startswith("error: send_message failed")
    assert not Message.objects.exists()  # neither stored nor published
    assert not Event.objects.filter(type="run.message").exists()
    assert root.status == "done"


def test_a_message_delivered_just_before_its_connection_is_lost_still_reaches_the_page(
    scripted_llm, alice, monkeypatch
):
    """The talker's PostgreSQL backend is terminated right after its message reached the
    listener's inbox: the message's event is written on a fresh connection, so the page shows
    the message the listener reads, and the talker is told it was sent."""
    from agents.tools.team import messages as message_tools

    delivered = message_tools.deliver
    terminated = []

    def deliver_then_lose_the_connection(messenger, message) -> None:
        delivered(messenger, message)
        connection.ensure_connection()
        terminated.append(_terminate(connection.connection.info.backend_pid))

    monkeypatch.setattr(message_tools, "deliver", deliver_then_lose_the_connection)
    both_started = threading.Barrier(2)

    def talk(messages):
        both_started.wait(10)
        return call("send_message", to="listener", text="the bridge is out")

    def listen(messages):
        both_started.wait(10)
        return call("read_messages", wait_seconds=10)

    scripted_llm.script(
        "lost root",
        call("spawn_subagent", name="talker", reason="talks", task="lost talker"),
        call("spawn_subagent", name="listener", reason="listens", task="lost listener"),
        call("wait_subagents"),
        reply("root done"),
    )
    scripted_llm.script("lost talker", talk, reply("talker done"))
    scripted_llm.script("lost listener", listen, reply("listener done"))
    pool = AgentPool(max_active=4).start()
    try:
        root = wait_finished(services.run_start(owner=alice, topic="lost root"))
    finally:
        pool.shutdown()

    assert terminated == [True]
    (sent,) = scripted_llm.tool_results("lost talker", name="send_message")
    assert sent["content"].startswith('message sent to "listener"')
    (read,) = scripted_llm.tool_results("lost listener", name="read_messages")
    assert "the bridge is out" in read["content"]
    (event,) = Event.objects.filter(type="run.message")
    assert event.payload["text"] == "the bridge is out"
    assert Message.objects.count() == 1
    assert root.status == "done"


def test_a_message_not_delivered_as_its_connection_is_lost_leaves_no_row(
    scripted_llm, alice, monkeypatch
):
    """The listener's inbox is gone (it could not be opened while Redis was down) and the
    talker's PostgreSQL backend is terminated meanwhile: the message's row is withdrawn on a
    fresh connection, so no message is stored that the page would never show, and the
    talker is told it was not delivered."""
    from agents.messages.base import NoInbox
    from agents.tools.team import messages as message_tools

    terminated = []

    def lose_the_connection_then_the_inbox(messenger, message) -> None:
        connection.ensure_connection()
        terminated.append(_terminate(connection.connection.info.backend_pid))
        raise NoInbox(message.to_id)

    monkeypatch.setattr(message_tools, "deliver", lose_the_connection_then_the_inbox)
    talker = (call("send_message", to="listener", text="the ford is deep"), reply("talker done"))
    root = _talker_and_listener(scripted_llm, alice, talker, (reply("listener done"),))

    assert terminated == [True]
    (sent,) = scripted_llm.tool_results("undelivered talker", name="send_message")
    assert "was not delivered" in sent["content"]
    assert Message.objects.count() == 0
    assert not Event.objects.filter(type="run.message").exists()
    assert root.status == "done"


def _talker_and_listener(scripted_llm, alice, talker: tuple, listener: tuple) -> Run:
    """A root that spawns a talker and a listener at once (the talker's sibling is there
    when it sends), waits and answers; each sub-agent's turns as given. Run to its end in a
    pool of this process; the root as it ended."""
    scripted_llm.script(
        "undelivered root",
        call(
            "spawn_subagents",
            subagents=[
                {"name": "talker", "reason": "talks", "task": "undelivered talker"},
                {"name": "listener", "reason": "listens", "task": "undelivered listener"},
            ],
        ),
        call("wait_subagents"),
        reply("root done"),
    )
    scripted_llm.script("undelivered talker", *talker)
    scripted_llm.script("undelivered listener", *listener)
    pool = AgentPool(max_active=4).start()
    try:
        return wait_finished(services.run_start(owner=alice, topic="undelivered root"))
    finally:
        pool.shutdown()


def _terminate(pid: int) -> bool:
    db = connection.settings_dict
    with psycopg.connect(
        host=db["HOST"], port=db["PORT"], user=db["USER"], dbname=db["NAME"], autocommit=True
    ) as other:
        return other.execute("SELECT pg_terminate_backend(%s)", [pid]).fetchone()[0]


def test_a_sub_agent_that_starts_while_redis_is_down_still_does_its_work(
    scripted_llm, alice, own_redis
):
    """One slot: the child waits for it while its parent works. Redis stops before the parent
    waits (and gives its slot to the child): the child cannot reopen its inbox, and works
    without it rather than crashing."""

    def redis_goes_down(messages):
        own_redis.stop()
        return call("wait_subagents")

    scripted_llm.script(
        "late start root",
        call("spawn_subagent", name="late", reason="starts late", task="late start child"),
        redis_goes_down,
        reply("root done"),
    )
    scripted_llm.script("late start child", reply("the late child's report"))
    pool = AgentPool(max_active=1).start()
    try:
        root = wait_finished(services.run_start(owner=alice, topic="late start root"))
    finally:
        pool.shutdown()

    child = Run.objects.get(parent=root)
    assert (child.status, child.error, child.report) == ("done", "", "the late child's report")
    assert (root.status, root.report) == ("done", "root done")


def test_a_sub_agent_spawned_while_redis_is_down_starts_and_reports(scripted_llm, alice, own_redis):
    def redis_goes_down(messages):
        own_redis.stop()
        return call("spawn_subagent", name="offline", reason="works", task="offline child")

    scripted_llm.script("offline root", redis_goes_down, call("wait_subagents"), reply("root done"))
    scripted_llm.script("offline child", reply("the offline child's report"))
    pool = AgentPool(max_active=4).start()
    try:
        root = wait_finished(services.run_start(owner=alice, topic="offline root"))
    finally:
        pool.shutdown()

    child = Run.objects.get(parent=root)
    assert (child.status, child.error, child.report) == ("done", "", "the offline child's report")
    (spawned,) = scripted_llm.tool_results("offline root", name="spawn_subagent")
    assert spawned["content"].startswith('started sub-agent "offline"')
