"""What an agent thread knows about itself: identifiers only, never model instances; and
what it may ask of the runtime that runs it (`Runtime`)."""

import threading
import time
from collections.abc import Iterable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Protocol

from django.conf import settings

from research import endings
from research.endings import CANCELLED_BY_USER, DELETED
from research.models import ACTIVE_STATUSES, Run
from research.selectors import team as team_reads


class Cancelled(Exception):
    """The run was cancelled (by a user, its parent ending, the server stopping)."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


class Paused(Exception):
    """The root paused for the analyst's plan review: its thread ends, its run does not."""


@dataclass
class CancelToken:
    """Set in this process by the pool, or in the database by any process (run_cancel).

    In a pool (`watched`), one query reads the flags of all its agents when a cancel or a
    note is announced (research.services.announce, NOTIFY from other processes) and every
    RESEARCH_CANCEL_WATCH_SECONDS. A token outside a pool reads its own flag at most every
    RESEARCH_CANCEL_POLL_SECONDS, without a query per check.
    """

    run_id: int
    _event: threading.Event = field(default_factory=threading.Event)
    _reason: str = ""
    _checked_at: float = 0.0
    # A run-time cap (monotonic clock) and the error the run ends with when it passes.
    deadline: float | None = None
    deadline_reason: str = ""
    # The end of its time kept for writing its report (seconds before the deadline): from
    # then on it researches no more and writes (agents.runtime.tree.writing_time_left).
    writing_reserve: float = 0.0
    # Set by a pool that reads the flags of all its agents in one query (AgentPool's cancel
    # watch): the token then never queries on its own.
    watched: bool = False
    # Set when a note from the analyst waits for the agent (the run's notes_pending flag, read
    # with the cancel flag): waits end at once, and the next round takes the notes.
    _note: threading.Event = field(default_factory=threading.Event)

    def set_deadline(self, deadline: float | None, reason: str, *, root: bool) -> None:
        """The run-time cap, and the end of it kept for writing (writing_reserve)."""
        self.deadline, self.deadline_reason = deadline, reason
        if deadline is not None:
            self.writing_reserve = writing_reserve(span=deadline - time.monotonic(), root=root)

    def note_arrived(self) -> None:
        self._note.set()

    def has_note(self) -> bool:
        """Whether a note waits; it also reads the flags when due, like is_set."""
        if not self._note.is_set():
            self.is_set()
        return self._note.is_set()

    def take_note(self) -> bool:
        """True once per arrival: the caller takes the notes now."""
        if self.has_note():
            self._note.clear()
            return True
        return False

    def cancel(self, reason: str) -> None:
        if not self._event.is_set():
            self._reason = reason
            self._event.set()

    @property
    def reason(self) -> str:
        return self._reason

    def not_started_reason(self) -> str:
        """Why an agent ended before its first step: its cancel, or its deadline passing
        while it waited for a place (seed 001: out of time without starting)."""
        if self.deadline is not None and time.monotonic() >= self.deadline:
            return endings.NOT_STARTED_IN_TIME
        return self._reason

    def is_set(self) -> bool:
        if self._event.is_set():
            return True
        now = time.monotonic()
        if self.deadline is not None and now >= self.deadline:
            self.cancel(self.deadline_reason or endings.TIMED_OUT)
            return True
        if not self.watched and now - self._checked_at >= settings.RESEARCH_CANCEL_POLL_SECONDS:
            self._checked_at = now
            self.apply(team_reads.cancel_flags(run_id=self.run_id))
        return self._event.is_set()

    def apply(self, row: tuple[bool, str, bool] | None) -> None:
        """Cancel from the run's row as read (cancel_requested, cancel_reason, notes_pending);
        None: the run was deleted. A pending note is flagged."""
        if row is None:
            self.cancel(DELETED)
            return
        if row[0]:
            self.cancel(row[1] or CANCELLED_BY_USER)
        if row[2]:
            self.note_arrived()

    def check(self) -> None:
        if self.is_set():
            raise Cancelled(self._reason)

    def sleep(self, seconds: float) -> bool:
        """Wait up to `seconds`; True when cancelled meanwhile."""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            if self.is_set():
                return True
            self._event.wait(min(left, settings.RESEARCH_CANCEL_POLL_SECONDS))
        return self.is_set()


# A sub-agent keeps this share of the time it is given for writing its report, at most what a
# root keeps: cut off at its deadline, it would hand its parent nothing.
SUBAGENT_WRITING_SHARE = 0.2


def writing_reserve(*, span: float, root: bool) -> float:
    """The time an agent with `span` seconds to its deadline keeps for writing (seed 001)."""
    reserve = settings.RESEARCH_WRITING_RESERVE_SECONDS
    return reserve if root else min(reserve, max(0.0, span) * SUBAGENT_WRITING_SHARE)


class Runtime(Protocol):
    """What an agent asks of the pool that runs it: start its sub-agents, cancel one, give its
    slot back while it waits, and hear when some agent ends. `agents.runtime.pool.AgentPool` is the
    implementation; tools see only this."""

    worker_id: int | None

    def submit(
        self,
        run_id: int,
        *,
        parent_id: int | None = None,
        deadline: float | None = None,
        deadline_reason: str = "",
        seated: Run | None = None,
    ) -> None: ...

    def seat(self, parent_id: int, count: int) -> int: ...

    def unseat(self, parent_id: int, count: int) -> None: ...

    def cancel(self, run_id: int, reason: str) -> bool: ...

    def is_running(self, run_id: int) -> bool: ...

    def works(self, run_id: int) -> bool: ...

    def ended(self, run: Run) -> None: ...

    def ended_row(self, run_id: int) -> Run | None: ...

    def yielded(self, token: "CancelToken") -> AbstractContextManager[None]: ...

    def blocking(self) -> AbstractContextManager[None]: ...

    def wait_changed(self, timeout: float, run_ids: list[int] | None = None) -> bool: ...


