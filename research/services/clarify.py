"""Clarify before starting (issue 27): a root started with `clarify` lets its lead ask the
analyst up to three short questions before it researches anything (open_deep_research's
`clarify_with_user`). Asking pauses the root as a plan review does (research.services.plans:
paused, no worker, no thread, "waiting for you"); answering or skipping queues it again, and
the answers join the root's task (agents.loop.instructions), so the whole tree works from them.

`clarification` on the run is null until the lead asks, then
`{"questions": [...], "answers": null | [...], "skipped": bool}`.
"""

from django.db import transaction

from research.clean import strip_controls, visible
from research.errors import Conflict, InvalidInput
from research.events import RunClarify, publish, tree_lock
from research.models import Run, State, Status
from research.services.plans import plan_pause, root_resume
from research.services.texts import validate_texts
from research.standing import said

MAX_QUESTIONS = 3
QUESTION_MAX_CHARS = 300
ANSWER_MAX_CHARS = 2000
CLARIFY_DETAIL = "waiting for the analyst to answer its questions"
ANSWERED_DETAIL = "questions answered"
SKIPPED_DETAIL = "questions skipped"
# Where a root's task lists the answers (the demo model reads its task from this mark).
ANSWERS_HEAD = "\n\nBefore you started, you asked the analyst and were answered"


def validate_questions(questions: object, *, field: str = "questions") -> list[str]:
    return validate_texts(
        questions,
        field=field,
        noun="question",
        most=MAX_QUESTIONS,
        max_chars=QUESTION_MAX_CHARS,
        count_text="ask 1 to {most} questions, not {count}.",
    )


def validate_answers(answers: object, *, asked: int) -> list[str]:
    if not isinstance(answers, list) or not all(isinstance(a, str) for a in answers):
        raise InvalidInput("answers must be a list of strings, one per question.", field="answers")
    if len(answers) > asked:
        raise InvalidInput(
            f"the lead asked {asked} question{'s' if asked != 1 else ''}; "
            f"{len(answers)} answers is too many.",
            field="answers",
        )
    cleaned = [strip_controls(answer).strip() for answer in answers]
    cleaned = [answer if visible(answer) else "" for answer in cleaned]  # invisible: none
    cleaned += [""] * (asked - len(cleaned))
    for number, answer in enumerate(cleaned, start=1):
        if len(answer) > ANSWER_MAX_CHARS:
            raise InvalidInput(
                f"answer {number} is {len(answer)} characters; the limit is {ANSWER_MAX_CHARS}.",
                field="answers",
            )
    if not any(cleaned):
        raise InvalidInput(
            "every answer is empty: answer at least one question, or skip them to start "
            "without answers.",
            field="answers",
        )
    return cleaned


LATE_QUESTIONS = (
    "clarifying questions come before the research, and you have started it: go on with the "
    "topic as it is"
)


@transaction.atomic
def clarify_ask(*, root_id: int, questions: object) -> bool:
    """Store the lead's questions and pause the root for the analyst's answers. False when it
    cannot pause (it ended, a cancel came first, or it asked already): the caller goes on.
    Refused once the lead is past its first step: its steps are read here, in the transaction
    that waits for its records (agents.loop.records.Records.writes_after)."""
    tree_lock(root_id=root_id)
    if Run.objects.filter(pk=root_id, steps__gt=1).exists():
        raise InvalidInput(LATE_QUESTIONS)
    questions = validate_questions(questions)
    stored = Run.objects.filter(
        pk=root_id,
        clarify=True,
        clarification__isnull=True,
        status=Status.WORKING,
        cancel_requested=False,
    ).update(clarification={"questions": questions, "answers": None, "skipped": False})
    if not stored:
        return False
    publish(
        root_id=root_id,
        run_id=root_id,
        payload=RunClarify(questions=questions, answers=None, skipped=False),
    )
    return plan_pause(root_id=root_id, state=State.CLARIFYING, detail=CLARIFY_DETAIL)


@transaction.atomic
def clarify_answer(*, run: Run, answers: object = None, skip: bool = False) -> dict:
    """The analyst's answers to the lead's questions (or a skip): stored, shown, and the root
    queued again to start with them in its task. Returns the run's `clarification`."""
    tree_lock(root_id=run.root_id)
    run.refresh_from_db(fields=["status", "state", "clarification", "error"])
    if not run.is_root:
        raise Conflict(
            f"run {run.pk} is a sub-agent: only its research (run {run.root_id}) "
            "asks the analyst questions."
        )
    if run.status != Status.PAUSED or run.state != State.CLARIFYING:
        raise Conflict(
            f"research {run.pk} is not waiting for answers to questions: it {said(run)}."
        )
    if skip and answers:
        raise InvalidInput(
            "answers and skip go apart: send the answers, or skip (true) to start without them.",
            field="skip",
        )
    questions = run.clarification["questions"]
    cleaned = [] if skip else validate_answers(answers, asked=len(questions))
    clarification = {"questions": questions, "answers": cleaned, "skipped": bool(skip)}
    Run.objects.filter(pk=run.pk).update(clarification=clarification)
    run.clarification = clarification
    publish(
        root_id=run.pk,
        run_id=run.pk,
        payload=RunClarify(questions=questions, answers=cleaned, skipped=bool(skip)),
    )
    root_resume(run=run, detail=SKIPPED_DETAIL if skip else ANSWERED_DETAIL)
    return clarification


def answered_pairs(clarification: dict | None) -> list[tuple[str, str]]:
    """The questions the analyst answered, with the answers: what the task, the page and the
    exports show ([] when nothing was asked, the questions were skipped or wait)."""
    if not clarification or not clarification.get("answers"):
        return []
    pairs = zip(clarification["questions"], clarification["answers"], strict=False)
    return [(question, answer) for question, answer in pairs if answer]


def clarified_task(*, topic: str, clarification: dict | None) -> str:
    """The root's task: its topic and, when the analyst answered the lead's questions, them."""
    pairs = answered_pairs(clarification)
    if not pairs:
        return topic
    lines = "\n".join(f"- {question}\n  Answer: {answer}" for question, answer in pairs)
    return f"{topic}{ANSWERS_HEAD} (work from these answers):\n{lines}"
