"""What a tool is: a name, a JSON schema, the state the agent shows while it runs, a handler.

A handler gets the agent's context and the parsed, schema-checked arguments, and returns the
text the model reads. It raises ToolError for anything the model should hear about and fix
(a bad URL, an unknown sibling); the loop sends that text back as the tool's result.
"""

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agents.runtime.context import AgentContext


class ToolError(Exception):
    """A refusal or failure the model reads as the tool's result; the run goes on."""


Handler = Callable[["AgentContext", dict[str, Any]], str]


def _no_detail(arguments: dict[str, Any]) -> str:
    return ""


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    parameters: dict[str, Any]
    state: str
    handler: Handler
    # The short detail shown beside the state: the query, the URL, the sibling.
    detail: Callable[[dict[str, Any]], str] = field(default=_no_detail)
    # Reads that depend on nothing else of the turn (a search, a page, a query): several in
    # one turn run at once (RESEARCH_PARALLEL_TOOL_CALLS), their results still in call order.
    parallel: bool = False
    # A section of the system prompt that comes with the tool (the remote tools it offers).
    prompt: str = ""

    def schema(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }


def truncate(text: str, limit: int) -> str:
    """At most `limit` characters of `text`, and a note saying how much was cut."""
    if len(text) <= limit:
        return text
    return (
        f"{text[:limit]}\n\n[{len(text) - limit:,} more characters cut: "
        f"this shows the first {limit:,} of {len(text):,}.]"
    )


def object_schema(properties: dict[str, Any], required: list[str] | None = None) -> dict:
    return {
        "type": "object",
        "properties": properties,
        "required": required or [],
        "additionalProperties": False,
    }
