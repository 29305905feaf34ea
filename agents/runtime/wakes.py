"""Agents waiting in a pool for others to stop working, each woken for its own (issue 25).

A parent waits for its sub-agents; an agent that ends waits for those it cancelled. Each
waiter names the runs it waits for, or waits for any agent of the pool. When an agent stops
working here (it handed its end over, or its thread left the pool), only the waiters that
named it, and those waiting for any, wake. One condition for the whole pool woke every
waiting parent at every end of any tree: at 198 agents (33 trees), 33 roots woke at each
end of the load's 165 children, mostly to find nothing of theirs had ended
(docs/performance.md, round forty).
"""

import threading
from collections.abc import Iterable

# The key of the waiters that wait for any agent (run ids are positive).
ANY = 0


class Wakes:
    """Waiters by the run they wait for. Its methods are called with `lock` held, the
    pool's lock, which each waiter's condition shares."""

    def __init__(self, lock: threading.Lock) -> None:
        self._lock = lock
        self._waiting: dict[int, list[threading.Condition]] = {}

    def wait(self, run_ids: Iterable[int] | None, timeout: float) -> bool:
        """Wait until one of `run_ids` (any agent, for None) stops working here (True), or
        the timeout passes (False). The caller holds the lock and has just looked, under it,
        that it must wait: no stop comes between its look and this wait."""
        keys = [ANY] if run_ids is None else list(run_ids)
        waiter = threading.Condition(self._lock)
        for key in keys:
            self._waiting.setdefault(key, []).append(waiter)
        try:
            return waiter.wait(timeout)
        finally:
            for key in keys:
                waiters = self._waiting[key]
                waiters.remove(waiter)
                if not waiters:
                    del self._waiting[key]

    def stopped(self, run_id: int) -> None:
        """`run_id` stopped working here: wake its waiters and those waiting for any."""
        for key in (run_id, ANY):
            for waiter in self._waiting.get(key, ()):
                waiter.notify()
