"""The one read layer: every read the API, the admin, the pages, the terminal and the agents
share, with its joins applied. Writes are in `research.services`."""

from research.selectors.citations import citations_for, report_of, subtree_citations
from research.selectors.events import REPLAY_LIMIT, events_after, tree_events
from research.selectors.knowledge import (
    dataset_get,
    dataset_list,
    document_get,
    document_list,
    remembered_facts,
)
from research.selectors.plans import plan_items, plan_view
from research.selectors.remote import remote_server_get, remote_servers_for
from research.selectors.resumes import resumed_run_ids
from research.selectors.runs import (
    RunFacts,
    roots_for,
    run_facts,
    run_get,
    run_list,
    run_messages,
    run_states,
    run_subtree,
    run_summaries,
    runs_for,
    runs_newer_than,
    runs_older_than,
)
from research.selectors.trees import (
    TRANSCRIPT_LIMIT,
    AgentPanel,
    agent_panel,
    subtree_active,
    subtree_llm_calls,
    subtree_runs,
    subtree_states,
    subtree_steps,
    subtree_usage_by_model,
    tree_runs,
    tree_snapshot,
)
from research.selectors.workers import agent_process_alive

__all__ = [
    "resumed_run_ids",
    "plan_items",
    "plan_view",
    "REPLAY_LIMIT",
    "TRANSCRIPT_LIMIT",
    "AgentPanel",
    "RunFacts",
    "agent_panel",
    "agent_process_alive",
    "citations_for",
    "dataset_get",
    "dataset_list",
    "document_get",
    "document_list",
    "events_after",
    "remembered_facts",
    "remote_server_get",
    "remote_servers_for",
    "roots_for",
    "run_get",
    "run_facts",
    "run_list",
    "run_summaries",
    "run_messages",
    "run_states",
    "run_subtree",
    "runs_for",
    "runs_newer_than",
    "runs_older_than",
    "subtree_active",
    "report_of",
    "subtree_citations",
    "subtree_llm_calls",
    "subtree_runs",
    "subtree_states",
    "subtree_steps",
    "subtree_usage_by_model",
    "tree_events",
    "tree_runs",
    "tree_snapshot",
]
