"""`/metrics` of a real daphne after a whole research: Prometheus text that a scraper reads,
with the request metrics, Canopy's own figures from the database and the push lag of the
events this process sent to a browser; only for the token or the allowed addresses."""

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from agents.llm.scripted import call, reply, slow
from research.models import LLMCall, Run
from tests.conftest import start_daphne, wait_for
from tests.test_scaleout import receive_until_root_finished, watch

pytestmark = [pytest.mark.processes, pytest.mark.django_db(transaction=True)]

TOKEN = "scrape-token-5d8c0e7b1a"
TOPIC = "How do swifts sleep in flight?"


def samples(text: str) -> dict[tuple[str, tuple], float]:
    """{(sample name, sorted labels): value} of a scrape."""
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def scrape(server, **headers) -> httpx.Response:
    return httpx.get(f"{server.url}/metrics", headers=headers)


@pytest.fixture
def served(transactional_db, scripted_llm, settings, tmp_path):
    server = start_daphne(
        settings, tmp_path, METRICS_TOKEN=TOKEN, METRICS_ALLOWED_IPS="10.9.0.0/16"
    )
    yield server
    server.stop()


def test_a_scrape_after_a_research_counts_its_runs_calls_tokens_cost_and_push_lag(
    served, scripted_llm, api_for, alice
):
    scripted_llm.script(
        TOPIC,
        call("spawn_subagent", name="sleep", reason="one facet", task="Swift sleep studies"),
        call("wait_subagents"),
        reply("Swifts sleep in short bursts while gliding."),
    )
    scripted_llm.script("Swift sleep studies", slow(0.6, reply("Short bursts.")))
    with httpx.Client(base_url=served.url) as web:
        from rest_framework.authtoken.models import Token

        key = Token.objects.create(user=alice).key
        created = web.post(
            "/v1/gb/research", json={"topic": TOPIC}, headers={"Authorization": f"Token {key}"}
        )
    assert created.status_code == 201, created.text
    root_id = created.json()["id"]
    with watch(served, root_id, after=0) as socket:
        receive_until_root_finished(socket, root_id)
    wait_for(lambda: not Run.objects.filter(status__in=["queued", "working"]).exists())
    assert LLMCall.objects.count() == 4  # the root's three turns, the sub-agent's one

    response = scrape(served, Authorization=f"Bearer {TOKEN}")
    assert response.status_code == 200
    assert response.headers["Content-Type"].startswith("text/plain; version=")
    got = samples(response.text)
    scripted = (("model", "scripted"),)
    assert got[("canopy_model_calls_total", scripted)] == 4
    assert got[("canopy_model_tokens_total", (("direction", "input"), *scripted))] == 400
    assert got[("canopy_model_tokens_total", (("direction", "output"), *scripted))] == 80
    # 400 input tokens at $1 and 80 output at $2 per million.
    assert got[("canopy_model_cost_usd_total", scripted)] == pytest.approx(0.00056)
    assert got[("canopy_model_call_latency_seconds_count", scripted)] == 4
    bucket = "canopy_model_call_latency_seconds_bucket"
    assert got[(bucket, (("le", "+Inf"), *scripted))] == 4
    # Bounds far above the calls' own times: a loaded machine moves a call across 1 s.
    assert got[(bucket, (("le", "10.0"), *scripted))] == 4
    assert got[(bucket, (("le", "0.5"), *scripted))] <= 3  # the sub-agent's slow call is not
    assert got[("canopy_runs", (("kind", "root"), ("status", "done")))] == 1
    assert got[("canopy_runs", (("kind", "subagent"), ("status", "done")))] == 1
    assert got[("canopy_runs", (("kind", "root"), ("status", "working")))] == 0
    assert got[("canopy_agents_working", ())] == 0
    assert got[("canopy_agents_waiting_for_slot", ())] == 0
    assert got[("canopy_workers_live", ())] == 1
    # The events this process pushed live to the browser were timed.
    assert got[("canopy_event_push_lag_seconds_count", ())] >= 5
    # django-prometheus: the API's POST and the metrics requests themselves.
    assert got[("django_http_requests_total_by_method_total", (("method", "POST"),))] >= 1


def test_a_scrape_without_the_token_from_elsewhere_is_refused(served):
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN}):
        response = scrape(served, **headers)
        assert response.status_code == 403
        assert "METRICS_TOKEN" in response.text and "canopy_" not in response.text


def test_an_allowed_address_scrapes_without_a_token(
    transactional_db, scripted_llm, settings, tmp_path
):
    server = start_daphne(settings, tmp_path, METRICS_ALLOWED_IPS="127.0.0.0/8")
    try:
        response = scrape(server)
    finally:
        server.stop()
    assert response.status_code == 200
    assert "canopy_workers_live" in response.text


def scrape_through(server, forwarded_for: str | None = None, **headers: str) -> int:
    if forwarded_for is not None:
        headers["X-Forwarded-For"] = forwarded_for
    return scrape(server, **headers).status_code


def test_behind_one_proxy_the_forwarded_client_is_judged_not_the_proxy(
    transactional_db, scripted_llm, settings, tmp_path
):
    """A proxy on the same host connects from 127.0.0.1: its client's address decides."""
    server = start_daphne(settings, tmp_path, METRICS_TOKEN=TOKEN, NUM_PROXIES="1")
    try:
        outside = scrape_through(server, "203.0.113.9")
        with_token = scrape_through(server, "203.0.113.9", Authorization=f"Bearer {TOKEN}")
        spoofed = scrape_through(server, "127.0.0.1, 203.0.113.9")  # the proxy appends
        local_client = scrape_through(server, "127.0.0.1")
        not_proxied = scrape_through(server)  # a scraper on this host, straight to daphne
    finally:
        server.stop()
    assert (outside, with_token, spoofed) == (403, 200, 403)
    assert (local_client, not_proxied) == (200, 200)


@pytest.mark.parametrize(
    "header",
    [
        {"HTTP_X_FORWARDED_FOR": "203.0.113.9"},
        {"HTTP_X_FORWARDED_FOR": "127.0.0.1"},
        {"HTTP_FORWARDED": "for=203.0.113.9"},
        {"HTTP_X_REAL_IP": "203.0.113.9"},
    ],
)
def test_without_num_proxies_a_forwarded_request_gets_in_by_the_token_only(
    client, settings, header
):
    """NUM_PROXIES=0 does not say which forwarded address to believe: none is believed."""
    settings.METRICS_TOKEN = TOKEN
    assert client.get("/metrics", REMOTE_ADDR="127.0.0.1", **header).status_code == 403
    token = {"HTTP_AUTHORIZATION": f"Bearer {TOKEN}"}
    assert client.get("/metrics", REMOTE_ADDR="127.0.0.1", **header, **token).status_code == 200
    assert client.get("/metrics", REMOTE_ADDR="127.0.0.1").status_code == 200


@pytest.mark.parametrize(
    ("forwarded_for", "status"),
    [
        ("127.0.0.1, 10.0.0.2", 200),  # the client, then the outer proxy
        ("203.0.113.9, 10.0.0.2", 403),
        ("127.0.0.1", 403),  # fewer hops than NUM_PROXIES: not the path it describes
    ],
)
def test_behind_two_proxies_the_second_address_from_the_right_is_the_client(
    client, settings, forwarded_for, status
):
    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "NUM_PROXIES": 2}
    response = client.get("/metrics", REMOTE_ADDR="127.0.0.1", HTTP_X_FORWARDED_FOR=forwarded_for)
    assert response.status_code == status
