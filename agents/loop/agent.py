"""The agent loop: system prompt and topic, then rounds of model call → tool calls → results.

The model's answer without tool calls is the report. When the step budget is spent (or the
tree's cost cap is reached) one last round without tools writes it: the cap sits one round
above the budget (seed 001). Everything the agent does is written through research.services.
"""

import logging
import time
from contextlib import AbstractContextManager, nullcontext
from decimal import Decimal
from functools import partial
from typing import Any

from django.conf import settings

from agents.llm import chat_model_for
from agents.llm.base import ChatResponse, LLMError, ToolCall
from agents.loop import checkpoints, review
from agents.loop.calls import ParallelCalls, PlannedCall, group_calls, group_state
from agents.loop.instructions import system_prompt, task_message
from agents.loop.parsing import parse_call
from agents.loop.records import Records
from agents.runtime import resilience, tree
from agents.runtime.context import AgentContext, Cancelled, Paused
from agents.tools import Tool, ToolError, toolset
from agents.tools.base import truncate
from agents.tools.team.spawn import spawn_turn
from agents.tools.tool import schemas
from research import selectors, services
from research.models import Run, State
from research.services import NextState

log = logging.getLogger(__name__)

RESULT_SLACK = 1000

FINAL_ROUND_NOTE = (
    "Your step budget is spent{why}. Write your final report now, in Markdown, from what you "
    "have found, with a Sources section listing the URLs you cite. No more tool calls."
)


