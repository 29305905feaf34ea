"""Reports: Markdown rendered on the server, sanitised, with each cited link marked verified or
flagged.

A report is text a model wrote, fed by pages it read: it is untrusted. markdown-it runs with
raw HTML off (a `<script>` stays text), and nh3 then keeps only the tags and attributes the
page styles, as a second wall in case a renderer rule ever lets something through.
"""

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from html import escape
from typing import Any
from urllib.parse import unquote

from django.utils.text import slugify
from markdown_it import MarkdownIt
from markdown_it.token import Token

from research.fulltext import PASSAGE_NAMED, parse_chunk_url, passage_name
from research.markdown import markdown, sanitize
from research.services.citations import bare_urls, url_key

VERIFIED_NOTE = "verified: an agent of this research saw this source"
CARRIED_NOTE = "verified: an agent of the earlier research in this thread saw this source"
FLAGGED_NOTE = "flagged: no agent of this research saw this URL"


def _markdown() -> MarkdownIt:
    return markdown()


FLAGGED_CLAIM_NOTE = "the verifier could not support this claim"


# A kb:// address and the words quoted before it -> the page that shows the passage.
PassageLink = Callable[[str, str], str | None]


@dataclass
class RenderedReport:
    html: str
    # The report's sections (its H2s), for a table of contents: (id, text).
    sections: list[tuple[str, str]] = field(default_factory=list)


def render_report(
    text: str,
    citations: Iterable[Any] = (),
    flagged_claims: Iterable[dict] = (),
    **options: Any,
) -> str:
    """The report as safe HTML; links to cited URLs carry their verdict, and the claims its
    verifier could not support are marked."""
    return render_report_page(text, citations, flagged_claims, **options).html


def render_report_page(
    text: str,
    citations: Iterable[Any] = (),
    flagged_claims: Iterable[dict] = (),
    *,
    heading_offset: int = 0,
    passage_link: PassageLink | None = None,
    titles: dict[str, str] | None = None,
    written_links_only: bool = False,
) -> RenderedReport:
    """`render_report` with its sections. `heading_offset` moves the report's headings down
    under the page's own (its H1 becomes an H2 at 1); `passage_link` turns kb:// citations
    into links to their passage; `titles` (URL -> title) replaces a link text that is only
    a slug of its source's title. `written_links_only`: a bare kb:// address the text names
    is not made a passage link (what an export's Markdown rewrites: its written links)."""
    md = _markdown()
    verdicts = {url_key(citation.url): citation for citation in citations}
    claims = [
        claim
        for claim in flagged_claims
        # A word or two would mark every place it appears.
        if len(str(claim.get("claim", "")).strip()) >= 8
    ]
    tokens = md.parse(text or "")
    numbered = numbered_passages(text) if passage_link is not None else set()
    # The text of the blockquote being read, for a kb:// citation that closes it; outside a
    # blockquote a link has no lines to quote but its own (a list of sources has none).
    quoted: list[str] = []
    depth = 0
    for token in tokens:
        if token.type == "blockquote_open":
            quoted, depth = [], depth + 1
        elif token.type == "blockquote_close":
            depth -= 1
        if token.type == "inline" and token.children:
            children = _mark(_linkify(md, token.children), verdicts)
            if passage_link is not None:
                lines = quoted if depth else []
                children = _link_passages(
                    children, lines, passage_link, titles or {}, numbered, written_links_only
                )
            token.children = _mark_claims(children, claims) if claims else children
            quoted.append(_plain(token.children))
    sections = _shift_headings(tokens, heading_offset)
    return RenderedReport(sanitize(md.renderer.render(tokens, md.options, {})), sections)


def _plain(children: list[Token]) -> str:
    return "".join(token.content for token in children if token.type in ("text", "code_inline"))


