"""Throttles while Redis, where they count, is down (issue 16): the research start, notes,
knowledge queries, uploads and exports fail open (the request goes on, uncounted); sign-in
fails closed, with a page that says so. Never a 500, never an HTML error from the API.

Over real HTTP, against a daphne whose cache is a Redis server of this test's own."""

import re
import shutil
from collections.abc import Iterator

import httpx
import pytest
from django.conf import global_settings
from django.test import Client
from rest_framework.authtoken.models import Token

from agents.llm.scripted import reply, slow
from research import services
from tests.conftest import PASSWORD, ServerProcess, start_daphne
from tests.servers import RedisServer

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs redis-server"),
]


@pytest.fixture
def own_redis() -> Iterator[RedisServer]:
    server = RedisServer()  # of this test alone: the test stops it
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def server(scripted_llm, settings, tmp_path, own_redis) -> Iterator[ServerProcess]:
    """daphne whose cache (the throttles' counters) and channel layer are `own_redis`."""
    process = start_daphne(settings, tmp_path, REDIS_URL=own_redis.url)
    try:
        yield process
    finally:
        process.stop()


def signed_in(server: ServerProcess, username: str) -> httpx.Client:
    """A browser's session (signed in through Django's test client: the database holds
    sessions) with the CSRF cookie the forms need."""
    browser = Client()
    assert browser.login(username=username, password=PASSWORD)
    page = httpx.Client(base_url=server.url, timeout=30, follow_redirects=False)
    page.cookies.set("sessionid", browser.cookies["sessionid"].value)
    assert page.get("/").status_code == 200
    return page


def form_post(page: httpx.Client, path: str, data: dict) -> httpx.Response:
    csrf = page.cookies.get("csrftoken")
    if csrf is None:
        page.get(path)
        csrf = page.cookies["csrftoken"]
    return page.post(path, data={**data, "csrfmiddlewaretoken": csrf})


def assert_json(response: httpx.Response, status: int) -> dict:
    assert response.status_code == status, response.text[:500]
    assert response.headers["Content-Type"] == "application/json", response.text[:500]
    return response.json()


def test_a_redis_outage_lets_work_through_and_pauses_sign_in(
    server, own_redis, scripted_llm, alice, admin_user, settings
):
    # The roots stay working: each of the three takes one of these turns (a script's turn
    # is used once; with one, the second root answered at once and could end before its note).
    scripted_llm.default(*[slow(20, reply("An owl report."))] * 3)
    api = httpx.Client(
        base_url=server.url,
        headers={"Authorization": f"Token {Token.objects.create(user=alice).key}"},
        timeout=30,
    )
    dataset = services.dataset_create(owner=alice, name="owls")
    page = signed_in(server, "alice")
    signing_in = httpx.Client(base_url=server.url, timeout=30)
    admin_signing_in = httpx.Client(base_url=server.url, timeout=30)
    signing_in.get("/login/")
    admin_signing_in.get("/admin/login/")
    # Counted while Redis is up.
    assert_json(api.post("/v1/gb/research", json={"topic": "owls before"}), 201)

    own_redis.stop()

    root = assert_json(api.post("/v1/gb/research", json={"topic": "owls during"}), 201)
    note = api.post(f"/v1/gb/research/{root['id']}/notes", json={"text": "mind the barn owls"})
    assert_json(note, 201)
    upload = api.post(
        f"/v1/gb/datasets/{dataset.pk}/documents",
        files={"file": ("owls.txt", b"Owls hunt at night.", "text/plain")},
    )
    assert_json(upload, 201)
    hits = assert_json(api.get(f"/v1/gb/datasets/{dataset.pk}/query", params={"q": "owls"}), 200)
    assert hits and "Owls hunt at night." in hits[0]["text"]
    export = api.get(f"/v1/gb/research/{root['id']}/export", params={"format": "json"})
    assert export.status_code == 200 and export.json()["run_id"] == root["id"]
    started = form_post(page, "/", {"topic": "owls by form", "max_steps": 5, "model": "scripted"})
    assert started.status_code == 302 and re.match(r"/runs/\d+/", started.headers["Location"])

    # Sign-in fails closed: no password is tried uncounted; the page says why.
    login = form_post(signing_in, "/login/", {"username": "alice", "password": PASSWORD})
    assert login.status_code == 503 and int(login.headers["Retry-After"]) > 0
    assert "Signing in is paused" in login.text and "<form" in login.text
    assert "sessionid" not in signing_in.cookies
    admin = form_post(admin_signing_in, "/admin/login/", {"username": "admin", "password": "x"})
    assert admin.status_code == 503 and admin.text.startswith("Signing in is paused")

    own_redis.start()  # back: sign-in counts and works again
    settings.PASSWORD_HASHERS = global_settings.PASSWORD_HASHERS  # as daphne's settings
    alice.set_password(PASSWORD)
    alice.save()
    login = form_post(signing_in, "/login/", {"username": "alice", "password": PASSWORD})
    assert login.status_code == 302 and "sessionid" in signing_in.cookies, login.text[-1500:]
    output = server.output()
    assert output.count("throttle counters are unavailable") == 1, output[-3000:]
