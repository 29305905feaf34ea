"""The agent loop: system prompt and topic, then rounds of model call → tool calls → results.

The model's answer without tool calls is the report. When the step budget is spent (or the
tree's cost cap is reached) one last round without tools writes it: the cap sits one round
above the budget (seed 001). Everything the agent does is written through research.services.
"""

import json
import logging
import time
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import jsonschema
from django.conf import settings

from agents import prompts, team
from agents.calls import ParallelCalls, PlannedCall, group_calls, group_state
from agents.context import AgentContext, Cancelled, CancelToken
from agents.llm import chat_model_for
from agents.llm.base import ChatResponse, LLMError, ToolCall
from agents.tools import Tool, ToolError, toolset
from agents.tools.base import truncate
from research import selectors, services
from research.models import Run, State
from research.ops.logs import bind_run
from research.services import NextState

log = logging.getLogger(__name__)

RESULT_SLACK = 1000

FINAL_ROUND_NOTE = (
    "Your step budget is spent{why}. Write your final report now, in Markdown, from what you "
    "have found, with a Sources section listing the URLs you cite. No more tool calls."
)


def run_agent(*, run_id: int, token: CancelToken, pool) -> None:
    """Run one agent to its end and finish its run, after its sub-agents."""
    run = Run.objects.get(pk=run_id)
    bind_run(run_id=run.pk, root_id=run.root_id)  # every line this thread logs names the run
    ctx = AgentContext.of(run, token, pool)
    team.open_inbox(ctx)
    report, error = "", ""
    try:
        report = Agent(ctx, run).run()
    except Cancelled as cancelled:
        error = cancelled.reason
    except LLMError as failure:
        error = str(failure)
    except Exception as failure:
        if not Run.objects.filter(pk=run_id).exists():
            log.info("run %s was deleted while its agent worked", run_id)
            return
        log.exception("agent of run %s failed", run_id)
        error = f"internal error: {type(failure).__name__}: {failure}"
    finally:
        team.close_inbox(ctx)
        # A parent never finishes before its sub-agents: end them first.
        team.end_subagents(ctx)
    if report:
        # The report is in: the agent checks what it cites against what the tree saw.
        services.run_set_state(run_id=run_id, state=State.WRITING, detail="checking citations")
        services.citations_record(run_id=run_id, report=report)
    services.run_finish(run_id=run_id, report=report, error=error)


