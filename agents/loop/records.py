"""An agent's step records on their way to the database: handed to the process's writer
(research.services.writer) and waited on only where the agent must see them committed.

A model call's record is committed while the agent's tools run, and a tool call's while its
next model call is out, and so is the state it shows before a model call: the agent does not
wait for a commit on every step. It waits (`written`) before reading the tree's cost for its
cap, and its end goes behind its last records, in their batch (`end`). A tool that acts (a
message, a plan) runs inside `writes_after`: its reads go at once, and its first write waits for
the records, so its rows and events follow theirs; one that only reads and refuses (a name that
is no sub-agent) never waits. A spawn's own statements do not wait either: they are handed to
the writer behind the records and go in their batch (research.services.subagents).
A root's review waits only for the records from before its draft's model round
(`round_begins`, `written(before_round=True)`): what it reads before its verifier's spawn was
stored by then. The draft's record is held back (`held`) and handed over with the spawn
right behind it: one batch, one commit for both (agents.loop.review.verify).
A record lost with its connection is written again there, so it lands after the records
handed over behind it (its transcript row and events come later); a record is one
transaction, so nothing is ever half written.
"""

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager

from django.db import DatabaseError, connection

from agents.runtime import resilience
from research.services.writer import Pending, first_error


class Records:
    def __init__(self, blocking: Callable[[], AbstractContextManager[None]]) -> None:
        self._blocking = blocking  # other agents run Python while this one waits
        # What each record is, its Pending, and how to write it again.
        self._unwritten: list[tuple[str, Pending, Callable[[], object]]] = []
        # Those handed over before the agent's current model round (round_begins); None
        # before its first round in this life.
        self._before_round: set[Pending] | None = None
        self._held: tuple[str, Callable[..., object]] | None = None

    def hand_over(self, what: str, write: Callable[..., object], *, held: bool = False) -> None:
        """Give a record to the writer and go on at once. `write(wait=...)` is the service
        call; a record written inline (no writer runs) fails here, as it always did. A record
        `held` is kept back until `release`, or until the agent next hands over, waits or
        ends: a root's draft, so that its verifier's spawn, queued right behind it, takes
        its batch rather than the next one (agents.loop.review.verify)."""
        self.release()
        if held:
            self._held = (what, write)
            return
        pending = resilience.retrying(what, lambda: write(wait=False))
        # Those committed already are let go (a long run of reading steps never waits).
        self._unwritten = [
            entry for entry in self._unwritten if not entry[1].done.is_set() or entry[1].error
        ]
        self._unwritten.append((what, pending, lambda: write(wait=True)))

    def release(self) -> Pending | None:
        """Hand over the record held back, if one is: its Pending (what goes behind it may
        be written `after` it)."""
        if self._held is None:
            return None
        held, self._held = self._held, None
        self.hand_over(*held)
        return self._unwritten[-1][1]

    def end(
        self,
        write: Callable[..., Pending],
        handed: Callable[[Pending], object] = lambda _: None,
        *,
        behind: tuple[Pending, ...] = (),
        hurry: bool = True,
    ) -> Pending:
        """Hand over the agent's end behind its last records and wait for those: the writer
        writes the end in their batch when it can (one commit, not two one after the other),
        and never when one of them failed. `write(wait=False, after=...)` is the end's
        service call (services.run_end_record); the caller waits on the Pending it returns.
        `handed(end)` is called once the end is with the writer, before any wait: what is
        handed over after it commits after it (its parent's records, agents.runtime.ends).
        A record that failed is raised here, as `written` raises it: the end was then not
        written. One lost with its connection is written again here, and the end, which
        failed with it, is the caller's to write again. `behind`: other records the end
        follows (its sub-agents' ends, agents.loop.lifetime), not waited for here; without
        `hurry` its records' batch is left to linger (Pending.settle)."""
        self.release()
        after = behind + tuple(
            pending
            for _, pending, _ in self._unwritten
            if not pending.done.is_set() or pending.error is not None
        )
        failed = first_error(after)
        if failed is not None:  # not handed over: its wait raises that record's error
            ending = Pending.failed(failed)
        else:
            try:
                ending = write(wait=False, after=after)
            except Exception as error:  # written inline (no writer runs): its wait raises it
                ending = Pending.failed(error)
            else:
                handed(ending)
        self.written(hurry=hurry)
        return ending

    def round_begins(self) -> None:
        """The agent begins a model round: the records handed over until now are those
        `written(before_round=True)` waits for."""
        self.release()
        self._before_round = {pending for _, pending, _ in self._unwritten}

    def written(self, *, before_round: bool = False, hurry: bool = True) -> None:
        """Wait until every record handed over is committed; with `before_round`, those
        handed over before the agent's current model round (all of them before its first
        round), the others left to wait for later. A record lost with its connection is
        written again on a fresh one (resilience); any other failure is raised, as it was
        where the record was written before."""
        if not before_round:
            self.release()
        unwritten, self._unwritten = self._unwritten, []
        if before_round and self._before_round is not None:
            self._unwritten = [entry for entry in unwritten if entry[1] not in self._before_round]
            unwritten = [entry for entry in unwritten if entry[1] in self._before_round]
        if any(not pending.done.is_set() for _, pending, _ in unwritten):
            with self._blocking():
                for _, pending, _ in unwritten:
                    pending.settle(hurry=hurry)
        for what, pending, again in unwritten:
            try:
                pending.wait(hurry=hurry)
            except DatabaseError as error:
                if not resilience.lost_connection(error):
                    raise
                resilience.retrying(what, again)

    @contextmanager
    def writes_after(self) -> Iterator[None]:
        """Run a tool that acts: its reads go at once, and its first statement that writes
        or locks (anything in a transaction, anything but a SELECT) waits until every record
        handed over is committed. A record that failed is raised after the tool, where
        `written` raises it; a tool that wrote nothing leaves it to the agent's next wait."""
        self.release()
        waited = False

        def first_write_waits(execute, sql, params, many, context):
            nonlocal waited
            if not waited and (connection.in_atomic_block or not _reads(sql)):
                waited = True
                for _, pending, _ in self._unwritten:
                    pending.settle()  # no raise here: the tool would report it as its own
            return execute(sql, params, many, context)

        with connection.execute_wrapper(first_write_waits):
            yield
        if waited:
            self.written()


def _reads(sql: str) -> bool:
    """A statement that only reads, outside a transaction: it holds no lock once it ends."""
    return sql.lstrip()[:6].upper() == "SELECT"
