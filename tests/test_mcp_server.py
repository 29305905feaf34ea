"""Canopy as an MCP server, driven by the MCP SDK's own client: over stdio (`manage.py mcp`
as a subprocess) and over streamable HTTP against a real daphne, on the scripted model."""

import json
import sys
import urllib.error
import urllib.request
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import httpx2
import pytest
import redis
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from rest_framework.authtoken.models import Token

from agents.llm.scripted import call, reply, slow
from research import services
from research.mcp_server.tools import build_server
from research.models import Message, Run
from tests.conftest import PROJECT, process_env

TOPIC = "MCP topic: how do context managers close files"
SLOW_TOPIC = "MCP slow topic: what outlives a cancelled research"
REPORT = "Context managers close files in __exit__. Sources: https://docs.python.org/3/"

Session = Callable[[Client], Awaitable[Any]]


def result(answer) -> Any:
    assert not answer.is_error, answer.content[0].text
    return answer.structured_content


def error_text(answer) -> str:
    assert answer.is_error, answer
    return answer.content[0].text


def script_research(llm) -> None:
    llm.script(TOPIC, slow(0.6, call("not_a_tool")), slow(0.6, reply(REPORT)))
    # Turns that take a second each: long enough for a cancel to find the agent working.
    llm.script(SLOW_TOPIC, *[slow(1.0, call("not_a_tool")) for _ in range(20)])


async def research_both_ways(client: Client) -> dict[str, Any]:
    """What the tests assert for each transport: start, list, follow, report, cancel."""
    seen: dict[str, Any] = {"progress": []}
    names = {tool.name for tool in (await client.list_tools()).tools}
    seen["tools"] = names
    started = result(await client.call_tool("start_research", {"topic": TOPIC, "max_steps": 5}))
    seen["started"] = started
    listed = result(await client.call_tool("list_research", {}))
    seen["listed"] = [run["id"] for run in listed["researches"]]

    async def progress(value: float, total: float | None, message: str | None) -> None:
        seen["progress"].append((value, message))

    seen["followed"] = result(
        await client.call_tool(
            "follow_research",
            {"research_id": started["id"], "timeout_seconds": 60},
            progress_callback=progress,
        )
    )
    seen["report"] = result(await client.call_tool("get_report", {"research_id": started["id"]}))
    seen["cancel_done"] = error_text(
        await client.call_tool("cancel_research", {"research_id": started["id"]})
    )

    slow_run = result(await client.call_tool("start_research", {"topic": SLOW_TOPIC}))
    seen["cancel"] = result(
        await client.call_tool("cancel_research", {"research_id": slow_run["id"]})
    )
    seen["cancelled"] = result(
        await client.call_tool(
            "follow_research", {"research_id": slow_run["id"], "timeout_seconds": 60}
        )
    )
    seen["bad"] = error_text(await client.call_tool("start_research", {"topic": "   "}))
    return seen


def check_research_both_ways(seen: dict[str, Any]) -> None:
    assert {
        "start_research",
        "list_research",
        "get_research",
        "follow_research",
        "get_report",
        "cancel_research",
    } <= seen["tools"]
    started = seen["started"]
    # Working when the server's agent pool seated it at its start (research.services.seats),
    # queued when the pool had no slot free at that moment.
    assert started["status"] in ("queued", "working") and started["topic"] == TOPIC
    assert started["max_steps"] == 5
    assert started["id"] in seen["listed"]

    followed = seen["followed"]
    assert followed["finished"] is True and followed["status"] == "done"
    messages = [message for _, message in seen["progress"]]
    values = [value for value, _ in seen["progress"]]
    assert len(messages) >= 2, messages
    assert values == sorted(set(values)), "progress must increase with each notification"
    assert messages[-1].startswith(f"research {started['id']} done")
    assert any("working" in message for message in messages), messages

    report = seen["report"]
    assert report["report"] == REPORT and report["status"] == "done"
    assert seen["cancel_done"] == (f"research {started['id']} has ended (done): nothing to cancel.")
    assert [c["url"] for c in report["citations"]] == ["https://docs.python.org/3/"]
    assert report["citations"][0]["status"] == "flagged: not seen by any agent"

    cancelled = seen["cancelled"]
    assert cancelled["status"] == "failed" and cancelled["error"] == "cancelled by the user"
    assert seen["bad"] == "topic must not be empty."


