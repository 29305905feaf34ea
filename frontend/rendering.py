"""Reports: Markdown rendered on the server, sanitised, with each cited link marked verified or
flagged.

A report is text a model wrote, fed by pages it read: it is untrusted. markdown-it runs with
raw HTML off (a `<script>` stays text), and nh3 then keeps only the tags and attributes the
page styles, as a second wall in case a renderer rule ever lets something through.
"""

import re
from collections.abc import Iterable
from html import escape
from typing import Any
from urllib.parse import unquote

import nh3
from markdown_it import MarkdownIt
from markdown_it.token import Token

from research.services.citations import clean_url, url_key

_BARE_URL = re.compile(r"(?:https?|kb)://[^\s<>\"'`]+", re.IGNORECASE)

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

VERIFIED_NOTE = "verified: an agent of this research saw this source"
FLAGGED_NOTE = "flagged: no agent of this research saw this URL"


def _markdown() -> MarkdownIt:
    return MarkdownIt("commonmark", {"html": False}).enable(["table", "strikethrough"])


FLAGGED_CLAIM_NOTE = "the verifier could not support this claim"


def render_report(
    text: str, citations: Iterable[Any] = (), flagged_claims: Iterable[dict] = ()
) -> str:
    """The report as safe HTML; links to cited URLs carry their verdict, and the claims its
    verifier could not support are marked."""
    md = _markdown()
    verdicts = {url_key(citation.url): citation for citation in citations}
    claims = [
        claim
        for claim in flagged_claims
        # A word or two would mark every place it appears.
        if len(str(claim.get("claim", "")).strip()) >= 8
    ]
    tokens = md.parse(text or "")
    for token in tokens:
        if token.type == "inline" and token.children:
            children = _mark(_linkify(md, token.children), verdicts)
            token.children = _mark_claims(children, claims) if claims else children
    return sanitize(md.renderer.render(tokens, md.options, {}))


def _mark_claims(children: list[Token], claims: list[dict]) -> list[Token]:
    """Wrap each flagged claim where a text token holds it: only text is ever matched, so
    a claim that reads like a URL or an attribute cannot touch the markup around it."""
    for claim in claims:
        needle = str(claim["claim"]).strip()
        why = escape(f"{FLAGGED_CLAIM_NOTE}: {claim.get('why', '')}".rstrip(": "))
        opening = f'<mark class="flagged-claim" title="{why}">'
        result: list[Token] = []
        for token in children:
            if token.type != "text" or needle not in token.content:
                result.append(token)
                continue
            before, *rest = token.content.split(needle)
            result.append(Token("text", "", 0, content=before))
            for after in rest:
                result += [
                    Token("html_inline", "", 0, content=opening),
                    Token("text", "", 0, content=needle),
                    Token("html_inline", "", 0, content="</mark>"),
                    Token("text", "", 0, content=after),
                ]
        children = result
    return children


def sanitize(html: str) -> str:
    return nh3.clean(
        html,
        tags=ALLOWED_TAGS,
        attributes=ALLOWED_ATTRIBUTES,
        url_schemes=URL_SCHEMES,
        link_rel="noopener noreferrer nofollow",
        set_tag_attribute_values={"a": {"target": "_blank"}},
    )


def _linkify(md: MarkdownIt, children: list[Token]) -> list[Token]:
    """Turn bare URLs in text (outside links) into links, so they can be marked too."""
    result: list[Token] = []
    in_link = 0
    for token in children:
        if token.type == "link_open":
            in_link += 1
        elif token.type == "link_close":
            in_link -= 1
        if token.type != "text" or in_link or "://" not in token.content:
            result.append(token)
            continue
        result.extend(_split_urls(md, token.content))
    return result


def _split_urls(md: MarkdownIt, text: str) -> list[Token]:
    tokens: list[Token] = []
    position = 0
    for match in _BARE_URL.finditer(text):
        url = clean_url(match.group(0))
        if "://" not in url or url.endswith("://"):
            continue
        start, end = match.start(), match.start() + len(url)
        if start > position:
            tokens.append(_text(text[position:start]))
        href = md.normalizeLink(url)
        if md.validateLink(href):
            tokens.append(Token("link_open", "a", 1, attrs={"href": href}))
            tokens.append(_text(url))
            tokens.append(Token("link_close", "a", -1))
        else:
            tokens.append(_text(url))
        position = end
    if position < len(text):
        tokens.append(_text(text[position:]))
    return tokens


def _text(content: str) -> Token:
    return Token("text", "", 0, content=content)


def _mark(children: list[Token], verdicts: dict[str, Any]) -> list[Token]:
    """Give each link to a cited URL a class and a note; the note after its text is for
    screen readers, the mark for eyes."""
    result: list[Token] = []
    pending_note: str | None = None
    for token in children:
        if token.type == "link_open":
            citation = _citation_for(str(token.attrGet("href") or ""), verdicts)
            if citation is not None:
                verdict = "verified" if citation.verified else "flagged"
                note = VERIFIED_NOTE if citation.verified else FLAGGED_NOTE
                token.attrSet("class", f"citation {verdict}")
                token.attrSet("title", note)
                pending_note = _note_html(verdict, note)
        elif token.type == "link_close" and pending_note is not None:
            result.append(Token("html_inline", "", 0, content=pending_note))
            pending_note = None
        result.append(token)
    return result


def _citation_for(href: str, verdicts: dict[str, Any]) -> Any:
    if not href:
        return None
    return verdicts.get(url_key(href)) or verdicts.get(url_key(unquote(href)))


def _note_html(verdict: str, note: str) -> str:
    mark = "✓" if verdict == "verified" else "?"
    return (
        f'<span class="cite-mark" aria-hidden="true">{mark}</span>'
        f'<span class="visually-hidden"> ({note})</span>'
    )
