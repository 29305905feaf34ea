"""Sub-agents and messages (seed 000) through the real loop, pool and database."""

import sys
import threading
import time

import pytest
from django.db import transaction

from agents.llm.scripted import call, calls, reply, slow
from agents.runtime.tree import CANCELLED_BY_PARENT, PARENT_ENDED
from research import services
from research.models import Event, Message, Profile, Run
from research.selectors import team as team_reads
from research.services import subagents
from tests.conftest import wait_finished, wait_for
from tests.helpers import results, start, tool_names

pytestmark = pytest.mark.django_db(transaction=True)


def spawn(name: str, task: str, reason: str | None = None, **extra) -> object:
    return call(
        "spawn_subagent", name=name, reason=reason or f"{name} is its own part", task=task, **extra
    )


def child(root: Run, name: str) -> Run:
    return Run.objects.get(parent=root, name=name)


def working(name: str) -> bool:
    """Whether that agent is still queued or working. A turn function waits on this rather
    than on "ended", so that it also stops waiting when the test is over and its rows gone."""
    return Run.objects.filter(name=name, status__in=["queued", "working"]).exists()


def test_root_spawns_two_subagents_in_one_step_and_both_run_at_once(
    agent_pool, scripted_llm, alice
):
    # The root's round that waits has begun: a child that ends from now on is reported by
    # the wait, not delivered at the head of that round.
    root_waits = threading.Event()

    def wait(messages):
        root_waits.set()
        return call("wait_subagents")

    scripted_llm.script(
        "EV battery research",
        calls(
            spawn("chemistry", "EV chemistries and cost per kWh"),
            spawn("market", "EV battery makers and market shares"),
        ),
        wait,
        reply("Root report."),
    )
    # Each child answers only once both have been seen working at the same moment: they
    # could not be if the pool ran them one after the other.
    both_seen = threading.Event()

    def answer_when_both_work(messages):
        if Run.objects.filter(parent__isnull=False, status="working").count() >= 2:
            both_seen.set()
        if both_seen.is_set() and root_waits.is_set():
            return reply("together")
        return slow(0.1, call("list_siblings"))

    for task in ("EV chemistries", "EV battery makers"):
        scripted_llm.script(task, *[answer_when_both_work] * 30)
    root = wait_finished(start(alice, "EV battery research"))

    assert root.status == "done" and root.report == "Root report."
    spawned = results(scripted_llm, "EV battery research", "spawn_subagent")
    chemistry, market = child(root, "chemistry"), child(root, "market")
    assert spawned == [
        f'started sub-agent "chemistry" (run {chemistry.pk}): it works in the background on '
        "its task; call wait_subagents to collect its report.",
        f'started sub-agent "market" (run {market.pk}): it works in the background on its '
        "task; call wait_subagents to collect its report.",
    ]
    assert chemistry.report == market.report == "together"
    assert (chemistry.model, chemistry.owner_id, chemistry.depth) == (root.model, alice.pk, 1)
    assert chemistry.topic == "EV chemistries and cost per kWh"
    assert chemistry.reason == "chemistry is its own part"
    waited = results(scripted_llm, "EV battery research", "wait_subagents")[0]
    assert f"## chemistry (run {chemistry.pk}): done\n\ntogether" in waited
    assert f"## market (run {market.pk}): done\n\ntogether" in waited


def test_sixth_spawn_of_an_agent_and_eleventh_of_a_tree_are_refused(
    agent_pool, scripted_llm, alice
):
    scripted_llm.script(
        "big tree",
        spawn("a", "task a: spawn five"),
        call("wait_subagents", names=["a"]),
        calls(*[spawn(n, f"task {n}: {n * 3}") for n in ("b", "c", "d", "e")]),
        spawn("f", "task f: one too many"),
        call("wait_subagents"),
        reply("done"),
    )
    scripted_llm.script(
        "task a: spawn five",
        calls(*[spawn(f"a{i}", f"grandchild task number {i}") for i in range(1, 6)]),
        call("wait_subagents"),
        reply("a done"),
    )
    # b spawns once its parent has spawned all it will (the tree holds 10 by then).
    scripted_llm.script("task b:", slow(1.0, spawn("b1", "grandchild of b")), reply("b done"))
    root = wait_finished(start(alice, "big tree"), timeout=30)

    assert Run.objects.filter(root=root, parent__isnull=False).count() == 10
    sixth = results(scripted_llm, "big tree", "spawn_subagent")[-1]
    assert sixth == (
        "error: limit reached: an agent may spawn at most 5 sub-agents and you have 5 "
        "(a, b, c, d, e). Do the rest yourself or wait for them."
    )
    eleventh = results(scripted_llm, "task b:", "spawn_subagent")[0]
    assert eleventh == (
        "error: limit reached: a research may have at most 10 sub-agents in its whole tree "
        "and this one has 10. Do the rest yourself."
    )


