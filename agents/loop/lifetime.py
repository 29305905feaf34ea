"""One agent from its start to its finished run: its context and inbox, the Agent's rounds
(agents.loop.agent), the outcome (a report, a pause for the analyst, a cancel, a failure), the
cleanup that never replaces it, and the run's end with the report's citations checked."""

import logging
from contextlib import nullcontext
from functools import partial

from django.db import DatabaseError

from agents.llm.base import LLMError
from agents.loop.agent import Agent
from agents.runtime import resilience, tree
from agents.runtime.context import AgentContext, Cancelled, CancelToken, Paused
from research import endings, services
from research.models import Citation, Run
from research.ops.logs import bind_run
from research.services.writer import Pending, first_error

log = logging.getLogger(__name__)


def run_agent(*, run_id: int, token: CancelToken, pool, run: Run | None = None) -> None:
    """Run one agent to its end and finish its run, after its sub-agents. `run` is its row
    as its claim returned it (research.services.run_claim); without it, it is read here."""
    # A connection the database ended while this thread was idle fails its first query: the
    # reads that start an agent run again on a fresh one, like its writes (resilience).
    if run is None:
        run = resilience.retrying(f"reading run {run_id}", lambda: Run.objects.get(pk=run_id))
    bind_run(run_id=run.pk, root_id=run.root_id)  # every line this thread logs names the run
    ctx = resilience.retrying("reading its context", lambda: AgentContext.of(run, token, pool))
    # The spawn opened it already; this keeps it open. Redis down now costs the agent its
    # messages, not its work.
    resilience.cleanup(f"opening the inbox of run {run_id}", lambda: tree.open_inbox(ctx))
    report, error, paused, agent = "", "", False, None
    try:
        agent = resilience.retrying("starting the agent", lambda: Agent(ctx, run))
        report = agent.run()
    except Paused:
        paused = True  # the analyst reviews the plan; approving it queues the root again
    except Cancelled as cancelled:
        error = cancelled.reason
    except LLMError as failure:
        error = str(failure)
    except Exception as failure:
        error = _failure(run_id, failure)
        if error is None:
            return
    finally:
        # Cleanup that fails (Redis down, a lost connection) is logged: it never replaces
        # the outcome, and a report written is a report kept.
        resilience.cleanup(f"closing the inbox of run {run_id}", lambda: tree.close_inbox(ctx))
        # A parent never finishes before its sub-agents: end them first.
        resilience.cleanup(
            f"ending the sub-agents of run {run_id}",
            lambda: resilience.retrying("ending sub-agents", lambda: tree.end_subagents(ctx)),
        )
    if paused:
        return
    # The report is in: what it cites is checked against what the tree saw, and stored with
    # its finish, in one transaction.
    citations = _checked(ctx, report) if report else []
    # An agent that ran has its facts: its end goes in the writer's batch, behind its last
    # records when it reported (Agent.run waits for them on every other way out). While the
    # writer writes it, the agent's slot and connection serve others, as while it waits on
    # its records.
    with nullcontext() if agent is None else agent.blocking():
        _record_end(ctx, run, report=report, error=error, citations=citations, agent=agent)


def _record_end(
    ctx: AgentContext,
    run: Run,
    *,
    report: str,
    error: str,
    citations: list[Citation],
    agent: Agent | None,
) -> None:
    facts = None if agent is None else agent.facts
    ending = {"report": report, "error": error, "replacing": not ctx.fresh, "facts": facts}
    ended: Pending | None = None
    pool = ctx.pool
    # Its sub-agents' ends commit before its own, or with it: those the writer still has,
    # its end follows into their batch. A sub-agent's end lets its batch linger (up to
    # RESEARCH_WRITER_LINGER_MS) for its parent's to come along: a root's, last, goes at once.
    behind = () if pool is None else pool.ends_written(ctx.run_id, behind=agent is not None)
    hurry = ctx.parent_id is None
    ended_as = {"report": report, "error": error}
    told, written = False, None

    def handed(end: Pending) -> None:
        # Its parent, waiting here, wakes now, not at the commit: whatever it does next is
        # handed to the writer after this end (agents.runtime.ends).
        nonlocal told
        if pool is not None:
            pool.ended(services.run_as_ended(run, **ended_as), end)
            told = True

    try:
        if agent is not None:
            try:
                # Behind its last records, in their batch when it can be (Records.end).
                ended = agent.records.end(
                    partial(services.run_end_record, citations=citations, **ending),
                    handed,
                    behind=behind,
                    hurry=hurry,
                )
            except Exception as failure:
                # A last record failed, and so has the agent, as when it waited for them
                # before its end: the end, behind that record, was not written.
                error = _failure(ctx.run_id, failure)
                if error is None:
                    return
                ending.update(report="", error=error)
                citations = []
        try:
            written = None if ended is None else _written(ended, hurry=hurry, behind=behind)
            if written is None:
                if pool is not None:  # its sub-agents' ends first, if one was lost
                    pool.ends_written(ctx.run_id)
                resilience.record_end(run_id=ctx.run_id, citations=citations, **ending)
        except DatabaseError as failure:
            if not citations or resilience.lost_connection(failure):
                raise
            # A report written is a report kept: without its citations, when they cannot be
            # stored.
            log.exception(
                "the citations of run %s could not be stored; its report is kept", ctx.run_id
            )
            resilience.record_end(run_id=ctx.run_id, citations=[], **ending)
    finally:
        if told and not written:
            # Not the end its parent was told of: it reads the run's row instead, once this
            # thread has left the pool.
            pool.not_ended(ctx.run_id)


def _failure(run_id: int, failure: Exception) -> str | None:
    """The error of an agent that raised `failure` (logged); None when its run was deleted
    meanwhile, which is what failed (logged as that, not as an error)."""
    if not resilience.run_exists(run_id):
        log.info("run %s was deleted while its agent worked", run_id)
        return None
    log.exception("agent of run %s failed", run_id)
    return endings.internal_error(failure)


def _written(ended: Pending, *, hurry: bool, behind: tuple[Pending, ...]) -> bool | None:
    """Whether the end handed over ended the run (False: it had ended already, as
    services.run_finish says); None when it was lost with its connection, or not written
    because a sub-agent's end it followed failed (`behind`), to be written again."""
    try:
        return bool(ended.wait(hurry=hurry))
    except Exception as failure:
        if failure is first_error(behind):  # this end followed it, unwritten
            log.warning("a sub-agent's end before this one failed: %s", failure)
            return None
        if not isinstance(failure, DatabaseError) or not resilience.lost_connection(failure):
            raise
        log.warning("the end, or a record before it, was lost with its connection: %s", failure)
        return None


def _checked(ctx: AgentContext, report: str) -> list[Citation]:
    """The report's citations, checked; none when the check fails (logged): it never costs
    the agent its report."""
    try:
        return resilience.retrying(
            "checking citations",
            lambda: services.citations_checked(
                run_id=ctx.run_id, root_id=ctx.root_id, report=report
            ),
        )
    except Exception:
        log.exception("checking the citations of run %s failed", ctx.run_id)
        return []
