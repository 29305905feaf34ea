"""The tree's lifecycle as one agent sees it: its inbox, its sub-agents ending before it, the
answer it may not give yet, the tree's cost. The team tools are in agents.tools.team.

The pool is reached only through the `Runtime` protocol of agents.runtime.context.
"""

import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from decimal import Decimal

from django.conf import settings

from agents.messages import get_messenger
from agents.runtime import resilience
from agents.runtime.context import AgentContext
from research import endings, services
from research.models import ACTIVE_STATUSES, Run, Status
from research.selectors import team as team_reads

PARENT_ENDED = endings.PARENT_ENDED
CANCELLED_BY_PARENT = endings.CANCELLED_BY_PARENT


def open_inbox(ctx: AgentContext) -> None:
    if not ctx.is_root:
        get_messenger().open(ctx.run_id)


def close_inbox(ctx: AgentContext) -> None:
    if not ctx.is_root:
        get_messenger().close(ctx.run_id)


def end_subagents(
    ctx: AgentContext,
    *,
    reason: str = PARENT_ENDED,
    before_waiting: Callable[[], object] = lambda: None,
) -> None:
    """Cancel the sub-agents still working and wait until they have finished, after calling
    `before_waiting` when there are some (a root hands over its held draft). Read for an
    agent that spawned none too, unless it knows all its sub-agents and has seen each end
    (ctx.all_children_known; none, for most agents of a tree): a spawn whose commit went
    through but whose answer was lost leaves a child that ctx.spawned does not know (that
    spawn stays open), and a spawn that committed ahead of its step's failed record, then a
    crash, leaves a fresh run with children that a resume queued again (its claim finds
    them)."""
    if ctx.all_children_known and ctx.spawned <= ctx.ended_children:
        return
    # One whose end is on its way to the database has ended: not cancelled, not waited for
    # (its parent's own end goes behind it, AgentPool.ends_written).
    working = [
        run_id
        for run_id in team_reads.working_children_ids(run_id=ctx.run_id)
        if ctx.pool is None or ctx.pool.ended_row(run_id) is None
    ]
    if not working:
        return
    before_waiting()
    for run_id in working:
        cancel_child(ctx, run_id, reason)
    with yielded(ctx):
        while still := team_reads.working_children_ids(run_id=ctx.run_id, among=working):
            # A child no thread of this process runs (it never started) cannot end by
            # itself: end it here rather than wait for ever.
            for run_id in still:
                if ctx.pool is None or not ctx.pool.is_running(run_id):
                    services.run_finish(run_id=run_id, error=reason)
            # The agent may be ending because it was cancelled: this wait must go on.
            wait_for_change(ctx, 0.25, cancellable=False)


def answer_refusal(ctx: AgentContext) -> str | None:
    """The note that refuses an agent's first answer while a sub-agent is working or has a
    report it never collected (seed 001): its result would reach no one. Only the children
    this agent started count (a root resumed after its plan review had its earlier ones
    cancelled). No query when it started none."""
    if not ctx.spawned or ctx.spawned <= ctx.ended_children & ctx.collected:
        return None  # none, or each seen ended and its report read
    children = team_reads.children_named(run_id=ctx.run_id)
    pending = [
        f'"{run.name}" ({"still working" if run.status in ACTIVE_STATUSES else "report not read"})'
        for run in children
        if run.pk in ctx.spawned and (run.status in ACTIVE_STATUSES or run.pk not in ctx.collected)
    ]
    if not pending:
        return None
    return (
        "Your answer was not accepted yet: your sub-agents "
        + ", ".join(pending)
        + " have results you have not read. Call wait_subagents to collect them, or answer "
        "again to end now: working sub-agents are then cancelled."
    )


def report_block(run: Run) -> str:
    """A child's end as its parent reads it: its report, or its error."""
    body = run.report if run.status == Status.DONE else f"error: {run.error}"
    return f"## {run.name} (run {run.pk}): {run.status}\n\n{body}"


REPORTS_HEADER = (
    "[Reports of your sub-agents that ended, delivered once; no need to wait for these]"
)


def delivered_reports(ctx: AgentContext) -> str | None:
    """The reports (or errors) of the children that ended since the agent's last round and
    that it has not read, as one message, once (seed 001's mailbox, seed 002's notification).
    They count as collected for the final-answer check. No query while none is pending."""
    pending = ctx.spawned - ctx.collected
    if not pending:
        return None
    ended = team_reads.ended_among(run_ids=sorted(pending))
    ctx.saw(ended)
    if not ended:
        return None
    ctx.collected.update(run.pk for run in ended)
    return "\n\n".join([REPORTS_HEADER, *map(report_block, ended)])


