"""The events of a tree: one typed payload per type, and the run and message shapes they carry.

Every event is an envelope `{"seq", "type", "run", "at"}` plus the fields of its payload class.
The services build payloads here, the websocket snapshot and the REST API reuse `run_fields`
and `message_fields`, and `schema(type)` gives the JSON Schema a test checks each event
against: one place says what an event looks like.
"""

import dataclasses
import types
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from functools import cache
from typing import Any, ClassVar, Union, get_args, get_origin, get_type_hints

from django.conf import settings

from research.endings import ending_of
from research.models import ACTIVE_STATUSES, Message, Run

_MONEY_PLACES = Decimal(1).scaleb(-Run._meta.get_field("cost_usd").decimal_places)


def iso(moment: datetime | None) -> str | None:
    """A time as the REST API writes it: ISO 8601, UTC as `Z`."""
    if moment is None:
        return None
    text = moment.isoformat()
    return text[:-6] + "Z" if text.endswith("+00:00") else text


def money(value: Decimal) -> str:
    """A cost as the REST API writes it: a string with the column's eight decimals."""
    return f"{Decimal(value).quantize(_MONEY_PLACES):f}"


RUN_FIELDS = (
    "id",
    "parent_id",
    "root_id",
    "depth",
    "name",
    "reason",
    "kind",
    "tier",
    "plan_item",
    "review_plan",
    "starred",
    "clarify",
    "clarification",
    "follows_id",
    "dataset_id",
    "topic",
    "model",
    "status",
    "active",
    "ending",
    "state",
    "max_steps",
    "steps",
    "input_tokens",
    "output_tokens",
    "cost_usd",
    "tree_cost_usd",
    "report",
    "error",
    "created_at",
    "started_at",
    "finished_at",
    "worked_seconds",
    "clock_running",
)


# Who a note comes from, where a message names its sender.
ANALYST = "analyst"


def listed_topic(run: Run) -> str:
    """The run's task as a tree shows it: whole up to the limit of a topic an analyst may
    write, else cut with a note that says where the whole task is. Only the verifier's task
    (the draft and its sources) goes past it: 31 KB in every event and tree read otherwise."""
    limit = settings.RESEARCH_TOPIC_MAX_CHARS
    if len(run.topic) <= limit:
        return run.topic
    return run.topic[:limit].rstrip() + (
        f"\n\n[cut: the task is {len(run.topic):,} characters; the whole task: "
        f"/v1/gb/research/{run.pk}]"
    )


def run_fields(run: Run, *, whole_topic: bool = True) -> dict[str, Any]:
    """A run as the REST API, the snapshot and `run.created` show it (DESIGN: a run's JSON).
    A tree (the snapshot, `run.created`, the tree endpoint) shows `listed_topic`."""
    return {
        "id": run.pk,
        "parent_id": run.parent_id,
        "root_id": run.root_id,
        "depth": run.depth,
        "name": run.name,
        "reason": run.reason,
        "kind": run.kind,
        "tier": run.tier,
        "plan_item": run.plan_item,
        "review_plan": run.review_plan,
        "starred": run.starred,
        "clarify": run.clarify,
        "clarification": run.clarification,
        "follows_id": run.follows_id,
        "dataset_id": run.dataset_id,
        "topic": run.topic if whole_topic else listed_topic(run),
        "model": run.model,
        "status": run.status,
        "active": run.status in ACTIVE_STATUSES,
        "ending": ending_of(status=run.status, error=run.error),
        "state": run.state,
        "max_steps": run.max_steps,
        "steps": run.steps,
        "input_tokens": run.input_tokens,
        "output_tokens": run.output_tokens,
        "cost_usd": money(run.cost_usd),
        "tree_cost_usd": money(run.tree_cost_usd),
        "report": run.report,
        "error": run.error,
        "created_at": iso(run.created_at),
        "started_at": iso(run.started_at),
        "finished_at": iso(run.finished_at),
        "worked_seconds": _seconds(run.worked_seconds()),
        "clock_running": run.clock_running,
    }


