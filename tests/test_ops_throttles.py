"""Throttles on the API and the pages, counted in Redis (the cache every web process
shares): a throttled request is a 429 that says when to try again."""

import re

import pytest
import redis
from django.conf import settings as django_settings
from django.core.files.uploadedfile import SimpleUploadedFile

from research import services
from research.models import Dataset, Run
from tests.conftest import PASSWORD
from tests.test_cli import finished_tree  # noqa: F401  (a fixture)

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def fresh_counters(settings):
    """Counters of earlier tests (whose users had the same ids) are forgotten."""
    client = redis.Redis.from_url(django_settings.REDIS_URL)
    for key in client.scan_iter(match="canopy:*throttle_*"):
        client.delete(key)
    settings.RESEARCH_MAX_WORKING_ROOTS = 100
    yield
    client.close()


def rates(settings, **changed: str) -> None:
    settings.THROTTLE_RATES = {**settings.THROTTLE_RATES, **changed}


def test_the_third_research_started_in_a_minute_is_a_429_saying_when(api, settings):
    rates(settings, research_start="2/minute")
    for _ in range(2):
        assert api.post("/v1/gb/research", {"topic": "owls"}, format="json").status_code == 201
    response = api.post("/v1/gb/research", {"topic": "owls"}, format="json")
    assert response.status_code == 429
    retry_after = int(response["Retry-After"])
    assert 0 < retry_after <= 60
    assert response.json()["detail"] == (
        f"Request was throttled. Expected available in {retry_after} seconds."
    )
    assert Run.objects.count() == 2
    # Reading is not starting: the list still answers.
    assert api.get("/v1/gb/research").status_code == 200


def test_each_user_has_their_own_count(api_for, alice, bob, settings):
    rates(settings, research_start="1/minute")
    assert api_for(alice).post("/v1/gb/research", {"topic": "a"}, format="json").status_code == 201
    assert api_for(alice).post("/v1/gb/research", {"topic": "a"}, format="json").status_code == 429
    assert api_for(bob).post("/v1/gb/research", {"topic": "b"}, format="json").status_code == 201


def test_uploads_and_knowledge_queries_have_their_own_rates(api, alice, settings):
    rates(settings, uploads="1/hour", knowledge_queries="2/minute")
    dataset = services.dataset_create(owner=alice, name="notes")

    def upload():
        document = SimpleUploadedFile("owls.txt", b"Owls hunt at night.", "text/plain")
        return api.post(f"/v1/gb/datasets/{dataset.pk}/documents", {"file": document})

    assert upload().status_code == 201
    refused = upload()
    assert refused.status_code == 429 and int(refused["Retry-After"]) > 60
    query = f"/v1/gb/datasets/{dataset.pk}/query?q=owls"
    assert [api.get(query).status_code for _ in range(3)] == [200, 200, 429]
    # Starting researches is another scope: not spent by uploads or queries.
    assert api.post("/v1/gb/research", {"topic": "owls"}, format="json").status_code == 201
    assert Dataset.objects.get(pk=dataset.pk).documents.count() == 1


def test_exports_of_every_format_count_against_one_rate(api, finished_tree, settings):  # noqa: F811
    rates(settings, exports="3/minute")
    export = f"/v1/gb/research/{finished_tree.pk}/export"
    assert [api.get(f"{export}?format={f}").status_code for f in ("md", "json", "md")] == [200] * 3
    refused = api.get(f"{export}?format=pdf")  # refused before any Chromium starts
    assert refused.status_code == 429
    assert 0 < int(refused["Retry-After"]) <= 60
    assert refused.json()["detail"].startswith("Request was throttled.")


def test_the_start_form_counts_against_the_same_rate_as_the_api(client, api, alice, settings):
    rates(settings, research_start="1/minute")
    assert api.post("/v1/gb/research", {"topic": "owls"}, format="json").status_code == 201
    client.force_login(alice)
    response = client.post("/", {"topic": "more owls", "max_steps": 5, "model": "scripted"})
    assert response.status_code == 429
    assert int(response["Retry-After"]) > 0
    # In the words the page says durations with: "in 59 s", "in 40 min 27 s", not "2427 seconds".
    said = re.search(
        r"Too many researches started: try again in ([^.<]*)\.", response.content.decode()
    )
    assert said and re.fullmatch(r"\d+ s|1 min 00 s", said[1]), said
    assert Run.objects.count() == 1


def test_the_login_page_refuses_the_fourth_attempt_without_trying_the_password(
    client, alice, settings
):
    rates(settings, login="3/minute")
    for _ in range(3):
        wrong = client.post("/login/", {"username": "alice", "password": "guess"})
        assert (
            wrong.status_code == 200 and "correct username and password" in wrong.content.decode()
        )
    # Even the right password is not tried once throttled.
    response = client.post("/login/", {"username": "alice", "password": PASSWORD})
    assert response.status_code == 429
    assert "Too many sign-in attempts: try again in" in response.content.decode()
    assert int(response["Retry-After"]) > 0
    assert "_auth_user_id" not in client.session
    assert client.get("/login/").status_code == 200  # the page itself still shows


def test_the_admin_login_counts_against_the_same_throttle(client, admin_user, settings):
    rates(settings, login="2/minute")
    assert client.post("/login/", {"username": "admin", "password": "guess"}).status_code == 200
    assert client.post("/admin/login/", {"username": "admin", "password": "x"}).status_code == 200
    response = client.post("/admin/login/", {"username": "admin", "password": PASSWORD})
    assert response.status_code == 429
    assert response.content.decode().startswith("Too many sign-in attempts: try again in")
    assert "_auth_user_id" not in client.session


def test_a_bad_rate_setting_stops_the_start_naming_the_variable():
    import os
    import subprocess
    import sys

    from tests.conftest import PROJECT

    result = subprocess.run(
        [sys.executable, "-c", "import django; django.setup()"],
        cwd=PROJECT,
        env={
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "research.settings",
            "THROTTLE_UPLOADS": "lots",
        },
        capture_output=True,
        text=True,
    )
    assert result.returncode != 0
    assert "THROTTLE_UPLOADS must look like 10/minute" in result.stderr