def wait_result(ctx: AgentContext, runs: list[Run], *, noted: bool) -> str:
    """What wait_subagents returns: each child's report once, as it ended. A report the
    parent already read (delivered at a round's head, or by an earlier wait) is named, not
    repeated: it is in the conversation above."""
    ctx.saw(runs)
    blocks = []
    for run in runs:
        if run.status in ACTIVE_STATUSES:
            blocks.append(f"## {run.name} (run {run.pk}): still working")
        elif run.pk in ctx.collected:
            blocks.append(
                f"## {run.name} (run {run.pk}): {run.status} (its report was delivered to you "
                "above)"
            )
        else:
            ctx.collected.add(run.pk)
            blocks.append(report_block(run))
    if any(run.status in ACTIVE_STATUSES for run in runs):
        blocks.append("Some sub-agents are still working: call wait_subagents again to wait.")
    if noted:
        blocks.append("The wait ended early: a note from the analyst arrived; it follows.")
    return "\n\n".join(blocks)


def note_waiting(ctx: AgentContext) -> bool:
    """Whether a note from the analyst waits for this agent. The token's flag comes from the
    pool's watch, which may have read it just before the last notes were taken: a flag with
    no unread note behind it is cleared here (one query, only when the flag is up)."""
    if not ctx.cancel.has_note():
        return False
    if team_reads.unread_notes_exist(run_id=ctx.run_id):
        return True
    ctx.cancel.take_note()
    return False


def delivered_notes(ctx: AgentContext) -> str | None:
    """The analyst's notes that arrived for this agent, as one message, once. No query unless
    the pool's watch saw the run's flag."""
    if not ctx.cancel.take_note():
        return None
    notes = resilience.retrying(
        "reading notes", lambda: services.notes_take(run_id=ctx.run_id)
    )  # the flag was taken: a lost connection must not lose the notes with it
    if not notes:
        return None
    return "\n\n".join(
        f"[Note from the analyst, {note.sent_at:%H:%M:%S} UTC] {note.text}" for note in notes
    )


@dataclass
class Seats:
    """Seats taken for children about to be spawned (AgentPool.seat): `count` taken, `used`
    by children recorded working."""

    count: int
    used: int = 0


@contextmanager
def seats(ctx: AgentContext, wanted: int, deadline: float | None) -> Iterator[Seats]:
    """Seats for `wanted` children, none when their deadline has already passed (they end
    without starting, as they would). The block records the children, claiming up to
    `count` of them, and sets `used`; the seats left over go back, all of them when the
    block raises."""
    time_left = deadline is None or time.monotonic() < deadline
    taken = Seats(ctx.pool.seat(ctx.run_id, wanted) if time_left else 0)
    try:
        yield taken
    finally:
        ctx.pool.unseat(ctx.run_id, taken.count - taken.used)


def is_seated(run: Run) -> bool:
    """Whether a run its spawn just returned was claimed with it (seated): its thread is
    handed the row (AgentPool.submit(seated=...)) and does not claim it again."""
    return run.status == Status.WORKING


def child_deadline(ctx: AgentContext, *, share: float | None = None) -> tuple[float | None, str]:
    """A child's deadline (monotonic) and the error it ends with: the shorter of the
    sub-agent cap and its parent's time left before the parent's writing reserve, so the
    parent still writes once its children end (seed 001). With `share`, the child gets that
    share of its parent's time left instead (the verifier, started in the lead's writing
    time). Set at launch: a child whose deadline passes while it waits for a slot never
    starts. The child keeps the end of its own time for writing (writing_time_left)."""
    now = time.monotonic()
    deadline, reason = None, ""
    if cap := settings.RESEARCH_SUBAGENT_TIMEOUT_SECONDS:
        deadline, reason = now + cap, endings.subagent_timed_out(cap)
    if ctx.cancel.deadline is None:
        return deadline, reason
    reserve = ctx.cancel.writing_reserve
    if share is not None:
        limit = now + max(0.0, ctx.cancel.deadline - now) * share
        why = endings.share_timed_out(share)
    else:
        limit = ctx.cancel.deadline - reserve
        why = (
            endings.research_time_ran_out(reserve)
            if ctx.is_root
            else endings.parent_time_ran_out(reserve)
        )
    if deadline is None or limit < deadline:
        deadline, reason = limit, why
    return deadline, reason


