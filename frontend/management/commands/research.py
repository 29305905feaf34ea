"""`manage.py research ...`: start, list, show, follow, cancel and export researches; read
and approve a research's plan; answer the questions it asks first; send a note to an agent.

The same owner scoping and validation as the REST API: every read goes through
research.selectors, every write through research.services, as one user (see --user).
Output is rich on a terminal and plain text otherwise, so scripts can parse it.
"""

import argparse
import os
import sys
from collections.abc import Callable

from django.contrib.auth.models import AbstractBaseUser
from django.core.management.base import BaseCommand, CommandError, CommandParser
from rich.console import Console

from frontend.exports import FORMATS, ExportError, export_run
from frontend.library import status_label
from frontend.terminal import render
from frontend.terminal.clarify import ANSWER_HELP, add_answer_arguments, answer_lines
from frontend.terminal.export import export_json, output_path, write_output
from frontend.terminal.plan import plan_lines
from frontend.terminal.runner import LOCAL_STOPPED, TreeRunner
from frontend.terminal.tree import TreeModel
from frontend.terminal.users import USER_HELP, resolve_user
from frontend.terminal.watch import (
    DONE,
    FAILED,
    HIGHLIGHTS,
    INTERRUPTED,
    PlainSink,
    RichSink,
    Watch,
    sigint_flag,
)
from research import selectors, services
from research.errors import InvalidInput, ResearchError
from research.models import Run, Status
from research.services import CANCELLED_BY_USER

# The command-line spelling of a service's input field, for error messages.
OPTION_OF_FIELD = {
    "topic": "topic",
    "max_steps": "--max-steps",
    "model": "--model",
    "dataset": "--dataset",
    "items": "--item",
    "answers": "TEXT",
    "text": "text",
    "run": "id",
    "status": "id",
}
EXIT_HELP = (
    "Exit status: 1 when the command is refused (with its reason on stderr), else 0; a command "
    "that follows a research to its end (start --wait, tail) exits 0 when it is done, 1 when "
    "it ended otherwise (cancelled, failed, out of time), 130 when interrupted."
)


