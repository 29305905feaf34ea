"""An MCP tool call with an argument the tool does not take is a tool error naming it (and
the argument it may have meant), through the SDK's own client: it was ignored, so a
misspelt option started a research without it and `list_research {"limit": 0}` listed 20."""

import sys
from typing import Any

import anyio
from mcp import Client, StdioServerParameters

from research.models import Run
from tests.conftest import PROJECT, process_env
from tests.test_mcp_server import error_text, in_process, result

START_TAKES = "topic, max_steps, dataset, review_plan, clarify, callback_url, follows"
LIST_TAKES = "status, parent_id, root_id, cursor, page_size"
VALUES = {"topic": "Otters", "research_id": 1, "text": "A note."}


def test_start_research_with_an_unknown_argument_is_refused_and_starts_nothing(
    transactional_db, alice
):
    async def work(client: Client) -> list[str]:
        return [
            error_text(await client.call_tool("start_research", arguments))
            for arguments in (
                {"topic": "Otters", "bogus": 1},
                {"topic": "Otters", "max_step": 5},
                {"topic": "Otters", "model": "gpt-x", "reviewplan": True},
            )
        ]

    bogus, misspelt, two = in_process(alice, work)

    assert bogus == f"bogus: not an argument of start_research; it takes {START_TAKES}."
    assert misspelt == (
        "max_step: not an argument of start_research (did you mean max_steps?); "
        f"it takes {START_TAKES}."
    )
    assert two == (
        f"model: not an argument of start_research; it takes {START_TAKES}. "
        "reviewplan: not an argument of start_research (did you mean review_plan?); "
        f"it takes {START_TAKES}."
    )
    assert not Run.objects.exists()


def test_list_research_with_limit_names_page_size(transactional_db, alice, run_factory):
    run_factory()

    async def work(client: Client) -> dict[str, Any]:
        return {
            "limit": error_text(await client.call_tool("list_research", {"limit": 0})),
            "page_size": result(await client.call_tool("list_research", {"page_size": 1})),
        }

    seen = in_process(alice, work)

    assert seen["limit"] == (
        f"limit: not an argument of list_research (did you mean page_size?); it takes {LIST_TAKES}."
    )
    assert len(seen["page_size"]["researches"]) == 1


def test_every_tool_refuses_an_unknown_argument_and_its_schema_says_so(
    transactional_db, alice, run_factory
):
    """One place makes every tool strict, those registered by the plan and clarify tools too."""
    run_factory()

    async def work(client: Client) -> dict[str, Any]:
        tools = (await client.list_tools()).tools
        answers = {}
        for tool in tools:
            needed = {name: VALUES[name] for name in tool.input_schema.get("required", [])}
            answers[tool.name] = await client.call_tool(tool.name, {**needed, "zzz": 1})
        return {"tools": tools, "answers": answers}

    seen = in_process(alice, work)

    assert len(seen["tools"]) >= 11
    for tool in seen["tools"]:
        assert tool.input_schema["additionalProperties"] is False, tool.name
        text = error_text(seen["answers"][tool.name])
        assert text.startswith(f"zzz: not an argument of {tool.name}; it takes "), text
    assert Run.objects.count() == 1


def test_a_misspelt_research_id_is_named_with_the_missing_one(transactional_db, alice):
    async def work(client: Client) -> list[str]:
        return [
            error_text(await client.call_tool("get_report", {"id": 7})),
            error_text(await client.call_tool("follow_research", {"research_id": 7, "timeout": 5})),
        ]

    report, follow = in_process(alice, work)

    assert report == (
        "id: not an argument of get_report (did you mean research_id?); it takes research_id. "
        "research_id: Field required."
    )
    assert follow == (
        "timeout: not an argument of follow_research (did you mean timeout_seconds?); "
        "it takes research_id, timeout_seconds."
    )


def test_the_stdio_server_refuses_an_unknown_argument(transactional_db, alice, settings):
    server = StdioServerParameters(
        command=sys.executable,
        args=["manage.py", "mcp", "--user", "alice"],
        cwd=str(PROJECT),
        env=process_env(settings),
    )

    async def session() -> str:
        async with Client(server) as client:
            return error_text(
                await client.call_tool("start_research", {"topic": "Otters", "bogus": 1})
            )

    assert anyio.run(session) == (
        f"bogus: not an argument of start_research; it takes {START_TAKES}."
    )
    assert not Run.objects.exists()