def test_stdio_client_starts_follows_reads_and_cancels(
    transactional_db, scripted_llm, alice, settings
):
    script_research(scripted_llm)
    server = StdioServerParameters(
        command=sys.executable,
        args=["manage.py", "mcp", "--user", "alice"],
        cwd=str(PROJECT),
        env=process_env(settings),
    )

    async def session() -> dict[str, Any]:
        async with Client(server) as client:
            return await research_both_ways(client)

    seen = anyio.run(session)
    check_research_both_ways(seen)
    run = Run.objects.get(pk=seen["started"]["id"])
    assert run.owner == alice and run.report == REPORT


# --- Over HTTP, against a real daphne ------------------------------------------------------


def http_session(url: str, key: str, work: Session, *, mode: str = "auto") -> Any:
    """`work(client)` in a session of the SDK's client; mode "legacy" speaks the handshake-era
    protocol (initialize, then a session) that most deployed clients still speak."""

    async def session() -> Any:
        headers = {"Authorization": f"Bearer {key}"}
        timeout = httpx2.Timeout(30, read=120)
        async with (
            httpx2.AsyncClient(headers=headers, timeout=timeout) as http,
            Client(streamable_http_client(url, http_client=http), mode=mode) as client,
        ):
            return await work(client)

    return anyio.run(session)


def test_http_client_starts_follows_reads_and_cancels(daphne_server, scripted_llm, alice, bob):
    script_research(scripted_llm)
    url = f"{daphne_server.url}/mcp"
    alice_key = Token.objects.create(user=alice).key
    seen = http_session(url, alice_key, research_both_ways)
    check_research_both_ways(seen)
    research_id = seen["started"]["id"]

    async def as_bob(client: Client) -> dict[str, Any]:
        return {
            "list": result(await client.call_tool("list_research", {})),
            "tree": result(await client.call_tool("list_research", {"root_id": research_id})),
            "get": error_text(await client.call_tool("get_research", {"research_id": research_id})),
            "report": error_text(
                await client.call_tool("get_report", {"research_id": research_id})
            ),
            "cancel": error_text(
                await client.call_tool("cancel_research", {"research_id": research_id})
            ),
        }

    bobs = http_session(url, Token.objects.create(user=bob).key, as_bob)
    assert bobs["list"] == {"researches": [], "next_cursor": None}
    assert bobs["tree"] == {"researches": [], "next_cursor": None}
    not_found = f"no research with id {research_id}."
    assert bobs["get"] == bobs["report"] == bobs["cancel"] == not_found


def test_http_without_a_valid_token_is_refused(daphne_server, alice):
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}).encode()
    for headers in ({}, {"Authorization": "Bearer not-a-key"}, {"Authorization": "Basic x"}):
        request = urllib.request.Request(
            f"{daphne_server.url}/mcp",
            data=body,
            headers={"Content-Type": "application/json", **headers},
        )
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=10)
        assert refused.value.code == 401
        assert refused.value.headers["WWW-Authenticate"].startswith("Bearer")
        assert "Authorization: Bearer" in json.loads(refused.value.read())["detail"]


# --- Tool errors carry the REST API's texts (in process) -----------------------------------


def in_process(user, work: Session) -> Any:
    server = build_server(owner_of=lambda ctx: user.pk)

    async def session() -> Any:
        async with Client(server) as client:
            return await work(client)

    return anyio.run(session)


