"""Knowledge-base passages, as a report's citations point at them.

An agent cites a chunk by its kb:// address (research.fulltext.chunk_url); the page turns
each into a link to `passage`, which shows the chunk in its document with the words the
report quoted highlighted. Datasets are owned: another user's passage is a 404.
"""

import re
from collections.abc import Iterable
from html import escape
from urllib.parse import urlencode

from django.contrib.auth.decorators import login_required
from django.db.models.functions import Left
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils.safestring import SafeString, mark_safe
from django.views.decorators.http import require_GET

from research.fulltext import (
    HEAD_CHARS,
    document_heading,
    document_headings,
    meaningful_words,
    parse_chunk_url,
    passage_name,
    source_names,
)
from research.models import Chunk, Dataset, Document

QUOTE_MAX = 300
# How much of the passages around it a passage's page shows.
CONTEXT_CHARS = 600
# Fewer characters in common than this are chance (a letter, a full stop), not an overlap.
OVERLAP_MIN = 16


def passage_href(url: str, quote: str = "") -> str | None:
    """The page of Canopy's that shows a kb:// passage, with the quote to highlight."""
    address = parse_chunk_url(url)
    if address is None:
        return None
    path = reverse("passage", args=[address.dataset_id, address.document_id, address.position])
    # The sentence's own end is the report's, not always the passage's ("feet." / "feet,").
    quote = " ".join(quote.split())[:QUOTE_MAX].rstrip(".,;:!?…")
    return f"{path}?{urlencode({'q': quote})}" if quote else path


# Numbers no passage's address holds, where passage_href_pattern names the address's parts.
_PATTERN_NUMBERS = {"dataset": 970000001, "document": 970000002, "position": 970000003}


def passage_href_pattern() -> str:
    """passage_href's address, without a quote, with {dataset}, {document} and {position} where
    a kb:// address's numbers go: the page's script links such an address with it, as the
    server links one with passage_href (static/page/format.js, appendLinked)."""
    path = reverse("passage", args=list(_PATTERN_NUMBERS.values()))
    for name, number in _PATTERN_NUMBERS.items():
        path = path.replace(str(number), "{" + name + "}")
    return path


# A knowledge base with more documents than this sends the run page no headings: its feed
# names passages by number, as for any document outside the research's knowledge base.
PAGE_HEADINGS_MAX = 500


def dataset_headings(*, dataset_id: int | None, owner_id: int) -> dict[int, str]:
    """Document id -> document_heading for a research's knowledge base (its owner's): what the
    run page's script names a passage with as messages arrive (static/page/format.js)."""
    if dataset_id is None:
        return {}
    documents = Document.objects.filter(dataset_id=dataset_id, dataset__owner_id=owner_id)
    headings = document_headings(documents.order_by("pk")[: PAGE_HEADINGS_MAX + 1])
    return {} if len(headings) > PAGE_HEADINGS_MAX else headings


def kb_titles(*, owner_id: int, urls: Iterable[str]) -> dict[str, str]:
    """kb:// address -> the title of its document, for the owner's datasets: one query."""
    addresses = {url: parse_chunk_url(url) for url in urls}
    ids = {address.document_id for address in addresses.values() if address}
    if not ids:
        return {}
    documents = document_headings(Document.objects.filter(pk__in=ids, dataset__owner_id=owner_id))
    return {
        url: documents[address.document_id]
        for url, address in addresses.items()
        if address and address.document_id in documents
    }


def passage_label(url: str, titles: dict[str, str]) -> str:
    """How a message names the kb:// passage it links to: "Tidal bores, passage 2" when its
    document's title is known, else "passage 2 of document 7" (static/page/format.js
    passageLabel, with the research's knowledge base's headings); any other address as
    written."""
    address = parse_chunk_url(url)
    if address is None:
        return url
    if title := titles.get(url):
        return passage_name(title, address.position)
    return f"passage {address.position + 1} of document {address.document_id}"


def cited_names(citations, titles: dict[str, str]) -> list[str]:
    """What a list of sources calls each citation, on the run page's "Sources cited" and in
    every export: a passage by its document's title (`titles`, from kb_titles), a page by its
    title, else its link text or address, on one line; two passages of one document each
    with its number (research.fulltext.source_names)."""
    return source_names(
        [
            (citation.url, " ".join(citation_title(citation, titles).split()))
            for citation in citations
        ]
    )


def citation_title(citation, kb: dict[str, str]) -> str:
    """The stored title of what a citation cites: the document's, the page's, its link text."""
    if citation.url in kb:
        return kb[citation.url]
    source = getattr(citation, "source", None)
    return (source.title if source and source.title else "") or citation.title or citation.url


_HEADING_MARKS = re.compile(r"^#{1,6}[ \t]+")
_FENCE = re.compile(r"^\s*(```|~~~)")


def readable(text: str) -> str:
    """A stored passage as the page shows it: a Markdown heading reads as its words, without
    the "#" that opens it ("# Tea Notes" is "Tea Notes"); a "# comment" in fenced code stays."""
    lines, fenced = [], False
    for line in text.split("\n"):
        if _FENCE.match(line):
            fenced = not fenced
        lines.append(line if fenced else _HEADING_MARKS.sub("", line))
    return "\n".join(lines)


MARK = "<mark class='quoted'>"


