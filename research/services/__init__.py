"""The one writer of runs, states, messages, usage and events (STYLE: services)."""

from research.services.errors import (
    InvalidInput,
    LimitReached,
    NotFound,
    ResearchError,
    TooManyRuns,
)
from research.services.events import publish
from research.services.messages import message_record, messages_mark_read
from research.services.runs import (
    CANCELLED_BY_USER,
    INTERRUPTED,
    on_root_queued,
    run_cancel,
    run_claim,
    run_delete,
    run_finish,
    run_set_state,
    run_start,
    runs_fail,
    subagent_create,
)
from research.services.usage import step_record, usage_add

__all__ = [
    "CANCELLED_BY_USER",
    "INTERRUPTED",
    "InvalidInput",
    "LimitReached",
    "NotFound",
    "ResearchError",
    "TooManyRuns",
    "message_record",
    "messages_mark_read",
    "on_root_queued",
    "publish",
    "run_cancel",
    "run_claim",
    "run_delete",
    "run_finish",
    "run_set_state",
    "run_start",
    "runs_fail",
    "step_record",
    "subagent_create",
    "usage_add",
]

from research.services.workers import (  # noqa: E402
    WORKER_LOST,
    root_claim,
    root_claim_next,
    worker_heartbeat,
    worker_register,
    worker_stop,
    workers_sweep,
)

__all__ += [
    "WORKER_LOST",
    "root_claim",
    "root_claim_next",
    "worker_heartbeat",
    "worker_register",
    "worker_stop",
    "workers_sweep",
]

from research.services.subagents import subagent_spawn  # noqa: E402

__all__ += ["subagent_spawn"]
