"""The demo model's verifier (agents.llm.demo): what a checked draft report is missing,
found deterministically in the task agents.loop.review writes for a verifier."""

import re

from research.markdown import MARKUP  # the marks research.markdown.literal escapes

# A quoted passage's source in a demo draft: "— [title](address)".
CITED = re.compile(r"— \[((?:\\.|[^\]\\])+)\]\(((?:kb|https?)://[^)\s]+)\)")  # "\]" in a title


def verify_draft(task: str) -> str:
    """The verifier's role, deterministically: a claim whose cited source no agent of the
    research read is unsupported (agents.loop.review writes that into the verifier's task)."""
    draft, _, sources = task.partition("# Sources it cites")
    unread = re.findall(r"^- (\S+): NO AGENT OF THIS RESEARCH READ IT$", sources, re.M)
    claims = []
    for url in unread:
        for line in draft.splitlines():
            if url in line:
                claim = re.sub(r"\s*[—(]?\s*\[[^\]]*\]\([^)]*\)\)?", "", line)
                claim = claim.strip(' >-*"').strip()
                # As the report reads: its Markdown escapes (research.markdown.literal) gone.
                claim = re.sub(r"\\(" + MARKUP.pattern + ")", r"\1", claim)
                if claim:
                    claims.append(f'- "{claim[:200]}": it cites {url}, which no agent read.')
                break
    # A sub-agent whose part of the draft quotes no source found nothing for it: a gap.
    gaps = [
        f"- {name} found no source for its part."
        for name, body in SUBAGENT_PART.findall(draft)
        if not CITED.search(body)
    ]
    return "\n".join(
        ["## Unsupported claims", *(claims or ["None."]), "", "## Gaps", *(gaps or ["None."])]
    )


# A sub-agent's part of a demo draft ("## From the sub-agents"): its name, then its findings.
SUBAGENT_PART = re.compile(r"^### ([\w-]+) \(\w+\)\n\n(.*?)(?=^#{2,3} |\Z)", re.S | re.M)
