"""How runs look: tab-separated plain text for scripts, rich tables and Markdown on a terminal.

Plain output is one record per line with tab-separated fields (tabs and newlines inside a
value become spaces), a header line first; `key: value` lines for one run; the report as is.
Plain values stay machine-readable (the model is its name); rich output is for people, so
there the demo model says what it is.
"""

from collections.abc import Callable, Iterable
from datetime import datetime
from decimal import Decimal

from rich.console import Console
from rich.markdown import Markdown
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from frontend.library import status_label, status_tone
from frontend.progress import agents_ended_text, worked_words
from research.clean import printable
from research.endings import ending_of
from research.events.payloads import iso
from research.models import Run, Status
from research.pricing import DEMO_MODEL

Write = Callable[[str], None]

LIST_COLUMNS = (
    "id",
    "parent_id",
    "name",
    "status",
    "state",
    "steps",
    "max_steps",
    "model",
    "cost_usd",
    "tree_cost_usd",
    "created_at",
    "topic",
    # Appended: scripts that read the columns by position read the same ones as before.
    "ending",
)
AGENT_COLUMNS = (
    "id",
    "parent_id",
    "depth",
    "name",
    "status",
    "state",
    "steps",
    "max_steps",
    "cost_usd",
    "kind",
    "tier",
    "model",
)
SHOW_FIELDS = (
    "id",
    "parent_id",
    "root_id",
    "depth",
    "name",
    "reason",
    "topic",
    "model",
    "dataset_id",
    "status",
    "ending",
    "state",
    "steps",
    "max_steps",
    "input_tokens",
    "output_tokens",
    "cost_usd",
    "tree_cost_usd",
    "created_at",
    "started_at",
    "finished_at",
    "error",
)
USAGE_COLUMNS = ("model", "calls", "input_tokens", "output_tokens", "cost_usd")
STATUS_STYLE = {
    Status.QUEUED: "dim",
    Status.WORKING: "yellow",
    Status.DONE: "green",
    Status.FAILED: "red",
}
# A research's badge (frontend.library status_tone: its status while it works, else the tone
# of its ending) and an ending's tone (ENDING_LABELS) in colour.
TONE_STYLE = {**STATUS_STYLE, Status.PAUSED: "cyan", "cancelled": "magenta"}


def printable_runs(runs: list[Run]) -> list[Run]:
    """The runs with their text shown as a terminal may print it (rich mode too): control
    characters stored before they were stripped at input become escapes. In memory only."""
    for run in runs:
        for name in ("topic", "name", "reason", "report", "error"):
            setattr(run, name, printable(getattr(run, name)))
    return runs


def terminal_text(text: str) -> str:
    """Stored text as the command prints it (header, events, tree, notes, Markdown): a CR LF
    is a newline, and other control characters, the ESC of every ANSI sequence among them,
    are shown as escapes (`printable`). Newline and tab are kept."""
    return printable(str(text).replace("\r\n", "\n"))


def one_line(text: str) -> str:
    return " ".join(str(text).split())


def field(value: object) -> str:
    """A value as a plain field: empty for none, ISO 8601 for times, one line for text."""
    if value is None:
        return ""
    if isinstance(value, datetime):
        return iso(value)  # as the API and the events write it: UTC as Z
    if isinstance(value, Decimal):
        return format(value, "f")  # never "0E-8"
    return one_line(value)


def tsv(values: Iterable[object]) -> str:
    return "\t".join(field(value) for value in values)


def money(value: Decimal | str | int) -> str:
    return f"${Decimal(value):.4f}"


def model_label(model: str) -> str:
    """A model as people read it: the demo model is not mistaken for a real one (DESIGN)."""
    return f"{model} (offline demo model)" if model == DEMO_MODEL else model


def watch_header(run: Run) -> str:
    """The line a watch (`start --wait`, `tail`) opens with: what it follows, on which model."""
    topic = terminal_text(one_line(run.topic)[:120])
    return f"research {run.pk} on {model_label(run.model)}: {topic}"


def agent_label(run: Run) -> str:
    return run.name or f"research {run.pk}"


def run_ending(run: Run) -> str:
    """How a run ended as the API's `ending` says it (research/endings.py): done, cancelled,
    interrupted, out_of_time or failed; "" while it works."""
    return ending_of(status=run.status, error=run.error)


def value(run: Run, name: str) -> object:
    """A run's field as the listing and `show` print it; `ending` is read from its status
    and stored reason, as the API reads it."""
    return run_ending(run) if name == "ending" else getattr(run, name)


def progress_words(endings: Iterable[str], worked_seconds: float | None, *, paused: bool) -> str:
    """`3 of 5 agents ended · worked 2 min 05 s`: the agents as the run page counts them, and
    the research's time worked as the page and the runs list give it (its waits for the
    analyst left out); `… · not started` before it starts, as the runs list says it."""
    time = worked_words(worked_seconds, paused=paused)
    return f"{agents_ended_text(endings)} · {time if worked_seconds is None else 'worked ' + time}"


def progress_line(run: Run, tree: list[Run]) -> str:
    """progress_words for a research (`run`) and its subtree (`tree`, `run` among them)."""
    endings = (run_ending(member) for member in tree)
    return progress_words(endings, run.worked_seconds(), paused=run.status == Status.PAUSED)


def status_text(run: Run) -> Text:
    """What a run does while it works, else the runs list's badge: "needs your answers",
    "cancelled", "out of time", not the stored "paused" or "failed"."""
    if run.status == Status.WORKING:
        return Text(run.state, style=STATUS_STYLE[Status.WORKING])
    return Text(status_label(run), style=TONE_STYLE.get(status_tone(run), ""))


