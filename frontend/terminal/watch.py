"""Following a tree: read its stored events in order and poll for new ones until it ends.

The events table is the source (selectors.tree_events), not the channel layer, so a watch
works from any process and misses nothing: it prints what happened before it started, then
what happens while it runs. Ctrl-C is turned into a flag the loop checks between polls,
so it never lands in the middle of a database call.
"""

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Protocol

from rich.console import Console
from rich.live import Live
from rich.prompt import Confirm, Prompt
from rich.text import Text

from frontend.terminal.render import STATUS_STYLE, Write, terminal_text, tsv
from frontend.terminal.tree import TreeModel, describe
from research import selectors, services
from research.models import Run, Status

POLL_SECONDS = 0.3
BATCH = 500
DONE, FAILED, INTERRUPTED = 0, 1, 130
# What `start --wait` shows as it happens (the lead's questions: the research waits for you);
# `tail` shows every event.
HIGHLIGHTS = frozenset({"run.created", "run.message", "run.clarify", "run.finished"})


class Sink(Protocol):
    def event(self, payload: dict, tree: TreeModel) -> None: ...
    def idle(self, tree: TreeModel) -> None: ...
    def note(self, text: str) -> None: ...
    def pause(self) -> None: ...
    def resume(self) -> None: ...
    def close(self) -> None: ...


class PlainSink:
    """One tab-separated line per event: seq, time, type, run id, agent, what happened."""

    def __init__(self, write: Write, *, note: Write, types: frozenset[str] | None = None):
        self.write = write
        self.write_note = note
        self.types = types

    def event(self, payload: dict, tree: TreeModel) -> None:
        if self.types is not None and payload.get("type") not in self.types:
            return
        run_id = payload.get("run")
        line = (payload.get("seq"), payload.get("at"), payload.get("type"), run_id)
        self.write(tsv((*line, tree.label(run_id), describe(payload, tree))))

    def idle(self, tree: TreeModel) -> None:
        pass

    def note(self, text: str) -> None:
        # To stderr: notes are for people, stdout stays parseable.
        self.write_note(terminal_text(text))

    def pause(self) -> None:
        pass

    def resume(self) -> None:
        pass

    def close(self) -> None:
        pass


class RichSink:
    """The live tree at the bottom of the terminal, events printed above it as they come."""

    def __init__(self, console: Console, tree: TreeModel, *, types: frozenset[str] | None):
        self.console = console
        self.types = types
        self.live = Live(tree.renderable(), console=console, refresh_per_second=4)
        self.live.start()

    def event(self, payload: dict, tree: TreeModel) -> None:
        self.live.update(tree.renderable())
        if self.types is None or payload.get("type") in self.types:
            self.live.console.print(event_text(payload, tree))

    def idle(self, tree: TreeModel) -> None:
        self.live.update(tree.renderable())

    def note(self, text: str) -> None:
        self.live.console.print(Text(terminal_text(text), style="dim italic"))

    def pause(self) -> None:
        self.live.stop()

    def resume(self) -> None:
        self.live.start()

    def close(self) -> None:
        self.live.stop()


def event_text(payload: dict, tree: TreeModel) -> Text:
    kind = payload.get("type", "")
    style = {"run.message": "cyan", "run.created": "blue"}.get(kind, "")
    if kind == "run.finished":
        style = STATUS_STYLE.get(payload.get("status"), "")
    text = Text()
    text.append(f"#{payload.get('seq')} {str(payload.get('at', ''))[11:19]} ", style="dim")
    text.append(tree.label(payload.get("run")), style="bold")
    text.append(f" {kind.removeprefix('run.')} ", style=style or "dim")
    text.append(describe(payload, tree))
    return text


