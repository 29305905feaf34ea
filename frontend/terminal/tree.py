"""A tree of agents as its stored events describe it, for the live view and `tail`.

It starts from the rows of the subtree and applies each event (run.created adds an agent,
run.state / run.usage / run.finished update one), so the view follows the tree without
re-reading it. Events of agents outside the followed subtree are ignored.
"""

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from django.utils import timezone
from rich.table import Table
from rich.text import Text

from frontend.progress import elapsed_text
from frontend.terminal.render import (
    STATUS_STYLE,
    field,
    money,
    one_line,
    progress_words,
    terminal_text,
)
from research.endings import WORDS, ending_of
from research.models import Run, Status


@dataclass
class Agent:
    id: int
    parent_id: int | None
    depth: int
    name: str
    status: str
    state: str
    steps: int
    max_steps: int
    cost_usd: Decimal
    detail: str = ""
    error: str = ""

    @property
    def ending(self) -> str:
        """How it ended (research/endings.py), "" while it works."""
        return ending_of(status=self.status, error=self.error)

    @classmethod
    def from_run(cls, run: Run) -> "Agent":
        return cls(
            id=run.pk,
            parent_id=run.parent_id,
            depth=run.depth,
            name=run.name,
            status=run.status,
            state=run.state,
            steps=run.steps,
            max_steps=run.max_steps,
            cost_usd=run.cost_usd,
            error=run.error,
        )

    @classmethod
    def from_created(cls, payload: dict) -> "Agent":
        run = created_run(payload)
        return cls(
            id=payload["run"],
            parent_id=run.get("parent_id"),
            depth=run.get("depth", 0),
            name=run.get("name", ""),
            status=run.get("status", Status.QUEUED),
            state=run.get("state", "queued"),
            steps=run.get("steps", 0),
            max_steps=run.get("max_steps", 0),
            cost_usd=Decimal(run.get("cost_usd") or 0),
        )


def created_run(payload: dict) -> dict:
    """The run a run.created event carries (the REST API's shape of a run)."""
    return payload.get("data") or {}


class TreeModel:
    def __init__(self, scope: Run, runs: list[Run]):
        self.scope_id = scope.pk
        self.scope_depth = scope.depth
        self.agents: dict[int, Agent] = {run.pk: Agent.from_run(run) for run in runs}
        # The scope's time worked as the run page keeps it (static/page/state.js): the figure
        # of its last event, and from when its clock ran on from it, if it runs.
        self.worked: float | None = scope.worked_seconds()
        self.clock_at = timezone.now()
        self.clock_running = scope.clock_running

    def in_scope(self, payload: dict) -> bool:
        run_id = payload.get("run")
        kind = payload.get("type")
        if kind == "run.created" and run_id not in self.agents:
            return run_id == self.scope_id or created_run(payload).get("parent_id") in self.agents
        if kind == "run.message" and payload.get("to") in self.agents:
            return True  # a sibling outside the followed subtree wrote to one inside it
        return run_id in self.agents

    def apply(self, payload: dict, at: datetime | None = None) -> None:
        """Apply one event, stored `at` (its Event.at; now when not given): the scope's clock
        runs on from the time of the event that set it, so a replayed old event sets it
        right too (`tail` from the first event of a research at work)."""
        kind, run_id = payload.get("type"), payload.get("run")
        if run_id == self.scope_id:
            self._times(payload, at or timezone.now())
        if kind == "run.created":
            self.agents.setdefault(run_id, Agent.from_created(payload))
            return
        agent = self.agents.get(run_id)
        if agent is None:
            return
        # A run.usage carries the state the call moved the agent to, if it moved it (or,
        # when its tools finished in its commit, the state they left it in).
        if kind in ("run.state", "run.finished") or (kind == "run.usage" and "state" in payload):
            agent.status = payload.get("status", agent.status)
            agent.state = payload.get("state", agent.state)
            agent.detail = payload.get("detail", "")
            agent.error = payload.get("error", agent.error)
        if kind == "run.usage":
            agent.steps = payload.get("steps", agent.steps)
            agent.cost_usd = Decimal(payload.get("cost_usd") or agent.cost_usd)

    def label(self, run_id: int | None) -> str:
        """The agent's path of names from the root ("left/examples", "root" for the root), as
        far up as the followed subtree goes: unique in the tree, and without spaces."""
        if run_id not in self.agents:
            return f"run-{run_id}"
        names: list[str] = []
        agent = self.agents.get(run_id)
        while agent is not None and agent.parent_id is not None:
            names.append(agent.name or str(agent.id))
            agent = self.agents.get(agent.parent_id)
        return terminal_text("/".join(reversed(names))) or "root"

    def ordered(self) -> list[Agent]:
        """Parents before their children, siblings in the order they were spawned."""
        children: dict[int | None, list[Agent]] = {}
        for agent in sorted(self.agents.values(), key=lambda agent: agent.id):
            children.setdefault(agent.parent_id, []).append(agent)
        ordered: list[Agent] = []

        def visit(agent: Agent) -> None:
            ordered.append(agent)
            for child in children.get(agent.id, []):
                visit(child)

        if self.scope_id in self.agents:
            visit(self.agents[self.scope_id])
        return ordered

    def _times(self, payload: dict, at: datetime) -> None:
        """The scope's clock, as static/page/state.js runs the page's: it starts with the
        agent, stops and starts again with a run.state that says the time worked so far (a
        pause for the analyst, its resume), and stops at run.finished's duration."""
        kind = payload.get("type")
        if kind == "run.state":
            if "worked_seconds" in payload:
                self.worked = payload["worked_seconds"]
            elif (started := payload.get("started_at")) and self.worked is None:
                self.worked = max(0.0, (at - datetime.fromisoformat(started)).total_seconds())
            else:
                return
            self.clock_at, self.clock_running = at, payload.get("status") == Status.WORKING
        elif kind == "run.finished":
            if "duration_seconds" in payload:
                self.worked = payload["duration_seconds"]
            else:
                self.worked = self.worked_seconds(at)
            self.clock_at, self.clock_running = at, False

    def worked_seconds(self, now: datetime | None = None) -> float | None:
        """The scope's time worked as of now, its waits for the analyst left out."""
        if self.worked is None:
            return None
        if not self.clock_running:
            return self.worked
        return self.worked + max(0.0, ((now or timezone.now()) - self.clock_at).total_seconds())

    def progress(self) -> str:
        """`3 of 5 agents done · worked 1 min 05 s`, as the run page says it."""
        scope = self.agents.get(self.scope_id)
        paused = scope is not None and scope.status == Status.PAUSED
        endings = (agent.ending for agent in self.agents.values())
        return progress_words(endings, self.worked_seconds(), paused=paused)

    def cost(self) -> Decimal:
        return sum((agent.cost_usd for agent in self.agents.values()), Decimal(0))

    def renderable(self) -> Table:
        """One line per agent, indented by generation: state, steps of its budget, cost."""
        table = Table(box=None, header_style="bold", show_footer=True, expand=False)
        agents = self.ordered()
        table.add_column("Agent", footer=self.progress())
        table.add_column("State", footer="tree cost", overflow="ellipsis", max_width=60)
        table.add_column("Steps", justify="right")
        table.add_column("Cost", justify="right", footer=money(self.cost()))
        for agent in agents:
            indent = "  " * (agent.depth - self.scope_depth)
            marker = "└ " if agent.id != self.scope_id else ""
            table.add_row(
                f"{indent}{marker}{terminal_text(agent.name) or f'research {agent.id}'}",
                _state_text(agent),
                f"{agent.steps}/{agent.max_steps}",
                money(agent.cost_usd),
            )
        return table


