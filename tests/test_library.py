"""The research library: search and filters (the runs page and the REST list), delete with
confirmation, run again, and how each research reads in the list."""

import re
from datetime import timedelta

import pytest
from django.utils import timezone

from research import endings, services
from research.models import Dataset, Event, Run, RunState, Source, Status
from research.services.sources import source_record

pytestmark = pytest.mark.django_db

URL = "/v1/gb/research"


def _ended(run: Run, *, error: str = "", report: str = "") -> Run:
    services.run_finish(run_id=run.pk, report=report, error=error)
    run.refresh_from_db()
    return run


@pytest.fixture
def library(run_factory, settings):
    """Alice's researches, one of each kind: working, waiting for review, done, cancelled,
    interrupted and failed."""
    settings.RESEARCH_MAX_WORKING_ROOTS = 10
    runs = {
        "working": run_factory(topic="How do otters hunt in cold rivers?"),
        "waiting": run_factory(topic="Which beavers build the largest dams?", review_plan=True),
        "done": _ended(
            run_factory(topic="Where did the lynx come back?"),
            report="# Lynx\n\nThe lynx returned to the Harz mountains in 2000.",
        ),
        "cancelled": _ended(run_factory(topic="Otters and eels"), error=endings.CANCELLED_BY_USER),
        "interrupted": _ended(run_factory(topic="Wolves"), error=endings.WORKER_LOST),
        "failed": _ended(run_factory(topic="Salmon runs"), error="llm: 500 after 3 tries"),
    }
    Run.objects.filter(pk=runs["waiting"].pk).update(status=Status.PAUSED)
    return runs


def _ids(response) -> set[int]:
    return {run["id"] for run in response.json()["results"]}


# --- The REST list ----------------------------------------------------------------------------


def test_the_api_finds_researches_by_words_of_their_topic_or_report(api, library):
    assert _ids(api.get(URL, {"q": "otters"})) == {library["working"].pk, library["cancelled"].pk}
    assert _ids(api.get(URL, {"q": "Harz mountains"})) == {library["done"].pk}
    assert _ids(api.get(URL, {"q": "otters cold"})) == {library["working"].pk}
    assert _ids(api.get(URL, {"q": "penguins"})) == set()


def test_a_word_joined_to_another_by_a_dot_is_found_alone(api, run_factory):
    """ "Class decorators and functools.wraps" was not found by "wraps" nor "functools":
    PostgreSQL's parser reads "functools.wraps" as one token (a host name)."""
    decorators = _ended(
        run_factory(topic="Python decorators"),
        report="# Decorators\n\nClass decorators and functools.wraps keep the name; see "
        "docs.python.org.",
    )
    for words in ("wraps", "functools", "functools.wraps", "python org", "docs.python.org"):
        assert _ids(api.get(URL, {"q": words})) == {decorators.pk}, words
    assert _ids(api.get(URL, {"q": "wrapping paper"})) == set()
    # Excluding a dotted word excludes it whole, not each of its parts.
    assert _ids(api.get(URL, {"q": "-os.path decorators"})) == {decorators.pk}
    assert _ids(api.get(URL, {"q": "-functools.wraps decorators"})) == set()
    assert _ids(api.get(URL, {"q": '"functools.wraps keep"'})) == {decorators.pk}


def test_a_long_task_is_searched_by_its_start_and_its_report(api, run_factory, subagent_factory):
    """A sub-agent's task past SEARCHED_TASK_CHARS (a verifier's: the draft and its sources)
    is searched by its first characters, as a topic is, and by its report; the rest of it is
    left out of the search, whose index PostgreSQL computes at every insert."""
    from research.selectors.runs import SEARCHED_TASK_CHARS

    root = run_factory(topic="Badgers")
    long_task = "Check the draft about badgers. " + "filler " * (SEARCHED_TASK_CHARS // 7)
    long_task += " wombats appear only past the start"
    verifier = subagent_factory(root, "verifier", topic=long_task)
    assert len(verifier.topic) > SEARCHED_TASK_CHARS
    verifier = _ended(verifier, report="Findings: the claim about setts holds.")

    assert _ids(api.get(URL, {"q": "check draft"})) == {verifier.pk}
    assert _ids(api.get(URL, {"q": "setts"})) == {verifier.pk}
    assert _ids(api.get(URL, {"q": "wombats"})) == set()
    assert _ids(api.get(URL, {"q": "badgers"})) == {root.pk, verifier.pk}


def test_the_search_reads_its_index_on_postgresql(run_factory):
    """The index is built from the selector's expression (migration 0017): a search that
    drifted from it would read every run (28 s at 100,000)."""
    from django.db import connection

    from research.selectors.runs import text_matching

    if connection.vendor != "postgresql":
        pytest.skip("SQLite searches with LIKE; it has no such index")
    run_factory(topic="Otters")
    found = text_matching(Run.objects.all(), "otters")  # only this index can serve it
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        sql, params = found.query.sql_with_params()
        cursor.execute(f"EXPLAIN {sql}", params)
        plan = "\n".join(row[0] for row in cursor.fetchall())
    assert "run_text_search" in plan, plan


def test_search_words_never_reach_a_query_syntax(api, library):
    for text in ("otters & | ! ( :*", "'\"", "-", "otters OR"):
        response = api.get(URL, {"q": text})
        assert response.status_code == 200, text


def test_the_api_filters_by_ending_and_cancelled_is_not_failed(api, library):
    assert _ids(api.get(URL, {"ending": "cancelled"})) == {library["cancelled"].pk}
    assert _ids(api.get(URL, {"ending": "failed"})) == {library["failed"].pk}
    assert _ids(api.get(URL, {"ending": "interrupted"})) == {library["interrupted"].pk}
    assert _ids(api.get(URL, {"ending": "done"})) == {library["done"].pk}
    # The stored status stays as the contract has it: a cancelled research's is failed.
    assert library["cancelled"].pk in _ids(api.get(URL, {"status": "failed"}))


def test_the_api_filters_by_the_day_a_research_started(api, library):
    old = library["done"]
    Run.objects.filter(pk=old.pk).update(created_at=timezone.now() - timedelta(days=40))
    today = timezone.localdate()
    last_month = (today - timedelta(days=40)).isoformat()

    recent = _ids(api.get(URL, {"since": (today - timedelta(days=1)).isoformat()}))
    back_then = _ids(api.get(URL, {"since": last_month, "until": last_month}))

    assert old.pk not in recent and library["working"].pk in recent
    assert back_then == {old.pk}
    # The calendar's last day, which a date picker offers, was a 500 (a date past the last).
    response = api.get(URL, {"until": "9999-12-31"})
    assert response.status_code == 200
    assert library["working"].pk in _ids(response)


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"ending": "bogus"}, "ending"),
        ({"since": "yesterday"}, "since"),
        ({"since": "2025-02-01", "until": "2025-01-01"}, "until"),
        ({"q": "x" * 201}, "q"),
    ],
)
def test_a_bad_search_or_filter_is_a_400_naming_the_field(api, params, field):
    response = api.get(URL, params)

    assert response.status_code == 400
    assert field in response.json()


def test_the_api_search_is_scoped_to_the_owner(api_for, bob, library):
    assert _ids(api_for(bob).get(URL, {"q": "otters"})) == set()


def test_the_schema_describes_the_search_and_filters(client):
    schema = client.get("/v1/schema", HTTP_ACCEPT="application/json").json()

    parameters = {p["name"]: p for p in schema["paths"]["/v1/gb/research"]["get"]["parameters"]}
    assert {"q", "status", "ending", "since", "until", "cursor"} <= set(parameters)
    assert "cancelled" in parameters["ending"]["schema"]["enum"]
    assert parameters["since"]["schema"]["format"] == "date"


# --- The runs page: search, filters, pages ------------------------------------------------------


def _listed(client, **params) -> list[int]:
    html = client.get("/", params).content.decode()
    return [int(pk) for pk in re.findall(r'<tr data-run-id="(\d+)"', html)]


def _row(html: str, run: Run) -> str:
    row = re.search(rf'<tr data-run-id="{run.pk}">(.*?)</tr>', html, re.S)
    assert row, f"run {run.pk} is listed"
    return " ".join(re.sub(r"<[^>]+>", " ", row.group(1)).split())


def test_the_page_searches_and_filters_as_an_analyst_says_it(client, alice, library):
    client.force_login(alice)

    assert set(_listed(client, q="otters")) == {library["working"].pk, library["cancelled"].pk}
    assert _listed(client, status="waiting") == [library["waiting"].pk]
    assert _listed(client, status="cancelled") == [library["cancelled"].pk]
    assert set(_listed(client, status="failed")) == {
        library["failed"].pk,
        library["interrupted"].pk,
    }
    assert _listed(client, q="otters", status="working") == [library["working"].pk]
    assert "No research matches this search" in client.get("/", {"q": "penguins"}).content.decode()
    assert library["working"].pk in _listed(client, until="9999-12-31")  # was a 500


