"""The REST API under /v1/gb/research: input checks, owner scoping, limits, shapes, queries."""

import io
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from rest_framework.test import APIClient

from research import services
from research.models import Dataset, Event, Message, Run, RunState, Status

URL = "/v1/gb/research"

RUN_FIELDS = {
    "id",
    "parent_id",
    "root_id",
    "depth",
    "name",
    "reason",
    "kind",
    "tier",
    "plan_item",
    "review_plan",
    "starred",
    "clarify",
    "dataset_id",
    "clarification",
    "follows_id",
    "topic",
    "model",
    "active",
    "ending",
    "worked_seconds",
    "clock_running",
    "status",
    "state",
    "max_steps",
    "steps",
    "input_tokens",
    "output_tokens",
    "cost_usd",
    "tree_cost_usd",
    "report",
    "error",
    "created_at",
    "started_at",
    "finished_at",
}

pytestmark = pytest.mark.django_db


# --- Starting a run --------------------------------------------------------------------------


def test_post_returns_the_run_with_every_field_of_the_contract(api, alice):
    response = api.post(URL, {"topic": "  Why is the sky blue?  ", "max_steps": 7}, format="json")

    assert response.status_code == 201
    body = response.json()
    assert set(body) == RUN_FIELDS
    run = Run.objects.get(pk=body["id"])
    assert run.owner == alice
    assert body["root_id"] == body["id"]
    assert body["parent_id"] is None
    assert body["depth"] == 0
    assert body["name"] == body["reason"] == body["kind"] == body["tier"] == ""
    assert body["topic"] == "Why is the sky blue?"
    assert body["model"] == "scripted"
    assert body["status"] == "queued"
    assert body["state"] == "queued"
    assert body["max_steps"] == 7
    assert body["steps"] == body["input_tokens"] == body["output_tokens"] == 0
    assert float(body["cost_usd"]) == float(body["tree_cost_usd"]) == 0
    assert body["report"] == body["error"] == ""
    assert body["created_at"]
    assert body["started_at"] is None
    assert body["finished_at"] is None
    assert body["dataset_id"] is None  # a client can tell which knowledge base it searches


def test_post_without_max_steps_uses_the_default(api, settings):
    response = api.post(URL, {"topic": "tides"}, format="json")

    assert response.status_code == 201
    assert response.json()["max_steps"] == settings.RESEARCH_DEFAULT_MAX_STEPS


def test_post_accepts_a_dataset_of_the_owner(api, alice):
    dataset = Dataset.objects.create(owner=alice, name="papers")

    response = api.post(URL, {"topic": "tides", "dataset": dataset.pk}, format="json")

    assert response.status_code == 201
    assert Run.objects.get(pk=response.json()["id"]).dataset == dataset


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ({"topic": ""}, "topic"),
        ({"topic": "   \n "}, "topic"),
        ({}, "topic"),
        ({"topic": "tides", "max_steps": 0}, "max_steps"),
        ({"topic": "tides", "max_steps": 41}, "max_steps"),
        ({"topic": "tides", "max_steps": "ten"}, "max_steps"),
        ({"topic": "tides", "model": "no-such-model"}, "model"),
        ({"topic": "tides", "dataset": "papers"}, "dataset"),
    ],
)
def test_bad_input_is_a_400_naming_the_field(api, payload, field):
    response = api.post(URL, payload, format="json")

    assert response.status_code == 400
    assert field in response.json()
    assert not Run.objects.exists()


def test_topic_over_the_limit_is_refused(api, settings):
    limit = settings.RESEARCH_TOPIC_MAX_CHARS

    too_long = api.post(URL, {"topic": "x" * (limit + 1)}, format="json")
    at_limit = api.post(URL, {"topic": "x" * limit}, format="json")

    assert too_long.status_code == 400
    assert str(limit) in too_long.json()["topic"][0]
    assert at_limit.status_code == 201


