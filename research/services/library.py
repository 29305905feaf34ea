"""What an analyst does to a research in the library besides deleting it (runs.run_delete)
or running it again (runs.run_rerun): star it."""

from research.errors import InvalidInput
from research.models import Run


def run_star(*, run: Run, starred: bool) -> Run:
    """Star a research (a root) or take its star off; returns it as stored."""
    if not run.is_root:
        raise InvalidInput(
            f"run {run.pk} is a sub-agent: star its research (run {run.root_id}) instead.",
            field="starred",
        )
    Run.objects.filter(pk=run.pk).update(starred=starred)
    run.starred = starred
    return run
