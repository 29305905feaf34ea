"""Limits that say so (issue 16): a 5 MB model answer is cut and marked, lists carry
summaries, and websocket frames stay under daphne's limit (large reports go by REST)."""

import json
import time

import httpx
import pytest
from django.test import Client
from rest_framework.authtoken.models import Token
from websockets.sync.client import connect

from agents.llm.scripted import reply
from frontend import frames
from research.models import Event, Run
from tests.conftest import PASSWORD, start_daphne, wait_finished

pytestmark = pytest.mark.django_db(transaction=True)

FIVE_MB = "0123456789abcdef" * (5 * 1024 * 1024 // 16)
DAPHNE_LIMIT = 1024 * 1024


def _start(server, alice, topic: str) -> tuple[httpx.Client, Run]:
    api = httpx.Client(
        base_url=server.url,
        headers={"Authorization": f"Token {Token.objects.create(user=alice).key}"},
        timeout=30,
    )
    response = api.post("/v1/gb/research", json={"topic": topic})
    assert response.status_code == 201, response.text
    return api, wait_finished(Run.objects.get(pk=response.json()["id"]), timeout=60)


def _watch(server, root_id: int, *, after: int | None):
    browser = Client()
    assert browser.login(username="alice", password=PASSWORD)
    query = "" if after is None else f"?after={after}"
    return connect(
        server.url.replace("http://", "ws://") + f"/ws/runs/{root_id}/{query}",
        origin=server.url,
        additional_headers={"Cookie": f"sessionid={browser.cookies['sessionid'].value}"},
        max_size=None,  # the client takes anything: the server's own limit is what is tested
        proxy=None,
    )


def _frames(socket, *, until: float = 3.0) -> list[str]:
    received = []
    deadline = time.monotonic() + until
    while time.monotonic() < deadline:
        try:
            received.append(socket.recv(timeout=0.5))
        except TimeoutError:
            if received:
                return received
    return received


def test_a_five_megabyte_answer_is_stored_cut_and_marked(scripted_llm, alice, settings, tmp_path):
    scripted_llm.script("Write far too much", reply(FIVE_MB))
    server = start_daphne(settings, tmp_path)
    try:
        api, root = _start(server, alice, "Write far too much")
        listed = api.get("/v1/gb/research")
        whole = api.get(f"/v1/gb/research/{root.pk}/report").json()["report"]
    finally:
        server.stop()

    assert root.status == "done"
    limit = settings.RESEARCH_REPORT_MAX_CHARS
    assert root.report.startswith(FIVE_MB[: limit - 200])
    assert f"[cut by Canopy: the model's answer was {len(FIVE_MB):,} characters" in root.report
    assert len(root.report) == limit
    assert whole == root.report
    # The list carries a summary: its first characters and where the whole report is.
    assert len(listed.content) < 20_000
    item = listed.json()["results"][0]
    assert item["report"].startswith(FIVE_MB[: settings.RESEARCH_LIST_REPORT_CHARS])
    assert f"/v1/gb/research/{root.pk}/report" in item["report"]


def test_websocket_frames_stay_under_the_servers_limit_and_say_where_reports_are(
    scripted_llm, alice, settings, tmp_path
):
    """With reports allowed up to 5 MB, the run.report event and the snapshot would pass
    daphne's 1 MiB: the socket used to close with 1011. Each now fits, with the report's URL."""
    scripted_llm.script("Write it all", reply(FIVE_MB))
    server = start_daphne(settings, tmp_path, RESEARCH_REPORT_MAX_CHARS=str(len(FIVE_MB)))
    try:
        api, root = _start(server, alice, "Write it all")
        assert len(root.report) == len(FIVE_MB)
        with _watch(server, root.pk, after=0) as replay:
            replayed = _frames(replay)
        with _watch(server, root.pk, after=None) as fresh:
            snapshot = _frames(fresh)
        report_url = f"/v1/gb/research/{root.pk}/report"
        whole = api.get(report_url).json()["report"]
    finally:
        server.stop()

    stored = [row.payload for row in Event.objects.filter(root_id=root.pk).order_by("seq")]
    assert [json.loads(frame)["seq"] for frame in replayed] == [e["seq"] for e in stored]
    assert max(len(frame.encode()) for frame in replayed + snapshot) < DAPHNE_LIMIT
    (event,) = [json.loads(f) for f in replayed if json.loads(f)["type"] == "run.report"]
    assert event["report_url"] == report_url and event["report_chars"] == len(FIVE_MB)
    assert event["report"] == FIVE_MB[: frames.EXCERPT_CHARS]
    (tree,) = [json.loads(frame) for frame in snapshot]
    assert tree["type"] == "snapshot"
    assert tree["runs"][0]["report_url"] == report_url
    assert whole == FIVE_MB  # REST has it whole
