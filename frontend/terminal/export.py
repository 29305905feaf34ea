"""Exports of a research: the report with its sources (Markdown), or the whole tree (JSON)
for archiving: its runs, state timeline, messages, usage ledger, transcript and citations.

JSON shapes are those of the REST API where it has one (runs, states, messages, events);
the others are plain model fields. Times are ISO 8601, money a decimal string.
"""

import json
from collections import defaultdict
from pathlib import Path
from urllib.parse import unquote

from django.core.management.base import CommandError
from django.utils import timezone
from rest_framework import serializers

from frontend.clarify_export import markdown_section
from frontend.passages import cited_names, kb_titles
from frontend.rendering import (
    KB_LINK,
    PassageLink,
    link_text,
    render_report_page,
    titled_passages,
)
from frontend.templatetags.canopy import usd
from frontend.terminal.render import one_line
from research import selectors
from research.models import Run
from research.serializers import (
    EventSerializer,
    ExportCitationSerializer,
    ExportRunSerializer,
    LLMCallSerializer,
    MessageSerializer,
    RunStateSerializer,
    StepSerializer,
)

EXPORT_FORMAT = "canopy-research-export/1"


def export_json(run: Run, *, events: bool = False) -> str:
    tree = selectors.subtree_runs(run=run)
    document = {
        "format": EXPORT_FORMAT,
        "exported_at": serializers.DateTimeField().to_representation(timezone.now()),
        "run_id": run.pk,
        "runs": ExportRunSerializer(tree, many=True).data,
        "states": RunStateSerializer(selectors.subtree_states(run=run), many=True).data,
        "messages": MessageSerializer(_messages(run, tree), many=True).data,
        "usage": LLMCallSerializer(selectors.subtree_llm_calls(run=run), many=True).data,
        "steps": StepSerializer(selectors.subtree_steps(run=run), many=True).data,
        "citations": ExportCitationSerializer(selectors.subtree_citations(run=run), many=True).data,
        # The lead's plan with each item's status and history, and the claims its verifier
        # could not support (issue 14).
        "plan": selectors.plan_view(root=run) if run.is_root else None,
        "flagged_claims": run.flagged_claims,
    }
    if events:
        scoped = selectors.tree_events(root_id=run.root_id)
        ids = {member.pk for member in tree}
        document["events"] = [
            data
            for data in EventSerializer(scoped, many=True).data
            if data["payload"].get("run") in ids
        ]
    return json.dumps(document, indent=2, ensure_ascii=False)


def _messages(run: Run, tree: list[Run]) -> list:
    """Every message sent or received by an agent of the subtree, in order."""
    if run.parent_id is None:
        return list(selectors.run_messages(run=run))
    found = {
        message.pk: message for member in tree for message in selectors.run_messages(run=member)
    }
    return [found[pk] for pk in sorted(found)]


def export_markdown(run: Run, *, passage_link: PassageLink | None = None) -> str:
    """The report as written, its passages named as the run page names them, its sources as
    checked, and a line saying what produced it. With `passage_link` (kb:// address and
    quote -> a URL), every kb:// link, in the report and in its sources, opens the page that
    shows its passage; without it (the CLI, which knows no site's address) a link keeps its
    kb:// address, which only Canopy reads."""
    citations = selectors.subtree_citations(run=run, subtree=False)
    titles = export_titles(run, citations)
    targets = None if passage_link is None else PassageTargets(run.report, titles, passage_link)
    report = titled_passages(run.report, titles, target=targets).strip()
    parts = []
    if not report.lstrip().startswith("#"):
        parts.append(f"# {one_line(run.topic)[:200]}")
    parts.append(report)
    if clarified := markdown_section(run):
        parts.append(clarified)
    if citations:
        sources = [
            f"{number}. [{link_text(name)}]({source_href(citation.url, passage_link)}): "
            f"{provenance(citation)}"
            for number, (citation, name) in enumerate(
                zip(citations, cited_names(citations, titles), strict=True), start=1
            )
        ]
        parts.append("## Sources checked\n\n" + "\n".join(sources))
    parts.append(f"---\n*{colophon(run)}*")
    return "\n\n".join(parts) + "\n"


class PassageTargets:
    """Where a report's kb:// links open, asked in the order the report writes them: each
    its passage's page, with the words the run page highlights there (the line or the
    blockquote it closes, as render_report_page finds them)."""

    def __init__(self, report: str, titles: dict[str, str], passage_link: PassageLink) -> None:
        self.passage_link = passage_link
        self.quotes: dict[str, list[str]] = defaultdict(list)

        def heard(url: str, quote: str) -> str:
            self.quotes[url].append(quote)
            return url

        # Quotes are read from the report as the PDF and Word exports render it, titled.
        render_report_page(
            titled_passages(report, titles), passage_link=heard, written_links_only=True
        )

    def __call__(self, url: str, *, quoted: bool = True) -> str | None:
        """`quoted`: a link the report wrote, whose quote is the next of its address's."""
        url = unquote(url)
        quotes = self.quotes.get(url) if quoted else None
        return self.passage_link(url, quotes.pop(0) if quotes else "")


def source_href(url: str, passage_link: PassageLink | None) -> str:
    """The address a list of sources gives: a passage's page, or the URL as cited."""
    return (passage_link and passage_link(url, "")) or url


def colophon(run: Run) -> str:
    """The line that closes an export: which research, its model, agents, cost and end."""
    finished = run.finished_at.strftime("%Y-%m-%d %H:%M UTC") if run.finished_at else run.status
    agents = len(selectors.subtree_runs(run=run))
    followup = f", a follow-up of research {run.follows_id}" if run.follows_id else ""
    return (
        f"Canopy research {run.pk}{followup}, model {run.model}, "
        f"{agents} agent{'' if agents == 1 else 's'}, cost {usd(run.tree_cost_usd)}, {finished}."
    )


def export_titles(run: Run, citations) -> dict[str, str]:
    """kb:// address -> its document's title, as the run page reads it, for the passages the
    report links and cites (its owner's documents only)."""
    urls = [citation.url for citation in citations]
    urls += [link["url"] for link in KB_LINK.finditer(run.report or "")]
    return kb_titles(owner_id=run.owner_id, urls=urls)


def provenance(citation) -> str:
    """Who saw a cited source, in the run page's words (templates/report_sources.html)."""
    if not citation.verified:
        return "not seen by any agent of this research"
    if getattr(citation, "carried", False):
        return "verified, seen by the research this one follows up"
    if not citation.found_by:
        return "verified, seen by the root agent"
    return f"verified, seen by sub-agent {citation.found_by}"


def output_path(output: str, export_format: str) -> Path:
    """Where `research export -o` writes, refused before the export is made when it cannot
    be: a directory, or a file in a directory that does not exist."""
    path = Path(output)
    if path.is_dir():
        example = path / f"research.{export_format}"
        raise CommandError(f"cannot write {output}: it is a directory (give a file: -o {example}).")
    if not path.parent.exists():
        raise CommandError(f"cannot write {output}: the directory {path.parent} does not exist.")
    return path


def write_output(path: Path, content: bytes) -> None:
    try:
        path.write_bytes(content)
    except OSError as error:  # no permission, a file where a directory should be, disk full
        raise CommandError(f"cannot write {path}: {error.strerror or error}.") from None