def test_a_grandchild_gets_no_spawn_subagent_but_has_the_messaging_tools(
    agent_pool, scripted_llm, alice
):
    scripted_llm.script(
        "three generations", spawn("mid", "middle task"), call("wait_subagents"), reply("root")
    )
    scripted_llm.script(
        "middle task", spawn("leaf", "leaf task"), call("wait_subagents"), reply("mid")
    )
    scripted_llm.script("leaf task", reply("leaf"))
    root = wait_finished(start(alice, "three generations"))

    assert root.status == "done"
    root_tools = tool_names(scripted_llm.requests_for("three generations")[0])
    mid_tools = tool_names(scripted_llm.requests_for("middle task")[0])
    leaf_tools = tool_names(scripted_llm.requests_for("leaf task")[0])
    assert "spawn_subagent" in root_tools and "send_message" not in root_tools
    assert {"spawn_subagent", "list_siblings", "send_message", "read_messages"} <= mid_tools
    assert "spawn_subagent" not in leaf_tools
    assert {"list_siblings", "send_message", "read_messages"} <= leaf_tools
    leaf_prompt = scripted_llm.requests_for("leaf task")[0]["messages"][0]["content"]
    assert 'You are the sub-agent "leaf"' in leaf_prompt and "leaf is its own part" in leaf_prompt


def test_list_siblings_shows_names_states_and_reasons(agent_pool, scripted_llm, alice):
    scripted_llm.script(
        "sibling listing",
        calls(
            spawn("fast", "fast sibling task", reason="covers the quick part"),
            spawn("slowpoke", "slow sibling task", reason="covers the slow part"),
        ),
        call("wait_subagents", names=["fast"]),
        spawn("late", "late sibling task", reason="joins late"),
        call("wait_subagents"),
        reply("root"),
    )
    scripted_llm.script("fast sibling task", call("list_siblings"), reply("fast"))
    scripted_llm.script(
        "slow sibling task",
        lambda m: (
            call("list_siblings")
            if Run.objects.filter(name="late").exists()
            else slow(0.1, call("read_messages", wait_seconds=0.2))
        ),
        *[
            lambda m: (
                call("list_siblings")
                if Run.objects.filter(name="late").exists()
                else slow(0.1, call("read_messages", wait_seconds=0.2))
            )
            for _ in range(40)
        ],
    )
    scripted_llm.script("late sibling task", slow(1.5, reply("late")))
    root = wait_finished(start(alice, "sibling listing"))

    assert results(scripted_llm, "fast sibling task", "list_siblings") == [
        "- slowpoke [working]: covers the slow part"
    ]
    listing = results(scripted_llm, "slow sibling task", "list_siblings")[0]
    assert listing.splitlines()[0] == "- fast [ended]: covers the quick part"
    assert listing.splitlines()[1] == "- late [working]: joins late"
    assert root.status == "done"


def test_a_message_reaches_a_sibling_and_is_read_once(agent_pool, scripted_llm, alice):
    scripted_llm.script(
        "messaging research",
        calls(spawn("sender", "sender task"), spawn("reader", "reader task")),
        call("wait_subagents"),
        reply("root"),
    )
    scripted_llm.script(
        "sender task",
        call("send_message", to="reader", text="LFP is now most of CATL's output"),
        reply("sent"),
    )
    scripted_llm.script(
        "reader task",
        call("read_messages", wait_seconds=10),
        call("read_messages"),
        reply("read"),
    )
    root = wait_finished(start(alice, "messaging research"))

    sender, reader = child(root, "sender"), child(root, "reader")
    assert results(scripted_llm, "sender task", "send_message") == [
        f'message sent to "reader" (run {reader.pk}).'
    ]
    first, second = results(scripted_llm, "reader task", "read_messages")
    assert first == f"From sender (run {sender.pk}): LFP is now most of CATL's output"
    assert second == "No new messages."
    message = Message.objects.get()
    assert (message.from_run_id, message.to_run_id) == (sender.pk, reader.pk)
    assert message.read_at is not None
    assert root.events.filter(type="run.message").count() == 1


def test_messaging_a_parent_a_cousin_a_stranger_or_oneself_is_refused(
    agent_pool, scripted_llm, alice
):
    scripted_llm.script(
        "family research",
        calls(spawn("p", "p task: spawn two"), spawn("q", "q task")),
        call("wait_subagents"),
        reply("root"),
    )
    scripted_llm.script(
        "p task: spawn two",
        calls(spawn("p1", "p1 task"), spawn("p2", "p2 task")),
        call("wait_subagents"),
        reply("p"),
    )
    scripted_llm.script("q task", spawn("q1", "q1 task"), call("wait_subagents"), reply("q"))
    scripted_llm.script("q1 task", reply("q1"))
    scripted_llm.script(
        "p1 task",
        calls(
            call("send_message", to="p", text="to my parent"),
            call("send_message", to="q", text="to my uncle"),
            call("send_message", to="q1", text="to my cousin"),
            call("send_message", to="p1", text="to myself"),
        ),
        reply("p1"),
    )
    scripted_llm.script("p2 task", slow(1.0, reply("p2")))
    wait_finished(start(alice, "family research"))

    parent, uncle, cousin, itself = results(scripted_llm, "p1 task", "send_message")
    for refusal, name in ((parent, "p"), (uncle, "q"), (cousin, "q1")):
        assert refusal == (
            f"error: no sibling named '{name}': you can message only the other sub-agents of "
            "your parent; your siblings are: p2"
        )
    assert itself == "error: you cannot message yourself; your siblings are: p2"
    assert not Message.objects.exists()


