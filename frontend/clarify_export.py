"""The clarify step in a research's exports (Markdown, PDF, DOCX; JSON has the run's
`clarification` as the API does): what the lead asked before it started, and the analyst's
answers, which were part of its task. Worded once here for every format."""

from dataclasses import dataclass

from research.markdown import literal
from research.models import Run

HEADING = "Questions before it started"


@dataclass(frozen=True)
class Asked:
    intro: str
    pairs: list[tuple[str, str]]  # each question, with its answer in words


def asked(run: Run) -> Asked | None:
    """None when the lead asked nothing, or its questions still wait (no answer to show)."""
    clarification = run.clarification
    if not clarification or clarification.get("answers") is None:
        return None
    questions = clarification["questions"]
    if clarification.get("skipped"):
        return Asked(
            "The lead asked these before it started; the analyst skipped them, so it worked "
            "from the topic as written.",
            [(question, "(skipped)") for question in questions],
        )
    answers = clarification["answers"] + [""] * len(questions)
    return Asked(
        "The lead asked these before it started; the analyst's answers were part of its task.",
        [(question, answers[i] or "(not answered)") for i, question in enumerate(questions)],
    )


def markdown_section(run: Run) -> str:
    shown = asked(run)
    if shown is None:
        return ""
    # The lead's questions and the analyst's answers as they wrote them: "<b>" stays text.
    lines = [
        f"{number}. **{literal(question)}** {literal(answer)}"
        for number, (question, answer) in enumerate(shown.pairs, start=1)
    ]
    return f"## {HEADING}\n\n{shown.intro}\n\n" + "\n".join(lines)
