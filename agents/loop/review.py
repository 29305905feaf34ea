"""The lead's review before its report (seed 001): a verifier checks the draft against the
sources it cites, the lead revises once, and the report ends with what was not covered.
Review gives verdicts and sections; the agent (agents.loop.agent) acts on them.

Also where a root resumed after the analyst's plan review is told which plan to carry out.
The verifier is a sub-agent of kind `verifier` that the runtime starts, not the model: its
task is the draft and, for each cited URL, what the tree stored of it (the page text, the
knowledge-base passage, the search snippet) or that no agent read it.
"""

import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from django.conf import settings

from agents import kinds
from agents.messages import get_messenger
from agents.runtime import resilience, tree
from agents.runtime.context import AgentContext
from agents.runtime.tree import yielded
from research import services
from research.clean import cut
from research.models import Plan, Run, Source, State, Status
from research.selectors import plans as plan_reads
from research.services import NextState
from research.services.citations import CitedUrl
from research.services.writer import Pending

log = logging.getLogger(__name__)

VERIFIER_NAME = "verifier"
VERIFIER_REASON = "checks the lead's draft against the sources it cites before it is final"
EXCERPT_CHARS = 600
# The verifier's task is its run's topic, shown on the page and carried by run.created: a
# draft and its sources within these bounds keep that event far under a websocket frame's
# limit, whatever the characters (issue 16).
DRAFT_MAX_CHARS = 30_000
SOURCES_MAX = 60
COVERAGE_HEADING = "## Coverage and gaps"
REVISE_NOTE = (
    "A verifier read your draft and the sources it cites. Its findings:\n\n{findings}\n\n"
    "Revise your report once: fix or remove each unsupported claim (or say plainly that it "
    "is unverified) and cover the gaps you can from what you found. Write the whole final "
    "report now, in Markdown, with its Sources section. No more tool calls."
)


@dataclass
class Verdict:
    """What the verifier found: claims it could not support, gaps, or why it could not run."""

    claims: list[dict[str, str]] = field(default_factory=list)
    gaps: list[str] = field(default_factory=list)
    report: str = ""
    error: str = ""
    # How many cited sources the verifier was given to check (0: the draft cited none).
    checked: int = 0
    # The lead's report as revised after the findings ("" when it was not).
    revised: str = ""


def resumed_plan_message(ctx: AgentContext, run: Run) -> str | None:
    """For a root that paused for its plan review and was approved: the plan to carry out."""
    if not (ctx.is_root and run.review_plan and run.steps):
        return None
    plan = services.current_plan(root_id=run.pk)
    if plan is None or plan.approved_at is None:
        return None
    edited = " as the analyst edited it" if plan.author == Plan.Author.ANALYST else ""
    items = "\n".join(f"{number}. {item}" for number, item in enumerate(plan.items, start=1))
    return (
        f"The analyst approved your plan{edited} (version {plan.version}):\n{items}\n\n"
        "Carry it out now: start the sub-agents it needs, each naming the plan_item it "
        "covers, research your own part, then write your report."
    )


def verifying(ctx: AgentContext) -> bool:
    """Whether the root's draft goes to a verifier (RESEARCH_VERIFY_REPORTS, in a pool)."""
    return settings.RESEARCH_VERIFY_REPORTS and ctx.pool is not None


def spawn_with_draft(ctx: AgentContext) -> bool:
    """Whether the verifier's spawn goes in the writer's batch of the draft's own records
    (one commit for both, not one after the other): when it is verified and no cost cap asks
    for the draft's cost first. What the review reads before the spawn (the sources the
    draft cites, the children it ends) no record of the draft's round stores; the coverage,
    after the verifier, reads the lead's steps once they are committed."""
    return verifying(ctx) and not settings.RESEARCH_TREE_COST_CAP_USD


def coverage(ctx: AgentContext, verdict: Verdict | None) -> str:
    """The report's Coverage and gaps section, from the plan as it ends and the verdict (whose
    flagged claims the page marks); "" when there was neither."""

    def plan_as_it_ends() -> list[dict] | None:
        return plan_reads.plan_items_at_end(root_id=ctx.run_id)

    # Through a fresh connection if need be: the reads follow the revision's model call, and
    # a restart may end the connection between them as well (the write sets a value: again
    # is the same).
    items = resilience.retrying("reading the plan", plan_as_it_ends)
    # A first life's root has none to clear: nothing to write when the verifier flagged none.
    if verdict is not None and (verdict.claims or not ctx.fresh):
        resilience.retrying(
            "flagging the report's claims",
            lambda: services.report_flags_set(run_id=ctx.run_id, claims=verdict.claims),
        )
    return coverage_section(items, verdict)