def _state_text(agent: Agent) -> Text:
    style = STATUS_STYLE.get(agent.status, "")
    if agent.status in (Status.QUEUED, Status.WORKING, Status.PAUSED):
        detail = f" {one_line(agent.detail)}" if agent.detail else ""
        return Text(terminal_text(f"{agent.state}{detail}"), style=style)
    error = f": {one_line(agent.error)}" if agent.error else ""
    return Text(terminal_text(f"{agent.status}{error}"), style=style)


def describe(payload: dict, tree: TreeModel) -> str:
    """One line of text saying what an event is about, as a terminal may print it."""
    return terminal_text(_describe(payload, tree))


def _describe(payload: dict, tree: TreeModel) -> str:
    kind = payload.get("type")
    if kind == "run.created":
        run = created_run(payload)
        if run.get("parent_id") is None or payload.get("run") == tree.scope_id:
            return one_line(run.get("topic", ""))
        return one_line(f"{run.get('reason', '')} | task: {run.get('topic', '')}")
    if kind == "run.state":
        if "started_at" in payload:
            return "started"
        detail = payload.get("detail", "")
        return one_line(f"{payload.get('state', '')}{': ' + detail if detail else ''}")
    if kind == "run.usage":
        cost = Decimal(payload.get("cost_usd") or 0)
        tree_cost = Decimal(payload.get("root_tree_cost_usd", payload.get("tree_cost_usd")) or 0)
        usage = (
            f"step {payload.get('steps')}: {payload.get('input_tokens')} in, "
            f"{payload.get('output_tokens')} out, cost {field(cost)} (tree {field(tree_cost)})"
        )
        if "state" not in payload:
            return usage
        detail = payload.get("detail", "")
        return one_line(f"{usage}; {payload['state']}{': ' + detail if detail else ''}")
    if kind == "run.message":
        if payload.get("from_analyst"):  # `run` is the agent the note is for
            return one_line(f"note from the analyst: {payload.get('text', '')}")
        to = payload.get("to")
        name = tree.label(to) if to in tree.agents else payload.get("to_name") or f"run-{to}"
        return one_line(f"to {name}: {payload.get('text', '')}")
    if kind == "run.plan":
        items = "; ".join(str(item) for item in payload.get("items", []))
        state = "approved" if payload.get("approved") else f"by the {payload.get('author', '')}"
        return one_line(f"plan v{payload.get('version')} ({state}): {items}")
    if kind == "run.clarify":
        return _clarify_line(payload)
    if kind == "run.report":
        return f"report: {len(payload.get('report', ''))} characters"
    if kind == "run.finished":
        error = payload.get("error", "")
        took = payload.get("duration_seconds")
        stats = (
            f" in {elapsed_text(took)}, {payload.get('tool_calls', 0)} tool calls"
            if took is not None
            else ""
        )
        # How it ended in the runs list's words ("cancelled", "out of time"), not "failed".
        ending = payload.get("ending") or ""
        word = WORDS.get(ending) or payload.get("status", "")
        return one_line(f"{word}{stats}{': ' + error if error else ''}")
    return ""


def _clarify_line(payload: dict) -> str:
    questions = " | ".join(str(question) for question in payload.get("questions", []))
    if payload.get("skipped"):
        return one_line(f"questions skipped: {questions}")
    if payload.get("answers") is None:
        return one_line(
            f"asks you before it starts: {questions} (answer: manage.py research answer "
            f"{payload.get('run')} TEXT ..., or --skip)"
        )
    answers = " | ".join(str(answer) or "-" for answer in payload.get("answers", []))
    return one_line(f"questions answered: {answers}")
