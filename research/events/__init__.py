"""Events of a tree: typed payloads (`payloads`), stored and numbered (`store`), pushed to
browsers after commit (`transport`)."""

from research.events.payloads import (
    EVENT_TYPES,
    Payload,
    RunClarify,
    RunCreated,
    RunFinished,
    RunMessage,
    RunPlan,
    RunReport,
    RunStateChanged,
    RunUsage,
)
from research.events.store import publish, root_id_of, tree_lock
from research.events.transport import flush, group_name

__all__ = [
    "EVENT_TYPES",
    "Payload",
    "RunClarify",
    "RunCreated",
    "RunFinished",
    "RunMessage",
    "RunPlan",
    "RunReport",
    "RunStateChanged",
    "RunUsage",
    "flush",
    "group_name",
    "publish",
    "root_id_of",
    "tree_lock",
]