def test_the_65th_unread_message_is_refused(agent_pool, scripted_llm, alice):
    scripted_llm.script(
        "flood research",
        calls(spawn("flooder", "flooder task"), spawn("busy", "busy task")),
        call("wait_subagents"),
        reply("root"),
    )
    scripted_llm.script(
        "flooder task",
        calls(*[call("send_message", to="busy", text=f"note {i}") for i in range(65)]),
        reply("flooded"),
    )
    scripted_llm.script(
        "busy task",
        # One long model call: busy is alive, and reads nothing, while the flood comes in.
        lambda m: wait_for(lambda: not working("flooder"), timeout=30) and reply("busy done"),
    )
    wait_finished(start(alice, "flood research"))

    sent = results(scripted_llm, "flooder task", "send_message")
    assert all(result.startswith("message sent") for result in sent[:64])
    assert sent[64] == (
        'error: the inbox of "busy" is full (64 unread messages): the message was not delivered'
    )
    assert Message.objects.count() == 64


def test_messaging_a_sibling_that_ended_is_refused(agent_pool, scripted_llm, alice):
    scripted_llm.script(
        "ended sibling research",
        calls(spawn("quick", "quick task"), spawn("late", "late task")),
        call("wait_subagents"),
        reply("root"),
    )
    scripted_llm.script("quick task", reply("quick"))
    scripted_llm.script(
        "late task",
        lambda m: slow(0.1, call("list_siblings")),
        *[
            lambda m: (
                call("send_message", to="quick", text="too late")
                if Run.objects.filter(name="quick", status="done").exists()
                else slow(0.1, call("list_siblings"))
            )
            for _ in range(30)
        ],
    )
    wait_finished(start(alice, "ended sibling research"))
    sent = results(scripted_llm, "late task", "send_message")
    assert (
        sent[0] == 'error: "quick" has ended: its inbox is gone and the message was not delivered'
    )


def test_a_parent_that_answers_first_is_refused_once_then_cancels_its_children(
    agent_pool, scripted_llm, alice
):
    scripted_llm.script(
        "impatient research",
        spawn("slow", "a slow task"),
        reply("I am done already."),
        reply("Really done."),
    )
    scripted_llm.script("a slow task", *[slow(0.2, call("list_siblings")) for _ in range(100)])
    root = wait_finished(start(alice, "impatient research"))

    requests = scripted_llm.requests_for("impatient research")
    refusal = requests[2]["messages"][-1]["content"]
    assert refusal.startswith('Your answer was not accepted yet: your sub-agents "slow" (still')
    assert root.status == "done" and root.report == "Really done."
    slow_child = child(root, "slow")
    assert slow_child.status == "failed"
    assert slow_child.error == PARENT_ENDED == "cancelled: the agent that spawned it ended"
    assert slow_child.finished_at <= root.finished_at


def test_cancel_subagent_ends_only_that_one(agent_pool, scripted_llm, alice):
    scripted_llm.script(
        "pruning research",
        calls(spawn("keep", "keep task"), spawn("drop", "drop task")),
        call("cancel_subagent", name="drop"),
        call("wait_subagents"),
        reply("root"),
    )
    scripted_llm.script("keep task", slow(0.3, reply("kept")))
    scripted_llm.script("drop task", *[slow(0.2, call("list_siblings")) for _ in range(100)])
    root = wait_finished(start(alice, "pruning research"))

    assert child(root, "keep").status == "done"
    dropped = child(root, "drop")
    assert (dropped.status, dropped.error) == ("failed", CANCELLED_BY_PARENT)
    waited = results(scripted_llm, "pruning research", "wait_subagents")[0]
    assert f"## drop (run {dropped.pk}): failed\n\nerror: {CANCELLED_BY_PARENT}" in waited
    assert root.status == "done"


def test_spawn_refusals_name_what_is_wrong(agent_pool, scripted_llm, alice):
    scripted_llm.script(
        "refusals research",
        calls(
            call("spawn_subagent", name="has space", reason="r", task="t1"),
            call("spawn_subagent", name="noreason", task="t2"),
            spawn("twin", "compile the list of EV battery makers with market shares"),
            spawn("twin", "another task entirely"),
            spawn("copy", "compile the list of EV battery makers with their market shares"),
            call("spawn_subagent", name="x" * 41, reason="r", task="t3"),
        ),
        call("cancel_subagent", name="twin"),
        reply("root"),
        reply("root again"),
    )
    root = wait_finished(start(alice, "refusals research"))
    bad_name, no_reason, ok, duplicate, repeated, too_long = results(
        scripted_llm, "refusals research", "spawn_subagent"
    )
    twin = child(root, "twin")
    assert bad_name.startswith("error: invalid name 'has space'")
    assert no_reason.startswith("error: a reason is required")
    assert ok.startswith('started sub-agent "twin"')
    assert duplicate.startswith(f'error: you already have a sub-agent named "twin" (run {twin.pk})')
    assert repeated == (
        f'error: refused: this task nearly repeats the task of your working sub-agent "twin" '
        f"(run {twin.pk}). Wait for its report, or give a different task."
    )
    assert too_long.startswith("error: invalid name 'xxxx")
    assert Run.objects.filter(parent=root).count() == 1