def test_the_page_pages_by_keyset_newest_first_keeping_the_search(
    client, alice, run_factory, settings, django_assert_max_num_queries
):
    settings.RESEARCH_MAX_WORKING_ROOTS = 100
    runs = [_ended(run_factory(topic=f"otters {index}"), report="r") for index in range(30)]
    run_factory(topic="beavers")
    client.force_login(alice)

    with django_assert_max_num_queries(8):
        first = client.get("/", {"q": "otters"})
    older = first.context["page"].older
    assert "q=otters" in older and "before=" in older
    second = client.get(f"/?{older}")

    newest_first = [run.pk for run in reversed(runs)]
    assert [row.run.pk for row in first.context["page"].rows] == newest_first[:25]
    assert [row.run.pk for row in second.context["page"].rows] == newest_first[25:]
    assert second.context["page"].older == ""
    back = client.get(f"/?{second.context['page'].newer}")
    assert [row.run.pk for row in back.context["page"].rows] == newest_first[:25]
    assert back.context["page"].newer == ""


def test_each_research_reads_as_it_stands(client, alice, library):
    Run.objects.filter(pk=library["done"].pk).update(
        started_at=library["done"].created_at,
        finished_at=library["done"].created_at + timedelta(seconds=125),
    )
    client.force_login(alice)

    html = client.get("/").content.decode()

    assert 'class="badge status-paused" data-status>needs your review' in html
    assert "needs your review" in _row(html, library["waiting"])
    assert "cancelled" in _row(html, library["cancelled"]).split(" Run again")[0]
    assert 'class="badge status-cancelled" data-status>cancelled' in html
    assert "failed" not in _row(html, library["cancelled"])
    assert "interrupted" in _row(html, library["interrupted"])
    assert "done took 2 min 05 s" in _row(html, library["done"])


# --- Delete and run again -----------------------------------------------------------------------


def test_deleting_a_research_removes_its_tree_events_and_sources(client, alice, tree_factory):
    root = tree_factory()
    keep = tree_factory(topic="another question")
    child = root.children.first()
    source_record(run_id=child.pk, kind="page", url="https://example.org/a", title="A")
    tree = list(Run.objects.filter(root=root).values_list("pk", flat=True))
    assert Event.objects.filter(root=root).exists()
    client.force_login(alice)

    response = client.post(f"/runs/{root.pk}/delete", {"next": "/?q=otters"}, follow=True)

    assert response.redirect_chain == [("/?q=otters", 302)]
    assert "Deleted the research" in response.content.decode()
    assert not Run.objects.filter(pk__in=tree).exists()
    assert not Event.objects.filter(root_id=root.pk).exists()
    assert not Source.objects.filter(root_id=root.pk).exists()
    assert not RunState.objects.filter(run_id__in=tree).exists()
    assert Run.objects.filter(pk=keep.pk).exists()


def test_running_again_starts_a_new_research_with_the_same_settings(client, alice, run_factory):
    dataset = Dataset.objects.create(owner=alice, name="notes")
    old = _ended(run_factory(topic="Otters?", max_steps=7, dataset_id=dataset.pk, review_plan=True))
    client.force_login(alice)

    response = client.post(f"/runs/{old.pk}/again")

    new = Run.objects.exclude(pk=old.pk).get(owner=alice)
    assert response.url == f"/runs/{new.pk}/"
    assert (new.topic, new.model, new.max_steps, new.dataset, new.review_plan) == (
        "Otters?",
        "scripted",
        7,
        dataset,
        True,
    )
    assert new.is_root and new.status == Status.QUEUED


def test_running_again_past_the_limit_says_why_on_the_list(client, alice, run_factory):
    runs = [run_factory(topic=f"question {index}") for index in range(3)]
    client.force_login(alice)

    response = client.post(f"/runs/{runs[0].pk}/again", follow=True)

    assert "You already have 3 researches working; the limit is 3" in response.content.decode()
    assert Run.objects.filter(owner=alice).count() == 3


def test_another_users_research_cannot_be_deleted_or_run_again(client, bob, tree_factory):
    root = tree_factory()
    client.force_login(bob)

    assert client.post(f"/runs/{root.pk}/delete").status_code == 404
    assert client.post(f"/runs/{root.pk}/again").status_code == 404
    assert client.post(f"/runs/{root.children.first().pk}/delete").status_code == 404
    assert Run.objects.filter(root=root).count() == 5


def test_delete_and_run_again_need_a_post_with_its_csrf_token(alice, tree_factory):
    from django.test import Client

    root = tree_factory()
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(alice)

    assert browser.get(f"/runs/{root.pk}/delete").status_code == 405
    assert browser.post(f"/runs/{root.pk}/delete").status_code == 403
    assert browser.post(f"/runs/{root.pk}/again").status_code == 403
    assert Run.objects.filter(owner=alice).count() == 5


# --- The start form ------------------------------------------------------------------------------


