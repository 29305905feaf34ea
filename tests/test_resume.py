"""Resume from checkpoints (issue 26): a research outlives its worker and repeats no model call.

Everything is real: two `runagents` workers as processes on this test's PostgreSQL and Redis,
a daphne that only enqueues (the API and the viewer's websocket), and the scripted model over
HTTP. The scripts are policies of the conversation (what a turn answers depends only on the
messages it is sent), so a request that was in flight when its worker died gets the same
answer when it is sent again, and an uninterrupted tree writes the same report.
"""

import json
import re
import time

import pytest

from agents.llm.scripted import call, fail, reply
from agents.messages import get_messenger
from research import endings, services
from research.models import Checkpoint, Event, LLMCall, Resume, Run
from tests import test_scaleout
from tests.conftest import wait_finished, wait_for, watch
from tests.test_scaleout import DEAD_SECONDS, Cluster, tree_active

pytestmark = [pytest.mark.processes, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def cluster(transactional_db, scripted_llm, settings, tmp_path, alice):
    """test_scaleout's cluster: a daphne that only enqueues and `runagents` workers."""
    cluster = Cluster(settings, tmp_path, alice)
    try:
        yield cluster
    finally:
        cluster.stop()


NAMES = ("alpha", "beta", "gamma")
CHECKS = {"alpha": 1, "beta": 3, "gamma": 3}  # alpha ends first; beta and gamma take seconds


def _turns(messages: list[dict]) -> int:
    return sum(message["role"] == "assistant" for message in messages)


def root_policy(tag: str):
    def turn(messages: list[dict]):
        done = _turns(messages)
        if done == 0:
            return call(
                "spawn_subagents",
                subagents=[
                    {"name": name, "reason": f"the {name} part", "task": f"{tag} part {name}"}
                    for name in NAMES
                ],
            )
        if done == 1:
            return call("wait_subagents")
        findings = sorted(set(re.findall(r"FINDING \w+ \d+", messages[-1]["content"])))
        return reply("Report.\n" + "\n".join(findings))

    return turn


def child_policy(name: str):
    def turn(messages: list[dict]):
        done = _turns(messages)
        if done < CHECKS[name]:
            return call("read_messages", wait_seconds=0.5)
        return reply(f"FINDING {name} {done}")

    return turn


def script_tree(llm, tag: str) -> str:
    topic = f"{tag}: survey the canopy in three parts"
    llm.script(topic, *[root_policy(tag)] * 10)
    for name in NAMES:
        llm.script(f"{tag} part {name}", *[child_policy(name)] * 10)
    return topic


def step_of(request: dict) -> int:
    """Which step of its agent a request is: the model answers its conversation holds."""
    return _turns(request["messages"])


def requests_by_step(llm, task: str) -> dict[int, int]:
    counts: dict[int, int] = {}
    for request in llm.requests_for(task):
        counts[step_of(request)] = counts.get(step_of(request), 0) + 1
    return counts


def assert_no_completed_step_sent_twice(llm, tag: str, steps_before: dict[str, int]) -> None:
    """Every step an agent had recorded before its worker died was asked for once."""
    for task, recorded in steps_before.items():
        counts = requests_by_step(llm, task)
        for step in range(recorded):
            assert counts.get(step) == 1, (task, step, counts)


EXPECTED_REPORT = "Report.\nFINDING alpha 1\nFINDING beta 3\nFINDING gamma 3"


def midway(root: Run) -> bool:
    """alpha has ended; beta and gamma have made two of their steps."""
    runs = {run.name: run for run in Run.objects.filter(parent=root.pk)}
    return (
        runs.get("alpha") is not None
        and runs["alpha"].status == "done"
        and all(runs.get(name) and runs[name].steps >= 2 for name in ("beta", "gamma"))
    )


def receive_until(socket, done, timeout: float = 40) -> list[dict]:
    received: list[dict] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        received.append(json.loads(socket.recv(timeout=deadline - time.monotonic())))
        if done(received[-1]):
            break
    else:
        raise AssertionError(f"not seen within {timeout}s: {received[-5:]}")
    while True:
        try:
            received.append(json.loads(socket.recv(timeout=0.5)))
        except TimeoutError:
            return received


def seq_of(event: dict) -> int:
    return event["seq"]


def root_finished(root_id: int, status: str):
    def done(event: dict) -> bool:
        return (
            event["type"] == "run.finished"
            and event["run"] == root_id
            and event["status"] == status
        )

    return done


def test_a_tree_whose_worker_is_killed_resumes_and_writes_the_uninterrupted_report(
    cluster, scripted_llm, alice
):
    """kill -9 the worker of a root with three sub-agents (one done, two working), resume
    it over the API: it ends done with the report an uninterrupted tree writes, no request
    of a completed step is sent twice, and a viewer watching sees every event once, in order."""
    cluster.start(web=True, workers=2)
    baseline = cluster.submit(script_tree(scripted_llm, "Calm"))
    baseline = wait_finished(baseline, timeout=40)
    assert baseline.status == "done", baseline.error

    topic = script_tree(scripted_llm, "Storm")
    root = cluster.submit(topic)
    with watch(cluster.web, root.pk, after=0) as socket:
        wait_for(lambda: midway(root), timeout=30, message="the sub-agents did not get midway")
        victim = cluster.worker_running(root)
        victim.process.kill()
        victim.process.wait()
        wait_for(lambda: not tree_active(root), timeout=DEAD_SECONDS + 5)
        runs = {run.name: run for run in Run.objects.filter(root_id=root.pk)}
        assert runs[""].error == endings.SERVER_STOPPED
        assert (runs["alpha"].status, runs["beta"].status) == ("done", "failed")
        steps_before = {topic: runs[""].steps} | {
            f"Storm part {name}": runs[name].steps for name in NAMES
        }
        cost_before = Run.objects.get(pk=root.pk).tree_cost_usd
        calls_before = LLMCall.objects.filter(run__root_id=root.pk).count()
        for run in runs.values():  # a killed agent never closed its inbox
            get_messenger().close(run.pk)

        response = cluster.api.post(f"/v1/gb/research/{root.pk}/resume")
        assert response.status_code == 202, response.text
        body = response.json()
        assert body["research"]["status"] == "queued"
        assert body["ended_with"] == endings.SERVER_STOPPED
        assert sorted(body["resumed_run_ids"]) == sorted(
            [runs[""].pk, runs["beta"].pk, runs["gamma"].pk]
        )
        received = receive_until(socket, root_finished(root.pk, "done"))

    root.refresh_from_db()
    assert (root.status, root.error) == ("done", "")
    assert root.report == baseline.report
    assert root.report == EXPECTED_REPORT
    assert_no_completed_step_sent_twice(scripted_llm, "Storm", steps_before)
    # alpha finished before the kill: never asked again.
    assert len(scripted_llm.requests_for("Storm part alpha")) == CHECKS["alpha"] + 1
    assert scripted_llm.unscripted == [] and scripted_llm.errors == []

    # The viewer: every stored event once, in order, across the resume. The killed worker
    # may have committed its last events and died before pushing them: those (and only
    # those) the viewer reads back by seq from the stored events, as the page does when a
    # number is missing for long (static/page/state.js, fillGap).
    stored = [row.payload for row in Event.objects.filter(root_id=root.pk).order_by("seq")]
    assert [event["seq"] for event in stored] == list(range(1, len(stored) + 1))
    seen = {event["seq"] for event in received}
    assert len(seen) == len(received)  # none twice
    resume = Resume.objects.get(root_id=root.pk)
    unpushed = [event for event in stored if event["seq"] not in seen]
    assert all(event["seq"] <= resume.seq_before for event in unpushed), unpushed
    read_back = cluster.api.get(f"/v1/gb/research/{root.pk}/events?after=0").json()
    by_seq = {row["seq"]: row["payload"] for row in read_back}
    page = sorted(received + [by_seq[event["seq"]] for event in unpushed], key=seq_of)
    assert page == stored
    # What the kill caught between commit and push: the last events the worker committed.
    # It pushes in number order, so they follow one another with nothing pushed between;
    # an agent's end (its last record, the citations check's state, its report and its
    # finish) at the most.
    tail = [event["seq"] for event in unpushed]
    assert not tail or tail == list(range(tail[0], tail[-1] + 1)), tail
    assert len(unpushed) <= 5, unpushed
    resumed_states = [
        event
        for event in stored
        if event["type"] == "run.state" and event.get("detail") == endings.RESUMED
    ]
    assert sorted(event["run"] for event in resumed_states) == sorted(body["resumed_run_ids"])

    # Cost honesty: the ledger splits at the resume, and the tree's total counts both.
    assert resume.cost_before_usd == cost_before
    first, second = services.spend_by_attempt(root_id=root.pk)
    assert first["calls"] == calls_before and first["cost_usd"] == cost_before
    assert second["calls"] > 0
    assert first["cost_usd"] + second["cost_usd"] == Run.objects.get(pk=root.pk).tree_cost_usd
    assert Checkpoint.objects.filter(run__root_id=root.pk).count() >= sum(steps_before.values())


def test_a_sigterm_hands_the_tree_back_and_another_worker_resumes_it_automatically(
    cluster, scripted_llm, monkeypatch, alice
):
    """With RESEARCH_RESUME_INTERRUPTED=true, SIGTERM to the worker of a tree in the middle:
    it stops claiming, its agents finish the step they are in, and its runs go back to the
    queue; the other worker takes the tree up and it ends done with the same report, no
    completed step asked for twice."""
    monkeypatch.setitem(test_scaleout.CLUSTER_ENV, "RESEARCH_RESUME_INTERRUPTED", "true")
    cluster.start(web=False, workers=2)
    topic = script_tree(scripted_llm, "Deploy")
    root = services.run_start(owner=alice, topic=topic)
    wait_for(lambda: midway(root), timeout=30, message="the sub-agents did not get midway")
    victim = cluster.worker_running(root)
    victim_id = root.worker_id
    assert victim.stop() == 0  # SIGTERM; it exits cleanly within its grace period

    resume = wait_for(lambda: Resume.objects.filter(root_id=root.pk).first(), timeout=20)
    assert resume.by == Resume.By.AUTOMATIC and resume.ended_with == endings.SERVER_STOPPED
    runs = {run.pk: run for run in Run.objects.filter(root_id=root.pk)}
    steps_before = {runs[pk].topic: _recorded_before(pk, resume) for pk in runs}
    root = wait_finished(root, timeout=40)
    assert (root.status, root.error) == ("done", "")
    assert root.report == EXPECTED_REPORT
    assert root.worker_id != victim_id
    assert_no_completed_step_sent_twice(scripted_llm, "Deploy", steps_before)


def _recorded_before(run_id: int, resume: Resume) -> int:
    """The model calls a run had recorded when the resume queued it again."""
    return LLMCall.objects.filter(run_id=run_id, at__lt=resume.at).count()


def test_a_research_whose_endpoint_failed_for_a_while_resumes_when_it_is_back(
    agent_pool, scripted_llm, alice, api, settings
):
    """The model endpoint fails every try of the root's third call: the research ends failed
    with the client's words. The analyst resumes it once the endpoint is back: the two calls
    it had answered are not sent again, and it ends done."""
    settings.LLM_MAX_RETRIES = 0
    topic = "Endpoint outage: two checks then a report"
    scripted_llm.script(
        topic,
        call("list_siblings"),
        call("list_siblings"),
        fail(500, times=1),
        reply("The report after the outage."),
    )
    run = services.run_start(owner=alice, topic=topic, max_steps=5)
    run = wait_finished(run, timeout=20)
    assert run.status == "failed" and run.error.startswith("llm: 500"), run.error
    assert endings.resumable(status=run.status, error=run.error)
    before = len(scripted_llm.requests_for(topic))

    response = api.post(f"/v1/gb/research/{run.pk}/resume")
    assert response.status_code == 202, response.text
    run = wait_finished(run, timeout=20)
    assert (run.status, run.report) == ("done", "The report after the outage.")
    requests = scripted_llm.requests_for(topic)
    assert len(requests) == before + 1  # only the call that had failed
    assert step_of(requests[-1]) == 2 and step_of(requests[-2]) == 2


def test_a_resumed_root_whose_verifier_flags_nothing_clears_the_flags_of_its_last_life(
    agent_pool, scripted_llm, alice, api, settings
):
    """A root that flagged claims in a life that never ended (its worker died between its
    verification and its end) and whose verifier now flags none ends with no flags: only a
    root's first life has nothing to clear (agents.loop.review.coverage)."""
    settings.LLM_MAX_RETRIES = 0
    settings.RESEARCH_VERIFY_REPORTS = True
    topic = "Stale flags: a check then a report"
    scripted_llm.script(
        topic, call("list_siblings"), fail(500, times=1), reply("The report, checked again.")
    )
    run = wait_finished(services.run_start(owner=alice, topic=topic, max_steps=5), timeout=20)
    assert run.status == "failed", run.error
    stale = [{"claim": "an old claim", "why": "its last life's verifier"}]
    services.report_flags_set(run_id=run.pk, claims=stale)

    response = api.post(f"/v1/gb/research/{run.pk}/resume")
    assert response.status_code == 202, response.text
    run = wait_finished(run, timeout=20)

    assert run.status == "done", run.error
    assert run.report.startswith("The report, checked again.")
    assert Run.objects.filter(parent=run, kind="verifier", status="done").exists()
    assert run.flagged_claims == []


def test_a_failed_sub_agent_whose_error_its_parent_read_is_not_run_again(
    agent_pool, scripted_llm, alice, api, settings
):
    settings.LLM_MAX_RETRIES = 0
    topic = "Fragile child: spawn, read its failure, then the endpoint fails"
    scripted_llm.script(
        topic,
        call("spawn_subagent", name="fragile", reason="one part", task="FRAGILE-TASK: a part"),
        call("wait_subagents"),
        fail(500),
        reply("The lead's report without the fragile part."),
    )
    scripted_llm.script("FRAGILE-TASK", fail(500), reply("never asked"))
    run = wait_finished(services.run_start(owner=alice, topic=topic), timeout=20)
    assert run.error.startswith("llm: 500"), run.error
    child = Run.objects.get(parent=run)
    assert child.error.startswith("llm: 500")  # resumable itself, but its parent read it

    response = api.post(f"/v1/gb/research/{run.pk}/resume")
    assert response.status_code == 202, response.text
    assert response.json()["resumed_run_ids"] == [run.pk]
    run = wait_finished(run, timeout=20)
    assert run.report == "The lead's report without the fragile part."
    assert len(scripted_llm.requests_for("FRAGILE-TASK")) == 1


def test_a_done_or_cancelled_research_is_not_resumable_and_another_owner_gets_404(
    api, api_for, bob, run_factory
):
    def ended(**outcome) -> Run:
        run = run_factory()
        services.run_finish(run_id=run.pk, **outcome)
        return run

    response = api.post(f"/v1/gb/research/{ended(report='r').pk}/resume")
    assert response.status_code == 409
    assert "ended done" in response.json()["detail"]

    cancelled = ended(error=endings.CANCELLED_BY_USER)
    response = api.post(f"/v1/gb/research/{cancelled.pk}/resume")
    assert response.status_code == 409
    assert "was cancelled" in response.json()["detail"]

    queued = run_factory()
    response = api.post(f"/v1/gb/research/{queued.pk}/resume")
    assert response.status_code == 409
    assert "still queued" in response.json()["detail"]

    interrupted = ended(error=endings.WORKER_LOST)
    assert api_for(bob).post(f"/v1/gb/research/{interrupted.pk}/resume").status_code == 404
    assert Run.objects.get(pk=interrupted.pk).status == "failed"

    run_factory(), run_factory()  # with `queued`, three working: a resume would be a fourth
    response = api.post(f"/v1/gb/research/{interrupted.pk}/resume")
    assert response.status_code == 429
    assert "the limit is 3" in response.json()["detail"]
    assert Run.objects.get(pk=interrupted.pk).status == "failed"


def test_a_resumed_research_does_not_count_the_time_it_was_down_as_worked(api, run_factory):
    """A research interrupted for an hour said it had worked an hour more once resumed: the
    clock ran from its start to now, the outage inside."""
    from datetime import timedelta

    from django.utils import timezone

    root = run_factory()
    started = timezone.now() - timedelta(hours=1, seconds=12)
    Run.objects.filter(pk=root.pk).update(status="working", started_at=started)
    services.run_finish(run_id=root.pk, error=endings.WORKER_LOST)
    Run.objects.filter(pk=root.pk).update(finished_at=started + timedelta(seconds=12))
    before = Run.objects.get(pk=root.pk).worked_seconds()

    assert api.post(f"/v1/gb/research/{root.pk}/resume").status_code == 202
    resumed = Run.objects.get(pk=root.pk)

    assert round(before) == 12
    assert resumed.finished_at is None and resumed.status == "queued"
    assert 12 <= resumed.worked_seconds() < 14  # not 3,612
    assert api.get(f"/v1/gb/research/{root.pk}").json()["worked_seconds"] < 14
