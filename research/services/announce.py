"""What a commit tells the agent pools, here and in other processes.

- `roots_queued`: a root waits in the queue (started, approved after its plan review,
  resumed, handed back by a dead worker); the pools' claim loops claim it at once.
- `runs_flagged`: a run's flags changed (a cancel, a delete, a note from the analyst); the
  pools' cancel watch reads its agents' flags at once instead of at its next look.

Each calls its callbacks with the run's id once the transaction commits, never before: a
process told of a root or a flag finds it in the database. The agent pool of this process
subscribes (agents.runtime.pool); research.ops.wakeups subscribes too, and tells every other
process with PostgreSQL's NOTIFY.
"""

from collections.abc import Callable

from django.db import transaction


class Announcement:
    def __init__(self, channel: str) -> None:
        self.channel = channel  # the NOTIFY channel other processes listen on
        self.callbacks: list[Callable[[int], None]] = []

    def subscribe(self, callback: Callable[[int], None]) -> Callable[[], None]:
        """Call `callback(run_id)` after each announcement; returns what unsubscribes it."""
        self.callbacks.append(callback)
        return lambda: self.callbacks.remove(callback)

    def announce(self, run_id: int) -> None:
        """Call the callbacks with `run_id` once the caller's transaction commits."""
        for callback in list(self.callbacks):
            transaction.on_commit(lambda callback=callback: callback(run_id))


roots_queued = Announcement("canopy_root_queued")
runs_flagged = Announcement("canopy_run_flagged")