def test_bad_arguments_are_tool_errors_with_the_rest_apis_texts(
    transactional_db, alice, api, run_factory
):
    other = run_factory()
    cases = [
        ({"topic": ""}, "topic"),
        ({"topic": "x", "max_steps": 0}, "max_steps"),
        ({"topic": "x", "max_steps": 41}, "max_steps"),
        ({"topic": "x", "dataset": 999999}, "dataset"),
    ]

    async def work(client: Client) -> dict[str, Any]:
        answers = [
            error_text(await client.call_tool("start_research", arguments))
            for arguments, _ in cases
        ]
        return {
            "start": answers,
            "get": error_text(await client.call_tool("get_research", {"research_id": 999999})),
            "list": error_text(await client.call_tool("list_research", {"parent_id": 0})),
            "cursor": error_text(await client.call_tool("list_research", {"cursor": "zzz"})),
            "type": error_text(
                await client.call_tool("start_research", {"topic": "x", "max_steps": "many"})
            ),
            "missing": error_text(await client.call_tool("get_report", {})),
            "follow": error_text(
                await client.call_tool(
                    "follow_research", {"research_id": other.pk, "timeout_seconds": 0}
                )
            ),
        }

    answers = in_process(alice, work)
    for (arguments, field), text in zip(cases, answers["start"], strict=True):
        rest = api.post("/v1/gb/research", arguments, format="json")
        assert rest.status_code == 400
        assert text == rest.json()[field][0]
    assert answers["get"] == api.get("/v1/gb/research/999999").json()["detail"]
    rest = api.get("/v1/gb/research?parent_id=0").json()
    assert answers["list"] == f"parent_id: {rest['parent_id'][0]}"
    assert answers["cursor"] == "cursor 'zzz' is not a next_cursor that list_research gave."
    assert answers["type"] == (
        "max_steps: Input should be a valid integer, unable to parse string as an integer."
    )
    assert answers["missing"] == "research_id: Field required."
    assert answers["follow"] == "timeout_seconds must be from 1 to 3600, not 0."
    assert Run.objects.count() == 1  # nothing refused was started


def test_list_pages_with_a_cursor_and_lists_sub_agents(
    transactional_db, alice, bob, tree_factory, run_factory, settings
):
    settings.RESEARCH_MAX_WORKING_ROOTS = 10
    tree = tree_factory(children=("history", "semantics"), grandchildren=())
    later = [run_factory(), run_factory()]
    run_factory(owner=bob)

    async def work(client: Client) -> dict[str, Any]:
        first = result(await client.call_tool("list_research", {"page_size": 2}))
        second = result(
            await client.call_tool(
                "list_research", {"page_size": 2, "cursor": first["next_cursor"]}
            )
        )
        children = result(await client.call_tool("list_research", {"parent_id": tree.pk}))
        research = result(await client.call_tool("get_research", {"research_id": tree.pk}))
        return {"pages": [first, second], "children": children, "research": research}

    seen = in_process(alice, work)
    first, second = seen["pages"]
    assert [run["id"] for run in first["researches"]] == [later[1].pk, later[0].pk]
    assert [run["id"] for run in second["researches"]] == [tree.pk]
    assert second["next_cursor"] is None
    assert "report" not in first["researches"][0]
    assert [run["name"] for run in seen["children"]["researches"]] == ["semantics", "history"]
    agents = seen["research"]["agents"]
    assert [(agent["name"], agent["status"], agent["cost_usd"]) for agent in agents] == [
        ("history", "queued", "0.00000000"),
        ("semantics", "queued", "0.00000000"),
    ]


def test_send_note_reaches_a_working_agent_and_is_refused_as_the_rest_api_refuses(
    transactional_db, alice, bob, api, run_factory
):
    working, ended = run_factory(), run_factory()
    services.run_finish(run_id=ended.pk, report="done")

    async def as_alice(client: Client) -> dict[str, Any]:
        names = {tool.name for tool in (await client.list_tools()).tools}
        sent = result(
            await client.call_tool(
                "send_note", {"research_id": working.pk, "text": "Prefer primary sources."}
            )
        )
        late = error_text(
            await client.call_tool("send_note", {"research_id": ended.pk, "text": "too late"})
        )
        return {"names": names, "sent": sent, "late": late}

    async def as_bob(client: Client) -> str:
        return error_text(
            await client.call_tool("send_note", {"research_id": working.pk, "text": "hello"})
        )

    alices = in_process(alice, as_alice)
    assert "send_note" in alices["names"]
    sent = alices["sent"]
    assert (sent["from_analyst"], sent["to_run_id"], sent["text"]) == (
        True,
        working.pk,
        "Prefer primary sources.",
    )
    rest = api.post(f"/v1/gb/research/{ended.pk}/notes", {"text": "too late"}, format="json")
    assert rest.status_code == 409 and alices["late"] == rest.json()["detail"]
    assert in_process(bob, as_bob) == f"no research with id {working.pk}."
    assert Message.objects.filter(to_run=working).count() == 1


