"""The schemas the model reads come from the tools' typed functions and follow the settings."""

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import jsonschema
import pytest
from pydantic import Field

from agents.runtime.context import AgentContext, CancelToken
from agents.tools import Tool, tool, toolset
from research.models import Run
from research.services.plans import PLAN_ITEM_MAX_CHARS

TOOLS_DIR = Path(__file__).resolve().parent.parent / "agents" / "tools"
HAND_WRITTEN_OBJECT = re.compile(r"""["']type["']\s*:\s*["']object["']""")


def tools_of(run: Run, **context: Any) -> dict[str, Tool]:
    ctx = AgentContext.of(run, CancelToken(run.pk))
    for name, value in context.items():
        setattr(ctx, name, value)
    return {tool.name: tool for tool in toolset(ctx)}


def arguments(tool: Tool) -> dict[str, Any]:
    return tool.schema()["function"]["parameters"]["properties"]


def keys(node: Any) -> list[str]:
    """Every key of every schema object in `node`, property names left out."""
    if isinstance(node, list):
        return [key for item in node for key in keys(item)]
    if not isinstance(node, dict):
        return []
    found = []
    for key, value in node.items():
        found.append(key)
        if key == "properties":
            found += [key for schema in value.values() for key in keys(schema)]
        else:
            found += keys(value)
    return found


@pytest.mark.django_db
def test_write_plan_takes_as_many_items_as_the_settings_allow(settings, run_factory):
    settings.RESEARCH_PLAN_MAX_ITEMS = 4

    items = arguments(tools_of(run_factory())["write_plan"])["items"]

    assert (items["minItems"], items["maxItems"]) == (1, 4)
    assert items["items"] == {"type": "string", "maxLength": PLAN_ITEM_MAX_CHARS}


@pytest.mark.django_db
def test_send_message_takes_as_long_a_text_as_the_settings_allow(
    settings, run_factory, subagent_factory
):
    settings.RESEARCH_MESSAGE_MAX_CHARS = 321
    child = subagent_factory(run_factory(), "history")

    assert arguments(tools_of(child)["send_message"])["text"] == {
        "type": "string",
        "maxLength": 321,
    }


@pytest.mark.django_db
def test_a_sub_agent_task_is_limited_like_a_topic(settings, run_factory):
    settings.RESEARCH_TOPIC_MAX_CHARS = 1234
    tools = tools_of(run_factory())

    single = arguments(tools["spawn_subagent"])
    entry = arguments(tools["spawn_subagents"])["subagents"]["items"]

    assert single["task"]["maxLength"] == entry["properties"]["task"]["maxLength"] == 1234
    assert entry["required"] == ["name", "reason", "task"]
    assert entry["additionalProperties"] is False


@pytest.mark.django_db
def test_a_reshaped_schema_keeps_its_declared_order_and_is_built_once(run_factory):
    first, second = tools_of(run_factory()), tools_of(run_factory())

    entry = arguments(first["spawn_subagents"])["subagents"]["items"]
    single = first["spawn_subagent"].schema()["function"]["parameters"]
    # The order the model reads, and the order jsonschema reports a bad call's errors in.
    for schema in (entry, single):
        assert list(schema)[:4] == ["type", "properties", "required", "additionalProperties"]
        assert list(schema["properties"])[:3] == ["name", "reason", "task"]
    # Two agents offered the same shape share one tool, and so one argument check.
    assert first["spawn_subagents"] is second["spawn_subagents"]
    assert first["spawn_subagent"].validator is second["spawn_subagent"].validator


@pytest.mark.django_db
def test_only_the_lead_names_a_plan_item(run_factory, subagent_factory):
    root = run_factory()
    lead, child = tools_of(root), tools_of(subagent_factory(root, "history"))

    assert "plan_item" in arguments(lead["spawn_subagent"])
    assert "plan_item" not in arguments(child["spawn_subagent"])
    assert "write_plan" in lead and "write_plan" not in child


@pytest.mark.django_db
def test_no_tool_schema_has_a_title(run_factory, subagent_factory):
    root = run_factory()
    every = [tools_of(root, dataset_id=1), tools_of(subagent_factory(root, "h"), dataset_id=1)]
    tools = {name: tool for tools in every for name, tool in tools.items()}

    assert len(tools) == 13  # every built-in tool but enable_remote_tool (no MCP server here)
    for tool_ in tools.values():
        schema = tool_.schema()["function"]["parameters"]
        jsonschema.Draft202012Validator.check_schema(schema)
        assert "title" not in keys(schema), tool_.name
        assert "$defs" not in keys(schema) and "$ref" not in keys(schema), tool_.name


