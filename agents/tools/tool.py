"""A tool is one typed function: its docstring and its signature are what the model reads.

    @tool(state=State.SEARCHING, parallel=True)
    def web_search(ctx: AgentContext, query: Annotated[str, Field(max_length=400)]) -> str:
        \"\"\"Search the web.\"\"\"

The first parameter is the agent's context; the others are the arguments. Their JSON schema is
pydantic's, made plain for models: no titles, nested types inlined, every object closed
(`additionalProperties: false`), and an optional argument (`X | None = None`) as an X that may
be left out. The loop checks a call against that schema (agents.loop.parsing): jsonschema-rs
says whether it passes and jsonschema says why not, so the errors a model reads are jsonschema's;
then it calls the function with the arguments as keywords; a list of dataclasses arrives as
dataclasses.

What depends on the run goes in `prepare(ctx, tool)`: whether the tool is offered at all (None
when not), the enums of the run (the kinds a parent may spawn) and limits from settings. It
returns the tool as this run offers it, usually through `with_arguments`.
"""

import copy
import dataclasses
import inspect
import json
import typing
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import cached_property, lru_cache, wraps
from typing import TYPE_CHECKING, Annotated, Any

import jsonschema
import jsonschema_rs
from pydantic import TypeAdapter, create_model

if TYPE_CHECKING:
    from agents.runtime.context import AgentContext

# The tool as the loop runs it: the context and the checked arguments, the text the model reads.
Handler = Callable[["AgentContext", dict[str, Any]], str]
Prepare = Callable[["AgentContext", "Tool"], "Tool | None"]
# Keys that hold data, not schemas: never made plain.
DATA_KEYS = frozenset({"default", "enum", "const", "examples"})
# The order models (and jsonschema's choice among several errors) read an object's keys in.
FIRST_KEYS = ("type", "properties", "required", "additionalProperties")


def _no_detail(arguments: dict[str, Any]) -> str:
    return ""


# Tools are compared and hashed by identity (`eq=False`): a tool reshaped for a run is the same
# object for every run that gets that shape (`with_arguments`, `with_prompt`).
@dataclass(frozen=True, eq=False)
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
    # It only reads (parallel tools do too): on a database connection lost under it, it runs
    # again on a fresh one (agents.loop.agent), where a tool that acts never runs twice.
    reads: bool = False
    # The section of the system prompt that comes with the tool (agents.loop.instructions).
    prompt: str = ""
    # Its section follows who a sub-agent is (its name, reason and kind): it says whom the
    # agent may reach (its siblings, remote servers), not how it researches.
    after_identity: bool = False
    prepare: Prepare | None = None
    # Whether jsonschema-rs may pass its calls (`accepts`): the built-in tools, whose schemas
    # a test runs through both checks. An MCP server's schema is checked by jsonschema alone:
    # the two read some patterns apart (`\d` is ASCII to jsonschema-rs, any digit to Python).
    fast_check: bool = True

    @cached_property
    def validator(self) -> jsonschema.Draft202012Validator:
        """The check of a call's arguments (agents.loop.parsing), built once per tool as this
        run offers it rather than at every call. Its errors are the words a model reads."""
        return jsonschema.Draft202012Validator(self.parameters)

    @cached_property
    def accepts(self) -> Callable[[Any], bool]:
        """Whether arguments pass the schema, without saying why not: jsonschema-rs, compiled
        once, about a hundred times faster than `validator` (0.4 against 56 µs for
        web_search's arguments), so the calls that pass, nearly all, skip jsonschema's
        Python. A tool without `fast_check` is checked by `validator` alone."""
        if not self.fast_check:
            return self.validator.is_valid
        return jsonschema_rs.Draft202012Validator(self.parameters).is_valid

    def schema(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }

    def prepared(self, ctx: "AgentContext") -> "Tool | None":
        """The tool as this run offers it; None when it does not."""
        return self if self.prepare is None else self.prepare(ctx, self)

    def with_arguments(self, **changes: dict[str, Any] | None) -> "Tool":
        """The tool with some arguments' schemas changed (`task={"maxLength": 5000}`) and
        others left out (`tier=None`). The same changes to the same tool give the same
        Tool, built once per process: the tool's schema is copied once per shape, not for
        every agent, and the argument check (`validator`) is built once for every agent
        offered that shape. Its schema is shared, so nothing may change it in place. (The
        changes are the cache's key as JSON, in the order given: the order of a schema's
        keys is what the model reads, and what jsonschema reports first.)"""
        return _reshaped_tool(self, json.dumps(changes))

    def with_prompt(self, prompt: str) -> "Tool":
        """The tool with its section of the system prompt set, once per text (as above)."""
        return _prompted_tool(self, prompt)


# Shapes come from settings and the kinds' catalog: a few per tool, more under tests that
# change settings; the bound only keeps a long test run from holding every one.
@lru_cache(maxsize=512)
def _reshaped_tool(tool: Tool, changes: str) -> Tool:
    return replace(tool, parameters=reshaped(tool.parameters, **json.loads(changes)))


@lru_cache(maxsize=512)
def _prompted_tool(tool: Tool, prompt: str) -> Tool:
    return replace(tool, prompt=prompt)


