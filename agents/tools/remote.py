"""Remote MCP tools: the tools of MCP servers an admin registered, offered to agents lazily.

An agent's prompt lists the remote tools it may use by name and one-line summary only (seed
001: 185 full tool definitions cost 99K tokens); `enable_remote_tool` loads one's full
description and input schema into the agent's tools (`ctx.tools`), where it stays for the
rest of that agent's run. A remote tool is a `Tool` like the others, so the loop records its
calls as steps, checks its arguments against its schema, and sends its errors back to the
model as the tool's result: an unreachable server is a tool error, never a failed run.

Each call opens a session with the server (the MCP SDK's client over streamable HTTP) in an
event loop of its own thread, while the agent's thread waits for it and watches its cancel
token. The server's URL passes read_page's address guard (unless its host is in
REMOTE_MCP_ALLOWED_HOSTS) and the connection goes to the address that was checked. The
headers, which hold the server's secrets, go to the server and nowhere else: not into a
step, an event, a log line or an error text.
"""

import json
import logging
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

import jsonschema
from django.conf import settings
from django.utils import timezone
from mcp import Client
from mcp.types import CallToolResult, TextContent
from pydantic import Field

from agents import prompts
from agents.kinds import DEFAULT_KIND
from agents.tools.base import ToolError
from agents.tools.remote_session import call_remote
from agents.tools.tool import Tool, any_object, tool
from research import selectors, services
from research.models import RemoteServer, State
from research.models_remote import TOOL_SEPARATOR

if TYPE_CHECKING:
    from agents.runtime.context import AgentContext

log = logging.getLogger(__name__)

ENABLE = "enable_remote_tool"
SUMMARY_CHARS = 120
CATALOG_PAGES = 10
# Loading a tool list happens as an agent starts: a server that does not answer must not
# hold the agent up for the whole call timeout.
CATALOG_TIMEOUT_SECONDS = 15.0
NOT_LOADED = "(its description could not be loaded yet)"
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


@dataclass(frozen=True)
class Offered:
    """A remote tool an agent may enable: its agent-facing name and where it comes from."""

    name: str
    server_id: int
    server_name: str
    tool_name: str
    entry: dict[str, Any] | None  # the catalog entry; None when the list did not load

    @property
    def summary(self) -> str:
        if self.entry is None:
            return NOT_LOADED
        return summary_of(self.entry.get("description") or "") or "(no description)"


def agent_kind(ctx: "AgentContext") -> str:
    """The agent's kind (agents.kinds); a root, which has none, is checked as the default
    kind by callers that let roots through anyway."""
    return ctx.kind or DEFAULT_KIND


def tools_for(ctx: "AgentContext") -> list[Tool]:
    """`enable_remote_tool`, with the prompt section listing what it can enable; nothing
    when no remote tool is offered to this agent."""
    offered = offered_tools(ctx)
    ctx.remote_tools = frozenset(tool.name for tool in offered)
    if not offered:
        return []
    return [enable_tool(offered)]


def offered_tools(ctx: "AgentContext") -> list[Offered]:
    if ctx.allowed_tools is not None and not any(TOOL_SEPARATOR in n for n in ctx.allowed_tools):
        # A sub-agent whose parent was offered no remote tool can be offered none (see the
        # end): no server to read as it starts.
        return []
    if ctx.remote_servers_enabled is False:  # its claim found none enabled
        return []
    offered: list[Offered] = []
    for server in selectors.remote_servers_for(kind=agent_kind(ctx), is_root=ctx.is_root):
        if not server.allowed_tools:
            continue
        if _stale(server):
            _refresh(ctx, server)
        listed = {entry["name"]: entry for entry in server.catalog}
        names = list(listed) if "*" in server.allowed_tools else server.allowed_tools
        for tool_name in names:
            if server.allows(tool_name):
                offered.append(
                    Offered(
                        name=agent_name(server.name, tool_name),
                        server_id=server.pk,
                        server_name=server.name,
                        tool_name=tool_name,
                        entry=listed.get(tool_name),
                    )
                )
    if ctx.allowed_tools is not None:  # a sub-agent: never a tool its parent was not offered
        offered = [tool for tool in offered if tool.name in ctx.allowed_tools]
    return offered


def agent_name(server_name: str, tool_name: str) -> str:
    """The name the model calls: server and tool, in the characters function names allow."""
    return f"{server_name}{TOOL_SEPARATOR}{_UNSAFE.sub('_', tool_name)}"[:64]


def summary_of(description: str) -> str:
    line = description.strip().split("\n", 1)[0].strip()
    sentence = line.split(". ", 1)[0].rstrip(".")
    return sentence if len(sentence) <= SUMMARY_CHARS else sentence[: SUMMARY_CHARS - 1] + "…"


# --- enable_remote_tool --------------------------------------------------------------------


