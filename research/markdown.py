"""Markdown written by a model, made safe HTML: one definition for every page that shows a
report (the run page and its exports in frontend/rendering.py, the admin).

Two walls: markdown-it with raw HTML off (a `<script>` stays text), then nh3, which keeps
only the tags and attributes below (headings keep their ids: the report's contents link to
them) and only http, https and mailto links, each opening in a new tab without the opener.
"""

import re

import nh3
from markdown_it import MarkdownIt

ALLOWED_TAGS = {
    "a", "blockquote", "br", "code", "del", "em", "h1", "h2", "h3", "h4", "h5", "h6", "hr",
    "li", "mark", "ol", "p", "pre", "s", "span", "strong", "table", "tbody", "td", "th",
    "thead", "tr", "ul",
}  # fmt: skip
ALLOWED_ATTRIBUTES = {
    "a": {"href", "title", "class"},
    **{f"h{level}": {"id"} for level in range(1, 7)},
    "span": {"class", "aria-hidden"},
    "mark": {"class", "title"},
}
URL_SCHEMES = {"http", "https", "mailto"}

# The marks Markdown reads in a line of text, and the addresses `literal` leaves whole.
MARKUP = re.compile(r"[\\`*_\[\]<>|~#&]")
ADDRESS = re.compile(r"(?:https?|kb)://[^\s)\]>\"']+")


def literal(text: str) -> str:
    """Plain text as Markdown that shows it as written, on one line: "__init__" stays
    itself, not a bold "init", and "<img ...>" stays text in any viewer. Addresses are left
    whole, so they are still read as links and sources."""
    text = " ".join(text.split())
    parts, addresses = ADDRESS.split(text), ADDRESS.findall(text)
    escaped = [MARKUP.sub(r"\\\g<0>", part) for part in parts]
    return "".join(part + address for part, address in zip(escaped, [*addresses, ""], strict=True))


def markdown() -> MarkdownIt:
    """The parser: CommonMark with tables and strikethrough, raw HTML off."""
    return MarkdownIt("commonmark", {"html": False}).enable(["table", "strikethrough"])


def sanitize(html: str) -> str:
    return nh3.clean(
        html,
        tags=ALLOWED_TAGS,
        attributes=ALLOWED_ATTRIBUTES,
        url_schemes=URL_SCHEMES,
        link_rel="noopener noreferrer nofollow",
        set_tag_attribute_values={"a": {"target": "_blank"}},
    )
