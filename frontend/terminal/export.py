"""Exports of a research: the report with its sources (Markdown), or the whole tree (JSON)
for archiving: its runs, state timeline, messages, usage ledger, transcript and citations.

JSON shapes are those of the REST API where it has one (runs, states, messages, events);
the others are plain model fields. Times are ISO 8601, money a decimal string.
"""

import json

from django.utils import timezone
from rest_framework import serializers

from frontend.clarify_export import markdown_section
from frontend.terminal.render import money, one_line
from research import selectors
from research.fulltext import source_names
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


def export_markdown(run: Run, *, passage_link=None) -> str:
    """The report as written, its sources as checked, and a line saying what produced it.
    With `passage_link` (kb:// address -> a URL), a knowledge-base source also names the page
    that shows its passage."""
    parts = []
    if not run.report.lstrip().startswith("#"):
        parts.append(f"# {one_line(run.topic)[:200]}")
    parts.append(run.report.strip())
    if clarified := markdown_section(run):
        parts.append(clarified)
    citations = selectors.subtree_citations(run=run, subtree=False)
    if citations:
        sources = [
            f"{number}. [{name}]({citation.url}): "
            f"{_provenance(citation)}{_passage(citation.url, passage_link)}"
            for number, (citation, name) in enumerate(
                zip(citations, cited_names(citations), strict=True), start=1
            )
        ]
        parts.append("## Sources checked\n\n" + "\n".join(sources))
    finished = run.finished_at.strftime("%Y-%m-%d %H:%M UTC") if run.finished_at else run.status
    agents = len(selectors.subtree_runs(run=run))
    followup = f", a follow-up of research {run.follows_id}" if run.follows_id else ""
    parts.append(
        f"---\n*Canopy research {run.pk}{followup}, model {run.model}, {agents} agents, "
        f"cost {money(run.tree_cost_usd)}, {finished}.*"
    )
    return "\n\n".join(parts) + "\n"


def cited_names(citations) -> list[str]:
    """What an export's list of sources calls each citation: its link text (else its
    address), with the passage's number where two passages of one document share it."""
    return source_names(
        [(citation.url, one_line(citation.title) or citation.url) for citation in citations]
    )


def _passage(url: str, passage_link) -> str:
    target = passage_link(url) if passage_link is not None else None
    return f" ([the passage]({target}))" if target else ""


def _provenance(citation) -> str:
    if not citation.verified:
        return "not seen by any agent of this research"
    if getattr(citation, "carried", False):
        return "verified, seen by the research this one follows up"
    if not citation.found_by:
        return "verified, seen by the research agent"
    return f"verified, seen by sub-agent {citation.found_by}"
