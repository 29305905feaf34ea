"""Template filters of the pages: money and token counts the way the live page shows them."""

import json
from decimal import Decimal
from urllib.parse import urlsplit

from django import template

from research.models import Step

register = template.Library()


@register.filter
def usd(value: Decimal | str | float | None) -> str:
    """Dollars with the precision a cost needs: cents above a dollar, more digits below it
    (a scripted or cheap model spends fractions of a cent). canopy.js formats the same way."""
    amount = Decimal(str(value or 0))
    if amount == 0:
        return "$0.00"
    if amount >= 1:
        return f"${amount:,.2f}"
    if amount >= Decimal("0.01"):
        return f"${amount:.4f}"
    return f"${amount:.6f}"


@register.filter
def tokens(value: int | None) -> str:
    return f"{int(value or 0):,}"


@register.filter
def is_web_url(url: str) -> bool:
    """Only http(s) addresses become links; a kb:// citation names a chunk, not a page."""
    return urlsplit(url or "").scheme.lower() in ("http", "https")


@register.filter
def pretty_json(value: object) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False)


@register.filter
def step_summary(step: Step) -> str:
    """One line for a transcript step: what a model turn called or said, what a tool got."""
    if step.kind == Step.Kind.MODEL:
        called = [str(call[0]) for call in (step.input or {}).get("tool_calls", []) if call]
        if called:
            return "called " + ", ".join(called)
        return _line(step.output) or "(no text)"
    arguments = step.input or {}
    for key in SUMMARY_KEYS:
        if arguments.get(key):
            return _line(str(arguments[key]))
    return _line(json.dumps(arguments, ensure_ascii=False))


SUMMARY_KEYS = ("query", "question", "url", "name", "to", "names", "text", "wait_seconds")


def _line(text: str, limit: int = 90) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
