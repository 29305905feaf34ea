"""The report as a Word document: the Markdown an agent wrote, walked token by token into
Word's own headings, paragraphs, lists, tables and hyperlinks, then the sources as checked.

The report is parsed by the run page's parser (`frontend.rendering`), bare URLs made links
as there, so what is a link on the page is a link in Word. python-docx has no hyperlink
API: a link is a `w:hyperlink` element naming an external relationship of the document
part (the documented recipe). Nothing is fetched: images are their alt text.
"""

import io

from docx import Document
from docx.opc.constants import RELATIONSHIP_TYPE
from docx.oxml import OxmlElement
from docx.oxml.ns import qn
from docx.shared import Pt, RGBColor
from docx.text.paragraph import Paragraph
from markdown_it.token import Token

from frontend.clarify_export import HEADING as CLARIFY_HEADING
from frontend.clarify_export import asked
from frontend.passages import cited_names
from frontend.rendering import PassageLink, _linkify, _markdown, titled_passages
from frontend.terminal.export import (
    PassageTargets,
    colophon,
    export_titles,
    provenance,
    source_href,
)
from frontend.terminal.render import one_line
from research import selectors
from research.models import Citation, Run
from research.services.citations import url_key

LINK_BLUE = RGBColor(0x05, 0x63, 0xC1)
SOURCES_HEADING = "Sources checked"
# Word's list styles go three deep.
BULLETS = ("List Bullet", "List Bullet 2", "List Bullet 3")
NUMBERED = ("List", "List 2", "List 3")  # numbered in the text: Word's numbering would run on


def export_docx(run: Run, *, passage_link: PassageLink | None = None) -> bytes:
    """The report as a Word document. With `passage_link` (kb:// address and quote -> a URL),
    each kb:// link opens its passage's page, since Word opens no kb:// address."""
    citations = selectors.subtree_citations(run=run, subtree=False)
    titles = export_titles(run, citations)
    report = titled_passages(run.report, titles)  # passages named as the run page names them
    document = Document()
    document.core_properties.title = one_line(run.topic)[:200]
    document.core_properties.author = "Canopy"
    if not report.lstrip().startswith("#"):
        document.add_heading(one_line(run.topic)[:200], level=1)
    targets = None if passage_link is None else PassageTargets(run.report, titles, passage_link)
    _Writer(document, citations, targets).write(report)
    if (shown := asked(run)) is not None:
        document.add_heading(CLARIFY_HEADING, level=2)
        document.add_paragraph(shown.intro)
        for number, (question, answer) in enumerate(shown.pairs, start=1):
            paragraph = document.add_paragraph(f"{number}. ", style=NUMBERED[0])
            paragraph.add_run(question).bold = True
            paragraph.add_run(f" {answer}")
    if citations:
        document.add_heading(SOURCES_HEADING, level=2)
        names = cited_names(citations, titles)
        for number, (citation, name) in enumerate(zip(citations, names, strict=True), start=1):
            paragraph = document.add_paragraph(f"{number}. ", style=NUMBERED[0])
            add_hyperlink(paragraph, source_href(citation.url, passage_link), name)
            paragraph.add_run(f": {provenance(citation)}")
    document.add_paragraph().add_run(colophon(run)).italic = True
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def add_hyperlink(paragraph: Paragraph, url: str, text: str, **font: bool) -> None:
    """A run of `text` linking to `url`, coloured and underlined as Word shows links."""
    relationship = paragraph.part.relate_to(url, RELATIONSHIP_TYPE.HYPERLINK, is_external=True)
    hyperlink = OxmlElement("w:hyperlink")
    hyperlink.set(qn("r:id"), relationship)
    run = paragraph.add_run(text)
    run.font.color.rgb = LINK_BLUE
    run.font.underline = True
    run.bold, run.italic = font.get("bold"), font.get("italic")
    hyperlink.append(run._r)  # moved from the paragraph into the link
    paragraph._p.append(hyperlink)