@dataclass
class AgentContext:
    run_id: int
    root_id: int
    parent_id: int | None
    depth: int
    name: str
    owner_id: int
    model: str
    dataset_id: int | None
    cancel: CancelToken
    # A sub-agent's kind and tier (agents.kinds); "" for a root.
    kind: str = ""
    tier: str = ""
    # The research tools this run may use (its kind's that its parent has); None: all.
    allowed_tools: frozenset[str] | None = None
    # The pool that runs this agent: it starts sub-agents and takes back a waiting agent's slot.
    pool: Runtime | None = None
    # The research tools this agent has (set with its toolset): what its children may get;
    # and the remote MCP tools it is offered (agents.tools.remote), which they may get too.
    research_tools: frozenset[str] = frozenset()
    remote_tools: frozenset[str] = frozenset()
    # Sub-agents it spawned, and those whose reports it has read (wait_subagents, or
    # delivered at a round's head); see agents.runtime.tree.
    spawned: set[int] = field(default_factory=set)
    collected: set[int] = field(default_factory=set)
    # The agent's tools by name (agents.tools.base.Tool), offered to its model each turn. A
    # tool may add one here (enable_remote_tool): the model gets it from its next turn on.
    # Typed loosely on purpose: the tools depend on this context, never the other way round.
    tools: dict[str, Any] = field(default_factory=dict)
    # A run that has recorded no step yet: it has no checkpoints and no earlier citations, so
    # neither is read.
    fresh: bool = False
    # True while this agent has no sub-agents of its own: its claim found none, or, started
    # without a claim, the run was fresh (a spawn writes after the step that asked for it),
    # and it has not tried a spawn since (`spawning`). Its team tools then refuse without
    # reading its sub-agents: most agents of a tree are its leaves.
    childless: bool = False
    # Its claim found no sub-agents (only its own agent spawns under a run): `spawned` then
    # holds every one it has, unless a spawn is open (tried, its children not known: its
    # commit may have gone through). See `all_children_known`.
    no_children_at_claim: bool = False
    spawns_open: int = 0
    # Its sub-agents it has seen ended (`saw`): an ended run stays ended while its parent
    # works, so its end and its answer need not read them again (agents.runtime.tree).
    ended_children: set[int] = field(default_factory=set)
    # Its owner's sub-agent switch, and whether any remote MCP server is enabled, as its
    # claim returned them (research.services.locks); None for a run started without a
    # claim, whose set-up reads them.
    owner_allows_subagents: bool | None = None
    remote_servers_enabled: bool | None = None
    # A root that may still ask its clarifying questions (Run.may_clarify), from its row.
    may_clarify: bool = False

    @classmethod
    def load(cls, run_id: int, cancel: CancelToken, pool: Runtime | None = None) -> "AgentContext":
        return cls.of(Run.objects.get(pk=run_id), cancel, pool)

    @classmethod
    def of(cls, run: Run, cancel: CancelToken, pool: Runtime | None = None) -> "AgentContext":
        """The identifiers of a run already read; the thread keeps these, not the instance.
        A run its claim returned (research.services.locks) says what it has."""
        has_children = _as_bool(getattr(run, "has_children", None))
        return cls(
            run_id=run.pk,
            root_id=run.root_id,
            parent_id=run.parent_id,
            depth=run.depth,
            name=run.name,
            owner_id=run.owner_id,
            model=run.model,
            dataset_id=run.dataset_id,
            cancel=cancel,
            kind=run.kind,
            tier=run.tier,
            allowed_tools=None if run.tools is None else frozenset(run.tools),
            pool=pool,
            fresh=run.steps == 0,
            childless=run.steps == 0 if has_children is None else not has_children,
            no_children_at_claim=has_children is False,
            owner_allows_subagents=_as_bool(getattr(run, "owner_allows_subagents", None)),
            remote_servers_enabled=_as_bool(getattr(run, "remote_servers_enabled", None)),
            may_clarify=run.may_clarify,
        )

    def spawning(self) -> None:
        """Called before any attempt to record a sub-agent: from then on this run may have
        some, even when the attempt seems to fail (its commit may have gone through). The
        attempt stays open until `spawned_known` gives its children."""
        self.childless = False
        self.spawns_open += 1

    def spawned_known(self, run_ids: Iterable[int]) -> None:
        """The children an attempt recorded (none when it was refused), once it committed."""
        self.spawned.update(run_ids)
        self.spawns_open -= 1

    @property
    def all_children_known(self) -> bool:
        """Whether `spawned` holds every sub-agent this run has."""
        return self.no_children_at_claim and self.spawns_open == 0

    def saw(self, runs: Iterable[Run]) -> None:
        """Note which of these sub-agents' rows, just read, have ended."""
        self.ended_children.update(run.pk for run in runs if run.status not in ACTIVE_STATUSES)

    @property
    def is_root(self) -> bool:
        return self.parent_id is None


def _as_bool(value: object) -> bool | None:
    return None if value is None else bool(value)  # SQLite's booleans come back as 0 and 1
