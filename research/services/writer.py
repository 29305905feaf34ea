"""Group commit: one writer thread per process writes the step records of all its agents.

An agent hands its record over (`hand_over`: a model call, a tool call, the state it shows) and
goes on: its next model call or its tools run while the record is written. It waits on its
records (Pending.wait) only where it must see them committed: before the first write of a tool
that acts (a message, a plan) and before reading the tree's cost for its cap
(agents.loop.records). A spawn is handed over too, behind the records (step_batch.Action), and
goes in their batch: one commit for the step and its spawn. Its end is handed over behind its
last records (`after` them): it goes in their batch when it can, and is never written when one
of them failed. `write` hands over and waits, for callers with no such point. The writer lets a
batch fill for RESEARCH_WRITER_LINGER_MS from its oldest record (up to BATCH_MAX records), then
writes the whole batch in one transaction, so a batch costs one commit instead of one per
record: a model call's record and its tools' records, and other agents' records, commit
together. The batch goes at once when an agent waits on a record (Pending.wait: nobody waits
out a linger, but a sub-agent for its end, so that its parent's end can join the batch:
agents.loop.lifetime), when it is full, or when the writer is asked to stop. Each record's
events are stored in that transaction and pushed after it commits, in the order their numbers
were given (research.events.store), and only then are the waiters woken.

A batch that fails is rolled back and its records are written again one by one, each in its
own transaction as before group commit (`alone`): a record whose run ended meanwhile
(steps._RunEnded) is then handled as it always was, and a bad record fails only its own agent,
with the exception it would have raised. A lost connection is closed before the records are
written again, so they go through a fresh one, and when that fails too its OperationalError
reaches the agents where they wait, and agents.runtime.resilience.retrying writes the record
again. A record is one transaction's worth: a crash loses the records not yet committed,
never half of one.

Where the caller is already inside an atomic block (a test's transaction, a spawn), or no
writer runs (the CLI, a test without a pool, a writer stopping), the record is written inline
as before; an end inline waits first for the records it follows. The pool
starts the writer and stops it (agents.runtime.pool); the thread closes its connection on its
way out, and starts again with the next pool.
"""

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.db import InterfaceError, OperationalError, connection, transaction

from research.services.step_batch import write_parts
from research.sql import drop_broken_connection, give_back_connection, inserts_deferred

log = logging.getLogger(__name__)

BATCH_MAX = 64
# After this long without a record the writer gives its connection back to the PostgreSQL
# pool, as a waiting agent does: connections follow the work, not the threads alive.
IDLE_SECONDS = 0.2


class Pending:
    """A record handed over: `wait()` returns what it returned once it is committed, or
    raises what it raised. A record handed over `after` others (an agent's end, behind its
    last records) is never written when one of them failed: it fails with their error."""

    __slots__ = ("part", "alone", "after", "done", "result", "error", "writer", "queued_at")

    def __init__(
        self,
        part: Any,
        alone: Callable[[], Any],
        writer: "Writer | None" = None,
        after: tuple["Pending", ...] = (),
    ) -> None:
        self.part = part
        self.alone = alone
        self.after = after
        self.done = threading.Event()
        self.result: Any = None
        self.error: BaseException | None = None
        self.writer = writer
        self.queued_at = time.monotonic()

    def failed_before(self) -> BaseException | None:
        """The error of a record this one follows, once that record is done."""
        return first_error(self.after)

    def settle(self, *, hurry: bool = True) -> None:
        """Wait until it is written, or failed: its batch goes now, without lingering, unless
        not `hurry` (a sub-agent's end: its parent's end may follow it into the batch)."""
        if not self.done.is_set():
            if hurry and self.writer is not None:
                self.writer.hurry()
            self.done.wait()

    def wait(self, *, hurry: bool = True) -> Any:
        self.settle(hurry=hurry)
        if self.error is not None:
            raise self.error
        return self.result

    @classmethod
    def written(cls, result: Any) -> "Pending":
        record = cls(None, lambda: result)
        record.result = result
        record.done.set()
        return record

    @classmethod
    def failed(cls, error: BaseException) -> "Pending":
        record = cls.written(None)
        record.error = error
        return record