# --- plain ---------------------------------------------------------------------------------


def plain_list(runs: Iterable[Run], write: Write) -> None:
    write(tsv(LIST_COLUMNS))
    for run in runs:
        write(tsv(value(run, column) for column in LIST_COLUMNS))


def plain_agents(runs: list[Run], write: Write) -> None:
    write("agents:")
    write(tsv(AGENT_COLUMNS))
    for run in runs:
        write(tsv(getattr(run, column) for column in AGENT_COLUMNS))


def plain_usage(rows: list[dict], write: Write) -> None:
    write("usage:")
    write(tsv(USAGE_COLUMNS))
    for row in rows:
        write(tsv(row[column] for column in USAGE_COLUMNS))


def plain_report(run: Run, write: Write) -> None:
    write("report:")
    if run.report:
        write(run.report)


def plain_show(run: Run, tree: list[Run], usage: list[dict], write: Write) -> None:
    for name in SHOW_FIELDS:
        write(f"{name}: {field(value(run, name))}")
    write(f"progress: {progress_line(run, tree)}")
    write("")
    plain_agents(tree, write)
    write("")
    plain_usage(usage, write)
    write("")
    plain_report(run, write)


def plain_summary(run: Run, tree: list[Run], write: Write) -> None:
    """What `start --wait` prints at the end: the agents, the tree's cost, the report."""
    write("")
    plain_agents(tree, write)
    write("")
    write(f"tree_cost_usd: {field(run.tree_cost_usd)}")
    write(f"status: {run.status}")
    write(f"ending: {run_ending(run)}")
    write(f"progress: {progress_line(run, tree)}")
    if run.error:
        write(f"error: {one_line(run.error)}")
    write("")
    plain_report(run, write)


# --- rich ----------------------------------------------------------------------------------


def rich_list(runs: Iterable[Run], console: Console) -> None:
    runs = list(runs)
    if not runs:
        console.print("No researches.")
        return
    table = Table(box=None, header_style="bold")
    for heading in ("ID", "Parent", "Status", "Steps", "Cost", "Model", "Created", "Topic"):
        table.add_column(heading, overflow="fold" if heading == "Topic" else "ellipsis")
    for run in runs:
        table.add_row(
            str(run.pk),
            str(run.parent_id or ""),
            status_text(run),
            f"{run.steps}/{run.max_steps}",
            money(run.tree_cost_usd),
            model_label(run.model),
            run.created_at.strftime("%Y-%m-%d %H:%M"),
            (f"{run.name}: " if run.name else "") + one_line(run.topic)[:200],
        )
    console.print(table)


def rich_agents(tree: list[Run]) -> Table:
    table = Table(box=None, header_style="bold")
    for heading in ("Agent", "Kind", "State", "Steps", "Cost"):
        table.add_column(heading, justify="right" if heading in ("Steps", "Cost") else "left")
    top = tree[0].depth if tree else 0
    for run in tree:
        indent = "  " * (run.depth - top)
        table.add_row(
            f"{indent}{agent_label(run)}",
            f"{run.kind}{' · ' + run.tier if run.tier else ''}",
            status_text(run),
            f"{run.steps}/{run.max_steps}",
            money(run.cost_usd),
        )
    return table


def rich_usage(rows: list[dict]) -> Table:
    table = Table(box=None, header_style="bold")
    for heading in ("Model", "Calls", "Input tokens", "Output tokens", "Cost"):
        table.add_column(heading, justify="left" if heading == "Model" else "right")
    for row in rows:
        table.add_row(
            model_label(row["model"]),
            str(row["calls"]),
            str(row["input_tokens"]),
            str(row["output_tokens"]),
            money(row["cost_usd"]),
        )
    return table


def rich_show(run: Run, tree: list[Run], usage: list[dict], console: Console) -> None:
    facts = Table.grid(padding=(0, 2))
    facts.add_row("Topic", one_line(run.topic))
    if run.parent_id:
        facts.add_row("Sub-agent", f"{run.name} of research {run.parent_id}: {run.reason}")
    facts.add_row("Status", status_text(run))
    facts.add_row("Progress", progress_line(run, tree))
    facts.add_row("Model", model_label(run.model))
    facts.add_row("Steps", f"{run.steps}/{run.max_steps}")
    facts.add_row("Tokens", f"{run.input_tokens} in, {run.output_tokens} out")
    facts.add_row("Cost", f"{money(run.cost_usd)} (tree {money(run.tree_cost_usd)})")
    facts.add_row("Created", run.created_at.strftime("%Y-%m-%d %H:%M:%S %Z"))
    if run.error:
        facts.add_row("Error", Text(run.error, style="red"))
    console.print(Panel(facts, title=f"research {run.pk}", title_align="left"))
    console.print(Panel(rich_agents(tree), title="agents", title_align="left"))
    if usage:
        console.print(Panel(rich_usage(usage), title="usage", title_align="left"))
    rich_report(run, console)


def rich_report(run: Run, console: Console) -> None:
    if run.report:
        # `start --wait` on a terminal ends with this panel alone: it names the demo model too.
        title = "report" if run.model != DEMO_MODEL else f"report by {model_label(run.model)}"
        console.print(Panel(Markdown(run.report), title=title, title_align="left"))
    elif run.error:
        console.print(Text(f"no report: {run.error}", style="red"))
