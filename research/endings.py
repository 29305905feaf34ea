"""Why a run ended: every ending Canopy writes, in its words, and the kind each one is.

A run that ends failed keeps its reason in `Run.error`, in words an analyst reads ("cancelled
by the user", "interrupted: the worker running it stopped responding"). Those words are
written here and nowhere else, and each begins with the word of its kind, so the kind of any
stored reason (`ending_of`) is read the same way by the API, the page, the CLI and MCP: a
cancelled research reads *cancelled*, not as an error, while its stored status stays
"failed" as the API contract has it (DESIGN: status is queued, working, paused, done or
failed).
"""

from django.db import models


class Ending(models.TextChoices):
    """How a run ended; "" while it works."""

    DONE = "done"
    CANCELLED = "cancelled"  # the analyst, the agent that spawned it, or a deletion stopped it
    INTERRUPTED = "interrupted"  # the process or worker running it stopped
    OUT_OF_TIME = "out_of_time"  # a deadline passed
    FAILED = "failed"  # an error: the model's endpoint, a crash, a start that failed


# Each ending in the words every surface says it with (the page's badge, the CLI, a 409).
WORDS = {
    Ending.DONE: "done",
    Ending.CANCELLED: "cancelled",
    Ending.INTERRUPTED: "interrupted",
    Ending.OUT_OF_TIME: "out of time",
    Ending.FAILED: "failed",
}

# The endings of agents that were stopped (by the analyst, their parent, a stop, a deadline)
# rather than failed at their work: a plan item whose agents all ended so says how they
# ended, not "failed" (the page's plan, static/page/plan.js).
STOPPED = (Ending.CANCELLED, Ending.INTERRUPTED, Ending.OUT_OF_TIME)

# The first words of a reason, and the kind they make it; any other reason is a failure.
_OPENING_WORDS = (
    ("cancelled", Ending.CANCELLED),
    ("interrupted", Ending.INTERRUPTED),
    ("timed out", Ending.OUT_OF_TIME),
    ("out of time", Ending.OUT_OF_TIME),
)

# --- Cancelled ------------------------------------------------------------------------------
CANCELLED_BY_USER = "cancelled by the user"
DELETED = "cancelled: the run was deleted"
PARENT_ENDED = "cancelled: the agent that spawned it ended"
CANCELLED_BY_PARENT = "cancelled: the agent that spawned it cancelled it"
PAUSED_FOR_REVIEW = "cancelled: the research paused for the analyst to review its plan"
# A research run by a local pool (the CLI's `start --wait`, `manage.py mcp`) ends with it.
COMMAND_STOPPED = "cancelled: the command running its agents stopped"
MCP_SESSION_CLOSED = "cancelled: the MCP client that started it closed its session"

# --- Interrupted ----------------------------------------------------------------------------
SERVER_STOPPED = "interrupted: the server stopped while the agent worked"
WORKER_LOST = "interrupted: the worker running it stopped responding"

# --- Out of time ----------------------------------------------------------------------------
TIMED_OUT = "timed out"
NOT_STARTED_IN_TIME = (
    "out of time: its deadline passed while it waited for a slot, before it started"
)


def research_timed_out(cap: float) -> str:
    return f"timed out: the research ran longer than {cap:g} s"


def subagent_timed_out(cap: float) -> str:
    return f"timed out: the sub-agent worked longer than {cap:g} s"


def share_timed_out(share: float) -> str:
    return f"timed out: it used its share of the research's time left ({share:.0%})"


def research_time_ran_out(reserve: float) -> str:
    return f"timed out: the research's time ran out (its lead keeps {reserve:g} s to write)"


def parent_time_ran_out(reserve: float) -> str:
    return f"timed out: its parent's time ran out (it keeps {reserve:.3g} s to write)"


# --- Failed ---------------------------------------------------------------------------------
CRASHED = "internal error: the agent crashed"
ORPHANED = "internal error: the agent could not record its end (its database connection was lost)"


def internal_error(failure: BaseException) -> str:
    return f"internal error: {type(failure).__name__}: {failure}"


def could_not_start(error: object) -> str:
    return f"could not start: {error}"


def ending_of(*, status: str, error: str) -> str:
    """The kind of ending of a run of this status and stored reason; "" while it works."""
    if status == Ending.DONE:
        return Ending.DONE
    if status != "failed":
        return ""
    for words, kind in _OPENING_WORDS:
        if error.startswith(words):
            return kind
    return Ending.FAILED


# --- Resumable ------------------------------------------------------------------------------
# A research that ended by one of these can be resumed from its checkpoints (issue 26): none
# is the model's choice or the analyst's. An endpoint's failure reads "llm: ..." (the model
# client's words, agents.llm), after the client's own retries.
_RESUMABLE_OPENINGS = ("interrupted", "llm:")
_RESUMABLE_REASONS = (ORPHANED,)
# A sub-agent that ended only because the agent that spawned it ended goes on with it.
_RESUMABLE_WITH_PARENT = (PARENT_ENDED,)


def resumable(*, status: str, error: str) -> bool:
    """Whether a run that ended so can go on from its last completed step."""
    if status != "failed":
        return False
    return error.startswith(_RESUMABLE_OPENINGS) or error in _RESUMABLE_REASONS


def resumable_with_parent(*, status: str, error: str) -> bool:
    """Whether a sub-agent goes on when the agent that spawned it is resumed."""
    return resumable(status=status, error=error) or (
        status == "failed" and error in _RESUMABLE_WITH_PARENT
    )


def not_resumable_why(*, status: str, error: str) -> str:
    """Why a research that ended so cannot be resumed, in the words the 409 says."""
    if status == Ending.DONE:
        return "it ended done: its report is written, there is nothing to resume"
    if status != "failed":
        return f"it is still {status}: only a research that has ended can be resumed"
    kind = ending_of(status=status, error=error)
    if kind == Ending.CANCELLED:
        return f"it was cancelled ({error}): start a new research instead"
    return f"it ended by a choice or a limit, not an interruption ({error})"


RESUMED = "resumed from its last completed step"
