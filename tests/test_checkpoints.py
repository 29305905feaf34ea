"""Checkpoints (issue 26): the exact conversation of each step, written with the step, and
the CLI and MCP edges of a resume. The multi-process resume tests are in test_resume.py."""

import json
from typing import Any

import pytest
from django.core.management.base import CommandError
from django.db import connection
from django.test.utils import CaptureQueriesContext
from mcp import Client

from agents.llm.scripted import call, reply
from agents.runtime.pool import AgentPool
from research import endings, services
from research.models import Checkpoint, Event, Run, Step
from research.models_checkpoints import COMPRESS_ABOVE_BYTES, pack, unpack
from research.selectors import run_facts
from tests.conftest import wait_finished
from tests.test_cli import research
from tests.test_mcp_server import error_text, in_process, result


def test_a_large_step_is_stored_compressed_and_read_back_exactly():
    messages = [{"role": "tool", "tool_call_id": "c1", "content": "ø river " * 5000}]
    body, compressed = pack(messages)
    assert compressed and len(body) < COMPRESS_ABOVE_BYTES
    assert unpack(body, compressed) == messages
    small = [{"role": "assistant", "content": "short"}]
    assert pack(small) == (b'[{"role":"assistant","content":"short"}]', False)


def test_every_step_of_an_agent_has_its_checkpoint_with_tool_results_whole(
    agent_pool, scripted_llm, alice, settings
):
    """The transcript cuts a tool result to RESEARCH_STEP_RESULT_MAX_CHARS; the checkpoint
    keeps what the model was sent, whole, and the conversation rebuilt from the checkpoints
    is the one the model saw in its last request."""
    settings.RESEARCH_STEP_RESULT_MAX_CHARS = 50
    topic = "Checkpoint topic: list the siblings then answer"
    scripted_llm.script(topic, call("list_siblings"), call("list_siblings"), reply("Done."))
    run = wait_finished(services.run_start(owner=alice, topic=topic), timeout=20)
    assert run.status == "done"

    rows = list(Checkpoint.objects.filter(run=run).order_by("number"))
    assert [row.number for row in rows] == [1, 2, 3, 4, 5]
    assert Step.objects.filter(run=run).count() == len(rows)
    assert rows[0].state["fresh"] and not any(row.state["fresh"] for row in rows[1:])
    conversation: list[dict[str, Any]] = [m for row in rows for m in row.messages()]
    last_request = scripted_llm.requests_for(topic)[-1]["messages"]
    assert conversation[: len(last_request)] == last_request
    assert conversation[-1] == {"role": "assistant", "content": "Done."}
    tool_result = next(m for m in conversation if m["role"] == "tool")["content"]
    transcript = Step.objects.filter(run=run, kind="tool").first().output
    assert len(transcript) < len(tool_result) and tool_result.startswith(transcript[:40])


def test_a_tool_step_and_its_checkpoint_are_one_transaction(db, alice):
    run = services.run_start(owner=alice, topic="one transaction")
    facts = run_facts(run=run)
    checkpoint = {"number": 1, "messages": [{"role": "user", "content": "x"}], "state": {}}
    with CaptureQueriesContext(connection) as queries:
        services.tool_call_record(
            facts=facts, step={"kind": "tool", "tool": "t", "output": "o"}, checkpoint=checkpoint
        )
    sql = [query["sql"] for query in queries.captured_queries]
    assert sql[0].startswith("BEGIN") or "SAVEPOINT" in sql[0], sql
    assert sum("gb_agent_research_checkpoints" in statement for statement in sql) == 1


@pytest.fixture
def interrupted(db, alice, run_factory) -> Run:
    run = run_factory()
    services.run_finish(run_id=run.pk, error=endings.WORKER_LOST)
    return run


def test_the_cli_resumes_an_interrupted_research_and_says_why_it_cannot(interrupted, run_factory):
    out = research("resume", str(interrupted.pk), "--user", "alice")
    assert f"research {interrupted.pk} resumed: 1 agents go on" in out
    interrupted.refresh_from_db()
    assert (interrupted.status, interrupted.error) == ("queued", "")

    done = run_factory()
    services.run_finish(run_id=done.pk, report="r")
    with pytest.raises(CommandError, match="ended done"):
        research("resume", str(done.pk), "--user", "alice")


def test_mcp_resume_research_queues_it_again_and_refuses_a_done_one(
    transactional_db, alice, run_factory
):
    interrupted = run_factory()
    services.run_finish(run_id=interrupted.pk, error=endings.SERVER_STOPPED)
    done = run_factory()
    services.run_finish(run_id=done.pk, report="r")

    async def work(client: Client) -> dict[str, Any]:
        return {
            "resumed": result(
                await client.call_tool("resume_research", {"research_id": interrupted.pk})
            ),
            "refused": error_text(
                await client.call_tool("resume_research", {"research_id": done.pk})
            ),
        }

    seen = in_process(alice, work)
    assert seen["resumed"]["status"] == "queued"
    assert "cannot be resumed: it ended done" in seen["refused"]


@pytest.mark.django_db(transaction=True)
def test_a_resumed_agent_shows_the_tool_it_goes_on_with_not_the_thinking_of_its_claim(
    scripted_llm, web, alice
):
    """Its worker died after the model asked to read a page and before the page was read:
    resumed, the agent reads it first. Its claim recorded 'thinking' (an agent's first act is
    a model call), so before the read it records what it does: reading, and which page."""
    topic = "Resumed reader: what does the article say?"
    url = f"{web.url}/article"
    root = services.run_start(owner=alice, topic=topic)
    services.run_claim(run_id=root.pk)
    asked = {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "read_page", "arguments": ""}}
        ],
    }
    asked["tool_calls"][0]["function"]["arguments"] = json.dumps({"url": url})
    services.model_call_record(
        facts=run_facts(run=root),
        input_tokens=10,
        output_tokens=2,
        latency_ms=1,
        step={"kind": "model", "input": {"tool_calls": [["read_page", url]]}, "output": ""},
        checkpoint={
            "number": 1,
            "messages": [{"role": "system", "content": "You research."}, _task(topic), asked],
            "state": {"fresh": True},
        },
    )
    services.run_finish(run_id=root.pk, error=endings.SERVER_STOPPED)
    resume = services.research_resume(run=Run.objects.get(pk=root.pk))
    scripted_llm.script(topic, reply("The otters came back."))

    pool = AgentPool(max_active=2).start()
    try:
        root = wait_finished(root, timeout=20)
    finally:
        pool.shutdown(timeout=10)

    assert (root.status, root.report) == ("done", "The otters came back.")
    assert "GET /article" in web.requests
    after = Event.objects.filter(root_id=root.pk, seq__gt=resume.seq_before).order_by("seq")
    moves = [
        (event.payload.get("state"), event.payload.get("detail", ""))
        for event in after
        if event.type in ("run.state", "run.usage") and event.payload.get("state")
    ]
    assert moves[:3] == [
        ("queued", endings.RESUMED),
        ("thinking", ""),  # its claim
        ("reading", url),
    ], moves


def _task(topic: str) -> dict[str, str]:
    return {"role": "user", "content": topic}
