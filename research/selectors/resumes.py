"""Reads of a research's resumes (research.services.resume)."""

from research.models import Resume


def resumed_run_ids(*, root_id: int) -> list[int]:
    """Every run of the tree that some resume made go on, in order, each once (the page
    marks them)."""
    seen: dict[int, None] = {}
    for run_ids in Resume.objects.filter(root_id=root_id).values_list("run_ids", flat=True):
        seen.update(dict.fromkeys(run_ids))
    return list(seen)