def test_wait_subagents_errors_name_the_valid_names(agent_pool, scripted_llm, alice):
    scripted_llm.script(
        "wait errors research",
        call("wait_subagents"),
        spawn("only", "the only task"),
        call("wait_subagents", names=["ghost"]),
        call("wait_subagents"),
        reply("root"),
    )
    scripted_llm.script("the only task", reply("only"))
    wait_finished(start(alice, "wait errors research"))
    none, ghost, _ = results(scripted_llm, "wait errors research", "wait_subagents")
    assert none == "error: you have no sub-agents to wait for"
    assert ghost == "error: no sub-agent named 'ghost'; your sub-agents are: only"


def test_an_agent_that_never_spawned_answers_its_team_tools_without_reading_sub_agents(
    scripted_llm, alice
):
    """Most agents of a tree are its leaves: a run that started fresh and never tried a
    spawn has no sub-agents of its own, so its team tools refuse without reading them; its
    end still reads its working sub-agents (the statements its thread sends are captured)."""
    from django.db import connection

    from agents.loop.lifetime import run_agent
    from agents.runtime.context import CancelToken

    scripted_llm.script(
        "a leaf's life",
        call("cancel_subagent", name="nobody"),
        call("wait_subagents"),
        call("inspect_subagent", name="ghost"),
        reply("Done."),
    )
    run = services.run_start(owner=alice, topic="a leaf's life")
    sent: list[str] = []

    def capture(execute, sql, params, many, context):
        sent.append(sql)
        return execute(sql, params, many, context)

    def work() -> None:
        try:
            services.run_claim(run_id=run.pk)
            with connection.execute_wrapper(capture):
                run_agent(run_id=run.pk, token=CancelToken(run.pk), pool=None)
        finally:
            connection.close()

    agent = threading.Thread(target=work)
    agent.start()
    agent.join(20)

    assert Run.objects.get(pk=run.pk).status == "done"
    assert results(scripted_llm, "a leaf's life") == [
        "error: you have no sub-agents to cancel",
        "error: you have no sub-agents to wait for",
        "error: you have no sub-agents to inspect",
    ]
    assert sent, "the agent's statements were not captured"
    reads = [sql for sql in sent if "parent_id = " in sql]
    # Only its end's (a root's review and its finish each end its sub-agents), whatever: a
    # resumed run may have orphans. None of its team tools read them.
    assert reads and all("status IN" in sql for sql in reads), reads


def test_a_wait_returns_after_its_slice_with_still_working_lines(
    agent_pool, scripted_llm, alice, settings
):
    settings.RESEARCH_WAIT_SLICE_SECONDS = 0.5
    scripted_llm.script(
        "slice research",
        spawn("sleepy", "sleepy task"),
        *[call("wait_subagents")] * 8,
        reply("root"),
    )
    # It ends mid-slice (about 1.3 s in, slices end near 0.5, 1.0 and 1.5 s): ended at a
    # slice's edge, between two waits, its report comes at the root's round head instead.
    scripted_llm.script("sleepy task", slow(1.25, reply("finally")))
    wait_finished(start(alice, "slice research"))
    waits = results(scripted_llm, "slice research", "wait_subagents")
    assert "## sleepy (run " in waits[0] and waits[0].splitlines()[0].endswith(": still working")
    assert "call wait_subagents again" in waits[0]
    # The wait that saw it end carries its report; a later one names it, once read.
    (ended,) = [number for number, text in enumerate(waits) if ": done\n\nfinally" in text]
    assert all(
        text.endswith(": done (its report was delivered to you above)")
        for text in waits[ended + 1 :]
    )


def test_a_subagent_past_its_run_time_cap_ends_failed(agent_pool, scripted_llm, alice, settings):
    settings.RESEARCH_SUBAGENT_TIMEOUT_SECONDS = 1
    scripted_llm.script(
        "capped research", spawn("stuck", "stuck task"), call("wait_subagents"), reply("root")
    )
    # One model call longer than the cap: the child never reaches a round head inside the
    # time it keeps for writing, so the cap cuts it off.
    scripted_llm.script("stuck task", slow(3, call("list_siblings")))
    root = wait_finished(start(alice, "capped research"))
    stuck = child(root, "stuck")
    assert stuck.status == "failed"
    assert stuck.error == "timed out: the sub-agent worked longer than 1 s"
    assert root.status == "done"