class _Writer:
    """Block tokens become paragraphs; inline tokens become runs of the current one."""

    def __init__(
        self, document, citations: list[Citation], targets: PassageTargets | None = None
    ) -> None:
        self.document = document
        self.targets = targets
        self.verdicts = {url_key(citation.url): citation for citation in citations}
        self.lists: list[list[int]] = []  # per open list: [next number] or [] for bullets
        self.quote = 0
        self._in_head = False
        # An open table's rows, each cell its inline tokens and whether it heads its column.
        self.table: list[list[tuple[list[Token], bool]]] | None = None

    def write(self, text: str) -> None:
        md = _markdown()
        tokens = md.parse(text or "")
        paragraph: Paragraph | None = None
        for token in tokens:
            kind = token.type
            if kind == "heading_open":
                paragraph = self.document.add_heading(level=min(int(token.tag[1]), 9))
            elif kind == "paragraph_open" and self.table is None:
                paragraph = self._paragraph()
            elif kind in ("bullet_list_open", "ordered_list_open"):
                self.lists.append([int(token.attrGet("start") or 1)] if token.tag == "ol" else [])
            elif kind in ("bullet_list_close", "ordered_list_close"):
                self.lists.pop()
            elif kind == "blockquote_open":
                self.quote += 1
            elif kind == "blockquote_close":
                self.quote -= 1
            elif kind in ("fence", "code_block"):
                self._code(token.content)
            elif kind == "table_open":
                self.table = []
            elif kind == "tr_open" and self.table is not None:
                self.table.append([])
            elif kind == "inline" and self.table is not None:
                self.table[-1].append((_linkify(md, token.children or []), self._in_head))
            elif kind in ("thead_open", "thead_close"):
                self._in_head = kind == "thead_open"
            elif kind == "table_close":
                self._table()
            elif kind == "inline" and paragraph is not None:
                self._inline(paragraph, _linkify(md, token.children or []))
                paragraph = None

    def _paragraph(self) -> Paragraph:
        if self.lists:
            numbers = self.lists[-1]
            depth = min(len(self.lists), 3) - 1
            if not numbers:
                return self.document.add_paragraph(style=BULLETS[depth])
            paragraph = self.document.add_paragraph(f"{numbers[0]}. ", style=NUMBERED[depth])
            numbers[0] += 1
            return paragraph
        return self.document.add_paragraph(style="Quote" if self.quote else None)

    def _code(self, text: str) -> None:
        run = self.document.add_paragraph(style="No Spacing").add_run(text.rstrip("\n"))
        run.font.name = "Courier New"
        run.font.size = Pt(9)

    def _table(self) -> None:
        rows, self.table = self.table or [], None
        if not rows:
            return
        columns = max(len(row) for row in rows)
        table = self.document.add_table(rows=len(rows), cols=columns)
        table.style = "Table Grid"
        # Each cell as a paragraph is written: its links open, its emphasis shows, its
        # citations carry the page's mark (a cell's text was its Markdown, links as written).
        for cells, row in zip(table.rows, rows, strict=True):
            for cell, (children, heading) in zip(cells.cells, row, strict=False):
                self._inline(cell.paragraphs[0], children, heading=heading)

    def _inline(
        self, paragraph: Paragraph, children: list[Token], *, heading: bool = False
    ) -> None:
        """`heading`: a table's head row, bold throughout."""
        bold = italic = strike = False
        href: str | None = None
        target = ""
        for token in children:
            kind = token.type
            if kind in ("strong_open", "strong_close"):
                bold = kind == "strong_open"
            elif kind in ("em_open", "em_close"):
                italic = kind == "em_open"
            elif kind in ("s_open", "s_close"):
                strike = kind == "s_open"
            elif kind == "link_open":
                href = str(token.attrGet("href") or "")
                target = self._target(href, bare=token.meta.get("bare", False))
            elif kind == "link_close":
                self._verdict(paragraph, href)
                href = None
            elif kind in ("text", "code_inline", "image"):
                text = token.content
                if href:
                    add_hyperlink(paragraph, target, text, bold=bold or heading, italic=italic)
                    continue
                run = paragraph.add_run(text)
                run.bold, run.italic, run.font.strike = bold or heading, italic, strike
                if kind == "code_inline":
                    run.font.name = "Courier New"
            elif kind == "softbreak":
                paragraph.add_run(" ")
            elif kind == "hardbreak":
                paragraph.add_run().add_break()

    def _target(self, href: str, *, bare: bool) -> str:
        """Where a link opens: a kb:// address its passage's page, when there is a site (a
        bare address the text names has no quote to highlight there)."""
        if self.targets is not None and href.lower().startswith("kb://"):
            return self.targets(href, quoted=not bare) or href
        return href

    def _verdict(self, paragraph: Paragraph, href: str | None) -> None:
        """The page's mark after a cited link: ✓ an agent saw it, ? none did."""
        citation = self.verdicts.get(url_key(href)) if href else None
        if citation is not None:
            paragraph.add_run(" ✓" if citation.verified else " ?")
