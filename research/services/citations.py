"""Citations: the URLs a report cites, each checked against what the agents of its tree saw.

A cited URL that matches a Source of the tree (a page read, a search result, a knowledge-base
chunk) is verified, and the source names the agent that found it; one that matches nothing is
flagged: no agent of the research saw it, so the model may have made it up.
"""

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import cache
from urllib.parse import urlsplit, urlunsplit

from django.db import connection, transaction

from research.models import Citation, Run, Source
from research.sql import Insert, Instances

# One level of balanced parentheses is part of a URL (Wikipedia's "Python_(language)").
_URL_BODY = r"(?:[^\s()<>\[\]{}\"'`|\\^]|\([^\s()<>]*\))+"
_SCHEMES = r"(?:https?|kb)://"
_MARKDOWN_LINK = re.compile(
    rf"\[(?P<title>[^\[\]\n]*)\]\(\s*<?(?P<url>{_SCHEMES}{_URL_BODY})>?"
    r"(?:\s+(?:\"[^\"]*\"|'[^']*'))?\s*\)",
    re.IGNORECASE,
)
# An address in plain text: a report's bare URLs, the links the page makes of them, and of the
# addresses in agents' messages (static/page/format.js writes the same pattern).
BARE_URL = re.compile(rf"{_SCHEMES}{_URL_BODY}", re.IGNORECASE)
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


def bare_urls(text: str) -> Iterator[tuple[int, str]]:
    """The addresses in plain text, each with where it starts, as it is cited: without the
    punctuation of the sentence around it, and never a scheme alone ("see https://")."""
    for match in BARE_URL.finditer(text):
        url = clean_url(match.group(0))
        if "://" in url and not url.endswith("://"):
            yield match.start(), url


def url_key(url: str) -> str:
    """The form two URLs are compared in: lower-case scheme and host, no trailing slash, no
    fragment (the same page) except for kb:// addresses, whose fragment is the chunk. One no
    parser reads ("https://[citation needed]", written by a model) is compared as written."""
    try:
        parts = urlsplit(clean_url(url))
    except ValueError:
        return clean_url(url)
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
    found += [(start, url, "") for start, url in bare_urls("".join(blanked))]
    cited: dict[str, CitedUrl] = {}
    for _, url, title in sorted(found, key=lambda item: item[0]):
        if "://" not in url or url.endswith("://"):
            continue
        key = url_key(url)
        if key not in cited or (title and not cited[key].title):
            cited[key] = CitedUrl(url=url, title=title if title != url else "")
    return list(cited.values())


def _source_index(root_id: int, citing_run_id: int | None = None) -> dict[str, Source]:
    """Every URL the tree saw (as asked and as finally fetched) -> the best source for it:
    a page read before a passage before a search result; of those alike, the citing agent's
    own (its report's "seen by" names it, not a sibling that happened to see the URL
    first), else the first."""
    index: dict[str, Source] = {}
    with connection.cursor() as cursor:
        cursor.execute(_sources_sql(), [root_id])
        sources = [_sources().instance(row) for row in cursor.fetchall()]

    def rank(source: Source) -> tuple[int, bool]:
        return _KIND_PRIORITY[source.kind], source.run_id != citing_run_id

    for source in sources:  # in the order they were seen: the first wins a tie
        for url in {source.url, source.final_url} - {""}:
            key = url_key(url)
            known = index.get(key)
            if known is None or rank(source) < rank(known):
                index[key] = source
    return index


@cache
def _sources() -> Instances:
    # Not the sources' text: every agent's end reads the tree's sources (its statement built
    # once, research.sql), and a page's text is long.
    return Instances(Source, ["id", "run", "kind", "url", "final_url", "title"])


@cache
def _sources_sql() -> str:
    table = Source._meta.db_table
    return f"SELECT {_sources().columns} FROM {table} WHERE root_id = %s ORDER BY id"


@transaction.atomic
def citations_record(
    *, run_id: int, report: str, root_id: int | None = None, replacing: bool = True
) -> list[Citation]:
    """Check every URL the report of `run_id` cites against the sources of its whole tree,
    and store the result, replacing the run's earlier citations; the citations stored. An
    agent's own report is checked the same way and stored with its finish
    (research.services.run_finish)."""
    if root_id is None:
        root_id = Run.objects.values_list("root_id", flat=True).get(pk=run_id)
    citations_store(
        run_id=run_id,
        citations=citations_checked(run_id=run_id, root_id=root_id, report=report),
        replacing=replacing,
    )
    return list(Citation.objects.filter(run_id=run_id))


def citations_checked(*, run_id: int, root_id: int, report: str) -> list[Citation]:
    """The citations of `report`, each checked against the sources of the tree of `root_id`,
    not yet stored. A report that cites nothing reads no source."""
    cites = cited_urls(report or "")
    index = _source_index(root_id, run_id) if cites else {}
    citations = []
    for cited in cites:
        source = index.get(url_key(cited.url))
        title = cited.title or (source.title if source else "")
        citations.append(
            Citation(
                run_id=run_id,
                url=cited.url[:_URL_MAX],
                title=title[:_TITLE_MAX],
                verified=source is not None,
                source=source,
            )
        )
    return citations


def citations_store(*, run_id: int, citations: Sequence[Citation], replacing: bool) -> None:
    """Store checked citations of `run_id` in the caller's transaction, after deleting its
    earlier ones when `replacing` (a run that never reported has none to delete). The rows
    go with the caller's other deferred inserts (research.sql.inserts_deferred)."""
    if replacing:
        Citation.objects.filter(run_id=run_id).delete()
    if citations:
        _citation_insert().rows(
            [(run_id, c.url, c.title, c.verified, c.source_id) for c in citations]
        )


@cache
def _citation_insert() -> Insert:
    return Insert(Citation, ["run", "url", "title", "verified", "source"])


def cited_sources(*, root_id: int, report: str) -> list[tuple[CitedUrl, Source | None]]:
    """Each URL a draft cites with the source of the tree that saw it (its stored snapshot:
    page text, passage, or search snippet, and the agent that found it), or None."""
    index = _source_index(root_id)
    pairs = [(cited, index.get(url_key(cited.url))) for cited in cited_urls(report or "")]
    found = {source.pk for _, source in pairs if source is not None}
    full = Source.objects.select_related("run").in_bulk(found)
    return [(cited, full.get(source.pk) if source else None) for cited, source in pairs]
