"""The one writer of runs, states, messages, usage, sources and events (STYLE: services).

Callers import from here; each name lives in the module of its entity. Domain errors are in
`research.errors`, events in `research.events`, reads in `research.selectors`.
"""

from research.services.announce import roots_queued, runs_flagged
from research.services.citations import citations_checked, citations_record, cited_sources
from research.services.clarify import clarify_answer, clarify_ask
from research.services.datasets import (
    dataset_create,
    dataset_delete,
    document_add,
    document_delete,
    fact_remember,
    file_size_check,
)
from research.services.finish import run_as_ended, run_end_record, run_finish
from research.services.launch import Launch
from research.services.library import run_star
from research.services.messages import (
    message_publish,
    message_record,
    message_store,
    message_withdraw,
    messages_mark_read,
)
from research.services.plans import (
    current_plan,
    note_send,
    notes_take,
    plan_approve,
    plan_needs_review,
    plan_pause,
    plan_write,
)
from research.services.remote import remote_catalog_store
from research.services.resume import research_resume, resumable_runs, spend_by_attempt
from research.services.runs import (
    CANCELLED_BY_USER,
    INTERRUPTED,
    report_flags_set,
    run_cancel,
    run_cancel_asked,
    run_claim,
    run_delete,
    run_set_state,
    runs_fail,
    subagent_create,
)
from research.services.seats import root_seats
from research.services.sources import source_record, sources_record_search
from research.services.start import run_start
from research.services.steps import (
    NextState,
    model_call_record,
    state_record,
    step_record,
    tool_call_record,
    usage_add,
)
from research.services.subagents import (
    SpawnCall,
    subagent_spawn,
    subagents_spawn,
    subagents_spawn_each,
    verifier_spawn,
)
from research.services.workers import (
    WORKER_LOST,
    root_claim,
    root_claim_next,
    roots_ended,
    worker_heartbeat,
    worker_register,
    worker_stop,
    workers_sweep,
)
from research.services.writer import step_writer

__all__ = [
    "clarify_answer",
    "clarify_ask",
    "current_plan",
    "note_send",
    "notes_take",
    "plan_approve",
    "plan_needs_review",
    "plan_pause",
    "plan_write",
    "CANCELLED_BY_USER",
    "NextState",
    "INTERRUPTED",
    "WORKER_LOST",
    "citations_checked",
    "citations_record",
    "cited_sources",
    "dataset_create",
    "dataset_delete",
    "document_add",
    "document_delete",
    "fact_remember",
    "file_size_check",
    "message_publish",
    "model_call_record",
    "message_record",
    "message_store",
    "message_withdraw",
    "messages_mark_read",
    "roots_queued",
    "root_seats",
    "runs_flagged",
    "remote_catalog_store",
    "research_resume",
    "resumable_runs",
    "spend_by_attempt",
    "root_claim",
    "roots_ended",
    "root_claim_next",
    "run_cancel",
    "run_cancel_asked",
    "run_claim",
    "run_delete",
    "run_star",
    "run_as_ended",
    "run_end_record",
    "run_finish",
    "run_set_state",
    "run_start",
    "runs_fail",
    "source_record",
    "sources_record_search",
    "state_record",
    "step_record",
    "step_writer",
    "subagent_create",
    "subagent_spawn",
    "subagents_spawn",
    "subagents_spawn_each",
    "SpawnCall",
    "verifier_spawn",
    "report_flags_set",
    "Launch",
    "tool_call_record",
    "usage_add",
    "worker_heartbeat",
    "worker_register",
    "worker_stop",
    "workers_sweep",
]
