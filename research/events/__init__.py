"""Events of a tree: typed payloads (`payloads`), stored and numbered (`store`), handed after
commit to the delivery the consumer side installed (`delivery`; frontend/delivery.py)."""

from research.events.delivery import flush
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
    "publish",
    "root_id_of",
    "tree_lock",
]
