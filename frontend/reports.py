"""A report as a page shows it: rendered, its sections listed, its kb:// citations linked to
their passages, and its sources under their stored titles. The run page's Report tab, the
agent panel and the exports read it from here."""

from dataclasses import dataclass

from frontend.passages import cited_names, kb_titles, passage_href
from frontend.rendering import render_report_page
from frontend.templatetags.canopy import is_web_url
from research.fulltext import parse_chunk_url
from research.models import Citation, Run
from research.selectors.citations import citations_for

# Fewer sections than this: the report is short enough to read without a table of contents.
CONTENTS_FROM = 3


@dataclass(frozen=True)
class CitedSource:
    citation: Citation
    title: str
    href: str  # the page, or Canopy's page of the passage; "" when neither
    web: bool
    gone: bool = False  # a passage whose document was deleted after the research cited it


@dataclass(frozen=True)
class ReportParts:
    html: str
    sections: list[tuple[str, str]]
    sources: list[CitedSource]
    flagged: bool  # some claims are marked as unsupported


def report_parts(
    run: Run, *, citations: list[Citation] | None = None, heading_offset: int = 0
) -> ReportParts:
    """`run`'s report, already scoped to its owner, ready for a template."""
    if citations is None:
        citations = list(citations_for(run_id=run.pk))
    titles = kb_titles(owner_id=run.owner_id, urls=[c.url for c in citations])
    rendered = render_report_page(
        run.report,
        citations,
        run.flagged_claims,
        heading_offset=heading_offset,
        passage_link=passage_href,
        titles=titles,
    )
    names = cited_names(citations, titles)
    sources = [
        CitedSource(
            citation=citation,
            title=name,
            href=citation.url if is_web_url(citation.url) else (passage_href(citation.url) or ""),
            web=is_web_url(citation.url),
            # Only a passage an agent saw can have been deleted since; an address no agent
            # saw is flagged, not "deleted".
            gone=citation.verified
            and citation.url not in titles
            and parse_chunk_url(citation.url) is not None,
        )
        for citation, name in zip(citations, names, strict=True)
    ]
    return ReportParts(
        html=rendered.html,
        sections=rendered.sections if len(rendered.sections) >= CONTENTS_FROM else [],
        sources=sources,
        flagged=bool(run.flagged_claims),
    )
