"""A model turn's tool calls: parsed before any runs, grouped, and run at once where they may.

Consecutive calls of tools marked `parallel` (searches, page reads, knowledge queries) form a
group that runs at once, on the agent's thread and its own small pool, at most
RESEARCH_PARALLEL_TOOL_CALLS of them; their results go back in call order. Consecutive spawns
(`spawn_subagent`, `spawn_subagents`) form a group recorded in one transaction, whose children
start together once all of them exist, so each child's first list_siblings already shows its
batch. Every other call runs alone, in order.
"""

import contextvars
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.db import close_old_connections, connection

from agents.llm.base import ToolCall
from agents.tools import Tool
from research.services import NextState

SPAWNS = frozenset({"spawn_subagent", "spawn_subagents"})


@dataclass
class PlannedCall:
    """A tool call of the model's turn, parsed and checked before any of them runs, so that
    the state each one shows can be recorded with the write before it."""

    call: ToolCall
    tool: Tool | None = None
    arguments: dict[str, Any] = field(default_factory=dict)
    error: str = ""

    @property
    def state(self) -> NextState | None:
        if self.tool is None:
            return None  # a call the model must fix: the agent stays as it is meanwhile
        return NextState(self.tool.state, self.tool.detail(self.arguments))

    @property
    def parallel(self) -> bool:
        return self.tool is not None and self.tool.parallel

    @property
    def spawns(self) -> bool:
        return self.tool is not None and self.tool.name in SPAWNS


def group_calls(planned: list[PlannedCall]) -> list[list[PlannedCall]]:
    """Consecutive parallel calls together, consecutive spawns together, the rest alone."""
    groups: list[list[PlannedCall]] = []
    for item in planned:
        previous = groups[-1][-1] if groups else None
        if previous is not None and (
            (item.parallel and previous.parallel) or (item.spawns and previous.spawns)
        ):
            groups[-1].append(item)
        else:
            groups.append([item])
    return groups


def group_state(group: list[PlannedCall]) -> NextState | None:
    """What the agent shows while a group runs: its first call's state, with every call's
    detail when several run at once."""
    first = group[0].state
    if first is None or len(group) == 1 or not group[0].parallel:
        return first
    details = [item.state.detail for item in group if item.state and item.state.detail]
    return NextState(first.state, f"{len(group)} at once: " + " | ".join(details))


class ParallelCalls:
    """The agent's own small pool for its parallel calls. The agent's thread runs one of them
    itself: a group of two page reads wakes one thread more, not two (about 300 fewer context
    switches in a default research, issue 25, round thirty-seven). Each pool thread gives its
    database connection back when its call ends (threads are reused)."""

    def __init__(self) -> None:
        self._executor: ThreadPoolExecutor | None = None

    def run(self, jobs: list[Callable[[], Any]]) -> list[Any]:
        """Run the jobs at once, at most RESEARCH_PARALLEL_TOOL_CALLS of them; their results
        in order. A job's exception is raised here, and the jobs not yet started never run."""
        at_once = settings.RESEARCH_PARALLEL_TOOL_CALLS
        if at_once == 1 or len(jobs) < 2:
            return [job() for job in jobs]
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=at_once - 1, thread_name_prefix="tool")
        # Each job runs in a copy of the agent's context: its log lines name the agent's run.
        futures = [
            self._executor.submit(contextvars.copy_context().run, _with_connection_closed, job)
            for job in jobs[1:]
        ]
        results = [None] * len(jobs)
        try:
            results[0] = jobs[0]()
            # Every job no pool thread has taken yet is the agent's own, before it waits on
            # one that runs: a free place is never left while jobs queue.
            for index, future in enumerate(futures, start=1):
                if future.cancel():
                    results[index] = jobs[index]()
            for index, future in enumerate(futures, start=1):
                if not future.cancelled():
                    results[index] = future.result()
        except BaseException:
            for future in futures:
                future.cancel()
            raise
        return results

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)
            self._executor = None


def _with_connection_closed(job: Callable[[], Any]) -> Any:
    close_old_connections()
    try:
        return job()
    finally:
        connection.close()
