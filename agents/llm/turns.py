"""The turns a scripted model answers with: `reply`, `call`, `calls`, `raw_call`, `fail` and
`slow` build them (see agents.llm.scripted for the server that plays them)."""

import json
from collections.abc import Callable
from dataclasses import dataclass, replace
from http import HTTPStatus
from typing import Any

Usage = tuple[int, int]
DEFAULT_USAGE: Usage = (100, 20)
NO_MORE_TURNS = "(scripted: no more turns for this agent)"
NO_SCRIPT = "(scripted: no script matches this task)"


@dataclass(frozen=True)
class Turn:
    """One answer of the server: an assistant message, or an HTTP error when `status` is set."""

    content: str | None = None
    tool_calls: tuple[tuple[str, str], ...] = ()  # (tool name, arguments text)
    usage: Usage = DEFAULT_USAGE
    status: int | None = None
    error_message: str = ""
    times: int = 1
    delay: float = 0.0


TurnSpec = Turn | Callable[[list[dict[str, Any]]], "Turn | str"]


def reply(text: str, *, usage: Usage = DEFAULT_USAGE) -> Turn:
    """A final answer: text and no tool calls."""
    return Turn(content=text, usage=usage)


def call(tool: str, /, *, usage: Usage = DEFAULT_USAGE, **arguments: Any) -> Turn:
    """An assistant turn calling one tool with JSON-encoded `arguments`."""
    return raw_call(tool, json.dumps(arguments), usage=usage)


def raw_call(tool: str, arguments_text: str, *, usage: Usage = DEFAULT_USAGE) -> Turn:
    """A tool call whose arguments text is sent as is (e.g. JSON the model got wrong)."""
    return Turn(tool_calls=((tool, arguments_text),), usage=usage)


def calls(*turns: Turn, text: str | None = None, usage: Usage = DEFAULT_USAGE) -> Turn:
    """One assistant turn with the tool calls of several `call(...)`s, and optional text."""
    return Turn(
        content=text, tool_calls=tuple(c for turn in turns for c in turn.tool_calls), usage=usage
    )


def fail(status: int, times: int = 1, *, message: str | None = None) -> Turn:
    """Answer `status` with an OpenAI-style error body for `times` requests."""
    if times < 1:
        raise ValueError("fail() needs times >= 1")
    return Turn(status=status, error_message=message or status_text(status), times=times)


def slow(seconds: float, turn: TurnSpec) -> TurnSpec:
    """`turn`, answered after `seconds`."""
    if isinstance(turn, Turn):
        return replace(turn, delay=seconds)
    return lambda messages: replace(as_turn(turn(messages)), delay=seconds)


def as_turn(value: "Turn | str") -> Turn:
    return reply(value) if isinstance(value, str) else value


def status_text(status: int) -> str:
    try:
        return f"scripted failure: {status} {HTTPStatus(status).phrase}"
    except ValueError:
        return f"scripted failure: {status}"


def error_body(turn: Turn) -> dict[str, Any]:
    """A failing turn's body, as an OpenAI-compatible endpoint words its errors."""
    kind = "server_error" if (turn.status or 500) >= 500 else "invalid_request_error"
    return {"error": {"message": turn.error_message, "type": kind, "param": None, "code": None}}