class Command(BaseCommand):
    help = (
        "Start, watch and export researches. Output is rich on a terminal and plain "
        "tab-separated text otherwise. " + EXIT_HELP
    )

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")

        start = self._action(actions, "start", "start a research (and watch it)")
        start.add_argument("topic", help="what to research")
        start.add_argument("--model", help="the model (default: RESEARCH_MODEL)")
        start.add_argument("--max-steps", type=int, help="the step budget of the agent")
        start.add_argument("--dataset", type=int, help="the id of a dataset to query")
        start.add_argument(
            "--review-plan",
            action="store_true",
            help="pause after the lead's first plan until you approve it (research approve)",
        )
        clarify = "let the lead first ask you up to three questions (research answer)"
        start.add_argument("--clarify", action="store_true", help=clarify)
        start.add_argument(
            "--follows",
            type=int,
            metavar="ID",
            help="follow up this done research: start from its report, plan and sources",
        )
        start.add_argument(
            "--callback-url",
            default="",
            help="an https URL that gets a signed POST when the research ends",
        )
        start.add_argument(
            "--wait",
            action=argparse.BooleanOptionalAction,
            default=None,
            help="watch the tree until it ends (default: on a terminal). When no agent "
            "process is up and RESEARCH_AGENTS_IN_WEB is true, the agents run in this "
            "command, and stopping it cancels the research. Without --wait, prints the id.",
        )

        listing = self._action(actions, "list", "list researches (roots unless --parent)")
        listing.add_argument("--status", choices=Status.values)
        listing.add_argument("--parent", type=int, help="list the sub-agents of this run")
        listing.add_argument("--all", action="store_true", help="include sub-agents")
        listing.add_argument("--starred", action="store_true", help="only the starred researches")
        listing.add_argument(
            "--limit", type=int, default=50, help="at most this many, newest first (50)"
        )
        listing.add_argument(
            "--before", type=int, metavar="ID", help="the runs listed after this one (next page)"
        )

        show = self._action(actions, "show", "a run, its sub-agents, usage and report")
        show.add_argument("id", type=int)

        tail = self._action(actions, "tail", "follow a tree's events until it ends")
        tail.add_argument("id", type=int)
        tail.add_argument("--after", type=int, default=0, help="skip events up to this seq")

        star = self._action(actions, "star", "star a research in the library (--off: unstar)")
        star.add_argument("id", type=int)
        star.add_argument("--off", action="store_true", help="take the star off")

        cancel = self._action(actions, "cancel", "cancel a run and its sub-agents")
        cancel.add_argument("id", type=int)

        resume = self._action(actions, "resume", "resume an interrupted research")
        resume.add_argument("id", type=int)

        plan = self._action(actions, "plan", "a research's plan: items, status, history")
        plan.add_argument("id", type=int)

        approve = self._action(actions, "approve", "approve the plan of a paused research")
        approve.add_argument("id", type=int)
        approve.add_argument(
            "--item",
            action="append",
            dest="items",
            metavar="TEXT",
            help="the plan as you edit it, one --item per item, in order (default: as it is)",
        )

        add_answer_arguments(self._action(actions, "answer", ANSWER_HELP))

        note = self._action(actions, "note", "send a note to a working agent")
        note.add_argument("id", type=int, help="the research (its lead) or a sub-agent")
        note.add_argument("text", help="the note; it reads it at its next step")

        export = self._action(actions, "export", "the report (md) or the whole tree (json)")
        export.add_argument("id", type=int)
        export.add_argument("--format", choices=FORMATS, default="md")
        export.add_argument("--output", "-o", help="write to this file (needed for pdf, docx)")
        export.add_argument("--events", action="store_true", help="json: add the events")

    @staticmethod
    def _action(actions, name: str, help: str) -> CommandParser:
        parser = actions.add_parser(name, help=help, description=f"{help}. {EXIT_HELP}")
        parser.add_argument("--user", help=USER_HELP)
        return parser

    def handle(self, *args, action: str, **options) -> None:
        handler: Callable[[AbstractBaseUser, dict], None] = getattr(self, f"do_{action}")
        self.rich = self.stdout.isatty()
        # Rich writes partial lines: it gets the raw stream, not Django's OutputWrapper
        # (which ends every write with a newline).
        self.console = Console(file=self.stdout._out) if self.rich else None
        user = resolve_user(options.get("user"))
        try:
            handler(user, options)
        except InvalidInput as error:
            option = OPTION_OF_FIELD.get(error.field or "", error.field)
            raise CommandError(f"invalid {option}: {error.message}") from None
        except ResearchError as error:
            raise CommandError(error.message) from None
        except BrokenPipeError:
            # The reader left (`research tail 5 | head`): stop quietly, as Unix tools do.
            # Python's own flush of stdout at exit would fail again: point it at /dev/null.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            raise SystemExit(1) from None

    def write(self, line: str) -> None:
        # Text stored before control characters were stripped prints as escapes.
        self.stdout.write(render.terminal_text(line))

    # --- actions ---------------------------------------------------------------------------

    def do_start(self, user: AbstractBaseUser, options: dict) -> None:
        wait = self.rich if options["wait"] is None else options["wait"]
        if not wait:
            run = self.start_run(user, options)
            if self.rich:
                self.console.print(f"Started research {run.pk}. Follow it: research tail {run.pk}")
            else:
                self.write(str(run.pk))
            return
        # Ctrl-C is the watch's from before the research is stored, not from when the
        # watch begins: one pressed in between ended the command with a traceback, and
        # left the research queued or failed as "command stopped" instead of cancelled.
        with sigint_flag() as interrupt:
            run = self.start_run(user, options)
            runner = TreeRunner(run, owner=user)
            status = None
            try:
                note = runner.begin()
                status = self.watch(
                    run,
                    types=HIGHLIGHTS,
                    note=note,
                    local=lambda: runner.local,
                    on_idle=runner.check,
                    interrupt=interrupt,
                )
            finally:
                # With its agents here, an interrupted watch is a cancelled run (Watch.ask).
                reason = CANCELLED_BY_USER if status == INTERRUPTED else LOCAL_STOPPED
                runner.shutdown(reason=reason)
        run.refresh_from_db()
        self.summary(run)
        self.exit_with(run, status)

    @staticmethod
    def start_run(user: AbstractBaseUser, options: dict) -> Run:
        # The operator's own command on the machine: never bound by the users' start rate.
        return services.run_start(
            owner=user,
            topic=options["topic"],
            max_steps=options["max_steps"],
            model=options["model"],
            dataset_id=options["dataset"],
            review_plan=options["review_plan"],
            clarify=options["clarify"],
            callback_url=options["callback_url"],
            follows_id=options["follows"],
            throttle=False,
        )

    def do_list(self, user: AbstractBaseUser, options: dict) -> None:
        parent_id = options["parent"]
        if parent_id is not None:
            selectors.run_get(owner=user, run_id=parent_id)  # another user's: not found
        if options["limit"] < 1:
            raise CommandError("--limit must be 1 or more.")
        runs = selectors.run_list(
            owner=user,
            parent_id=parent_id,
            status=options["status"],
            roots_only=parent_id is None and not options["all"],
            starred=True if options["starred"] else None,
        )
        if options["before"] is not None:
            after = selectors.run_get(owner=user, run_id=options["before"])
            runs = selectors.runs_older_than(runs, run=after)
        page = render.printable_runs(list(runs[: options["limit"] + 1]))
        more, page = len(page) > options["limit"], page[: options["limit"]]
        if self.rich:
            render.rich_list(page, self.console)
        else:
            render.plain_list(page, self.write)
        if more:
            # On stderr: the listing on stdout stays one table a script can read.
            same = "".join(
                f" --{name} {options[name]}" for name in ("status", "parent") if options[name]
            ) + "".join(f" --{flag}" for flag in ("all", "starred") if options[flag])
            if options["limit"] != 50:
                same += f" --limit {options['limit']}"
            self.stderr.write(
                f"more: manage.py research list --user {user.get_username()}{same} "
                f"--before {page[-1].pk}"
            )

    def do_show(self, user: AbstractBaseUser, options: dict) -> None:
        run = selectors.run_get(owner=user, run_id=options["id"])
        tree, usage = selectors.subtree_runs(run=run), selectors.subtree_usage_by_model(run=run)
        run, tree = render.printable_runs([run])[0], render.printable_runs(list(tree))
        if self.rich:
            render.rich_show(run, tree, usage, self.console)
        else:
            render.plain_show(run, tree, usage, self.write)

    def do_tail(self, user: AbstractBaseUser, options: dict) -> None:
        run = selectors.run_get(owner=user, run_id=options["id"])
        status = self.watch(run, types=None, after=options["after"])
        run.refresh_from_db()
        self.exit_with(run, status)

    def do_star(self, user: AbstractBaseUser, options: dict) -> None:
        run = selectors.run_get(owner=user, run_id=options["id"])
        run = services.run_star(run=run, starred=not options["off"])
        self.write(f"research {run.pk}: {'starred' if run.starred else 'star taken off'}.")

    def do_cancel(self, user: AbstractBaseUser, options: dict) -> None:
        """The API's and MCP's cancel: one that has already ended is refused (exit 1)."""
        run = selectors.run_get(owner=user, run_id=options["id"])
        services.run_cancel_asked(run=run)
        self.write(f"research {run.pk}: cancel requested; its agents stop within a second.")

    def do_resume(self, user: AbstractBaseUser, options: dict) -> None:
        run = selectors.run_get(owner=user, run_id=options["id"])
        resume = services.research_resume(run=run)
        self.write(
            f"research {run.pk} resumed: {len(resume.run_ids)} agents go on from their last "
            f"completed step; a worker takes it up (follow it: research tail {run.pk})."
        )

    def do_plan(self, user: AbstractBaseUser, options: dict) -> None:
        for line in plan_lines(selectors.run_get(owner=user, run_id=options["id"])):
            self.write(line)

    def do_approve(self, user: AbstractBaseUser, options: dict) -> None:
        run = selectors.run_get(owner=user, run_id=options["id"])
        plan = services.plan_approve(run=run, items=options["items"])
        self.write(
            f"research {run.pk}: plan version {plan.version} approved; the research resumes."
        )

    def do_answer(self, user: AbstractBaseUser, options: dict) -> None:
        for line in answer_lines(user, options):
            self.write(line)

    def do_note(self, user: AbstractBaseUser, options: dict) -> None:
        run = selectors.run_get(owner=user, run_id=options["id"])
        note = services.note_send(run=run, author_id=user.pk, text=options["text"])
        who = f'"{run.name}"' if run.name else "the lead agent"
        self.write(
            f"note {note.pk} sent to {who} of research {run.root_id}; it reads it at its next step."
        )

    def do_export(self, user: AbstractBaseUser, options: dict) -> None:
        run = selectors.run_get(owner=user, run_id=options["id"])
        if (binary := options["format"]) in ("pdf", "docx") and not options["output"]:
            raise CommandError(
                f"a {binary.upper()} is written to a file: add --output research.{binary}."
            )
        output = options["output"] and output_path(options["output"], options["format"])
        if options["format"] == "json" and options["events"]:
            content = export_json(run, events=True).encode()
        else:
            try:
                content = export_run(run, options["format"]).content
            except ExportError as error:
                raise CommandError(error.message) from None
        if output:
            write_output(output, content)
            self.write(f"research {run.pk}: {options['format']} written to {options['output']}.")
            return
        text = content.decode().removesuffix("\n")
        # Markdown is text for the terminal; JSON escapes its control characters itself.
        self.stdout.write(render.terminal_text(text) if options["format"] == "md" else text)

    # --- watching ----------------------------------------------------------------------------

    def watch(self, run: Run, *, types, after: int = 0, note: str | None = None, **hooks) -> int:
        tree = TreeModel(run, selectors.subtree_runs(run=run))
        if self.rich:
            sink = RichSink(self.console, tree, types=types)
        else:
            sink = PlainSink(self.write, note=self.stderr.write, types=types)
        sink.note(render.watch_header(run))
        if note:
            sink.note(note)
        watch = Watch(
            scope=run,
            sink=sink,
            tree=tree,
            after=after,
            interactive=self.rich and self.stdin_is_terminal(),
            console=self.console,
            **hooks,
        )
        return watch.run()

    @staticmethod
    def stdin_is_terminal() -> bool:
        return sys.stdin is not None and sys.stdin.isatty()

    def summary(self, run: Run) -> None:
        if self.rich:
            render.rich_report(run, self.console)
        else:
            render.plain_summary(run, selectors.subtree_runs(run=run), self.write)

    def exit_with(self, run: Run, status: int) -> None:
        """The exit status of a watch: 0 done, 1 failed, 130 interrupted (see EXIT_HELP)."""
        if status == DONE:
            return
        if status == FAILED:
            # "research 4 cancelled: cancelled by the user", "research 4 failed: llm: ..."
            raise CommandError(
                f"research {run.pk} {status_label(run)}: {run.error}", returncode=FAILED
            )
        if run.is_active:
            raise CommandError(
                f"stopped watching research {run.pk}; it goes on (research tail {run.pk}).",
                returncode=status,
            )
        raise CommandError(
            f"stopped watching research {run.pk}; it has ended ({status_label(run)}).",
            returncode=status,
        )
