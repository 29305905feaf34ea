"""The agent pool: every agent is a thread, at most `max_active` of them work at once.

A slot is what lets an agent work. An agent that waits (for its sub-agents, for a message) gives
its slot back for the wait and takes one again after it, so a parent waiting on its children can
never starve them of slots (seed 001's thread-starvation deadlock). A child that can have its
place and slot at once when it is spawned is seated: claimed in its spawn's transaction, its
thread starts working without a claim of its own. Threads get run ids (or a seated child's row),
never model instances, and close stale database connections around each job.

One pool runs per process, started by agents.hosting: in the web process for the embedded
default, in `manage.py runagents` workers, or in a command that runs its own researches. Either
way the pool claims queued roots from the database (SKIP LOCKED on PostgreSQL), runs each tree
inside itself, heartbeats, and fails the runs of dead processes.
"""

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from django.conf import settings
from django.db import close_old_connections, connections

from agents.messages import get_messenger
from agents.runtime import resilience
from agents.runtime.context import CancelToken
from agents.runtime.ends import HandedEnds
from agents.runtime.gate import CpuGate
from agents.runtime.orphans import OrphanSweep
from agents.runtime.wakes import Wakes
from agents.runtime.worker import WorkerLoops
from research import endings, services
from research.models import Run
from research.services.writer import Pending
from research.sql import give_back_connection

log = logging.getLogger(__name__)


@dataclass
class _Agent:
    run_id: int
    token: CancelToken
    thread: threading.Thread
    # The working places of its parent's children it takes one of (None: a root).
    family: threading.BoundedSemaphore | None = None
    # Whether it holds its place in the family now (a waiting agent gives it back).
    in_family: bool = False


