"""Small helpers the agent tests share (fixtures are in conftest.py)."""

from research import services
from research.models import Run


def start(owner, topic, **kwargs) -> Run:
    return services.run_start(owner=owner, topic=topic, **kwargs)


def results(llm, match: str, name: str | None = None) -> list[str]:
    """The contents of the tool results the scripted model got for calls matching `match`."""
    return [m["content"] for m in llm.tool_results(match, name=name)]


def tool_names(request: dict) -> set[str]:
    """The names of the tools offered in one recorded model request."""
    return {tool["function"]["name"] for tool in request.get("tools") or []}