def test_the_tree_cost_cap_makes_every_agent_write_its_report(
    agent_pool, scripted_llm, alice, settings
):
    from decimal import Decimal

    # $1 per million input tokens: 1000 tokens cost $0.001 a call.
    settings.RESEARCH_TREE_COST_CAP_USD = Decimal("0.004")
    scripted_llm.script(
        "costly research",
        calls(spawn("one", "costly task one"), spawn("two", "costly task two"), usage=(1000, 0)),
        call("wait_subagents", usage=(1000, 0)),
        reply("root report", usage=(1000, 0)),
    )
    for name in ("one", "two"):
        scripted_llm.script(
            f"costly task {name}",
            *[slow(0.05, call("list_siblings", usage=(1000, 0))) for _ in range(30)],
        )
    root = wait_finished(start(alice, "costly research", max_steps=40))

    for run in [root, *Run.objects.filter(parent=root)]:
        assert run.status == "done", (run.name, run.error)
        last = scripted_llm.requests_for(run.topic)[-1]
        assert not last.get("tools")
        assert "reached its cost cap of $0.004" in last["messages"][-1]["content"]
    assert root.report.startswith("(scripted: no more turns") or root.report == "root report"


def test_subagents_can_be_turned_off_for_the_server_and_for_a_user(
    agent_pool, scripted_llm, alice, bob, settings
):
    scripted_llm.script("alice solo", reply("a"))
    scripted_llm.script("bob solo", reply("b"))
    Profile.objects.create(user=alice, subagents_enabled=False)
    wait_finished(start(alice, "alice solo"))
    wait_finished(start(bob, "bob solo"))
    assert "spawn_subagent" not in tool_names(scripted_llm.requests_for("alice solo")[0])
    assert "spawn_subagent" in tool_names(scripted_llm.requests_for("bob solo")[0])

    settings.RESEARCH_SUBAGENTS_ENABLED = False
    scripted_llm.script("bob again", reply("b"))
    wait_finished(start(bob, "bob again"))
    assert "spawn_subagent" not in tool_names(scripted_llm.requests_for("bob again")[0])


def test_a_sub_agent_gets_its_owners_switch_as_it_starts_not_as_its_parent_did(
    agent_pool, scripted_llm, alice
):
    """The switch comes back with each agent's claim: turned off while the root works, the
    child it spawns afterwards is offered no spawn tool, though its parent was."""

    def spawn_after_turning_off(messages):
        Profile.objects.update_or_create(user=alice, defaults={"subagents_enabled": False})
        return calls(spawn("kid", "switch kid task"))

    scripted_llm.script("switch research", spawn_after_turning_off, call("wait_subagents"))
    scripted_llm.script("switch kid task", reply("kid report"))
    Profile.objects.create(user=alice, subagents_enabled=True)
    root = wait_finished(start(alice, "switch research"))

    assert "spawn_subagent" in tool_names(scripted_llm.requests_for("switch research")[0])
    kid = Run.objects.get(parent=root, name="kid")
    assert kid.status == "done", kid.error
    kid_tools = tool_names(scripted_llm.requests_for("switch kid task")[0])
    assert "list_siblings" in kid_tools and "spawn_subagent" not in kid_tools


def test_a_root_that_saw_its_children_end_reads_none_at_its_answer_review_and_end(
    agent_pool, scripted_llm, alice, settings, monkeypatch
):
    """Its claim found no sub-agents, its spawns returned theirs, and its wait read each one
    ended: its answer's check, its review (with a verifier) and its end read none again."""
    settings.RESEARCH_VERIFY_REPORTS = True
    scripted_llm.script(
        "seen research",
        calls(spawn("one", "seen task one"), spawn("two", "seen task two")),
        call("wait_subagents"),
        reply("the draft"),
    )
    scripted_llm.script("seen task one", reply("one's report"))
    scripted_llm.script("seen task two", reply("two's report"))
    asked: list[tuple[str, int, str]] = []  # (selector, run id, its caller)
    for name in ("working_children_ids", "children_named"):
        read = getattr(team_reads, name)

        def counted(*, run_id, read=read, name=name, **more):
            asked.append((name, run_id, sys._getframe(1).f_code.co_name))
            return read(run_id=run_id, **more)

        monkeypatch.setattr(team_reads, name, counted)
    rows_read: list[list[int]] = []
    read_rows = team_reads.runs_by_ids

    def rows_counted(*, run_ids):
        rows_read.append(run_ids)
        return read_rows(run_ids=run_ids)

    monkeypatch.setattr(team_reads, "runs_by_ids", rows_counted)
    spawn_reads = subagents.spawn_reads

    def spawn_reads_counted(parent_id):
        asked.append(("spawn_reads", parent_id, sys._getframe(2).f_code.co_name))
        return spawn_reads(parent_id)

    monkeypatch.setattr(subagents, "spawn_reads", spawn_reads_counted)
    root = wait_finished(start(alice, "seen research"))

    assert root.status == "done", root.error
    verifier = Run.objects.get(parent=root, kind="verifier")
    assert verifier.status == "done"
    # Its sub-agents read three times: its spawn checking them, wait_subagents finding them,
    # and the verifier's spawn choosing a name none of them has (the spawns read them with
    # the parent, in the writer's batch that holds the tree's lock). Neither its answer nor
    # its ends read them.
    reads = [(name, caller) for name, run_id, caller in asked if run_id == root.pk]
    assert reads == [
        ("spawn_reads", "_spawn_each"),
        ("children_named", "_named_children"),
        ("spawn_reads", "_verifier"),  # verifier_spawn's statements
    ], reads
    # The wait and the verifier's findings come from the rows the children's ends left in
    # the pool (AgentPool.ended), not from reading them again.
    assert rows_read == []
    (waited,) = results(scripted_llm, "seen research", "wait_subagents")
    one, two = Run.objects.filter(parent=root, kind="researcher").order_by("id")
    assert waited == (
        f"## one (run {one.pk}): done\n\none's report\n\n"
        f"## two (run {two.pk}): done\n\ntwo's report"
    )


