"""The one writer of runs, states, messages, usage, sources and events (STYLE: services).

Callers import from here; each name lives in the module of its entity.
"""

from research.services.citations import citations_record
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
from research.services.sources import source_record, sources_record_search
from research.services.subagents import subagent_spawn
from research.services.usage import step_record, usage_add
from research.services.workers import (
    WORKER_LOST,
    root_claim,
    root_claim_next,
    worker_heartbeat,
    worker_register,
    worker_stop,
    workers_sweep,
)

__all__ = [
    "CANCELLED_BY_USER",
    "INTERRUPTED",
    "WORKER_LOST",
    "InvalidInput",
    "LimitReached",
    "NotFound",
    "ResearchError",
    "TooManyRuns",
    "citations_record",
    "message_record",
    "messages_mark_read",
    "on_root_queued",
    "publish",
    "root_claim",
    "root_claim_next",
    "run_cancel",
    "run_claim",
    "run_delete",
    "run_finish",
    "run_set_state",
    "run_start",
    "runs_fail",
    "source_record",
    "sources_record_search",
    "step_record",
    "subagent_create",
    "subagent_spawn",
    "usage_add",
    "worker_heartbeat",
    "worker_register",
    "worker_stop",
    "workers_sweep",
]