class Agent:
    def __init__(self, ctx: AgentContext, run: Run):
        self.ctx = ctx
        self.facts = selectors.run_facts(run=run)
        self.max_steps = run.max_steps
        # Shared with the tools through ctx.tools: one may add another (agents.tools.remote).
        self.tools = ctx.tools
        self.tools.update((tool.name, tool) for tool in toolset(ctx))
        self.model = chat_model_for(ctx.model)
        self.messages: list[dict[str, Any]] = [
            {"role": "system", "content": system_prompt(ctx, run, self.tools)},
            {"role": "user", "content": task_message(ctx, run)},
        ]
        # A root resumed after its plan review starts from the plan the analyst approved.
        resumed = review.resumed_plan_message(ctx, run)
        if resumed is not None:
            self.messages.append({"role": "user", "content": resumed})
        self.steps_at_start = run.steps
        self.answers_refused = 0
        # A resumed agent goes on with the conversation its checkpoints hold (issue 26).
        self.checkpoints = checkpoints.Checkpoints()
        # A run with no step recorded has written no checkpoint: nothing to read.
        self.restored = None if ctx.fresh else self.checkpoints.restore(ctx)
        if self.restored is not None:
            self.messages = self.restored.messages
            self.answers_refused = self.restored.answers_refused
        self.parallel = ParallelCalls()
        # The state the last write recorded (at first, the one its claim did: thinking): a
        # write that would record it again is skipped.
        self.shown: NextState | None = NextState(run.state)
        # Its step records, committed by the process's writer while it goes on.
        self.records = Records(self.blocking)
        # A root's answer is held back for its verifier's spawn (Records.hand_over, review).
        self._drafts_with_verifier = ctx.is_root and review.spawn_with_draft(ctx)

    def run(self) -> str:
        """The report. Its last records are not waited for when it returns one: its end goes
        behind them, in their batch (Records.end, agents.loop.lifetime)."""
        reported = False
        try:
            report = self._rounds()
            if self.ctx.is_root:
                # Its review reads what the rounds before its draft stored (their tools'
                # steps); the draft's own records go in one batch with its verifier's spawn.
                self.records.written(before_round=self._drafts_with_verifier)
                self._drafts_with_verifier = False  # its revision goes as any record
                report = self._reviewed(report)
            reported = True
            return report
        finally:
            with self.blocking():  # waiting for tool threads to end: others may run
                self.parallel.close()
            if not reported:
                # A cancel, a pause or a failure: what was handed over is written before the
                # run's end is (lifetime), and a failure here never replaces the outcome.
                resilience.cleanup("writing the agent's last records", self.records.written)

    def _reviewed(self, draft: str) -> str:
        """The root's draft, verified and revised once when reports are verified, with its
        Coverage and gaps section when it had a plan or a verifier. A draft is never lost to
        what comes after it: a verifier or a revision that fails leaves the draft, marked as
        unverified."""
        try:
            # Sub-agents still working when the lead answers end now: the draft is what it
            # has, and the verifier must not wait behind them for a place. The first read
            # after the draft's model call: the connection may have died meanwhile. A draft
            # held for its verifier's spawn goes before any wait for them.
            ending = partial(tree.end_subagents, self.ctx, before_waiting=self.records.release)
            resilience.retrying("ending sub-agents", ending)
            verdict = self._verdict(draft) if review.verifying(self.ctx) else None
            if verdict is not None and verdict.revised:
                draft = verdict.revised
            section = review.coverage(self.ctx, verdict)
        except Cancelled:
            raise  # a cancel from the analyst ends the research as cancels do
        except Exception as failure:  # Redis or the database failing after the draft
            log.exception("the review of run %s failed; its draft is kept", self.ctx.run_id)
            failed = review.Verdict(error=f"{type(failure).__name__}: {failure}")
            section = review.coverage_section(None, failed)
        return review.with_section(draft, section)

    def _verdict(self, draft: str) -> "review.Verdict":
        """The verifier's findings on the draft, and the draft revised once after them."""
        try:
            verdict = review.verify(self.ctx, draft, hand_over_draft=self.records.release)
            if verdict.report and not verdict.error:
                findings = review.REVISE_NOTE.format(findings=verdict.report)
                self.messages.append({"role": "user", "content": findings})
                # A note the analyst sent meanwhile is read with the findings.
                notes = tree.delivered_notes(self.ctx)
                if notes is not None:
                    self.messages.append({"role": "user", "content": notes})
                verdict.revised = self.write_without_tools(detail="revising after verification")
            return verdict
        except LLMError as failure:
            return review.Verdict(error=f"the revision failed: {failure}")
        except Cancelled:
            if not review.out_of_time(self.ctx):
                raise  # a cancel from the analyst ends the research as cancels do
            return review.Verdict(error="the research ran out of time while it was being verified")

    def _rounds(self) -> str:
        steps = self.steps_at_start
        if self.restored is not None:
            answer = self._go_on(steps)
            if answer is not None:
                return answer
        while True:
            self.ctx.cancel.check()
            self._deliver_reports()
            self._deliver_notes()
            final_why = self._final_round_reason(steps)
            if final_why is not None:
                return self._final_round(final_why)
            response, planned = self._call_model(tools=list(self.tools.values()))
            steps += 1
            if planned:
                self._run_tools(planned, after=self._round_state(steps))
                continue
            answer = self._accepted(response.content)
            if answer is not None:
                return answer

    def _accepted(self, content: str | None) -> str | None:
        """The report, or None when the answer is refused once (a refusal note follows)."""
        refusal = None
        if not self.answers_refused:
            # The first read after a model call: the connection may have died meanwhile.
            refusal = resilience.retrying(
                "reading the sub-agents' results", lambda: tree.answer_refusal(self.ctx)
            )
        if refusal is None:
            return (content or "").strip() or "(the agent wrote no report)"
        self.answers_refused += 1
        self.messages.append({"role": "user", "content": refusal})
        return None

    def _go_on(self, steps: int) -> str | None:
        """A resumed agent's first moves: its sub-agents that go on start again, the tool
        calls of its last answer that have no result run, or the answer it had written is
        its report."""
        checkpoints.restart_children(self.ctx)
        answer = checkpoints.final_answer(self.messages)
        if answer is not None:
            return self._accepted(answer)
        pending = checkpoints.pending_calls(self.messages)
        if pending:
            planned = [self._plan(call) for call in pending]
            doing = group_state(group_calls(planned)[0])
            if doing is not None:
                self._show(doing)  # its tools first, not the thinking its claim recorded
            self._run_tools(planned, after=self._round_state(steps))
        return None

    def _deliver_reports(self) -> None:
        """Children that ended since the last round: their reports join this round."""
        reports = resilience.retrying(
            "reading reports of sub-agents", lambda: tree.delivered_reports(self.ctx)
        )
        if reports is not None:
            self.messages.append({"role": "user", "content": reports})

    def _deliver_notes(self) -> None:
        """Notes from the analyst that arrived since the last round join this one (seed 001:
        a user's message reaches the lead at its next round)."""
        notes = tree.delivered_notes(self.ctx)
        if notes is not None:
            self.messages.append({"role": "user", "content": notes})

    def _final_round_reason(self, steps: int) -> str | None:
        if steps >= self.max_steps:
            return ""
        cap = settings.RESEARCH_TREE_COST_CAP_USD
        if cap and self._tree_cost() >= cap:
            return f" (the research reached its cost cap of ${cap})"
        if tree.writing_time_left(self.ctx):
            whose = "the research's" if self.ctx.is_root else "your"
            return f" ({whose} time is nearly up: what is left is kept for writing)"
        return None

    def _tree_cost(self) -> Decimal:
        self.records.written()  # its own calls count toward the cap
        return resilience.retrying("reading the tree's cost", lambda: tree.tree_cost(self.ctx))

    def _round_state(self, steps: int) -> NextState:
        """The state of the model call that follows `steps` calls: thinking, or writing."""
        final = self._final_round_reason(steps) is not None
        return NextState(State.WRITING if final else State.THINKING)

    def _final_round(self, why: str) -> str:
        self.messages.append({"role": "user", "content": FINAL_ROUND_NOTE.format(why=why)})
        return self.write_without_tools()

    def write_without_tools(self, detail: str = "") -> str:
        """One model round with no tools: the report."""
        response, _ = self._call_model(tools=[], state=State.WRITING, detail=detail)
        return response.content.strip() or "(the agent wrote no report)"

    def blocking(self) -> AbstractContextManager[None]:
        """Other agents may run while this one waits on its model or its tools."""
        return self.ctx.pool.blocking() if self.ctx.pool is not None else nullcontext()

    def _show(self, state: NextState) -> None:
        if state != self.shown:
            # Handed over behind its records, as they are: the writer keeps their order.
            self.records.hand_over(
                "recording a state",
                partial(
                    services.state_record, facts=self.facts, state=state.state, detail=state.detail
                ),
            )
            self.shown = state

    def _call_model(
        self, *, tools: list[Tool], state: str = State.THINKING, detail: str = ""
    ) -> tuple[ChatResponse, list[PlannedCall]]:
        self.records.round_begins()
        self._show(NextState(state, detail))
        started = time.monotonic()
        with self.blocking():
            response = self.model.chat(
                model=self.ctx.model,
                messages=self.messages,
                tools=schemas(tuple(tools)),
            )
        if not tools:
            response.tool_calls = []  # a model that calls tools in the last round is ignored
        planned = [self._plan(call) for call in response.tool_calls]
        next_state = group_state(group_calls(planned)[0]) if planned else None
        step = {
            "kind": "model",
            "input": {"tool_calls": [[call.name, call.arguments] for call in response.tool_calls]},
            "output": response.content or "",
        }
        latency_ms = int((time.monotonic() - started) * 1000)
        message = response.as_message()
        checkpoint = self.checkpoints.next(
            self.ctx, self.messages, message, answers_refused=self.answers_refused
        )
        # The model's answer is paid for: a connection the database ended meanwhile costs a
        # reconnect, not the answer (the write is one transaction, so a retry never doubles it).
        # The record goes to the process's writer (research.services.writer), which commits
        # it with other records in one transaction while this agent goes on.
        self.records.hand_over(
            "recording a model call",
            partial(
                services.model_call_record,
                facts=self.facts,
                input_tokens=response.input_tokens,
                output_tokens=response.output_tokens,
                latency_ms=latency_ms,
                step=step,
                next_state=next_state,
                checkpoint=checkpoint,
            ),
            held=not response.tool_calls and self._drafts_with_verifier,
        )
        self.shown = next_state or self.shown
        self.messages.append(message)
        self.checkpoints.written(len(self.messages))
        return response, planned

    def _plan(self, call: ToolCall) -> PlannedCall:
        try:
            tool, arguments = parse_call(self.tools, call)
        except ToolError as error:
            return PlannedCall(call, error=str(error))
        return PlannedCall(call, tool, arguments)

    def _run_tools(self, planned: list[PlannedCall], *, after: NextState) -> None:
        """Run the turn's tool calls by groups (agents.loop.calls), results in call order. Each
        call's record carries the state that follows it: the next group's, and after the
        last, the state of the model call that follows."""
        groups = group_calls(planned)
        following = [group_state(group) for group in groups[1:]] + [after]
        for group, after_group in zip(groups, following, strict=True):
            self.ctx.cancel.check()
            # A tool that acts (spawns, messages, plans, ends) writes after this agent's
            # records, so its rows and events follow theirs; its reads need not wait.
            acts = any(item.tool is not None and not item.parallel for item in group)
            with self.blocking(), self.records.writes_after() if acts else nullcontext():
                results = self._run_group(group)
            states = [None] * (len(group) - 1) + [after_group]
            for item, (output, is_error), next_state in zip(group, results, states, strict=True):
                self.messages.append(self._tool_result(item, output, is_error, next_state))

    def _run_group(self, group: list[PlannedCall]) -> list[tuple[str, bool]]:
        if len(group) > 1 and group[0].parallel:
            return self.parallel.run([lambda item=item: self._handle(item) for item in group])
        if group[0].spawns:
            return self._spawn_together(group)
        return [self._handle(item) for item in group]

    def _spawn_together(self, group: list[PlannedCall]) -> list[tuple[str, bool]]:
        """Record every spawn of the group in one transaction, then start the children
        together (agents.tools.team.spawn)."""
        return spawn_turn(self.ctx, [(item.tool.name, item.arguments) for item in group])

    def _tool_result(
        self, item: PlannedCall, output: str, is_error: bool, next_state: NextState | None
    ) -> dict[str, Any]:
        call = item.call
        # A backstop for tools that leave their output unbounded: one that cut its own text
        # to the limit (read_page) adds a heading and a note, which the slack lets through.
        output = truncate(output, settings.RESEARCH_TOOL_RESULT_MAX_CHARS + RESULT_SLACK)
        step = {
            "kind": "tool",
            "tool": call.name,
            # An empty object is the call as the model made it; only unparsable text is raw.
            "input": item.arguments if item.tool is not None else {"raw": call.arguments},
            "output": output,
            "is_error": is_error,
        }
        message = {"role": "tool", "tool_call_id": call.id, "content": output}
        checkpoint = self.checkpoints.next(
            self.ctx, self.messages, message, answers_refused=self.answers_refused
        )
        self.records.hand_over(  # written by the process's writer, as a model call's
            "recording a tool call",
            partial(
                services.tool_call_record,
                facts=self.facts,
                step=step,
                next_state=next_state,
                checkpoint=checkpoint,
            ),
        )
        self.shown = next_state or self.shown
        self.checkpoints.written(len(self.messages) + 1)  # the caller appends it
        return message

    def _handle(self, item: PlannedCall) -> tuple[str, bool]:
        if item.tool is None:
            return f"error: {item.error}", True
        try:
            run = partial(item.tool.handler, self.ctx, item.arguments)
            if item.tool.reads:  # reads retry on a fresh connection; acts never run twice
                return resilience.retrying(f"running {item.call.name}", run), False
            return run(), False
        except ToolError as error:
            return f"error: {error}", True
        except (Cancelled, Paused):
            raise
        except Exception as error:
            log.exception("tool %s of run %s raised", item.call.name, self.ctx.run_id)
            return f"error: {item.call.name} failed: {error}", True