def enable_tool(offered: list[Offered]) -> Tool:
    by_name = {tool.name: tool for tool in offered}
    listing = "\n".join(f"- `{tool.name}`: {tool.summary}" for tool in offered)

    @tool(
        name=ENABLE,
        state=State.THINKING,
        detail=lambda args: str(args.get("name", "")),
        prompt=prompts.render("remote_tools", tools=listing),
        after_identity=True,
    )
    def enable_remote_tool(
        ctx: "AgentContext",
        name: Annotated[str, Field(description="The remote tool's name, as listed.")],
    ) -> str:
        """Load one of the remote tools listed in your instructions (## Remote tools) by its
        name; you can call it from your next turn on."""
        name = name.strip()
        choice = by_name.get(name)
        if choice is None:
            raise ToolError(
                f"{ENABLE}: there is no remote tool {name!r}; the remote tools you may "
                f"enable are: {', '.join(by_name)}."
            )
        if name in ctx.tools:
            return f"{name} is already enabled: call it."
        server = _server(ctx, choice)
        entry = choice.entry or _entry_now(ctx, server, choice)
        remote = remote_tool(choice, entry)
        ctx.tools[name] = remote
        return (
            f"Enabled {name}: call it from your next turn on, with arguments that match its "
            f"schema.\n\n{remote.description}"
        )

    return enable_remote_tool


def _entry_now(ctx: "AgentContext", server: RemoteServer, choice: Offered) -> dict[str, Any]:
    """The tool's catalog entry, loading the server's list again (it did not load before)."""
    catalog = _refresh(ctx, server)
    if catalog is None:
        raise ToolError(f"{ENABLE}: {server.catalog_error}")
    for entry in catalog:
        if entry["name"] == choice.tool_name:
            return entry
    raise ToolError(
        f"{ENABLE}: the MCP server {server.name} no longer lists a tool {choice.tool_name!r}."
    )


# --- A remote tool -------------------------------------------------------------------------


def remote_tool(choice: Offered, entry: dict[str, Any]) -> Tool:
    """A tool of an MCP server: the server's schema, the arguments passed on as they came."""
    description = (entry.get("description") or "").strip() or "(no description)"

    def handler(ctx: "AgentContext", arguments: dict[str, Any]) -> str:
        server = _server(ctx, choice)
        if not server.allows(choice.tool_name):
            raise ToolError(f"{choice.name}: an admin no longer allows this tool.")
        result = call_remote(
            ctx,
            server,
            lambda client: client.call_tool(choice.tool_name, arguments),
            what=choice.name,
        )
        text = result_text(result)
        if result.is_error:
            raise ToolError(f"{choice.name}: {text}")
        return text

    return Tool(
        name=choice.name,
        description=f"{description}\n\n(A tool of the MCP server {choice.server_name}.)",
        parameters=_schema(entry.get("input_schema")),
        state=State.QUERYING,
        handler=handler,
        detail=lambda args: f"{choice.server_name}: {choice.tool_name}",
        fast_check=False,
    )


def _schema(schema: Any) -> dict[str, Any]:
    """The tool's input schema, or any object when it is not one the loop can check."""
    if isinstance(schema, dict) and schema.get("type") == "object":
        try:
            jsonschema.Draft202012Validator.check_schema(schema)
            return schema
        except jsonschema.SchemaError:
            pass
    return any_object()


def result_text(result: CallToolResult) -> str:
    parts = []
    for block in result.content:
        if isinstance(block, TextContent):
            parts.append(block.text)
        else:
            parts.append(f"[{block.type} content: not shown]")
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content))
    return "\n".join(parts) or "(the tool returned nothing)"


def _server(ctx: "AgentContext", choice: Offered) -> RemoteServer:
    """The tool's server as it is now: an admin may have disabled it, or no longer let this
    agent's kind use it, since the agent was offered the tool."""
    server = selectors.remote_server_get(server_id=choice.server_id)
    if server is None:
        raise ToolError(f"{choice.name}: an admin removed or disabled its MCP server.")
    if not server.admits(kind=agent_kind(ctx), is_root=ctx.is_root):
        kinds = server.allowed_kinds if isinstance(server.allowed_kinds, list) else []
        allowed = ", ".join(kinds) or "none"
        raise ToolError(
            f"{choice.name}: an admin no longer lets {agent_kind(ctx)} agents use the MCP "
            f"server {server.name} (the kinds it allows: {allowed})."
        )
    return server


# --- The server's tool list ----------------------------------------------------------------


def _stale(server: RemoteServer) -> bool:
    checked = server.catalog_checked_at
    if checked is None:
        return True
    age = (timezone.now() - checked).total_seconds()
    return age >= settings.REMOTE_MCP_CATALOG_SECONDS


def _refresh(ctx: "AgentContext", server: RemoteServer) -> list[dict[str, Any]] | None:
    """Load the server's tool list and store it; None (the error stored) when it fails."""

    async def list_all(client: Client) -> list[dict[str, Any]]:
        tools, cursor = [], None
        for _ in range(CATALOG_PAGES):
            page = await client.list_tools(cursor=cursor) if cursor else await client.list_tools()
            tools += [
                {
                    "name": tool.name,
                    "description": tool.description or "",
                    "input_schema": tool.input_schema,
                }
                for tool in page.tools
            ]
            cursor = page.next_cursor
            if not cursor:
                break
        return tools

    try:
        catalog = call_remote(
            ctx,
            server,
            list_all,
            what=f"loading the tools of {server.name}",
            timeout=min(CATALOG_TIMEOUT_SECONDS, settings.REMOTE_MCP_TIMEOUT_SECONDS),
        )
    except ToolError as error:
        services.remote_catalog_store(server_id=server.pk, tools=None, error=str(error))
        server.catalog_error = str(error)
        return None
    services.remote_catalog_store(server_id=server.pk, tools=catalog)
    server.catalog = catalog
    return catalog