def writing_time_left(ctx: AgentContext) -> bool:
    """Whether an agent is into the time it keeps for writing its report (seed 001): a
    root's RESEARCH_WRITING_RESERVE_SECONDS, a sub-agent's share of its own time."""
    deadline = ctx.cancel.deadline
    if deadline is None:
        return False
    return time.monotonic() >= deadline - ctx.cancel.writing_reserve


def tree_cost(ctx: AgentContext) -> Decimal:
    return team_reads.tree_cost(root_id=ctx.root_id)


def cancel_child(ctx: AgentContext, run_id: int, reason: str) -> None:
    """Cancel a sub-agent: the flag in the database (any process), and its thread here."""
    services.run_cancel(run=team_reads.run_by_id(run_id=run_id), reason=reason)
    if ctx.pool is not None:
        ctx.pool.cancel(run_id, reason)


def yielded(ctx: AgentContext) -> AbstractContextManager[None]:
    """Give the agent's slot back while it waits (seed 001: no starving one's children)."""
    return ctx.pool.yielded(ctx.cancel) if ctx.pool is not None else nullcontext()


def working_among(ctx: AgentContext, run_ids: list[int]) -> tuple[list[int], list[Run] | None]:
    """Which of the agent's children `run_ids` still work, and their rows when they were read.
    One that this pool runs works until it hands its end over (AgentPool.ended): while any
    does, nothing is read. When every one ended here, their rows are those their ends leave;
    otherwise their rows are read and say (a child never started here, or one whose end
    could not be written, is read, not assumed ended)."""
    if ctx.pool is not None:
        running = [run_id for run_id in run_ids if ctx.pool.works(run_id)]
        if running:
            return running, None
        ended = [ctx.pool.ended_row(run_id) for run_id in run_ids]
        if None not in ended:
            ctx.saw(ended)
            return [], sorted(ended, key=lambda run: run.pk)  # as runs_by_ids: oldest first
    runs = team_reads.runs_by_ids(run_ids=run_ids)
    if ctx.pool is not None:
        # An end handed over here and not yet committed: the row as it leaves it, as above.
        runs = [_handed(ctx.pool, run) for run in runs]
    ctx.saw(runs)
    return [run.pk for run in runs if run.status in ACTIVE_STATUSES], runs


def _handed(pool, run: Run) -> Run:
    """`run` as read, or as the end its agent handed over here, when that has not committed."""
    handed = pool.ended_row(run.pk)
    return handed if handed is not None and run.status in ACTIVE_STATUSES else run


# How often a waiting agent reads its children's rows when none of them has ended: its
# children end in its own process (a tree runs in one), and each end wakes it at once.
RECHECK_SECONDS = 2.0


def wait_for_change(
    ctx: AgentContext,
    seconds: float = RECHECK_SECONDS,
    *,
    cancellable: bool = True,
    run_ids: list[int] | None = None,
    notes: bool = True,
) -> None:
    """Sleep until an agent of the pool ends (one of `run_ids`, when given), at most
    `seconds`. A cancellable wait looks at the cancel token every quarter second (in a pool
    the token reads nothing itself), and with `notes` it ends for a note from the analyst.
    Without a pool, one quarter second."""
    deadline = time.monotonic() + seconds
    pool = ctx.pool
    watched = None
    if run_ids is not None and pool is not None:
        if any(pool.ended_row(run_id) is not None for run_id in run_ids):
            return  # one ended since the caller's read (its end notified before this wait)
        # Only those working here can wake the wait.
        watched = list(filter(pool.works, run_ids))
    if watched is not None and len(watched) < len(run_ids):
        # One of them is not running here: it ended between the caller's read and now (a
        # quarter second is enough for its row), or it never runs here (read it again soon).
        deadline = min(deadline, time.monotonic() + 0.25)
    while (left := deadline - time.monotonic()) > 0:
        if cancellable:
            ctx.cancel.check()
            if notes and note_waiting(ctx):  # the agent reads the analyst's note first
                return
        if pool is None:
            time.sleep(min(left, 0.25))
            return
        if pool.wait_changed(min(left, 0.25), run_ids=watched):
            return