@lru_cache(maxsize=256)
def schemas(tools: tuple[Tool, ...]) -> list[dict[str, Any]]:
    """The schemas of the tools an agent is offered, as the model call sends them: one list
    for every agent offered the same tools (they are the same objects: `with_arguments`), so
    that it is serialised once for the process, not once per agent (agents.llm.encoding).
    Shared: nothing may change it in place."""
    return [tool.schema() for tool in tools]


def offered(ctx: "AgentContext", tools: list[Tool]) -> list[Tool]:
    """The tools this run gets, as it gets them."""
    return [prepared for tool in tools if (prepared := tool.prepared(ctx)) is not None]


def tool(
    *,
    state: str,
    name: str = "",
    detail: Callable[[dict[str, Any]], str] = _no_detail,
    parallel: bool = False,
    reads: bool = False,
    prompt: str = "",
    after_identity: bool = False,
    prepare: Prepare | None = None,
) -> Callable[[Callable[..., str]], Tool]:
    """Declare a tool from a typed function (see the module's docstring)."""

    def declare(function: Callable[..., str]) -> Tool:
        return Tool(
            name=name or function.__name__,
            description=description_of(function),
            parameters=arguments_schema(function),
            state=state,
            handler=_keywords(function),
            detail=detail,
            parallel=parallel,
            reads=reads or parallel,
            prompt=prompt,
            after_identity=after_identity,
            prepare=prepare,
        )

    return declare


def description_of(function: Callable[..., Any]) -> str:
    """The docstring, each paragraph on one line."""
    text = inspect.getdoc(function) or ""
    return "\n\n".join(" ".join(part.split()) for part in text.split("\n\n") if part.strip())


def _arguments(function: Callable[..., Any]) -> list[inspect.Parameter]:
    return list(inspect.signature(function).parameters.values())[1:]  # after the context


def arguments_schema(function: Callable[..., Any]) -> dict[str, Any]:
    fields: dict[str, Any] = {
        parameter.name: (
            parameter.annotation,
            ... if parameter.default is inspect.Parameter.empty else parameter.default,
        )
        for parameter in _arguments(function)
    }
    model = create_model(f"{function.__name__}_arguments", **fields)
    return plain(model.model_json_schema())


def any_object() -> dict[str, Any]:
    """The schema of any JSON object (a remote tool whose own schema cannot be checked)."""
    return plain(TypeAdapter(dict[str, Any]).json_schema())


def plain(schema: dict[str, Any]) -> dict[str, Any]:
    """pydantic's JSON schema as a model reads it best: no titles, no $defs to follow, closed
    objects, and optional arguments without their null."""
    return _plain(schema, schema.get("$defs", {}))


def _plain(node: Any, defs: dict[str, Any]) -> Any:
    if isinstance(node, list):
        return [_plain(item, defs) for item in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        target = defs[node["$ref"].rsplit("/", 1)[-1]]
        node = {**target, **{key: value for key, value in node.items() if key != "$ref"}}
    node = _without_null(node)
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in ("title", "$defs"):
            continue
        if key == "properties":
            out[key] = {name: _plain(schema, defs) for name, schema in value.items()}
        else:
            out[key] = value if key in DATA_KEYS else _plain(value, defs)
    if "properties" in out:
        out.setdefault("required", [])
        out["additionalProperties"] = False
    first = {key: out[key] for key in FIRST_KEYS if key in out}
    return first | {key: value for key, value in out.items() if key not in first}


def _without_null(node: dict[str, Any]) -> dict[str, Any]:
    """`X | None = None` is an X the model may leave out: it never has to send null."""
    options = node.get("anyOf")
    if node.get("default", 0) is not None or not isinstance(options, list) or len(options) != 2:
        return node
    kept = [option for option in options if option != {"type": "null"}]
    if len(kept) != 1:
        return node
    rest = {key: value for key, value in node.items() if key not in ("anyOf", "default")}
    return {**kept[0], **rest}


def reshaped(schema: dict[str, Any], **changes: dict[str, Any] | None) -> dict[str, Any]:
    """A copy of an object schema with some properties changed (merged) or dropped (None)."""
    schema = copy.deepcopy(schema)
    for name, change in changes.items():
        if change is None:
            schema["properties"].pop(name, None)
            schema["required"] = [item for item in schema["required"] if item != name]
        else:
            schema["properties"][name] = {**schema["properties"][name], **change}
    return schema


def _keywords(function: Callable[..., str]) -> Handler:
    """The function as the loop calls it: the arguments as keywords, typed."""
    converters = {
        parameter.name: converter
        for parameter in _arguments(function)
        if (converter := _converter(parameter.annotation)) is not None
    }

    @wraps(function)
    def handler(ctx: "AgentContext", arguments: dict[str, Any]) -> str:
        values = {
            name: converters[name](value) if name in converters and value is not None else value
            for name, value in arguments.items()
        }
        return function(ctx, **values)

    return handler


def _converter(annotation: Any) -> Callable[[Any], Any] | None:
    """For a list of dataclasses (a batch's entries): the checked JSON objects as instances."""
    while typing.get_origin(annotation) is Annotated:
        annotation = typing.get_args(annotation)[0]
    if typing.get_origin(annotation) is not list:
        return None
    (item,) = typing.get_args(annotation) or (None,)
    if not (isinstance(item, type) and dataclasses.is_dataclass(item)):
        return None
    return lambda values: [item(**value) if isinstance(value, dict) else value for value in values]