def test_no_tool_module_writes_an_object_schema_by_hand():
    modules = sorted(TOOLS_DIR.rglob("*.py"))
    assert len(modules) >= 12

    by_hand = [
        f"{path.relative_to(TOOLS_DIR)}:{number}"
        for path in modules
        for number, line in enumerate(path.read_text().splitlines(), start=1)
        if HAND_WRITTEN_OBJECT.search(line) or "object_schema(" in line
    ]

    assert by_hand == []


@dataclass(frozen=True, kw_only=True)
class Entry:
    name: str
    size: Annotated[int, Field(ge=1)] = 1


@tool(state="thinking")
def sample(
    ctx: Any,
    mode: Literal["fast", "slow"],
    entries: Annotated[list[Entry], Field(min_length=1)],
    note: Annotated[str | None, Field(max_length=5, description="a note")] = None,
) -> str:
    """Do a thing.

    With a second paragraph."""
    return f"{mode} {[(entry.name, entry.size) for entry in entries]} {note}"


def test_a_tool_is_its_typed_function():
    assert sample.name == "sample"
    assert sample.description == "Do a thing.\n\nWith a second paragraph."
    assert sample.parameters == {
        "type": "object",
        "properties": {
            "mode": {"type": "string", "enum": ["fast", "slow"]},
            "entries": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "name": {"type": "string"},
                        "size": {"type": "integer", "default": 1, "minimum": 1},
                    },
                    "required": ["name"],
                    "additionalProperties": False,
                },
                "minItems": 1,
            },
            "note": {"type": "string", "maxLength": 5, "description": "a note"},
        },
        "required": ["mode", "entries"],
        "additionalProperties": False,
    }
    # The loop calls it with the checked arguments as keywords, a batch's entries typed.
    said = sample.handler(
        None, {"mode": "fast", "entries": [{"name": "a"}, {"name": "b", "size": 2}]}
    )
    assert said == "fast [('a', 1), ('b', 2)] None"


def test_with_arguments_changes_a_copy():
    narrowed = sample.with_arguments(mode={"enum": ["fast"]}, note=None)

    assert arguments(narrowed)["mode"]["enum"] == ["fast"]
    assert "note" not in arguments(narrowed)
    assert arguments(sample)["mode"]["enum"] == ["fast", "slow"]


def sample_value(schema: dict[str, Any]) -> Any:
    """A value the schema takes, as small as it allows."""
    if "enum" in schema:
        return schema["enum"][0]
    kind = schema.get("type")
    if kind == "object":
        return {
            name: sample_value(schema["properties"][name]) for name in schema.get("required", [])
        }
    if kind == "array":
        return [sample_value(schema["items"])] * schema.get("minItems", 0)
    if kind == "integer":
        return schema.get("minimum", 1)
    if kind == "boolean":
        return True
    return "a" * schema.get("minLength", 1)


def variants(schema: dict[str, Any]) -> list[Any]:
    """A call's arguments, right and wrong in every way the schema names: each argument of
    another type, too long or short by one character (one outside the BMP, which counts as
    one), too small or large by one, unknown or left out."""
    base = sample_value(schema)
    found = [base, {**base, "unknown": 1}]
    for name, spec in schema["properties"].items():
        found += [{**base, name: wrong} for wrong in (None, 1, 1.5, "x", [], {}, True)]
        found.append({key: value for key, value in base.items() if key != name})
        for bound in ("maxLength", "minLength"):
            if bound in spec:
                found += [{**base, name: "😀" * (spec[bound] + step)} for step in (-1, 0, 1)]
        for bound in ("maximum", "minimum", "maxItems", "minItems"):
            if bound in spec:
                size = spec[bound]
                found += [
                    {**base, name: size + step if "Items" not in bound else [spec] * (size + step)}
                    for step in (-1, 1)
                    if size + step >= 0
                ]
        if spec.get("type") == "array" and spec["items"].get("type") == "object":
            found += [{**base, name: [item]} for item in variants(spec["items"])]
    return found


@pytest.mark.django_db
def test_the_fast_check_passes_exactly_the_calls_jsonschema_passes(run_factory, subagent_factory):
    """Tool.accepts (jsonschema-rs) decides which calls run; jsonschema words the refusals.
    On every built-in tool's schema they must agree, right arguments and wrong."""
    root = run_factory()
    every = [tools_of(root, dataset_id=1), tools_of(subagent_factory(root, "h"), dataset_id=1)]
    tools = [tool for tools in every for tool in tools.values()]
    verdicts = []

    for tool_ in tools:
        for candidate in variants(tool_.parameters):
            verdict = tool_.validator.is_valid(candidate)
            assert tool_.accepts(candidate) is verdict, (tool_.name, candidate)
            verdicts.append(verdict)

    # The lead's 11 tools and a sub-agent's 11; about 160 calls that pass and 400 that do not.
    assert len(tools) == 22 and verdicts.count(True) > 100 and verdicts.count(False) > 300
