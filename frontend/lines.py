"""What agents did and were asked, each in one line of words: a transcript's steps, a tool
call's arguments, a long task's start. The page, the panel and the thread read them."""

import json
from typing import Any

from markdown_it.token import Token

from research.markdown import markdown

SUMMARY_LIMIT = 90
# An argument whose value alone says what the call did, when it is the only one.
PLAIN_ARGUMENTS = ("query", "question", "url", "name", "to", "text")


def arguments_in_words(arguments: Any) -> str:
    """A tool call's arguments as words: `query “otters”, max_steps 5`; "" when it has none.
    Arguments as the model sent them, a JSON text (`{"raw": "{}"}` when unparsed), are read
    as JSON first: a transcript line says `query “tides”`, not `{"question": "tides"}`."""
    if isinstance(arguments, dict) and set(arguments) == {"raw"}:
        arguments = arguments["raw"] or "{}"
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except (ValueError, RecursionError):  # not JSON, or nested past the parser's depth
            return _clip(arguments)
    if not isinstance(arguments, dict):
        return _clip(_value_words(arguments)) if arguments not in (None, "") else ""
    if len(arguments) == 1 and (key := next(iter(arguments))) in PLAIN_ARGUMENTS:
        return _clip(str(arguments[key]))  # `web_search otter census` says it all
    return _clip(", ".join(f"{key} {_value_words(value)}" for key, value in arguments.items()))


def _value_words(value: Any) -> str:
    if isinstance(value, str):
        return f"“{' '.join(value.split())}”"
    if isinstance(value, list):
        return "[" + ", ".join(_value_words(item) for item in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k} {_value_words(v)}" for k, v in value.items()) + "}"
    return json.dumps(value)


def tool_call_words(name: str, arguments: Any) -> str:
    words = arguments_in_words(arguments)
    return f"{name} {words}" if words else name


def step_line(step: Any) -> str:
    """What a model turn called or said, or what a tool was asked (its name shows beside)."""
    if step.kind == "model":
        called = [call for call in (step.input or {}).get("tool_calls", []) if call]
        if called:
            return _clip("called " + "; ".join(_called(call) for call in called))
        return plain_line(step.output or "") or "(no text)"
    return arguments_in_words(step.input or {})


def _called(call: Any) -> str:
    if isinstance(call, list | tuple):
        return tool_call_words(str(call[0]), call[1] if len(call) > 1 else {})
    return str(call)


def plain_line(text: str, limit: int = SUMMARY_LIMIT) -> str:
    """Markdown text as one line of its words, cut to `limit` characters: no heading's "#",
    no "**", a link by its text ("# Draft" and "[NOAA](https://…)" read "Draft", "NOAA")."""
    tokens = markdown().parse(text[: limit * PARSED_PER_CHARACTER])
    blocks = (token.children or () for token in tokens if token.type == "inline")
    return _clip(" ".join("".join(map(_words, children)) for children in blocks), limit)


def _words(token: Token) -> str:
    if token.type in ("text", "code_inline"):
        return token.content
    return " " if token.type in ("softbreak", "hardbreak") else ""


PARSED_PER_CHARACTER = 20  # markup and addresses a line of words may skip


def _clip(text: str, limit: int = SUMMARY_LIMIT) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