class Agent:
    def __init__(self, ctx: AgentContext, run: Run):
        self.ctx = ctx
        self.facts = selectors.run_facts(run=run)
        self.max_steps = run.max_steps
        self.tools = {tool.name: tool for tool in toolset(ctx)}
        self.model = chat_model_for(ctx.model)
        self.messages: list[dict[str, Any]] = [
            {"role": "system", "content": system_prompt(ctx, run, self.tools)},
            {"role": "user", "content": run.topic},
        ]
        self.answers_refused = 0
        self.parallel = ParallelCalls()
        # The state the last write recorded: a write that would record it again is skipped.
        self.shown: NextState | None = None

    def run(self) -> str:
        try:
            return self._rounds()
        finally:
            with self._blocking():  # waiting for tool threads to end: others may run
                self.parallel.close()

    def _rounds(self) -> str:
        steps = 0
        while True:
            self.ctx.cancel.check()
            final_why = self._final_round_reason(steps)
            if final_why is not None:
                return self._final_round(final_why)
            response, planned = self._call_model(tools=list(self.tools.values()))
            steps += 1
            if planned:
                self._run_tools(planned, after=self._round_state(steps))
                continue
            refusal = team.answer_refusal(self.ctx) if not self.answers_refused else None
            if refusal is None:
                return response.content.strip() or "(the agent wrote no report)"
            self.answers_refused += 1
            self.messages.append({"role": "user", "content": refusal})

    def _final_round_reason(self, steps: int) -> str | None:
        if steps >= self.max_steps:
            return ""
        cap = settings.RESEARCH_TREE_COST_CAP_USD
        if cap and team.tree_cost(self.ctx) >= cap:
            return f" (the research reached its cost cap of ${cap})"
        return None

    def _round_state(self, steps: int) -> NextState:
        """The state of the model call that follows `steps` calls: thinking, or writing."""
        final = self._final_round_reason(steps) is not None
        return NextState(State.WRITING if final else State.THINKING)

    def _final_round(self, why: str) -> str:
        self.messages.append({"role": "user", "content": FINAL_ROUND_NOTE.format(why=why)})
        response, _ = self._call_model(tools=[], state=State.WRITING)
        return response.content.strip() or "(the agent wrote no report)"

    def _blocking(self) -> AbstractContextManager[None]:
        """Other agents may run while this one waits on its model or its tools."""
        return self.ctx.pool.blocking() if self.ctx.pool is not None else nullcontext()

    def _show(self, state: NextState) -> None:
        if state != self.shown:
            services.run_set_state(
                run_id=self.ctx.run_id, state=state.state, detail=state.detail, facts=self.facts
            )
            self.shown = state

    def _call_model(
        self, *, tools: list[Tool], state: str = State.THINKING
    ) -> tuple[ChatResponse, list[PlannedCall]]:
        self._show(NextState(state))
        started = time.monotonic()
        with self._blocking():
            response = self.model.chat(
                model=self.ctx.model,
                messages=self.messages,
                tools=[tool.schema() for tool in tools],
            )
        if not tools:
            response.tool_calls = []  # a model that calls tools in the last round is ignored
        planned = [self._plan(call) for call in response.tool_calls]
        next_state = group_state(group_calls(planned)[0]) if planned else None
        services.model_call_record(
            facts=self.facts,
            input_tokens=response.input_tokens,
            output_tokens=response.output_tokens,
            latency_ms=int((time.monotonic() - started) * 1000),
            step={
                "kind": "model",
                "input": {
                    "tool_calls": [[call.name, call.arguments] for call in response.tool_calls]
                },
                "output": response.content or "",
            },
            next_state=next_state,
        )
        self.shown = next_state or self.shown
        self.messages.append(response.as_message())
        return response, planned

    def _plan(self, call: ToolCall) -> PlannedCall:
        try:
            tool, arguments = self._parse_call(call)
        except ToolError as error:
            return PlannedCall(call, error=str(error))
        return PlannedCall(call, tool, arguments)

    def _run_tools(self, planned: list[PlannedCall], *, after: NextState) -> None:
        """Run the turn's tool calls by groups (agents.calls), results in call order. Each
        call's record carries the state that follows it: the next group's, and after the
        last, the state of the model call that follows."""
        groups = group_calls(planned)
        following = [group_state(group) for group in groups[1:]] + [after]
        for group, after_group in zip(groups, following, strict=True):
            self.ctx.cancel.check()
            with self._blocking():
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
        """Record every spawn of the group, then start the children together."""
        self.ctx.start_later = []
        try:
            results = [self._handle(item) for item in group]
        finally:
            starts, self.ctx.start_later = self.ctx.start_later, None
            for start in starts:
                try:
                    start()
                except Exception:  # the others still start; end_subagents ends this one
                    log.exception("a sub-agent of run %s could not start", self.ctx.run_id)
        return results

    def _tool_result(
        self, item: PlannedCall, output: str, is_error: bool, next_state: NextState | None
    ) -> dict[str, Any]:
        call = item.call
        # A backstop for tools that leave their output unbounded: one that cut its own text
        # to the limit (read_page) adds a heading and a note, which the slack lets through.
        output = truncate(output, settings.RESEARCH_TOOL_RESULT_MAX_CHARS + RESULT_SLACK)
        services.tool_call_record(
            facts=self.facts,
            step={
                "kind": "tool",
                "tool": call.name,
                "input": item.arguments or {"raw": call.arguments},
                "output": output,
                "is_error": is_error,
            },
            next_state=next_state,
        )
        self.shown = next_state or self.shown
        return {"role": "tool", "tool_call_id": call.id, "content": output}

    def _handle(self, item: PlannedCall) -> tuple[str, bool]:
        if item.tool is None:
            return f"error: {item.error}", True
        try:
            return item.tool.handler(self.ctx, item.arguments), False
        except ToolError as error:
            return f"error: {error}", True
        except Cancelled:
            raise
        except Exception as error:
            log.exception("tool %s of run %s raised", item.call.name, self.ctx.run_id)
            return f"error: {item.call.name} failed: {error}", True

    def _parse_call(self, call: ToolCall) -> tuple[Tool, dict[str, Any]]:
        tool = self.tools.get(call.name)
        if tool is None:
            raise ToolError(
                f"there is no tool {call.name!r}; your tools are: {', '.join(self.tools)}"
            )
        try:
            arguments = json.loads(call.arguments or "{}")
        except json.JSONDecodeError as error:
            raise ToolError(
                f"the arguments of {call.name} are not valid JSON ({error.msg} at "
                f"character {error.pos}); send a JSON object that matches its schema"
            ) from None
        if not isinstance(arguments, dict):
            raise ToolError(f"the arguments of {call.name} must be a JSON object")
        error = jsonschema.exceptions.best_match(
            jsonschema.Draft202012Validator(tool.parameters).iter_errors(arguments)
        )
        if error is not None:
            where = ".".join(str(part) for part in error.absolute_path)
            raise ToolError(
                f"invalid arguments for {call.name}: "
                + (f"{where}: {error.message}" if where else error.message)
            )
        return tool, arguments


def system_prompt(ctx: AgentContext, run: Run, tools: dict[str, Tool]) -> str:
    parts = [prompts.load("research")]
    if "query" in tools:
        parts.append(prompts.load("knowledge"))
    if "spawn_subagent" in tools:
        parts.append(prompts.load("spawn"))
    if not ctx.is_root:
        parts.append(prompts.render("subagent", name=run.name, reason=run.reason))
        parts.append(prompts.load("messaging"))
    return prompts.join(*parts)
