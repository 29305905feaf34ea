"""One agent from its start to its finished run: its context and inbox, the Agent's rounds
(agents.loop.agent), the outcome (a report, a pause for the analyst, a cancel, a failure), the
cleanup that never replaces it, the citations check, and the run's end."""

import logging

from agents.llm.base import LLMError
from agents.loop.agent import Agent
from agents.runtime import resilience, tree
from agents.runtime.context import AgentContext, Cancelled, CancelToken, Paused
from research import endings, selectors, services
from research.models import Run
from research.ops.logs import bind_run

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
    report, error, paused = "", "", False
    try:
        report = resilience.retrying("starting the agent", lambda: Agent(ctx, run)).run()
    except Paused:
        paused = True  # the analyst reviews the plan; approving it queues the root again
    except Cancelled as cancelled:
        error = cancelled.reason
    except LLMError as failure:
        error = str(failure)
    except Exception as failure:
        if not resilience.run_exists(run_id):
            log.info("run %s was deleted while its agent worked", run_id)
            return
        log.exception("agent of run %s failed", run_id)
        error = endings.internal_error(failure)
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
    if report:
        # The report is in: the agent checks what it cites against what the tree saw.
        resilience.cleanup(
            f"checking the citations of run {run_id}",
            lambda: resilience.retrying("checking citations", lambda: _check(ctx, run, report)),
        )
    resilience.record_end(run_id=run_id, report=report, error=error)


def _check(ctx: AgentContext, run: Run, report: str) -> None:
    # Its facts are known (no re-read); a fresh run has no earlier citations to replace.
    facts = selectors.run_facts(run=run)
    services.report_check(facts=facts, report=report, replacing=not ctx.fresh)
