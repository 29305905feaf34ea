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

from research.fulltext import parse_chunk_url
from research.models import Chunk, Document

QUOTE_MAX = 300
HEADING_MAX = 120


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


def document_heading(title: str, text_head: str) -> str:
    """A document's title as people read it: the first line of its text when its stored
    title is a slug ("compound" -> "Compound statements"), else the stored title."""
    lines = [line.strip() for line in text_head.splitlines() if line.strip()]
    if not lines or " " in title.strip():
        return title
    slug = title.strip().lower().replace("-", " ").replace("_", " ")
    # A heading underlined as reStructuredText writes one ("Special method names\n****").
    underlined = len(lines) > 1 and set(lines[1]) <= set("*=-~^#")
    if slug in lines[0].lower() or underlined:
        return lines[0][:HEADING_MAX]
    return title


def kb_titles(*, owner_id: int, urls: Iterable[str]) -> dict[str, str]:
    """kb:// address -> the title of its document, for the owner's datasets: one query."""
    addresses = {url: parse_chunk_url(url) for url in urls}
    ids = {address.document_id for address in addresses.values() if address}
    if not ids:
        return {}
    documents = {
        row["pk"]: document_heading(row["title"], row["head"])
        for row in Document.objects.filter(pk__in=ids, dataset__owner_id=owner_id)
        .annotate(head=Left("text", 300))
        .values("pk", "title", "head")
    }
    return {
        url: documents[address.document_id]
        for url, address in addresses.items()
        if address and address.document_id in documents
    }


def citation_title(citation, kb: dict[str, str]) -> str:
    """The stored title of what a citation cites: the document's, the page's, its link text."""
    if citation.url in kb:
        return kb[citation.url]
    source = getattr(citation, "source", None)
    return (source.title if source and source.title else "") or citation.title or citation.url


def highlight(text: str, quote: str) -> SafeString:
    """The passage as HTML with each place the quote appears marked; words compared with
    their spacing loosened, since a report quotes a passage on one line."""
    words = quote.split()
    if not words:
        return mark_safe(escape(text))
    pattern = re.compile(r"\s+".join(re.escape(word) for word in words), re.IGNORECASE)
    parts, position = [], 0
    for match in pattern.finditer(text):
        parts += [escape(text[position : match.start()]), "<mark class='quoted'>"]
        parts += [escape(match.group(0)), "</mark>"]
        position = match.end()
    parts.append(escape(text[position:]))
    return mark_safe("".join(parts))


@login_required
@require_GET
def passage(request: HttpRequest, dataset_id: int, document_id: int, position: int) -> HttpResponse:
    """One passage of the user's knowledge base, the quoted words highlighted, between its
    neighbours."""
    document = (
        Document.objects.filter(pk=document_id, dataset_id=dataset_id, dataset__owner=request.user)
        .select_related("dataset")
        .only("pk", "title", "source", "dataset__name", "text")
        .first()
    )
    if document is None:
        raise Http404("no such passage.")
    chunks = list(
        Chunk.objects.filter(document=document, position__range=(position - 1, position + 1))
    )
    chunk = next((chunk for chunk in chunks if chunk.position == position), None)
    if chunk is None:
        raise Http404("no such passage.")
    quote = request.GET.get("q", "")[:QUOTE_MAX]
    passage_html = highlight(chunk.text, quote)
    context = {
        "document": document,
        "heading": document_heading(document.title, document.text[:300]),
        "before": next((c for c in chunks if c.position == position - 1), None),
        "after": next((c for c in chunks if c.position == position + 1), None),
        "chunk": chunk,
        "passage_html": passage_html,
        "quote": quote,
        "found": "<mark" in passage_html,
        "address": f"kb://dataset/{dataset_id}/document/{document_id}#{position}",
    }
    return render(request, "passage.html", context)
