"""A sub-agent's launch record, defined once: what a parent asked for, checked by the spawn
(research.services.subagents) and recorded as it is (research.services.runs)."""

from dataclasses import dataclass


@dataclass(frozen=True)
class Launch:
    """One sub-agent to record: what its parent asked for, resolved by the agent runtime
    (kind, tier, model and tools come from agents.kinds, never from the parent's words)."""

    name: str
    reason: str
    task: str
    max_steps: int | None = None
    kind: str = ""
    tier: str = ""
    model: str | None = None
    tools: list[str] | None = None
    plan_item: str = ""