def _link_passages(
    children: list[Token],
    quoted: list[str],
    passage_link: PassageLink,
    titles: dict[str, str],
    numbered: set[str],
    written_only: bool = False,
) -> list[Token]:
    """Point each kb:// link at its passage, with the words quoted before it (in its line, or
    in the blockquote it closes) to highlight there: a link with neither quotes nothing."""
    before: list[str] = []
    link: Token | None = None
    for token in children:
        if token.type == "link_open":
            href = str(token.attrGet("href") or "")
            if href.lower().startswith("kb://") and not (written_only and token.meta.get("bare")):
                words = "".join(before).strip(' —–-:()\n"“”')
                quote = words if len(words) >= 8 else " ".join(quoted[-3:])
                target = passage_link(unquote(href), quote.strip(' —–-:"“”'))
                if target:
                    token.attrSet("href", target)
                    link = token
                    link.meta["kb"] = unquote(href)
        elif token.type == "text" and link is not None:
            url = link.meta["kb"]
            token.content = passage_link_text(token.content, url, titles, numbered=url in numbered)
        elif token.type == "link_close":
            link = None
        if token.type in ("text", "code_inline") and link is None:
            before.append(token.content)
    return children


def passage_link_text(
    text: str, url: str, titles: dict[str, str], *, numbered: bool = False
) -> str:
    """A kb:// link's text as a report is shown (on the page and in every export), with
    `titles` (address -> its document's title): "[compound](kb://…)", a document's slug,
    says its title; a list of sources names a passage ("[types, passage 29](kb://…)"): it
    says which, by its address, whatever number the text wrote, and without an address the
    text added ("tea, passage 1 (kb://…)"). `numbered`: the report cites other passages of
    the same document, so a title alone would name two passages alike: it says which too.
    Words of the report's own ("[the quarterly report](kb://…)") stay."""
    title = titles.get(url, "")
    shown = ADDRESS_SUFFIX.sub("", text.strip())
    named = PASSAGE_NAMED.match(shown)
    name = named["title"] if named else shown
    if not (title and name and (" " not in name or name.lower() in title.lower())):
        return text
    address = parse_chunk_url(url)
    return passage_name(title, address.position) if (named or numbered) and address else title


# " (kb://dataset/2/document/80#0)" after a source's name: two documents of one title told
# apart by their addresses in a list of sources (research.fulltext.source_names).
ADDRESS_SUFFIX = re.compile(r"\s*\(kb://[^()\s]+\)$")


def numbered_passages(text: str) -> set[str]:
    """The kb:// addresses of a report whose document it cites at more than one passage:
    each is named with its passage's number wherever the report links it."""
    positions: dict[tuple[int, int], set[int]] = {}
    urls = {link["url"] for link in KB_LINK.finditer(text or "")}
    for url in urls:
        address = parse_chunk_url(url)
        if address is not None:
            key = (address.dataset_id, address.document_id)
            positions.setdefault(key, set()).add(address.position)
    return {
        url
        for url in urls
        if (address := parse_chunk_url(url)) is not None
        and len(positions[(address.dataset_id, address.document_id)]) > 1
    }


# A kb:// link in a report's Markdown: its text and its address.
KB_LINK = re.compile(r"\[(?P<text>(?:\\.|[^\[\]\n\\])+)\]\((?P<url>kb://[^()\s]+)\)")


def link_text(words: str) -> str:
    """Words as a Markdown link's text: a title's "\\", "[" or "]" ends no link."""
    return re.sub(r"[\\\[\]]", r"\\\g<0>", words)


def titled_passages(
    text: str, titles: dict[str, str], *, target: Callable[[str], str | None] | None = None
) -> str:
    """A report's Markdown with its kb:// links' texts as passage_link_text says them: what
    an export writes where the page renders. `target` (a kb:// address -> the URL a reader
    opens, its passage's page) points each link there too."""
    numbered = numbered_passages(text)

    def titled(link: re.Match) -> str:
        if link["url"] is None:
            return link[0]  # code: a link written in backticks is shown as written
        url = link["url"]
        words = passage_link_text(link["text"], url, titles, numbered=url in numbered)
        shown = words if words == link["text"] else link_text(words)
        return f"[{shown}]({(target and target(url)) or url})"

    return CODE_OR_KB_LINK.sub(titled, text or "")


# Code, then KB_LINK: a kb:// link inside code is left as written. A fence runs to its closing
# fence (or the end); a code span to the next run of as many backticks, never past a blank
# line (a paragraph's end) and never from an escaped backtick ("\\`" is a backtick).
CODE_OR_KB_LINK = re.compile(
    r"^ {0,3}(?P<fence>`{3,}|~{3,})[^\n]*\n(?:.*?\n)??(?: {0,3}(?P=fence)[ \t]*$|\Z)"
    r"|(?<![\\`])(?P<ticks>`+)(?!`)(?:(?!\n[ \t]*\n).)*?(?<!`)(?P=ticks)(?!`)|" + KB_LINK.pattern,
    re.M | re.S,
)


def _shift_headings(tokens: list[Token], offset: int) -> list[tuple[str, str]]:
    sections: list[tuple[str, str]] = []
    used: set[str] = set()
    for index, token in enumerate(tokens):
        if token.type not in ("heading_open", "heading_close"):
            continue
        level = int(token.tag[1])
        token.tag = f"h{min(6, level + offset)}"
        if token.type == "heading_open":
            text = _plain(tokens[index + 1].children or [])
            anchor = _anchor(text, used)
            token.attrSet("id", anchor)
            if level == 2:
                sections.append((anchor, text))
    return sections


def _anchor(text: str, used: set[str]) -> str:
    base = "report-" + (slugify(text)[:48] or "section")
    anchor, number = base, 2
    while anchor in used:
        anchor, number = f"{base}-{number}", number + 1
    used.add(anchor)
    return anchor


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
    for start, url in bare_urls(text):
        end = start + len(url)
        if start > position:
            tokens.append(_text(text[position:start]))
        href = md.normalizeLink(url)
        if md.validateLink(href):
            tokens.append(Token("link_open", "a", 1, attrs={"href": href}, meta={"bare": True}))
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
                note = CARRIED_NOTE if getattr(citation, "carried", False) else note
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


# --- Figures and endings, as the run page writes them (static/page/format.js too) -----------


def duration_text(seconds: float | None, *, none: str = "not started") -> str:
    """Time as people say it: `under 1 s`, `3 s`, `2 min 05 s`, `1 h 02 min`
    (static/page/format.js too); the one wording of the page, the runs list and the
    terminal. A research that took 0.4 s did not take "0 s"."""
    if seconds is None:
        return none
    if 0 < seconds < 1:
        return "under 1 s"
    total = max(0, int(seconds))
    hours, rest = divmod(total, 3600)
    minutes, rest = divmod(rest, 60)
    if hours:
        return f"{hours} h {minutes:02d} min"
    if minutes:
        return f"{minutes} min {rest:02d} s"
    return f"{rest} s"


def steps_text(steps: int, budget: int) -> str:
    """Steps as the budget reads: the round past the budget writes the report."""
    noun = "step" if budget == 1 else "steps"  # "1 of 1 step", as the script says it
    if steps > budget:
        return f"{budget} of {budget} {noun} + report"
    return f"{steps} of {budget} {noun}"


# The service's messages name the API's fields ("max_steps must be ..."); the page says what
# the analyst sees.
FIELD_NOUNS = {
    "topic": "The question",
    "max_steps": "The step budget",
    "model": "The model",
    "dataset": "The knowledge base",
}


def sentence(text: str, field: str | None = None) -> str:
    """A stored reason or a service's message ("cancelled by the user", "max_steps must be
    ...") as the page says it: the field named in words, a capital, a full stop."""
    text = text.strip()
    if field in FIELD_NOUNS and text.startswith(f"{field} "):
        text = f"{FIELD_NOUNS[field]}{text[len(field) :]}"
    if not text:
        return ""
    text = text[0].upper() + text[1:]
    return text if text[-1] in ".!?" else f"{text}."