def test_follow_returns_when_a_research_waits_for_its_plan_review_and_starts_are_throttled(
    transactional_db, alice, settings
):
    paused = services.run_start(owner=alice, topic="Paused for review", review_plan=True)
    services.run_claim(run_id=paused.pk)
    services.plan_write(root_id=paused.pk, items=["One item"])
    services.plan_pause(root_id=paused.pk)
    settings.THROTTLE_RATES = {**settings.THROTTLE_RATES, "research_start": "1/minute"}
    # Counters of earlier tests (whose users had the same ids) are forgotten.
    counters = redis.Redis.from_url(settings.REDIS_URL)
    for key in counters.scan_iter(match="canopy:*throttle_*"):
        counters.delete(key)
    counters.close()

    async def work(client: Client) -> dict[str, Any]:
        followed = result(
            await client.call_tool(
                "follow_research", {"research_id": paused.pk, "timeout_seconds": 60}
            )
        )
        listed = result(await client.call_tool("list_research", {"status": "paused"}))
        first = await client.call_tool("start_research", {"topic": "first of the minute"})
        second = error_text(await client.call_tool("start_research", {"topic": "one too many"}))
        return {"followed": followed, "listed": listed, "first": first, "second": second}

    answers = in_process(alice, work)
    followed = answers["followed"]
    assert (followed["status"], followed["finished"], followed["awaiting_review"]) == (
        "paused",
        False,
        True,
    )
    assert [run["id"] for run in answers["listed"]["researches"]] == [paused.pk]
    assert not answers["first"].is_error
    assert answers["second"].startswith("Request was throttled. Expected available in ")
    assert not Run.objects.filter(topic="one too many").exists()


def test_a_request_whose_id_is_not_a_string_or_number_is_refused_with_a_400(daphne_server, alice):
    """The SDK's handshake-era transport takes such a request for a notification: 202, and
    the client waits for an answer that never comes."""
    url = f"{daphne_server.url}/mcp"
    headers = {
        "Authorization": f"Bearer {Token.objects.create(user=alice).key}",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2025-06-18",
    }
    initialize = {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "test", "version": "1"},
    }
    with httpx2.Client(headers=headers, timeout=10) as http:
        opened = http.post(
            url, json={"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": initialize}
        )
        assert opened.status_code == 200, opened.text
        http.headers["Mcp-Session-Id"] = opened.headers["mcp-session-id"]
        http.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"})
        answers = {
            json.dumps(bad): http.post(
                url, json={"jsonrpc": "2.0", "id": bad, "method": "tools/list"}
            )
            for bad in ({"n": 1}, [1], None, True, 2.0)
        }
        listed = http.post(url, json={"jsonrpc": "2.0", "id": "ok", "method": "tools/list"})
        del http.headers["Mcp-Session-Id"]
        http.headers["MCP-Protocol-Version"] = "2026-07-28"  # the sessionless protocol
        answers["modern"] = http.post(url, json={"jsonrpc": "2.0", "id": {}, "method": "x"})
    for bad, answer in answers.items():
        assert answer.status_code == 400, (bad, answer.status_code, answer.text)
        error = answer.json()
        assert error["id"] is None and error["error"]["code"] == -32600
        assert error["error"]["message"].startswith(
            "Invalid Request: an MCP request's id must be a string or an integer, not "
        )
    messages = {bad: answer.json()["error"]["message"] for bad, answer in answers.items()}
    assert messages['{"n": 1}'].endswith('not an object: {"n": 1}.')
    assert messages["[1]"].endswith("not an array: [1].")
    assert messages["null"].endswith("not null.")
    assert messages["true"].endswith("not a boolean: true.")
    assert messages["2.0"].endswith("not a decimal number: 2.0.")
    assert messages["modern"].endswith("not an object: {}.")
    assert listed.status_code == 200 and "start_research" in listed.text  # the session lives