class RowHeld:
    """Another transaction holds the row of the run named `name` (FOR UPDATE) from hold()
    until `release` is set or 10 s pass: that run's records and its end cannot commit."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.locked, self.release = threading.Event(), threading.Event()

    def hold(self) -> None:
        run_id = Run.objects.get(name=self.name).pk
        threading.Thread(target=self._hold, args=(run_id,), daemon=True).start()
        assert self.locked.wait(timeout=10)

    def answering(self, report: str):
        """The held run's last turn: its row held, then its report."""

        def turn(messages):
            self.hold()
            return reply(report)

        return turn

    def releasing(self, seen: dict[str, str], key: str):
        """The parent's next turn: the held run's status as committed noted in `seen[key]`,
        its row let go, then the parent's draft."""

        def turn(messages):
            seen[key] = Run.objects.get(name=self.name).status
            self.release.set()
            return reply("the draft")

        return turn

    def _hold(self, run_id: int) -> None:
        try:
            with transaction.atomic():
                Run.objects.select_for_update().get(pk=run_id)
                self.locked.set()
                self.release.wait(timeout=10)
        finally:
            from django.db import connection

            connection.close()


def test_a_parent_goes_on_while_its_childs_end_waits_on_the_database(
    agent_pool, scripted_llm, alice, settings
):
    """A child's end wakes its waiting parent as it goes to the writer, not when it commits
    (agents.runtime.ends): here another transaction holds the child's row, so its last
    records and its end cannot commit, and the parent still gets the report and makes its
    next model call. What the parent does next commits after the child's end, and the
    parent finishes after it."""
    settings.RESEARCH_VERIFY_REPORTS = False
    held = RowHeld("held")
    seen: dict[str, str] = {}
    scripted_llm.script(
        "handover research",
        spawn("held", "handover task held"),
        call("wait_subagents"),
        held.releasing(seen, "child"),
    )
    scripted_llm.script("handover task held", held.answering("held's report"))
    root = wait_finished(start(alice, "handover research"))

    assert root.status == "done", root.error
    # The root's draft call came while the child's end could not commit.
    assert seen == {"child": "working"}
    held = child(root, "held")
    (waited,) = results(scripted_llm, "handover research", "wait_subagents")
    assert waited == f"## held (run {held.pk}): done\n\nheld's report"
    assert held.status == "done" and held.report == "held's report"
    assert held.finished_at <= root.finished_at
    # The tree's events are numbered in commit order: the child's end, then the root's step
    # that read its report, then the root's end.
    events = list(Event.objects.filter(root_id=root.pk).values_list("type", "payload"))
    finished = [payload["run"] for kind, payload in events if kind == "run.finished"]
    assert finished == [held.pk, root.pk], events
    child_end = next(
        at
        for at, (kind, payload) in enumerate(events)
        if kind == "run.finished" and payload["run"] == held.pk
    )
    roots_after = [kind for kind, payload in events[child_end:] if payload["run"] == root.pk]
    assert "run.usage" in roots_after  # its draft's model call, written after the child's end


def test_a_parents_end_commits_with_its_last_sub_agents_end(
    agent_pool, scripted_llm, alice, settings
):
    """A sub-agent's end lets the writer's batch linger for its parent's, and the parent's
    end goes behind it instead of waiting for its commit: the research and its verifier, the
    last sub-agent, end in one transaction, the verifier first (one commit less on the
    tree's critical path)."""
    settings.RESEARCH_VERIFY_REPORTS = True
    settings.RESEARCH_WRITER_LINGER_MS = 1000  # the verifier's end waits for its parent's
    scripted_llm.script("together research", reply("the together draft"))
    root = wait_finished(start(alice, "together research"))

    assert root.status == "done", root.error
    verifier = Run.objects.get(parent=root, kind="verifier")
    assert verifier.status == "done", verifier.error
    assert verifier.finished_at == root.finished_at  # stamped by the batch that ended both
    events = list(Event.objects.filter(root_id=root.pk).order_by("seq"))
    finished = [event.payload["run"] for event in events if event.type == "run.finished"]
    assert finished == [verifier.pk, root.pk]