def highlight(text: str, quote: str) -> SafeString:
    """The passage as HTML with each place the quote appears marked; words compared with
    their spacing loosened, since a report quotes a passage on one line."""
    words = quote.split()
    if not words:
        return mark_safe(escape(text))
    pattern = re.compile(r"\s+".join(re.escape(word) for word in words), re.IGNORECASE)
    parts, position = [], 0
    for match in pattern.finditer(text):
        parts += [escape(text[position : match.start()]), MARK]
        parts += [escape(match.group(0)), "</mark>"]
        position = match.end()
    parts.append(escape(text[position:]))
    return mark_safe("".join(parts))


def _overlap(first: str, second: str) -> int:
    """How many characters `second` opens with that `first` ends with: neighbouring passages
    share up to CHUNK_OVERLAP characters (research.fulltext.chunk_text)."""
    for start in range(max(0, len(first) - len(second)), len(first) - OVERLAP_MIN + 1):
        if second.startswith(first[start:]):
            return len(first) - start
    return 0


def text_before(previous: str, text: str) -> str:
    """What leads into a passage: the end of the one before it, without the words the two
    share, its last CONTEXT_CHARS from a word's start."""
    lead = previous[: len(previous) - _overlap(previous, text)].rstrip()
    if len(lead) <= CONTEXT_CHARS:
        return lead
    tail = lead[-CONTEXT_CHARS:]
    space = re.search(r"\s", tail)
    return "…" + (tail[space.end() :] if space else tail).lstrip()


def text_after(text: str, following: str) -> str:
    """What follows a passage: the start of the one after it, without the words the two
    share, its first CONTEXT_CHARS up to a word's end."""
    rest = following[_overlap(text, following) :].lstrip()
    if len(rest) <= CONTEXT_CHARS:
        return rest
    head = rest[:CONTEXT_CHARS]
    spaces = [match.start() for match in re.finditer(r"\s", head)]
    return (head[: spaces[-1]] if spaces else head).rstrip() + "…"


@login_required
@require_GET
def passage(request: HttpRequest, dataset_id: int, document_id: int, position: int) -> HttpResponse:
    """One passage of the user's knowledge base, the quoted words highlighted, between what
    comes just before and after it."""
    document = (
        Document.objects.filter(pk=document_id, dataset_id=dataset_id, dataset__owner=request.user)
        .select_related("dataset")
        .annotate(head=Left("text", HEAD_CHARS))
        .only("pk", "title", "title_given", "source", "dataset__name")
        .first()
    )
    if document is None:
        return _gone(request, dataset_id, f"kb://dataset/{dataset_id}/document/{document_id}")
    chunks = {
        chunk.position: chunk
        for chunk in Chunk.objects.filter(
            document=document, position__range=(position - 1, position + 1)
        )
    }
    chunk = chunks.get(position)
    if chunk is None:
        raise Http404("no such passage.")
    previous, following = chunks.get(position - 1), chunks.get(position + 1)
    quote = request.GET.get("q", "")[:QUOTE_MAX]
    passage_html = highlight(readable(chunk.text), quote)
    context = {
        "document": document,
        "heading": document_heading(document.title, document.head, given=document.title_given),
        "before": readable(text_before(previous.text, chunk.text)) if previous else "",
        "after": readable(text_after(chunk.text, following.text)) if following else "",
        "chunk": chunk,
        "passage_html": passage_html,
        "quote": quote,
        "found": "<mark" in passage_html,
        "address": f"kb://dataset/{dataset_id}/document/{document_id}#{position}",
    }
    return render(request, "passage.html", context)


def _gone(request: HttpRequest, dataset_id: int, address: str) -> HttpResponse:
    """A passage of no document of the user's: a report's link to a passage whose document
    was deleted after the research cited it opened "This page does not exist". It says so,
    and where the knowledge base is (when it is still there); a 404 all the same, the same
    for another user's document as for one that never was."""
    dataset = Dataset.objects.filter(pk=dataset_id, owner=request.user).only("name").first()
    context = {"dataset": dataset, "address": address}
    return render(request, "passage_gone.html", context, status=404)


SNIPPET_CHARS = 280


def search_snippet(text: str, words: list[str]) -> SafeString:
    """A found passage's words around the first word of the question it holds, each of the
    question's words marked: what a list of search results shows of a passage."""
    text = " ".join(readable(text).split())
    words = meaningful_words(words)  # "is" and "a" are everywhere: not what was looked for
    pattern = re.compile(r"\b(" + "|".join(map(re.escape, words)) + r")\b", re.IGNORECASE)
    first = pattern.search(text) if words else None
    start = max(0, first.start() - SNIPPET_CHARS // 3) if first else 0
    if first and start:  # from a word's start, never past the word found
        start = text.find(" ", start, first.start()) + 1 or first.start()
    piece = text[start : start + SNIPPET_CHARS]
    if start + SNIPPET_CHARS < len(text):
        piece = piece[: piece.rfind(" ")] if " " in piece else piece
    parts, position = ["…" if start else ""], 0
    for match in pattern.finditer(piece) if words else ():
        parts += [escape(piece[position : match.start()]), MARK, escape(match[0]), "</mark>"]
        position = match.end()
    parts += [escape(piece[position:]), "…" if start + len(piece) < len(text) else ""]
    return mark_safe("".join(parts))
