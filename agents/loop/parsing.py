"""A model's tool call, parsed and checked against its tool's JSON Schema before it runs."""

import json
from typing import Any

import jsonschema

from agents.llm.base import ToolCall
from agents.tools import Tool, ToolError


def parse_call(tools: dict[str, Tool], call: ToolCall) -> tuple[Tool, dict[str, Any]]:
    """The tool a call names and its arguments, checked against the tool's schema; a
    ToolError the model can act on otherwise."""
    tool = tools.get(call.name)
    if tool is None:
        raise ToolError(f"there is no tool {call.name!r}; your tools are: {', '.join(tools)}")
    try:
        arguments = json.loads(call.arguments or "{}")
    except json.JSONDecodeError as error:
        raise ToolError(
            f"the arguments of {call.name} are not valid JSON ({error.msg} at "
            f"character {error.pos}); send a JSON object that matches its schema"
        ) from None
    if not isinstance(arguments, dict):
        raise ToolError(f"the arguments of {call.name} must be a JSON object")
    if tool.accepts(arguments):
        return tool, arguments
    # Why not, in jsonschema's words; a call it finds no error in passes (the two checks
    # read some patterns apart, Tool.fast_check).
    error = jsonschema.exceptions.best_match(tool.validator.iter_errors(arguments))
    if error is not None:
        where = _where(list(error.absolute_path), arguments)
        raise ToolError(
            f"invalid arguments for {call.name}: "
            + (f"{where}: {error.message}" if where else error.message)
        )
    return tool, arguments


def _where(path: list, arguments: Any) -> str:
    """Where in the arguments a schema error is, as a model reads it: `subagents: entry 2
    ("beta"): kind` rather than `subagents.1.kind`."""
    parts, value = [], arguments
    for part in path:
        if isinstance(part, int) and isinstance(value, list) and part < len(value):
            value = value[part]
            name = value.get("name") if isinstance(value, dict) else None
            parts.append(f"entry {part + 1}" + (f' ("{name}")' if isinstance(name, str) else ""))
            continue
        value = value.get(part) if isinstance(value, dict) else None
        parts.append(str(part))
    return ": ".join(parts)