@pytest.mark.parametrize("max_steps", [1, 40])
def test_max_steps_at_the_bounds_is_accepted(api, max_steps):
    response = api.post(URL, {"topic": "tides", "max_steps": max_steps}, format="json")

    assert response.status_code == 201
    assert response.json()["max_steps"] == max_steps


def test_unknown_model_message_lists_the_known_ones(api):
    response = api.post(URL, {"topic": "tides", "model": "gpt-9"}, format="json")

    assert response.status_code == 400
    assert "scripted" in response.json()["model"][0]


def test_another_users_dataset_is_refused(api, bob):
    dataset = Dataset.objects.create(owner=bob, name="bob's papers")

    response = api.post(URL, {"topic": "tides", "dataset": dataset.pk}, format="json")

    assert response.status_code == 400
    assert "dataset" in response.json()
    assert not Run.objects.exists()


# --- The working-roots limit -------------------------------------------------------------------


def test_fourth_working_root_is_refused_with_429(api, run_factory):
    for _ in range(3):
        run_factory()

    response = api.post(URL, {"topic": "tides"}, format="json")

    assert response.status_code == 429
    assert response.json()["detail"] == (
        "You already have 3 researches working; the limit is 3. Wait for one to end or cancel "
        "one (researches waiting for your review do not count)."
    )
    assert Run.objects.count() == 3


def test_a_model_with_no_endpoint_configured_is_refused_before_it_starts(api, settings):
    settings.OPENAI_BASE_URL = ""
    settings.OPENAI_API_KEY = ""

    response = api.post(URL, {"topic": "tides", "model": "scripted"}, format="json")

    assert response.status_code == 400
    assert response.json()["model"] == [
        "model 'scripted' cannot run here: no LLM endpoint is configured (set OPENAI_API_KEY, "
        "or OPENAI_BASE_URL for a compatible server); the demo model runs offline."
    ]
    assert not Run.objects.exists()
    assert api.post(URL, {"topic": "tides", "model": "demo"}, format="json").status_code == 201


def test_researches_waiting_for_the_analysts_review_do_not_count_toward_the_limit(api, run_factory):
    for _ in range(3):
        Run.objects.filter(pk=run_factory(review_plan=True).pk).update(status=Status.PAUSED)

    response = api.post(URL, {"topic": "tides"}, format="json")

    assert response.status_code == 201, response.json()


def test_worked_time_leaves_out_the_time_paused_for_the_analyst(api, run_factory):
    start = timezone.now() - timedelta(seconds=100)
    root = run_factory()
    Run.objects.filter(pk=root.pk).update(
        status=Status.DONE,
        started_at=start,
        finished_at=start + timedelta(seconds=100),
        paused_seconds=60,
    )

    body = api.get(f"{URL}/{root.pk}").json()

    assert (body["worked_seconds"], body["clock_running"], body["active"]) == (40, False, False)


def test_finished_roots_do_not_count_toward_the_limit(api, run_factory):
    first, second, _ = (run_factory() for _ in range(3))
    services.run_finish(run_id=first.pk, report="done")
    services.run_cancel(run=second)

    response = api.post(URL, {"topic": "tides"}, format="json")

    assert response.status_code == 201


def test_sub_agents_do_not_count_toward_the_limit(api, tree_factory):
    tree_factory(children=("a", "b", "c"), grandchildren=("x",))
    tree_factory(children=("a", "b"), grandchildren=())

    response = api.post(URL, {"topic": "tides"}, format="json")

    assert response.status_code == 201


def test_the_limit_is_per_user(api_for, bob, run_factory):
    for _ in range(3):
        run_factory()

    response = api_for(bob).post(URL, {"topic": "tides"}, format="json")

    assert response.status_code == 201


# --- Reading -----------------------------------------------------------------------------------