def first_error(records: tuple[Pending, ...]) -> BaseException | None:
    return next((record.error for record in records if record.error is not None), None)


class Writer:
    """The process's writer thread and its queue; started and stopped by each pool."""

    def __init__(self, together: Callable[[list[Any]], list[Any]]) -> None:
        self._write_together = together
        self._lock = threading.Lock()
        self._ready = threading.Condition(self._lock)
        self._queue: deque[Pending | None] = deque()
        self._thread: threading.Thread | None = None
        self._users: set[int] = set()
        self._hurried = False  # an agent waits on a record: the next batch goes at once
        self._stopping = False
        self.batches = 0
        self.records = 0
        self.retried = 0  # batches rolled back and written again record by record
        self.largest = 0  # the most records one batch took

    def start(self, user: object) -> None:
        """Start the thread unless it runs, for `user` (a pool) until its stop."""
        with self._lock:
            self._users.add(id(user))
            if self._thread is None:
                self._stopping = self._hurried = False
                self._thread = threading.Thread(target=self._run, name="step-writer", daemon=True)
                self._thread.start()

    def stop(self, user: object, timeout: float = 10.0) -> None:
        """After the last user's stop: write what is queued, close the connection, end."""
        with self._lock:
            self._users.discard(id(user))
            thread = self._thread
            if self._users or thread is None:
                return
            self._thread = None
            self._stopping = True
            self._queue.append(None)
            self._ready.notify()
        thread.join(timeout)

    @property
    def thread(self) -> threading.Thread | None:
        return self._thread

    def queued(self) -> int:
        """Records handed over and not yet taken into a batch."""
        with self._lock:
            return len(self._queue)

    def write(self, part: Any, alone: Callable[[], Any], *, after: tuple[Pending, ...] = ()) -> Any:
        """Write a record and return what it returns. `part` is what the writer's `together`
        takes (research.services.step_batch.Part): the batch's parts in its transaction, which
        raises to have the batch written record by record; `alone` writes the record in a
        transaction of its own, as before group commit."""
        return self.hand_over(part, alone, after=after).wait()

    def record(
        self,
        part: Any,
        alone: Callable[[], Any],
        *,
        wait: bool,
        after: tuple[Pending, ...] = (),
    ) -> Any:
        """`write` with `wait`, else `hand_over`: what a record's service returns."""
        if wait:
            return self.write(part, alone, after=after)
        return self.hand_over(part, alone, after=after)

    def hand_over(
        self, part: Any, alone: Callable[[], Any], *, after: tuple[Pending, ...] = ()
    ) -> Pending:
        """Queue a record and return at once: the caller waits on the Pending where it must
        see the record committed. Written inline (done when it returns, its error raised
        here) where `write` writes inline. A record `after` others is queued behind them (they
        were handed over first) and is not written when one of them fails."""
        with self._lock:
            thread = self._thread
            inline = (
                thread is None or thread is threading.current_thread() or connection.in_atomic_block
            )
            if not inline:
                record = Pending(part, alone, self, after)
                self._queue.append(record)
                # The writer waits for a first record, or for a batch to fill; lingering
                # over a batch it wakes at its deadline and takes what came meanwhile.
                if len(self._queue) == 1 or len(self._queue) >= BATCH_MAX:
                    self._ready.notify()
        if inline:
            # Those it follows first: a writer that is stopping (its thread already gone from
            # here) may still be writing them. Never called on the writer's own thread, nor
            # inside a transaction, which may hold a lock their batch needs.
            unwritten = [record for record in after if not record.done.is_set()]
            if unwritten and connection.in_atomic_block:
                raise RuntimeError("a record behind unwritten ones goes outside a transaction")
            for record in unwritten:
                record.settle()
            failed = first_error(after)
            if failed is not None:
                raise failed
            return Pending.written(alone())
        return record

    def hurry(self) -> None:
        """Someone waits on a record: write what is queued now."""
        with self._lock:
            self._hurried = True
            self._ready.notify()

    def _take(self, timeout: float | None) -> list[Pending] | None:
        """The next batch; None to stop; [] when nothing came within `timeout`."""
        with self._lock:
            if not self._queue and not self._ready.wait_for(lambda: self._queue, timeout):
                return []
            oldest = self._queue[0]
            if oldest is not None:
                # An agent's step hands over its model call's record, then its tool's a
                # fraction of a millisecond later: one commit for both instead of two.
                deadline = oldest.queued_at + settings.RESEARCH_WRITER_LINGER_MS / 1000
                while not (self._hurried or self._stopping or len(self._queue) >= BATCH_MAX):
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    self._ready.wait(left)
            batch: list[Pending] = []
            while self._queue and len(batch) < BATCH_MAX:
                record = self._queue[0]
                if record is None:
                    if batch:
                        break  # written first; the stop comes with the next take
                    self._queue.popleft()
                    return None
                batch.append(self._queue.popleft())
            # A waiter's record may be among those left for the next batch: it goes at once.
            self._hurried = bool(self._queue)
            return batch

    def _run(self) -> None:
        try:
            idle = None
            while (batch := self._take(idle)) is not None:
                if batch:
                    self._write(batch)
                    idle = IDLE_SECONDS
                else:
                    give_back_connection()
                    idle = None
        finally:
            connection.close()

    def _write(self, batch: list[Pending]) -> None:
        self.batches += 1
        self.records += len(batch)
        self.largest = max(self.largest, len(batch))
        try:
            # A record whose predecessor failed in an earlier batch fails, unwritten.
            for record in batch:
                record.error = record.failed_before()
            rest = [record for record in batch if record.error is None]
            alone = any(record.part is None for record in rest)
            if rest and (alone or not self._together(rest)):
                self._one_by_one(rest)
        except BaseException as error:  # never leave an agent waiting
            log.exception("the step writer failed a batch")
            for record in batch:
                if not record.done.is_set() and record.error is None:
                    record.error = error
            if not isinstance(error, Exception):
                raise
        finally:
            for record in batch:
                record.done.set()

    def _together(self, batch: list[Pending]) -> bool:
        """The batch in one transaction; False when it was rolled back."""
        committed: list[bool] = []
        written: list[list[Any]] = []
        committing = False

        def results() -> None:
            # The first after-commit callback: the records are written, whatever the pushes
            # after it do (a push that fails leaves them written, with what they returned).
            committed.append(True)
            for record, result in zip(batch, written[0], strict=True):
                record.result = result

        def wake() -> None:
            # The last: the waiters go on once the batch's events are handed to the pushes,
            # in order. Woken first, at 198 agents the events waited longer for the server's
            # loop (docs/performance.md, round thirty-eight).
            for record in batch:
                record.done.set()

        try:
            with transaction.atomic():
                transaction.on_commit(results)
                # Every record's rows at the end, one INSERT per table for the whole batch.
                with inserts_deferred():
                    written.append(self._write_together([record.part for record in batch]))
                transaction.on_commit(wake)
                committing = True
        except Exception as error:
            if committed:  # a push failed after the commit: the records are written
                log.exception("pushing a batch's events failed")
                return True
            log.debug("a batch of %d records failed; writing them one by one", len(batch))
            self.retried += 1
            drop_broken_connection()
            if committing and isinstance(error, OperationalError | InterfaceError):
                # The connection failed under the COMMIT: whether it went through is unknown.
                # A part written at most once (a spawn) fails with the error; records are
                # written again, as always. A COMMIT refused otherwise (a key checked at its
                # end) surely rolled back: the spawn is written again too.
                for record in batch:
                    if getattr(record.part, "at_most_once", False):
                        record.error = error
            return False
        return True

    def _one_by_one(self, batch: list[Pending]) -> None:
        for record in batch:
            if record.error is None:  # those it follows come first in the queue
                record.error = record.failed_before()
            if record.error is None:
                try:
                    record.result = record.alone()
                except Exception as error:
                    record.error = error
                    drop_broken_connection()
            record.done.set()


step_writer = Writer(write_parts)