def test_a_parents_end_behind_a_sub_agents_end_that_fails_is_written_after_it(
    agent_pool, scripted_llm, alice, settings, refused_step
):
    """The verifier's last record is refused by the database, so its end, and the research's
    end queued behind it, are not written in their batch: the verifier ends failed with the
    database's error, then the research writes its own end, done with its draft, after
    it."""
    settings.RESEARCH_VERIFY_REPORTS = True
    settings.RESEARCH_WRITER_LINGER_MS = 1000
    scripted_llm.script("refused verifier research", reply("the draft it refuses"))
    scripted_llm.script("the draft it refuses", reply("REFUSED"))  # the verifier's task
    root = wait_finished(start(alice, "refused verifier research"))

    assert root.status == "done", root.error
    assert root.report.startswith("the draft it refuses")
    verifier = Run.objects.get(parent=root, kind="verifier")
    assert verifier.status == "failed" and "this step is refused" in verifier.error
    assert verifier.finished_at < root.finished_at
    events = list(Event.objects.filter(root_id=root.pk).order_by("seq"))
    finished = [event.payload["run"] for event in events if event.type == "run.finished"]
    assert finished == [verifier.pk, root.pk]


def test_a_wait_that_reads_the_rows_takes_a_handed_over_end_as_ended(
    agent_pool, scripted_llm, alice, settings
):
    """A wait for a child this pool never ran reads the children's rows from the database,
    where a sibling whose end is on its way to the writer still shows working: that
    sibling's end, handed over here, counts as ended there too, so the wait returns
    rather than read the rows again and again until the commit."""
    settings.RESEARCH_VERIFY_REPORTS = False
    held = RowHeld("kept")
    seen: dict[str, str] = {}

    def root_spawns(messages):
        # A sub-agent no thread of this pool runs: it ended elsewhere (another worker).
        root = Run.objects.get(topic="read rows research")
        Run.objects.create(
            owner=root.owner,
            parent=root,
            root=root,
            depth=1,
            name="elsewhere",
            reason="it ran elsewhere",
            topic="read rows task elsewhere",
            model=root.model,
            status="done",
            report="elsewhere's report",
        )
        return spawn("kept", "read rows task kept")

    scripted_llm.script(
        "read rows research", root_spawns, call("wait_subagents"), held.releasing(seen, "kept")
    )
    scripted_llm.script("read rows task kept", held.answering("kept's report"))
    root = wait_finished(start(alice, "read rows research"))

    assert root.status == "done", root.error
    assert seen == {"kept": "working"}  # the wait returned before the commit
    (waited,) = results(scripted_llm, "read rows research", "wait_subagents")
    kept, elsewhere = child(root, "kept"), child(root, "elsewhere")
    assert waited == (
        f"## elsewhere (run {elsewhere.pk}): done\n\nelsewhere's report\n\n"
        f"## kept (run {kept.pk}): done\n\nkept's report"
    )
    assert kept.status == "done" and kept.finished_at <= root.finished_at


def test_list_api_filters_a_runs_subagents(agent_pool, scripted_llm, alice, api):
    scripted_llm.script(
        "api research",
        calls(spawn("left", "api left task"), spawn("right", "api right task")),
        call("wait_subagents"),
        reply("root"),
    )
    root = wait_finished(start(alice, "api research"))
    response = api.get(f"/v1/gb/research?parent_id={root.pk}")
    assert response.status_code == 200
    assert sorted(r["name"] for r in response.json()["results"]) == ["left", "right"]
    assert all(r["parent_id"] == root.pk for r in response.json()["results"])
    tree = api.get(f"/v1/gb/research/{root.pk}/tree").json()
    assert [r["name"] for r in tree] == ["", "left", "right"]
    assert tree[0]["tree_cost_usd"] == str(
        sum(Run.objects.get(pk=r["id"]).cost_usd for r in tree)
    ) or float(tree[0]["tree_cost_usd"]) == pytest.approx(
        float(sum(Run.objects.get(pk=r["id"]).cost_usd for r in tree))
    )


def test_deleting_a_working_root_cancels_and_deletes_its_tree(agent_pool, scripted_llm, alice, api):
    scripted_llm.script(
        "doomed tree", spawn("kid", "kid task"), call("wait_subagents"), reply("root")
    )
    scripted_llm.script("kid task", *[slow(0.2, call("list_siblings")) for _ in range(100)])
    root = start(alice, "doomed tree")
    wait_for(lambda: Run.objects.filter(parent=root, status="working").exists())
    assert api.delete(f"/v1/gb/research/{root.pk}").status_code == 204
    assert not Run.objects.filter(root_id=root.pk).exists()
    wait_for(lambda: not agent_pool.is_running(root.pk), timeout=5)


def test_a_wait_for_a_child_no_thread_runs_here_reads_it_and_waits_out_its_slice(
    agent_pool, scripted_llm, alice, settings
):
    """A wait learns that a child this pool runs has ended from the pool; one it does not
    run (recorded before its parent's claim, never started) is read, found working, and
    waited for until the slice ends, not taken for ended."""
    settings.RESEARCH_WAIT_SLICE_SECONDS = 0.5
    asked = []

    def timed(turn):
        def answer(messages):
            asked.append(time.monotonic())
            return turn

        return answer

    scripted_llm.script(
        "unstarted research", timed(call("wait_subagents")), timed(reply("done")), reply("done")
    )
    launch = services.Launch(name="unstarted", reason="never started", task="u", max_steps=3)
    with transaction.atomic():  # queued, not seated: the child is there before its claim
        root = start(alice, "unstarted research")
        services.subagent_create(parent_id=root.pk, launch=launch)
    root = wait_finished(root, timeout=10)

    (wait,) = results(scripted_llm, "unstarted research", "wait_subagents")
    assert wait.startswith("## unstarted (run ") and ": still working" in wait
    assert asked[1] - asked[0] >= 0.5  # the whole slice, not an early return
    assert Run.objects.get(parent=root, name="unstarted").error == PARENT_ENDED


