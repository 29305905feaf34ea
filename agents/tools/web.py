"""web_search: one query to the search provider the operator chose (settings.SEARCH_PROVIDER).

A provider is a function `(query, max_results) -> list[SearchResult]` that raises SearchFailed
with the end of a sentence that starts with its name ("answered 502"), so every provider's
failure reads the same to the model: "web_search: searxng answered 502". Search providers are
services the operator configured, so they are not behind read_page's address guard; they
share the process's "search" client (research.outbound).
"""

import html
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Annotated, Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from pydantic import Field

from agents.tools.base import ToolError
from agents.tools.tool import tool
from research import outbound
from research.clean import visible
from research.outbound.sdk import openai_http_client
from research.services.sources import sources_record_search

if TYPE_CHECKING:
    from agents.runtime.context import AgentContext

SNIPPET_MAX_CHARS = 400
TAVILY_URL = "https://api.tavily.com/search"
BRAVE_URL = "https://api.search.brave.com/res/v1/web/search"


@dataclass(frozen=True)
class SearchResult:
    title: str
    url: str
    snippet: str


class SearchFailed(Exception):
    """The provider failed; the message completes "web_search: <provider> ..."."""


Provider = Callable[[str, int], list[SearchResult]]


def _timeout() -> float:
    return settings.SEARCH_TIMEOUT_SECONDS


def clean_text(text: str, limit: int = SNIPPET_MAX_CHARS) -> str:
    """Plain, one-line text: providers send snippets with <strong> tags and entities."""
    text = html.unescape(re.sub(r"<[^<>]+>", "", text or ""))
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _request_json(method: str, url: str, **kwargs: Any) -> Any:
    timeout = _timeout()
    try:
        response = outbound.send("search", method, url, timeout=timeout, **kwargs)
    except outbound.TimedOut:
        raise SearchFailed(f"did not answer within {timeout:g} s") from None
    except outbound.TransferFailed as error:
        raise SearchFailed(f"could not be reached ({error.kind}: {error.detail})") from None
    if response.status_code >= 400:
        raise SearchFailed(f"answered {response.status_code}")
    try:
        return response.json()
    except ValueError:
        raise SearchFailed("answered with something that is not JSON") from None


def _results(items: Any, *, url: str, title: str, snippet: str) -> list[SearchResult]:
    """Pick the three fields out of a provider's list of result objects."""
    if not isinstance(items, list):
        raise SearchFailed("answered JSON without a list of results")
    return [
        SearchResult(
            title=clean_text(str(item.get(title) or ""), 300),
            url=str(item.get(url) or "").strip(),
            snippet=clean_text(str(item.get(snippet) or "")),
        )
        for item in items
        if isinstance(item, dict)
    ]


def _required(value: str, name: str) -> str:
    if not value:
        raise SearchFailed(f"is chosen but {name} is not set on this server")
    return value


def search_searxng(query: str, max_results: int) -> list[SearchResult]:
    base = _required(settings.SEARXNG_URL, "SEARXNG_URL").rstrip("/")
    data = _request_json("GET", f"{base}/search", params={"q": query, "format": "json"})
    items = data.get("results") if isinstance(data, dict) else None
    return _results(items, url="url", title="title", snippet="content")


def search_tavily(query: str, max_results: int) -> list[SearchResult]:
    key = _required(settings.TAVILY_API_KEY, "TAVILY_API_KEY")
    data = _request_json(
        "POST",
        TAVILY_URL,
        json={"query": query, "max_results": max_results},
        headers={"Authorization": f"Bearer {key}"},
    )
    items = data.get("results") if isinstance(data, dict) else None
    return _results(items, url="url", title="title", snippet="content")


def search_brave(query: str, max_results: int) -> list[SearchResult]:
    key = _required(settings.BRAVE_API_KEY, "BRAVE_API_KEY")
    data = _request_json(
        "GET",
        BRAVE_URL,
        params={"q": query, "count": max_results},
        headers={"X-Subscription-Token": key, "Accept": "application/json"},
    )
    web = data.get("web") if isinstance(data, dict) else None
    items = web.get("results", []) if isinstance(web, dict) else []
    return _results(items, url="url", title="title", snippet="description")


def search_ddgs(query: str, max_results: int) -> list[SearchResult]:
    try:
        from ddgs import DDGS  # optional: only servers that chose ddgs install it
    except ImportError:
        raise SearchFailed(
            "is chosen but the ddgs package is not installed on this server (pip install ddgs)"
        ) from None
    try:
        items = DDGS(timeout=int(_timeout())).text(query, max_results=max_results)
    except Exception as error:  # noqa: BLE001 - a scraper fails in many ways; all read the same
        raise SearchFailed(f"failed ({type(error).__name__}: {error})") from None
    return _results(list(items or []), url="href", title="title", snippet="body")


def _openai_model() -> str:
    return settings.SEARCH_OPENAI_MODEL


