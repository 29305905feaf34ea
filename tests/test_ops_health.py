"""`/healthz` against real daphne processes, PostgreSQL and Redis: 200 when every part
answers, 503 naming the part that does not, and never a login or a private detail."""

import signal

import httpx
import pytest

from research.models import Worker
from tests.conftest import free_port, start_daphne, wait_for

pytestmark = [pytest.mark.processes, pytest.mark.django_db(transaction=True)]


def test_a_served_app_with_its_agent_pool_is_healthy_without_a_login(daphne_server):
    # The web process's pool registers and heartbeats once it has started.
    wait_for(lambda: Worker.objects.filter(stopped_at__isnull=True).exists())
    response = httpx.get(f"{daphne_server.url}/healthz")
    assert response.status_code == 200, response.text
    assert response.json() == {
        "status": "ok",
        "failing": [],
        "checks": {
            "database": {"status": "ok"},
            "redis": {"status": "ok"},
            "agents": {"status": "ok"},
        },
    }
    assert "no-cache" in response.headers["Cache-Control"]


def test_an_unreachable_redis_is_a_503_naming_redis_and_not_its_address(
    transactional_db, scripted_llm, settings, tmp_path
):
    closed = free_port()
    server = start_daphne(
        settings, tmp_path, REDIS_URL=f"redis://127.0.0.1:{closed}/0", RESEARCH_MESSENGER="memory"
    )
    try:
        response = httpx.get(f"{server.url}/healthz", timeout=20)
    finally:
        exit_code = server.stop()
    assert exit_code != -signal.SIGKILL  # no check holds the server's exit on SIGTERM
    assert response.status_code == 503
    body = response.json()
    assert body["failing"] == ["redis"]
    assert body["checks"]["redis"]["status"] == "failing"
    assert body["checks"]["database"] == {"status": "ok"}
    assert str(closed) not in response.text


def test_no_agent_process_heartbeating_is_a_503_naming_the_agents(
    transactional_db, scripted_llm, settings, tmp_path
):
    # A web process that only enqueues, with no runagents worker: researches would wait.
    server = start_daphne(
        settings, tmp_path, RESEARCH_AGENTS_IN_WEB="false", RESEARCH_WORKER_DEAD_SECONDS="30"
    )
    try:
        response = httpx.get(f"{server.url}/healthz")
    finally:
        server.stop()
    assert response.status_code == 503
    assert response.json()["failing"] == ["agents"]
    assert "30 seconds" in response.json()["checks"]["agents"]["reason"]


def test_an_unreachable_database_is_a_503_naming_the_database(
    transactional_db, scripted_llm, settings, tmp_path
):
    closed = free_port()
    server = start_daphne(
        settings,
        tmp_path,
        RESEARCH_AGENTS_IN_WEB="false",
        DATABASE_URL=f"postgres://postgres@127.0.0.1:{closed}/nowhere",
        HEALTH_TIMEOUT_SECONDS="2",
    )
    try:
        # The pool would wait 30 seconds for a connection; the check answers within its own.
        response = httpx.get(f"{server.url}/healthz", timeout=20)
    finally:
        exit_code = server.stop()
    # The check still waiting on the pool does not hold the server's exit on SIGTERM (it
    # would be killed after 20 s, well before the pool's 30 s).
    assert exit_code != -signal.SIGKILL
    assert response.status_code == 503
    body = response.json()
    assert body["failing"] == ["agents", "database"]
    assert "within 2 seconds" in body["checks"]["database"]["reason"]
    assert body["checks"]["agents"]["reason"] == "not checked: the database is failing"
    assert "nowhere" not in response.text and str(closed) not in response.text
