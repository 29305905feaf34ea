"""The lead's plan, the analyst's review of it, the verifier before the report and the
analyst's notes (issue 14, seed 001): through the real loop, pool, database and HTTP API, the
model scripted over HTTP."""

import json
import threading
import time
from datetime import timedelta
from decimal import Decimal

import httpx
import pytest
from django.db import connection
from django.test import Client
from django.urls import reverse
from django.utils import timezone
from rest_framework.authtoken.models import Token

from agents.llm.scripted import call, calls, fail, reply, slow
from agents.loop.review import COVERAGE_HEADING, Verdict, coverage_section, parse_verdict
from frontend.rendering import render_report
from research import services
from research.models import Event, Message, Plan, Run, RunState, Step
from tests.conftest import start_daphne, wait_finished, wait_for
from tests.helpers import results, start

pytestmark = pytest.mark.django_db(transaction=True)


def spawn(name: str, task: str, **extra):
    return call("spawn_subagent", name=name, reason=f"{name} covers its part", task=task, **extra)


def user_messages(request: dict) -> list[str]:
    return [m["content"] for m in request["messages"] if m["role"] == "user"]


def plan_url(run: Run) -> str:
    return f"/v1/gb/research/{run.pk}/plan"


# --- the plan ------------------------------------------------------------------------------


def cited_reply(text: str, url: str):
    """A sub-agent's turns that read a page and cite it: what covers its plan item."""
    return call("read_page", url=url), reply(f"{text} ([the page]({url}))")


def test_plan_items_are_covered_by_named_sub_agents_and_one_is_reported_as_a_gap(
    agent_pool, scripted_llm, web, alice, api
):
    topic = "Otters: habitat, diet and predators"
    scripted_llm.script(
        topic,
        call("write_plan", items=["Habitat", "Diet", "Predators"]),
        call("write_plan", items=["Habitat of otters", "Diet of otters", "Predators of otters"]),
        calls(
            spawn("habitat", "where otters live", plan_item=1),
            spawn("diet", "what otters eat", plan_item=2),
            spawn("stray", "nothing in particular", plan_item=7),
        ),
        call("wait_subagents"),
        reply("# Otters\n\nThey live by rivers and eat fish."),
    )
    scripted_llm.script(
        "where otters live", *cited_reply("Rivers and coasts.", f"{web.url}/notes.txt")
    )
    scripted_llm.script("what otters eat", *cited_reply("Fish, mostly.", f"{web.url}/article"))
    root = wait_finished(start(alice, topic))

    written, revised = results(scripted_llm, topic, "write_plan")
    assert written.startswith("plan saved (version 1):\n1. Habitat\n2. Diet\n3. Predators")
    assert revised.startswith("plan saved (version 2):")
    stray = results(scripted_llm, topic, "spawn_subagent")[2]
    assert stray == "error: plan item 7 does not exist: your plan has items 1 to 3"

    plan = api.get(plan_url(root)).json()
    assert plan["version"] == 2
    assert [(item["text"], item["status"]) for item in plan["items"]] == [
        ("Habitat of otters", "covered"),
        ("Diet of otters", "covered"),
        ("Predators of otters", "gap"),
    ]
    assert plan["items"][0]["agents"][0]["name"] == "habitat"
    assert [version["items"][0] for version in plan["history"]] == ["Habitat", "Habitat of otters"]
    # The report ends with what was not covered.
    assert root.report.endswith(
        f"{COVERAGE_HEADING}\n\nPlan items not covered:\n- Item 3: Predators of otters (gap)"
    )
    assert Run.objects.get(name="diet").plan_item == "Diet of otters"


def test_a_sub_agent_that_only_passes_on_a_siblings_source_leaves_its_item_a_gap(
    agent_pool, scripted_llm, web, alice, api
):
    """An agent on "Tidal bores" found nothing, quoted a sibling's message about the
    import system with its source, and its item read covered: "Every item of the plan was
    covered", above the verifier's "tidal found no source for its part". Its own sources
    (or its sub-agents') cover an item, not one it was told of."""
    topic = "Otters: habitat and diet, one after the other"
    notes = f"{web.url}/notes.txt"
    scripted_llm.script(
        topic,
        call("write_plan", items=["Habitat of otters", "Diet of otters"]),
        spawn("habitat", "where otters live", plan_item=1),
        call("wait_subagents"),
        spawn("diet", "what otters eat", plan_item=2),
        call("wait_subagents"),
        reply("# Otters\n\nThey live by rivers."),
    )
    scripted_llm.script("where otters live", *cited_reply("Rivers and coasts.", notes))
    scripted_llm.script("what otters eat", reply(f"A sibling wrote: rivers ([notes]({notes}))."))
    root = wait_finished(start(alice, topic))

    diet = Run.objects.get(name="diet")
    assert diet.citations.get().verified  # the tree saw it: verified, but not by diet
    plan = api.get(plan_url(root)).json()
    assert [(item["text"], item["status"]) for item in plan["items"]] == [
        ("Habitat of otters", "covered"),
        ("Diet of otters", "gap"),
    ]
    assert root.report.endswith("Plan items not covered:\n- Item 2: Diet of otters (gap)")


