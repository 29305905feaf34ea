"""What every tool shares: the error a model reads and fixes, and the cut of a long result.

A tool (agents.tools.tool) raises ToolError for anything the model should hear about and fix
(a bad URL, an unknown sibling); the loop sends that text back as the tool's result.
"""


class ToolError(Exception):
    """A refusal or failure the model reads as the tool's result; the run goes on."""


def truncate(text: str, limit: int) -> str:
    """At most `limit` characters of `text`, and a note saying how much was cut."""
    if len(text) <= limit:
        return text
    return (
        f"{text[:limit]}\n\n[{len(text) - limit:,} more characters cut: "
        f"this shows the first {limit:,} of {len(text):,}.]"
    )
