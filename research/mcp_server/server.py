"""Canopy's MCP server: the SDK's, with every tool's arguments checked as the REST API checks
a request's fields, and a bad one named the way the API names it (`max_steps: ...`).

The SDK builds each tool's argument model from the tool function's signature, and that model
ignores an argument it does not know: `list_research {"limit": 5}` listed 20, and a misspelt
option of `start_research` started a research without it. Here every tool's model refuses
them, in one place (`add_tool`), so a model or client reads which argument to fix.
"""

import difflib
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.tools import Tool
from pydantic import ConfigDict
from pydantic import ValidationError as ArgumentsError

# Other surfaces' spellings of an argument, too far from it for a close match to find.
SPELLINGS = {"limit": "page_size", "id": "research_id", "run_id": "research_id"}


class CanopyServer(MCPServer):
    def add_tool(self, fn, name: str | None = None, *args, **kwargs) -> None:
        super().add_tool(fn, name, *args, **kwargs)
        # The SDK keeps the Tool it built to itself; its FuncMetadata reads `arg_model` live.
        strict_arguments(self._tool_manager.get_tool(name or fn.__name__))

    async def call_tool(self, name: str, arguments: dict[str, Any], context=None):
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as error:
            if isinstance(error.__cause__, ArgumentsError):
                tool = self._tool_manager.get_tool(name)
                raise ToolError(arguments_text(tool, error.__cause__)) from error.__cause__
            raise


def strict_arguments(tool: Tool) -> None:
    """Make `tool` refuse an argument it does not take, and say so in the schema a client
    lists (`additionalProperties: false`)."""
    loose = tool.fn_metadata.arg_model
    strict = type(loose.__name__, (loose,), {"model_config": ConfigDict(extra="forbid")})
    tool.fn_metadata.arg_model = strict
    tool.parameters = strict.model_json_schema(by_alias=True)


def arguments_text(tool: Tool, error: ArgumentsError) -> str:
    """Each problem as `argument: what is wrong.`, without pydantic's links and echoes; an
    argument the tool does not take first, since a misspelt one is often the missing one."""
    problems = sorted(error.errors(), key=lambda problem: problem["type"] != "extra_forbidden")
    return " ".join(
        unknown_text(tool, str(problem["loc"][0]))
        if problem["type"] == "extra_forbidden"
        else f"{'.'.join(str(part) for part in problem['loc']) or 'arguments'}: {problem['msg']}."
        for problem in problems
    )


def unknown_text(tool: Tool, argument: str) -> str:
    """`limit: not an argument of list_research (did you mean page_size?); it takes ...`"""
    takes = list(tool.parameters.get("properties", {}))
    meant = SPELLINGS.get(argument)
    if meant not in takes:
        meant = next(iter(difflib.get_close_matches(argument, takes, n=1)), None)
    hint = f" (did you mean {meant}?)" if meant else ""
    listed = f"it takes {', '.join(takes)}" if takes else "it takes no argument"
    return f"{argument}: not an argument of {tool.name}{hint}; {listed}."