def test_an_orphan_child_no_thread_runs_is_ended_with_its_parent_instead_of_hanging_it(
    agent_pool, scripted_llm, alice
):
    """A child recorded but never started (its start failed, then the process died, and a
    resume queued its parent again) must not keep its parent waiting for ever when the
    parent ends: the parent's claim finds it, and its end ends it."""
    scripted_llm.script(
        "orphaning research", slow(0.1, call("web_search", query="x")), reply("done")
    )
    launch = services.Launch(name="orphan", reason="never started", task="t", max_steps=3)
    with transaction.atomic():  # queued, not seated: the orphan is there before its claim
        root = start(alice, "orphaning research")
        orphan = services.subagent_create(parent_id=root.pk, launch=launch)
    root = wait_finished(root, timeout=10)
    orphan.refresh_from_db()
    assert root.status == "done"
    assert (orphan.status, orphan.error) == ("failed", PARENT_ENDED)


def test_a_sibling_cancelled_before_it_started_has_ended_for_messages(scripted_llm, alice):
    """One slot: the root holds it while it spawns, so "late" is still waiting for a slot
    when the root cancels it; its sibling must then hear that it has ended."""
    from agents.runtime.pool import AgentPool

    scripted_llm.script(
        "one slot research",
        calls(spawn("early", "early task"), spawn("late", "late task")),
        call("cancel_subagent", name="late"),
        call("wait_subagents"),
        reply("root"),
    )
    scripted_llm.script(
        "early task",
        lambda m: (
            wait_for(lambda: not working("late"))
            and call("send_message", to="late", text="are you there?")
        ),
        reply("early"),
    )
    pool = AgentPool(max_active=1).start()
    try:
        root = wait_finished(start(alice, "one slot research"))
    finally:
        pool.shutdown()
    late = child(root, "late")
    assert (late.status, late.error, late.steps) == ("failed", CANCELLED_BY_PARENT, 0)
    assert results(scripted_llm, "early task", "send_message") == [
        'error: "late" has ended: its inbox is gone and the message was not delivered'
    ]
    assert not Message.objects.exists()


def test_a_name_with_a_newline_is_refused_and_a_budget_over_the_limit_is_clipped(
    agent_pool, scripted_llm, alice, settings
):
    settings.RESEARCH_MAX_STEPS_LIMIT = 5
    scripted_llm.script(
        "bad spawns research",
        calls(
            spawn("alpha\n", "task one"),
            spawn("beta", "task two", max_steps=99),
        ),
        call("wait_subagents"),
        reply("root"),
    )
    scripted_llm.script("task two", reply("beta's report"))
    root = wait_finished(start(alice, "bad spawns research", max_steps=5))
    newline, budget = results(scripted_llm, "bad spawns research", "spawn_subagent")
    assert newline.startswith("error: invalid name 'alpha\\n'")
    beta = child(root, "beta")
    # Seed 001: the budget is clipped to the kind's range (and the server's limit), and the
    # number used is the last line of the child's task.
    assert budget.startswith(f'started sub-agent "beta" (run {beta.pk})')
    assert beta.max_steps == 5
    task = scripted_llm.requests_for("task two")[0]["messages"][1]["content"]
    assert task.splitlines()[-1] == (
        "Your step budget: 5 model calls; the last one writes your report."
    )
    assert Run.objects.filter(parent=root).count() == 1


def test_a_sub_agent_that_cannot_start_says_so_and_its_siblings_of_the_turn_still_start(
    agent_pool, scripted_llm, alice, monkeypatch
):
    submit = agent_pool.submit

    def no_thread_for_blocked(run_id, **kwargs):
        if Run.objects.filter(pk=run_id, name="blocked").exists():
            raise RuntimeError("can't start new thread")
        return submit(run_id, **kwargs)

    monkeypatch.setattr(agent_pool, "submit", no_thread_for_blocked)
    scripted_llm.script(
        "unstartable research",
        calls(
            spawn("blocked", "the part no thread is left for"),
            spawn("fine", "the part that starts"),
        ),
        call("wait_subagents"),
        reply("root report"),
    )
    scripted_llm.script("the part that starts", reply("fine report"))

    root = wait_finished(start(alice, "unstartable research"))

    blocked, fine = child(root, "blocked"), child(root, "fine")
    assert results(scripted_llm, "unstartable research", "spawn_subagent") == [
        f'error: sub-agent "blocked" (run {blocked.pk}) could not start: can\'t start new thread',
        f'started sub-agent "fine" (run {fine.pk}): it works in the background on its task; '
        "call wait_subagents to collect its report.",
    ]
    assert (blocked.status, blocked.error) == ("failed", "could not start: can't start new thread")
    assert (fine.status, fine.report) == ("done", "fine report")
    assert root.status == "done"
