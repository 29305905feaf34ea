"""A run's end: its row ended with its report or error, its last state, its report's
citations and its events, in one transaction (`run_finish`), or, for an agent at its end, in
the process's writer's batch (`run_end_record`)."""

import copy
from collections.abc import Sequence
from datetime import datetime
from functools import cache
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from research import endings
from research.clean import cut, strip_controls
from research.endings import ending_of
from research.events import Payload, RunFinished, RunReport
from research.events.delivery import expect
from research.events.payloads import iso
from research.events.store import publish_all, reserve_seqs_of
from research.models import ACTIVE_STATUSES, Citation, Run, State, Status
from research.selectors.runs import RunFacts
from research.services.citations import citations_store
from research.services.locks import run_ended, run_for_finish
from research.services.step_batch import Ending, Part
from research.services.steps import step_inserts
from research.services.writer import Pending, step_writer
from research.sql import Update, inserts_deferred

_FINISHED = ("status", "state", "report", "error", "finished_at", "paused_at", "paused_seconds")


@cache
def _finish_update() -> Update:
    return Update(Run, _FINISHED)


@transaction.atomic
@inserts_deferred()
def run_finish(
    *,
    run_id: int,
    report: str = "",
    error: str = "",
    citations: Sequence[Citation] | None = None,
    replacing: bool = True,
) -> bool:
    """End a run: done with its report, or failed with its error; False when it had ended
    already (a finished run stays so). An agent's report comes with its `citations`, checked
    beforehand (research.services.citations_checked), and stored here, replacing the run's
    earlier ones unless it has none (`replacing`): the report and what it cites commit
    together. Without `citations` (None) the run's citations are left as they are. Its rows
    (its last state, its citations, its events) go in one round trip at the end
    (inserts_deferred)."""
    status, report, error = ended_as(report, error)
    count = 2 if report else 1  # the report's event, and the finish's
    # The tree lock and the events' numbers in one statement; then the run's row ended and
    # read back, with its tool steps counted, in one more: an agent ending holds the tree's
    # lock for as few round trips as can be, as its siblings ending with it wait for it.
    reserved = reserve_seqs_of(run_id=run_id, count=count)
    if reserved is None:
        return False
    now = timezone.now()
    run = run_ended(run_id, status=status, state=State.ENDED, report=report, error=error, now=now)
    if run is None:  # paused, ended or gone: read first, as it decides
        run = run_for_finish(run_id)
        if run is None or run.status not in ACTIVE_STATUSES:
            transaction.set_rollback(True)  # the numbers go back
            return False
        run.status = status
        run.state = State.ENDED
        run.report = report
        run.error = error
        run.finished_at = now
        if run.paused_at is not None:  # ended while it waited for the analyst (a cancel)
            run.paused_seconds += (now - run.paused_at).total_seconds()
            run.paused_at = None
        _finish_update().row(run.pk, *(getattr(run, name) for name in _FINISHED))
    root_id, first = reserved
    expect(root_id, first, count)
    events = _ended_rows(
        run, now, report=report, error=error, citations=citations, replacing=replacing
    )
    publish_all(root_id=root_id, events=events, first_seq=first)
    return True


def run_end_record(
    *,
    facts: RunFacts,
    report: str = "",
    error: str = "",
    citations: Sequence[Citation] | None = None,
    replacing: bool = True,
    wait: bool = True,
    after: tuple[Pending, ...] = (),
) -> Any:
    """run_finish for an agent at its end, written by the process's writer in its batch, as
    a step record is (research.services.writer): sub-agents ending together are one
    transaction under their tree's lock, their event numbers reserved with the batch's,
    rather than one transaction each, waiting on one another for that lock.

    The agent hands it over `after` its last records (agents.loop.records.Records.end): in
    their batch when it can, counting their tool steps, and never written when one of them
    failed. Only an active run that is not paused ends in the batch, its run's last record
    there. Any other (paused for its plan, ended by a sweep, deleted), or an end followed by
    another record of its run (whose state would follow it), has the batch written again
    record by record: this end then goes through run_finish, which decides. Returns what
    run_finish would (True when it ended the run), or with `wait=False` at once the record's
    Pending, whose wait() returns it."""
    status, report, error = ended_as(report, error)
    ended: list[tuple[int, Payload]] = []

    def alone() -> bool:
        return run_finish(
            run_id=facts.run_id,
            report=report,
            error=error,
            citations=citations,
            replacing=replacing,
        )

    def rows() -> None:
        # Ended with the batch's other ends (step_batch._end_runs), before the rows.
        run = ending.run
        run.tool_calls += part.tool_steps_before
        ended[:] = _ended_rows(
            run, ending.now, report=report, error=error, citations=citations, replacing=replacing
        )

    def events(counters: dict[str, Any]) -> list[Payload]:
        return [payload for _, payload in ended]

    ending = Ending(facts.run_id, status, report, error)
    part = Part(facts, None, None, 2 if report else 1, rows, events, result=True, ending=ending)
    return step_writer.record(part, alone, wait=wait, after=after)


def _ended_rows(
    run: Run,
    now: datetime,
    *,
    report: str,
    error: str,
    citations: Sequence[Citation] | None,
    replacing: bool,
) -> list[tuple[int, Payload]]:
    """What an ended run writes beside its row (deferred: research.sql.inserts_deferred):
    its last state and its report's citations; and its events, the report's and the
    finish's, to be numbered and stored by the caller."""
    step_inserts()["state"].row(run.pk, State.ENDED, error[:500], now)
    if report and citations is not None:
        citations_store(run_id=run.pk, citations=citations, replacing=replacing)
    events: list[tuple[int, Payload]] = [(run.pk, RunReport(report=report))] if report else []
    duration = run.worked_seconds()
    finished = RunFinished(
        status=run.status,
        ending=ending_of(status=run.status, error=error),
        state=run.state,
        error=error,
        finished_at=iso(now),
        duration_seconds=None if duration is None else round(duration, 3),
        tool_calls=run.tool_calls,
        input_tokens=run.input_tokens,
        output_tokens=run.output_tokens,
        resumable=(run.is_root and endings.resumable(status=run.status, error=error)) or None,
    )
    events.append((run.pk, finished))
    return events


def ended_as(report: str, error: str) -> tuple[str, str, str]:
    """What an end with `report` or `error` stores: its status, its report and its error
    (which may quote an endpoint's or a model's words), cleaned."""
    report, error = capped_report(report), strip_controls(error)
    return (Status.FAILED if error else Status.DONE), report, error


def run_as_ended(run: Run, *, report: str, error: str) -> Run:
    """A copy of `run` as the end that ended it (run_finish or run_end_record returning True)
    left its row: its status, state, report and error as stored, the rest as `run` had them
    (its finish time is not known here: it stays unset). What its parent reads of it in the
    same process, without reading the row again (agents.runtime.pool.AgentPool.ended)."""
    ended = copy.copy(run)  # a model instance's copy has its own state (Model.__reduce__)
    ended.status, ended.report, ended.error = ended_as(report, error)
    ended.state = State.ENDED
    return ended


def capped_report(report: str) -> str:
    """A report as stored: no control characters, at most RESEARCH_REPORT_MAX_CHARS."""
    limit = settings.RESEARCH_REPORT_MAX_CHARS
    return cut(strip_controls(report), limit, what="report", setting="RESEARCH_REPORT_MAX_CHARS")
