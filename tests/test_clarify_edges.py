"""The clarify step from the other edges (issue 27): an assistant over MCP and the command
line start a research with clarify, read the lead's questions, and answer or skip them."""

import io

import pytest
from django.core.management import call_command
from mcp import Client

from agents.llm.scripted import call, reply
from research.models import Run
from tests.conftest import wait_finished, wait_for
from tests.test_mcp_server import error_text, in_process, result

pytestmark = pytest.mark.django_db(transaction=True)


def research(*args: str) -> str:
    out = io.StringIO()
    call_command("research", *args, "--user", "alice", stdout=out)
    return out.getvalue()


def test_an_assistant_follows_a_research_to_its_questions_and_answers_them(
    agent_pool, scripted_llm, alice
):
    topic = "Eels"
    scripted_llm.script(
        topic, call("ask_clarifying_questions", questions=["Which eels?"]), reply("Eel report.")
    )

    async def work(client: Client) -> dict:
        seen = {}
        started = result(
            await client.call_tool("start_research", {"topic": topic, "clarify": True})
        )
        follow = {"research_id": started["id"], "timeout_seconds": 30}
        seen["asked"] = result(await client.call_tool("follow_research", follow))
        seen["nothing"] = error_text(
            await client.call_tool("answer_questions", {"research_id": started["id"]})
        )
        seen["answered"] = result(
            await client.call_tool(
                "answer_questions", {"research_id": started["id"], "answers": ["European eels"]}
            )
        )
        seen["done"] = result(await client.call_tool("follow_research", follow))
        return seen

    seen = in_process(alice, work)

    asked = seen["asked"]
    assert (asked["status"], asked["state"], asked["awaiting_review"]) == (
        "paused",
        "clarifying",
        True,
    )
    assert asked["clarification"]["questions"] == ["Which eels?"]
    assert "answers must be a list of strings" in seen["nothing"]
    assert seen["answered"]["clarification"]["answers"] == ["European eels"]
    assert seen["done"]["status"] == "done"
    assert "Answer: European eels" in scripted_llm.requests_for(topic)[1]["messages"][1]["content"]


def test_the_command_line_prints_the_questions_and_skips_them(agent_pool, scripted_llm, alice):
    topic = "Voles"
    scripted_llm.script(
        topic,
        call("ask_clarifying_questions", questions=["Field voles or water voles?", "Where?"]),
        reply("Vole report."),
    )
    run_id = int(research("start", topic, "--clarify", "--no-wait"))
    wait_for(lambda: Run.objects.get(pk=run_id).status == "paused")

    printed = research("answer", str(run_id))
    skipped = research("answer", str(run_id), "--skip")

    assert printed.splitlines() == [
        "1\tField voles or water voles?",
        "2\tWhere?",
        f"answer them: manage.py research answer {run_id} TEXT ... (or --skip)",
    ]
    assert skipped == f"research {run_id}: questions skipped; the research starts.\n"
    assert wait_finished(Run.objects.get(pk=run_id)).status == "done"
    assert research("answer", str(run_id)).splitlines() == [
        "1\tField voles or water voles?",
        "2\tWhere?",
    ]