class AgentPool(WorkerLoops):
    def __init__(self, *, max_active: int | None = None, claim_roots: bool = True):
        self.max_active = max_active or settings.RESEARCH_MAX_AGENTS
        self.claim_roots = claim_roots
        self.worker_id: int | None = None
        self._slots = threading.BoundedSemaphore(self.max_active)
        self._cpu = CpuGate(settings.RESEARCH_AGENT_CPU_SLOTS)  # agents running Python
        self._lock = threading.Lock()
        self._wakes = Wakes(self._lock)  # agents waiting for others to stop working here
        self._agents: dict[int, _Agent] = {}
        self._ended = HandedEnds()  # sub-agents' ends on their way to the database (ended)
        # Set when an agent comes: the cancel watch sleeps on it while the pool has none.
        self._agent_came = threading.Event()
        # Set when a run's flags changed (a cancel, a note): the cancel watch looks at once.
        self._flagged = threading.Event()
        # Per parent, RESEARCH_MAX_WORKING_CHILDREN places for its children to work at once
        # (seed 001's 4 researchers at a time); a child takes one before its slot.
        self._families: dict[int, threading.BoundedSemaphore] = {}
        # Agents submitted that have not yet taken (or given up) their first slot: the claim
        # loop counts them as busy, or it would claim every queued root before one starts.
        self._starting = 0
        self._waiting_for_slot = 0
        self._working = 0
        # The claim loop last stopped for want of a slot, not of a queued root: an agent's
        # end, or a start's first slot, wakes it (agents.runtime.worker._claim_loop).
        self._short_of_slots = True
        # Roots this pool claimed from the queue, for the one log line when each ends.
        self._claimed: set[int] = set()
        # A pool that claims no roots runs those it is given; one of them that pauses for its
        # plan review and is approved is queued again, and taken again by this pool.
        self._given_roots: set[int] = set()
        # Held while claiming and while taking a new worker id, so no root is claimed under
        # an id the sweep has already declared dead (see _heartbeat_loop).
        self._claim_lock = threading.Lock()
        self._stop_reason = endings.SERVER_STOPPED
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._threads: list[threading.Thread] = []
        self._unsubscribe: Callable[[], None] = lambda: None
        self._orphans = OrphanSweep()

    # --- agents (the pool's start and shutdown: agents.runtime.worker) ---------------------------

    def submit(
        self,
        run_id: int,
        *,
        parent_id: int | None = None,
        deadline: float | None = None,
        deadline_reason: str = "",
        seated: Run | None = None,
    ) -> None:
        """Start the agent of a queued run; it works as soon as it gets a slot (and, for a
        sub-agent, one of its parent's places). `deadline` is on the monotonic clock; a root
        gets RESEARCH_ROOT_TIMEOUT_SECONDS from now. The end of it is kept for writing.

        A run `seated` was claimed with its spawn (see seat) or its start (seat_root): its
        row, as claimed, is given, and its thread holds the seat's place and slot from the
        start."""
        token = CancelToken(run_id, watched=True)
        if parent_id is None and not self.claim_roots:
            with self._lock:
                self._given_roots.add(run_id)
        cap = settings.RESEARCH_ROOT_TIMEOUT_SECONDS
        if parent_id is None and deadline is None and cap:
            deadline = time.monotonic() + cap
            deadline_reason = endings.research_timed_out(cap)
        token.set_deadline(deadline, deadline_reason, root=parent_id is None)
        if self._stopping.is_set():
            # A sub-agent spawned while the pool stops: it ends at once, with its parent.
            token.cancel(self._stop_reason)
        thread = threading.Thread(target=self._run_agent, args=(run_id, token, seated), daemon=True)
        thread.name = f"agent-{run_id}"
        with self._lock:
            family = None if parent_id is None else self._family(parent_id)
            agent = _Agent(
                run_id, token, thread, family, in_family=seated is not None and family is not None
            )
            self._agents[run_id] = agent
            self._ended.drop(run_id)  # a run started again (a resume) works again
            self._agent_came.set()
            if seated is None:
                self._starting += 1
        try:
            thread.start()
        except BaseException:  # no thread: it leaves the pool as if it had never come
            with self._lock:
                self._agents.pop(run_id, None)
                if seated is None:
                    self._starting -= 1
            if seated is not None and family is not None:
                self._release_seats(parent_id, 1)
            elif seated is not None:  # a root seated at its start: its slot alone
                self._free_slots(1)
            raise

    def seat(self, parent_id: int, count: int) -> int:
        """Seats for up to `count` children of `parent_id` about to be spawned: each takes one
        of its parent's places and a slot now, without waiting, so that its spawn records it
        working (services.subagents_spawn_each) and its thread starts on its first step
        rather than claiming its run. None while any agent waits for a slot or starts: they
        came first. Returns how many were taken; those no child uses go back (unseat)."""
        with self._lock:
            if self._others_first():
                return 0
            family = self._family(parent_id)
            seated = 0
            while seated < count and family.acquire(blocking=False):
                if not self._slots.acquire(blocking=False):
                    family.release()
                    break
                seated += 1
            self._working += seated  # the claim loop sees them taken at once
        return seated

    def unseat(self, parent_id: int, count: int) -> None:
        """Give back `count` seats (see seat) that no child took."""
        if count:
            self._release_seats(parent_id, count)

    def _family(self, parent_id: int) -> threading.BoundedSemaphore:
        """The places of a parent's children; under self._lock."""
        return self._families.setdefault(
            parent_id, threading.BoundedSemaphore(settings.RESEARCH_MAX_WORKING_CHILDREN)
        )

    def _release_seats(self, parent_id: int, count: int) -> None:
        with self._lock:
            family = self._families[parent_id]
        for _ in range(count):
            family.release()
        self._free_slots(count)

    def _free_slots(self, count: int) -> None:
        """Give back `count` slots of agents counted working."""
        with self._lock:
            self._working -= count
            wake = self._short_of_slots or not self.claim_roots
        for _ in range(count):
            self._slots.release()
        if wake:
            self._wake.set()  # the claim loop may take a queued root now

    def cancel(self, run_id: int, reason: str) -> bool:
        """Cancel an agent of this process at once; False when it is not here."""
        if (agent := self._agent(run_id)) is not None:
            agent.token.cancel(reason)
        return agent is not None

    def is_running(self, run_id: int) -> bool:
        with self._lock:
            return run_id in self._agents

    def ended(self, run: Run, end: Pending) -> None:
        """A sub-agent handed its `end` over, `run` its row as it leaves it: a parent that runs
        here wakes and reads it (ended_row) until it leaves (agents.runtime.ends)."""
        with self._lock:
            if run.parent_id in self._agents:
                self._ended.add(run, end)
            self._wakes.stopped(run.pk)

    def not_ended(self, run_id: int) -> None:
        """The end handed over failed, or found the run ended: its row is read instead."""
        with self._lock:
            self._ended.drop(run_id)

    def works(self, run_id: int) -> bool:
        """Whether the agent runs here and has not handed its end over (`ended`)."""
        with self._lock:
            return self._works(run_id)

    def _works(self, run_id: int) -> bool:
        return run_id in self._agents and run_id not in self._ended  # under self._lock

    def ended_row(self, run_id: int) -> Run | None:
        """The row `ended` was given for a sub-agent whose parent runs here; None otherwise."""
        with self._lock:
            return self._ended.row(run_id)

    def ends_written(self, parent_id: int, *, behind: bool = False) -> tuple[Pending, ...]:
        """Wait for the ends `parent_id`'s sub-agents handed over to commit, or, failed, for
        their threads, which write them again: a parent never finishes before them. With
        `behind`, those still with the writer are returned instead (agents.loop.lifetime)."""
        with self._lock:
            ends, writing = self._ended.of_parent(parent_id, writing_apart=behind)
        for _, end in ends:
            end.settle()
        again = [run_id for run_id, end in ends if end.error is not None or not end.result]
        with self._lock:
            while any(run_id in self._agents for run_id in again):
                self._wakes.wait(again, 0.25)
        return writing

    def wait_changed(self, timeout: float, run_ids: list[int] | None = None) -> bool:
        """True when one of `run_ids` (any agent, for None) was seen stopped here or its stop
        woke the wait; False at the timeout (the caller looks again). An empty list waits."""
        give_back_connection()
        with self._lock:
            if run_ids and not all(map(self._works, run_ids)):
                return True
            return self._wakes.wait(run_ids, timeout)

    @contextmanager
    def blocking(self) -> Iterator[None]:
        """Let other agents run Python while the caller waits on its model or its tools, and
        give its database connection back to the pool meanwhile."""
        give_back_connection()
        released = self._cpu.release()
        try:
            yield
        finally:
            if released:
                self._cpu.acquire()

    @contextmanager
    def yielded(self, token: CancelToken) -> Iterator[None]:
        """Give the caller's slot (and its place among its siblings) back while it waits,
        and take them again afterwards."""
        give_back_connection()
        agent = self._agent(token.run_id)
        self._release(agent)
        try:
            yield
        finally:
            self._acquire(token, agent, cancellable=False)

    @property
    def active(self) -> int:
        with self._lock:
            return self._working

    def _agent(self, run_id: int) -> _Agent | None:
        with self._lock:
            return self._agents.get(run_id)

    def _acquire_first(self, token: CancelToken, agent: _Agent | None) -> bool:
        """Take an agent's first place and slot; False when it was cancelled (or its deadline
        passed) before it got them. A child waiting for its parent's place is not about to
        take a slot: it stops counting as starting, so the claim loop may take roots."""
        in_family = agent is not None and agent.family is not None
        if in_family:
            self._started()
        try:
            return self._acquire(token, agent, cancellable=True)
        finally:
            if not in_family:
                self._started()

    def _acquire(self, token: CancelToken, agent: _Agent | None, *, cancellable: bool) -> bool:
        """Its parent's place first (a child waiting for one holds no slot), then a slot."""
        in_family = agent is not None and agent.family is not None
        if in_family and not self._take_place(token, agent, cancellable=cancellable):
            return False
        with self._lock:
            self._waiting_for_slot += 1
        try:
            while not self._slots.acquire(timeout=0.25):
                if cancellable and token.is_set():
                    self._leave_family(agent)
                    return False
            if cancellable and token.is_set():  # e.g. its deadline passed as a place freed
                self._slots.release()
                self._leave_family(agent)
                return False
        finally:
            with self._lock:
                self._waiting_for_slot -= 1
        # Counted working before it waits for the gate: the claim loop must see no free slot.
        with self._lock:
            self._working += 1
        self._cpu.acquire()
        return True

    def _take_place(self, token: CancelToken, agent: _Agent, *, cancellable: bool) -> bool:
        """One of its parent's RESEARCH_MAX_WORKING_CHILDREN places (seed 001)."""
        if not agent.family.acquire(blocking=False):
            if cancellable:  # a child not yet started: the page shows why it waits
                services.run_set_state(
                    run_id=agent.run_id, state="queued", detail="waiting for a slot"
                )
            while not agent.family.acquire(timeout=0.25):
                if cancellable and token.is_set():
                    return False
        agent.in_family = True
        return True

    def _release(self, agent: _Agent | None) -> None:
        self._cpu.release()
        self._leave_family(agent)
        self._free_slots(1)

    @staticmethod
    def _leave_family(agent: _Agent | None) -> None:
        if agent is not None and agent.in_family:
            agent.in_family = False
            agent.family.release()

    def _run_agent(self, run_id: int, token: CancelToken, seated: Run | None) -> None:
        from agents.loop.lifetime import run_agent

        # A thread's connection may have been closed by the server or the pool meanwhile.
        resilience.cleanup("closing stale connections", close_old_connections)
        agent = self._agent(run_id)
        try:
            if seated is not None:  # its seat's place and slot, counted working since
                self._cpu.acquire()
            elif not self._acquire_first(token, agent):
                resilience.record_end(run_id=run_id, error=token.not_started_reason())
                return
            try:
                # Through a fresh connection when the server ended this one meanwhile. A claim
                # that committed but whose answer was lost reads False again: the orphan sweep
                # then ends that run, rather than two threads running it.
                claimed = seated or resilience.retrying(
                    f"claiming run {run_id}",
                    lambda: services.run_claim(run_id=run_id, worker_id=self.worker_id),
                )
                if claimed is not None:  # its row: the agent starts from it, no re-read
                    run_agent(run_id=run_id, token=token, pool=self, run=claimed)
            finally:
                self._release(agent)
        except Exception:
            # On a fresh connection when this one was lost; else the orphan sweep ends it.
            resilience.record_crash(run_id)
        finally:
            # Each step whatever the others do (Redis or the database may be down): the
            # thread must always leave the pool and give its connection back.
            try:
                # Also for a sub-agent that never ran: siblings must hear it has ended.
                resilience.cleanup(
                    f"closing the inbox of run {run_id}", lambda: get_messenger().close(run_id)
                )
                with self._lock:
                    # A root resumed after its plan review may already run again on a new
                    # thread while this one unwinds: only this thread's own entries go.
                    if self._agents.get(run_id) is agent:
                        self._agents.pop(run_id)
                        # Its children have all ended before it (end_subagents): their
                        # places and their ended rows go too.
                        if self._families.pop(run_id, None) is not None:
                            self._ended.drop_children(run_id)
                    if run_id not in self._ended:  # else its waiters woke at its end (ended)
                        self._wakes.stopped(run_id)
                resilience.cleanup(
                    f"logging the end of run {run_id}", lambda: self._log_end(run_id)
                )
            finally:
                resilience.cleanup("giving connections back", connections.close_all)
