"""The knowledge base's text machinery: chunking, and full-text search over a dataset's chunks.

One search interface, `search_chunks`, with a backend per database: PostgreSQL ranks with
`ts_rank` over `to_tsvector('english', text)` (a GIN index on that very expression, see
migration 0002), SQLite with FTS5's `bm25` over the `chunk_fts` table that triggers keep in
step with `research_chunk`. Both read a question as an OR of its words: a question is not a
boolean query, and ranking puts the chunks that share the most (and rarest) words first.
"""

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from django.contrib.postgres.search import SearchQuery, SearchRank, SearchVectorField
from django.core.exceptions import ImproperlyConfigured
from django.db import connection
from django.db.models import Func, QuerySet
from django.db.models.functions import Left

from research.clean import strip_controls
from research.models import Chunk, Document
from research.text import STOP_WORDS

CHUNK_CHARS = 1200
CHUNK_OVERLAP = 200
FTS_CONFIG = "english"
# The SQLite full-text table (migration 0002). Only exists on SQLite.
SQLITE_FTS_TABLE = "chunk_fts"

_WORD = re.compile(r"[^\W_]+")

# The dataset `make run` loads (load_starter_dataset) and the demo model reads by default.
STARTER_DATASET = "Python reference"


@dataclass(frozen=True)
class ChunkHit:
    document_title: str  # its heading (document_heading)
    document_id: int
    position: int
    text: str
    # Higher is better on both backends.
    rank: float


def chunk_url(*, dataset_id: int, document_id: int, position: int) -> str:
    """The address an agent cites for a chunk; citations match reports against it."""
    return f"kb://dataset/{dataset_id}/document/{document_id}#{position}"


_CHUNK_URL = re.compile(
    r"^kb://dataset/(?P<dataset>\d+)/document/(?P<document>\d+)#(?P<chunk>\d+)$", re.ASCII
)


@dataclass(frozen=True)
class ChunkAddress:
    dataset_id: int
    document_id: int
    position: int


def parse_chunk_url(url: str) -> ChunkAddress | None:
    """The chunk a kb:// address (chunk_url's) names; None for any other address."""
    match = _CHUNK_URL.match((url or "").strip())
    if match is None:
        return None
    return ChunkAddress(int(match["dataset"]), int(match["document"]), int(match["chunk"]))


# How much of a document's text its heading is read from, and the longest heading kept.
HEAD_CHARS = 300
HEADING_MAX = 120
# A Markdown heading's marks: "# Tidal bores", "## Tidal bores ##".
_MARKDOWN_HEADING = re.compile(r"^#{1,6}\s+(?P<text>.*?)(?:\s+#+)?$")


def document_heading(title: str, text_head: str, *, given: bool = False) -> str:
    """A document's title as people read it, the one every page and export shows: its
    stored title when a person gave it (`given`) or when that is one (it has a space), else
    the heading its text opens with ("compound" -> "Compound statements", "tidal-bores" ->
    "Tidal bores" from "# Tidal bores"), else the stored title."""
    lines = [line.strip() for line in text_head.splitlines() if line.strip()]
    if given or not lines or " " in title.strip():
        return title
    marked = _MARKDOWN_HEADING.match(lines[0])
    first = marked["text"].strip() if marked else lines[0]
    slug = title.strip().lower().replace("-", " ").replace("_", " ")
    # A heading underlined as reStructuredText writes one ("Special method names\n****").
    underlined = len(lines) > 1 and set(lines[1]) <= set("*=-~^#")
    # A first line that ends as a sentence does is the text's start, not its heading.
    named = slug in first.lower() and not first.endswith(".")
    if first and (marked or underlined or named):
        return strip_controls(first)[:HEADING_MAX]  # a Word export refuses control characters
    return title


# How a list of sources names a passage of a document it cites more than once (source_names),
# and how a page finds that name again in a report's link text (frontend.rendering).
PASSAGE_NAMED = re.compile(r"^(?P<title>.+), passage (?P<number>\d+)$", re.ASCII)