@contextmanager
def sigint_flag(flag: threading.Event | None = None) -> Iterator[threading.Event]:
    """Ctrl-C sets the flag (a new one, or `flag`) instead of raising KeyboardInterrupt
    (main thread only)."""
    flag = threading.Event() if flag is None else flag
    if threading.current_thread() is not threading.main_thread():
        yield flag
        return
    previous = signal.signal(signal.SIGINT, lambda signum, frame: flag.set())
    try:
        yield flag
    finally:
        signal.signal(signal.SIGINT, previous)


class Watch:
    """Follow `scope` and its sub-agents until they have all ended, or the user stops it.

    `local` says whether the agents run in this process: then stopping the watch cancels
    the run, since its agents die with the process anyway.
    """

    def __init__(
        self,
        *,
        scope: Run,
        sink: Sink,
        tree: TreeModel,
        after: int = 0,
        interactive: bool = False,
        console: Console | None = None,
        local: Callable[[], bool] = lambda: False,
        on_idle: Callable[[], str | None] | None = None,
        interrupt: threading.Event | None = None,
    ):
        self.scope = scope
        self.sink = sink
        self.tree = tree
        self.after = after
        self.interactive = interactive
        self.console = console
        self.local = local
        self.on_idle = on_idle
        # Given by a caller that caught Ctrl-C since before the watch (start --wait).
        self.interrupt = threading.Event() if interrupt is None else interrupt
        self.cancelled = False

    def run(self) -> int:
        """Watch to the end; the exit status: 0 done, 1 failed, 130 interrupted."""
        try:
            with sigint_flag(self.interrupt):
                while not self.follow():
                    self.interrupt.clear()
                    choice = self.ask()
                    if choice == "stop":
                        return INTERRUPTED
                    if choice == "cancel":
                        services.run_cancel(run=self.scope)
                        self.cancelled = True
                        if self.local():
                            # Its agents end with this process: no need to watch them go.
                            return INTERRUPTED
        finally:
            self.sink.close()
        if self.cancelled:
            return INTERRUPTED
        self.scope.refresh_from_db()
        return DONE if self.scope.status == Status.DONE else FAILED

    def follow(self) -> bool:
        """Print events until the subtree has ended (True) or Ctrl-C was pressed (False)."""
        while True:
            # Ended first, events second: every event of a finished tree is committed by
            # the time its end is visible, so none is left behind.
            ended = not selectors.subtree_active(run=self.scope)
            events = list(
                selectors.tree_events(root_id=self.scope.root_id, after=self.after)[:BATCH]
            )
            for event in events:
                self.after = event.seq
                if self.tree.in_scope(event.payload):
                    self.tree.apply(event.payload, at=event.at)
                    self.sink.event(event.payload, self.tree)
            if ended and len(events) < BATCH:
                return True
            if self.interrupt.is_set():
                return False
            if not events:
                self.idle()
                if self.interrupt.wait(POLL_SECONDS):
                    return False

    def idle(self) -> None:
        self.sink.idle(self.tree)
        if self.on_idle is not None and (note := self.on_idle()):
            self.sink.note(note)

    def ask(self) -> str:
        """What Ctrl-C means: "cancel" the run, "stop" watching, or "watch" on."""
        if self.cancelled:
            return "stop"  # a second Ctrl-C while the cancelled tree winds down
        if not self.interactive:
            return "cancel" if self.local() else "stop"
        self.sink.pause()
        previous = signal.signal(signal.SIGINT, signal.default_int_handler)
        try:
            return self.prompt()
        except (KeyboardInterrupt, EOFError):
            return "cancel" if self.local() else "stop"
        finally:
            signal.signal(signal.SIGINT, previous)
            self.sink.resume()

    def prompt(self) -> str:
        run_id = self.scope.pk
        if self.local():
            stop = Confirm.ask(
                f"The agents of research {run_id} run in this process: stopping cancels it. Stop?",
                console=self.console,
                default=False,
            )
            return "cancel" if stop else "watch"
        return Prompt.ask(
            f"Cancel research {run_id}, or stop watching it (it goes on)?",
            console=self.console,
            choices=["cancel", "stop", "watch"],
            default="stop",
        )