def test_a_plan_item_before_any_plan_and_a_bad_plan_are_refused(agent_pool, scripted_llm, alice):
    topic = "Beavers without a plan"
    scripted_llm.script(
        topic,
        spawn("early", "an early task", plan_item=1),
        call("write_plan", items=["same", "same"]),
        call("write_plan", items=["   "]),
        reply("done"),
    )
    wait_finished(start(alice, topic))
    (early,) = results(scripted_llm, topic, "spawn_subagent")
    assert early == "error: you have no plan yet: call write_plan before naming a plan_item"
    twice, empty = results(scripted_llm, topic, "write_plan")
    assert twice == "error: plan item 'same' appears twice."
    assert empty == "error: plan item 1 is empty."
    assert not Plan.objects.exists()


def test_the_plan_of_another_users_research_is_not_found(api_for, bob, run_factory):
    run = run_factory(topic="Alice's secret research")
    assert api_for(bob).get(plan_url(run)).status_code == 404
    assert api_for(bob).post(f"{plan_url(run)}/approve", {}, format="json").status_code == 404


# --- review before work --------------------------------------------------------------------


def client_for(server, user) -> httpx.Client:
    token, _ = Token.objects.get_or_create(user=user)
    return httpx.Client(
        base_url=f"{server.url}/v1/gb", headers={"Authorization": f"Token {token.key}"}, timeout=10
    )


def test_a_reviewed_plan_waits_for_approval_and_resumes_after_a_server_restart(
    transactional_db, scripted_llm, web, settings, tmp_path, alice
):
    topic = "Kingfishers: nests and food"
    scripted_llm.script(
        topic,
        call("write_plan", items=["Nests", "Food"]),
        # After the approval: one researcher per item of the edited plan, then the report.
        calls(
            spawn("nests", "kingfisher nests", plan_item=1),
            spawn("food", "kingfisher food", plan_item=2),
            spawn("range", "kingfisher range", plan_item=3),
        ),
        call("wait_subagents"),
        reply("Kingfisher report."),
    )
    for task in ("kingfisher nests", "kingfisher food", "kingfisher range"):
        scripted_llm.script(task, *cited_reply(f"{task}: found", f"{web.url}/article"))

    server = start_daphne(settings, tmp_path)
    try:
        with client_for(server, alice) as client:
            started = client.post("/research", json={"topic": topic, "review_plan": True})
            assert started.status_code == 201 and started.json()["review_plan"] is True
            root_id = started.json()["id"]
            wait_for(lambda: client.get(f"/research/{root_id}").json()["status"] == "paused")
            paused = client.get(f"/research/{root_id}").json()
            assert paused["state"] == "reviewing"
            plan = client.get(f"/research/{root_id}/plan").json()
            assert plan["awaiting_review"] and not plan["approved"]
            assert [item["status"] for item in plan["items"]] == ["open", "open"]
    finally:
        server.stop()
    # A paused research costs nothing: no thread, no model call, and the stopped server left
    # it paused rather than failed.
    requests_while_paused = len(scripted_llm.requests_for(topic))
    assert requests_while_paused == 1
    assert Run.objects.get(pk=root_id).status == "paused"

    server = start_daphne(settings, tmp_path)
    try:
        with client_for(server, alice) as client:
            time.sleep(1)  # the new server's pool is up and claims nothing meanwhile
            assert len(scripted_llm.requests_for(topic)) == requests_while_paused
            bad = client.post(f"/research/{root_id}/plan/approve", json={"items": ["", "x"]})
            assert bad.status_code == 400
            assert bad.json() == {"items": ["plan item 1 is empty."]}
            edited = ["Where kingfishers nest", "What kingfishers eat", "Their range"]
            approved = client.post(f"/research/{root_id}/plan/approve", json={"items": edited})
            assert approved.status_code == 200, approved.text
            assert approved.json()["approved"] and approved.json()["version"] == 2
            again = client.post(f"/research/{root_id}/plan/approve", json={})
            assert again.status_code == 409
            assert "is not waiting for a plan review: it is " in again.json()["detail"]
            wait_for(
                lambda: client.get(f"/research/{root_id}").json()["status"] == "done", timeout=30
            )
            plan = client.get(f"/research/{root_id}/plan").json()
    finally:
        server.stop()

    resumed = scripted_llm.requests_for(topic)[requests_while_paused]
    assert user_messages(resumed)[1] == (
        "The analyst approved your plan as the analyst edited it (version 2):\n"
        "1. Where kingfishers nest\n2. What kingfishers eat\n3. Their range\n\n"
        "Carry it out now: start the sub-agents it needs, each naming the plan_item it "
        "covers, research your own part, then write your report."
    )
    assert [item["status"] for item in plan["items"]] == ["covered"] * 3
    assert [version["author"] for version in plan["history"]] == ["agent", "analyst"]
    root = Run.objects.get(pk=root_id)
    assert root.report.startswith("Kingfisher report.")
    assert root.steps == 4  # one before the pause, three after