def passage_name(title: str, position: int) -> str:
    return f"{title}, passage {position + 1}"


def source_names(sources: Sequence[tuple[str, str]]) -> list[str]:
    """What a list of sources (address, title) calls each: its title, and for passages that
    share their title with another source of the list (two passages of one document), the
    title with the passage's number, counted from 1 as the passage's page counts; and where
    that still names two alike (two documents of one title), with the address too."""
    shared = Counter(title for _, title in sources)
    names = []
    for url, title in sources:
        address = parse_chunk_url(url)
        if address is not None and shared[title] > 1:
            title = passage_name(title, address.position)
        names.append(title)
    # Two documents of one title, each cited at the same passage: their addresses tell them.
    twice = Counter(names)
    return [
        f"{name} ({url})" if twice[name] > 1 and parse_chunk_url(url) else name
        for (url, _), name in zip(sources, names, strict=True)
    ]


# --- Chunking --------------------------------------------------------------------------------


def normalise_text(text: str) -> str:
    """Unix newlines, no trailing blanks, at most one empty line in a row.

    Spaces inside a line are kept: indentation matters in the code that documents quote.
    """
    text = text.replace("\r\n", "\n").replace("\r", "\n").replace("\x00", "")
    # Line by line: a pattern for blanks before a newline rescanned a long run of blanks
    # from each of them (quadratic in a file of spaces).
    text = "\n".join(line.rstrip(" \t\f\v") for line in text.split("\n"))
    return re.sub(r"\n{3,}", "\n\n", text).strip()


_PARAGRAPH_END = re.compile(r"\n\s*\n")
_SENTENCE_END = re.compile(r"[.!?][\"')\]]*\s+")
_SPACE = re.compile(r"\s+")


def _last_break(text: str, start: int, end: int, pattern: re.Pattern) -> int | None:
    """The end of the last match of `pattern` inside text[start:end], if any."""
    found = None
    for match in pattern.finditer(text, start, end):
        found = match.end()
    return found


def _first_break(text: str, start: int, end: int, pattern: re.Pattern) -> int | None:
    match = pattern.search(text, start, end)
    return match.end() if match else None


def _chunk_end(text: str, start: int, size: int) -> int:
    """Where the chunk that starts at `start` ends: the last paragraph break, else sentence
    end, else space in its second half; a hard cut only inside an endless word."""
    limit = start + size
    if limit >= len(text):
        return len(text)
    floor = start + size // 2
    for pattern in (_PARAGRAPH_END, _SENTENCE_END, _SPACE):
        if (end := _last_break(text, floor, limit, pattern)) is not None:
            return end
    return limit


def _next_start(text: str, start: int, end: int, overlap: int) -> int:
    """Start the next chunk about `overlap` characters before `end`, on a sentence (else a
    word) boundary, so a fact cut by the break is whole in one of the two chunks."""
    if end >= len(text):
        return end
    back = max(end - overlap, start + 1)
    for pattern in (_SENTENCE_END, _SPACE):
        if (at := _first_break(text, back, end, pattern)) is not None and at < end:
            return at
    return back


def chunk_text(text: str, *, size: int = CHUNK_CHARS, overlap: int = CHUNK_OVERLAP) -> list[str]:
    """Split text into chunks of at most `size` characters that overlap by about `overlap`."""
    text = normalise_text(text)
    chunks: list[str] = []
    start = 0
    while start < len(text):
        end = _chunk_end(text, start, size)
        if piece := text[start:end].strip():
            chunks.append(piece)
        start = _next_start(text, start, end, overlap)
    return chunks


# --- Search ----------------------------------------------------------------------------------

# The longest question a search takes: the agents' query tool, the API's `q`, the page's box.
QUESTION_MAX = 1000