def test_list_filters_by_parent_status_and_root(api, tree_factory, subagent_factory):
    root = tree_factory(children=("a", "b"), grandchildren=())
    other = tree_factory(children=("c",), grandchildren=())
    child_a = root.children.get(name="a")
    services.run_finish(run_id=child_a.pk, report="a's report")

    by_parent = api.get(URL, {"parent_id": root.pk}).json()["results"]
    by_status = api.get(URL, {"status": "done"}).json()["results"]
    by_root = api.get(URL, {"root_id": other.pk}).json()["results"]

    assert {run["name"] for run in by_parent} == {"a", "b"}
    assert [run["id"] for run in by_status] == [child_a.pk]
    assert {run["id"] for run in by_root} == {other.pk, other.children.get().pk}


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"parent_id": "abc"}, "parent_id"),
        ({"parent_id": "1.5"}, "parent_id"),
        ({"root_id": "x"}, "root_id"),
        ({"status": "bogus"}, "status"),
    ],
)
def test_bad_list_filter_is_a_400_naming_the_field(api, params, field):
    response = api.get(URL, params)

    assert response.status_code == 400
    assert field in response.json()


def test_tree_lists_the_run_and_every_descendant_parents_first(api, tree_factory):
    root = tree_factory(children=("a", "b"), grandchildren=("x", "y"))

    body = api.get(f"{URL}/{root.pk}/tree").json()

    assert len(body) == 7
    assert body[0]["id"] == root.pk
    assert [run["depth"] for run in body] == [0, 1, 1, 2, 2, 2, 2]
    seen = set()
    for run in body:
        assert run["parent_id"] is None or run["parent_id"] in seen
        seen.add(run["id"])


def test_a_task_longer_than_a_topic_is_cut_in_the_tree_and_whole_in_the_run(
    api, tree_factory, settings
):
    """The verifier's task carries the draft: 31 KB in every tree read and event before."""
    root = tree_factory(children=("verifier",), grandchildren=())
    verifier = root.children.get()
    Run.objects.filter(pk=verifier.pk).update(topic="Check this draft. " * 2000)

    listed = api.get(f"{URL}/{root.pk}/tree").json()[1]
    whole = api.get(f"{URL}/{verifier.pk}").json()

    assert len(listed["topic"]) < settings.RESEARCH_TOPIC_MAX_CHARS + 100
    assert listed["topic"].endswith(f"the whole task: /v1/gb/research/{verifier.pk}]")
    assert "the task is 36,000 characters" in listed["topic"]
    assert whole["topic"] == "Check this draft. " * 2000


def test_tree_of_a_sub_agent_is_its_own_subtree(api, tree_factory):
    root = tree_factory(children=("a", "b"), grandchildren=("x", "y"))
    a = root.children.get(name="a")

    body = api.get(f"{URL}/{a.pk}/tree").json()

    assert [(run["name"], run["parent_id"]) for run in body] == [
        ("a", root.pk),
        ("x", a.pk),
        ("y", a.pk),
    ]


def test_states_and_messages_of_a_run(api, tree_factory):
    root = tree_factory(children=("a", "b"), grandchildren=())
    a, b = root.children.order_by("name")
    services.run_claim(run_id=a.pk)
    services.run_set_state(run_id=a.pk, state="searching", detail="tide tables")
    services.message_record(from_run_id=a.pk, to_run_id=b.pk, text="check the moon")

    states = api.get(f"{URL}/{a.pk}/states").json()
    tree_messages = api.get(f"{URL}/{root.pk}/messages").json()
    b_messages = api.get(f"{URL}/{b.pk}/messages").json()

    assert [(s["state"], s["detail"]) for s in states] == [
        ("queued", ""),
        ("thinking", ""),  # claimed: its agent's first act is a model call
        ("searching", "tide tables"),
    ]
    assert tree_messages == b_messages
    assert [(m["from_name"], m["to_name"], m["text"]) for m in b_messages] == [
        ("a", "b", "check the moon")
    ]


# --- Owner scoping -----------------------------------------------------------------------------

RUN_ENDPOINTS = [
    ("get", ""),
    ("post", "/cancel"),
    ("delete", ""),
    ("get", "/tree"),
    ("get", "/states"),
    ("get", "/messages"),
    ("get", "/events"),
]


