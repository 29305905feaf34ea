"""Agent workers: the first heartbeat is on the database's clock, and an idle worker wakes on
a NOTIFY when a research is queued in another process, not on its next poll."""

import subprocess
import sys
import time
import uuid
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from agents.llm.scripted import reply
from research import services
from research.models import Run
from tests.conftest import PROJECT, ServerProcess, process_env, start_daphne, wait_for
from tests.test_scaleout import CLUSTER_ENV, api_client, stop_all, worker_id_of


@pytest.mark.django_db
def test_a_workers_first_heartbeat_is_on_the_database_clock(monkeypatch):
    # This machine's clock runs an hour ahead: its workers must not look alive for an hour
    # longer than they are (nor healthy ones dead, to a machine whose clock lags).
    ahead = timezone.now() + timedelta(hours=1)
    monkeypatch.setattr(timezone, "now", lambda: ahead)
    with connection.cursor() as cursor:
        cursor.execute("SELECT clock_timestamp()")
        (before,) = cursor.fetchone()
        worker = services.worker_register()
        cursor.execute("SELECT clock_timestamp()")
        (after,) = cursor.fetchone()
    assert before <= worker.heartbeat_at <= after


@pytest.mark.processes
@pytest.mark.django_db(transaction=True)
def test_an_idle_worker_claims_a_new_research_at_once_not_at_its_next_poll(
    scripted_llm, settings, tmp_path, alice
):
    poll = 120  # the worker would not look again within the test
    env = {**CLUSTER_ENV, "RESEARCH_CLAIM_POLL_SECONDS": str(poll)}
    log = tmp_path / f"worker-{uuid.uuid4().hex[:8]}.log"
    worker = ServerProcess(
        subprocess.Popen(
            [sys.executable, "manage.py", "runagents", "--max-agents", "2"],
            cwd=PROJECT,
            env=process_env(settings, **env),
            stdout=log.open("w"),
            stderr=subprocess.STDOUT,
        ),
        url="",
        log=log,
    )
    web = start_daphne(settings, tmp_path, **env)
    try:
        worker_id = worker_id_of(worker)
        time.sleep(1.5)  # past the look the worker takes once its listener is up
        scripted_llm.script("Where do eels spawn?", reply("In the Sargasso Sea."))
        with api_client(web.url, alice) as api:
            created = api.post("/v1/gb/research", json={"topic": "Where do eels spawn?"})
        assert created.status_code == 201, created.text
        queued_at = time.monotonic()
        run = Run.objects.get(pk=created.json()["id"])
        wait_for(
            lambda: Run.objects.filter(pk=run.pk, worker_id=worker_id).exists(),
            timeout=poll / 4,
            message=f"the idle worker did not wake for the new research:\n{worker.output()}",
        )
        claimed_after = time.monotonic() - queued_at
        wait_for(lambda: Run.objects.get(pk=run.pk).status == "done", timeout=30)
    finally:
        stop_all([worker, web])
    assert claimed_after < poll / 4
