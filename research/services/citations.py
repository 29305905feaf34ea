"""Citations: the URLs a report cites, each checked against what the agents of its tree saw.

A cited URL that matches a Source of the tree (a page read, a search result, a knowledge-base
chunk) is verified, and the source names the agent that found it; one that matches nothing is
flagged: no agent of the research saw it, so the model may have made it up.
"""

import re
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

from django.db import transaction

from research.models import Citation, Run, Source, State
from research.selectors.runs import RunFacts
from research.services.steps import state_record

# One level of balanced parentheses is part of a URL (Wikipedia's "Python_(language)").
_URL_BODY = r"(?:[^\s()<>\[\]{}\"'`|\\^]|\([^\s()<>]*\))+"
_SCHEMES = r"(?:https?|kb)://"
_MARKDOWN_LINK = re.compile(
    rf"\[(?P<title>[^\[\]\n]*)\]\(\s*<?(?P<url>{_SCHEMES}{_URL_BODY})>?"
    r"(?:\s+(?:\"[^\"]*\"|'[^']*'))?\s*\)",
    re.IGNORECASE,
)
_BARE_URL = re.compile(rf"{_SCHEMES}{_URL_BODY}", re.IGNORECASE)
# What ends a sentence or closes Markdown emphasis after a URL, never the URL itself.
_TRAILING = ".,;:!?*_~'\"»”’"
# Stronger proof first: a page that was read beats a chunk returned beats a search result.
_KIND_PRIORITY = {Source.Kind.PAGE: 0, Source.Kind.CHUNK: 1, Source.Kind.SEARCH: 2}
_URL_MAX = Citation._meta.get_field("url").max_length
_TITLE_MAX = Citation._meta.get_field("title").max_length


@dataclass(frozen=True)
class CitedUrl:
    url: str
    title: str


def clean_url(url: str) -> str:
    """The URL without the punctuation of the sentence around it, or a stray closing paren."""
    url = url.strip()
    while url and (url[-1] in _TRAILING or (url[-1] == ")" and url.count("(") < url.count(")"))):
        url = url[:-1]
    return url


def url_key(url: str) -> str:
    """The form two URLs are compared in: lower-case scheme and host, no trailing slash, no
    fragment (the same page) except for kb:// addresses, whose fragment is the chunk."""
    parts = urlsplit(clean_url(url))
    scheme, host = parts.scheme.lower(), parts.netloc.lower()
    path = parts.path.rstrip("/")
    fragment = parts.fragment if scheme == "kb" else ""
    return urlunsplit((scheme, host, path, parts.query, fragment))


def cited_urls(report: str) -> list[CitedUrl]:
    """The URLs a report cites, Markdown links and bare URLs, in order, each once."""
    # A link's parentheses end its URL; a bare URL's end is guessed, so the punctuation of
    # the sentence around it is taken off (a link's own "/_" or "." stays).
    found: list[tuple[int, str, str]] = []
    blanked = list(report)
    for match in _MARKDOWN_LINK.finditer(report):
        found.append((match.start(), match.group("url").strip(), match.group("title").strip()))
        blanked[match.start() : match.end()] = " " * (match.end() - match.start())
    for match in _BARE_URL.finditer("".join(blanked)):
        found.append((match.start(), clean_url(match.group(0)), ""))
    cited: dict[str, CitedUrl] = {}
    for _, url, title in sorted(found, key=lambda item: item[0]):
        if "://" not in url or url.endswith("://"):
            continue
        key = url_key(url)
        if key not in cited or (title and not cited[key].title):
            cited[key] = CitedUrl(url=url, title=title if title != url else "")
    return list(cited.values())


def _source_index(root_id: int) -> dict[str, Source]:
    """Every URL the tree saw (as asked and as finally fetched) -> the best source for it."""
    index: dict[str, Source] = {}
    sources = Source.objects.filter(root_id=root_id).only(
        "pk", "run_id", "kind", "url", "final_url", "title"
    )
    for source in sources.order_by("id"):
        for url in {source.url, source.final_url} - {""}:
            key = url_key(url)
            known = index.get(key)
            if known is None or _KIND_PRIORITY[source.kind] < _KIND_PRIORITY[known.kind]:
                index[key] = source
    return index


@transaction.atomic
def citations_record(
    *, run_id: int, report: str, root_id: int | None = None, replacing: bool = True
) -> list[Citation]:
    """Check every URL the report of `run_id` cites against the sources of its whole tree,
    and store the result, replacing the run's earlier citations. A caller that knows the
    run's tree passes `root_id`, and `replacing=False` when the run can have no earlier
    citations (it never reported before): neither is read then. A report that cites
    nothing reads no source."""
    return _citations_write(run_id=run_id, report=report, root_id=root_id, replacing=replacing)


def _citations_write(
    *, run_id: int, report: str, root_id: int | None, replacing: bool
) -> list[Citation]:
    """citations_record's work, in the caller's transaction."""
    if root_id is None:
        root_id = Run.objects.values_list("root_id", flat=True).get(pk=run_id)
    cites = cited_urls(report or "")
    index = _source_index(root_id) if cites else {}
    if replacing:
        Citation.objects.filter(run_id=run_id).delete()
    rows = []
    for cited in cites:
        source = index.get(url_key(cited.url))
        title = cited.title or (source.title if source else "")
        rows.append(
            Citation(
                run_id=run_id,
                url=cited.url[:_URL_MAX],
                title=title[:_TITLE_MAX],
                verified=source is not None,
                source=source,
            )
        )
    return Citation.objects.bulk_create(rows)


@transaction.atomic
def report_check(*, facts: RunFacts, report: str, replacing: bool = True) -> list[Citation]:
    """An agent's report checked at its end: its state says so ("writing · checking
    citations", a row of its timeline and an event) and its citations are stored, in one
    transaction. The state's event goes out with the check done, just before the finish's:
    one commit at an agent's end instead of two."""
    citations = _citations_write(
        run_id=facts.run_id, report=report, root_id=facts.root_id, replacing=replacing
    )
    # Last: its event number locks the tree's root row until the commit, and every step of
    # the tree waits for that lock.
    state_record(facts=facts, state=State.WRITING, detail="checking citations")
    return citations


def cited_sources(*, root_id: int, report: str) -> list[tuple[CitedUrl, Source | None]]:
    """Each URL a draft cites with the source of the tree that saw it (its stored snapshot:
    page text, passage, or search snippet, and the agent that found it), or None."""
    index = _source_index(root_id)
    pairs = [(cited, index.get(url_key(cited.url))) for cited in cited_urls(report or "")]
    found = {source.pk for _, source in pairs if source is not None}
    full = Source.objects.select_related("run").in_bulk(found)
    return [(cited, full.get(source.pk) if source else None) for cited, source in pairs]
