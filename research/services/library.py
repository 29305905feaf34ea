"""What an analyst does to a research in the library besides deleting it (runs.run_delete):
run it again with the same settings, star it."""

from django.contrib.auth.base_user import AbstractBaseUser

from research.errors import InvalidInput
from research.models import Run
from research.services.start import run_start


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


def run_rerun(*, owner: AbstractBaseUser, run: Run) -> Run:
    """A new research with the settings `run` started with: its topic, model, step budget,
    dataset (if it still exists) and review option. Started as any other, limits included."""
    if not run.is_root:
        raise InvalidInput(
            f"run {run.pk} is a sub-agent: run its research (run {run.root_id}) again instead."
        )
    return run_start(
        owner=owner,
        topic=run.topic,
        model=run.model,
        max_steps=run.max_steps,
        dataset_id=run.dataset_id,
        review_plan=run.review_plan,
        clarify=run.clarify,
        follows_id=run.follows_id,
    )
