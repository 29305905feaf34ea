"""The tools an agent gets, decided in one place from what the run is and may do."""

from agents.runtime.context import AgentContext
from agents.tools.base import Tool, ToolError

__all__ = ["Tool", "ToolError", "toolset"]


def toolset(ctx: AgentContext) -> list[Tool]:
    from agents.tools import team
    from agents.tools.knowledge import QUERY, REMEMBER
    from agents.tools.pages import READ_PAGE
    from agents.tools.plan import WRITE_PLAN
    from agents.tools.remote import tools_for as remote_tools
    from agents.tools.web import WEB_SEARCH

    tools = [WEB_SEARCH, READ_PAGE]
    if ctx.dataset_id is not None:
        tools += [QUERY, REMEMBER]
    if ctx.allowed_tools is not None:  # a sub-agent: its kind's tools that its parent has
        tools = [tool for tool in tools if tool.name in ctx.allowed_tools]
    ctx.research_tools = frozenset(tool.name for tool in tools)
    if ctx.is_root:  # the lead's plan (seed 001)
        tools.append(WRITE_PLAN)
    tools += team.tools_for(ctx)
    tools += remote_tools(ctx)  # enable_remote_tool, when an admin connected MCP servers
    return tools