def search_openai(query: str, max_results: int) -> list[SearchResult]:
    """A model call with OpenAI's hosted web_search tool; the results are its url_citations."""
    import openai  # slow to import (a second or more), and few servers choose this provider

    key = _required(settings.OPENAI_API_KEY, "OPENAI_API_KEY")
    client = openai.OpenAI(
        api_key=key,
        base_url=settings.OPENAI_BASE_URL or None,
        timeout=_timeout(),
        max_retries=settings.LLM_MAX_RETRIES,
        http_client=openai_http_client("search"),
    )
    try:
        response = client.responses.create(
            model=_openai_model(),
            instructions=(settings.BASE_DIR / "prompts" / "web_search.md").read_text(),
            input=f"Search query: {query}\nList at most {max_results} pages.",
            tools=[{"type": "web_search"}],
        )
    except openai.APITimeoutError:
        raise SearchFailed(f"did not answer within {_timeout():g} s") from None
    except openai.APIStatusError as error:
        raise SearchFailed(f"answered {error.status_code}") from None
    except openai.APIError as error:
        raise SearchFailed(f"could not be reached ({type(error).__name__}: {error})") from None
    return _citations(response)


def _citations(response: Any) -> list[SearchResult]:
    """The url_citation annotations of the answer, each with the text it was cited for."""
    results = []
    for item in getattr(response, "output", None) or []:
        if getattr(item, "type", "") != "message":
            continue
        for part in item.content or []:
            if getattr(part, "type", "") != "output_text":
                continue
            for note in part.annotations or []:
                if getattr(note, "type", "") == "url_citation":
                    snippet = _cited_line(part.text, note.start_index)
                    results.append(SearchResult(clean_text(note.title, 300), note.url, snippet))
    return results


def _cited_line(text: str, start: int) -> str:
    """The answer's line up to the citation: the model's summary of the cited page."""
    line = text[text.rfind("\n", 0, start) + 1 : start]
    line = re.sub(r"\[([^\[\]]*)\]\([^()]*\)", r"\1", line)  # markdown links: keep the words
    return clean_text(re.sub(r"^\s*(\d+[.)]|[-*])\s*", "", line))


PROVIDERS: dict[str, Provider] = {
    "searxng": search_searxng,
    "tavily": search_tavily,
    "brave": search_brave,
    "ddgs": search_ddgs,
    "openai": search_openai,
}

NOT_CONFIGURED = (
    "web_search is not configured on this server: the operator has not set SEARCH_PROVIDER "
    f"(one of {', '.join(PROVIDERS)}). Search the knowledge base with the query tool instead "
    "if you have it, or use read_page on a URL you already know."
)


def web_search_configured() -> bool:
    return bool(settings.SEARCH_PROVIDER)


def unknown_provider(name: str) -> str:
    return (
        f"SEARCH_PROVIDER is {name!r} on this server, which is not one of "
        f"{', '.join(PROVIDERS)} (empty: no web search)."
    )


def check_provider() -> None:
    """At startup (agents.apps): a misspelt SEARCH_PROVIDER stops every command and the
    server with an error naming it, where it left each web_search to fail and the start form
    to offer "search the web"."""
    name = settings.SEARCH_PROVIDER
    if name and name not in PROVIDERS:
        raise ImproperlyConfigured(unknown_provider(name))


def _usable(results: list[SearchResult], max_results: int) -> list[SearchResult]:
    """Web pages only, each once, at most max_results (providers do not all honour it)."""
    seen: set[str] = set()
    kept = []
    for result in results:
        if result.url.startswith(("http://", "https://")) and result.url not in seen:
            seen.add(result.url)
            kept.append(result)
    return kept[:max_results]


def format_results(query: str, results: list[SearchResult]) -> str:
    if not results:
        return f'No results for "{query}". Try other words, or fewer of them.'
    noun = "result" if len(results) == 1 else "results"
    lines = [f'{len(results)} {noun} for "{query}":', ""]
    for number, result in enumerate(results, 1):
        lines.append(f"{number}. {result.title or '(no title)'}")
        lines.append(f"   {result.url}")
        if result.snippet:
            lines.append(f"   {result.snippet}")
    lines += ["", "A snippet is not the page: read a page with read_page before relying on it."]
    return "\n".join(lines)


@tool(state="searching", parallel=True, detail=lambda args: str(args.get("query", "")))
def web_search(
    ctx: "AgentContext",
    query: Annotated[
        str,
        Field(
            min_length=1,
            max_length=400,
            description="What to search for, as you would type it into a search engine.",
        ),
    ],
    max_results: Annotated[
        int, Field(ge=1, le=10, description="How many results to return (1 to 10, default 5).")
    ] = 5,
) -> str:
    """Search the web. Returns a numbered list of results, each with its title, URL and a
    short snippet. Read the promising pages with read_page before you quote or cite them."""
    query = " ".join(query.split())
    if not visible(query):
        raise ToolError("web_search: the query is empty.")
    name = settings.SEARCH_PROVIDER
    if not name:
        return NOT_CONFIGURED
    provider = PROVIDERS.get(name)
    if provider is None:
        raise ToolError(f"web_search: {unknown_provider(name)} Use the knowledge base instead.")
    try:
        results = _usable(provider(query, max_results), max_results)
    except SearchFailed as failure:
        raise ToolError(f"web_search: {name} {failure}") from None
    rows = [asdict(result) for result in results]
    sources_record_search(run_id=ctx.run_id, root_id=ctx.root_id, results=rows)
    return format_results(query, results)


WEB_SEARCH = web_search  # the name other modules import
