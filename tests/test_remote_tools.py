"""Remote MCP tools: a local MCP server built with the SDK (streamable HTTP on a free port,
in a thread) serves tools that a scripted researcher lists, enables and calls."""

import json
import threading
from datetime import timedelta

import anyio
import pytest
import uvicorn
from django.utils import timezone
from mcp.server.mcpserver import Context, MCPServer

from agents import kinds
from agents.llm.scripted import call, reply
from agents.runtime.context import AgentContext, CancelToken
from agents.tools.base import ToolError
from agents.tools.remote import enable_tool, offered_tools, remote_tool
from research import services
from research.errors import InvalidInput
from research.models import Event, RemoteServer, Run, RunState, Step
from research.services.remote import agent_kind_names, remote_kinds_check
from tests.conftest import free_port, wait_finished, wait_for

TOPIC = "Remote topic: when does the launch happen"
SECRET = "s3cret-key-never-shown"
NOTE = "Note on launch: the launch moved to March."


class LocalMcpServer:
    """An MCP server of the SDK on 127.0.0.1, served by uvicorn in a thread."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []
        notes = MCPServer("notes")

        @notes.tool()
        def lookup(topic: str, ctx: Context) -> str:
            """Look up the team's notes on a topic. Returns every matching note, newest
            first, with its author."""
            self.calls.append((topic, ctx.request_context.request.headers.get("x-api-key")))
            return NOTE

        @notes.tool()
        async def wait(seconds: float) -> str:
            """Wait, then answer."""
            await anyio.sleep(seconds)
            return "waited"

        @notes.tool()
        def delete_everything() -> str:
            """Delete every note. Never allowed to agents."""
            return "deleted"

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        config = uvicorn.Config(
            notes.streamable_http_app(), host="127.0.0.1", port=self.port, log_level="warning"
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def start(self) -> "LocalMcpServer":
        self.thread.start()
        wait_for(lambda: self.server.started, timeout=15, message="the MCP server did not start")
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


@pytest.fixture
def notes_server(settings):
    settings.REMOTE_MCP_ALLOWED_HOSTS = ["127.0.0.1"]
    server = LocalMcpServer().start()
    yield server
    server.stop()


def register(url: str, **fields) -> RemoteServer:
    defaults = {"headers": {"X-Api-Key": SECRET}, "allowed_tools": ["lookup"]}
    return RemoteServer.objects.create(name="notes", url=url, **(defaults | fields))


def system_prompt(llm, topic: str = TOPIC) -> str:
    return llm.requests_for(topic)[0]["messages"][0]["content"]


def tool_names(body: dict) -> list[str]:
    return [tool["function"]["name"] for tool in body.get("tools") or []]


def test_a_researcher_enables_a_remote_tool_and_calls_it(
    agent_pool, scripted_llm, run_factory, notes_server
):
    register(notes_server.url)
    scripted_llm.script(
        TOPIC,
        call("enable_remote_tool", name="notes__lookup"),
        call("notes__lookup", topic="launch"),
        reply("The launch moved to March (notes__lookup)."),
    )
    run = wait_finished(run_factory(topic=TOPIC))
    assert run.status == "done", run.error

    prompt = system_prompt(scripted_llm)
    assert "- `notes__lookup`: Look up the team's notes on a topic" in prompt
    assert "newest" not in prompt and "delete_everything" not in prompt  # summary, allowed only
    first, second, third = scripted_llm.requests_for(TOPIC)
    assert "enable_remote_tool" in tool_names(first) and "notes__lookup" not in tool_names(first)
    assert "notes__lookup" in tool_names(second) and "notes__lookup" in tool_names(third)
    schema = next(t for t in second["tools"] if t["function"]["name"] == "notes__lookup")
    assert schema["function"]["parameters"]["properties"]["topic"]["type"] == "string"
    assert "with its author" in schema["function"]["description"]

    assert notes_server.calls == [("launch", SECRET)]  # the secret header reached the server
    result = scripted_llm.tool_results(TOPIC, name="notes__lookup")[0]["content"]
    assert result == NOTE
    step = Step.objects.get(run=run, kind="tool", tool="notes__lookup")
    assert step.output == NOTE and step.input == {"topic": "launch"}
    assert "querying" in Run.objects.get(pk=run.pk).states.values_list("state", flat=True)

    # The secret went to the server and nowhere else.
    seen = [json.dumps(body) for body in scripted_llm.requests]
    seen += [json.dumps([step.input, step.output]) for step in Step.objects.all()]
    seen += [json.dumps(event.payload) for event in Event.objects.all()]
    assert not any(SECRET in text for text in seen)


def test_a_server_that_is_down_is_a_tool_error_and_the_tree_finishes(
    agent_pool, scripted_llm, run_factory, settings
):
    settings.REMOTE_MCP_ALLOWED_HOSTS = ["127.0.0.1"]
    register(f"http://127.0.0.1:{free_port()}/mcp")  # nothing listens there
    scripted_llm.script(
        TOPIC,
        call("enable_remote_tool", name="notes__lookup"),
        reply("No notes today."),
    )
    run = wait_finished(run_factory(topic=TOPIC))
    assert run.status == "done" and run.report == "No notes today."
    assert "- `notes__lookup`: (its description could not be loaded yet)" in system_prompt(
        scripted_llm
    )
    error = scripted_llm.tool_results(TOPIC, name="enable_remote_tool")[0]["content"]
    assert error.startswith(
        "error: enable_remote_tool: loading the tools of notes: the MCP server notes could "
        "not be reached or failed ("
    )


def test_a_server_that_goes_down_after_a_tool_was_enabled_gives_a_tool_error(
    agent_pool, scripted_llm, run_factory, notes_server
):
    register(notes_server.url)

    def stop_then_call(messages):
        notes_server.stop()
        return call("notes__lookup", topic="launch")

    scripted_llm.script(
        TOPIC,
        call("enable_remote_tool", name="notes__lookup"),
        stop_then_call,
        reply("The notes server is down."),
    )
    run = wait_finished(run_factory(topic=TOPIC))
    assert run.status == "done" and run.report == "The notes server is down."
    error = scripted_llm.tool_results(TOPIC, name="notes__lookup")[0]["content"]
    assert error.startswith("error: notes__lookup: the MCP server notes could not be reached")
    step = Step.objects.get(run=run, kind="tool", tool="notes__lookup")
    assert step.is_error and SECRET not in step.output


def test_a_loopback_server_is_refused_unless_its_host_is_allowed(
    agent_pool, scripted_llm, run_factory, notes_server, settings
):
    settings.REMOTE_MCP_ALLOWED_HOSTS = []
    register(notes_server.url)
    scripted_llm.script(TOPIC, call("enable_remote_tool", name="notes__lookup"), reply("done"))
    run = wait_finished(run_factory(topic=TOPIC))
    assert run.status == "done"
    error = scripted_llm.tool_results(TOPIC, name="enable_remote_tool")[0]["content"]
    assert error == (
        "error: enable_remote_tool: loading the tools of notes: refused the MCP server notes: "
        "127.0.0.1 is a loopback address; an operator may allow its host "
        "(REMOTE_MCP_ALLOWED_HOSTS)."
    )
    assert notes_server.calls == []


def test_an_unknown_remote_tool_is_a_tool_error(
    agent_pool, scripted_llm, run_factory, notes_server
):
    register(notes_server.url)
    scripted_llm.script(
        TOPIC,
        call("enable_remote_tool", name="notes__delete_everything"),
        reply("done"),
    )
    wait_finished(run_factory(topic=TOPIC))
    error = scripted_llm.tool_results(TOPIC, name="enable_remote_tool")[0]["content"]
    assert error == (
        "error: enable_remote_tool: there is no remote tool 'notes__delete_everything'; the "
        "remote tools you may enable are: notes__lookup."
    )


def test_a_remote_call_stops_when_the_research_is_cancelled(
    agent_pool, scripted_llm, run_factory, notes_server
):
    register(notes_server.url, allowed_tools=["wait"])
    scripted_llm.script(
        TOPIC, call("enable_remote_tool", name="notes__wait"), call("notes__wait", seconds=60)
    )
    run = run_factory(topic=TOPIC)
    wait_for(
        lambda: RunState.objects.filter(run=run, detail="notes: wait").exists(),
        message="the agent never called notes__wait",
    )
    services.run_cancel(run=run)
    run = wait_finished(run, timeout=15)  # well before the remote tool's 60 s
    assert run.status == "failed" and run.error == "cancelled by the user"


def test_a_remote_call_that_takes_too_long_is_a_tool_error(
    agent_pool, scripted_llm, run_factory, notes_server, settings
):
    settings.REMOTE_MCP_TIMEOUT_SECONDS = 1
    register(notes_server.url, allowed_tools=["wait"])
    scripted_llm.script(
        TOPIC,
        call("enable_remote_tool", name="notes__wait"),
        call("notes__wait", seconds=30),
        reply("Nothing came back."),
    )
    run = wait_finished(run_factory(topic=TOPIC))
    assert run.status == "done" and run.report == "Nothing came back."
    error = scripted_llm.tool_results(TOPIC, name="notes__wait")[0]["content"]
    assert error == "error: notes__wait: the MCP server notes did not answer within 1 s."


# --- Who is offered what (no network: the tool list is fresh) ------------------------------


def context_of(run: Run) -> AgentContext:
    return AgentContext.of(run, CancelToken(run.pk))


def test_kinds_choose_the_agents_offered_a_server_and_the_root_always_is(
    db, run_factory, subagent_factory
):
    catalog = [{"name": "lookup", "description": "Look up notes.", "input_schema": {}}]
    fresh = {"catalog": catalog, "catalog_checked_at": timezone.now()}
    register("https://notes.example/mcp", allowed_kinds=["analyst"], **fresh)
    RemoteServer.objects.create(
        name="wiki", url="https://wiki.example/mcp", allowed_tools=["*"], **fresh
    )
    RemoteServer.objects.create(
        name="off", url="https://off.example/mcp", allowed_tools=["*"], enabled=False, **fresh
    )
    root = run_factory()
    child = subagent_factory(root, "history")

    def offered(run: Run) -> list[str]:
        return [tool.name for tool in offered_tools(context_of(run))]

    assert offered(root) == ["notes__lookup", "wiki__lookup"]
    assert offered(child) == ["wiki__lookup"]  # a researcher, not an analyst


def test_a_stale_tool_list_is_loaded_again(db, run_factory, settings):
    settings.REMOTE_MCP_ALLOWED_HOSTS = ["127.0.0.1"]
    old = timezone.now() - timedelta(seconds=settings.REMOTE_MCP_CATALOG_SECONDS + 1)
    server = register(
        f"http://127.0.0.1:{free_port()}/mcp",
        catalog=[{"name": "lookup", "description": "Old.", "input_schema": {}}],
        catalog_checked_at=old,
    )
    [tool] = offered_tools(context_of(run_factory()))
    server.refresh_from_db()
    assert server.catalog_checked_at > old and "could not be reached" in server.catalog_error
    assert tool.summary == "Old"  # the list loaded before still names and sums up the tools


# --- The admin never shows the secrets -----------------------------------------------------


def test_the_admin_masks_headers_and_keeps_them_unless_replaced(admin_client):
    server = register("https://notes.example/mcp")
    page = admin_client.get(f"/admin/research/remoteserver/{server.pk}/change/")
    html = page.content.decode()
    assert page.status_code == 200 and SECRET not in html
    assert "X-Api-Key: ••••••••" in html

    form = {
        "name": "notes",
        "url": "https://notes.example/mcp",
        "new_headers": "",
        "allowed_tools": '["lookup", "search"]',
        "allowed_kinds": '["researcher"]',
        "enabled": "on",
    }
    admin_client.post(f"/admin/research/remoteserver/{server.pk}/change/", form)
    server.refresh_from_db()
    assert server.headers == {"X-Api-Key": SECRET} and server.allowed_tools == ["lookup", "search"]

    form["new_headers"] = "Authorization: Bearer other"
    admin_client.post(f"/admin/research/remoteserver/{server.pk}/change/", form)
    server.refresh_from_db()
    assert server.headers == {"Authorization": "Bearer other"}

    form["allowed_tools"] = '"lookup"'
    page = admin_client.post(f"/admin/research/remoteserver/{server.pk}/change/", form)
    assert "allowed tools must be a JSON list of names" in page.content.decode()


def test_a_sub_agent_is_never_offered_a_remote_tool_its_parent_was_not(
    db, run_factory, subagent_factory, django_assert_num_queries
):
    catalog = [{"name": "lookup", "description": "Look up notes.", "input_schema": {}}]
    fresh = {"catalog": catalog, "catalog_checked_at": timezone.now()}
    RemoteServer.objects.create(
        name="wiki", url="https://wiki.example/mcp", allowed_tools=["*"], **fresh
    )  # researchers only (the default), and the root
    root = run_factory()

    # What spawning records: the kind's research tools its parent has, and the remote tools
    # its parent is offered. A verifier is offered none, so its researcher child gets none.
    def record(parent: Run, name: str, kind: str, tools: list[str]) -> Run:
        launch = services.Launch(
            name=name, reason="r", task="t", max_steps=5, kind=kind, tools=tools
        )
        return services.subagent_create(parent_id=parent.pk, launch=launch)

    checker = record(root, "checker", "verifier", ["read_page"])
    digger = record(checker, "digger", "researcher", ["read_page"])
    helper = record(root, "helper", "researcher", ["web_search", "read_page", "wiki__lookup"])

    def offered(run: Run) -> list[str]:
        return [tool.name for tool in offered_tools(context_of(run))]

    assert offered(root) == ["wiki__lookup"]
    assert offered(checker) == []  # not a kind the server allows
    assert offered(digger) == []  # its kind is allowed, but its parent was offered nothing
    assert offered(helper) == ["wiki__lookup"]
    # With no remote tool among those its parent passed on, nothing can be offered to it: as
    # it starts it reads no server (every leaf agent of a research starts so).
    with django_assert_num_queries(0):
        assert offered(digger) == []


# --- Allowed kinds: who may call, and what a configuration may name ------------------------


def test_a_remote_tool_is_refused_to_an_agent_whose_kind_an_admin_no_longer_allows(
    db, run_factory, subagent_factory, notes_server
):
    server = register(notes_server.url, allowed_kinds=["researcher", "verifier"])
    root = run_factory()
    child = context_of(subagent_factory(root, "history"))  # a researcher
    offered = offered_tools(child)  # loads the tool list from the server
    assert [tool.name for tool in offered] == ["notes__lookup"]
    enable = enable_tool(offered)
    enable.handler(child, {"name": "notes__lookup"})
    assert child.tools["notes__lookup"].handler(child, {"topic": "launch"}) == NOTE

    RemoteServer.objects.filter(pk=server.pk).update(allowed_kinds=["verifier"])
    refused = (
        "notes__lookup: an admin no longer lets researcher agents use the MCP server notes "
        "(the kinds it allows: verifier)."
    )
    with pytest.raises(ToolError) as called:
        child.tools["notes__lookup"].handler(child, {"topic": "again"})
    assert str(called.value) == refused
    later = context_of(Run.objects.get(pk=child.run_id))  # offered the tool before the change
    with pytest.raises(ToolError) as enabled:
        enable.handler(later, {"name": "notes__lookup"})
    assert str(enabled.value) == refused
    assert offered_tools(later) == []
    assert [topic for topic, _ in notes_server.calls] == ["launch"]  # the refused never left

    lead = context_of(root)  # a research's root agent always may
    remote_tool(offered[0], offered[0].entry).handler(lead, {"topic": "lead"})
    assert [topic for topic, _ in notes_server.calls] == ["launch", "lead"]


def test_a_configuration_naming_an_unknown_kind_is_refused(admin_client, settings, tmp_path):
    server = register("https://notes.example/mcp")
    form = {
        "name": "notes",
        "url": "https://notes.example/mcp",
        "new_headers": "",
        "allowed_tools": '["lookup"]',
        "allowed_kinds": '["verifier", "analyst"]',
        "enabled": "on",
    }
    page = admin_client.post(f"/admin/research/remoteserver/{server.pk}/change/", form)
    assert "&#x27;analyst&#x27; is not an agent kind; the kinds are: researcher, verifier." in (
        page.content.decode()
    )
    server.refresh_from_db()
    assert server.allowed_kinds == ["researcher"]
    with pytest.raises(InvalidInput) as refused:
        remote_kinds_check(kinds=["Researcher"])
    assert refused.value.message.startswith("'Researcher' is not an agent kind")

    # A kind an admin added (RESEARCH_AGENT_KINDS_DIR) is one the domain knows too.
    verifier = (kinds.BUILT_IN_DIR / "verifier.md").read_text()
    (tmp_path / "analyst.md").write_text(verifier.replace("name: verifier", "name: analyst"))
    settings.RESEARCH_AGENT_KINDS_DIR = str(tmp_path)
    assert agent_kind_names() == sorted(kinds.reload().kinds)
    admin_client.post(f"/admin/research/remoteserver/{server.pk}/change/", form)
    server.refresh_from_db()
    assert server.allowed_kinds == ["verifier", "analyst"]