def test_cancelling_a_paused_research_keeps_its_plan(agent_pool, scripted_llm, alice, api):
    topic = "Herons: a plan then a cancel"
    scripted_llm.script(topic, call("write_plan", items=["Nesting", "Feeding"]))
    root = start(alice, topic, review_plan=True)
    wait_for(lambda: Run.objects.get(pk=root.pk).status == "paused")
    assert api.post(f"/v1/gb/research/{root.pk}/cancel").status_code == 202
    root = wait_finished(root)
    assert (root.status, root.error) == ("failed", "cancelled by the user")
    plan = api.get(plan_url(root)).json()
    # Open, not gaps: the research wrote no report in which they could be missing.
    assert [(item["text"], item["status"]) for item in plan["items"]] == [
        ("Nesting", "open"),
        ("Feeding", "open"),
    ]


# --- verification before the report ----------------------------------------------------------


def test_the_verifier_flags_a_claim_whose_source_no_agent_read_and_the_report_lists_it(
    agent_pool, scripted_llm, alice, api, settings
):
    settings.RESEARCH_VERIFY_REPORTS = True
    topic = "Where do otters sleep?"
    invented = "https://invented.example/otter-beds"
    draft = f"# Otters\n\nOtters sleep in holts, dens by the water [beds]({invented})."
    verifier_tasks = []

    def verifier_turn(messages):
        verifier_tasks.append(messages[1]["content"])
        return reply(
            "## Unsupported claims\n"
            '- "Otters sleep in holts, dens by the water": the cited page was never read.\n\n'
            "## Gaps\n- Nothing on sea otters."
        )

    scripted_llm.script(topic, reply(draft), reply("# Otters\n\nRevised: unverified."))
    scripted_llm.script("Check this draft report", verifier_turn)
    root = wait_finished(start(alice, topic))

    verifier = Run.objects.get(parent=root)
    assert (verifier.name, verifier.kind, verifier.status) == ("verifier", "verifier", "done")
    (task,) = verifier_tasks
    assert draft in task
    assert f"- {invented}: NO AGENT OF THIS RESEARCH READ IT" in task
    revision = user_messages(scripted_llm.requests_for(topic)[1])[-1]
    assert revision.startswith("A verifier read your draft and the sources it cites.")
    assert root.report == (
        "# Otters\n\nRevised: unverified.\n\n"
        f"{COVERAGE_HEADING}\n\n"
        "Claims the verifier could not support:\n"
        '- "Otters sleep in holts, dens by the water": the cited page was never read.\n\n'
        "Gaps the verifier noted:\n- Nothing on sea otters."
    )
    # The page marks the claim where the report holds it.
    client = Client()
    client.force_login(alice)
    panel = client.get(reverse("agent-panel", args=[root.pk, root.pk])).content.decode()
    assert (
        '<mark class="flagged-claim" title="the verifier could not support this claim: the '
        'cited page was never read.">Otters sleep in holts, dens by the water</mark>'
    ) in panel
    report = api.get(f"/v1/gb/research/{root.pk}/report").json()
    assert report["flagged_claims"] == [
        {
            "claim": "Otters sleep in holts, dens by the water",
            "why": "the cited page was never read.",
        }
    ]
    # The lead waits for its verifier from the verifier's spawn on: its state and the
    # verifier's creation are one commit, one publish (the same time), the state first.
    events = [event.payload for event in Event.objects.filter(root_id=root.pk).order_by("seq")]
    created = next(
        index
        for index, event in enumerate(events)
        if event["type"] == "run.created" and event["run"] == verifier.pk
    )
    waiting = events[created - 1]
    assert (waiting["type"], waiting["run"], waiting["state"], waiting["detail"]) == (
        "run.state",
        root.pk,
        "waiting",
        "verifier checks the draft",
    )
    assert waiting["at"] == events[created]["at"]
    assert RunState.objects.filter(run=root, state="waiting", detail=waiting["detail"]).count() == 1