def question_words(question: str) -> list[str]:
    """The question's words, in order, without repeats: only letters and digits, so no
    punctuation in a question can reach a full-text query's syntax."""
    seen: dict[str, None] = {}
    for word in _WORD.findall(question.lower()):
        seen.setdefault(word, None)
    return list(seen)


def search_chunks(*, dataset_id: int, question: str, limit: int = 5) -> list[ChunkHit]:
    """The `limit` chunks of the dataset that best answer `question`, best first."""
    words = question_words(question)
    if not words or limit < 1:
        return []
    if connection.vendor == "postgresql":
        return _search_postgresql(dataset_id, words, limit)
    if connection.vendor == "sqlite":
        return _search_sqlite(dataset_id, words, limit)
    raise ImproperlyConfigured(f"no full-text search for the {connection.vendor} database")


class EnglishVector(Func):
    """`to_tsvector('english', text)`, spelled exactly as the GIN index of migration 0002.

    Django's SearchVector wraps its column in COALESCE(...), an expression the index does
    not cover, so the planner would scan every chunk.
    """

    function = "to_tsvector"
    template = f"%(function)s('{FTS_CONFIG}'::regconfig, %(expressions)s)"
    output_field = SearchVectorField()


def _search_postgresql(dataset_id: int, words: list[str], limit: int) -> list[ChunkHit]:
    # Letters and digits only, joined by |: a valid to_tsquery whatever the question was.
    query = SearchQuery(" | ".join(words), search_type="raw", config=FTS_CONFIG)
    vector = EnglishVector("text")
    rows = (
        Chunk.objects.filter(dataset_id=dataset_id)
        .annotate(vector=vector)
        .filter(vector=query)
        .annotate(rank=SearchRank(vector, query))
        .order_by("-rank", "id")
        .values_list("document_id", "position", "text", "rank")[:limit]
    )
    return _hits(list(rows))


def document_headings(documents: QuerySet[Document]) -> dict[int, str]:
    """Document id -> document_heading, reading only the start of each text: one query."""
    rows = documents.annotate(head=Left("text", HEAD_CHARS)).values_list(
        "pk", "title", "title_given", "head"
    )
    return {pk: document_heading(title, head, given=given) for pk, title, given, head in rows}


def _hits(rows: list[tuple]) -> list[ChunkHit]:
    """Hits named by their documents' headings, as every page and export names them (an
    agent quoting "tidal-bores" wrote a name the analyst never sees elsewhere): the start of
    the hits' documents only, read once the search has its best few."""
    headings = document_headings(Document.objects.filter(pk__in={row[0] for row in rows}))
    return [ChunkHit(headings[document_id], document_id, *rest) for document_id, *rest in rows]


def meaningful_words(words: list[str]) -> list[str]:
    """The words of a question that say something ("context", "manager"), not "is" or "a";
    all of them when none does."""
    return [word for word in words if word not in STOP_WORDS] or words


def _fts_match(words: list[str]) -> str:
    """An FTS5 query: each word a quoted string (so never an operator), joined by OR."""
    return " OR ".join('"{}"'.format(word.replace('"', '""')) for word in meaningful_words(words))


def _search_sqlite(dataset_id: int, words: list[str], limit: int) -> list[ChunkHit]:
    chunk = Chunk._meta.db_table
    sql = f"""
        SELECT c.document_id, c.position, c.text, -bm25({SQLITE_FTS_TABLE}) AS rank
        FROM {SQLITE_FTS_TABLE}
        JOIN {chunk} c ON c.id = {SQLITE_FTS_TABLE}.rowid
        WHERE {SQLITE_FTS_TABLE} MATCH %s AND c.dataset_id = %s
        ORDER BY rank DESC, c.id
        LIMIT %s
    """
    with connection.cursor() as cursor:
        cursor.execute(sql, [_fts_match(words), dataset_id, limit])
        return _hits(cursor.fetchall())
