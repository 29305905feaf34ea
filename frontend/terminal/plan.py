"""`research plan`: a research's plan as lines, its items with their status and agents."""

from django.core.management.base import CommandError

from research import selectors
from research.models import Run


def plan_lines(run: Run) -> list[str]:
    """The plan's version and state, one tab-separated line per item, and how to approve it
    when it waits for the analyst."""
    if not run.is_root:
        raise CommandError(f"run {run.pk} is a sub-agent: its plan is its root's ({run.root_id}).")
    plan = selectors.plan_view(root=run)
    if plan["version"] is None:
        return [f"research {run.pk} has no plan yet."]
    if plan["approved"]:
        state = "approved"
    elif plan["awaiting_review"]:
        state = "waiting for your approval"
    else:
        state = "not reviewed"
    lines = [f"research {run.pk}: plan version {plan['version']} ({state})"]
    for item in plan["items"]:
        agents = ", ".join(agent["name"] for agent in item["agents"])
        lines.append(
            f"{item['number']}\t{item['status']}\t{item['text']}"
            + (f"\t{agents}" if agents else "")
        )
    if plan["awaiting_review"]:
        lines.append(f"approve it: manage.py research approve {run.pk} [--item TEXT ...]")
    return lines