def _seconds(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


@cache
def _names(payload: type["Payload"]) -> tuple[str, ...]:
    return tuple(field.name for field in dataclasses.fields(payload))


# --- One class per event type ---------------------------------------------------------------


@dataclass(frozen=True)
class Payload:
    """The fields an event adds to the envelope. `None` fields marked optional are left out."""

    type: ClassVar[str]
    optional: ClassVar[frozenset[str]] = frozenset()

    def fields(self) -> dict[str, Any]:
        # What dataclasses.asdict gives, without its recursive rebuild of every value (every
        # event of every step comes through here). A payload's fields are plain values, lists
        # and dicts; the lists and dicts are copied, so that the event stored and pushed does
        # not change with a list its caller changes later.
        fields = {}
        for key in _names(type(self)):
            value = getattr(self, key)
            if value is None and key in self.optional:
                continue
            fields[key] = _copied(value)
        return fields


def _copied(value: Any) -> Any:
    """A payload's value with its lists and dicts copied, at every depth; the rest (strings,
    numbers, None) is immutable and shared. What copy.deepcopy gives for these values at a
    tenth of its cost: no memo, no dispatch on the type (a spawn of five copied its children's
    `run.created` data for 0.7 ms of its 2.3, issue 25)."""
    if isinstance(value, dict):
        return {key: _copied(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_copied(item) for item in value]
    return value


@dataclass(frozen=True)
class RunCreated(Payload):
    """A node joins the tree: the run as its JSON, name, reason and parent included."""

    type: ClassVar[str] = "run.created"
    data: dict[str, Any]

    @classmethod
    def of(cls, run: Run) -> "RunCreated":
        return cls(data=run_fields(run, whole_topic=False))


@dataclass(frozen=True)
class RunStateChanged(Payload):
    """The run's status and state, with the detail shown beside it (a query, a URL)."""

    type: ClassVar[str] = "run.state"
    optional: ClassVar[frozenset[str]] = frozenset({"started_at", "worked_seconds", "resumed"})
    status: str
    state: str
    detail: str
    # Only when the run starts working.
    started_at: str | None = None
    # Only when a resume queued it again (research.services.resume): its ending is undone.
    resumed: bool | None = None
    # Only when its clock starts or stops (it starts, pauses for the analyst, resumes): the
    # time it worked so far, paused spans left out; the page's clock runs on from it.
    worked_seconds: float | None = None


@dataclass(frozen=True)
class RunUsage(Payload):
    """Steps, tokens and cost after a model call: the run's own, its subtree's, the tree's.
    When the call moved the agent on (to its first tool's state: searching, spawning), the
    event says so as a `run.state` would (`status`, `state`, `detail`): one event, not two.
    When its tools finished before it was written, in its commit, it says the state they
    left the agent in instead, and they send no `run.state` (research.services.step_batch)."""

    type: ClassVar[str] = "run.usage"
    optional: ClassVar[frozenset[str]] = frozenset({"status", "state", "detail"})
    steps: int
    input_tokens: int
    output_tokens: int
    cost_usd: str
    tree_cost_usd: str
    root_tree_cost_usd: str
    root_tree_input_tokens: int
    root_tree_output_tokens: int
    # Only when the call moved the agent to its next state.
    status: str | None = None
    state: str | None = None
    detail: str | None = None


@dataclass(frozen=True)
class RunMessage(Payload):
    """A message between siblings (`run` in the envelope is the sender), or a note from the
    analyst (`from_analyst`; `run` is then the agent it is for)."""

    type: ClassVar[str] = "run.message"
    id: int
    to: int
    from_name: str
    to_name: str
    text: str
    sent_at: str
    from_analyst: bool

    @classmethod
    def of(cls, message: Message, *, from_name: str, to_name: str) -> "RunMessage":
        return cls(
            id=message.pk,
            to=message.to_run_id,
            from_name=from_name,
            to_name=to_name,
            text=message.text,
            sent_at=iso(message.sent_at),
            from_analyst=message.from_run_id is None,
        )


@dataclass(frozen=True)
class RunPlan(Payload):
    """A root's plan was written, revised, edited or approved (`run` is the root); the
    statuses of its items follow its sub-agents (GET .../plan has them)."""

    type: ClassVar[str] = "run.plan"
    version: int
    items: list
    author: str
    approved: bool


@dataclass(frozen=True)
class RunClarify(Payload):
    """A root's lead asked the analyst questions before it started (`answers` null), or the
    analyst answered them (`answers`, "" for one left blank) or skipped them (`skipped`)."""

    type: ClassVar[str] = "run.clarify"
    questions: list
    answers: list | None
    skipped: bool


@dataclass(frozen=True)
class RunFinished(Payload):
    """A run's end, with what its delegation cost (seed 002's delegation_end): how long it
    worked (null when it never started), its tool calls and its own tokens."""

    type: ClassVar[str] = "run.finished"
    optional: ClassVar[frozenset[str]] = frozenset({"resumable"})
    status: str
    ending: str  # research/endings.py: done, cancelled, interrupted, out_of_time or failed
    state: str
    error: str
    finished_at: str
    duration_seconds: float | None
    tool_calls: int
    input_tokens: int
    output_tokens: int
    # Only for a research (a root) that can be resumed (research.endings.resumable).
    resumable: bool | None = None


@dataclass(frozen=True)
class RunReport(Payload):
    type: ClassVar[str] = "run.report"
    report: str


PAYLOADS: dict[str, type[Payload]] = {
    cls.type: cls
    for cls in (
        RunCreated,
        RunStateChanged,
        RunUsage,
        RunMessage,
        RunFinished,
        RunReport,
        RunPlan,
        RunClarify,
    )
}
EVENT_TYPES = tuple(PAYLOADS)


def envelope(*, seq: int, run_id: int, at: datetime, payload: Payload) -> dict[str, Any]:
    """The event as stored, served and pushed."""
    return {
        "seq": seq,
        "type": payload.type,
        "run": run_id,
        "at": iso(at),
        **payload.fields(),
    }


def message_fields(message: Message, *, from_name: str | None, to_name: str) -> dict[str, Any]:
    """A stored message in the shape of its `run.message` event, for the snapshot: its
    sender's and recipient's names given (the sender's is None for the analyst's note)."""
    if message.from_run_id is None:  # a note from the analyst: `run` is the agent it is for
        payload = RunMessage.of(message, from_name=ANALYST, to_name=to_name)
        return {"run": message.to_run_id, **payload.fields()}
    payload = RunMessage.of(message, from_name=from_name or "", to_name=to_name)
    return {"run": message.from_run_id, **payload.fields()}


# --- JSON Schema, from the classes above ---------------------------------------------------

_JSON_TYPES = {
    int: "integer",
    float: "number",
    str: "string",
    bool: "boolean",
    dict: "object",
    list: "array",
}


def _json_type(hint: Any) -> str | list[str]:
    origin = get_origin(hint)
    if origin in (Union, types.UnionType):
        return [_json_type(arg) for arg in get_args(hint) if arg is not type(None)] + ["null"]
    return _JSON_TYPES[origin or hint]


def schema(event_type: str) -> dict[str, Any]:
    """The JSON Schema of one event type: envelope and payload, no other key."""
    cls = PAYLOADS[event_type]
    hints = get_type_hints(cls)
    properties: dict[str, Any] = {
        "seq": {"type": "integer", "minimum": 1},
        "type": {"const": event_type},
        "run": {"type": "integer"},
        "at": {"type": "string", "format": "date-time"},
    }
    required = ["seq", "type", "run", "at"]
    for field in dataclasses.fields(cls):
        properties[field.name] = {"type": _json_type(hints[field.name])}
        if field.name not in cls.optional:
            required.append(field.name)
    return {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }
