"""Template filters of the pages: money and token counts the way the live page shows them."""

import json
from collections.abc import Iterable
from decimal import Decimal
from urllib.parse import urlsplit

from django import template
from django.utils.html import escape, format_html
from django.utils.safestring import SafeString, mark_safe

from frontend.lines import plain_line
from frontend.passages import kb_titles, passage_href, passage_href_pattern, passage_label
from research.models import Message
from research.services.citations import bare_urls

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
    try:
        return urlsplit(url or "").scheme.lower() in ("http", "https")
    except ValueError:  # "https://[x": no address a browser opens
        return False


@register.filter
def linked(text: str, titles: dict[str, str] | None = None) -> SafeString:
    """Text, escaped, with the addresses in it as links: a web address opens its page, a
    kb:// address its passage, named as a report names it ("Tidal bores, passage 2", with
    `titles`: address -> its document's title; see passage_label). A message that names its
    source is one click from it; the page's script links the messages it receives the same
    way (static/page/format.js)."""
    text = text or ""
    parts, position = [], 0
    for start, address in bare_urls(text):
        web = is_web_url(address)
        href = address if web else passage_href(address)
        if not href:
            continue
        name = address if web else passage_label(address, titles or {})
        parts += [escape(text[position:start]), _link(href, name, address)]
        position = start + len(address)
    parts.append(escape(text[position:]))
    return mark_safe("".join(parts))


def _link(href: str, name: str, address: str) -> str:
    # A passage named in words keeps its address on hover.
    hint = format_html(' title="{}"', address) if name != address else ""
    return format_html(
        '<a href="{}"{} target="_blank" rel="noopener noreferrer nofollow">{}</a>', href, hint, name
    )


@register.simple_tag
def message_titles(messages: Iterable[Message], owner_id: int) -> dict[str, str]:
    """kb:// address -> its document's title, for the passages the messages name (the
    owner's documents only): one query for a panel's messages, for `linked`."""
    urls = [address for message in messages for _, address in bare_urls(message.text)]
    return kb_titles(owner_id=owner_id, urls=urls)


@register.simple_tag
def passage_pattern() -> str:
    """Where the page's script sends a kb:// address a message names (passage_href_pattern)."""
    return passage_href_pattern()


@register.filter
def pretty_json(value: object) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False)


@register.filter
def task_preview(task: str) -> str:
    """A long task's first words, one line without Markdown headings' "#"."""
    return plain_line(task, TASK_PREVIEW)


TASK_PREVIEW = 160