@pytest.mark.parametrize(("method", "suffix"), RUN_ENDPOINTS)
@pytest.mark.parametrize("intruder", ["bob", "charlie"])
def test_another_users_run_is_not_found(request, api_for, tree_factory, method, suffix, intruder):
    root = tree_factory()
    child = root.children.first()
    client = api_for(request.getfixturevalue(intruder))

    for run in (root, child):
        response = getattr(client, method)(f"{URL}/{run.pk}{suffix}")
        assert response.status_code == 404
        assert response.json() == {"detail": f"no research with id {run.pk}."}

    root.refresh_from_db()
    assert root.status == Status.QUEUED
    assert not root.cancel_requested
    assert Run.objects.filter(root=root).count() == 5


def test_list_shows_only_the_users_own_runs(api, api_for, bob, charlie, run_factory):
    mine = run_factory()
    bobs = run_factory(owner=bob)

    alice_ids = [run["id"] for run in api.get(URL).json()["results"]]
    bob_ids = [run["id"] for run in api_for(bob).get(URL).json()["results"]]
    charlie_ids = [run["id"] for run in api_for(charlie).get(URL).json()["results"]]
    bob_filtered = api_for(bob).get(URL, {"root_id": mine.pk}).json()["results"]

    assert alice_ids == [mine.pk]
    assert bob_ids == [bobs.pk]
    assert charlie_ids == []
    assert bob_filtered == []


def test_anonymous_requests_are_refused(run_factory):
    run = run_factory()
    client = APIClient()

    listing = client.get(URL)
    assert listing.status_code == 401
    assert listing["WWW-Authenticate"] == "Token"
    assert client.post(URL, {"topic": "tides"}, format="json").status_code == 401
    assert client.get(f"{URL}/{run.pk}").status_code == 401


def test_token_auth_works(alice, run_factory):
    run = run_factory()
    out = io.StringIO()
    call_command("drf_create_token", "alice", stdout=out)
    key = out.getvalue().split()[2]
    client = APIClient()

    with_token = client.get(f"{URL}/{run.pk}", HTTP_AUTHORIZATION=f"Token {key}")
    bad_token = client.get(f"{URL}/{run.pk}", HTTP_AUTHORIZATION="Token not-a-key")

    assert with_token.status_code == 200
    assert with_token.json()["id"] == run.pk
    assert bad_token.status_code == 401
    assert bad_token.json() == {"detail": "Invalid token."}


def test_session_auth_works(client, alice, run_factory):
    run = run_factory()
    client.force_login(alice)

    assert client.get(f"{URL}/{run.pk}").json()["id"] == run.pk


# --- Cancel and delete -------------------------------------------------------------------------


def test_cancel_of_a_queued_unclaimed_root_ends_it_failed(api, tree_factory):
    root = tree_factory(children=("a",), grandchildren=("x",))

    response = api.post(f"{URL}/{root.pk}/cancel")

    assert response.status_code == 202
    body = response.json()
    assert body["status"] == "failed"
    assert body["ending"] == "cancelled"  # the status stays the contract's; the ending says why
    assert body["state"] == "ended"
    assert body["error"] == "cancelled by the user"
    assert body["finished_at"]
    tree = Run.objects.filter(root=root)
    assert set(tree.values_list("status", "error")) == {("failed", "cancelled by the user")}


@pytest.mark.parametrize(
    ("status", "error", "ending"),
    [
        ("working", "", ""),
        ("done", "", "done"),
        ("failed", "cancelled by the user", "cancelled"),
        ("failed", "interrupted: the worker running it stopped responding", "interrupted"),
        ("failed", "timed out: the research ran longer than 60 s", "out_of_time"),
        ("failed", "llm: 500 Internal Server Error after 3 tries", "failed"),
    ],
)
def test_a_run_says_how_it_ended_beside_its_status(api, run_factory, status, error, ending):
    root = run_factory()
    Run.objects.filter(pk=root.pk).update(status=status, error=error)

    assert api.get(f"{URL}/{root.pk}").json()["ending"] == ending