def with_section(draft: str, section: str) -> str:
    """The report: the draft and its section, the section its last word under the cap."""
    if not section:
        return draft
    limit = settings.RESEARCH_REPORT_MAX_CHARS - len(section) - 2
    draft = cut(draft.rstrip(), limit, what="report", setting="RESEARCH_REPORT_MAX_CHARS")
    return f"{draft}\n\n{section}"


def out_of_time(ctx: AgentContext) -> bool:
    deadline = ctx.cancel.deadline
    return deadline is not None and time.monotonic() >= deadline


def verify(
    ctx: AgentContext, draft: str, *, hand_over_draft: Callable[[], Pending | None]
) -> Verdict:
    """Start the verifier on the draft and wait for it (the root's slot given back).
    `hand_over_draft` hands the draft's record to the writer if it was held back
    (agents.loop.records), right before the spawn goes behind it (spawn_with_draft), which
    is then not written when the draft's record failed."""
    cap = settings.RESEARCH_TREE_COST_CAP_USD
    if cap and resilience.retrying("reading the tree's cost", lambda: tree.tree_cost(ctx)) >= cap:
        return Verdict(error=f"the research reached its cost cap of ${cap} before verification")
    catalog = kinds.catalog()
    kind = catalog.kinds.get(VERIFIER_NAME)
    if kind is None:
        return Verdict(error="no verifier kind is defined")
    tier, model = catalog.model_for(kind=kind, tier=None, parent_model=ctx.model)
    # Read once: every agent of the tree has ended, so what it stored no longer changes.
    cited = services.cited_sources(root_id=ctx.root_id, report=draft)
    # At most half of the lead's time left: the other half is for its revision.
    deadline, reason = tree.child_deadline(ctx, share=0.5)
    ctx.spawning()
    with tree.seats(ctx, 1, deadline) as seat:  # seated, it is claimed with its spawn
        drafted = hand_over_draft()
        child = services.verifier_spawn(
            parent_id=ctx.run_id,
            name=VERIFIER_NAME,
            reason=VERIFIER_REASON,
            task=verifier_task(draft, cited),
            kind=kind.name,
            tier=tier,
            model=model,
            tools=kind.tools_for(ctx.research_tools),
            max_steps=kind.clip_steps(None),
            seated=seat.count == 1,
            worker_id=ctx.pool.worker_id,
            # The lead waits for it from its spawn on: its state goes in the same commit.
            parent_state=NextState(State.WAITING, "verifier checks the draft"),
            root_id=ctx.root_id if spawn_with_draft(ctx) else None,
            after=() if drafted is None else (drafted,),
        )
        seat.used = int(tree.is_seated(child))
    ctx.spawned_known([child.pk])
    ctx.collected.add(child.pk)  # its findings come in the revision round, not as a report
    # Redis down costs the verifier its inbox (it sends no message), not the verification.
    resilience.cleanup(
        f"opening the inbox of run {child.pk}", lambda: get_messenger().open(child.pk)
    )
    ctx.pool.submit(
        child.pk,
        parent_id=ctx.run_id,
        deadline=deadline,
        deadline_reason=reason,
        seated=child if tree.is_seated(child) else None,
    )
    with yielded(ctx):
        # Its row is read once it no longer runs here (tree.working_among).
        while (found := tree.working_among(ctx, [child.pk]))[0]:
            # A note does not end this wait: the lead reads it with the findings.
            tree.wait_for_change(ctx, run_ids=[child.pk], notes=False)
    (child,) = found[1]
    if child.status != Status.DONE:
        return Verdict(error=child.error or "the verifier did not finish")
    verdict = parse_verdict(child.report)
    verdict.checked = len(cited)
    return verdict


def verifier_task(draft: str, cited: list[tuple[CitedUrl, Source | None]]) -> str:
    """The verifier's task: the draft, and what the tree stored of each source it cites
    (services.cited_sources)."""
    lines = [
        "Check this draft report against the sources it cites: list every claim they do not "
        "support and every gap.",
        "",
        "# Draft",
        "",
        cut(draft.strip(), DRAFT_MAX_CHARS, what="draft"),
        "",
        "# Sources it cites, as the agents of this research stored them",
        "",
    ]
    if not cited:
        lines.append("(the draft cites no source)")
    for url, source in cited[:SOURCES_MAX]:
        if source is None:
            lines.append(f"- {url.url}: NO AGENT OF THIS RESEARCH READ IT")
            continue
        who = f'sub-agent "{source.run.name}"' if source.run.name else "the lead"
        text = " ".join((source.text or source.snippet or "").split())[:EXCERPT_CHARS]
        lines.append(f'- {url.url}: {source.kind} seen by {who}: "{text}"')
    return "\n".join(lines)