def test_without_an_llm_endpoint_only_the_demo_model_is_offered(client, alice, settings):
    settings.OPENAI_BASE_URL = ""
    settings.OPENAI_API_KEY = ""
    settings.RESEARCH_MODEL = "gpt-4o-mini"
    client.force_login(alice)

    html = client.get("/").content.decode()
    refused = client.post("/", {"topic": "Otters?", "model": "gpt-4o-mini", "dataset": ""})

    assert re.findall(
        r'<option value="([^"]+)"[^>]*>[^<]*</option>',
        html.split('id="id_model"')[1].split("</select>")[0],
    ) == ["demo"]
    assert "no LLM endpoint" in html
    assert "Select a valid choice" in refused.content.decode()
    assert not Run.objects.exists()


def test_with_an_llm_endpoint_every_priced_model_is_offered(client, alice, settings):
    settings.OPENAI_BASE_URL = "http://127.0.0.1:9/v1"
    client.force_login(alice)

    html = client.get("/").content.decode()

    assert '<option value="gpt-4o-mini">' in html and '<option value="demo">' in html


def test_the_demo_model_with_no_dataset_is_refused_beside_the_dataset(client, alice):
    client.force_login(alice)

    response = client.post("/", {"topic": "Otters?", "model": "demo", "dataset": ""})

    html = response.content.decode()
    assert (
        'id="id_dataset-error" role="alert">The offline demo model answers from a knowledge base'
        in html
    )
    assert not Run.objects.exists()


def test_no_dataset_with_a_real_model_runs_with_no_dataset(client, alice):
    Dataset.objects.create(owner=alice, name="notes")
    client.force_login(alice)

    client.post("/", {"topic": "Otters?", "model": "scripted", "max_steps": "5", "dataset": ""})

    assert Run.objects.get(owner=alice).dataset is None


def test_the_starter_dataset_is_offered_before_it_is_loaded(client, alice):
    client.force_login(alice)

    html = client.get("/").content.decode()
    client.post("/", {"topic": "Otters?", "model": "scripted", "dataset": "starter"})

    assert "Python reference (loaded when the research starts)" in html
    assert Run.objects.get(owner=alice).dataset.name == "Python reference"


def test_the_review_option_is_a_checkbox_beside_its_label(client, alice):
    client.force_login(alice)

    html = client.get("/").content.decode()

    assert re.search(
        r'<div class="field field-check">\s*<input type="checkbox" name="review_plan" '
        r'id="id_review_plan"',
        html,
    )
    assert '<label for="id_review_plan">Review the plan first</label>' in html


# --- Stars ------------------------------------------------------------------------------------


def test_a_starred_research_is_listed_under_starred_only(api, library):
    done = library["done"]
    response = api.patch(f"{URL}/{done.pk}", {"starred": True}, format="json")

    assert response.status_code == 200 and response.json()["starred"] is True
    assert _ids(api.get(URL, {"starred": "true"})) == {done.pk}
    assert done.pk not in _ids(api.get(URL, {"starred": "false"}))
    assert len(_ids(api.get(URL))) == len(library)  # no filter: every research
    api.patch(f"{URL}/{done.pk}", {"starred": False}, format="json")
    assert _ids(api.get(URL, {"starred": "true"})) == set()


def test_a_star_needs_a_yes_or_no_and_only_a_research_takes_one(api, tree_factory):
    root = tree_factory(children=("history",), grandchildren=())
    child = root.children.get()

    missing = api.patch(f"{URL}/{root.pk}", {}, format="json")
    wrong = api.patch(f"{URL}/{root.pk}", {"starred": "sometimes"}, format="json")
    sub_agent = api.patch(f"{URL}/{child.pk}", {"starred": True}, format="json")

    assert missing.status_code == 400 and "starred" in missing.json()
    assert wrong.status_code == 400 and "starred" in wrong.json()
    assert sub_agent.status_code == 400
    assert sub_agent.json()["starred"] == [
        f"run {child.pk} is a sub-agent: star its research (run {root.pk}) instead."
    ]


def test_another_users_research_cannot_be_starred(api_for, client, bob, tree_factory):
    root = tree_factory(children=())

    assert (
        api_for(bob).patch(f"{URL}/{root.pk}", {"starred": True}, format="json").status_code == 404
    )
    client.force_login(bob)
    assert client.post(f"/runs/{root.pk}/star", {"starred": "true"}).status_code == 404
    root.refresh_from_db()
    assert root.starred is False


def test_the_page_stars_a_research_and_filters_on_stars(client, alice, library):
    client.force_login(alice)
    lynx = library["done"]

    response = client.post(f"/runs/{lynx.pk}/star", {"starred": "true", "next": "/?q=lynx"})
    starred_only = client.get("/", {"starred": "on"}).content.decode()

    assert response.status_code == 302 and response["Location"] == "/?q=lynx"
    assert re.findall(r'<tr data-run-id="(\d+)"', starred_only) == [str(lynx.pk)]
    assert 'aria-pressed="true"' in starred_only
    client.post(f"/runs/{lynx.pk}/star", {"starred": "false"})
    lynx.refresh_from_db()
    assert lynx.starred is False
