"""Sources: what the agents of a tree saw (pages read, search results), so citations can be
checked against them. Rows are only added; a source is a fact about the past."""

from collections.abc import Iterable, Mapping

from research.events import root_id_of
from research.models import Source

# The model's column sizes: a longer value is cut rather than failing the tool call.
_URL_MAX = Source._meta.get_field("url").max_length
_TITLE_MAX = Source._meta.get_field("title").max_length


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
) -> Source:
    """Record one thing `run_id` saw; the tree (root) is taken from the run unless the
    caller (an agent, which knows its tree) passes it."""
    return Source.objects.create(
        run_id=run_id,
        root_id=root_id_of(run_id) if root_id is None else root_id,
        kind=kind,
        url=url[:_URL_MAX],
        final_url=final_url[:_URL_MAX],
        title=title[:_TITLE_MAX],
        snippet=snippet,
        text=text,
        sha256=sha256,
    )


def sources_record(
    *, run_id: int, kind: str, items: Iterable[Mapping[str, str]], root_id: int | None = None
) -> list[Source]:
    """Record several sources of one kind (mappings with url and optional title, snippet,
    text) in one insert: a search's results, a query's passages. The tree (root) is taken
    from the run unless the caller passes it."""
    if root_id is None:
        root_id = root_id_of(run_id)
    rows = [
        Source(
            run_id=run_id,
            root_id=root_id,
            kind=kind,
            url=item["url"][:_URL_MAX],
            title=item.get("title", "")[:_TITLE_MAX],
            snippet=item.get("snippet", ""),
            text=item.get("text", ""),
        )
        for item in items
    ]
    return Source.objects.bulk_create(rows)


def sources_record_search(
    *, run_id: int, results: Iterable[Mapping[str, str]], root_id: int | None = None
) -> list[Source]:
    """Record the results of one web search (mappings with url, title, snippet)."""
    return sources_record(run_id=run_id, kind=Source.Kind.SEARCH, items=results, root_id=root_id)