def test_cancel_of_a_claimed_root_asks_its_agent_to_stop(api, run_factory):
    root = run_factory()
    services.run_claim(run_id=root.pk)

    body = api.post(f"{URL}/{root.pk}/cancel").json()

    root.refresh_from_db()
    assert body["status"] == "working"
    assert root.cancel_requested
    assert root.cancel_reason == "cancelled by the user"


def test_cancel_of_a_finished_run_is_a_409_that_changes_nothing(api, tree_factory):
    """It answered 202 Accepted with the run, as if its agents were stopping."""
    root = tree_factory(children=("a",), grandchildren=())
    child = root.children.get()
    services.run_finish(run_id=child.pk, error="cancelled by the user")
    services.run_finish(run_id=root.pk, report="the report")

    response = api.post(f"{URL}/{root.pk}/cancel")
    refused = api.post(f"{URL}/{child.pk}/cancel")

    assert response.status_code == 409
    assert response.json() == {"detail": f"research {root.pk} has ended (done): nothing to cancel."}
    assert refused.status_code == 409
    assert refused.json() == {
        "detail": f"sub-agent {child.pk} has ended (cancelled by the user): nothing to cancel."
    }
    root.refresh_from_db()
    assert (root.status, root.report, root.error, root.cancel_requested) == (
        "done", "the report", "", False,
    )  # fmt: skip


def test_delete_of_a_root_removes_its_whole_tree(api, tree_factory):
    root = tree_factory(children=("a", "b"), grandchildren=("x",))
    kept = tree_factory(children=("c",), grandchildren=())
    a, b = root.children.order_by("name")
    services.message_record(from_run_id=a.pk, to_run_id=b.pk, text="hello")
    services.usage_add(run_id=a.pk, input_tokens=10, output_tokens=5, latency_ms=3)
    services.step_record(run_id=a.pk, kind="model", output="thinking")
    tree_ids = list(Run.objects.filter(root=root).values_list("pk", flat=True))

    response = api.delete(f"{URL}/{root.pk}")

    assert response.status_code == 204
    assert not Run.objects.filter(pk__in=tree_ids).exists()
    assert not RunState.objects.filter(run_id__in=tree_ids).exists()
    assert not Event.objects.filter(root_id=root.pk).exists()
    assert not Message.objects.exists()
    assert Run.objects.filter(root=kept).count() == 2
    assert Event.objects.filter(root=kept).exists()
    assert api.get(f"{URL}/{root.pk}").status_code == 404


def test_delete_of_a_sub_agent_is_a_409_and_keeps_the_research_whole(api, tree_factory):
    """Deleting one sub-agent of a finished research took its tokens, messages and sources
    out of the research's figures while its report still named it."""
    root = tree_factory(children=("a", "b"), grandchildren=("x",))
    a = root.children.get(name="a")

    response = api.delete(f"{URL}/{a.pk}")

    assert response.status_code == 409
    assert response.json() == {
        "detail": f"run {a.pk} is a sub-agent of research {root.pk}, which is deleted whole "
        "(with its sub-agents); a working sub-agent can be cancelled."
    }
    assert Run.objects.filter(root=root).count() == 5


# --- Query counts ------------------------------------------------------------------------------


def _queries(client: APIClient, url: str) -> int:
    with CaptureQueriesContext(connection) as queries:
        response = client.get(url)
    assert response.status_code == 200
    return len(queries)


def test_list_query_count_does_not_grow_with_runs(api, settings, run_factory, subagent_factory):
    settings.RESEARCH_MAX_WORKING_ROOTS = 100
    for _ in range(2):
        run_factory()
    few = _queries(api, URL)
    for index in range(10):
        subagent_factory(run_factory(), f"agent{index}")

    many = _queries(api, URL)

    assert Run.objects.count() == 22
    assert many == few


