"""The tools an agent gets, decided in one place from what the run is and may do."""

from agents.context import AgentContext
from agents.tools.base import Tool, ToolError

__all__ = ["Tool", "ToolError", "toolset"]


def toolset(ctx: AgentContext) -> list[Tool]:
    from agents.tools import team
    from agents.tools.knowledge import QUERY, REMEMBER
    from agents.tools.pages import READ_PAGE
    from agents.tools.remote import tools_for as remote_tools
    from agents.tools.web import WEB_SEARCH

    tools = [WEB_SEARCH, READ_PAGE]
    if ctx.dataset_id is not None:
        tools += [QUERY, REMEMBER]
    tools += team.tools_for(ctx)
    tools += remote_tools(ctx)  # enable_remote_tool, when an admin connected MCP servers
    return tools
