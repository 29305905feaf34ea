"""A run's report as staff read it in the admin: Markdown rendered and sanitised as the run
page renders it (frontend/rendering.py), without the page's citation marks.

The domain may not import the frontend (the layers run frontend -> agents -> research), so
the two walls are repeated here: markdown-it with raw HTML off, then nh3 with the page's
allowlists. tests/test_admin.py checks the allowlists are the page's, so they cannot drift.
"""

import nh3
from django.utils.safestring import SafeString, mark_safe
from markdown_it import MarkdownIt

ALLOWED_TAGS = {
    "a", "blockquote", "br", "code", "del", "em", "h1", "h2", "h3", "h4", "h5", "h6", "hr",
    "li", "mark", "ol", "p", "pre", "s", "span", "strong", "table", "tbody", "td", "th",
    "thead", "tr", "ul",
}  # fmt: skip
ALLOWED_ATTRIBUTES = {
    "a": {"href", "title", "class"},
    "span": {"class", "aria-hidden"},
    "mark": {"class", "title"},
}
URL_SCHEMES = {"http", "https", "mailto"}


def report_html(text: str) -> SafeString:
    """The report as safe HTML: a report is text a model wrote from pages it read."""
    md = MarkdownIt("commonmark", {"html": False}).enable(["table", "strikethrough"])
    html = nh3.clean(
        md.render(text or ""),
        tags=ALLOWED_TAGS,
        attributes=ALLOWED_ATTRIBUTES,
        url_schemes=URL_SCHEMES,
        link_rel="noopener noreferrer nofollow",
        set_tag_attribute_values={"a": {"target": "_blank"}},
    )
    return mark_safe(html)  # sanitised by nh3 just above
