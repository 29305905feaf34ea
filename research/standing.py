"""How a run stands, in the words every surface says it with: a research that waits for the
analyst says what it waits for, a working one its status, an ended one how it ended
(research/endings.py). The badge on the page, the list and the CLI (`label`), and the
refusals of the services that need a run to stand otherwise (`said`): "research 4 is not
waiting for a plan review: it needs your answers", never "(it is paused)" or "(failed)"
for a research the page shows as cancelled."""

from research import endings
from research.models import ACTIVE_STATUSES, Run, State, Status

# What a research paused for the analyst waits for: its lead's questions answered, else its
# plan reviewed (the only other pause).
NEEDS_ANSWERS = "needs your answers"
NEEDS_REVIEW = "needs your review"


def label(run: Run) -> str:
    """The badge: "needs your answers", "working", "out of time"."""
    if run.status == Status.PAUSED:
        return NEEDS_ANSWERS if run.state == State.CLARIFYING else NEEDS_REVIEW
    if run.status in ACTIVE_STATUSES:
        return run.status
    return endings.WORDS[endings.ending_of(status=run.status, error=run.error)]


def said(run: Run) -> str:
    """How it stands after "it": "is working", "needs your review", "has ended (cancelled
    by the user)", "has ended (failed: llm: ...)". An ended run gives its reason, which
    begins with the word of its ending, or follows it."""
    if run.status == Status.PAUSED:
        return label(run)
    if run.status in ACTIVE_STATUSES:
        return f"is {run.status}"
    word, error = label(run), run.error
    if not error:
        return f"has ended ({word})"
    return f"has ended ({error if error.startswith(word) else f'{word}: {error}'})"