def test_tree_query_count_does_not_grow_with_sub_agents(api, tree_factory):
    small = tree_factory(children=("a",), grandchildren=())
    big = tree_factory(children=("a", "b", "c", "d", "e"), grandchildren=("x", "y"))

    assert _queries(api, f"{URL}/{big.pk}/tree") == _queries(api, f"{URL}/{small.pk}/tree")


def test_messages_query_count_does_not_grow_with_messages(api, tree_factory):
    root = tree_factory(children=("a", "b"), grandchildren=())
    a, b = root.children.order_by("name")
    services.message_record(from_run_id=a.pk, to_run_id=b.pk, text="one")
    few = _queries(api, f"{URL}/{root.pk}/messages")
    for index in range(10):
        services.message_record(from_run_id=b.pk, to_run_id=a.pk, text=f"reply {index}")

    assert _queries(api, f"{URL}/{root.pk}/messages") == few


# --- Events ------------------------------------------------------------------------------------


def _add_events(root: Run, count: int) -> int:
    """Append `count` stored events to the tree (as publish numbers them); the last seq."""
    first = root.events.count() + 1
    Event.objects.bulk_create(
        Event(root=root, seq=seq, type="run.state", payload={"seq": seq, "type": "run.state"})
        for seq in range(first, first + count)
    )
    return first + count - 1


def test_events_after_n_are_all_returned_however_many(api, tree_factory):
    root = tree_factory(children=("a",), grandchildren=())
    child = root.children.get()
    last = _add_events(root, 1500)

    everything = api.get(f"{URL}/{root.pk}/events").json()
    missed = api.get(f"{URL}/{child.pk}/events", {"after": 40}).json()

    assert [event["seq"] for event in everything] == list(range(1, last + 1))
    assert [event["seq"] for event in missed] == list(range(41, last + 1))
    assert api.get(f"{URL}/{root.pk}/events", {"after": last}).json() == []


def test_events_query_count_does_not_grow_with_events(api, run_factory):
    run = run_factory()
    few = _queries(api, f"{URL}/{run.pk}/events")
    _add_events(run, 200)

    assert _queries(api, f"{URL}/{run.pk}/events") == few


# --- Schema ------------------------------------------------------------------------------------


def test_openapi_schema_describes_the_api(client):
    response = client.get("/v1/schema", HTTP_ACCEPT="application/json")

    assert response.status_code == 200
    paths = response.json()["paths"]
    assert {"get", "post"} <= set(paths["/v1/gb/research"])
    assert "/v1/gb/research/{run_id}/events" in paths


def test_report_endpoint_lists_citations_verified_or_flagged(api, run_factory):
    from research.services import run_finish
    from research.services.citations import citations_record
    from research.services.sources import source_record

    run = run_factory()
    source_record(run_id=run.pk, kind="page", url="https://example.org/seen", title="Seen")
    report = "See [seen](https://example.org/seen) and [invented](https://example.org/never)."
    citations_record(run_id=run.pk, report=report)
    run_finish(run_id=run.pk, report=report)

    body = api.get(f"{URL}/{run.pk}/report").json()

    assert body["report"] == report and body["status"] == "done"
    assert [(c["url"], c["verified"], c["status"]) for c in body["citations"]] == [
        ("https://example.org/seen", True, "verified"),
        ("https://example.org/never", False, "flagged: not seen by any agent"),
    ]
    assert body["citations"][0]["found_by_id"] == run.pk


def test_report_of_another_users_run_is_not_found(api_for, bob, run_factory):
    run = run_factory()
    assert api_for(bob).get(f"{URL}/{run.pk}/report").status_code == 404


