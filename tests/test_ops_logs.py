"""Logs of a real daphne running whole researches: one format with the run and root ids,
JSON lines when asked, and none of the configured secrets in any line."""

import json
import logging
import re
import sys

import httpx
import pytest
from rest_framework.authtoken.models import Token

from agents.llm.scripted import call, fail, reply
from research.models import Run
from research.ops.logs import CanopyFormatter, redact
from tests.conftest import start_daphne, wait_finished

pytestmark = [pytest.mark.processes, pytest.mark.django_db(transaction=True)]

OPENAI_KEY = "sk-canopy-test-7f3a9c1e5b2d4f60"
SECRETS = {
    "OPENAI_API_KEY": OPENAI_KEY,
    "SECRET_KEY": "django-secret-4b1d8e2f9a7c3e5b6d0f",
    "TAVILY_API_KEY": "tvly-secret-99c2e4a1b3d5f708",
}
GOOD_TOPIC = "Which birds nest on cliffs in the north?"
BAD_KEY_TOPIC = "What does a rejected key look like?"


def research_through_the_api(server, alice, scripted_llm) -> tuple[Run, Run, str]:
    """A research with a sub-agent that succeeds, and one whose endpoint refuses the key and
    quotes it back (as OpenAI's 401 does): its error, with the key, reaches a log line."""
    scripted_llm.script(
        GOOD_TOPIC,
        call("spawn_subagent", name="coasts", reason="one facet", task="Cliff birds of coasts"),
        call("wait_subagents"),
        reply("Puffins and guillemots nest on cliffs."),
    )
    scripted_llm.script("Cliff birds of coasts", reply("Puffins."))
    scripted_llm.script(
        BAD_KEY_TOPIC, fail(401, message=f"Incorrect API key provided: {OPENAI_KEY}.")
    )
    token = Token.objects.create(user=alice).key
    headers = {"Authorization": f"Token {token}"}
    runs = []
    for topic in (GOOD_TOPIC, BAD_KEY_TOPIC):
        response = httpx.post(
            f"{server.url}/v1/gb/research", json={"topic": topic}, headers=headers
        )
        assert response.status_code == 201, response.text
        runs.append(wait_finished(Run.objects.get(pk=response.json()["id"]), timeout=30))
    return runs[0], runs[1], token


def served_logs(settings, tmp_path, alice, scripted_llm, **env) -> tuple[str, Run, Run, str]:
    server = start_daphne(settings, tmp_path, LOG_LEVEL="DEBUG", **SECRETS, **env)
    try:
        good, bad, token = research_through_the_api(server, alice, scripted_llm)
    finally:
        server.stop()
    return server.output(), good, bad, token


def test_a_whole_research_logs_no_secret_and_names_its_run(settings, tmp_path, alice, scripted_llm):
    output, good, bad, token = served_logs(settings, tmp_path, alice, scripted_llm)
    assert good.status == "done" and good.report.startswith("Puffins")
    assert bad.status == "failed" and OPENAI_KEY in bad.error  # the run keeps what it was told
    for name, secret in {**SECRETS, "the API token": token}.items():
        assert secret not in output, f"{name} appears in the logs"
    ended = f"research {bad.pk} ended: failed"
    line = next(line for line in output.splitlines() if ended in line)
    assert re.match(
        rf"^\d{{4}}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{{3}}Z INFO agents\.runtime\.worker "
        rf"run={bad.pk} root={bad.pk}: worker \d+: {ended}",
        line,
    ), line
    assert "Incorrect API key provided: [redacted]" in line


def test_json_lines_carry_the_same_fields_and_no_secret(settings, tmp_path, alice, scripted_llm):
    output, _good, bad, _token = served_logs(
        settings, tmp_path, alice, scripted_llm, LOG_FORMAT="json"
    )
    records = [json.loads(line) for line in output.splitlines() if line.strip()]
    assert records and all({"time", "level", "logger", "message"} <= set(r) for r in records)
    ended = next(r for r in records if f"research {bad.pk} ended" in r["message"])
    assert (ended["run_id"], ended["root_id"], ended["level"]) == (bad.pk, bad.pk, "INFO")
    assert OPENAI_KEY not in output and SECRETS["SECRET_KEY"] not in output


def test_credentials_in_headers_and_urls_are_redacted_whatever_their_value():
    line = (
        "GET https://api.example.org/search?q=owls&api_key=abc123 "
        "headers={'Authorization': 'Bearer eyJhbGciOi.x.y', 'X-Subscription-Token': 'BSAx1'}"
    )
    redacted = redact(line, [])
    assert "abc123" not in redacted and "eyJhbGciOi" not in redacted and "BSAx1" not in redacted
    assert "q=owls" in redacted


def test_a_traceback_is_redacted_too(settings):
    settings.OPENAI_API_KEY = OPENAI_KEY
    try:
        raise ValueError(f"cannot use {OPENAI_KEY}")
    except ValueError:
        record = logging.LogRecord("x", logging.ERROR, "f", 1, "failed", None, sys.exc_info())
    text = CanopyFormatter().format(record)
    assert "ValueError: cannot use [redacted]" in text and OPENAI_KEY not in text
