"""Sources: what the agents of a tree saw (pages read, search results), so citations can be
checked against them. Rows are only added; a source is a fact about the past."""

from collections.abc import Iterable, Mapping
from functools import cache

from django.utils import timezone

from research.events import root_id_of
from research.models import Source
from research.sql import Insert

# The model's column sizes: a longer value is cut rather than failing the tool call.
_URL_MAX = Source._meta.get_field("url").max_length
_TITLE_MAX = Source._meta.get_field("title").max_length


@cache
def _insert() -> Insert:
    # Built once: a page read or a search records its sources without the ORM's save (its
    # SQL compiled per call was a tenth of a page read's CPU). No one reads their ids back.
    columns = ["run", "root", "kind", "url", "final_url", "title", "snippet", "text", "sha256"]
    return Insert(Source, [*columns, "carried", "fetched_at"])


def source_record(
    *,
    run_id: int,
    kind: str,
    url: str,
    final_url: str = "",
    title: str = "",
    snippet: str = "",
    text: str = "",
    sha256: str = "",
    root_id: int | None = None,
) -> None:
    """Record one thing `run_id` saw; the tree (root) is taken from the run unless the
    caller (an agent, which knows its tree) passes it."""
    sources_record(
        run_id=run_id,
        kind=kind,
        items=[
            {
                "url": url,
                "final_url": final_url,
                "title": title,
                "snippet": snippet,
                "text": text,
                "sha256": sha256,
            }
        ],
        root_id=root_id,
    )


def sources_record(
    *, run_id: int, kind: str, items: Iterable[Mapping[str, str]], root_id: int | None = None
) -> None:
    """Record several sources of one kind (mappings with url and optional final_url, title,
    snippet, text, sha256) in one insert: a search's results, a query's passages. The tree
    (root) is taken from the run unless the caller passes it."""
    if root_id is None:
        root_id = root_id_of(run_id)
    now = timezone.now()
    rows = [
        (
            run_id,
            root_id,
            kind,
            item["url"][:_URL_MAX],
            item.get("final_url", "")[:_URL_MAX],
            item.get("title", "")[:_TITLE_MAX],
            item.get("snippet", ""),
            item.get("text", ""),
            item.get("sha256", ""),
            False,
            now,
        )
        for item in items
    ]
    if rows:
        _insert().rows(rows)


def sources_record_search(
    *, run_id: int, results: Iterable[Mapping[str, str]], root_id: int | None = None
) -> None:
    """Record the results of one web search (mappings with url, title, snippet)."""
    sources_record(run_id=run_id, kind=Source.Kind.SEARCH, items=results, root_id=root_id)
