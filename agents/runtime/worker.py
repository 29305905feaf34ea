"""The pool's life in its process and its background loops, as a worker process runs them:
its start (registered, the dead processes' runs failed) and its shutdown, claiming queued
roots while a slot is free, heartbeating (and sweeping the runs of dead processes and
orphaned runs), and reading the cancel flags of every agent in one query.

A part of AgentPool (agents.runtime.pool), kept apart so that what a worker does in the
background reads on its own; it uses the pool's slots, locks and agents.
"""

import logging
import threading
import time
from typing import Self

from django.conf import settings
from django.db import close_old_connections, connections

from agents.runtime import resilience
from research import endings, events, services
from research.ops import wakeups
from research.selectors import team as team_reads

log = logging.getLogger(__name__)


class WorkerLoops:
    # The claim loop found a slot free and is claiming a root: no seat until it has submitted
    # it (seat_root), or a root started now could take the slot of an older one it claims.
    _claiming = False

    def start(self) -> Self:
        """Register this process, fail what dead processes left, and start claiming roots."""
        self.worker_id = services.worker_register(claims_roots=self.claim_roots).pk
        failed = services.workers_sweep(dead_after_seconds=settings.RESEARCH_WORKER_DEAD_SECONDS)
        if failed:
            log.warning("marked %d runs of a stopped process failed", failed)
        services.step_writer.start(self)  # its agents' step records: services.writer
        self._start_loops()
        return self

    def shutdown(self, *, reason: str = endings.SERVER_STOPPED, timeout: float = 10.0) -> None:
        """Interrupt every agent, wait for them to end, fail whatever is still working."""
        if self._stopping.is_set():
            return
        self._stop_reason = reason
        self._stopping.set()
        self._unsubscribe()
        self._wake.set()
        self._agent_came.set()  # the cancel watch, whatever it sleeps on
        self._flagged.set()
        # A claim in flight finishes first, so its agent is among those interrupted below
        # rather than started after them.
        with self._claim_lock:
            pass
        with self._lock:
            agents = list(self._agents.values())
        for agent in agents:
            agent.token.cancel(reason)
        deadline = time.monotonic() + timeout
        for agent in agents:
            agent.thread.join(max(0.0, deadline - time.monotonic()))
        services.step_writer.stop(self)  # what its agents handed over is written
        if self.worker_id is not None:
            try:
                services.worker_stop(worker_id=self.worker_id, error=reason)
                events.flush()
            finally:
                resilience.cleanup("giving connections back", connections.close_all)

    def _start_loops(self) -> None:
        """Start claiming, heartbeating and watching cancels, each in a thread; what is
        announced (research.services.announce), here or by another process's NOTIFY
        (research.ops.wakeups), wakes the claim loop and the cancel watch."""
        unsubscribe = [
            services.roots_queued.subscribe(lambda run_id: self._wake.set()),
            services.runs_flagged.subscribe(lambda run_id: self._flagged.set()),
        ]
        if self.claim_roots:  # roots started in this process may be seated here at once
            unsubscribe.append(services.root_seats.offer(self))
        self._unsubscribe = lambda: [stop() for stop in unsubscribe]
        wakeups.listen()
        for target in (self._claim_loop, self._heartbeat_loop, self._cancel_watch):
            thread = threading.Thread(
                target=self._background(target), name=f"pool-{target.__name__}", daemon=True
            )
            thread.start()
            self._threads.append(thread)

    def _background(self, target):
        def loop() -> None:
            while not self._stopping.is_set():
                close_old_connections()
                try:
                    target()
                except Exception:
                    log.exception("agent pool: %s failed; retrying", target.__name__)
                    self._stopping.wait(1.0)
            connections.close_all()

        return loop

    def _claim_loop(self) -> None:
        """Claim queued roots while a slot is free. Woken at once by a root queued (here, or by
        another process's NOTIFY), and by an agent's end or start (`_started`) only when a
        root may be waiting for its slot: each wake costs a claim statement, and most ends
        leave nothing queued."""
        self._wake.wait(settings.RESEARCH_CLAIM_POLL_SECONDS)
        self._wake.clear()
        if not self.claim_roots:
            self._take_given_roots_again()
        while self.claim_roots:
            if not self._free_slot_or_woken_by_one():
                return
            try:
                if not self._claim_one():
                    return
            finally:
                with self._lock:
                    self._claiming = False

    def _claim_one(self) -> bool:
        """Claim the oldest queued root and start its agent; False when none is queued (or
        the pool stops)."""
        with self._claim_lock:
            if self._stopping.is_set():
                return False
            run_id = services.root_claim_next(worker_id=self.worker_id)
            if run_id is None:
                # Nothing queued: a root queued from now on wakes this loop (its start, its
                # plan's approval or its resume announce it), not an agent's end.
                with self._lock:
                    self._short_of_slots = False
                return False
            with self._lock:
                self._claimed.add(run_id)
            log.info("worker %s: claimed research %s", self.worker_id, run_id)
            self.submit(run_id)
            return True

    # --- roots seated at their start (research.services.seats) ------------------------------

    def seat_root(self) -> int | None:
        """A slot for a root about to be started in this process, taken now without waiting:
        this pool's worker id, for its start to claim the root for. None while the pool stops,
        while any agent waits for a slot or starts, or the claim loop claims one (they came
        first), while roots may wait in the queue (the claim loop last stopped for want of a
        slot), or with no slot free."""
        with self._lock:
            if (
                self._others_first()
                or self._claiming
                or self._short_of_slots
                or not self._slots.acquire(blocking=False)
            ):
                return None
            self._working += 1  # the claim loop sees it taken at once
            return self.worker_id

    def _others_first(self) -> bool:
        """Whether a seat, a child's at its spawn or a root's at its start, must wait its
        turn: the pool stops, or agents wait for a slot or start, which came first. Under
        self._lock."""
        return self._stopping.is_set() or bool(self._starting) or bool(self._waiting_for_slot)

    def unseat_root(self) -> None:
        """Give back a seat_root's slot: its start did not commit."""
        self._free_slots(1)

    def run_seated(self, run) -> None:
        """The agent of a root its start claimed for this pool, from the row as claimed. Under
        the claim lock, as a claim: a pool that stopped, or went on under a new worker id
        (_start_over) while the start committed, ends the root at once rather than leave it
        working under an id nobody sweeps any more."""
        with self._claim_lock:
            stopped = self._stopping.is_set() or run.worker_id != self.worker_id
            if not stopped:
                with self._lock:
                    self._claimed.add(run.pk)
                log.info("worker %s: research %s seated at its start", self.worker_id, run.pk)
                try:
                    self.submit(run.pk, seated=run)  # its slot goes back if no thread starts
                    return
                except Exception:
                    log.exception("worker %s: research %s could not start", self.worker_id, run.pk)
            else:
                self._free_slots(1)
        error = self._stop_reason if self._stopping.is_set() else endings.WORKER_LOST
        resilience.record_end(run_id=run.pk, error=error)

    def _log_end(self, run_id: int) -> None:
        """The one log line when a root this pool claimed ends."""
        with self._lock:
            if run_id not in self._claimed:
                return
            self._claimed.discard(run_id)
        try:
            row = team_reads.status_and_error(run_id=run_id)
        except Exception:  # the database is gone: the run's end is not ours to report
            log.exception("worker %s: research %s ended", self.worker_id, run_id)
            return
        status, error = row or ("deleted", "")
        log.info(
            "worker %s: research %s ended: %s%s",
            self.worker_id,
            run_id,
            status,
            f" ({error})" if error else "",
        )

    def _take_given_roots_again(self) -> None:
        """Of the roots this pool was given, those queued again (a plan approved after its
        review) run here again; those that ended are forgotten."""
        with self._lock:
            waiting = [run_id for run_id in self._given_roots if run_id not in self._agents]
        if not waiting:
            return
        ended = services.roots_ended(run_ids=waiting)
        with self._claim_lock:
            for run_id in waiting:
                if run_id in ended:
                    with self._lock:
                        self._given_roots.discard(run_id)
                elif not self._stopping.is_set() and services.root_claim(
                    run_id=run_id, worker_id=self.worker_id
                ):
                    log.info("worker %s: research %s resumes", self.worker_id, run_id)
                    self.submit(run_id)

    def _started(self) -> None:
        """An agent submitted no longer starts (it took its first slot, or gave up). A claim
        loop that stopped for it claims again now: roots queued meanwhile may each have
        announced themselves while it was claiming, and no other wake may come for them."""
        with self._lock:
            self._starting -= 1
            wake = self._short_of_slots
        if wake:
            self._wake.set()

    def _free_slot_or_woken_by_one(self) -> bool:
        """Whether a slot is free; if not, the next agent's end wakes the claim loop. One
        lock for both: an end between them would find the flag unset and wake nobody. A free
        slot marks a claim in flight (`_claiming`, cleared by the loop once it has submitted
        the root or found none), so that no root seated meanwhile takes that slot."""
        with self._lock:
            # An agent submitted and not yet started will take a slot: it counts as working.
            free = self._waiting_for_slot == 0 and self._working + self._starting < self.max_active
            if not free:
                self._short_of_slots = True
            self._claiming = free
            return free

    def _heartbeat_loop(self) -> None:
        if self._stopping.wait(settings.RESEARCH_HEARTBEAT_SECONDS):
            return
        if not services.worker_heartbeat(worker_id=self.worker_id):
            self._start_over()  # declared dead meanwhile
        with self._lock:
            running = set(self._agents)
        self._orphans.sweep(worker_id=self.worker_id, running=running)
        failed = services.workers_sweep(dead_after_seconds=settings.RESEARCH_WORKER_DEAD_SECONDS)
        if failed:
            log.warning(
                "worker %s: marked %d runs of a stopped process failed", self.worker_id, failed
            )

    def _cancel_watch(self) -> None:
        """Read the cancel flags of every agent of this pool in one query, and cancel the
        tokens of those flagged or deleted (and flag those with a note): waiting agents do
        not query each on their own. It looks when a cancel or a note is announced, from
        this process or (NOTIFY) another (research.services.announce), and every
        RESEARCH_CANCEL_WATCH_SECONDS for one no announcement told of. With no agent it
        sleeps until one comes."""
        self._flagged.wait(settings.RESEARCH_CANCEL_WATCH_SECONDS)
        # Cleared before the read: an announcement from now on wakes the next look, and
        # one before it committed what this read finds.
        self._flagged.clear()
        if self._stopping.is_set():
            return
        with self._lock:
            tokens = {run_id: agent.token for run_id, agent in self._agents.items()}
            if not tokens:
                self._agent_came.clear()  # under the lock submit sets it with
        if not tokens:
            self._agent_came.wait()
            return
        rows = team_reads.cancel_flags_of(run_ids=list(tokens))
        for run_id, token in tokens.items():
            token.apply(rows.get(run_id))

    def _start_over(self) -> None:
        """This process missed its heartbeats for so long (frozen, cut off) that another one
        failed its runs. Their agents stop, and the pool goes on under a new worker id: a
        root claimed under the old one would never be swept again."""
        with self._claim_lock:
            if self._stopping.is_set():
                return
            old = self.worker_id
            self.worker_id = services.worker_register(claims_roots=self.claim_roots).pk
            with self._lock:
                agents = list(self._agents.values())
        for agent in agents:
            agent.token.cancel(endings.WORKER_LOST)
        log.warning(
            "worker %s was declared dead; its %d agents stop; now worker %s",
            old,
            len(agents),
            self.worker_id,
        )
