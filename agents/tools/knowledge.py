"""query and remember: the research's dataset (knowledge base), shared by the whole tree.

`query` records each chunk it returns as a Source of kind "chunk" with its kb:// address, so a
report that cites that address is verified like a page that was read. `remember` stores a
fact as a document of the dataset, where a sibling's next `query` finds it.
"""

from typing import Annotated

from pydantic import Field

from agents import prompts
from agents.runtime.context import AgentContext
from agents.tools.base import ToolError
from agents.tools.tool import Tool, tool
from research import selectors
from research.clean import visible
from research.errors import InvalidInput
from research.fulltext import QUESTION_MAX, ChunkHit, chunk_url, search_chunks
from research.models import Source
from research.services.datasets import FACT_MAX_CHARS, fact_remember
from research.services.sources import sources_record

QUERY_LIMIT = 5
SNIPPET_CHARS = 300
# The state detail the tree shows beside "querying" or "remembering" (RunState.detail is 500)
DETAIL_CHARS = 300
NO_DATASET = "this research has no dataset: there is no knowledge base to {}. Use web_search."


def _dataset_id(ctx: AgentContext, action: str) -> int:
    if ctx.dataset_id is None:
        raise ToolError(NO_DATASET.format(action))
    return ctx.dataset_id


def _with_dataset(ctx: AgentContext, tool: Tool) -> Tool | None:
    """Offered only to a research that has a dataset."""
    return tool if ctx.dataset_id is not None else None


def _text(value: str, name: str) -> str:
    if not visible(value):
        raise ToolError(f"{name} must not be empty.")
    return value.strip()


def _format_hit(number: int, hit: ChunkHit, url: str, fact: tuple[str, str] | None) -> str:
    head = f"[{number}] {hit.document_title} ({url})"
    if fact is not None:
        source, name = fact
        head += f"\nremembered by {name or 'the lead agent'}"
        head += f"; source: {source}" if source else "; no source given"
    return f"{head}\n{hit.text}"


@tool(
    state="querying",
    parallel=True,
    detail=lambda args: str(args.get("question", ""))[:DETAIL_CHARS],
    prompt=prompts.load("knowledge"),
    prepare=_with_dataset,
)
def query(
    ctx: AgentContext,
    question: Annotated[
        str,
        Field(
            min_length=1,
            max_length=QUESTION_MAX,
            description="What you want to know, in plain words or keywords.",
        ),
    ],
) -> str:
    """Search the research's dataset (its knowledge base: uploaded documents and facts other
    agents remembered). Returns the best-matching passages, each with its document title and a
    kb:// address to cite. Query the dataset before you search the web."""
    dataset_id = _dataset_id(ctx, "query")
    question = _text(question, "question")
    hits = search_chunks(dataset_id=dataset_id, question=question, limit=QUERY_LIMIT)
    if not hits:
        return (
            f"No passage of the knowledge base matches {question!r}. Try other words (names, "
            "technical terms), or search the web."
        )
    facts = selectors.remembered_facts(document_ids={hit.document_id for hit in hits})
    urls = [
        chunk_url(dataset_id=dataset_id, document_id=hit.document_id, position=hit.position)
        for hit in hits
    ]
    sources_record(
        run_id=ctx.run_id,
        root_id=ctx.root_id,
        kind=Source.Kind.CHUNK,
        items=[
            {
                "url": url,
                "title": hit.document_title,
                "snippet": hit.text[:SNIPPET_CHARS],
                "text": hit.text,
            }
            for url, hit in zip(urls, hits, strict=True)
        ],
    )
    parts = [
        _format_hit(number, hit, url, facts.get(hit.document_id))
        for number, (url, hit) in enumerate(zip(urls, hits, strict=True), start=1)
    ]
    return (
        f"{len(hits)} passages of the knowledge base, best first. Cite a passage by its kb:// "
        "address.\n\n" + "\n\n".join(parts)
    )


@tool(
    state="remembering",
    detail=lambda args: str(args.get("fact", ""))[:DETAIL_CHARS],
    prepare=_with_dataset,
)
def remember(
    ctx: AgentContext,
    fact: Annotated[
        str,
        Field(
            min_length=1,
            max_length=FACT_MAX_CHARS,
            description="The fact, in a sentence or two that make sense on their own.",
        ),
    ],
    source: Annotated[
        str | None,
        Field(
            max_length=2000,
            description="Where the fact comes from: the page URL or kb:// address.",
        ),
    ] = None,
) -> str:
    """Save a fact in the research's dataset so that other agents (your siblings, and later
    researches on this dataset) find it with query. One self-contained fact per call, with the
    URL or kb:// address it comes from."""
    _dataset_id(ctx, "remember facts in")
    fact = _text(fact, "fact")
    source = (source or "").strip()
    try:
        document = fact_remember(run_id=ctx.run_id, fact=fact, source=source)
    except InvalidInput as error:
        raise ToolError(error.message) from None
    return (
        f"Remembered as document {document.pk} of the dataset"
        f"{' with its source' if source else ' (no source given)'}. Every agent of this "
        "research, your siblings included, now finds it with query."
    )


# The names other modules import.
QUERY, REMEMBER = query, remember
