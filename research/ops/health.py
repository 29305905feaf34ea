"""`/healthz`: whether this process can serve, for a load balancer or an orchestrator.

Three parts, each a yes or no with a short reason: the database answers, Redis answers
(only when REDIS_URL is set), and some agent process (the web process or a runagents
worker) has heartbeated recently, or queued researches would wait for ever. Nothing
private goes in the body: no host, no URL, no exception text that might carry one.
"""

import threading
import time
from collections.abc import Callable

from django.conf import settings
from django.db import connection, connections
from django.http import HttpRequest, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from research.selectors.workers import agent_process_alive

REDIS_TIMEOUT_SECONDS = 2.0


def check_database() -> str | None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    return None


def check_redis() -> str | None:
    import redis

    client = redis.Redis.from_url(
        settings.REDIS_URL,
        socket_timeout=REDIS_TIMEOUT_SECONDS,
        socket_connect_timeout=REDIS_TIMEOUT_SECONDS,
    )
    try:
        client.ping()
    finally:
        client.close()
    return None


def check_agents() -> str | None:
    if agent_process_alive():
        return None
    return f"no agent process has heartbeated in {settings.RESEARCH_WORKER_DEAD_SECONDS:g} seconds"


def _checks() -> dict[str, Callable[[], str | None]]:
    checks = {"database": check_database}
    if settings.REDIS_URL:
        checks["redis"] = check_redis
    checks["agents"] = check_agents
    return checks


def run_checks() -> dict[str, dict[str, str]]:
    """Each part's status, "ok" or "failing" with a reason that names no host or secret.

    The checks run at once in their own threads, each given HEALTH_TIMEOUT_SECONDS: a
    database that does not answer would otherwise hold the request for the connection
    pool's whole timeout, longer than a load balancer waits. The agents check reads the
    database, so it is not asked when the database is failing.
    """
    checks = _checks()
    timeout = settings.HEALTH_TIMEOUT_SECONDS
    # Daemon threads, not an executor: a check stuck on an unreachable database would
    # otherwise hold the process's exit (SIGTERM) for the pool's whole timeout.
    answers: dict[str, str | None] = {}
    threads = {
        name: threading.Thread(
            target=_run_check, args=(name, check, answers), name=f"healthz-{name}", daemon=True
        )
        for name, check in checks.items()
    }
    for thread in threads.values():
        thread.start()
    deadline = time.monotonic() + timeout
    results: dict[str, dict[str, str]] = {}
    for name, thread in threads.items():
        thread.join(max(0.0, deadline - time.monotonic()))
        problem = answers.get(name, f"{name} did not answer within {timeout:g} seconds")
        if name == "agents" and "database" in results and results["database"]["status"] != "ok":
            problem = "not checked: the database is failing"
        results[name] = (
            {"status": "ok"}
            if problem is None
            else {
                "status": "failing",
                "reason": problem,
            }
        )
    return results


def _run_check(name: str, check: Callable[[], str | None], answers: dict[str, str | None]) -> None:
    try:
        answers[name] = check()
    except Exception as error:  # noqa: BLE001  every failure is a failing part
        answers[name] = f"{name} did not answer ({type(error).__name__})"
    finally:
        connections.close_all()


@never_cache
@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    checks = run_checks()
    failing = sorted(name for name, result in checks.items() if result["status"] != "ok")
    body = {"status": "failing" if failing else "ok", "failing": failing, "checks": checks}
    return JsonResponse(body, status=503 if failing else 200)