_HEADING = re.compile(r"(#+)[ \t]*(.*)")
_BULLET = re.compile(r"^[ \t]*(?:[-*+]|\d+[.)])[ \t]+(?P<text>.+)$", re.M)
_QUOTED = re.compile(r'^["“”«](?P<claim>[^"“”»]+)["“”»]\s*[:—–-]?\s*(?P<why>.*)$')
NONE = re.compile(r"^\(?none\b", re.I)


def _sections(report: str) -> dict[str, str]:
    """{lower-case title: body} of each "## Title" section; a section ends at the next heading
    of one to six "#". Read line by line, in time linear in the report: a pattern over the
    whole text spent minutes on a model's answer of 80,000 "#"."""
    sections: dict[str, str] = {}
    title: str | None = None
    body: list[str] = []
    for line in report.split("\n"):
        hashes, rest = _HEADING.match(line).groups() if line.startswith("#") else ("", "")
        ends = 1 <= len(hashes) <= 6 and (len(line) == len(hashes) or line[len(hashes)].isspace())
        if title is not None and ends:
            sections[title] = "\n".join(body).strip()
            title = None
        if title is None and len(hashes) >= 2 and rest.strip():
            title, body = rest.strip().lower(), []
        elif title is not None:
            body.append(line)
    if title is not None:
        sections[title] = "\n".join(body).strip()
    return sections


def parse_verdict(report: str) -> Verdict:
    """The verifier's two sections (prompts/agents/verifier.md): its unsupported claims and
    its gaps. A claim is a bullet, quoted or not; "None." says there is none. A report
    without an "Unsupported claims" section, or one that says nothing there, is no verdict."""
    verdict = Verdict(report=report.strip())
    sections = _sections(report)
    claims_body = next(
        (body for title, body in sections.items() if title.startswith("unsupported")), None
    )
    if claims_body is None:
        verdict.error = "the verifier's report has no 'Unsupported claims' section"
        return verdict
    bullets = [bullet.group("text").strip() for bullet in _BULLET.finditer(claims_body)]
    if not bullets and not NONE.match(claims_body):
        verdict.error = (
            "the verifier's 'Unsupported claims' section lists nothing and says not 'None.'"
        )
        return verdict
    for text in bullets:
        if NONE.match(text):
            continue
        quoted = _QUOTED.match(text)
        if quoted:
            claim, why = quoted.group("claim"), quoted.group("why")
        else:
            claim, _, why = text.partition(": ")
        verdict.claims.append({"claim": claim.strip(), "why": why.strip()})
    gaps_body = next((body for title, body in sections.items() if title.startswith("gap")), "")
    verdict.gaps = [
        bullet.group("text").strip()
        for bullet in _BULLET.finditer(gaps_body)
        if not NONE.match(bullet.group("text").strip())
    ]
    return verdict


def coverage_section(items: list[dict] | None, verdict: Verdict | None) -> str:
    """The report's last section: plan items not covered, unsupported claims, gaps."""
    if items is None and verdict is None:
        return ""
    lines = [COVERAGE_HEADING, ""]
    if items is not None:
        uncovered = [item for item in items if item["status"] != plan_reads.COVERED]
        if uncovered:
            lines.append("Plan items not covered:")
            # "Item 3:", not "3.": Markdown reads "- 3. x" as a list in a list, "1. 1. x".
            lines += [
                f"- Item {item['number']}: {item['text']} ({item['status']})" for item in uncovered
            ]
        else:
            lines.append(f"Every item of the plan ({len(items)}) was covered.")
        lines.append("")
    if verdict is not None:
        if verdict.error:
            lines.append(f"The report could not be verified: {verdict.error}.")
        elif verdict.claims:
            lines.append("Claims the verifier could not support:")
            lines += [
                f'- "{claim["claim"]}"' + (f": {claim['why']}" if claim["why"] else "")
                for claim in verdict.claims
            ]
        elif verdict.checked:
            sources = "source" if verdict.checked == 1 else f"{verdict.checked} sources"
            lines.append(
                f"The verifier checked the claims against the {sources} the report cites "
                "and found none unsupported."
            )
        else:
            lines.append("The verifier had nothing to check: the report cites no source.")
        if verdict.gaps:
            lines += ["", "Gaps the verifier noted:"] + [f"- {gap}" for gap in verdict.gaps]
    return "\n".join(lines).rstrip()
