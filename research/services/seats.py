"""Roots seated at their start: a root started in a process whose agent pool can run it now
is claimed for that pool in its start's transaction, and its agent starts on its first step.

Otherwise a start queues its root and announces it (research.services.announce); a claim
loop wakes, claims it in one statement, and the agent's thread claims its run in a second
transaction before its first step: two commits and three thread hand-offs on every research's
critical path, and with many starts at once the claims went one after another (issue 25).
Sub-agents are seated at their spawn in the same way (AgentPool.seat).

The pool of this process offers its seats here (agents.runtime.pool) when it claims roots; a
process without one (a web process whose agents run in `runagents` workers) or whose pool
only runs the roots it is given (`manage.py mcp`, `research start --wait`) has none to give,
and its roots go through the queue as before. A start inside a caller's transaction is
queued too: its seat could not be given back if the caller rolled back.

A seated root is working from its start's commit. If its process dies before its agent takes
a step, the dead-worker sweep fails it, as it fails any working run (a queued root claimed by
a dead process is handed back to the queue instead).
"""

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Protocol

from django.db import connection, transaction

from research.models import Run


class Seats(Protocol):
    """What a pool offers (agents.runtime.pool.AgentPool)."""

    def seat_root(self) -> int | None:
        """A slot taken for a root about to start: this pool's worker id, or None."""

    def unseat_root(self) -> None:
        """Give back a slot seat_root took, for a start that did not commit."""

    def run_seated(self, run: Run) -> None:
        """Run the agent of a root claimed for this pool at its start (its row as claimed)."""


class RootSeats:
    def __init__(self) -> None:
        self._pool: Seats | None = None

    def offer(self, pool: Seats) -> Callable[[], None]:
        """The pool of this process seats the roots started here; returns what withdraws it."""
        self._pool = pool

        def withdraw() -> None:
            if self._pool is pool:
                self._pool = None

        return withdraw

    @contextmanager
    def seat(self) -> Iterator["Seat"]:
        """Around a start's transaction: the start may `take` a seat just before it writes
        its root, from this process's pool, unless it runs inside a caller's transaction; the
        seat goes back if the start fails. The start claims its root for `seat.worker_id`
        (None: it queues it) and hands the claimed row to `seat.taken`, which runs its agent
        once the start commits."""
        seat = Seat(None if connection.in_atomic_block else self._pool)
        try:
            yield seat
        except BaseException:
            seat.give_back()  # rolled back: its agent will never run
            raise
        if not seat.used:
            seat.give_back()  # the start did not claim its root after all


class Seat:
    def __init__(self, pool: Seats | None) -> None:
        self._pool = pool
        self.worker_id: int | None = None
        self.used = False

    def take(self) -> int | None:
        """A slot of the pool for the root about to be written: the pool's worker id, or
        None (queue it)."""
        if self._pool is not None and self.worker_id is None:
            self.worker_id = self._pool.seat_root()
        return self.worker_id

    def taken(self, run: Run) -> None:
        """The root claimed for this seat, its row as the claim returned it: its agent starts
        once the transaction commits. (Robust: a pool that cannot start it ends the root and
        logs; the start has committed.)"""
        self.used = True
        pool = self._pool
        transaction.on_commit(lambda: pool.run_seated(run), robust=True)

    def give_back(self) -> None:
        """The slot goes back to the pool: the start rolled back, or did not use it."""
        if self.worker_id is not None:
            self.worker_id = None
            self._pool.unseat_root()


root_seats = RootSeats()
