"""Sub-agents' ends as their pool knows them before they commit (agents.runtime.pool).

An agent hands its end to the process's writer (research.services.writer), then tells its
pool: the row as that end will leave it, and the end's Pending. Its parent, waiting in the
same process, wakes then and reads the row from here, instead of waiting for the commit and
reading the row again. The parent's own records go to the writer after the child's end, and
the writer writes in order, so they commit after it or with it. So does the parent's own end:
it goes behind the ends the writer still has, into their batch when it can (a sub-agent's end
lets its batch linger for it), and waits only for those that failed, which their threads
write again (AgentPool.ends_written): a parent never finishes before its sub-agents.

What this gives up (docs/performance.md, round thirty-six): an end that then does not
commit (one of the child's last records failed, or its run was ended meanwhile) is taken
back from the pool, but a parent may have read its report already; and an end lost with
its connection is written again by the child's thread, outside the writer's order.
"""

from research.models import Run
from research.services.writer import Pending


class HandedEnds:
    """The rows and ends handed over, by run id. Not locked: the pool holds its lock around
    every use."""

    def __init__(self) -> None:
        self._rows: dict[int, Run] = {}
        self._ends: dict[int, Pending] = {}

    def __contains__(self, run_id: int) -> bool:
        return run_id in self._rows

    def add(self, run: Run, end: Pending) -> None:
        self._rows[run.pk] = run
        self._ends[run.pk] = end

    def drop(self, run_id: int) -> None:
        self._rows.pop(run_id, None)
        self._ends.pop(run_id, None)

    def row(self, run_id: int) -> Run | None:
        return self._rows.get(run_id)

    def of_parent(
        self, parent_id: int, *, writing_apart: bool = False
    ) -> tuple[list[tuple[int, Pending]], tuple[Pending, ...]]:
        """The ends `parent_id`'s sub-agents handed over, with their run ids; with
        `writing_apart`, those the writer has not finished are apart, in the second place
        (a parent's end goes behind them: agents.loop.lifetime)."""
        ends = [
            (pk, self._ends[pk]) for pk, run in self._rows.items() if run.parent_id == parent_id
        ]
        if not writing_apart:
            return ends, ()
        writing = tuple(end for _, end in ends if not end.done.is_set())
        return [(pk, end) for pk, end in ends if end not in writing], writing

    def drop_children(self, parent_id: int) -> None:
        for run_id, _ in self.of_parent(parent_id)[0]:
            self.drop(run_id)
