"""Text from files and pages: HTML and PDF extraction, decoding, and the one stop-word list.

`read_page` (a page an agent reads) and dataset uploads (a file an analyst adds) both turn
bytes into (title, text) here, so a page and the same page uploaded read alike.
"""

import contextlib
import html
import io
import re
from typing import Any

# Words that carry no meaning in a question or a task: full-text queries leave them out
# (FTS5 has no stop words of its own), and task similarity compares what remains.
STOP_WORDS = frozenset(
    (  # noqa: SIM905 (a word list reads better as a sentence)
        "a an and are as at be by can did do does for from how i in into is it its of on or s "
        "so that the their them there these this those to was were what when where which who "
        "why will with you"
    ).split()
)
_WORD = re.compile(r"\w+")


class UnreadableFile(Exception):
    """A file whose text could not be extracted (a damaged PDF); the message says why."""


def content_words(text: str) -> set[str]:
    """The words of `text` that carry meaning: lower-case, stop words left out."""
    return {word for word in _WORD.findall(text.lower()) if word not in STOP_WORDS}


def decode(data: bytes, charset: str = "") -> str:
    """Bytes as text: by the declared charset, else UTF-8, else Latin-1 (which maps every
    byte, so a file in an older encoding is readable rather than refused)."""
    if charset:
        try:
            return data.decode(charset, errors="replace")
        except LookupError:  # a charset Python does not know
            pass
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        return data.decode("latin-1")


_META_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?\s*([A-Za-z0-9_.:-]+)""", re.I)


def declared_charset(data: bytes) -> str:
    """The charset an HTML page declares in a <meta> of its first 2 KB, or ""."""
    found = _META_CHARSET.search(data[:2048])
    return found.group(1).decode("ascii") if found else ""


# Every pattern below reads a page in time linear in its size. A page is hostile input (a
# stranger's HTML read by an agent, or a file an analyst uploads): a tag pattern that could
# run on past the next "<" rescanned the rest of the page from every "<", and 160 KB of
# "<script>" held the process for 11 s.
_HIDDEN_OPEN = re.compile(r"<(script|style|noscript|template)\b", re.IGNORECASE)
_BLOCK_END = re.compile(r"(?i)<(?:br|/p|/div|/li|/h[1-6]|/tr)\b[^<>]*>")
_TAG = re.compile(r"<[^<>]+>")
_TITLE_OPEN = re.compile(r"<title\b[^<>]*>", re.IGNORECASE)


def _without_hidden(markup: str) -> str:
    """The markup without its scripts, styles, noscripts and templates. One that is never
    closed runs to the end of the page, as a browser reads it."""
    lowered = markup.lower()
    kept: list[str] = []
    position = 0
    while found := _HIDDEN_OPEN.search(markup, position):
        kept.append(markup[position : found.start()])
        close = lowered.find(f"</{found.group(1).lower()}", found.end())
        if close < 0:
            return " ".join(kept)
        end = markup.find(">", close)
        position = len(markup) if end < 0 else end + 1
        kept.append(" ")
    kept.append(markup[position:])
    return "".join(kept)


def visible_text(markup: str) -> str:
    """Every visible word of an HTML page or fragment, one block per line; scripts and
    styles left out. The fallback for markup trafilatura finds no article in."""
    markup = _BLOCK_END.sub("\n", _without_hidden(markup))
    text = html.unescape(_TAG.sub(" ", markup))
    lines = (" ".join(line.split()) for line in text.splitlines())
    return "\n".join(line for line in lines if line)


def html_title(markup: str) -> str:
    found = _TITLE_OPEN.search(markup)
    if not found:
        return ""
    end = markup.lower().find("</title>", found.end())
    return " ".join(html.unescape(markup[found.end() : end]).split()) if end >= 0 else ""


def _field(document: Any, name: str) -> str:
    # trafilatura 2 returns a Document, 1.x a dict.
    value = document.get(name) if isinstance(document, dict) else getattr(document, name, None)
    return str(value or "").strip()


def html_text(
    data: bytes, *, url: str = "", charset: str = "", fragment_as_is: bool = False
) -> tuple[str, str]:
    """(title, main text) of an HTML page.

    The bytes are decoded by `charset` (the caller's: a header's, or the page's own <meta>)
    before trafilatura sees them: its own guess reads a page cut inside a character as
    another encoding altogether. trafilatura keeps the main text and drops menus and
    footers; on a page too small for it to find a main part it finds nothing, and every
    visible word is better. With
    `fragment_as_is` (an uploaded file), markup without <html> or <body> is a fragment the
    analyst chose, kept whole.
    """
    import trafilatura
    from trafilatura.utils import load_html

    markup = decode(data, charset)
    title = text = ""
    if not fragment_as_is or re.search(r"<(html|body)\b", markup, re.IGNORECASE):
        tree = load_html(markup)
        if tree is not None:
            title = _trafilatura_title(tree)
            document = trafilatura.bare_extraction(
                tree, url=url or None, with_metadata=False, include_comments=False
            )
            text = _field(document, "text") if document else ""
    return title or html_title(markup), text or visible_text(markup)


def _trafilatura_title(tree: Any) -> str:
    """The title trafilatura's metadata gives (the page's meta tags, its JSON-LD, then its
    <title> or <h1> without the site's name), without the rest of its metadata: finding the
    page's date (htmldate) took half of a page's extraction, for a field nobody reads."""
    from trafilatura.metadata import examine_meta, extract_meta_json, extract_title
    from trafilatura.settings import Document

    try:
        metadata = examine_meta(tree)
        with contextlib.suppress(Exception):  # trafilatura's own guard: its JSON-LD reader
            metadata = extract_meta_json(tree, metadata)
        title = metadata.title or extract_title(tree) or ""
    except (TypeError, ValueError):  # what bare_extraction's own guard catches
        return ""
    # The clean-up its metadata gets: entities unescaped, cut at 10,000 characters, trimmed.
    document = Document()
    document.title = str(title)
    document.clean_and_trim()
    return " ".join((document.title or "").split())


def pdf_text(data: bytes) -> tuple[str, str]:
    """(title, text) of a PDF, pages separated by a blank line; UnreadableFile if damaged."""
    import pypdf

    try:
        reader = pypdf.PdfReader(io.BytesIO(data))
        text = "\n\n".join((page.extract_text() or "").strip() for page in reader.pages)
        title = str((reader.metadata or {}).get("/Title") or "")
    except Exception as error:  # noqa: BLE001 - pypdf raises many types on a damaged file
        raise UnreadableFile(str(error) or type(error).__name__) from None
    return title.strip(), text.strip()