def transaction_of(model, pk: int) -> str:
    """The PostgreSQL transaction that wrote the row (its xmin): rows written in one
    commit share it."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT xmin::text FROM {model._meta.db_table} WHERE id = %s", [pk])
        return cursor.fetchone()[0]


@pytest.mark.parametrize("cap", [None, Decimal("50")])
def test_the_leads_own_reading_reaches_its_review_and_its_draft_commits_with_the_verifier(
    agent_pool, scripted_llm, web, alice, settings, cap
):
    """The lead reads a page for its one plan item and drafts at once (the scripted model
    answers in no time). With the draft's record and the verifier's spawn in one batch, the
    verifier is still told what the lead read and the item still counts as covered (the
    coverage reads the lead's tool steps). The draft's model call and the verifier's spawn
    are one commit (issue 25); under a cost cap the spawn reads the tree's cost with the
    draft's counted, so it commits after it."""
    if connection.vendor != "postgresql":
        pytest.skip("a row's transaction is PostgreSQL's xmin")
    settings.RESEARCH_VERIFY_REPORTS = True
    settings.RESEARCH_TREE_COST_CAP_USD = cap
    topic = f"Where otters sleep, read by the lead {cap}"
    url = f"{web.url}/notes.txt"
    draft = f"# Otters\n\nThey sleep in holts ([the notes]({url}))."
    verifier_tasks = []

    def verifier_turn(messages):
        verifier_tasks.append(messages[1]["content"])
        return reply("## Unsupported claims\nNone.\n\n## Gaps\nNone.")

    scripted_llm.script(
        topic,
        call("write_plan", items=["Where otters sleep"]),
        call("read_page", url=url),
        reply(draft),
        reply(draft),  # the revision after the findings
    )
    scripted_llm.script("Check this draft report", verifier_turn)
    root = wait_finished(start(alice, topic))

    assert root.status == "done", root.error
    (task,) = verifier_tasks
    assert f"- {url}: page seen by the lead: " in task
    assert "Every item of the plan (1) was covered." in root.report
    drafted = Step.objects.filter(run=root, kind="model", output=draft).order_by("id").first()
    waiting = RunState.objects.get(run=root, state="waiting", detail="verifier checks the draft")
    together = transaction_of(Step, drafted.pk) == transaction_of(RunState, waiting.pk)
    assert together is (cap is None)


def test_a_draft_is_written_before_its_lead_waits_for_the_sub_agents_it_cancels(
    agent_pool, scripted_llm, alice, settings
):
    """The lead answers twice while its sub-agent is still in a slow model call: its draft
    ends it (cancelled), and the draft's record, held back for the verifier's spawn, is
    written before the lead waits for that sub-agent to stop, not after."""
    settings.RESEARCH_VERIFY_REPORTS = True
    topic = "A lead that ends while its sub-agent works"
    scripted_llm.script(
        topic,
        spawn("slowpoke", "a slow facet of the lead's topic"),
        reply("an early answer"),
        reply("the draft, written early"),
        reply("the draft, revised"),
    )
    scripted_llm.script("a slow facet", slow(5, reply("too late")))
    scripted_llm.script("Check this draft report", reply("## Unsupported claims\nNone."))
    root = start(alice, topic)
    wait_for(lambda: Run.objects.filter(parent=root, name="slowpoke").exists(), timeout=10)

    def drafted() -> bool:
        return Step.objects.filter(run=root, output="the draft, written early").exists()

    wait_for(drafted, timeout=3, message="the draft was not written while the lead waited")
    child = Run.objects.get(parent=root, name="slowpoke")
    assert child.status == "working"  # still in its model call: the lead waits for it
    assert not Run.objects.filter(parent=root, kind="verifier").exists()
    root = wait_finished(root)
    assert root.status == "done", root.error
    child = Run.objects.get(pk=child.pk)
    assert child.finished_at <= root.finished_at  # the lead waited for it to stop


@pytest.mark.parametrize(
    ("verifier_turn", "why"),
    [
        (fail(500, times=3), "llm: 500 from 127.0.0.1:"),
        (reply("Looks fine to me."), "the verifier's report has no 'Unsupported claims' section"),
    ],
)
def test_a_verifier_that_fails_leaves_the_draft_and_says_so(
    agent_pool, scripted_llm, alice, settings, verifier_turn, why
):
    settings.RESEARCH_VERIFY_REPORTS = True
    topic = "A draft the verifier cannot check"
    scripted_llm.script(topic, reply("The draft."))
    scripted_llm.script("Check this draft report", verifier_turn)
    root = wait_finished(start(alice, topic))
    assert root.status == "done"
    # No revision round: the draft stands, and its last section says it is unverified.
    assert len(scripted_llm.requests_for(topic)) == 1
    prefix = f"The draft.\n\n{COVERAGE_HEADING}\n\nThe report could not be verified: "
    assert root.report.startswith(prefix)
    assert why in root.report


# --- notes from the analyst ----------------------------------------------------------------


def held_turn(answer: str):
    """A sub-agent's turn that answers `answer` only once the event it comes with is set (at
    most 30 s): its parent waits on it meanwhile."""
    release = threading.Event()

    def turn(messages):
        release.wait(30)
        return reply(answer)

    return release, turn


def test_a_note_releases_a_waiting_root_and_its_next_round_contains_it(
    agent_pool, scripted_llm, alice, api
):
    topic = "Owls: a root that waits"
    child_may_end, child_turn = held_turn("owl child report")
    scripted_llm.script(
        topic,
        spawn("slowpoke", "slow owl errand"),
        call("wait_subagents"),
        call("wait_subagents"),
        reply("Owl report."),
    )
    scripted_llm.script("slow owl errand", child_turn)
    root = start(alice, topic)
    wait_for(lambda: Run.objects.filter(pk=root.pk, state="waiting").exists())
    sent_at = time.monotonic()
    response = api.post(
        f"/v1/gb/research/{root.pk}/notes", {"text": "Focus on barn owls."}, format="json"
    )
    assert response.status_code == 201, response.content
    note = response.json()
    assert (note["from_analyst"], note["from_name"], note["to_run_id"]) == (
        True,
        "analyst",
        root.pk,
    )
    # The wait (a 300 s slice) ends at once, and the root's next round holds the note.
    wait_for(lambda: len(scripted_llm.requests_for(topic)) >= 3, timeout=5)
    released_after = time.monotonic() - sent_at
    child_may_end.set()
    root = wait_finished(root)

    third = scripted_llm.requests_for(topic)[2]
    assert any(text.endswith("] Focus on barn owls.") for text in user_messages(third))
    assert any(text.startswith("[Note from the analyst, ") for text in user_messages(third))
    waited = results(scripted_llm, topic, "wait_subagents")[0]
    assert waited.endswith("The wait ended early: a note from the analyst arrived; it follows.")
    assert released_after < 5
    stored = Message.objects.get(to_run=root)
    assert (stored.from_run, stored.author, stored.read_at is not None) == (None, alice, True)
    listed = api.get(f"/v1/gb/research/{root.pk}/messages").json()
    assert [(m["from_name"], m["text"]) for m in listed] == [("analyst", "Focus on barn owls.")]


@pytest.fixture
def watch_a_minute_away(settings):
    """The pool's timed look at its agents' flags a minute away (set before the pool
    starts): a note that reaches an agent sooner came through its announcement."""
    settings.RESEARCH_CANCEL_WATCH_SECONDS = 60


def test_a_note_reaches_a_waiting_root_when_sent_not_at_the_pools_next_look(
    watch_a_minute_away, agent_pool, scripted_llm, alice, api
):
    topic = "Wrens: a root told at once"
    child_may_end, child_turn = held_turn("wren child report")
    scripted_llm.script(
        topic, spawn("dawdler", "slow wren errand"), call("wait_subagents"), reply("Wren report.")
    )
    scripted_llm.script("slow wren errand", child_turn)
    root = start(alice, topic)
    wait_for(lambda: Run.objects.filter(pk=root.pk, state="waiting").exists())
    response = api.post(
        f"/v1/gb/research/{root.pk}/notes", {"text": "Wrens are loud."}, format="json"
    )
    assert response.status_code == 201, response.content
    try:
        # The wait ends on the note, long before the pool's look a minute away would see it.
        wait_for(
            lambda: len(scripted_llm.requests_for(topic)) >= 3,
            timeout=10,
            message="the waiting root did not hear of the note",
        )
    finally:
        child_may_end.set()
    third = scripted_llm.requests_for(topic)[2]
    assert any(text.endswith("] Wrens are loud.") for text in user_messages(third))
    wait_finished(root)


def test_a_note_releases_a_sub_agent_waiting_for_messages(agent_pool, scripted_llm, alice, api):
    topic = "Swifts: a child that listens"
    scripted_llm.script(
        topic, spawn("listener", "listening swift errand"), call("wait_subagents"), reply("r")
    )
    scripted_llm.script(
        "listening swift errand", call("read_messages", wait_seconds=60), reply("heard it")
    )
    root = start(alice, topic)
    wait_for(lambda: Run.objects.filter(name="listener", state="waiting").exists())
    listener = Run.objects.get(name="listener")
    response = api.post(
        f"/v1/gb/research/{listener.pk}/notes", {"text": "Swifts sleep on the wing."}, format="json"
    )
    assert response.status_code == 201
    wait_finished(root, timeout=10)
    (read,) = results(scripted_llm, "listening swift errand", "read_messages")
    assert read == "No new messages. A note from the analyst arrived; it follows."
    last = scripted_llm.requests_for("listening swift errand")[-1]
    assert any(text.endswith("] Swifts sleep on the wing.") for text in user_messages(last))


def test_notes_that_cannot_be_sent_are_refused_with_the_reason(api, api_for, bob, run_factory):
    run = run_factory(topic="Alice's research")
    assert (
        api_for(bob)
        .post(f"/v1/gb/research/{run.pk}/notes", {"text": "hi"}, format="json")
        .status_code
        == 404
    )
    empty = api.post(f"/v1/gb/research/{run.pk}/notes", {"text": "  \x1b "}, format="json")
    assert empty.status_code == 400 and empty.json() == {"text": ["text must not be empty."]}
    services.run_finish(run_id=run.pk, report="done")
    ended = api.post(f"/v1/gb/research/{run.pk}/notes", {"text": "too late"}, format="json")
    assert ended.status_code == 409
    assert ended.json() == {
        "detail": f"the root agent (run {run.pk}) has ended (done): a note reaches only an "
        "agent that is still working."
    }
    assert not Message.objects.exists()


# --- flagged claims on the page --------------------------------------------------------------


def test_flagged_claims_are_marked_in_text_and_never_inside_markup():
    report = (
        "Otters sleep in holts by the water, see [the otter page](https://otters.example/beds).\n\n"
        'A claim with <script>alert("x")</script> in it.'
    )
    claims = [
        {"claim": "Otters sleep in holts by the water", "why": 'no "source" <read>'},
        {"claim": "https://otters.example/beds", "why": "a URL is not a claim"},
        {"claim": "the otter page", "why": "link text"},
        {"claim": "noopener noreferrer", "why": "an attribute value"},
        {"claim": '<script>alert("x")</script>', "why": "markup"},
    ]
    html = render_report(report, (), claims)
    assert (
        '<mark class="flagged-claim" title="the verifier could not support this claim: no '
        '&quot;source&quot; &lt;read&gt;">Otters sleep in holts by the water</mark>'
    ) in html
    # The link keeps its address and attributes whole; its text is marked, as text.
    assert (
        '<a href="https://otters.example/beds" target="_blank" rel="noopener noreferrer '
        'nofollow"><mark class="flagged-claim" title="the verifier could not support this '
        'claim: link text">the otter page</mark></a>'
    ) in html
    # What a model wrote as markup stays text, marked as text.
    assert "<script>" not in html
    assert '>&lt;script&gt;alert("x")&lt;/script&gt;</mark> in it.' in html


def test_a_verdict_is_read_from_bullets_quoted_or_not_and_none_means_none():
    verdict = parse_verdict(
        "### Unsupported claims\n"
        "- “Otters sleep in holts” — the page says dens\n"
        "- Otters eat only fish: the source says crayfish too\n\n"
        "### Gaps\n- None."
    )
    assert verdict.error == ""
    assert verdict.claims == [
        {"claim": "Otters sleep in holts", "why": "the page says dens"},
        {"claim": "Otters eat only fish", "why": "the source says crayfish too"},
    ]
    assert verdict.gaps == []
    clean = parse_verdict("## Unsupported claims\nNone.\n\n## Gaps\nNone.")
    assert (clean.error, clean.claims) == ("", [])
    assert parse_verdict("## Unsupported claims\nI could not tell.").error == (
        "the verifier's 'Unsupported claims' section lists nothing and says not 'None.'"
    )


def test_a_note_sent_while_the_verifier_works_is_read_in_the_revision_round(
    agent_pool, scripted_llm, alice, api, settings
):
    settings.RESEARCH_VERIFY_REPORTS = True
    topic = "Grebes: a note during verification"
    verifier_may_answer = threading.Event()

    def verifier_turn(messages):
        verifier_may_answer.wait(20)
        return reply("## Unsupported claims\nNone.\n\n## Gaps\nNone.")

    scripted_llm.script(topic, reply("Grebe draft."), reply("Grebe report, revised."))
    scripted_llm.script("Check this draft report", verifier_turn)
    root = start(alice, topic)
    wait_for(lambda: Run.objects.filter(parent=root, name="verifier", status="working").exists())
    sent = api.post(
        f"/v1/gb/research/{root.pk}/notes", {"text": "Mention the dance."}, format="json"
    )
    assert sent.status_code == 201
    time.sleep(0.6)  # the root's wait goes on: the note does not end it, nor make it spin
    assert len(scripted_llm.requests_for(topic)) == 1
    verifier_may_answer.set()
    root = wait_finished(root)

    revision = user_messages(scripted_llm.requests_for(topic)[1])
    assert revision[-2].startswith("A verifier read your draft")
    assert revision[-1].endswith("] Mention the dance.")
    assert root.report.startswith("Grebe report, revised.")
    assert Message.objects.get(to_run=root).read_at is not None


def test_a_revision_that_fails_keeps_the_draft(agent_pool, scripted_llm, alice, settings):
    settings.RESEARCH_VERIFY_REPORTS = True
    topic = "Coots: the revision fails"
    scripted_llm.script(topic, reply("Coot draft."), fail(500, times=3))
    scripted_llm.script(
        "Check this draft report", reply("## Unsupported claims\nNone.\n\n## Gaps\nNone.")
    )
    root = wait_finished(start(alice, topic))
    assert root.status == "done"
    assert root.report.startswith(
        f"Coot draft.\n\n{COVERAGE_HEADING}\n\nThe report could not be verified: the revision "
        "failed: llm: 500 from 127.0.0.1:"
    )


def test_a_lead_that_revises_an_approved_plan_waits_for_the_analyst_again(
    agent_pool, scripted_llm, alice, api
):
    topic = "Puffins: burrows and fish"
    scripted_llm.script(
        topic,
        call("write_plan", items=["Burrows", "Fish"]),
        call("write_plan", items=["Burrows", "Fish", "Predators"]),
        reply("the puffin report"),
    )
    root = start(alice, topic, review_plan=True)
    wait_for(lambda: Run.objects.get(pk=root.pk).status == "paused")
    assert api.post(f"{plan_url(root)}/approve", {}, format="json").status_code == 200

    # The revision is a new version that waits: the approval bound the lead to version 1.
    wait_for(lambda: Plan.objects.filter(root=root).count() == 2)
    wait_for(lambda: Run.objects.get(pk=root.pk).status == "paused")
    plan = api.get(plan_url(root)).json()
    assert (plan["version"], plan["approved"], plan["awaiting_review"]) == (2, False, True)
    assert plan["changes"] == {"since_version": 1, "added": ["Predators"], "removed": []}

    assert api.post(f"{plan_url(root)}/approve", {}, format="json").status_code == 200
    root = wait_finished(root)
    assert root.status == "done" and root.report.startswith("the puffin report")
    assert api.get(plan_url(root)).json()["changes"] is None


def test_a_verifier_with_no_cited_source_says_it_had_nothing_to_check():
    section = coverage_section(None, Verdict(checked=0))
    assert section.endswith("The verifier had nothing to check: the report cites no source.")
    assert "none unsupported" in coverage_section(None, Verdict(checked=3))


def test_a_cancel_that_comes_before_the_pause_wins(run_factory, alice):
    root = run_factory(topic="Rails: cancelled while it plans", review_plan=True)
    services.run_claim(run_id=root.pk)
    services.plan_write(root_id=root.pk, items=["Calls"])
    Run.objects.filter(pk=root.pk).update(
        cancel_requested=True, cancel_reason="cancelled by the user"
    )
    assert services.plan_pause(root_id=root.pk) is False
    root.refresh_from_db()
    assert root.status == "working"  # the agent stops as a cancel does, and finishes it


def _paused_for_review(run_factory, topic: str) -> Run:
    """A root paused for its plan review: it worked 10 s before the pause and has waited 50 s
    for the analyst since."""
    root = run_factory(topic=topic, review_plan=True)
    services.run_claim(run_id=root.pk)
    services.plan_write(root_id=root.pk, items=["Diving"])
    assert services.plan_pause(root_id=root.pk)
    now = timezone.now()
    Run.objects.filter(pk=root.pk).update(
        started_at=now - timedelta(seconds=60), paused_at=now - timedelta(seconds=50)
    )
    root.refresh_from_db()
    return root


def test_the_time_a_research_waits_for_its_review_is_not_time_it_worked(run_factory, alice):
    root = _paused_for_review(run_factory, "Grebes: paused for review")
    assert round(root.worked_seconds()) == 10 and not root.clock_running

    services.plan_approve(run=root)

    root.refresh_from_db()
    assert round(root.paused_seconds) == 50 and root.paused_at is None
    assert round(root.worked_seconds()) == 10 and root.clock_running
    approval = Event.objects.filter(root_id=root.pk, type="run.state").order_by("seq").last()
    assert round(approval.payload["worked_seconds"]) == 10


def test_a_research_cancelled_while_it_waits_for_its_review_ends_with_its_wait_left_out(
    run_factory, alice
):
    # A paused run ends by the finish's longer way (read, then written): its wait is counted.
    root = _paused_for_review(run_factory, "Grebes: cancelled during the review")

    services.run_cancel(run=root)

    root.refresh_from_db()
    assert (root.status, root.state, root.paused_at) == ("failed", "ended", None)
    assert round(root.paused_seconds) == 50 and round(root.worked_seconds()) == 10
    finished = Event.objects.get(root_id=root.pk, type="run.finished")
    assert round(finished.payload["duration_seconds"]) == 10
    # An ended run is not ended again.
    assert not services.run_finish(run_id=root.pk, report="too late")


def test_exports_carry_the_plan_and_the_flagged_claims(run_factory, alice):
    from io import StringIO

    from django.core.management import call_command

    root = run_factory(topic="Terns: what the export keeps")
    services.plan_write(root_id=root.pk, items=["Migration", "Colonies"])
    claims = [{"claim": "Terns fly to the moon", "why": "no source says so"}]
    services.report_flags_set(run_id=root.pk, claims=claims)
    services.run_finish(run_id=root.pk, report="# Terns\n\nTerns fly to the moon.")

    out = StringIO()
    call_command(
        "research", "export", str(root.pk), "--format", "json", "--user", "alice", stdout=out
    )
    exported = json.loads(out.getvalue())
    assert exported["flagged_claims"] == claims
    assert [item["status"] for item in exported["plan"]["items"]] == ["gap", "gap"]


def test_the_coverage_section_survives_the_report_cap(agent_pool, scripted_llm, alice, settings):
    settings.RESEARCH_REPORT_MAX_CHARS = 2000
    topic = "Puffins: a long draft"
    scripted_llm.script(
        topic, call("write_plan", items=["Burrows", "Fishing"]), reply("Puffins. " * 600)
    )
    root = wait_finished(start(alice, topic))
    assert len(root.report) <= 2000
    assert "[cut by Canopy: the report was " in root.report
    assert root.report.endswith(
        f"{COVERAGE_HEADING}\n\nPlan items not covered:\n"
        "- Item 1: Burrows (gap)\n- Item 2: Fishing (gap)"
    )


def test_a_bad_plan_item_is_named_in_a_flat_list_of_errors(api, run_factory):
    root = run_factory(topic="Shags: a plan with a NUL")
    response = api.post(
        f"/v1/gb/research/{root.pk}/plan/approve", {"items": ["fine", "bad\x00"]}, format="json"
    )
    assert response.status_code == 400
    assert response.json() == {"items": ["plan item 2: Null characters are not allowed."]}


def test_the_plans_items_take_their_status_from_the_agents_naming_them_and_the_leads_research(
    run_factory,
):
    """research.selectors.plan_items, as the root's end and the page read it: an item is
    the agents' that name its words in the latest version (not an older version's words),
    and an item no agent took is the lead's, covered once the lead has researched. An agent
    covers its item with a report citing a source its tree saw; one that found nothing to
    cite leaves it a gap, even before the research ends."""
    from research.selectors import plan_items

    root = run_factory(topic="Tides")
    services.run_claim(run_id=root.pk)
    services.plan_write(root_id=root.pk, items=["Moon", "Old words", "Tide tables"])
    services.plan_write(root_id=root.pk, items=["Moon", "Sun", "Wind", "Tide tables"])
    moon, old, tables = (
        services.subagent_create(
            parent_id=root.pk,
            launch=services.Launch(
                name=name, reason="r", task=f"{name} task", plan_item=item, max_steps=5
            ),
        )
        for name, item in (("moon", "Moon"), ("old", "Old words"), ("tables", "Tide tables"))
    )
    services.source_record(run_id=moon.pk, kind="page", url="https://example.org/moon")
    report = "The moon pulls (https://example.org/moon)."
    checked = services.citations_checked(run_id=moon.pk, root_id=root.pk, report=report)
    services.run_finish(run_id=moon.pk, report=report, citations=checked)
    # Done, but what it cites no agent of the tree saw: no evidence for its item.
    report = "Tables say so (https://invented.example/tables)."
    checked = services.citations_checked(run_id=tables.pk, root_id=root.pk, report=report)
    services.run_finish(run_id=tables.pk, report=report, citations=checked)
    root.refresh_from_db()

    def statuses(*, ending: bool) -> dict[str, tuple[str, list[str]]]:
        items = plan_items(root=root, ending=ending)
        return {
            item["text"]: (item["status"], [a["name"] for a in item["agents"]]) for item in items
        }

    assert statuses(ending=False) == {
        "Moon": ("covered", ["moon"]), "Sun": ("open", []), "Wind": ("open", []),
        "Tide tables": ("gap", ["tables"]),
    }  # fmt: skip
    # Ending without research of its own: what no agent took is a gap.
    assert statuses(ending=True)["Sun"] == ("gap", [])
    services.step_record(run_id=root.pk, kind="tool", tool="read_page", input={}, is_error=True)
    assert statuses(ending=True)["Sun"] == ("gap", [])  # a failed read is no research
    services.step_record(run_id=root.pk, kind="tool", tool="web_search", input={"q": "sun"})
    assert statuses(ending=True) == {
        "Moon": ("covered", ["moon"]), "Sun": ("covered", ["root"]), "Wind": ("covered", ["root"]),
        "Tide tables": ("gap", ["tables"]),
    }  # fmt: skip
    assert old.plan_item == "Old words"  # named an item the latest version reworded


def test_an_item_is_a_gap_only_in_a_research_that_wrote_its_report():
    """A research cancelled before its plan was approved drew every item as a gap (a
    tester's walk): nothing was missing from a report it never wrote."""
    from types import SimpleNamespace

    from research.selectors.plans import item_status

    failed = [SimpleNamespace(status="failed", cites=False)]
    empty = [SimpleNamespace(status="done", cites=False)]
    covered = [SimpleNamespace(status="done", cites=True)]
    for agents, reported, expected in (
        ([], True, "gap"),
        ([], False, "open"),
        (failed, True, "gap"),
        (failed, False, "failed"),
        (empty, False, "gap"),  # it ended done having found nothing to cite
        (covered, False, "covered"),
    ):
        assert item_status(agents, reported=reported) == expected, (agents, reported)