def test_the_list_pages_by_cursor_newest_first_with_none_missing_or_repeated(
    api, settings, run_factory
):
    settings.RESEARCH_MAX_WORKING_ROOTS = 100
    started = [run_factory(topic=f"topic {index}").pk for index in range(7)]

    seen, url, pages = [], f"{URL}?page_size=3", 0
    while url:
        body = api.get(url).json()
        seen += [run["id"] for run in body["results"]]
        url, pages = body["next"], pages + 1
        if pages == 1:
            run_factory(topic="started while the client pages")  # must not shift a page

    assert seen == started[::-1]
    assert pages == 3


def test_a_deep_page_costs_the_queries_of_the_first(api, settings, run_factory):
    settings.RESEARCH_MAX_WORKING_ROOTS = 100
    for index in range(9):
        run_factory(topic=f"topic {index}")
    first = api.get(f"{URL}?page_size=2").json()
    third = api.get(api.get(first["next"]).json()["next"]).json()

    assert _queries(api, third["next"]) == _queries(api, f"{URL}?page_size=2")


def test_a_page_size_out_of_range_is_refused_naming_the_range(api, settings, run_factory):
    """0, -5, "abc", 1.5 and 100000 gave the default page (or 200) without a word, where
    MCP refuses them and the schema says 1 to 200."""
    for index in range(3):
        run_factory(topic=f"topic {index}")

    assert len(api.get(f"{URL}?page_size=200").json()["results"]) == 3
    for asked in ("0", "-5", "abc", "1.5", "100000", "²"):
        answer = api.get(URL, {"page_size": asked})
        assert answer.status_code == 400, asked
        assert answer.json() == {"page_size": [f"page_size must be from 1 to 200, not {asked}."]}


def test_a_field_the_request_does_not_take_is_refused_by_name(api, run_factory):
    """A misspelt field was dropped without a word: `max_step` and `reviewPlan` started a
    research of 10 steps that did not pause for review, and paid for it."""
    answer = api.post(URL, {"topic": "Why do owls hoot?", "max_step": 2, "reviewPlan": True})
    assert answer.status_code == 400
    assert answer.json() == {
        "max_step": [
            "max_step is not a field of this request (did you mean max_steps?); the fields "
            "are: topic, max_steps, model, dataset, review_plan, clarify, callback_url, "
            "follows."
        ],
        "reviewPlan": [
            "reviewPlan is not a field of this request (did you mean review_plan?); the "
            "fields are: topic, max_steps, model, dataset, review_plan, clarify, "
            "callback_url, follows."
        ],
    }
    assert not Run.objects.exists()  # nothing started
    run = run_factory(topic="Owls")
    changed = api.patch(f"{URL}/{run.pk}", {"starred": True, "topic": "hack"}, format="json")
    assert changed.status_code == 400
    assert list(changed.json()) == ["topic"]
    run.refresh_from_db()
    assert (run.topic, run.starred) == ("Owls", False)
    listed = api.get(URL, {"stauts": "working"})
    assert listed.status_code == 400 and "did you mean status?" in listed.json()["stauts"][0]
    assert api.get(URL, {"page_size": 2, "status": "working"}).status_code == 200


def test_detail_query_count_does_not_grow_with_the_tree(api, tree_factory):
    small = tree_factory(children=("a",), grandchildren=())
    big = tree_factory(children=("a", "b", "c", "d", "e"), grandchildren=("x", "y"))
    for child in big.children.all():
        services.usage_add(run_id=child.pk, input_tokens=10, output_tokens=1, latency_ms=1)

    assert _queries(api, f"{URL}/{big.pk}") == _queries(api, f"{URL}/{small.pk}")


def test_the_list_gives_researches_alone_as_the_page_the_cli_and_mcp_do(api, tree_factory):
    """The API's list mixes sub-agents with researches (DESIGN's contract) and had no way to
    ask for researches alone, as every other surface lists them."""
    root = tree_factory(children=("a", "b"), grandchildren=())
    everything = api.get(URL).json()["results"]
    researches = api.get(URL, {"roots_only": "true"}).json()["results"]
    assert len(everything) == 3
    assert [run["id"] for run in researches] == [root.pk]
