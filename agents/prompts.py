"""The prompts: one Markdown file each in prompts/, read once, joined by a blank line."""

import string
from functools import cache
from pathlib import Path

from django.conf import settings

PROMPTS_DIR = Path(settings.BASE_DIR) / "prompts"


@cache
def load(name: str) -> str:
    return (PROMPTS_DIR / f"{name}.md").read_text().strip()


def render(prompt: str, /, **values: str) -> str:
    """A template prompt: $name placeholders, so braces in the text need no escaping."""
    return string.Template(load(prompt)).safe_substitute(values)


def join(*parts: str) -> str:
    return "\n\n".join(part for part in parts if part)
