"""The research library: search and filters (the runs page and the REST list), delete with
confirmation, run again, and how each research reads in the list."""

from datetime import timedelta

import pytest
from django.utils import timezone

from research import endings, services
from research.models import Run, Status

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
