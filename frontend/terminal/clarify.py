"""`research answer ID [TEXT ...] [--skip]`: answer the questions a research's lead asked
before it started, or skip them; without answers, print the questions (each with its answer
once given) and how to answer them while it waits."""

from django.contrib.auth.models import AbstractBaseUser
from django.core.management.base import CommandError, CommandParser

from research import selectors, services
from research.models import Run

ANSWER_HELP = "answer the questions a research asks first"


def add_answer_arguments(parser: CommandParser) -> None:
    parser.add_argument("id", type=int)
    parser.add_argument(
        "answers",
        nargs="*",
        metavar="TEXT",
        help="one answer per question, in order ('' leaves one blank); none: print them",
    )
    parser.add_argument("--skip", action="store_true", help="start without answering")


def answer_lines(user: AbstractBaseUser, options: dict) -> list[str]:
    """Answer or skip (the service's refusals go up to the command), or list the questions."""
    run = selectors.run_get(owner=user, run_id=options["id"])
    if options["answers"] or options["skip"]:
        services.clarify_answer(run=run, answers=options["answers"], skip=options["skip"])
        done = "skipped" if options["skip"] else "answered"
        return [f"research {run.pk}: questions {done}; the research starts."]
    return question_lines(run)


def question_lines(run: Run) -> list[str]:
    """The questions and their answers; refused (exit 1) for a run that asked none, as the
    API refuses answers to it: a script reads the status, not the words."""
    asked = run.clarification or {"questions": [], "answers": None}
    if not run.is_root:
        raise CommandError(
            f"run {run.pk} is a sub-agent: it asked no questions (its research, "
            f"{run.root_id}, asks them)."
        )
    if not asked["questions"]:
        yet = " yet" if run.may_clarify and run.is_active else ""
        raise CommandError(f"research {run.pk} asked no questions{yet}.")
    answers = asked["answers"] or []
    lines = [
        f"{number}\t{question}" + (f"\t{answers[number - 1]}" if number <= len(answers) else "")
        for number, question in enumerate(asked["questions"], start=1)
    ]
    if asked["answers"] is None:
        lines.append(f"answer them: manage.py research answer {run.pk} TEXT ... (or --skip)")
    return [line.rstrip("\t") for line in lines]
