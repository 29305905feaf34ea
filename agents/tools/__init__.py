"""The tools an agent gets, decided in one place from what the run is and may do; each tool's
`prepare` (agents.tools.tool) says whether this run gets it, and in what shape."""

from agents.runtime.context import AgentContext
from agents.tools.base import ToolError
from agents.tools.tool import Tool, offered, tool

__all__ = ["Tool", "ToolError", "tool", "toolset"]


def toolset(ctx: AgentContext) -> list[Tool]:
    from agents.tools import team
    from agents.tools.clarify import ask_clarifying_questions
    from agents.tools.knowledge import query, remember
    from agents.tools.pages import read_page
    from agents.tools.plan import write_plan
    from agents.tools.remote import tools_for as remote_tools
    from agents.tools.web import web_search

    tools = offered(ctx, [web_search, read_page, query, remember])
    if ctx.allowed_tools is not None:  # a sub-agent: its kind's tools that its parent has
        tools = [tool for tool in tools if tool.name in ctx.allowed_tools]
    ctx.research_tools = frozenset(tool.name for tool in tools)
    tools += offered(ctx, [ask_clarifying_questions])  # before it starts (issue 27)
    tools += offered(ctx, [write_plan])  # the lead's plan (seed 001)
    tools += team.tools_for(ctx)
    tools += remote_tools(ctx)  # enable_remote_tool, when an admin connected MCP servers
    return tools
